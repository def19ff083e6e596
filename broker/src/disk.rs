//! Blocking storage work off the async workers. An append, a read or a
//! truncation is a `write`, `pread` or `fsync` that a slow or failing disk
//! can stall for seconds; on an async worker that stall would also stop
//! every other task the worker runs: other clients' requests, the
//! controller's heartbeats, Raft.
//!
//! [`run`] does the work on the calling thread but first hands the
//! worker's other tasks to another thread (`block_in_place`), so nothing
//! waits behind it and the request's bytes stay in this core's cache. (A
//! hand-off to the blocking pool instead, `spawn_blocking`, cost 17% of
//! 1 KiB acks=all produce throughput: BENCHMARKS.md.) On a single-threaded
//! runtime (unit tests) the work just runs.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs blocking storage `work` without holding up the async worker's
/// other tasks.
pub fn run<R>(work: impl FnOnce() -> R) -> R {
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

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

/// Waits for the acknowledgement of an acks=all append (the DelayedProduce
/// of one partition, `Partition::wait_for_ack`), first fsyncing the leader's
/// log when the topic's acknowledgements count what is on disk
/// (`strand.acks.durable`, local-durable): off the async workers, and
/// once for every append it covers.
pub async fn acknowledged(
    partition: &strand_partition::Partition,
    outcome: &strand_partition::AppendOutcome,
    deadline: tokio::time::Instant,
) -> Result<(), strand_protocol::ErrorCode> {
    if partition.ack_needs_flush(outcome.required_offset) {
        run(|| partition.flush_to(outcome.required_offset)).map_err(|e| e.code)?;
    }
    partition.wait_for_ack(outcome, deadline).await
}

//! Partition replication for Strand: the pure rules of Kafka 3.7's produce
//! path (acks, min ISR, high watermark, ISR shrink/expand, DelayedProduce and
//! DelayedFetch completion, the ack decision) in [`rules`], and a small
//! wake-up primitive for purgatory in [`watch`].
//!
//! The rules are pure functions of (state, observation) -> decision; the I/O
//! parts (leader/follower state, fetchers, AlterPartition) build on them.
//!
//! Success points are separate facts: an append, an HW advance and an
//! acknowledgement are different promises. An error or timeout after append
//! does not prove the records are absent; the producer retries and the
//! idempotent-producer state (`strand-txn`) deduplicates.

pub mod rules;
pub mod watch;

pub use rules::*;
pub use watch::{LogProgress, PartitionWatch};

//! Partition replication for Strand: the pure rules of Kafka 3.7's produce
//! path (acks, min ISR, high watermark, ISR shrink/expand, DelayedProduce and
//! DelayedFetch completion, the ack decision) in [`rules`]; one partition's
//! state on its leader (follower progress, ISR changes, HW), driven by explicit
//! observations, in [`leader`]. Purgatory itself (waiting on a partition's offsets) is
//! the broker's.
//!
//! The rules are pure functions of (state, observation) -> decision, and the
//! leader state applies them without I/O; the I/O parts (follower state,
//! fetchers, AlterPartition, purgatory) build on them.
//!
//! Success points are separate facts: an append, an HW advance and an
//! acknowledgement are different promises. An error or timeout after append
//! does not prove the records are absent; the producer retries and the
//! idempotent-producer state (`strand-txn`) deduplicates.
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod ack;
pub mod leader;
pub mod lease;
pub mod rules;

pub use leader::{
    AlterOutcome, AlterPartitionResult, FetchOutcome, FollowerProgress, IsrChange, IsrProposal,
    LeaderConfig, LeaderState, MetadataOutcome, PartitionRegistration,
};
pub use rules::*;

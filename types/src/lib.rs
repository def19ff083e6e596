//! The bottom of the dependency graph: what every crate shares and nothing
//! here depends on: the clock seam and the domain newtypes for offsets,
//! epochs and ids (integers only at the wire edge).

// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod clock;
pub mod ids;

pub use clock::{Clock, ManualClock, SystemClock};
pub use ids::{
    BrokerEpoch, BrokerId, LeaderEpoch, Offset, PartitionEpoch, ProducerEpoch, ProducerId,
    Sequence, TopicPartition,
};

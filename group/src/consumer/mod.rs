//! The consumer group protocol of KIP-848 (`group.protocol=consumer`), as
//! Kafka 4.x's group coordinator serves it, as pure state machines: the
//! broker computes each member's assignment ([`assignor`]), walks each
//! member towards it without ever handing out a partition another member
//! still owns ([`reconcile`]), and keeps the group's epochs and members
//! ([`ConsumerGroup`]). Every change is a [`Record`] for `__consumer_offsets`;
//! the group changes only by replaying its own records, so a coordinator
//! that loads them ends in the same state.
//!
//! Vocabulary (KIP-848's): the *group epoch* grows when membership or a
//! subscription changes; the *target assignment* is the assignor's answer
//! for an epoch (its *assignment epoch*); each member has a *member epoch*
//! and converges to its target through revocation first
//! (UNREVOKED_PARTITIONS), then partitions as their owners release them
//! (UNRELEASED_PARTITIONS), then STABLE.

pub mod assignor;
pub mod codec;
pub mod embedded;
mod group;
pub mod reconcile;
mod records;
mod types;

pub use group::{
    validate, ClassicJoin, ClassicJoinAnswer, ConsumerGroup, ConsumerGroupConfig,
    ConsumerGroupState, ConsumerMember, HeartbeatAnswer, HeartbeatError, HeartbeatRequest,
    MigrationPolicy, TopicImage,
};
pub use records::{ClassicMetadata, MemberMetadata, Record};
pub use types::{partition_count, Assignment, Epoch, MemberState, TopicId};

//! The consumer group coordinator's rules. [`consumer`]: KIP-848's consumer
//! protocol (ConsumerGroupHeartbeat). The rest: Kafka's classic group protocol
//! (JoinGroup / SyncGroup / Heartbeat / LeaveGroup, plus the membership checks
//! of OffsetCommit) as a pure state machine: one [`Group`] per group id, each
//! request an observation with the time passed in, each call returning what to
//! answer and what to persist. No I/O, no clocks, no threads.
//!
//! Semantics follow Kafka 3.7's `GroupCoordinator` / `GroupMetadata` /
//! `MemberMetadata` (the classic coordinator in Kafka's core module); the
//! places where this crate deviates are listed in [`group`]'s documentation.
//!
//! # Driving a group
//!
//! - **Creating.** The broker keeps a map group id -> [`Group`]. A group that
//!   does not exist is created ([`Group::new`], Empty) only by a JoinGroup with
//!   an empty member id, or by an OffsetCommit/TxnOffsetCommit allowed by
//!   [`offset_commit_without_group`]. Other requests for a missing group:
//!   JoinGroup with a member id, SyncGroup and Heartbeat -> `UNKNOWN_MEMBER_ID`;
//!   LeaveGroup -> `UNKNOWN_MEMBER_ID` for every member; DescribeGroups ->
//!   [`GroupDescription::dead`] (v6+: `GROUP_ID_NOT_FOUND`); DeleteGroups ->
//!   `GROUP_ID_NOT_FOUND`. Group id validation (`INVALID_GROUP_ID`) and
//!   coordinator checks (`NOT_COORDINATOR`, `COORDINATOR_LOAD_IN_PROGRESS`) are
//!   the broker's.
//! - **Answers.** [`Group::join`] and [`Group::sync`] return a [`Reply`]: the
//!   answer now, or `Held { member_id }`: the request waits and a later
//!   [`Outcome`] answers it under that member id. Every call that can change
//!   the group returns an [`Outcome`] with the held requests it completed.
//!   Deliver the outcome first (each entry answers the request held under that
//!   member id *before* this call), then hold this call's request if its reply
//!   is `Held`. A request is never answered in the outcome of the call that
//!   made it (that answer is the `Reply::Now`).
//! - **Persisting.** [`Outcome::persists`] asks to write the group's metadata
//!   (a [`GroupMetadataSnapshot`], key = group id) to `__consumer_offsets`, in
//!   order; report each write's result with [`Group::on_persisted`].
//! - **Time.** Call [`Group::tick`] when [`Group::next_deadline`] is reached
//!   (read it again after every call). Timers fire only in `tick`: a request
//!   that arrives after a deadline but before the tick is handled as if the
//!   timer had not fired yet (the same race exists between Kafka's purgatory
//!   reaper and its request handlers).
//! - **Loading.** After a coordinator failover, [`Group::from_snapshot`]
//!   rebuilds the group from the last persisted snapshot; [`Group::unload`]
//!   answers held requests with `NOT_COORDINATOR` when the broker resigns.
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod consumer;
pub mod group;
pub mod offsets;
pub mod records;
pub mod snapshot;
pub mod types;

pub use group::{offset_commit_without_group, Group, Member};
pub use snapshot::{GroupMetadataSnapshot, MemberSnapshot, SnapshotError};
pub use types::*;

//! A consumer group's records in `__consumer_offsets` (Kafka 4.x's record
//! types 3, 5, 6, 7 and 8), as values: the group writes them and changes
//! only by replaying them.

use bytes::Bytes;

use super::reconcile::MemberAssignment;
use super::types::{Assignment, Epoch};

/// A member's subscription and client (ConsumerGroupMemberMetadata).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MemberMetadata {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Sorted, without duplicates.
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// Set for a member that speaks the classic protocol (JoinGroup and
    /// SyncGroup) inside a consumer-protocol group.
    pub classic: Option<ClassicMetadata>,
}

/// A classic member's JoinGroup settings (ClassicMemberMetadata).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClassicMetadata {
    pub session_timeout_ms: i32,
    /// Its protocols in its order of preference: (name, metadata).
    pub protocols: Vec<(String, Bytes)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// ConsumerGroupMetadata (3): the group epoch and the hash of its
    /// subscribed topics' metadata.
    Metadata {
        epoch: Epoch,
        metadata_hash: u64,
    },
    /// ConsumerGroupMemberMetadata (5).
    MemberMetadata(Box<MemberMetadata>),
    MemberMetadataTombstone {
        member_id: String,
    },
    /// ConsumerGroupTargetAssignmentMember (7).
    TargetAssignmentMember {
        member_id: String,
        assignment: Assignment,
    },
    TargetAssignmentMemberTombstone {
        member_id: String,
    },
    /// ConsumerGroupTargetAssignmentMetadata (6).
    TargetAssignmentMetadata {
        epoch: Epoch,
    },
    /// ConsumerGroupCurrentMemberAssignment (8).
    CurrentMemberAssignment {
        member_id: String,
        assignment: MemberAssignment,
    },
    CurrentMemberAssignmentTombstone {
        member_id: String,
    },
    /// The target's end (ConsumerGroupTargetAssignmentMetadata's tombstone).
    TargetAssignmentMetadataTombstone,
    /// The group's end (ConsumerGroupMetadata's tombstone): written last
    /// when an empty group is deleted or becomes a classic group.
    MetadataTombstone,
}

//! Configuration, requests, responses and outcomes of the group state machine.
//! Requests carry the fields of the wire requests that the coordinator's rules
//! read; responses carry what the broker maps back to the wire.

use std::fmt;

use bytes::Bytes;
use strand_protocol::ErrorCode;

use crate::snapshot::GroupMetadataSnapshot;

/// Kafka's default `group.min.session.timeout.ms`.
pub const DEFAULT_MIN_SESSION_TIMEOUT_MS: i64 = 6_000;
/// Kafka's default `group.max.session.timeout.ms`.
pub const DEFAULT_MAX_SESSION_TIMEOUT_MS: i64 = 1_800_000;
/// Kafka's default `group.initial.rebalance.delay.ms`.
pub const DEFAULT_INITIAL_REBALANCE_DELAY_MS: i64 = 3_000;
/// Kafka's default `group.max.size` (`Int.MaxValue`).
pub const DEFAULT_MAX_SIZE: usize = i32::MAX as usize;
/// How long a new member's JoinGroup may wait in a rebalance before the member
/// is dropped (Kafka's `NewMemberJoinTimeoutMs`): a new member cannot heartbeat
/// and a muted socket hides its disconnect, so without it a client that gave
/// up and retried would leave a defunct member behind.
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 5 * 60 * 1000;
/// The generation of an error answer and of a simple (non-member) commit.
pub const NO_GENERATION: i32 = -1;
/// The member id of a client that has none yet.
pub const UNKNOWN_MEMBER_ID: &str = "";

/// Broker configuration the group rules depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i64,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i64,
    /// `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay_ms: i64,
    /// `group.max.size`.
    pub max_size: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: DEFAULT_MIN_SESSION_TIMEOUT_MS,
            max_session_timeout_ms: DEFAULT_MAX_SESSION_TIMEOUT_MS,
            initial_rebalance_delay_ms: DEFAULT_INITIAL_REBALANCE_DELAY_MS,
            max_size: DEFAULT_MAX_SIZE,
        }
    }
}

/// Kafka's `GroupState` for classic groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupState {
    /// No members (offsets may remain). Joins start a rebalance.
    Empty,
    /// Waiting for members to (re)join; heartbeats answer `REBALANCE_IN_PROGRESS`.
    PreparingRebalance,
    /// Joined; waiting for the leader's SyncGroup with the assignment.
    CompletingRebalance,
    /// Every member has the assignment of the current generation.
    Stable,
    /// Deleted or unloaded; answers `COORDINATOR_NOT_AVAILABLE`.
    Dead,
}

impl GroupState {
    /// The name Kafka reports in DescribeGroups / ListGroups.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One protocol a member supports (e.g. an assignor name) with its metadata
/// (for consumers: the serialized subscription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

impl Protocol {
    pub fn new(name: impl Into<String>, metadata: impl Into<Bytes>) -> Self {
        Protocol {
            name: name.into(),
            metadata: metadata.into(),
        }
    }
}

/// A JoinGroup request (all versions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// [`UNKNOWN_MEMBER_ID`] for a client without a member id.
    pub member_id: String,
    /// `group.instance.id` (v5+): a static member.
    pub group_instance_id: Option<String>,
    /// v4+: an unknown dynamic member first gets `MEMBER_ID_REQUIRED` with a
    /// new member id and must join again with it.
    pub require_known_member_id: bool,
    pub client_id: String,
    pub client_host: String,
    /// v0 has none: pass the session timeout, as Kafka does.
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    /// In the member's order of preference.
    pub protocols: Vec<Protocol>,
}

/// One member in the leader's JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// The member's metadata for the selected protocol.
    pub metadata: Bytes,
}

/// A JoinGroup answer. Errors carry [`NO_GENERATION`], no protocol, an empty
/// leader and no members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponse {
    pub error: Option<ErrorCode>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    /// Always false: static leaders are told about a restart by getting the
    /// old leader id instead (the JoinGroup < v9 behaviour, valid for v9 too).
    pub skip_assignment: bool,
    pub member_id: String,
    /// The leader gets every member; followers get none.
    pub members: Vec<JoinMember>,
}

impl JoinResponse {
    /// Kafka's `JoinGroupResult(memberId, error)`.
    pub fn error(member_id: impl Into<String>, error: ErrorCode) -> Self {
        JoinResponse {
            error: Some(error),
            generation_id: NO_GENERATION,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            skip_assignment: false,
            member_id: member_id.into(),
            members: Vec::new(),
        }
    }
}

/// A SyncGroup request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    /// v5+; checked when present.
    pub protocol_type: Option<String>,
    /// v5+; checked when present.
    pub protocol_name: Option<String>,
    /// The leader's assignment (ignored from followers). Members missing from
    /// it get an empty assignment; ids that are not members are ignored.
    pub assignments: Vec<(String, Bytes)>,
}

/// A SyncGroup answer. Errors carry no protocol and an empty assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResponse {
    pub error: Option<ErrorCode>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResponse {
    pub fn error(error: ErrorCode) -> Self {
        SyncResponse {
            error: Some(error),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// A Heartbeat request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
}

/// One member of a LeaveGroup request (v3+ batches them; v0-v2 is one member
/// id whose per-member error becomes the top-level error). An empty member id
/// with an instance id removes that static member (admin removal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

/// The answer to a JoinGroup or SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<T> {
    /// Answer now.
    Now(T),
    /// The request waits; a later [`Outcome`] answers it under `member_id`
    /// (which may be a member id this call generated).
    Held { member_id: String },
}

impl<T> Reply<T> {
    pub fn now(self) -> Option<T> {
        match self {
            Reply::Now(t) => Some(t),
            Reply::Held { .. } => None,
        }
    }
}

/// A write of the group's metadata to ask the log for; report its result with
/// [`crate::Group::on_persisted`] and `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistRequest {
    pub id: u64,
    pub snapshot: GroupMetadataSnapshot,
}

/// What a call completed: answers to requests held before the call, keyed by
/// the member id they were held under, and metadata writes to perform.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    pub joins: Vec<(String, JoinResponse)>,
    pub syncs: Vec<(String, SyncResponse)>,
    pub persists: Vec<PersistRequest>,
}

impl Outcome {
    pub fn is_empty(&self) -> bool {
        self.joins.is_empty() && self.syncs.is_empty() && self.persists.is_empty()
    }
}

/// One member in DescribeGroups. Metadata and assignment are empty unless the
/// group is Stable (as Kafka).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// DescribeGroups for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: GroupState,
    /// Empty if none.
    pub protocol_type: String,
    /// The selected protocol when Stable, else empty.
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

impl GroupDescription {
    /// What Kafka describes for a group it does not have (DescribeGroups < v6;
    /// v6+ answers `GROUP_ID_NOT_FOUND`).
    pub fn dead(group_id: impl Into<String>) -> Self {
        GroupDescription {
            group_id: group_id.into(),
            state: GroupState::Dead,
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        }
    }
}

/// ListGroups for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOverview {
    pub group_id: String,
    /// Empty if none.
    pub protocol_type: String,
    pub state: GroupState,
}

//! One consumer group on its coordinator (classic protocol). Pure and I/O-free:
//! every method is one observation (a request, a timer, the result of a
//! metadata write) with the time passed in, and returns what to answer and
//! what to write. The broker holds the waiting requests, performs the writes
//! and calls [`Group::tick`] at [`Group::next_deadline`].
//!
//! Semantics follow Kafka 3.7's classic `GroupCoordinator`:
//! - **States.** Empty -> PreparingRebalance (a member joins) ->
//!   CompletingRebalance (the join phase ends: a new generation, a protocol
//!   and a leader) -> Stable (the leader's assignment is written) ->
//!   PreparingRebalance again when a member joins, changes its metadata, the
//!   leader rejoins, a member leaves or fails. Only an Empty group can be
//!   deleted; deleted and unloaded groups are Dead.
//! - **Join phase.** Ends when every member has rejoined and no member id
//!   handed out with `MEMBER_ID_REQUIRED` is still pending, or when the
//!   rebalance timeout (the largest of the members') passes; dynamic members
//!   that did not rejoin are then removed, static members stay (KIP-345). A
//!   rebalance that starts from Empty waits `group.initial.rebalance.delay.ms`
//!   instead, extended by the same delay while new members keep arriving in
//!   generation 0, up to the rebalance timeout (Kafka's `InitialDelayedJoin`).
//! - **Sync phase.** Followers' SyncGroups wait for the leader's; the leader's
//!   assignment is written first ([`Outcome::persists`]) and only then handed
//!   out. Members that send no SyncGroup within the rebalance timeout are
//!   removed (Kafka's `DelayedSync`).
//! - **Liveness.** A member's session deadline restarts on heartbeats, offset
//!   commits, and whenever a held request of it is answered. A member waiting
//!   in a held JoinGroup or SyncGroup does not expire (it cannot heartbeat),
//!   except a member's first JoinGroup, which expires after
//!   [`NEW_MEMBER_JOIN_TIMEOUT_MS`]. Member ids handed out with
//!   `MEMBER_ID_REQUIRED` expire after the session timeout.
//! - **Static members** (`group.instance.id`). A known instance joining
//!   without a member id takes a new member id and fences the old one
//!   (`FENCED_INSTANCE_ID`). In Stable, if the selected protocol would not
//!   change, this costs no rebalance: the new member id is written, then the
//!   join is answered with the current generation and the *old* leader id (so
//!   a restarted leader does not compute a new assignment that a Stable group
//!   would ignore); its SyncGroup returns the assignment it had.
//!
//! Deviations from Kafka (all in corners where Kafka's behaviour is accidental):
//! - Members are kept in join order. A new leader (the old one left) is the
//!   first remaining member, and a protocol vote tie goes to the protocol voted
//!   first in join order; Kafka uses hash-map order for both.
//! - A held JoinGroup/SyncGroup superseded by a newer one from the same member
//!   is answered `REBALANCE_IN_PROGRESS`; Kafka drops it unanswered.
//! - A removed member's held SyncGroup (admin LeaveGroup by instance id) is
//!   answered `UNKNOWN_MEMBER_ID`; Kafka leaves it unanswered.
//! - A PreparingRebalance group that has lost its last member ends the join
//!   phase at once (next generation, Empty) even during the initial delay or
//!   with pending member ids; Kafka waits for its timer. So a group is Empty
//!   exactly when it has no members, between any two calls.
//! - If no member rejoined and only static members remain, the join phase is
//!   re-armed for at least 1 ms (a rebalance timeout of 0 would loop).
//! - A static member's new id replaces the old one in the set of members that
//!   owe a SyncGroup; Kafka keeps the stale id, which later forces a rebalance.
//! - Answering a held request always restarts the member's session; Kafka
//!   misses this after a static member's persisted rejoin.
//! - A failed write of a static member's new id restores the old id only
//!   while the new id's JoinGroup is still held; if a rebalance has answered
//!   it meanwhile, the new id is in use and stays (Kafka restores regardless).
//! - A member's assignment is cleared when a new generation starts (Kafka
//!   keeps the stale one, but reads it only when Stable).
//! - JoinGroup v9's `SkipAssignment` is never set (the pre-v9 answer, which
//!   v9 clients handle).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strand_protocol::ErrorCode;

use crate::snapshot::{GroupMetadataSnapshot, MemberSnapshot, SnapshotError};
use crate::types::*;

/// One member of a group (Kafka's `MemberMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout_ms: i32,
    session_timeout_ms: i32,
    /// In the member's order of preference.
    protocols: Vec<Protocol>,
    /// Set when the generation's assignment is handed out (or loaded).
    assignment: Option<Bytes>,
    session_deadline_ms: i64,
    /// Its first JoinGroup has not been answered yet.
    is_new: bool,
    /// Token of its held JoinGroup.
    join_waiter: Option<u64>,
    /// Token of its held SyncGroup.
    sync_waiter: Option<u64>,
}

impl Member {
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    pub fn group_instance_id(&self) -> Option<&str> {
        self.group_instance_id.as_deref()
    }

    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    pub fn client_host(&self) -> &str {
        &self.client_host
    }

    pub fn rebalance_timeout_ms(&self) -> i32 {
        self.rebalance_timeout_ms
    }

    pub fn session_timeout_ms(&self) -> i32 {
        self.session_timeout_ms
    }

    pub fn protocols(&self) -> &[Protocol] {
        &self.protocols
    }

    /// The assignment of the current generation, once handed out.
    pub fn assignment(&self) -> Option<&Bytes> {
        self.assignment.as_ref()
    }

    pub fn session_deadline_ms(&self) -> i64 {
        self.session_deadline_ms
    }

    pub fn is_awaiting_join(&self) -> bool {
        self.join_waiter.is_some()
    }

    pub fn is_awaiting_sync(&self) -> bool {
        self.sync_waiter.is_some()
    }

    /// Kafka `hasSatisfiedHeartbeat`, negated: a member in a held request
    /// cannot heartbeat and is not expected to, unless it is new.
    fn can_expire(&self) -> bool {
        self.is_new || (self.join_waiter.is_none() && self.sync_waiter.is_none())
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|p| p.name == protocol)
    }

    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    /// Same protocols, same metadata, same order.
    fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }

    fn restart_session(&mut self, now_ms: i64) {
        self.session_deadline_ms = now_ms + i64::from(self.session_timeout_ms);
    }
}

/// The timer of the join phase (Kafka's `DelayedJoin` / `InitialDelayedJoin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JoinTimer {
    /// A rebalance from Empty: never completes early; at the deadline, if new
    /// members arrived and `remaining_ms` is left, wait another delay.
    Initial {
        deadline_ms: i64,
        delay_ms: i64,
        remaining_ms: i64,
    },
    /// Completes when everyone has joined, or at the deadline.
    Normal { deadline_ms: i64 },
}

impl JoinTimer {
    fn deadline_ms(self) -> i64 {
        match self {
            JoinTimer::Initial { deadline_ms, .. } | JoinTimer::Normal { deadline_ms } => {
                deadline_ms
            }
        }
    }
}

/// A metadata write whose result changes the group.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PendingWrite {
    /// The leader's assignment for `generation_id` (SyncGroup).
    Assignment {
        generation_id: i32,
        assignment: BTreeMap<String, Bytes>,
    },
    /// A static member's new member id, written without a rebalance.
    StaticRejoin(StaticRejoin),
}

/// What to answer, or to undo, when a static member's new id is written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StaticRejoin {
    old_member_id: String,
    old_protocols: Vec<Protocol>,
    old_rebalance_timeout_ms: i32,
    old_session_timeout_ms: i32,
    leader_at_join: String,
    waiter: u64,
}

/// A timer that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Due {
    Pending(String),
    Session(String),
    Join,
    Sync,
}

/// Answers gathered during one call, tagged with the token of the held
/// request they answer, so the call's own request can be told apart.
#[derive(Default)]
struct Effects {
    joins: Vec<(u64, String, JoinResponse)>,
    syncs: Vec<(u64, String, SyncResponse)>,
    persists: Vec<PersistRequest>,
}

impl Effects {
    fn take_join(&mut self, token: u64) -> Option<JoinResponse> {
        let at = self.joins.iter().position(|(t, _, _)| *t == token)?;
        Some(self.joins.remove(at).2)
    }

    fn take_sync(&mut self, token: u64) -> Option<SyncResponse> {
        let at = self.syncs.iter().position(|(t, _, _)| *t == token)?;
        Some(self.syncs.remove(at).2)
    }

    fn into_outcome(self) -> Outcome {
        Outcome {
            joins: self.joins.into_iter().map(|(_, id, r)| (id, r)).collect(),
            syncs: self.syncs.into_iter().map(|(_, id, r)| (id, r)).collect(),
            persists: self.persists,
        }
    }
}

/// A reply before the call's own answer is looked up among the effects.
enum Internal<T> {
    Now(T),
    Held(u64, String),
}

/// An OffsetCommit for a group the coordinator does not have (Kafka
/// `handleCommitOffsets`): a simple commit (generation < 0) creates an Empty
/// group ([`Group::new`]) and is then checked with
/// [`Group::validate_offset_commit`]; anything else is from a generation that
/// no longer exists: `ILLEGAL_GENERATION`. (A TxnOffsetCommit always creates
/// the group and is checked with [`Group::validate_txn_offset_commit`].)
pub fn offset_commit_without_group(generation_id: i32) -> Result<(), ErrorCode> {
    if generation_id < 0 {
        Ok(())
    } else {
        Err(ErrorCode::IllegalGeneration)
    }
}

/// Kafka `storeGroup`: a failed metadata append becomes the error the waiting
/// members see.
fn persist_error(error: ErrorCode) -> ErrorCode {
    match error {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::RequestTimedOut => ErrorCode::RebalanceInProgress,
        ErrorCode::MessageTooLarge
        | ErrorCode::RecordListTooLarge
        | ErrorCode::InvalidFetchSize => ErrorCode::UnknownServerError,
        other => other,
    }
}

/// One consumer group (Kafka's `GroupMetadata` plus the coordinator's rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    group_id: String,
    config: GroupConfig,
    state: GroupState,
    state_timestamp_ms: i64,
    /// Set by the first member; kept while Empty.
    protocol_type: Option<String>,
    /// The selected protocol of the current generation (None when Empty).
    protocol_name: Option<String>,
    generation_id: i32,
    leader_id: Option<String>,
    /// In join order.
    members: Vec<Member>,
    /// Member ids handed out with `MEMBER_ID_REQUIRED` -> expiry.
    pending_members: BTreeMap<String, i64>,
    /// Members that owe a SyncGroup for the current generation.
    pending_sync: BTreeSet<String>,
    join_timer: Option<JoinTimer>,
    sync_deadline_ms: Option<i64>,
    /// A new member joined during a generation-0 initial delay.
    new_member_added: bool,
    pending_writes: BTreeMap<u64, PendingWrite>,
    next_token: u64,
}

impl Group {
    /// A new Empty group (generation 0).
    pub fn new(group_id: impl Into<String>, config: GroupConfig, now_ms: i64) -> Group {
        Group {
            group_id: group_id.into(),
            config,
            state: GroupState::Empty,
            state_timestamp_ms: now_ms,
            protocol_type: None,
            protocol_name: None,
            generation_id: 0,
            leader_id: None,
            members: Vec::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            join_timer: None,
            sync_deadline_ms: None,
            new_member_added: false,
            pending_writes: BTreeMap::new(),
            next_token: 1,
        }
    }

    /// The group as last persisted, loaded by a new coordinator: Stable with
    /// its members and their assignments (Empty without members); every member
    /// gets a fresh session, since the old coordinator's deadlines are lost. A
    /// group over `group.max.size` starts a rebalance at once, so that extra
    /// members are shed (Kafka `onGroupLoaded`).
    pub fn from_snapshot(
        group_id: impl Into<String>,
        snapshot: GroupMetadataSnapshot,
        config: GroupConfig,
        now_ms: i64,
    ) -> Result<Group, SnapshotError> {
        let mut group = Group::new(group_id, config, now_ms);
        group.generation_id = snapshot.generation_id;
        group.protocol_type = snapshot.protocol_type.filter(|t| !t.is_empty());
        group.state_timestamp_ms = snapshot.current_state_timestamp_ms.unwrap_or(now_ms);
        if snapshot.members.is_empty() {
            return Ok(group);
        }
        let protocol = snapshot
            .protocol_name
            .ok_or(SnapshotError::MembersWithoutProtocol)?;
        if group.protocol_type.is_none() {
            return Err(SnapshotError::MembersWithoutProtocolType);
        }
        let mut instances = BTreeSet::new();
        for m in snapshot.members {
            if group.member_index(&m.member_id).is_some() {
                return Err(SnapshotError::DuplicateMember(m.member_id));
            }
            if let Some(instance) = &m.group_instance_id {
                if !instances.insert(instance.clone()) {
                    return Err(SnapshotError::DuplicateInstance(instance.clone()));
                }
            }
            group.members.push(Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                protocols: vec![Protocol::new(protocol.clone(), m.subscription)],
                assignment: Some(m.assignment),
                session_deadline_ms: now_ms + i64::from(m.session_timeout_ms),
                is_new: false,
                join_waiter: None,
                sync_waiter: None,
            });
        }
        match snapshot.leader {
            Some(leader) if group.member_index(&leader).is_some() => group.leader_id = Some(leader),
            other => return Err(SnapshotError::LeaderNotMember(other)),
        }
        group.protocol_name = Some(protocol);
        group.state = GroupState::Stable;
        if group.members.len() > group.config.max_size {
            let mut fx = Effects::default();
            group.prepare_rebalance(now_ms, &mut fx);
            debug_assert!(fx.joins.is_empty() && fx.syncs.is_empty() && fx.persists.is_empty());
        }
        Ok(group)
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn state(&self) -> GroupState {
        self.state
    }

    /// When the group entered its current state.
    pub fn state_timestamp_ms(&self) -> i64 {
        self.state_timestamp_ms
    }

    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }

    pub fn leader(&self) -> Option<&str> {
        self.leader_id.as_deref()
    }

    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    /// The selected protocol of the current generation.
    pub fn protocol_name(&self) -> Option<&str> {
        self.protocol_name.as_deref()
    }

    /// In join order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn member(&self, member_id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.member_id == member_id)
    }

    /// Member ids handed out with `MEMBER_ID_REQUIRED` and not yet used.
    pub fn pending_member_ids(&self) -> impl Iterator<Item = &str> {
        self.pending_members.keys().map(String::as_str)
    }

    /// Members that owe a SyncGroup for the current generation.
    pub fn pending_sync_member_ids(&self) -> impl Iterator<Item = &str> {
        self.pending_sync.iter().map(String::as_str)
    }

    /// Metadata writes asked for and not yet reported.
    pub fn writes_in_flight(&self) -> usize {
        self.pending_writes.len()
    }

    pub fn config(&self) -> GroupConfig {
        self.config
    }

    /// A new configuration; takes effect at the next observation.
    pub fn set_config(&mut self, config: GroupConfig) {
        self.config = config;
    }

    /// When the caller must call [`Self::tick`]: the earliest of the join
    /// phase's timer, the sync phase's timer, and the session deadlines of
    /// members and pending member ids that can expire. None when Dead.
    pub fn next_deadline(&self) -> Option<i64> {
        self.timers().into_iter().map(|(at, _)| at).min()
    }

    /// JoinGroup (Kafka `handleJoinGroup`). `new_member_id` is called once if
    /// the request needs a new member id; Kafka builds it as
    /// `{group_instance_id or client_id}-{uuid}`, and it must be unique.
    pub fn join(
        &mut self,
        req: JoinRequest,
        new_member_id: impl FnOnce() -> String,
        now_ms: i64,
    ) -> (Reply<JoinResponse>, Outcome) {
        let mut fx = Effects::default();
        let reply = self.do_join(req, new_member_id, now_ms, &mut fx);
        // A join or a shed member may end the join phase.
        self.try_complete_join(now_ms, &mut fx);
        let reply = match reply {
            Internal::Now(r) => Reply::Now(r),
            Internal::Held(token, member_id) => match fx.take_join(token) {
                Some(r) => Reply::Now(r),
                None => Reply::Held { member_id },
            },
        };
        (reply, fx.into_outcome())
    }

    /// SyncGroup (Kafka `handleSyncGroup`). The leader's SyncGroup in
    /// CompletingRebalance returns a write of the assignment; every held
    /// SyncGroup is answered by [`Self::on_persisted`].
    pub fn sync(&mut self, req: SyncRequest, now_ms: i64) -> (Reply<SyncResponse>, Outcome) {
        let mut fx = Effects::default();
        let reply = match self.do_sync(req, now_ms, &mut fx) {
            Internal::Now(r) => Reply::Now(r),
            Internal::Held(token, member_id) => match fx.take_sync(token) {
                Some(r) => Reply::Now(r),
                None => Reply::Held { member_id },
            },
        };
        (reply, fx.into_outcome())
    }

    /// Heartbeat (Kafka `handleHeartbeat`): restarts the member's session;
    /// `REBALANCE_IN_PROGRESS` while PreparingRebalance tells it to rejoin.
    /// In CompletingRebalance a member of the new generation may already
    /// heartbeat (it got its JoinGroup answer): NONE.
    pub fn heartbeat(&mut self, req: &HeartbeatRequest, now_ms: i64) -> Result<(), ErrorCode> {
        if self.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        self.validate_current_member(&req.member_id, req.group_instance_id.as_deref())?;
        if req.generation_id != self.generation_id {
            return Err(ErrorCode::IllegalGeneration);
        }
        let i = self.member_index(&req.member_id).expect("validated member");
        match self.state {
            GroupState::Empty | GroupState::Dead => Err(ErrorCode::UnknownMemberId),
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.members[i].restart_session(now_ms);
                Ok(())
            }
            GroupState::PreparingRebalance => {
                self.members[i].restart_session(now_ms);
                Err(ErrorCode::RebalanceInProgress)
            }
        }
    }

    /// LeaveGroup (Kafka `handleLeaveGroup`): one result per member, in order;
    /// `Err` is the request-level error (Dead: `COORDINATOR_NOT_AVAILABLE`).
    /// A member that leaves triggers a rebalance, or ends one that waited for
    /// it; the last one leaves the group Empty.
    #[allow(clippy::type_complexity)]
    pub fn leave(
        &mut self,
        leaving: &[LeaveMember],
        now_ms: i64,
    ) -> (Result<Vec<Result<(), ErrorCode>>, ErrorCode>, Outcome) {
        let mut fx = Effects::default();
        if self.state == GroupState::Dead {
            return (Err(ErrorCode::CoordinatorNotAvailable), fx.into_outcome());
        }
        let mut results = Vec::with_capacity(leaving.len());
        for who in leaving {
            let result = if who.member_id.is_empty() {
                // Admin removal by group.instance.id.
                match who
                    .group_instance_id
                    .as_deref()
                    .and_then(|i| self.static_member_id(i))
                    .map(str::to_string)
                {
                    Some(member_id) => {
                        self.remove_member_and_update_group(&member_id, now_ms, &mut fx);
                        Ok(())
                    }
                    None => Err(ErrorCode::UnknownMemberId),
                }
            } else if self.pending_members.remove(&who.member_id).is_some() {
                self.try_complete_join(now_ms, &mut fx);
                Ok(())
            } else {
                self.validate_current_member(&who.member_id, who.group_instance_id.as_deref())
                    .map(|()| {
                        self.remove_member_and_update_group(&who.member_id, now_ms, &mut fx);
                    })
            };
            results.push(result);
        }
        (Ok(results), fx.into_outcome())
    }

    /// Fires the timers due at `now_ms`, earliest first: expired pending
    /// member ids and members (removed; a rebalance follows), the end of the
    /// join phase, the end of the sync phase.
    pub fn tick(&mut self, now_ms: i64) -> Outcome {
        let mut fx = Effects::default();
        while let Some(due) = self.due(now_ms) {
            match due {
                Due::Pending(member_id) => {
                    self.pending_members.remove(&member_id);
                    self.try_complete_join(now_ms, &mut fx);
                }
                Due::Session(member_id) => {
                    self.remove_member_and_update_group(&member_id, now_ms, &mut fx)
                }
                Due::Join => self.on_join_timer(now_ms, &mut fx),
                Due::Sync => self.on_sync_timer(now_ms, &mut fx),
            }
        }
        fx.into_outcome()
    }

    /// A group just made from a consumer-protocol group's classic members
    /// (the online downgrade): it starts a rebalance at once, so that its
    /// members join it as a classic group.
    pub fn rebalance_after_downgrade(&mut self, now_ms: i64) -> Outcome {
        let mut fx = Effects::default();
        self.prepare_rebalance(now_ms, &mut fx);
        fx.into_outcome()
    }

    /// The result of the metadata write `id` (an error is the log append's, as
    /// Kafka maps it: `NOT_ENOUGH_REPLICAS*` / `UNKNOWN_TOPIC_OR_PARTITION` ->
    /// `COORDINATOR_NOT_AVAILABLE`, `NOT_LEADER_OR_FOLLOWER` /
    /// `KAFKA_STORAGE_ERROR` -> `NOT_COORDINATOR`, `REQUEST_TIMED_OUT` ->
    /// `REBALANCE_IN_PROGRESS`, too-large -> `UNKNOWN_SERVER_ERROR`).
    ///
    /// The leader's assignment: if the group is still in that generation's
    /// CompletingRebalance, success hands every held SyncGroup its assignment
    /// and makes the group Stable; an error answers them all with the error,
    /// clears the assignments and starts a new rebalance (as Kafka: the
    /// members rejoin). A static member's new id: success answers its held
    /// JoinGroup; an error restores the old member id and answers the error
    /// with an empty member id (unless a rebalance already answered the join
    /// with the new id, which then stays). Writes of an Empty group have no
    /// follow-up.
    pub fn on_persisted(&mut self, id: u64, result: Result<(), ErrorCode>, now_ms: i64) -> Outcome {
        let mut fx = Effects::default();
        let Some(write) = self.pending_writes.remove(&id) else {
            return fx.into_outcome();
        };
        if self.state == GroupState::Dead {
            return fx.into_outcome();
        }
        let result = result.map_err(persist_error);
        match write {
            PendingWrite::Assignment {
                generation_id,
                assignment,
            } => {
                if self.state != GroupState::CompletingRebalance
                    || generation_id != self.generation_id
                {
                    return fx.into_outcome();
                }
                match result {
                    Ok(()) => {
                        for m in &mut self.members {
                            m.assignment =
                                Some(assignment.get(&m.member_id).cloned().unwrap_or_default());
                        }
                        self.propagate_assignment(now_ms, &mut fx);
                        self.transition(GroupState::Stable, now_ms);
                    }
                    Err(error) => {
                        self.reset_and_propagate_assignment_error(error, now_ms, &mut fx);
                        self.maybe_prepare_rebalance(now_ms, &mut fx);
                    }
                }
            }
            PendingWrite::StaticRejoin(s) => match result {
                Ok(()) => {
                    if let Some(i) = self
                        .members
                        .iter()
                        .position(|m| m.join_waiter == Some(s.waiter))
                    {
                        let member_id = self.members[i].member_id.clone();
                        let response = self.join_answer(&member_id, false, s.leader_at_join);
                        self.answer_join(i, response, now_ms, &mut fx);
                    }
                }
                Err(error) => {
                    // Undone only while the join is still held: once answered
                    // (a rebalance completed it), the new id is in use.
                    if let Some(i) = self
                        .members
                        .iter()
                        .position(|m| m.join_waiter == Some(s.waiter))
                    {
                        let m = &mut self.members[i];
                        m.protocols = s.old_protocols;
                        m.rebalance_timeout_ms = s.old_rebalance_timeout_ms;
                        m.session_timeout_ms = s.old_session_timeout_ms;
                        m.join_waiter = None;
                        let held_under = m.member_id.clone();
                        self.rename_member(i, &s.old_member_id);
                        self.members[i].restart_session(now_ms);
                        let response = JoinResponse {
                            error: Some(error),
                            ..self.join_answer(UNKNOWN_MEMBER_ID, false, s.leader_at_join)
                        };
                        fx.joins.push((s.waiter, held_under, response));
                        self.try_complete_join(now_ms, &mut fx);
                    }
                }
            },
        }
        fx.into_outcome()
    }

    /// The membership checks of OffsetCommit (Kafka `validateOffsetCommit` and
    /// `doCommitOffsets`). Ok: store the offsets.
    /// - Dead: `COORDINATOR_NOT_AVAILABLE`.
    /// - Generation < 0 on an Empty group: a simple commit, allowed.
    /// - Otherwise, with a generation >= 0, a member id or an instance id: the
    ///   member must be current (`FENCED_INSTANCE_ID`, `UNKNOWN_MEMBER_ID`) and
    ///   the generation the group's (`ILLEGAL_GENERATION`, also for generation
    ///   -1 from a member); without any of them (a simple commit) while the
    ///   group has members: `UNKNOWN_MEMBER_ID`.
    /// - Then CompletingRebalance: `REBALANCE_IN_PROGRESS` (the member has its
    ///   new generation but not its assignment). Stable and PreparingRebalance
    ///   (commits of the previous generation are still allowed while members
    ///   rejoin) restart the member's session.
    pub fn validate_offset_commit(
        &mut self,
        member_id: &str,
        generation_id: i32,
        group_instance_id: Option<&str>,
        now_ms: i64,
    ) -> Result<(), ErrorCode> {
        self.validate_commit(member_id, generation_id, group_instance_id, false)?;
        match self.state {
            GroupState::Empty => Ok(()),
            GroupState::Stable | GroupState::PreparingRebalance => {
                if let Some(i) = self.member_index(member_id) {
                    self.members[i].restart_session(now_ms);
                }
                Ok(())
            }
            GroupState::CompletingRebalance => Err(ErrorCode::RebalanceInProgress),
            GroupState::Dead => Err(ErrorCode::CoordinatorNotAvailable),
        }
    }

    /// The membership checks of TxnOffsetCommit: those of OffsetCommit, except
    /// that a commit without member id, instance id and generation is allowed
    /// whatever the members (older TxnOffsetCommit versions carry none), and
    /// no state check or session restart follows.
    pub fn validate_txn_offset_commit(
        &self,
        member_id: &str,
        generation_id: i32,
        group_instance_id: Option<&str>,
    ) -> Result<(), ErrorCode> {
        self.validate_commit(member_id, generation_id, group_instance_id, true)
    }

    /// DescribeGroups: metadata and assignments only when Stable (Kafka
    /// `GroupMetadata.summary`).
    pub fn describe(&self) -> GroupDescription {
        let stable_protocol = match (self.state, &self.protocol_name) {
            (GroupState::Stable, Some(p)) => Some(p.as_str()),
            _ => None,
        };
        GroupDescription {
            group_id: self.group_id.clone(),
            state: self.state,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: stable_protocol.unwrap_or_default().to_string(),
            members: self
                .members
                .iter()
                .map(|m| MemberDescription {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: stable_protocol
                        .map(|p| m.metadata_for(p))
                        .unwrap_or_default(),
                    assignment: if stable_protocol.is_some() {
                        m.assignment.clone().unwrap_or_default()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        }
    }

    /// ListGroups.
    pub fn overview(&self) -> GroupOverview {
        GroupOverview {
            group_id: self.group_id.clone(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            state: self.state,
        }
    }

    /// DeleteGroups: only an Empty group can go (-> Dead; the broker then
    /// writes the tombstone and drops the offsets). Dead: `GROUP_ID_NOT_FOUND`;
    /// with members: `NON_EMPTY_GROUP`.
    pub fn delete(&mut self, now_ms: i64) -> Result<(), ErrorCode> {
        match self.state {
            GroupState::Empty => {
                self.make_dead(now_ms);
                Ok(())
            }
            GroupState::Dead => Err(ErrorCode::GroupIdNotFound),
            _ => Err(ErrorCode::NonEmptyGroup),
        }
    }

    /// The broker stops coordinating this group (Kafka `onGroupUnloaded`):
    /// Dead, and every held request is answered `NOT_COORDINATOR` so that the
    /// clients find the new coordinator.
    pub fn unload(&mut self, now_ms: i64) -> Outcome {
        let mut fx = Effects::default();
        for m in &mut self.members {
            if let Some(token) = m.join_waiter.take() {
                let response = JoinResponse::error(m.member_id.clone(), ErrorCode::NotCoordinator);
                fx.joins.push((token, m.member_id.clone(), response));
            }
            if let Some(token) = m.sync_waiter.take() {
                let response = SyncResponse::error(ErrorCode::NotCoordinator);
                fx.syncs.push((token, m.member_id.clone(), response));
            }
        }
        self.make_dead(now_ms);
        fx.into_outcome()
    }

    /// The group's metadata as it would be persisted now (assignments not yet
    /// handed out are empty).
    pub fn snapshot(&self) -> GroupMetadataSnapshot {
        self.snapshot_with(|m| m.assignment.clone().unwrap_or_default())
    }

    // ---- JoinGroup ----

    fn do_join(
        &mut self,
        req: JoinRequest,
        new_member_id: impl FnOnce() -> String,
        now_ms: i64,
        fx: &mut Effects,
    ) -> Internal<JoinResponse> {
        let session = i64::from(req.session_timeout_ms);
        if session < self.config.min_session_timeout_ms
            || session > self.config.max_session_timeout_ms
        {
            let response = JoinResponse::error(req.member_id, ErrorCode::InvalidSessionTimeout);
            return Internal::Now(response);
        }
        if !self.accept_joining_member(&req.member_id) {
            // Kafka sheds the member (or pending id) outright, without a
            // rebalance of its own.
            self.remove_member(&req.member_id, fx);
            let response = JoinResponse::error(UNKNOWN_MEMBER_ID, ErrorCode::GroupMaxSizeReached);
            return Internal::Now(response);
        }
        if req.member_id.is_empty() {
            self.join_new_member(req, new_member_id, now_ms, fx)
        } else {
            self.join_current_member(req, now_ms, fx)
        }
    }

    /// Kafka `acceptJoiningMember`: while preparing, count the members that
    /// have rejoined (the group may be over a lowered max size, and the last
    /// to rejoin are the ones shed); otherwise count the members.
    fn accept_joining_member(&self, member_id: &str) -> bool {
        let max = self.config.max_size;
        match self.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                self.member(member_id).is_some_and(Member::is_awaiting_join)
                    || self.num_awaiting_join() < max
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.member(member_id).is_some() || self.members.len() < max
            }
        }
    }

    fn join_new_member(
        &mut self,
        req: JoinRequest,
        new_member_id: impl FnOnce() -> String,
        now_ms: i64,
        fx: &mut Effects,
    ) -> Internal<JoinResponse> {
        if self.state == GroupState::Dead {
            return Internal::Now(JoinResponse::error(
                UNKNOWN_MEMBER_ID,
                ErrorCode::CoordinatorNotAvailable,
            ));
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            return Internal::Now(JoinResponse::error(
                UNKNOWN_MEMBER_ID,
                ErrorCode::InconsistentGroupProtocol,
            ));
        }
        let member_id = new_member_id();
        debug_assert!(
            self.member_index(&member_id).is_none()
                && !self.pending_members.contains_key(&member_id),
            "new member id {member_id} is not new"
        );
        match req.group_instance_id.clone() {
            Some(instance) => match self.static_member_id(&instance).map(str::to_string) {
                Some(old) => {
                    self.update_static_member_and_rebalance(old, member_id, req, now_ms, fx)
                }
                None => self.add_member_and_rebalance(member_id, req, now_ms, fx),
            },
            None if req.require_known_member_id => {
                // The member must come back with this id within its session.
                let expiry = now_ms + i64::from(req.session_timeout_ms);
                self.pending_members.insert(member_id.clone(), expiry);
                Internal::Now(JoinResponse::error(member_id, ErrorCode::MemberIdRequired))
            }
            None => self.add_member_and_rebalance(member_id, req, now_ms, fx),
        }
    }

    fn join_current_member(
        &mut self,
        req: JoinRequest,
        now_ms: i64,
        fx: &mut Effects,
    ) -> Internal<JoinResponse> {
        let member_id = req.member_id.clone();
        if self.state == GroupState::Dead {
            let response = JoinResponse::error(member_id, ErrorCode::CoordinatorNotAvailable);
            return Internal::Now(response);
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            let response = JoinResponse::error(member_id, ErrorCode::InconsistentGroupProtocol);
            return Internal::Now(response);
        }
        if self.pending_members.contains_key(&member_id) {
            if req.group_instance_id.is_some() {
                // Pending ids are only handed to dynamic members; Kafka fails
                // the request with an IllegalStateException.
                let response = JoinResponse::error(member_id, ErrorCode::UnknownServerError);
                return Internal::Now(response);
            }
            return self.add_member_and_rebalance(member_id, req, now_ms, fx);
        }
        if let Err(error) =
            self.validate_current_member(&member_id, req.group_instance_id.as_deref())
        {
            return Internal::Now(JoinResponse::error(member_id, error));
        }
        let i = self.member_index(&member_id).expect("validated member");
        match self.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(i, req, now_ms, fx),
            GroupState::CompletingRebalance => {
                if self.members[i].matches(&req.protocols) {
                    // It missed its JoinGroup answer: the same one again.
                    let is_leader = self.is_leader(&member_id);
                    let leader = self.leader_id.clone().unwrap_or_default();
                    Internal::Now(self.join_answer(&member_id, is_leader, leader))
                } else {
                    self.update_member_and_rebalance(i, req, now_ms, fx)
                }
            }
            GroupState::Stable => {
                // A leader's JoinGroup always rebalances: it is how the leader
                // asks for a new assignment (e.g. topic metadata changed).
                if self.is_leader(&member_id) || !self.members[i].matches(&req.protocols) {
                    self.update_member_and_rebalance(i, req, now_ms, fx)
                } else {
                    let leader = self.leader_id.clone().unwrap_or_default();
                    Internal::Now(self.join_answer(&member_id, false, leader))
                }
            }
            GroupState::Empty | GroupState::Dead => {
                Internal::Now(JoinResponse::error(member_id, ErrorCode::UnknownMemberId))
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        member_id: String,
        req: JoinRequest,
        now_ms: i64,
        fx: &mut Effects,
    ) -> Internal<JoinResponse> {
        let token = self.token();
        if self.state == GroupState::PreparingRebalance && self.generation_id == 0 {
            self.new_member_added = true;
        }
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member_id.clone());
        }
        self.pending_members.remove(&member_id);
        self.members.push(Member {
            member_id: member_id.clone(),
            group_instance_id: req.group_instance_id,
            client_id: req.client_id,
            client_host: req.client_host,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            session_timeout_ms: req.session_timeout_ms,
            protocols: req.protocols,
            assignment: None,
            session_deadline_ms: now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS,
            is_new: true,
            join_waiter: Some(token),
            sync_waiter: None,
        });
        self.maybe_prepare_rebalance(now_ms, fx);
        Internal::Held(token, member_id)
    }

    fn update_member_and_rebalance(
        &mut self,
        i: usize,
        req: JoinRequest,
        now_ms: i64,
        fx: &mut Effects,
    ) -> Internal<JoinResponse> {
        let token = self.token();
        let m = &mut self.members[i];
        let member_id = m.member_id.clone();
        if let Some(old) = m.join_waiter.replace(token) {
            let response = JoinResponse::error(member_id.clone(), ErrorCode::RebalanceInProgress);
            fx.joins.push((old, member_id.clone(), response));
        }
        m.protocols = req.protocols;
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        m.session_timeout_ms = req.session_timeout_ms;
        self.maybe_prepare_rebalance(now_ms, fx);
        Internal::Held(token, member_id)
    }

    /// Kafka `updateStaticMemberAndRebalance`: a known `group.instance.id`
    /// joined without a member id (the instance restarted).
    fn update_static_member_and_rebalance(
        &mut self,
        old_member_id: String,
        new_member_id: String,
        req: JoinRequest,
        now_ms: i64,
        fx: &mut Effects,
    ) -> Internal<JoinResponse> {
        let leader_at_join = self.leader_id.clone().unwrap_or_default();
        let i = self.member_index(&old_member_id).expect("static member");
        self.fence_waiters(i, fx);
        self.rename_member(i, &new_member_id);
        self.members[i].restart_session(now_ms);
        let token = self.token();
        let m = &mut self.members[i];
        let old_protocols = std::mem::replace(&mut m.protocols, req.protocols);
        let old_rebalance_timeout_ms =
            std::mem::replace(&mut m.rebalance_timeout_ms, req.rebalance_timeout_ms);
        let old_session_timeout_ms =
            std::mem::replace(&mut m.session_timeout_ms, req.session_timeout_ms);
        m.join_waiter = Some(token);
        match self.state {
            GroupState::Stable => {
                if self.select_protocol() == self.protocol_name {
                    // No rebalance: write the new member id, then answer.
                    let write = self.token();
                    self.pending_writes.insert(
                        write,
                        PendingWrite::StaticRejoin(StaticRejoin {
                            old_member_id,
                            old_protocols,
                            old_rebalance_timeout_ms,
                            old_session_timeout_ms,
                            leader_at_join,
                            waiter: token,
                        }),
                    );
                    fx.persists.push(PersistRequest {
                        id: write,
                        snapshot: self.snapshot(),
                    });
                } else {
                    self.maybe_prepare_rebalance(now_ms, fx);
                }
            }
            // The leader may already be assigning for the old member id: the
            // new one would get nothing. Start over.
            GroupState::CompletingRebalance => self.prepare_rebalance(now_ms, fx),
            GroupState::PreparingRebalance => {}
            GroupState::Empty | GroupState::Dead => {
                debug_assert!(false, "static member in a {} group", self.state);
            }
        }
        Internal::Held(token, new_member_id)
    }

    /// Kafka `validateCurrentMember`: an instance id must map to this member
    /// id (another one: fenced), and the member id must be a member.
    fn validate_current_member(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), ErrorCode> {
        if let Some(instance) = group_instance_id {
            match self.static_member_id(instance) {
                Some(current) if current != member_id => return Err(ErrorCode::FencedInstanceId),
                Some(_) => {}
                None => return Err(ErrorCode::UnknownMemberId),
            }
        }
        if self.member_index(member_id).is_none() {
            return Err(ErrorCode::UnknownMemberId);
        }
        Ok(())
    }

    /// Kafka `supportsProtocols`: the first member sets the protocol type;
    /// later ones must match it and share at least one protocol with every
    /// current member (so a common protocol always exists).
    fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|p| self.count_supporting(&p.name) == self.members.len())
    }

    fn count_supporting(&self, protocol: &str) -> usize {
        self.members.iter().filter(|m| m.supports(protocol)).count()
    }

    /// Kafka `selectProtocol`: among the protocols every member supports,
    /// each member votes for its most preferred; the most votes win.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.first()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|p| p.name.as_str())
            .filter(|name| self.count_supporting(name) == self.members.len())
            .collect();
        let mut votes: Vec<(&str, usize)> = Vec::new();
        for m in &self.members {
            let Some(vote) = m
                .protocols
                .iter()
                .map(|p| p.name.as_str())
                .find(|name| candidates.contains(name))
            else {
                continue;
            };
            match votes.iter_mut().find(|(p, _)| *p == vote) {
                Some((_, n)) => *n += 1,
                None => votes.push((vote, 1)),
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (p, n) in votes {
            if best.is_none_or(|(_, most)| n > most) {
                best = Some((p, n));
            }
        }
        best.map(|(p, _)| p.to_string())
    }

    /// A successful JoinGroup answer for the current generation.
    fn join_answer(&self, member_id: &str, with_members: bool, leader: String) -> JoinResponse {
        JoinResponse {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader,
            skip_assignment: false,
            member_id: member_id.to_string(),
            members: if with_members {
                self.member_metadata()
            } else {
                Vec::new()
            },
        }
    }

    /// What the leader assigns from: every member's metadata for the
    /// selected protocol.
    fn member_metadata(&self) -> Vec<JoinMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or_default();
        self.members
            .iter()
            .map(|m| JoinMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata_for(protocol),
            })
            .collect()
    }

    // ---- SyncGroup ----

    fn do_sync(
        &mut self,
        req: SyncRequest,
        now_ms: i64,
        fx: &mut Effects,
    ) -> Internal<SyncResponse> {
        if self.state == GroupState::Dead {
            return Internal::Now(SyncResponse::error(ErrorCode::CoordinatorNotAvailable));
        }
        if let Err(error) =
            self.validate_current_member(&req.member_id, req.group_instance_id.as_deref())
        {
            return Internal::Now(SyncResponse::error(error));
        }
        if req.generation_id != self.generation_id {
            return Internal::Now(SyncResponse::error(ErrorCode::IllegalGeneration));
        }
        if req
            .protocol_type
            .as_ref()
            .is_some_and(|t| self.protocol_type.as_ref() != Some(t))
            || req
                .protocol_name
                .as_ref()
                .is_some_and(|n| self.protocol_name.as_ref() != Some(n))
        {
            return Internal::Now(SyncResponse::error(ErrorCode::InconsistentGroupProtocol));
        }
        let i = self.member_index(&req.member_id).expect("validated member");
        match self.state {
            GroupState::Empty | GroupState::Dead => {
                Internal::Now(SyncResponse::error(ErrorCode::UnknownMemberId))
            }
            GroupState::PreparingRebalance => {
                Internal::Now(SyncResponse::error(ErrorCode::RebalanceInProgress))
            }
            GroupState::CompletingRebalance => {
                let token = self.token();
                let member_id = req.member_id;
                if let Some(old) = self.members[i].sync_waiter.replace(token) {
                    let response = SyncResponse::error(ErrorCode::RebalanceInProgress);
                    fx.syncs.push((old, member_id.clone(), response));
                }
                self.remove_pending_sync(&member_id);
                if self.is_leader(&member_id) {
                    let given: BTreeMap<String, Bytes> = req.assignments.into_iter().collect();
                    let assignment: BTreeMap<String, Bytes> = self
                        .members
                        .iter()
                        .map(|m| {
                            let a = given.get(&m.member_id).cloned().unwrap_or_default();
                            (m.member_id.clone(), a)
                        })
                        .collect();
                    let snapshot = self.snapshot_with(|m| assignment[&m.member_id].clone());
                    let write = self.token();
                    self.pending_writes.insert(
                        write,
                        PendingWrite::Assignment {
                            generation_id: self.generation_id,
                            assignment,
                        },
                    );
                    fx.persists.push(PersistRequest {
                        id: write,
                        snapshot,
                    });
                }
                Internal::Held(token, member_id)
            }
            GroupState::Stable => {
                self.remove_pending_sync(&req.member_id);
                self.members[i].restart_session(now_ms);
                Internal::Now(SyncResponse {
                    error: None,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment: self.members[i].assignment.clone().unwrap_or_default(),
                })
            }
        }
    }

    fn remove_pending_sync(&mut self, member_id: &str) {
        self.pending_sync.remove(member_id);
        if self.pending_sync.is_empty() {
            self.sync_deadline_ms = None;
        }
    }

    /// Hands every held SyncGroup its assignment.
    fn propagate_assignment(&mut self, now_ms: i64, fx: &mut Effects) {
        for i in 0..self.members.len() {
            let response = SyncResponse {
                error: None,
                protocol_type: self.protocol_type.clone(),
                protocol_name: self.protocol_name.clone(),
                assignment: self.members[i].assignment.clone().unwrap_or_default(),
            };
            self.answer_sync(i, response, now_ms, fx);
        }
    }

    /// Clears the assignments and answers every held SyncGroup with `error`.
    fn reset_and_propagate_assignment_error(
        &mut self,
        error: ErrorCode,
        now_ms: i64,
        fx: &mut Effects,
    ) {
        for i in 0..self.members.len() {
            self.members[i].assignment = None;
            self.answer_sync(i, SyncResponse::error(error), now_ms, fx);
        }
    }

    // ---- offset commits ----

    fn validate_commit(
        &self,
        member_id: &str,
        generation_id: i32,
        group_instance_id: Option<&str>,
        transactional: bool,
    ) -> Result<(), ErrorCode> {
        if self.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        if generation_id < 0 && self.state == GroupState::Empty {
            // Admin client or a consumer without group management.
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || group_instance_id.is_some() {
            self.validate_current_member(member_id, group_instance_id)?;
            if generation_id != self.generation_id {
                return Err(ErrorCode::IllegalGeneration);
            }
            return Ok(());
        }
        if !transactional {
            // The group has members: only they commit.
            return Err(ErrorCode::UnknownMemberId);
        }
        Ok(())
    }

    // ---- the rebalance ----

    /// Kafka `maybePrepareRebalance`: only from Empty, Stable and
    /// CompletingRebalance (PreparingRebalance already is one).
    fn maybe_prepare_rebalance(&mut self, now_ms: i64, fx: &mut Effects) {
        if matches!(
            self.state,
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(now_ms, fx);
        }
    }

    /// Kafka `prepareRebalance`: held SyncGroups are told to rejoin, the sync
    /// phase is cancelled, and the join phase starts (from Empty with the
    /// initial delay).
    fn prepare_rebalance(&mut self, now_ms: i64, fx: &mut Effects) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_and_propagate_assignment_error(ErrorCode::RebalanceInProgress, now_ms, fx);
        }
        self.pending_sync.clear();
        self.sync_deadline_ms = None;
        let rebalance_timeout_ms = self.rebalance_timeout_ms();
        self.join_timer = Some(if self.state == GroupState::Empty {
            let delay_ms = self.config.initial_rebalance_delay_ms.max(0);
            JoinTimer::Initial {
                deadline_ms: now_ms + delay_ms,
                delay_ms,
                remaining_ms: (rebalance_timeout_ms - delay_ms).max(0),
            }
        } else {
            JoinTimer::Normal {
                deadline_ms: now_ms + rebalance_timeout_ms,
            }
        });
        self.transition(GroupState::PreparingRebalance, now_ms);
        self.try_complete_join(now_ms, fx);
    }

    /// Kafka `tryCompleteJoin` (and the no-member deviation): the join phase
    /// ends early when everyone has rejoined and no pending id is out, but
    /// never during the initial delay.
    fn try_complete_join(&mut self, now_ms: i64, fx: &mut Effects) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let all_joined = matches!(self.join_timer, Some(JoinTimer::Normal { .. }))
            && self.members.iter().all(Member::is_awaiting_join)
            && self.pending_members.is_empty();
        if self.members.is_empty() || all_joined {
            self.complete_join(now_ms, fx);
        }
    }

    fn on_join_timer(&mut self, now_ms: i64, fx: &mut Effects) {
        match self.join_timer {
            Some(JoinTimer::Initial {
                deadline_ms,
                delay_ms,
                remaining_ms,
            }) if self.new_member_added && remaining_ms != 0 => {
                // Members are still arriving: wait once more (Kafka's
                // arithmetic, including subtracting the previous delay),
                // counted from the deadline rather than from a late tick.
                self.new_member_added = false;
                let delay = self
                    .config
                    .initial_rebalance_delay_ms
                    .max(0)
                    .min(remaining_ms);
                self.join_timer = Some(JoinTimer::Initial {
                    deadline_ms: deadline_ms + delay,
                    delay_ms: delay,
                    remaining_ms: (remaining_ms - delay_ms).max(0),
                });
            }
            Some(_) => self.complete_join(now_ms, fx),
            None => {}
        }
    }

    /// Kafka `onCompleteJoin`: drop the dynamic members that did not rejoin,
    /// make sure the leader is one that did, start the next generation and
    /// answer every held JoinGroup (the leader gets the members' metadata).
    fn complete_join(&mut self, now_ms: i64, fx: &mut Effects) {
        self.join_timer = None;
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|m| !m.is_awaiting_join() && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in gone {
            self.remove_member(&member_id, fx);
        }
        if !self.members.is_empty() && !self.elect_joined_leader() {
            // Only static members that did not rejoin remain: give them
            // another rebalance timeout (their sessions may expire meanwhile).
            self.join_timer = Some(JoinTimer::Normal {
                deadline_ms: now_ms + self.rebalance_timeout_ms().max(1),
            });
            return;
        }
        self.new_member_added = false;
        self.generation_id += 1;
        self.pending_sync.clear();
        self.sync_deadline_ms = None;
        for m in &mut self.members {
            m.assignment = None;
        }
        if self.members.is_empty() {
            self.protocol_name = None;
            self.transition(GroupState::Empty, now_ms);
            // The empty generation is written; its result changes nothing
            // (a lost write only means an older generation reloads, with no
            // members left to act on it).
            let write = self.token();
            fx.persists.push(PersistRequest {
                id: write,
                snapshot: self.snapshot(),
            });
            return;
        }
        self.protocol_name = self.select_protocol();
        self.transition(GroupState::CompletingRebalance, now_ms);
        let leader = self.leader_id.clone().unwrap_or_default();
        let all = self.member_metadata();
        for i in 0..self.members.len() {
            let member_id = self.members[i].member_id.clone();
            let is_leader = member_id == leader;
            if let Some(token) = self.members[i].join_waiter.take() {
                let response = JoinResponse {
                    members: if is_leader { all.clone() } else { Vec::new() },
                    ..self.join_answer(&member_id, false, leader.clone())
                };
                fx.joins.push((token, member_id.clone(), response));
            }
            let m = &mut self.members[i];
            m.restart_session(now_ms);
            m.is_new = false;
            self.pending_sync.insert(member_id);
        }
        self.sync_deadline_ms = Some(now_ms + self.rebalance_timeout_ms());
    }

    /// Kafka `maybeElectNewJoinedLeader`: keep the leader if it rejoined, else
    /// take the first member that did. False if none did.
    fn elect_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader_id.as_deref() else {
            return false;
        };
        if self.member(leader).is_some_and(Member::is_awaiting_join) {
            return true;
        }
        match self.members.iter().find(|m| m.is_awaiting_join()) {
            Some(m) => {
                self.leader_id = Some(m.member_id.clone());
                true
            }
            None => false,
        }
    }

    /// Kafka `onExpirePendingSync`: members that did not send their SyncGroup
    /// within the rebalance timeout are removed and the group rebalances.
    fn on_sync_timer(&mut self, now_ms: i64, fx: &mut Effects) {
        self.sync_deadline_ms = None;
        if !matches!(
            self.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) || self.pending_sync.is_empty()
        {
            return;
        }
        let late: Vec<String> = self.pending_sync.iter().cloned().collect();
        for member_id in late {
            self.remove_member(&member_id, fx);
        }
        self.prepare_rebalance(now_ms, fx);
    }

    // ---- membership ----

    /// Kafka `removeMemberAndUpdateGroup`: a removed member ends a join phase
    /// that waited for it, or starts a rebalance.
    fn remove_member_and_update_group(&mut self, member_id: &str, now_ms: i64, fx: &mut Effects) {
        self.remove_member(member_id, fx);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance(now_ms, fx)
            }
            GroupState::PreparingRebalance => self.try_complete_join(now_ms, fx),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Kafka `GroupMetadata.remove` (a member or a pending id); its held
    /// requests are answered `UNKNOWN_MEMBER_ID` so that a live client joins
    /// again. A removed leader is replaced by the first remaining member.
    fn remove_member(&mut self, member_id: &str, fx: &mut Effects) {
        self.pending_members.remove(member_id);
        self.remove_pending_sync(member_id);
        let Some(i) = self.member_index(member_id) else {
            return;
        };
        let m = self.members.remove(i);
        if let Some(token) = m.join_waiter {
            let response = JoinResponse::error(UNKNOWN_MEMBER_ID, ErrorCode::UnknownMemberId);
            fx.joins.push((token, m.member_id.clone(), response));
        }
        if let Some(token) = m.sync_waiter {
            let response = SyncResponse::error(ErrorCode::UnknownMemberId);
            fx.syncs.push((token, m.member_id.clone(), response));
        }
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = self.members.first().map(|m| m.member_id.clone());
        }
    }

    /// Kafka `replaceStaticMember`, first half: whoever waits under the old
    /// member id is a duplicate of the instance and is fenced.
    fn fence_waiters(&mut self, i: usize, fx: &mut Effects) {
        let m = &mut self.members[i];
        if let Some(token) = m.join_waiter.take() {
            let response = JoinResponse::error(m.member_id.clone(), ErrorCode::FencedInstanceId);
            fx.joins.push((token, m.member_id.clone(), response));
        }
        if let Some(token) = m.sync_waiter.take() {
            let response = SyncResponse::error(ErrorCode::FencedInstanceId);
            fx.syncs.push((token, m.member_id.clone(), response));
        }
    }

    /// Gives member `i` a new member id, keeping its place, leadership and
    /// pending SyncGroup.
    fn rename_member(&mut self, i: usize, new_member_id: &str) {
        let old = std::mem::replace(&mut self.members[i].member_id, new_member_id.to_string());
        if self.leader_id.as_deref() == Some(old.as_str()) {
            self.leader_id = Some(new_member_id.to_string());
        }
        if self.pending_sync.remove(&old) {
            self.pending_sync.insert(new_member_id.to_string());
        }
    }

    fn answer_join(&mut self, i: usize, response: JoinResponse, now_ms: i64, fx: &mut Effects) {
        let m = &mut self.members[i];
        if let Some(token) = m.join_waiter.take() {
            fx.joins.push((token, m.member_id.clone(), response));
            m.restart_session(now_ms);
        }
    }

    fn answer_sync(&mut self, i: usize, response: SyncResponse, now_ms: i64, fx: &mut Effects) {
        let m = &mut self.members[i];
        if let Some(token) = m.sync_waiter.take() {
            fx.syncs.push((token, m.member_id.clone(), response));
            m.restart_session(now_ms);
        }
    }

    // ---- timers ----

    fn timers(&self) -> Vec<(i64, Due)> {
        if self.state == GroupState::Dead {
            return Vec::new();
        }
        let mut timers: Vec<(i64, Due)> = self
            .pending_members
            .iter()
            .map(|(id, &at)| (at, Due::Pending(id.clone())))
            .collect();
        timers.extend(
            self.members
                .iter()
                .filter(|m| m.can_expire())
                .map(|m| (m.session_deadline_ms, Due::Session(m.member_id.clone()))),
        );
        if let Some(timer) = self.join_timer {
            timers.push((timer.deadline_ms(), Due::Join));
        }
        if let Some(at) = self.sync_deadline_ms {
            timers.push((at, Due::Sync));
        }
        timers
    }

    /// The earliest timer due at `now_ms` (ties: in the order of `timers`).
    fn due(&self, now_ms: i64) -> Option<Due> {
        let mut best: Option<(i64, Due)> = None;
        for (at, due) in self.timers() {
            if at <= now_ms && best.as_ref().is_none_or(|(b, _)| at < *b) {
                best = Some((at, due));
            }
        }
        best.map(|(_, due)| due)
    }

    // ---- small helpers ----

    fn member_index(&self, member_id: &str) -> Option<usize> {
        self.members.iter().position(|m| m.member_id == member_id)
    }

    fn static_member_id(&self, group_instance_id: &str) -> Option<&str> {
        self.members
            .iter()
            .find(|m| m.group_instance_id.as_deref() == Some(group_instance_id))
            .map(|m| m.member_id.as_str())
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    fn num_awaiting_join(&self) -> usize {
        self.members.iter().filter(|m| m.is_awaiting_join()).count()
    }

    /// The largest rebalance timeout of the members (0 without members).
    fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .iter()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .fold(0, i64::max)
    }

    fn token(&mut self) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        token
    }

    fn transition(&mut self, to: GroupState, now_ms: i64) {
        self.state = to;
        self.state_timestamp_ms = now_ms;
    }

    fn make_dead(&mut self, now_ms: i64) {
        self.transition(GroupState::Dead, now_ms);
        self.join_timer = None;
        self.sync_deadline_ms = None;
        self.pending_sync.clear();
        self.pending_writes.clear();
    }

    fn snapshot_with(&self, assignment: impl Fn(&Member) -> Bytes) -> GroupMetadataSnapshot {
        let protocol = self.protocol_name.as_deref();
        GroupMetadataSnapshot {
            protocol_type: self.protocol_type.clone(),
            generation_id: self.generation_id,
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp_ms: Some(self.state_timestamp_ms),
            members: self
                .members
                .iter()
                .map(|m| MemberSnapshot {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: protocol.map(|p| m.metadata_for(p)).unwrap_or_default(),
                    assignment: assignment(m),
                })
                .collect(),
        }
    }
}

//! One consumer group (KIP-848) on its coordinator: heartbeats, leaves and
//! timers in, records and answers out. A call computes the records of what
//! it decided, then applies them with [`ConsumerGroup::replay`], the same
//! path a coordinator loading the group takes.
//!
//! Kafka 4.x's rules (GroupMetadataManager), with these differences:
//! - A subscription regex is resolved in the heartbeat that brings it (Kafka
//!   resolves it in the background and bumps the epoch on a later
//!   heartbeat); Rust's `regex` crate has RE2's syntax, as RE2/J.
//! - Members and topics are iterated in sorted order, so assignments are a
//!   function of the group (Kafka iterates hash maps).
//! - The member id of a v0 join is chosen by the broker before the call.

use std::collections::{BTreeMap, BTreeSet};

use strand_protocol::ErrorCode;

use super::assignor::{Assignor, MemberSpec};
use super::reconcile::{self, MemberAssignment, Step};
use super::records::{ClassicMetadata, MemberMetadata, Record};
use super::types::{Assignment, Epoch, MemberState, TopicId};

#[path = "classic.rs"]
mod classic;
pub use classic::{ClassicJoin, ClassicJoinAnswer};

/// The topics a group may subscribe to: name -> (id, partition count).
#[derive(Clone, Debug, Default)]
pub struct TopicImage {
    by_name: BTreeMap<String, (TopicId, i32)>,
}

impl TopicImage {
    pub fn new(topics: impl IntoIterator<Item = (String, TopicId, i32)>) -> TopicImage {
        TopicImage {
            by_name: topics.into_iter().map(|(n, id, p)| (n, (id, p))).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<(TopicId, i32)> {
        self.by_name.get(name).copied()
    }

    /// A topic's name by id (a scan: for the classic paths only).
    pub fn name_of(&self, id: TopicId) -> Option<&str> {
        self.by_name
            .iter()
            .find(|(_, (t, _))| *t == id)
            .map(|(n, _)| n.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, TopicId, i32)> {
        self.by_name
            .iter()
            .map(|(n, (id, p))| (n.as_str(), *id, *p))
    }
}

/// The broker settings a consumer group follows (`group.consumer.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupConfig {
    pub session_timeout_ms: i64,
    pub heartbeat_interval_ms: i32,
    pub max_size: usize,
    /// `group.consumer.assignors`: the first is the default.
    pub assignors: Vec<Assignor>,
    /// `group.consumer.migration.policy`.
    pub migration: MigrationPolicy,
    /// `group.classic.max.size`: a group larger than this stays a
    /// consumer-protocol group.
    pub classic_max_size: usize,
    /// `group.consumer.assignment.interval.ms` (KIP-1263): the least time
    /// between two target assignments; a heartbeat that would compute one
    /// sooner leaves it to the first heartbeat after the interval. The broker's default is
    /// Kafka's, 1000; this type's default is 0 (every change assigned at
    /// once, as the tables of this crate's tests expect).
    pub assignment_interval_ms: i64,
}

/// `group.consumer.migration.policy`: whether a group with members moves
/// between the classic and the consumer protocol (empty groups always do).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MigrationPolicy {
    Disabled,
    Upgrade,
    Downgrade,
    Bidirectional,
}

impl MigrationPolicy {
    /// Kafka's parse: case ignored, anything else is `disabled`.
    pub fn parse(v: &str) -> MigrationPolicy {
        match v.trim().to_ascii_lowercase().as_str() {
            "upgrade" => MigrationPolicy::Upgrade,
            "downgrade" => MigrationPolicy::Downgrade,
            "bidirectional" => MigrationPolicy::Bidirectional,
            _ => MigrationPolicy::Disabled,
        }
    }

    pub fn upgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Upgrade | MigrationPolicy::Bidirectional
        )
    }

    pub fn downgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Downgrade | MigrationPolicy::Bidirectional
        )
    }
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: i32::MAX as usize,
            assignors: vec![Assignor::Uniform, Assignor::Range],
            migration: MigrationPolicy::Bidirectional,
            classic_max_size: i32::MAX as usize,
            assignment_interval_ms: 0,
        }
    }
}

/// A ConsumerGroupHeartbeat's fields (the member id already chosen).
#[derive(Clone, Debug, Default)]
pub struct HeartbeatRequest {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns (None: not sent).
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: Epoch,
    pub heartbeat_interval_ms: i32,
    /// Its assigned partitions, when the member is to be told them.
    pub assignment: Option<Assignment>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatError {
    pub code: ErrorCode,
    pub message: String,
}

fn err(code: ErrorCode, message: impl Into<String>) -> HeartbeatError {
    HeartbeatError {
        code,
        message: message.into(),
    }
}

/// The group's state as Describe and List report it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn as_str(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// One member: its metadata and its assignment state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerMember {
    pub meta: MemberMetadata,
    pub assignment: MemberAssignment,
}

#[derive(Clone, Debug, Default)]
pub struct ConsumerGroup {
    id: String,
    epoch: Epoch,
    assignment_epoch: Epoch,
    metadata_hash: u64,
    members: BTreeMap<String, ConsumerMember>,
    targets: BTreeMap<String, Assignment>,
    /// instance id -> member id.
    static_members: BTreeMap<String, String>,
    /// Partitions some member holds (assigned or pending revocation), with
    /// that member's epoch (Kafka's currentPartitionEpoch).
    held: BTreeMap<(TopicId, i32), Epoch>,
    // Soft state, not in the records: timers and compiled regexes.
    sessions: BTreeMap<String, i64>,
    revocations: BTreeMap<String, (i64, Epoch)>,
    regexes: BTreeMap<String, regex::Regex>,
    /// Regexes brought by a heartbeat and not yet resolved: they match
    /// nothing until the group's next heartbeat, as Kafka resolves a new
    /// regex off the heartbeat's path and applies the result later.
    unresolved: BTreeSet<String>,
    /// Classic members' join or sync deadline (Kafka's classic join and
    /// sync timeouts for members of a consumer group).
    classic_timers: BTreeMap<String, i64>,
    /// When the last target was computed (soft: a loaded group computes at
    /// its first heartbeat).
    last_assigned_ms: Option<i64>,
    /// Set when fencing members left only classic members and the group
    /// went back to the classic protocol: the classic group to install.
    downgraded: Option<crate::snapshot::GroupMetadataSnapshot>,
}

/// The records and answer of one heartbeat.
pub type Heartbeat = (HeartbeatAnswer, Vec<Record>);

impl ConsumerGroup {
    pub fn new(id: impl Into<String>) -> ConsumerGroup {
        ConsumerGroup {
            id: id.into(),
            ..ConsumerGroup::default()
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    pub fn assignment_epoch(&self) -> Epoch {
        self.assignment_epoch
    }

    pub fn members(&self) -> &BTreeMap<String, ConsumerMember> {
        &self.members
    }

    pub fn target(&self, member_id: &str) -> Option<&Assignment> {
        self.targets.get(member_id)
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self.members.values().any(|m| {
            m.assignment.state != MemberState::Stable || m.assignment.epoch != self.assignment_epoch
        }) {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// The assignor most members name, else the configured default.
    pub fn assignor(&self, cfg: &ConsumerGroupConfig) -> Assignor {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = &m.meta.server_assignor {
                *votes.entry(a.as_str()).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, std::cmp::Reverse(*name)))
            .and_then(|(name, _)| Assignor::from_name(name))
            .or_else(|| cfg.assignors.first().copied())
            .unwrap_or(Assignor::Uniform)
    }

    /// The earliest timer, if any.
    pub fn next_deadline(&self) -> Option<i64> {
        self.sessions
            .values()
            .chain(self.revocations.values().map(|(d, _)| d))
            .chain(self.classic_timers.values())
            .min()
            .copied()
    }

    /// Whether a target may be computed now (KIP-1263's interval).
    fn may_assign(&self, now_ms: i64, cfg: &ConsumerGroupConfig) -> bool {
        self.last_assigned_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= cfg.assignment_interval_ms)
    }

    /// The topics `meta` subscribes to that exist, by id.
    fn subscribed(&mut self, meta: &MemberMetadata, topics: &TopicImage) -> BTreeSet<TopicId> {
        let mut out: BTreeSet<TopicId> = meta
            .subscribed_topic_names
            .iter()
            .filter_map(|n| topics.get(n).map(|(id, _)| id))
            .collect();
        if let Some(re) = meta
            .subscribed_topic_regex
            .as_deref()
            .filter(|r| !r.is_empty() && !self.unresolved.contains(*r))
        {
            if let Some(re) = self.compiled(re) {
                out.extend(
                    topics
                        .iter()
                        .filter(|(n, _, _)| re.is_match(n))
                        .map(|(_, id, _)| id),
                );
            }
        }
        out
    }

    /// A regex as Kafka matches it: the whole topic name.
    fn compiled(&mut self, re: &str) -> Option<&regex::Regex> {
        if !self.regexes.contains_key(re) {
            let compiled = regex::Regex::new(&format!("^(?:{re})$")).ok()?;
            self.regexes.insert(re.to_string(), compiled);
        }
        self.regexes.get(re)
    }

    /// The hash of the group's subscribed topics (ids and partition
    /// counts; 0 when none) (with `meta` in place of
    /// that member's metadata, and without the members `removed`).
    fn metadata_hash(
        &mut self,
        meta: Option<&MemberMetadata>,
        removed: &[String],
        topics: &TopicImage,
    ) -> u64 {
        let metas: Vec<MemberMetadata> = self
            .members
            .values()
            .filter(|m| meta.is_none_or(|x| x.member_id != m.meta.member_id))
            .filter(|m| !removed.contains(&m.meta.member_id))
            .map(|m| m.meta.clone())
            .chain(meta.cloned())
            .collect();
        let mut ids = BTreeSet::new();
        for m in &metas {
            ids.extend(self.subscribed(m, topics));
        }
        if ids.is_empty() {
            return 0;
        }
        let partitions: BTreeMap<TopicId, i32> = topics.iter().map(|(_, id, p)| (id, p)).collect();
        // FNV-1a: stable across builds, unlike std's hasher.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for id in ids {
            for b in id
                .as_bytes()
                .iter()
                .chain(&partitions.get(&id).copied().unwrap_or(0).to_be_bytes())
            {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    }

    /// One ConsumerGroupHeartbeat (`member_epoch` >= 0; leaves go to
    /// [`ConsumerGroup::leave`]).
    pub fn heartbeat(
        &mut self,
        req: &HeartbeatRequest,
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
        now_ms: i64,
    ) -> Result<Heartbeat, HeartbeatError> {
        // Regexes brought by earlier heartbeats are resolved by now.
        self.unresolved.clear();
        if req.member_epoch < 0 {
            return self.leave(req, topics, cfg);
        }
        let join = req.member_epoch == 0;
        let id = req.member_id.as_str();
        if self.members.len() >= cfg.max_size && !self.members.contains_key(id) {
            return Err(err(
                ErrorCode::GroupMaxSizeReached,
                format!(
                    "The consumer group has reached its maximum capacity of {} members.",
                    cfg.max_size
                ),
            ));
        }
        let mut records = Vec::new();
        // Who the member is, and the target it inherits when a static
        // member takes over its instance id.
        let (old, inherited) = match &req.instance_id {
            None => match self.members.get(id) {
                Some(m) => {
                    check_epoch(m, req)?;
                    (m.clone(), None)
                }
                None if join => (new_member(id), None),
                None => {
                    return Err(err(
                        ErrorCode::UnknownMemberId,
                        format!("Member {id} is not a member of group {}.", self.id),
                    ))
                }
            },
            Some(instance) => match self.static_members.get(instance).cloned() {
                None if join => (new_member(id), None),
                None => {
                    return Err(err(
                        ErrorCode::UnknownMemberId,
                        format!("Instance id {instance} is unknown."),
                    ))
                }
                Some(holder) => {
                    let existing = self.members[&holder].clone();
                    if join {
                        if existing.assignment.epoch != Epoch::STATIC_LEAVE && holder != id {
                            return Err(err(
                                ErrorCode::UnreleasedInstanceId,
                                format!("Static member {id} with instance id {instance} cannot join the group because the instance id is owned by {holder} member."),
                            ));
                        }
                        if holder == id {
                            check_epoch(&existing, req)?;
                            (existing, None)
                        } else {
                            // The new id takes over the member, its
                            // assignment and its target.
                            let (m, target, taken) = self.take_over(&holder, id);
                            records.extend(taken);
                            (m, Some((holder, target)))
                        }
                    } else if holder != id {
                        return Err(err(
                            ErrorCode::FencedInstanceId,
                            format!("Static member {id} with instance id {instance} was fenced by member {holder}."),
                        ));
                    } else {
                        check_epoch(&existing, req)?;
                        (existing, None)
                    }
                }
            },
        };
        if let Some(re) = req
            .subscribed_topic_regex
            .as_deref()
            .filter(|r| !r.is_empty())
        {
            if self.compiled(re).is_none() {
                let why = regex_error(re)
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                return Err(err(
                    ErrorCode::InvalidRegularExpression,
                    format!("SubscribedTopicRegex `{re}` is not a valid regular expression{why}."),
                ));
            }
        }
        // The member's new metadata: fields sent replace those it had.
        let mut meta = old.meta.clone();
        meta.member_id = id.to_string();
        if let Some(i) = &req.instance_id {
            meta.instance_id = Some(i.clone());
        }
        if let Some(r) = &req.rack_id {
            meta.rack_id = Some(r.clone());
        }
        if let Some(a) = &req.server_assignor {
            meta.server_assignor = Some(a.clone());
        }
        if let Some(names) = &req.subscribed_topic_names {
            let set: BTreeSet<&String> = names.iter().collect();
            meta.subscribed_topic_names = set.into_iter().cloned().collect();
        }
        if let Some(re) = &req.subscribed_topic_regex {
            meta.subscribed_topic_regex = Some(re.clone()).filter(|r| !r.is_empty());
        }
        if req.rebalance_timeout_ms != -1 {
            meta.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        meta.client_id = req.client_id.clone();
        meta.client_host = req.client_host.clone();
        let (next, assignment_written, records) = self.update_member(
            &old,
            inherited,
            meta,
            req.owned.as_ref(),
            records,
            topics,
            cfg,
            now_ms,
        )?;
        self.sessions.insert(
            id.to_string(),
            now_ms.saturating_add(cfg.session_timeout_ms),
        );
        if assignment_written {
            if next.state == MemberState::UnrevokedPartitions {
                let timeout = i64::from(self.members[id].meta.rebalance_timeout_ms.max(0));
                self.revocations
                    .insert(id.to_string(), (now_ms.saturating_add(timeout), next.epoch));
            } else {
                self.revocations.remove(id);
            }
        }
        let full = req.rebalance_timeout_ms != -1
            && (req.subscribed_topic_names.is_some() || req.subscribed_topic_regex.is_some())
            && req.owned.is_some();
        let tell = join || full || next.assigned != old.assignment.assigned;
        Ok((
            HeartbeatAnswer {
                member_id: id.to_string(),
                member_epoch: next.epoch,
                heartbeat_interval_ms: cfg.heartbeat_interval_ms,
                assignment: tell.then(|| next.assigned.clone()),
            },
            records,
        ))
    }

    /// A member's new metadata applied: the group epoch bumped when its
    /// subscription or the subscribed topics changed, the targets computed
    /// when the epoch passed them, and the member reconciled towards its
    /// target given what it says it owns. Returns its new assignment,
    /// whether that was written, and every record (applied already).
    #[allow(clippy::too_many_arguments)]
    fn update_member(
        &mut self,
        old: &ConsumerMember,
        inherited: Option<(String, Assignment)>,
        meta: MemberMetadata,
        owned: Option<&Assignment>,
        mut records: Vec<Record>,
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
        now_ms: i64,
    ) -> Result<(MemberAssignment, bool, Vec<Record>), HeartbeatError> {
        let id = meta.member_id.clone();
        let id = id.as_str();
        let is_new = !self.members.contains_key(id) && inherited.is_none();
        let names_changed = meta.subscribed_topic_names != old.meta.subscribed_topic_names;
        let regex_changed = meta.subscribed_topic_regex != old.meta.subscribed_topic_regex;
        let subscription_changed = names_changed || regex_changed;
        // A regex no other member subscribes to is resolved later: until
        // then it changes neither the epoch nor the target.
        let regex_pending = regex_changed
            && meta.subscribed_topic_regex.as_ref().is_some_and(|re| {
                !self.members.values().any(|m| {
                    m.meta.member_id != id && m.meta.subscribed_topic_regex.as_ref() == Some(re)
                })
            });
        if regex_pending {
            if let Some(re) = &meta.subscribed_topic_regex {
                self.unresolved.insert(re.clone());
            }
        }
        if meta != old.meta || is_new {
            records.push(Record::MemberMetadata(Box::new(meta.clone())));
        }
        // The group epoch moves with membership, subscriptions and the
        // subscribed topics' partitions.
        let hash = self.metadata_hash(Some(&meta), &[], topics);
        let mut epoch = self.epoch;
        if self.epoch == Epoch::ZERO
            || ((names_changed || (regex_changed && !regex_pending)) && !is_new)
            || (is_new && !self.subscribed(&meta, topics).is_empty())
            || hash != self.metadata_hash
        {
            // A new group's first epoch is 2 when it subscribes to topics
            // already, else 1: as Kafka 4.4 writes them (its records, and
            // the differential facts); later bumps add one.
            epoch = match (self.epoch, hash) {
                (Epoch::ZERO, 0) => Epoch::new(1),
                (Epoch::ZERO, _) => Epoch::new(2),
                (e, _) => e.next(),
            };
            records.push(Record::Metadata {
                epoch,
                metadata_hash: hash,
            });
        }
        let subscribed = self.subscribed(&meta, topics);
        // At most one target per interval (KIP-1263): within it, the
        // member reconciles towards the target it has, and the heartbeat
        // that comes after it computes the new one (as Kafka 4.4: no timer
        // computes it).
        let compute = epoch > self.assignment_epoch && self.may_assign(now_ms, cfg);
        if compute {
            self.last_assigned_ms = Some(now_ms);
        }
        let target = if compute {
            let assignments =
                self.compute_targets(&meta, &subscribed, inherited.as_ref(), topics, cfg);
            for (member_id, a) in &assignments {
                let before = match &inherited {
                    Some((_, t)) if member_id == id => Some(t),
                    _ => self.targets.get(member_id),
                };
                if before != Some(a) {
                    records.push(Record::TargetAssignmentMember {
                        member_id: member_id.clone(),
                        assignment: a.clone(),
                    });
                }
            }
            records.push(Record::TargetAssignmentMetadata { epoch });
            assignments.get(id).cloned().unwrap_or_default()
        } else {
            inherited
                .as_ref()
                .map(|(_, t)| t.clone())
                .or_else(|| self.targets.get(id).cloned())
                .unwrap_or_default()
        };
        let target_epoch = if compute {
            epoch
        } else {
            self.assignment_epoch
        };
        let holder = inherited.as_ref().map(|(h, _)| h.clone());
        let mine: BTreeSet<(TopicId, i32)> = old.assignment.holds().collect();
        let held = &self.held;
        let held_by_other =
            |t: TopicId, p: i32| held.contains_key(&(t, p)) && !mine.contains(&(t, p));
        let step = Step {
            target_epoch,
            target: &target,
            subscribed: &subscribed,
            owned,
            subscription_changed,
            held_by_other: &held_by_other,
        };
        let next = reconcile::reconcile(&old.assignment, &step).map_err(|_| {
            err(
                ErrorCode::FencedMemberEpoch,
                format!("The consumer group member {id} is in an unknown state and owns partitions: it must rejoin."),
            )
        })?;
        let assignment_written = next != old.assignment || is_new;
        if assignment_written {
            records.push(Record::CurrentMemberAssignment {
                member_id: id.to_string(),
                assignment: next.clone(),
            });
        }
        for r in &records {
            self.replay(r);
        }
        if let Some(h) = holder {
            self.sessions.remove(&h);
            self.revocations.remove(&h);
            self.classic_timers.remove(&h);
        }
        Ok((next, assignment_written, records))
    }

    /// The assignor's targets for every member, `meta` standing for the
    /// heartbeating member (and replacing the static member it takes over).
    fn compute_targets(
        &mut self,
        meta: &MemberMetadata,
        subscribed: &BTreeSet<TopicId>,
        inherited: Option<&(String, Assignment)>,
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
    ) -> BTreeMap<String, Assignment> {
        let mut specs = BTreeMap::new();
        let others: Vec<MemberMetadata> = self
            .members
            .values()
            .filter(|m| {
                m.meta.member_id != meta.member_id
                    && inherited.is_none_or(|(h, _)| *h != m.meta.member_id)
            })
            .map(|m| m.meta.clone())
            .collect();
        for m in others {
            let spec = MemberSpec {
                instance_id: m.instance_id.clone(),
                subscribed: self.subscribed(&m, topics),
                target: self.targets.get(&m.member_id).cloned().unwrap_or_default(),
            };
            specs.insert(m.member_id.clone(), spec);
        }
        let own_target = match inherited {
            Some((_, t)) => t.clone(),
            None => self
                .targets
                .get(&meta.member_id)
                .cloned()
                .unwrap_or_default(),
        };
        specs.insert(
            meta.member_id.clone(),
            MemberSpec {
                instance_id: meta.instance_id.clone(),
                subscribed: subscribed.clone(),
                target: own_target,
            },
        );
        let partitions: BTreeMap<TopicId, i32> = topics.iter().map(|(_, id, p)| (id, p)).collect();
        let mut assignor = self.assignor(cfg);
        if let Some(a) = meta
            .server_assignor
            .as_deref()
            .and_then(Assignor::from_name)
        {
            // Counting the heartbeating member's choice as Kafka does
            // (its updated metadata is among the members').
            if self
                .members
                .values()
                .all(|m| m.meta.server_assignor.is_none())
            {
                assignor = a;
            }
        }
        assignor.assign(&specs, &partitions)
    }

    /// A leave: epoch -1 (for good) or -2 (a static member, for now).
    pub fn leave(
        &mut self,
        req: &HeartbeatRequest,
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
    ) -> Result<Heartbeat, HeartbeatError> {
        let id = req.member_id.as_str();
        let member = match &req.instance_id {
            None => self.members.get(id).cloned().ok_or_else(|| {
                err(
                    ErrorCode::UnknownMemberId,
                    format!("Member {id} is not a member of group {}.", self.id),
                )
            })?,
            Some(instance) => {
                let holder = self.static_members.get(instance).cloned().ok_or_else(|| {
                    err(
                        ErrorCode::UnknownMemberId,
                        format!("Instance id {instance} is unknown."),
                    )
                })?;
                if holder != id {
                    return Err(err(
                        ErrorCode::FencedInstanceId,
                        format!("Static member {id} with instance id {instance} was fenced by member {holder}."),
                    ));
                }
                self.members[&holder].clone()
            }
        };
        let records = if req.member_epoch == Epoch::STATIC_LEAVE.get() && req.instance_id.is_some()
        {
            // Kept for its instance id until its session ends.
            let mut a = member.assignment.clone();
            a.epoch = Epoch::STATIC_LEAVE;
            a.pending_revocation = Assignment::new();
            vec![Record::CurrentMemberAssignment {
                member_id: id.to_string(),
                assignment: a,
            }]
        } else {
            self.fence(&[id.to_string()], topics, cfg)
        };
        if req.member_epoch == Epoch::STATIC_LEAVE.get() && req.instance_id.is_some() {
            for r in &records {
                self.replay(r);
            }
        } else {
            self.sessions.remove(id);
        }
        self.revocations.remove(id);
        self.classic_timers.remove(id);
        Ok((
            HeartbeatAnswer {
                member_id: id.to_string(),
                member_epoch: Epoch::new(req.member_epoch),
                heartbeat_interval_ms: 0,
                assignment: None,
            },
            records,
        ))
    }

    /// Removes `ids` (their records written and applied). The epoch is
    /// bumped, with the hash of the topics the others subscribe to, and the
    /// target is recomputed at the next heartbeat (ASSIGNING until then).
    /// When only classic members would be left and the policy allows, the
    /// group ends instead and [`ConsumerGroup::take_downgrade`] holds the
    /// classic group it becomes (Kafka's online downgrade).
    fn fence(
        &mut self,
        ids: &[String],
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
    ) -> Vec<Record> {
        if let Some(snapshot) = self.downgrade_to(ids, topics, cfg) {
            let mut records = Vec::new();
            for id in self.members.keys() {
                records.extend(tombstones(id));
            }
            records.push(Record::TargetAssignmentMetadataTombstone);
            records.push(Record::MetadataTombstone);
            for r in &records {
                self.replay(r);
            }
            self.sessions.clear();
            self.revocations.clear();
            self.classic_timers.clear();
            self.downgraded = Some(snapshot);
            return records;
        }
        let mut records = Vec::new();
        for id in ids {
            records.extend(tombstones(id));
        }
        let metadata_hash = self.metadata_hash(None, ids, topics);
        records.push(Record::Metadata {
            epoch: self.epoch.next(),
            metadata_hash,
        });
        for r in &records {
            self.replay(r);
        }
        // A group left empty assigns its next member at once, whatever
        // the interval (as Kafka 4.4 does: a side-by-side fact).
        if self.members.is_empty() {
            self.last_assigned_ms = None;
        }
        records
    }

    /// Members whose session, revocation, or classic join or sync time ran
    /// out are removed.
    pub fn tick(
        &mut self,
        now_ms: i64,
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
    ) -> Vec<Record> {
        let mut expired: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, d)| **d <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for (id, (d, epoch)) in &self.revocations {
            let same_epoch = self
                .members
                .get(id)
                .is_some_and(|m| m.assignment.epoch == *epoch);
            if *d <= now_ms && same_epoch && !expired.contains(id) {
                expired.push(id.clone());
            }
        }
        for (id, d) in &self.classic_timers {
            if *d <= now_ms && !expired.contains(id) {
                expired.push(id.clone());
            }
        }
        expired.retain(|id| self.members.contains_key(id));
        for id in &expired {
            self.sessions.remove(id);
            self.revocations.remove(id);
            self.classic_timers.remove(id);
        }
        // Timers of members gone already.
        self.revocations.retain(|_, (d, _)| *d > now_ms);
        self.classic_timers.retain(|_, d| *d > now_ms);
        if expired.is_empty() {
            return Vec::new();
        }
        self.fence(&expired, topics, cfg)
    }

    /// Applies one record: the only way the group changes.
    pub fn replay(&mut self, record: &Record) {
        match record {
            Record::Metadata {
                epoch,
                metadata_hash,
            } => {
                self.epoch = *epoch;
                self.metadata_hash = *metadata_hash;
            }
            Record::MemberMetadata(meta) => {
                let m = self
                    .members
                    .entry(meta.member_id.clone())
                    .or_insert_with(|| new_member(&meta.member_id));
                if let Some(old) = &m.meta.instance_id {
                    if old != meta.instance_id.as_ref().unwrap_or(old) {
                        self.static_members.remove(old);
                    }
                }
                m.meta = (**meta).clone();
                if let Some(i) = &meta.instance_id {
                    self.static_members
                        .insert(i.clone(), meta.member_id.clone());
                }
            }
            Record::MemberMetadataTombstone { member_id } => {
                if let Some(m) = self.members.remove(member_id) {
                    if let Some(i) = &m.meta.instance_id {
                        if self.static_members.get(i) == Some(member_id) {
                            self.static_members.remove(i);
                        }
                    }
                    debug_assert!(m.assignment.holds().next().is_none());
                }
            }
            Record::TargetAssignmentMember {
                member_id,
                assignment,
            } => {
                self.targets.insert(member_id.clone(), assignment.clone());
            }
            Record::TargetAssignmentMemberTombstone { member_id } => {
                self.targets.remove(member_id);
            }
            Record::TargetAssignmentMetadata { epoch } => self.assignment_epoch = *epoch,
            Record::CurrentMemberAssignment {
                member_id,
                assignment,
            } => {
                let m = self
                    .members
                    .entry(member_id.clone())
                    .or_insert_with(|| new_member(member_id));
                for tp in m.assignment.holds() {
                    self.held.remove(&tp);
                }
                m.assignment = assignment.clone();
                for tp in assignment.holds() {
                    let previous = self.held.insert(tp, assignment.epoch);
                    debug_assert!(previous.is_none(), "{tp:?} held twice");
                }
            }
            Record::TargetAssignmentMetadataTombstone => {
                self.assignment_epoch = Epoch::ZERO;
                self.targets.clear();
            }
            // The group is over: what follows starts a new one.
            Record::MetadataTombstone => *self = ConsumerGroup::new(self.id.clone()),
            Record::CurrentMemberAssignmentTombstone { member_id } => {
                if let Some(m) = self.members.get_mut(member_id) {
                    for tp in m.assignment.holds() {
                        self.held.remove(&tp);
                    }
                    m.assignment = MemberAssignment {
                        epoch: Epoch::LEAVE,
                        previous_epoch: Epoch::LEAVE,
                        ..MemberAssignment::joining()
                    };
                }
            }
        }
    }

    /// An OffsetCommit (v9+) by `member_id` at `epoch` for `partitions`
    /// (Kafka 4.4's rule, KIP-1251): an empty group takes commits from
    /// anyone not a member (epoch < 0); a member commits at its epoch, or
    /// at an earlier one for partitions it already had then.
    pub fn check_offset_commit(
        &self,
        member_id: &str,
        epoch: i32,
        partitions: impl IntoIterator<Item = (TopicId, i32)>,
    ) -> Result<(), ErrorCode> {
        if epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let m = self
            .members
            .get(member_id)
            .ok_or(ErrorCode::UnknownMemberId)?;
        let received = Epoch::new(epoch);
        let current = m.assignment.epoch;
        if received == current {
            return Ok(());
        }
        // A classic member commits at its generation, its member epoch.
        if m.meta.classic.is_some() {
            return Err(ErrorCode::IllegalGeneration);
        }
        if received > current {
            return Err(ErrorCode::StaleMemberEpoch);
        }
        for (t, p) in partitions {
            match m.assignment.assignment_epoch(t, p) {
                Some(at) if at <= received => {}
                _ => return Err(ErrorCode::StaleMemberEpoch),
            }
        }
        Ok(())
    }

    /// The records ending this group (DeleteGroups, or a classic member
    /// taking the group over): only an empty group ends.
    pub fn end(&self) -> Result<Vec<Record>, ErrorCode> {
        if !self.members.is_empty() {
            return Err(ErrorCode::NonEmptyGroup);
        }
        Ok(vec![
            Record::TargetAssignmentMetadataTombstone,
            Record::MetadataTombstone,
        ])
    }

    /// Whether the records replayed so far left a live group (not one
    /// never started or ended by [`ConsumerGroup::end`]).
    pub fn exists(&self) -> bool {
        self.epoch != Epoch::ZERO
    }

    /// An OffsetFetch (v9+) naming a member: it must be one, at its epoch.
    pub fn check_offset_fetch(&self, member_id: Option<&str>, epoch: i32) -> Result<(), ErrorCode> {
        let Some(id) = member_id else {
            return if epoch < 0 {
                Ok(())
            } else {
                Err(ErrorCode::UnknownMemberId)
            };
        };
        if id.is_empty() && epoch < 0 {
            return Ok(());
        }
        let m = self.members.get(id).ok_or(ErrorCode::UnknownMemberId)?;
        if m.assignment.epoch.get() != epoch {
            return Err(ErrorCode::StaleMemberEpoch);
        }
        Ok(())
    }

    /// After a load (every record replayed): each member's session starts
    /// now, and revocations under way get their full time again.
    pub fn on_loaded(&mut self, cfg: &ConsumerGroupConfig, now_ms: i64) {
        for (id, m) in &self.members {
            // A classic member's session is its own (JoinGroup's); it is
            // told to rejoin by its heartbeats, not timed while revoking.
            let session = m.meta.classic.as_ref().map_or(cfg.session_timeout_ms, |c| {
                i64::from(c.session_timeout_ms.max(0))
            });
            self.sessions
                .insert(id.clone(), now_ms.saturating_add(session));
            if m.assignment.state == MemberState::UnrevokedPartitions && m.meta.classic.is_none() {
                let timeout = i64::from(m.meta.rebalance_timeout_ms.max(0));
                self.revocations.insert(
                    id.clone(),
                    (now_ms.saturating_add(timeout), m.assignment.epoch),
                );
            }
        }
    }

    /// The state the records make: what a coordinator loading them holds
    /// (timers and caches aside).
    pub fn durable_state(&self) -> impl PartialEq + std::fmt::Debug + '_ {
        (
            &self.epoch,
            &self.assignment_epoch,
            &self.metadata_hash,
            &self.members,
            &self.targets,
            &self.static_members,
            &self.held,
        )
    }
}

/// Kafka's checks of a ConsumerGroupHeartbeat before the group is looked
/// at (INVALID_REQUEST with Kafka's messages, UNSUPPORTED_ASSIGNOR), in
/// Kafka's order. `member_id` is as sent: v0 joins may leave it empty for
/// the broker to choose.
pub fn validate(
    group_id: &str,
    req: &HeartbeatRequest,
    api_version: i16,
    cfg: &ConsumerGroupConfig,
) -> Result<(), HeartbeatError> {
    let invalid = |m: &str| Err(err(ErrorCode::InvalidRequest, m));
    let epoch = req.member_epoch;
    if (api_version >= 1 || epoch > 0 || epoch == Epoch::LEAVE.get()) && req.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    if group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.instance_id.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    if epoch == 0 {
        if req.rebalance_timeout_ms == -1 {
            return invalid("RebalanceTimeoutMs must be provided in first request.");
        }
        if req
            .owned
            .as_ref()
            .is_none_or(|o| o.values().any(|ps| !ps.is_empty()))
        {
            return invalid("TopicPartitions must be empty when (re-)joining.");
        }
        if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
            return invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
            );
        }
    } else if epoch == Epoch::STATIC_LEAVE.get() && req.instance_id.is_none() {
        return invalid("InstanceId can't be null.");
    } else if epoch < Epoch::STATIC_LEAVE.get() {
        return invalid("MemberEpoch is invalid.");
    }
    if let Some(name) = &req.server_assignor {
        if !cfg
            .assignors
            .iter()
            .any(|a| Some(*a) == Assignor::from_name(name))
        {
            let names: Vec<&str> = cfg.assignors.iter().map(|a| a.name()).collect();
            return Err(err(
                ErrorCode::UnsupportedAssignor,
                format!(
                    "ServerAssignor {name} is not supported. Supported assignors: {}.",
                    names.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn new_member(id: &str) -> ConsumerMember {
    ConsumerMember {
        meta: MemberMetadata {
            member_id: id.to_string(),
            rebalance_timeout_ms: -1,
            ..MemberMetadata::default()
        },
        assignment: MemberAssignment::joining(),
    }
}

/// A member's records removed, in the order a replay needs: its current
/// assignment (freeing its partitions), its target, then the member.
fn tombstones(id: &str) -> [Record; 3] {
    [
        Record::CurrentMemberAssignmentTombstone {
            member_id: id.to_string(),
        },
        Record::TargetAssignmentMemberTombstone {
            member_id: id.to_string(),
        },
        Record::MemberMetadataTombstone {
            member_id: id.to_string(),
        },
    ]
}

/// Kafka's epoch rule: a join (0) is always accepted; the member's epoch,
/// or its previous one while it reports owning only what it is assigned
/// (its last answer was lost). Anything else is fenced.
/// Why `re` does not parse, in RE2/J's words (Kafka reports them); None
/// when it parses.
fn regex_error(re: &str) -> Option<String> {
    use regex_syntax::ast::ErrorKind as K;
    let e = match regex_syntax::ast::parse::Parser::new().parse(re) {
        Ok(_) => return regex::Regex::new(re).err().map(|e| e.to_string()),
        Err(e) => e,
    };
    Some(
        match e.kind() {
            K::GroupUnclosed => "missing closing )",
            // RE2/J fails this one as an internal error.
            K::GroupUnopened => "regexp/syntax: internal error",
            K::ClassUnclosed => "missing closing ]",
            K::ClassRangeInvalid | K::ClassRangeLiteral => "invalid character class range",
            K::ClassEscapeInvalid
            | K::EscapeHexEmpty
            | K::EscapeHexInvalid
            | K::EscapeHexInvalidDigit
            | K::EscapeUnrecognized => "invalid escape sequence",
            K::EscapeUnexpectedEof => "trailing backslash at end of expression",
            K::RepetitionMissing => "missing argument to repetition operator",
            K::RepetitionCountInvalid
            | K::RepetitionCountDecimalEmpty
            | K::RepetitionCountUnclosed => "invalid repeat count",
            K::GroupNameDuplicate { .. }
            | K::GroupNameEmpty
            | K::GroupNameInvalid
            | K::GroupNameUnexpectedEof => "invalid named capture",
            K::FlagDanglingNegation
            | K::FlagDuplicate { .. }
            | K::FlagRepeatedNegation { .. }
            | K::FlagUnexpectedEof
            | K::FlagUnrecognized => "invalid or unsupported Perl syntax",
            _ => return Some(e.kind().to_string()),
        }
        .to_string(),
    )
}

fn check_epoch(m: &ConsumerMember, req: &HeartbeatRequest) -> Result<(), HeartbeatError> {
    let received = Epoch::new(req.member_epoch);
    let current = m.assignment.epoch;
    if received == Epoch::ZERO || received == current {
        return Ok(());
    }
    if received > current {
        return Err(err(
            ErrorCode::FencedMemberEpoch,
            format!("The consumer group member has a greater member epoch ({}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.", received.get(), current.get()),
        ));
    }
    let owned_within = req.owned.as_ref().is_some_and(|owned| {
        owned.iter().all(|(t, ps)| {
            ps.is_empty()
                || m.assignment
                    .assigned
                    .get(t)
                    .is_some_and(|a| ps.is_subset(a))
        })
    });
    if received == m.assignment.previous_epoch && owned_within {
        return Ok(());
    }
    Err(err(
        ErrorCode::FencedMemberEpoch,
        format!("The consumer group member has a smaller member epoch ({}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.", received.get(), current.get()),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::types::partition_count;
    use super::*;

    #[test]
    fn a_target_is_computed_at_most_once_per_interval() {
        let cfg = ConsumerGroupConfig {
            assignment_interval_ms: 1_000,
            ..ConsumerGroupConfig::default()
        };
        let image = TopicImage::new([("t".to_string(), TopicId::from_u128(7), 4)]);
        let join = |id: &str| HeartbeatRequest {
            member_id: id.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Assignment::new()),
            ..HeartbeatRequest::default()
        };
        let mut g = ConsumerGroup::new("g");
        let (a, _) = g.heartbeat(&join("a"), &image, &cfg, 0).unwrap();
        assert_eq!(partition_count(&a.assignment.clone().unwrap()), 4);
        // Within the interval: the epoch moves, the target does not.
        let (b, _) = g.heartbeat(&join("b"), &image, &cfg, 100).unwrap();
        assert_eq!(b.assignment, Some(Assignment::new()));
        assert_eq!(g.state(), ConsumerGroupState::Assigning);
        let beat = |epoch: Epoch, owned: &Option<Assignment>| HeartbeatRequest {
            member_id: "a".into(),
            member_epoch: epoch.get(),
            rebalance_timeout_ms: -1,
            owned: owned.clone(),
            ..HeartbeatRequest::default()
        };
        g.heartbeat(&beat(a.member_epoch, &a.assignment), &image, &cfg, 999)
            .unwrap();
        assert_eq!(g.state(), ConsumerGroupState::Assigning);
        // The first heartbeat after it computes the target.
        g.heartbeat(&beat(a.member_epoch, &a.assignment), &image, &cfg, 1_000)
            .unwrap();
        assert_eq!(g.state(), ConsumerGroupState::Reconciling);
        assert_eq!(g.assignment_epoch(), g.epoch());
        // A group left empty assigns its next member at once.
        for id in ["a", "b"] {
            let leave = HeartbeatRequest {
                member_id: id.into(),
                member_epoch: -1,
                ..HeartbeatRequest::default()
            };
            g.heartbeat(&leave, &image, &cfg, 1_001).unwrap();
        }
        let (c, _) = g.heartbeat(&join("c"), &image, &cfg, 1_002).unwrap();
        assert_eq!(partition_count(&c.assignment.unwrap()), 4);
    }

    #[test]
    fn an_ended_group_is_gone_when_its_records_are_replayed() {
        let cfg = ConsumerGroupConfig::default();
        let image = TopicImage::new([("t".to_string(), TopicId::from_u128(7), 2)]);
        let mut g = ConsumerGroup::new("g");
        let join = HeartbeatRequest {
            member_id: "m".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Assignment::new()),
            ..HeartbeatRequest::default()
        };
        let (_, mut log) = g.heartbeat(&join, &image, &cfg, 0).unwrap();
        assert_eq!(g.end(), Err(ErrorCode::NonEmptyGroup), "members stay");
        let leave = HeartbeatRequest {
            member_epoch: -1,
            ..join.clone()
        };
        log.extend(g.heartbeat(&leave, &image, &cfg, 1).unwrap().1);
        let end = g.end().expect("an empty group ends");
        log.extend(end.iter().cloned());
        let mut reloaded = ConsumerGroup::new("g");
        for r in &log {
            let (k, v) = super::super::codec::encode("g", r);
            let (_, decoded) = super::super::codec::decode(&k, v.as_deref())
                .unwrap()
                .unwrap();
            reloaded.replay(&decoded);
        }
        assert!(!reloaded.exists());
        // Before its end, the same log leaves a live (empty) group.
        let mut before = ConsumerGroup::new("g");
        for r in &log[..log.len() - end.len()] {
            before.replay(r);
        }
        assert!(before.exists() && before.members().is_empty());
    }

    #[test]
    fn bad_regexes_are_named_as_re2j_names_them() {
        for (re, why) in [
            ("cg-(a", Some("missing closing )")),
            ("cg-a)", Some("regexp/syntax: internal error")),
            ("cg-[ab", Some("missing closing ]")),
            ("*cg", Some("missing argument to repetition operator")),
            ("cg\\", Some("trailing backslash at end of expression")),
            ("[z-a]", Some("invalid character class range")),
            ("cg-.*", None),
        ] {
            assert_eq!(regex_error(re).as_deref(), why, "{re}");
        }
    }

    #[test]
    fn requests_are_checked_as_kafka_checks_them() {
        let cfg = ConsumerGroupConfig::default();
        let join = HeartbeatRequest {
            member_id: "m".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 300_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Assignment::new()),
            ..HeartbeatRequest::default()
        };
        let beat = HeartbeatRequest {
            member_epoch: 3,
            rebalance_timeout_ms: -1,
            subscribed_topic_names: None,
            owned: None,
            ..join.clone()
        };
        let with = |base: &HeartbeatRequest, f: &dyn Fn(&mut HeartbeatRequest)| {
            let mut r = base.clone();
            f(&mut r);
            r
        };
        type Case<'a> = (&'a str, HeartbeatRequest, i16, Option<(ErrorCode, &'a str)>);
        let cases: Vec<Case> = vec![
            ("a join", join.clone(), 1, None),
            ("a heartbeat", beat.clone(), 1, None),
            ("v0 joins may leave the id to the broker", with(&join, &|r| r.member_id.clear()), 0, None),
            ("v1 joins may not", with(&join, &|r| r.member_id.clear()), 1, Some((ErrorCode::InvalidRequest, "MemberId can't be empty."))),
            ("an empty instance id", with(&beat, &|r| r.instance_id = Some(String::new())), 1, Some((ErrorCode::InvalidRequest, "InstanceId can't be empty."))),
            ("a join without a rebalance timeout", with(&join, &|r| r.rebalance_timeout_ms = -1), 1, Some((ErrorCode::InvalidRequest, "RebalanceTimeoutMs must be provided in first request."))),
            ("a join owning partitions", with(&join, &|r| r.owned = Some([(TopicId::nil(), [0].into())].into())), 1, Some((ErrorCode::InvalidRequest, "TopicPartitions must be empty when (re-)joining."))),
            ("a join without a subscription", with(&join, &|r| r.subscribed_topic_names = None), 1, Some((ErrorCode::InvalidRequest, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."))),
            ("a static leave without an instance", with(&beat, &|r| r.member_epoch = -2), 1, Some((ErrorCode::InvalidRequest, "InstanceId can't be null."))),
            ("an epoch below -2", with(&beat, &|r| r.member_epoch = -3), 1, Some((ErrorCode::InvalidRequest, "MemberEpoch is invalid."))),
            ("an unknown assignor", with(&beat, &|r| r.server_assignor = Some("sticky".into())), 1, Some((ErrorCode::UnsupportedAssignor, "ServerAssignor sticky is not supported. Supported assignors: uniform, range."))),
        ];
        for (name, req, version, want) in cases {
            let got = validate("g", &req, version, &cfg)
                .err()
                .map(|e| (e.code, e.message));
            assert_eq!(got, want.map(|(c, m)| (c, m.to_string())), "{name}");
        }
        assert_eq!(
            validate("", &join, 1, &cfg).unwrap_err().message,
            "GroupId can't be empty."
        );
    }

    #[test]
    fn offset_commits_follow_the_member_epoch() {
        let t = TopicId::from_bytes([1; 16]);
        let image = TopicImage::new([("t".to_string(), t, 4)]);
        let cfg = ConsumerGroupConfig::default();
        let mut g = ConsumerGroup::new("g");
        assert_eq!(g.check_offset_commit("", -1, [(t, 0)]), Ok(()));
        let join = |id: &str| HeartbeatRequest {
            member_id: id.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 60_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Assignment::new()),
            ..HeartbeatRequest::default()
        };
        let (a, _) = g.heartbeat(&join("a"), &image, &cfg, 0).unwrap();
        let e1 = a.member_epoch.get();
        // b joins: a is asked to give up two partitions and keeps its epoch
        // until it does; then it moves on.
        g.heartbeat(&join("b"), &image, &cfg, 1).unwrap();
        let beat = HeartbeatRequest {
            member_id: "a".into(),
            member_epoch: e1,
            rebalance_timeout_ms: -1,
            owned: Some([(t, (0..4).collect())].into()),
            ..HeartbeatRequest::default()
        };
        let (a2, _) = g.heartbeat(&beat, &image, &cfg, 2).unwrap();
        assert_eq!(a2.member_epoch.get(), e1, "revoking keeps the epoch");
        let kept = a2.assignment.unwrap();
        let (a3, _) = g
            .heartbeat(
                &HeartbeatRequest {
                    owned: Some(kept.clone()),
                    ..beat.clone()
                },
                &image,
                &cfg,
                3,
            )
            .unwrap();
        let e2 = a3.member_epoch.get();
        assert!(e2 > e1);
        let kept_one = kept
            .iter()
            .next()
            .map(|(t, ps)| (*t, *ps.iter().next().unwrap()))
            .unwrap();
        let given_away = (0..4).find(|p| !kept[&t].contains(p)).unwrap();
        let cases = [
            ("the current epoch", "a", e2, vec![kept_one], Ok(())),
            (
                "an earlier epoch, for a partition it had then",
                "a",
                e1,
                vec![kept_one],
                Ok(()),
            ),
            (
                "an earlier epoch, for one it gave away",
                "a",
                e1,
                vec![(t, given_away)],
                Err(ErrorCode::StaleMemberEpoch),
            ),
            (
                "a later epoch",
                "a",
                e2 + 1,
                vec![kept_one],
                Err(ErrorCode::StaleMemberEpoch),
            ),
            (
                "not a member",
                "z",
                e2,
                vec![kept_one],
                Err(ErrorCode::UnknownMemberId),
            ),
            (
                "a simple commit to a group with members",
                "",
                -1,
                vec![kept_one],
                Err(ErrorCode::UnknownMemberId),
            ),
        ];
        for (name, member, epoch, partitions, want) in cases {
            assert_eq!(
                g.check_offset_commit(member, epoch, partitions),
                want,
                "{name}"
            );
        }
        // b leaves; a takes its partitions back at a later epoch: a commit
        // from before then covers only what a had then.
        let leave = HeartbeatRequest {
            member_id: "b".into(),
            member_epoch: -1,
            ..HeartbeatRequest::default()
        };
        g.heartbeat(&leave, &image, &cfg, 4).unwrap();
        let (a4, _) = g
            .heartbeat(
                &HeartbeatRequest {
                    member_epoch: e2,
                    owned: Some(kept.clone()),
                    ..beat.clone()
                },
                &image,
                &cfg,
                5,
            )
            .unwrap();
        let e3 = a4.member_epoch.get();
        assert!(e3 > e2);
        assert_eq!(a4.assignment.unwrap()[&t].len(), 4);
        assert_eq!(g.check_offset_commit("a", e2, [kept_one]), Ok(()));
        assert_eq!(
            g.check_offset_commit("a", e2, [(t, given_away)]),
            Err(ErrorCode::StaleMemberEpoch),
            "taken back after that epoch"
        );
        assert_eq!(g.check_offset_commit("a", e3, [(t, given_away)]), Ok(()));
        let e2 = e3;
        assert_eq!(g.check_offset_fetch(Some("a"), e2), Ok(()));
        assert_eq!(
            g.check_offset_fetch(Some("a"), e1),
            Err(ErrorCode::StaleMemberEpoch)
        );
        assert_eq!(g.check_offset_fetch(None, -1), Ok(()));
        assert_eq!(
            g.check_offset_fetch(Some("z"), 1),
            Err(ErrorCode::UnknownMemberId)
        );
    }
}

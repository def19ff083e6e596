//! Classic members inside a consumer-protocol group, and a group's moves
//! between the two protocols (KIP-848's online migration), as Kafka 4.x's
//! GroupMetadataManager serves them:
//! - a classic consumer (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) may
//!   join a consumer-protocol group that has members, whatever
//!   `group.consumer.migration.policy` says. The broker's assignor decides
//!   its partitions; it is reconciled when it joins, and told to join again
//!   (REBALANCE_IN_PROGRESS) whenever its target moves on;
//! - a consumer-protocol member joining a classic group with members turns
//!   it into a consumer-protocol group (the upgrade), its classic members
//!   keeping their partitions and epochs;
//! - when the last consumer-protocol member leaves, the classic members
//!   left become a classic group again (the downgrade) and rejoin.
//!
//! Differences from Kafka: a static classic member replacing the last
//! consumer-protocol member does not downgrade the group (the downgrade
//! waits for the next fence); the join and sync timeouts share one timer
//! per member.

use bytes::Bytes;

use super::*;
use crate::consumer::embedded::{self, NamedPartitions};
use crate::snapshot::{GroupMetadataSnapshot, MemberSnapshot};

/// The protocol type classic consumers use.
const CONSUMER: &str = "consumer";

/// A JoinGroup from a classic member to a consumer-protocol group.
#[derive(Clone, Debug, Default)]
pub struct ClassicJoin {
    /// Empty for a member that has no id yet.
    pub member_id: String,
    /// The id given to a member that has none.
    pub fresh_id: String,
    pub instance_id: Option<String>,
    /// JoinGroup v4+ from a dynamic member: an id is handed out first.
    pub requires_known_member_id: bool,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    /// (name, metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassicJoinAnswer {
    /// MEMBER_ID_REQUIRED: join again with this id.
    MemberIdRequired { member_id: String },
    /// The member's epoch is its generation; the broker assigned it, so it
    /// is never the leader.
    Joined {
        member_id: String,
        generation_id: i32,
        protocol_name: String,
    },
}

fn named(a: &Assignment, topics: &TopicImage) -> NamedPartitions {
    a.iter()
        .filter_map(|(id, ps)| {
            let name = topics.name_of(*id)?;
            Some((name.to_string(), ps.iter().copied().collect()))
        })
        .collect()
}

fn by_id(partitions: &NamedPartitions, topics: &TopicImage) -> Assignment {
    let mut a = Assignment::new();
    for (name, ps) in partitions {
        if let Some((id, count)) = topics.get(name) {
            let valid = ps.iter().copied().filter(|p| (0..count).contains(p));
            a.entry(id).or_default().extend(valid);
        }
    }
    a.retain(|_, ps| !ps.is_empty());
    a
}

fn not_found(message: String) -> HeartbeatError {
    err(ErrorCode::GroupIdNotFound, message)
}

impl ConsumerGroup {
    /// A classic group with members taken over by a consumer-protocol
    /// member's first heartbeat (the upgrade): its members keep their
    /// generation as their epoch and their partitions as their target.
    /// Returns the new group and its records (applied already); the caller
    /// ends the classic group in the same write.
    pub fn from_classic(
        classic: &crate::Group,
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
        now_ms: i64,
    ) -> Result<(ConsumerGroup, Vec<Record>), HeartbeatError> {
        let gid = classic.group_id();
        let why = |reason: &str| {
            not_found(format!(
                "Cannot upgrade classic group {gid} to consumer group because {reason}."
            ))
        };
        if !cfg.migration.upgrades() {
            return Err(why("online upgrade is disabled"));
        }
        if classic.protocol_type() != Some(CONSUMER) {
            return Err(why("the group does not use the consumer embedded protocol"));
        }
        if classic.members().len() > cfg.max_size {
            return Err(why(
                "the group size exceeds the consumer group maximum size",
            ));
        }
        let malformed = || why("the embedded consumer protocol is malformed");
        let protocol = classic.protocol_name().ok_or_else(malformed)?;
        let epoch = Epoch::new(classic.generation_id());
        let mut group = ConsumerGroup::new(gid);
        let mut members = Vec::new();
        let mut taken = BTreeSet::new();
        for m in classic.members() {
            let metadata = m
                .protocols()
                .iter()
                .find(|p| p.name == protocol)
                .map(|p| p.metadata.clone())
                .unwrap_or_default();
            let sub = embedded::decode_subscription(&metadata).map_err(|_| malformed())?;
            let assigned = match m.assignment().filter(|b| !b.is_empty()) {
                None => Assignment::new(),
                Some(b) => {
                    let a = embedded::decode_assignment(b).map_err(|_| malformed())?;
                    if a.user_data.as_ref().is_some_and(|d| !d.is_empty()) {
                        return Err(why("an unsupported custom assignor is in use. Please refer to the documentation or switch to a default assignor before re-attempting the upgrade"));
                    }
                    let mut a = by_id(&a.partitions, topics);
                    // A partition given twice stays with the first member.
                    for (t, ps) in a.iter_mut() {
                        ps.retain(|p| taken.insert((*t, *p)));
                    }
                    a.retain(|_, ps| !ps.is_empty());
                    a
                }
            };
            let mut names: Vec<String> = sub.topics.clone();
            names.sort();
            names.dedup();
            let meta = MemberMetadata {
                member_id: m.member_id().to_string(),
                instance_id: m.group_instance_id().map(str::to_string),
                rack_id: sub.rack_id.clone(),
                client_id: m.client_id().to_string(),
                client_host: m.client_host().to_string(),
                subscribed_topic_names: names,
                subscribed_topic_regex: None,
                rebalance_timeout_ms: m.rebalance_timeout_ms(),
                server_assignor: None,
                classic: Some(ClassicMetadata {
                    session_timeout_ms: m.session_timeout_ms(),
                    protocols: m
                        .protocols()
                        .iter()
                        .map(|p| (p.name.clone(), p.metadata.clone()))
                        .collect(),
                }),
            };
            members.push((meta, assigned));
        }
        let mut records: Vec<Record> = members
            .iter()
            .map(|(meta, _)| Record::MemberMetadata(Box::new(meta.clone())))
            .collect();
        for r in &records {
            group.replay(r);
        }
        let metadata_hash = group.metadata_hash(None, &[], topics);
        let mut rest = vec![Record::Metadata {
            epoch,
            metadata_hash,
        }];
        for (meta, assigned) in &members {
            rest.push(Record::TargetAssignmentMember {
                member_id: meta.member_id.clone(),
                assignment: assigned.clone(),
            });
        }
        rest.push(Record::TargetAssignmentMetadata { epoch });
        for (meta, assigned) in &members {
            rest.push(Record::CurrentMemberAssignment {
                member_id: meta.member_id.clone(),
                assignment: MemberAssignment {
                    epoch,
                    previous_epoch: epoch,
                    state: MemberState::Stable,
                    assigned: assigned.clone(),
                    pending_revocation: Assignment::new(),
                    assigned_at: BTreeMap::new(),
                },
            });
        }
        for r in &rest {
            group.replay(r);
        }
        records.extend(rest);
        for (meta, _) in &members {
            let session = meta.classic.as_ref().map_or(0, |c| c.session_timeout_ms);
            group.sessions.insert(
                meta.member_id.clone(),
                now_ms.saturating_add(i64::from(session.max(0))),
            );
        }
        Ok((group, records))
    }

    /// The classic group this one became when fencing left only classic
    /// members (set by the fence that ended this group), taken once.
    pub fn take_downgrade(&mut self) -> Option<GroupMetadataSnapshot> {
        self.downgraded.take()
    }

    /// The classic group the members but `fenced` would form, when they are
    /// all classic and the policy and `group.classic.max.size` allow: its
    /// generation is the group epoch, each member's assignment its target,
    /// and the protocol the one most members prefer among those all support.
    pub(super) fn downgrade_to(
        &self,
        fenced: &[String],
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
    ) -> Option<GroupMetadataSnapshot> {
        if !cfg.migration.downgrades() {
            return None;
        }
        let remaining: Vec<&ConsumerMember> = self
            .members
            .values()
            .filter(|m| !fenced.contains(&m.meta.member_id))
            .collect();
        if remaining.is_empty() || remaining.len() > cfg.classic_max_size {
            return None;
        }
        let classic: Vec<(&ConsumerMember, &ClassicMetadata)> = remaining
            .iter()
            .map(|m| m.meta.classic.as_ref().map(|c| (*m, c)))
            .collect::<Option<_>>()?;
        let supported_by_all = |name: &str| {
            classic
                .iter()
                .all(|(_, c)| c.protocols.iter().any(|(n, _)| n == name))
        };
        let mut votes: Vec<(&str, usize)> = Vec::new();
        for (_, c) in &classic {
            let Some((choice, _)) = c.protocols.iter().find(|(n, _)| supported_by_all(n)) else {
                continue;
            };
            match votes.iter_mut().find(|(n, _)| n == choice) {
                Some((_, count)) => *count += 1,
                None => votes.push((choice, 1)),
            }
        }
        let protocol = votes
            .iter()
            .fold(None::<(&str, usize)>, |best, &(n, c)| match best {
                Some((_, bc)) if bc >= c => best,
                _ => Some((n, c)),
            })?
            .0
            .to_string();
        let empty = Assignment::new();
        let members = classic
            .iter()
            .map(|(m, c)| {
                let metadata = c
                    .protocols
                    .iter()
                    .find(|(n, _)| *n == protocol)
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default();
                let target = self.targets.get(&m.meta.member_id).unwrap_or(&empty);
                let version = embedded::subscription_version(&metadata);
                MemberSnapshot {
                    member_id: m.meta.member_id.clone(),
                    group_instance_id: m.meta.instance_id.clone(),
                    client_id: m.meta.client_id.clone(),
                    client_host: m.meta.client_host.clone(),
                    rebalance_timeout_ms: m.meta.rebalance_timeout_ms,
                    session_timeout_ms: c.session_timeout_ms,
                    subscription: metadata,
                    assignment: embedded::encode_assignment(version, &named(target, topics)),
                }
            })
            .collect::<Vec<_>>();
        Some(GroupMetadataSnapshot {
            protocol_type: Some(CONSUMER.to_string()),
            generation_id: self.epoch.get(),
            protocol_name: Some(protocol),
            leader: members.first().map(|m| m.member_id.clone()),
            current_state_timestamp_ms: None,
            members,
        })
    }

    /// Whether a classic member offering `protocols` fits the classic
    /// members already here (other than `id`): one protocol all support.
    fn takes_classic_protocols(&self, id: &str, protocols: &[(String, Bytes)]) -> bool {
        let others: Vec<&ClassicMetadata> = self
            .members
            .values()
            .filter(|m| m.meta.member_id != id)
            .filter_map(|m| m.meta.classic.as_ref())
            .collect();
        protocols.iter().any(|(name, _)| {
            others
                .iter()
                .all(|c| c.protocols.iter().any(|(n, _)| n == name))
        })
    }

    /// A classic member's JoinGroup: it joins (or rejoins) with the
    /// subscription and owned partitions of its first protocol, and is
    /// reconciled at once; its generation is its new member epoch.
    pub fn classic_join(
        &mut self,
        req: &ClassicJoin,
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
        now_ms: i64,
    ) -> Result<(ClassicJoinAnswer, Vec<Record>), HeartbeatError> {
        let unknown = req.member_id.is_empty();
        let id = if unknown {
            req.fresh_id.clone()
        } else {
            req.member_id.clone()
        };
        if !self.members.contains_key(&id) && self.members.len() >= cfg.max_size {
            return Err(err(
                ErrorCode::GroupMaxSizeReached,
                format!(
                    "The consumer group has reached its maximum capacity of {} members.",
                    cfg.max_size
                ),
            ));
        }
        if req.protocol_type != CONSUMER
            || req.protocols.is_empty()
            || !self.takes_classic_protocols(&id, &req.protocols)
        {
            return Err(err(
                ErrorCode::InconsistentGroupProtocol,
                format!("Member {id}'s protocols are not supported."),
            ));
        }
        if unknown && req.requires_known_member_id && req.instance_id.is_none() {
            return Ok((
                ClassicJoinAnswer::MemberIdRequired { member_id: id },
                vec![],
            ));
        }
        let mut records = Vec::new();
        let (old, inherited) = match &req.instance_id {
            None => (
                self.members
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| new_member(&id)),
                None,
            ),
            Some(instance) => match self.static_members.get(instance).cloned() {
                None if unknown => (new_member(&id), None),
                None => {
                    return Err(err(
                        ErrorCode::UnknownMemberId,
                        format!("Instance id {instance} is unknown."),
                    ))
                }
                Some(holder) if unknown => {
                    let (m, target, taken_over) = self.take_over(&holder, &id);
                    records.extend(taken_over);
                    (m, Some((holder, target)))
                }
                Some(holder) if holder != id => {
                    return Err(err(
                        ErrorCode::FencedInstanceId,
                        format!("Static member {id} with instance id {instance} was fenced by member {holder}."),
                    ))
                }
                Some(holder) => (self.members[&holder].clone(), None),
            },
        };
        let (_, first) = &req.protocols[0];
        let sub = embedded::decode_subscription(first).map_err(|_| {
            err(
                ErrorCode::UnknownServerError,
                "Malformed embedded consumer protocol in subscription deserialization.",
            )
        })?;
        let mut meta = old.meta.clone();
        meta.member_id = id.clone();
        meta.instance_id = req.instance_id.clone();
        meta.rack_id = sub.rack_id.clone();
        if req.rebalance_timeout_ms != -1 {
            meta.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        let mut names = sub.topics.clone();
        names.sort();
        names.dedup();
        meta.subscribed_topic_names = names;
        meta.subscribed_topic_regex = None;
        meta.client_id = req.client_id.clone();
        meta.client_host = req.client_host.clone();
        meta.classic = Some(ClassicMetadata {
            session_timeout_ms: req.session_timeout_ms,
            protocols: req.protocols.clone(),
        });
        let owned = by_id(&sub.owned, topics);
        let (next, _, records) = self.update_member(
            &old,
            inherited,
            meta,
            Some(&owned),
            records,
            topics,
            cfg,
            now_ms,
        )?;
        self.revocations.remove(&id);
        self.sessions.insert(
            id.clone(),
            now_ms.saturating_add(i64::from(req.session_timeout_ms.max(0))),
        );
        // The sync timeout: it must send SyncGroup within its rebalance
        // timeout.
        let rebalance = i64::from(self.members[&id].meta.rebalance_timeout_ms.max(0));
        self.classic_timers
            .insert(id.clone(), now_ms.saturating_add(rebalance));
        Ok((
            ClassicJoinAnswer::Joined {
                member_id: id,
                generation_id: next.epoch.get(),
                protocol_name: req.protocols[0].0.clone(),
            },
            records,
        ))
    }

    /// The member a static member's new id takes over: its records
    /// removed, the new id given its metadata, its target and its
    /// assignment at epoch 0.
    pub(super) fn take_over(
        &self,
        holder: &str,
        id: &str,
    ) -> (ConsumerMember, Assignment, Vec<Record>) {
        let target = self.targets.get(holder).cloned().unwrap_or_default();
        let mut records: Vec<Record> = tombstones(holder).into();
        let mut m = self.members[holder].clone();
        m.meta.member_id = id.to_string();
        m.assignment.epoch = Epoch::ZERO;
        m.assignment.previous_epoch = Epoch::ZERO;
        records.push(Record::MemberMetadata(Box::new(m.meta.clone())));
        records.push(Record::TargetAssignmentMember {
            member_id: id.to_string(),
            assignment: target.clone(),
        });
        records.push(Record::CurrentMemberAssignment {
            member_id: id.to_string(),
            assignment: m.assignment.clone(),
        });
        (m, target, records)
    }

    /// The classic member a SyncGroup or Heartbeat names, at its epoch.
    fn classic_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<&ConsumerMember, HeartbeatError> {
        let m = match instance_id {
            None => self.members.get(member_id).ok_or_else(|| {
                err(
                    ErrorCode::UnknownMemberId,
                    format!("Member {member_id} is not a member of group {}.", self.id),
                )
            })?,
            Some(instance) => {
                let holder = self.static_members.get(instance).ok_or_else(|| {
                    err(
                        ErrorCode::UnknownMemberId,
                        format!(
                            "Member with instance id {instance} is not a member of group {}.",
                            self.id
                        ),
                    )
                })?;
                if holder != member_id {
                    return Err(err(
                        ErrorCode::FencedInstanceId,
                        format!("Static member {member_id} with instance id {instance} was fenced by member {holder}."),
                    ));
                }
                &self.members[holder]
            }
        };
        if m.meta.classic.is_none() {
            return Err(err(
                ErrorCode::UnknownMemberId,
                format!("Member {member_id} does not use the classic protocol."),
            ));
        }
        if generation != m.assignment.epoch.get() {
            return Err(err(
                ErrorCode::IllegalGeneration,
                format!(
                    "The request generation id {generation} is not equal to the member epoch {} of member {member_id}.",
                    m.assignment.epoch.get()
                ),
            ));
        }
        Ok(m)
    }

    /// Starts the member's join timeout (its rebalance timeout) unless a
    /// timer runs already.
    fn expect_rejoin(&mut self, member_id: &str, now_ms: i64) {
        let timeout = self
            .members
            .get(member_id)
            .map_or(0, |m| i64::from(m.meta.rebalance_timeout_ms.max(0)));
        self.classic_timers
            .entry(member_id.to_string())
            .or_insert(now_ms.saturating_add(timeout));
    }

    fn restart_session(&mut self, member_id: &str, now_ms: i64) {
        let session = self.members[member_id]
            .meta
            .classic
            .as_ref()
            .map_or(0, |c| c.session_timeout_ms);
        self.sessions.insert(
            member_id.to_string(),
            now_ms.saturating_add(i64::from(session.max(0))),
        );
    }

    /// A classic member's SyncGroup: its assigned partitions, in the
    /// embedded protocol's version of its first protocol's metadata.
    #[allow(clippy::too_many_arguments)]
    pub fn classic_sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        topics: &TopicImage,
        now_ms: i64,
    ) -> Result<Bytes, HeartbeatError> {
        let m = self.classic_member(member_id, instance_id, generation)?;
        let c = m.meta.classic.as_ref().expect("checked classic");
        let (first, metadata) = c.protocols.first().cloned().unwrap_or_default();
        if let Some(t) = protocol_type.filter(|t| *t != CONSUMER) {
            return Err(err(
                ErrorCode::InconsistentGroupProtocol,
                format!("The protocol type {t} from member {member_id} request is not equal to the group protocol type consumer."),
            ));
        }
        if let Some(n) = protocol_name.filter(|n| *n != first) {
            return Err(err(
                ErrorCode::InconsistentGroupProtocol,
                format!("The protocol name {n} from member {member_id} request is not equal to the protocol name {first} returned in the join response."),
            ));
        }
        let id = m.meta.member_id.clone();
        if self.epoch > m.assignment.epoch && m.assignment.state != MemberState::UnrevokedPartitions
        {
            self.expect_rejoin(&id, now_ms);
            return Err(err(
                ErrorCode::RebalanceInProgress,
                format!(
                    "A new rebalance is triggered in group {} and member {id} should rejoin to catch up.",
                    self.id
                ),
            ));
        }
        let assigned = named(&m.assignment.assigned, topics);
        self.classic_timers.remove(&id);
        self.restart_session(&id, now_ms);
        Ok(embedded::encode_assignment(
            embedded::subscription_version(&metadata),
            &assigned,
        ))
    }

    /// A classic member's Heartbeat: REBALANCE_IN_PROGRESS when it must
    /// join again to move towards its target (the group moved on, it has
    /// partitions to give up, or partitions it waits for are free).
    pub fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now_ms: i64,
    ) -> Result<(), HeartbeatError> {
        let m = self.classic_member(member_id, instance_id, generation)?;
        let id = m.meta.member_id.clone();
        let rejoin = m.assignment.epoch < self.epoch
            || match m.assignment.state {
                MemberState::UnrevokedPartitions => true,
                MemberState::UnreleasedPartitions => !self.waits_for_unreleased(&id),
                _ => false,
            };
        self.restart_session(&id, now_ms);
        if rejoin {
            self.expect_rejoin(&id, now_ms);
            return Err(err(
                ErrorCode::RebalanceInProgress,
                format!("A new rebalance is triggered in group {} and member {id} should rejoin to catch up.", self.id),
            ));
        }
        Ok(())
    }

    /// Whether a partition of the member's target is still held by another.
    fn waits_for_unreleased(&self, member_id: &str) -> bool {
        let Some(m) = self.members.get(member_id) else {
            return false;
        };
        let mine: BTreeSet<(TopicId, i32)> = m.assignment.holds().collect();
        self.targets.get(member_id).is_some_and(|t| {
            t.iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                .any(|tp| !mine.contains(&tp) && self.held.contains_key(&tp))
        })
    }

    /// LeaveGroup for members of a consumer-protocol group (classic ones,
    /// or any named by an admin): each is checked, the valid ones fenced
    /// together.
    pub fn classic_leave(
        &mut self,
        leaving: &[(String, Option<String>)],
        topics: &TopicImage,
        cfg: &ConsumerGroupConfig,
    ) -> (Vec<Result<(), ErrorCode>>, Vec<Record>) {
        let mut ids: Vec<String> = Vec::new();
        let results = leaving
            .iter()
            .map(|(member_id, instance)| {
                let id = match instance {
                    None => self
                        .members
                        .contains_key(member_id)
                        .then(|| member_id.clone())
                        .ok_or(ErrorCode::UnknownMemberId)?,
                    Some(i) => {
                        let holder = self
                            .static_members
                            .get(i)
                            .ok_or(ErrorCode::UnknownMemberId)?;
                        if !member_id.is_empty() && holder != member_id {
                            return Err(ErrorCode::FencedInstanceId);
                        }
                        holder.clone()
                    }
                };
                if !ids.contains(&id) {
                    ids.push(id);
                }
                Ok(())
            })
            .collect();
        if ids.is_empty() {
            return (results, Vec::new());
        }
        for id in &ids {
            self.sessions.remove(id);
            self.revocations.remove(id);
            self.classic_timers.remove(id);
        }
        let records = self.fence(&ids, topics, cfg);
        (results, records)
    }
}

//! A test broker around one [`Group`]: it holds waiting requests by member id
//! exactly as the real broker must (deliver an outcome first, then hold the
//! call's own request), asserts that every answer in an outcome is for a held
//! request, and checks the group's invariants after every call.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use strand_group::*;
use strand_protocol::ErrorCode;

pub const SESSION: i32 = 10_000;
pub const REBALANCE: i32 = 30_000;

pub fn config() -> GroupConfig {
    GroupConfig::default()
}

pub fn protocols(names: &[(&str, &str)]) -> Vec<Protocol> {
    names
        .iter()
        .map(|(n, m)| Protocol::new(n.to_string(), Bytes::copy_from_slice(m.as_bytes())))
        .collect()
}

/// A JoinGroup to build: v4+ (member id required), consumer, protocol
/// "range" with metadata "m", session 10 s, rebalance 30 s.
#[derive(Debug, Clone)]
pub struct J {
    pub member: &'static str,
    pub instance: Option<&'static str>,
    pub protocol_type: &'static str,
    pub protocols: Vec<(&'static str, &'static str)>,
    pub session: i32,
    pub rebalance: i32,
    pub known: bool,
}

pub fn j(member: &'static str) -> J {
    J {
        member,
        instance: None,
        protocol_type: "consumer",
        protocols: vec![("range", "m")],
        session: SESSION,
        rebalance: REBALANCE,
        known: true,
    }
}

impl J {
    pub fn inst(mut self, instance: &'static str) -> Self {
        self.instance = Some(instance);
        self
    }
    /// JoinGroup v0-v3: no MEMBER_ID_REQUIRED round trip.
    pub fn old(mut self) -> Self {
        self.known = false;
        self
    }
    pub fn protos(mut self, protocols: &[(&'static str, &'static str)]) -> Self {
        self.protocols = protocols.to_vec();
        self
    }
    pub fn ptype(mut self, protocol_type: &'static str) -> Self {
        self.protocol_type = protocol_type;
        self
    }
    pub fn session(mut self, ms: i32) -> Self {
        self.session = ms;
        self
    }
    pub fn rebalance(mut self, ms: i32) -> Self {
        self.rebalance = ms;
        self
    }
    pub fn request(&self) -> JoinRequest {
        JoinRequest {
            member_id: self.member.to_string(),
            group_instance_id: self.instance.map(str::to_string),
            require_known_member_id: self.known,
            client_id: "client".to_string(),
            client_host: "/127.0.0.1".to_string(),
            rebalance_timeout_ms: self.rebalance,
            session_timeout_ms: self.session,
            protocol_type: self.protocol_type.to_string(),
            protocols: protocols(&self.protocols),
        }
    }
}

/// A SyncGroup to build (no protocol type/name: < v5).
#[derive(Debug, Clone)]
pub struct S {
    pub member: &'static str,
    pub generation: i32,
    pub instance: Option<&'static str>,
    pub assign: Vec<(&'static str, &'static str)>,
    pub protocol_type: Option<&'static str>,
    pub protocol_name: Option<&'static str>,
}

pub fn s(member: &'static str, generation: i32) -> S {
    S {
        member,
        generation,
        instance: None,
        assign: Vec::new(),
        protocol_type: None,
        protocol_name: None,
    }
}

impl S {
    pub fn assign(mut self, assign: &[(&'static str, &'static str)]) -> Self {
        self.assign = assign.to_vec();
        self
    }
    pub fn inst(mut self, instance: &'static str) -> Self {
        self.instance = Some(instance);
        self
    }
    /// SyncGroup v5+.
    pub fn names(mut self, protocol_type: &'static str, protocol_name: &'static str) -> Self {
        self.protocol_type = Some(protocol_type);
        self.protocol_name = Some(protocol_name);
        self
    }
    pub fn request(&self) -> SyncRequest {
        SyncRequest {
            member_id: self.member.to_string(),
            group_instance_id: self.instance.map(str::to_string),
            generation_id: self.generation,
            protocol_type: self.protocol_type.map(str::to_string),
            protocol_name: self.protocol_name.map(str::to_string),
            assignments: self
                .assign
                .iter()
                .map(|(m, a)| (m.to_string(), Bytes::copy_from_slice(a.as_bytes())))
                .collect(),
        }
    }
}

/// The test broker.
pub struct Harness {
    pub group: Group,
    pub now: i64,
    pub next_id: u32,
    pub held_joins: BTreeSet<String>,
    pub held_syncs: BTreeSet<String>,
    pub join_answers: BTreeMap<String, JoinResponse>,
    pub sync_answers: BTreeMap<String, SyncResponse>,
    pub persists: VecDeque<PersistRequest>,
    /// Every answer delivered from an outcome, in order (key, answer).
    pub delivered_joins: Vec<(String, JoinResponse)>,
    pub delivered_syncs: Vec<(String, SyncResponse)>,
    generation: i32,
}

impl Harness {
    pub fn new(config: GroupConfig) -> Self {
        Harness::with_group(Group::new("g", config, 0))
    }

    pub fn with_group(group: Group) -> Self {
        let generation = group.generation_id();
        let h = Harness {
            group,
            now: 0,
            next_id: 0,
            held_joins: BTreeSet::new(),
            held_syncs: BTreeSet::new(),
            join_answers: BTreeMap::new(),
            sync_answers: BTreeMap::new(),
            persists: VecDeque::new(),
            delivered_joins: Vec::new(),
            delivered_syncs: Vec::new(),
            generation,
        };
        check_invariants(&h.group);
        h
    }

    /// New member ids are m1, m2, ... in the order they are handed out.
    pub fn join(&mut self, j: &J) -> Reply<JoinResponse> {
        self.join_request(j.request())
    }

    pub fn join_request(&mut self, req: JoinRequest) -> Reply<JoinResponse> {
        let request_member = req.member_id.clone();
        let next = self.next_id + 1;
        let mut used = false;
        let (reply, outcome) = self.group.join(
            req,
            || {
                used = true;
                format!("m{next}")
            },
            self.now,
        );
        if used {
            self.next_id = next;
        }
        self.deliver(outcome);
        match &reply {
            Reply::Now(r) => {
                let key = if r.member_id.is_empty() {
                    request_member.as_str()
                } else {
                    r.member_id.as_str()
                };
                self.join_answers.insert(key.to_string(), r.clone());
            }
            Reply::Held { member_id } => {
                assert!(
                    self.held_joins.insert(member_id.clone()),
                    "second held join for {member_id}"
                );
            }
        }
        self.after();
        reply
    }

    pub fn sync(&mut self, s: &S) -> Reply<SyncResponse> {
        self.sync_request(s.request())
    }

    pub fn sync_request(&mut self, req: SyncRequest) -> Reply<SyncResponse> {
        let member = req.member_id.clone();
        let (reply, outcome) = self.group.sync(req, self.now);
        self.deliver(outcome);
        match &reply {
            Reply::Now(r) => {
                self.sync_answers.insert(member, r.clone());
            }
            Reply::Held { member_id } => {
                assert_eq!(*member_id, member);
                assert!(
                    self.held_syncs.insert(member_id.clone()),
                    "second held sync for {member_id}"
                );
            }
        }
        self.after();
        reply
    }

    pub fn heartbeat(
        &mut self,
        member: &str,
        instance: Option<&str>,
        gen: i32,
    ) -> Result<(), ErrorCode> {
        let req = HeartbeatRequest {
            member_id: member.to_string(),
            group_instance_id: instance.map(str::to_string),
            generation_id: gen,
        };
        let result = self.group.heartbeat(&req, self.now);
        self.after();
        result
    }

    pub fn leave(
        &mut self,
        members: &[(&str, Option<&str>)],
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        let members: Vec<LeaveMember> = members
            .iter()
            .map(|(m, i)| LeaveMember {
                member_id: m.to_string(),
                group_instance_id: i.map(str::to_string),
            })
            .collect();
        let (result, outcome) = self.group.leave(&members, self.now);
        self.deliver(outcome);
        self.after();
        result
    }

    pub fn tick(&mut self, at: i64) {
        assert!(at >= self.now, "time moved back");
        self.now = at;
        let outcome = self.group.tick(at);
        self.deliver(outcome);
        if let Some(next) = self.group.next_deadline() {
            assert!(next > at, "deadline {next} still due after tick at {at}");
        }
        self.after();
    }

    /// Reports the oldest metadata write.
    pub fn persist(&mut self, result: Result<(), ErrorCode>) -> PersistRequest {
        let write = self.persists.pop_front().expect("a write to report");
        let outcome = self.group.on_persisted(write.id, result, self.now);
        self.deliver(outcome);
        self.after();
        write
    }

    pub fn commit(
        &mut self,
        member: &str,
        gen: i32,
        instance: Option<&str>,
    ) -> Result<(), ErrorCode> {
        let result = self
            .group
            .validate_offset_commit(member, gen, instance, self.now);
        self.after();
        result
    }

    /// A coordinator failover: the group is rebuilt from its snapshot.
    pub fn reload(&mut self) {
        assert!(self.held_joins.is_empty() && self.held_syncs.is_empty());
        let snapshot = self.group.snapshot();
        let config = self.group.config();
        self.group = Group::from_snapshot("g", snapshot, config, self.now).expect("loadable");
        self.persists.clear();
        self.after();
    }

    pub fn unload(&mut self) {
        let outcome = self.group.unload(self.now);
        self.deliver(outcome);
        self.after();
    }

    pub fn deliver(&mut self, outcome: Outcome) {
        for (member_id, r) in outcome.joins {
            assert!(
                self.held_joins.remove(&member_id),
                "join answer for {member_id}, which holds no join: {r:?}"
            );
            self.delivered_joins.push((member_id.clone(), r.clone()));
            self.join_answers.insert(member_id, r);
        }
        for (member_id, r) in outcome.syncs {
            assert!(
                self.held_syncs.remove(&member_id),
                "sync answer for {member_id}, which holds no sync: {r:?}"
            );
            self.delivered_syncs.push((member_id.clone(), r.clone()));
            self.sync_answers.insert(member_id, r);
        }
        self.persists.extend(outcome.persists);
    }

    fn after(&mut self) {
        let g = &self.group;
        check_invariants(g);
        assert!(
            g.generation_id() >= self.generation,
            "generation moved back from {} to {}",
            self.generation,
            g.generation_id()
        );
        self.generation = g.generation_id();
        // The broker's view of held requests is the group's.
        if g.state() != GroupState::Dead {
            let joins: BTreeSet<String> = g
                .members()
                .iter()
                .filter(|m| m.is_awaiting_join())
                .map(|m| m.member_id().to_string())
                .collect();
            let syncs: BTreeSet<String> = g
                .members()
                .iter()
                .filter(|m| m.is_awaiting_sync())
                .map(|m| m.member_id().to_string())
                .collect();
            assert_eq!(joins, self.held_joins, "held joins");
            assert_eq!(syncs, self.held_syncs, "held syncs");
        } else {
            assert!(self.held_joins.is_empty() && self.held_syncs.is_empty());
        }
    }
}

/// What holds between any two calls.
pub fn check_invariants(g: &Group) {
    let state = g.state();
    let members = g.members();
    if state != GroupState::Dead {
        assert_eq!(
            state == GroupState::Empty,
            members.is_empty(),
            "Empty iff no members: {state} with {} members",
            members.len()
        );
        match g.leader() {
            Some(leader) => assert!(g.member(leader).is_some(), "leader {leader} not a member"),
            None => assert!(members.is_empty(), "members without a leader"),
        }
        if members.is_empty() {
            assert_eq!(g.leader(), None);
        }
    }
    let ids: BTreeSet<&str> = members.iter().map(|m| m.member_id()).collect();
    assert_eq!(ids.len(), members.len(), "duplicate member ids");
    let instances: Vec<&str> = members
        .iter()
        .filter_map(|m| m.group_instance_id())
        .collect();
    let unique: BTreeSet<&str> = instances.iter().copied().collect();
    assert_eq!(unique.len(), instances.len(), "duplicate instance ids");
    for p in g.pending_member_ids() {
        assert!(!ids.contains(p), "pending id {p} is also a member");
    }
    if matches!(state, GroupState::CompletingRebalance | GroupState::Stable) {
        let protocol = g.protocol_name().expect("a selected protocol");
        for m in members {
            assert!(
                m.protocols().iter().any(|p| p.name == protocol),
                "{} does not support {protocol}",
                m.member_id()
            );
        }
    }
    if state == GroupState::Stable {
        for m in members {
            assert!(
                m.assignment().is_some(),
                "{} has no assignment",
                m.member_id()
            );
        }
    }
    if state == GroupState::Empty {
        assert_eq!(g.protocol_name(), None);
    }
    for m in members {
        if m.is_awaiting_join() {
            assert!(
                state == GroupState::PreparingRebalance
                    || (state == GroupState::Stable && g.writes_in_flight() > 0),
                "{} waits in JoinGroup while {state}",
                m.member_id()
            );
        }
        if m.is_awaiting_sync() {
            assert_eq!(
                state,
                GroupState::CompletingRebalance,
                "{} waits in SyncGroup",
                m.member_id()
            );
        }
    }
    for p in g.pending_sync_member_ids() {
        assert!(ids.contains(p), "{p} owes a SyncGroup but is no member");
        assert!(matches!(
            state,
            GroupState::CompletingRebalance | GroupState::Stable
        ));
    }
    if state == GroupState::PreparingRebalance {
        assert!(g.next_deadline().is_some(), "a rebalance without a timer");
    }
    if state == GroupState::Dead {
        assert_eq!(g.next_deadline(), None);
    }
}

//! Random sequences of joins, syncs, heartbeats, leaves, commits, ticks,
//! write results and failovers from a few clients that follow the protocol
//! loosely (stale ids, wrong generations, changed protocols). The test broker
//! checks after every call: the invariants of `common::check_invariants`, a
//! generation that never decreases, that every answer in an outcome is for a
//! request held under that member id and that no member id holds two joins at
//! once, and that the broker's held requests are exactly the group's waiters.

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::*;
use proptest::prelude::*;
use strand_group::*;
use strand_protocol::ErrorCode;

const CLIENTS: usize = 4;

#[derive(Debug, Clone)]
enum IdPick {
    /// The client's current member id.
    Own,
    /// No member id.
    Empty,
    /// Some member id handed out earlier (maybe another client's).
    Issued(usize),
}

#[derive(Debug, Clone)]
enum GenPick {
    Own,
    Group,
    Other(i32),
}

#[derive(Debug, Clone)]
enum Op {
    Join {
        client: usize,
        id: IdPick,
        known: bool,
        protocols: u8,
    },
    Sync {
        client: usize,
        id: IdPick,
        gen: GenPick,
        assign: bool,
    },
    Heartbeat {
        client: usize,
        gen: GenPick,
    },
    Leave {
        client: usize,
        by_instance: bool,
    },
    Commit {
        client: usize,
        gen: GenPick,
    },
    /// Every client with a member id sends a proper SyncGroup (the leader
    /// with an assignment), then the oldest write succeeds: the way a
    /// rebalance normally ends.
    SyncAll,
    /// Every client (re)joins with its member id and the usual protocol.
    JoinAll,
    /// A static client restarts: it joins without its member id.
    Restart(usize),
    Advance(i64),
    ToDeadline,
    Persist {
        ok: bool,
    },
    Reload,
    Delete,
    Unload,
}

fn client() -> impl Strategy<Value = usize> {
    0..CLIENTS
}

fn id_pick() -> impl Strategy<Value = IdPick> {
    prop_oneof![
        6 => Just(IdPick::Own),
        2 => Just(IdPick::Empty),
        1 => (0usize..16).prop_map(IdPick::Issued),
    ]
}

fn gen_pick() -> impl Strategy<Value = GenPick> {
    prop_oneof![
        6 => Just(GenPick::Own),
        2 => Just(GenPick::Group),
        1 => (-1i32..4).prop_map(GenPick::Other),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (client(), id_pick(), any::<bool>(), 0u8..8)
            .prop_map(|(client, id, known, protocols)| Op::Join { client, id, known, protocols }),
        6 => (client(), id_pick(), gen_pick(), any::<bool>())
            .prop_map(|(client, id, gen, assign)| Op::Sync { client, id, gen, assign }),
        5 => (client(), gen_pick()).prop_map(|(client, gen)| Op::Heartbeat { client, gen }),
        2 => (client(), any::<bool>())
            .prop_map(|(client, by_instance)| Op::Leave { client, by_instance }),
        2 => (client(), gen_pick()).prop_map(|(client, gen)| Op::Commit { client, gen }),
        4 => (0i64..15_000).prop_map(Op::Advance),
        3 => Just(Op::ToDeadline),
        5 => (prop::bool::weighted(0.8)).prop_map(|ok| Op::Persist { ok }),
        3 => Just(Op::SyncAll),
        2 => Just(Op::JoinAll),
        2 => (0usize..2).prop_map(Op::Restart),
        1 => Just(Op::Reload),
        1 => Just(Op::Delete),
        1 => prop::bool::weighted(0.2).prop_filter_map("rare", |b| b.then_some(Op::Unload)),
    ]
}

/// A client's view: its member id and generation.
#[derive(Debug, Clone, Default)]
struct Client {
    member_id: String,
    generation: i32,
}

struct World {
    h: Harness,
    clients: Vec<Client>,
    issued: Vec<String>,
    /// Which client a held request belongs to.
    join_holder: BTreeMap<String, usize>,
    sync_holder: BTreeMap<String, usize>,
}

fn instance(client: usize) -> Option<String> {
    (client < 2).then(|| format!("i{client}"))
}

fn protocol_set(n: u8) -> (&'static str, Vec<(&'static str, &'static str)>) {
    match n {
        0 | 1 => ("consumer", vec![("range", "a")]),
        2 => ("consumer", vec![("range", "b")]),
        3 => ("consumer", vec![("range", "a"), ("rr", "a")]),
        4 => ("consumer", vec![("rr", "a"), ("range", "a")]),
        5 => ("consumer", vec![("rr", "a")]),
        6 => ("connect", vec![("range", "a")]),
        _ => ("consumer", vec![]),
    }
}

impl World {
    fn new() -> Self {
        World {
            h: Harness::new(config()),
            clients: vec![Client::default(); CLIENTS],
            issued: Vec::new(),
            join_holder: BTreeMap::new(),
            sync_holder: BTreeMap::new(),
        }
    }

    /// The broker drops a Dead group; the next JoinGroup creates a new one.
    fn recreate(&mut self) {
        let (now, next_id) = (self.h.now, self.h.next_id);
        self.h = Harness::new(config());
        self.h.now = now;
        self.h.next_id = next_id;
    }

    fn pick_id(&self, client: usize, id: &IdPick) -> String {
        match id {
            IdPick::Own => self.clients[client].member_id.clone(),
            IdPick::Empty => String::new(),
            IdPick::Issued(i) if !self.issued.is_empty() => {
                self.issued[i % self.issued.len()].clone()
            }
            IdPick::Issued(_) => String::new(),
        }
    }

    fn pick_gen(&self, client: usize, gen: &GenPick) -> i32 {
        match gen {
            GenPick::Own => self.clients[client].generation,
            GenPick::Group => self.h.group.generation_id(),
            GenPick::Other(g) => *g,
        }
    }

    fn on_join_answer(&mut self, client: usize, r: &JoinResponse) {
        let c = &mut self.clients[client];
        match r.error {
            None => {
                c.member_id = r.member_id.clone();
                c.generation = r.generation_id;
            }
            Some(ErrorCode::MemberIdRequired) => c.member_id = r.member_id.clone(),
            Some(ErrorCode::RebalanceInProgress) => {}
            Some(_) => {
                c.member_id.clear();
                c.generation = NO_GENERATION;
            }
        }
        if !r.member_id.is_empty() && !self.issued.contains(&r.member_id) {
            self.issued.push(r.member_id.clone());
        }
    }

    /// Routes the answers delivered by the last call to their clients and
    /// checks them.
    fn route(&mut self) {
        let generation = self.h.group.generation_id();
        let state = self.h.group.state();
        for (key, r) in std::mem::take(&mut self.h.delivered_joins) {
            let client = self.join_holder.remove(&key).expect("held by a client");
            if r.error.is_none() {
                assert_eq!(r.member_id, key);
                assert!(r.generation_id >= 1 && r.generation_id <= generation);
                assert!(!r.leader.is_empty());
                assert!(r.protocol_name.is_some());
                if !r.members.is_empty() {
                    assert_eq!(r.leader, r.member_id, "only the leader gets the members");
                }
            }
            self.on_join_answer(client, &r);
        }
        for (key, r) in std::mem::take(&mut self.h.delivered_syncs) {
            self.sync_holder.remove(&key).expect("held by a client");
            if r.error.is_none() {
                assert_eq!(
                    state,
                    GroupState::Stable,
                    "assignment handed out before Stable"
                );
            }
        }
    }

    fn apply(&mut self, op: &Op) {
        let now = self.h.now;
        match op.clone() {
            Op::Join {
                client,
                id,
                known,
                protocols,
            } => {
                let (protocol_type, names) = protocol_set(protocols);
                let req = JoinRequest {
                    member_id: self.pick_id(client, &id),
                    group_instance_id: instance(client),
                    require_known_member_id: known,
                    client_id: format!("c{client}"),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 5_000 + 5_000 * client as i32,
                    session_timeout_ms: SESSION,
                    protocol_type: protocol_type.into(),
                    protocols: common::protocols(&names),
                };
                let reply = self.h.join_request(req);
                self.route();
                match reply {
                    Reply::Now(r) => self.on_join_answer(client, &r),
                    Reply::Held { member_id } => {
                        if !self.issued.contains(&member_id) {
                            self.issued.push(member_id.clone());
                        }
                        self.join_holder.insert(member_id, client);
                    }
                }
            }
            Op::Sync {
                client,
                id,
                gen,
                assign,
            } => {
                let member_id = self.pick_id(client, &id);
                let assignments = if assign {
                    self.h
                        .group
                        .members()
                        .iter()
                        .map(|m| {
                            (
                                m.member_id().to_string(),
                                Bytes::from(format!("a-{}", m.member_id())),
                            )
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let req = SyncRequest {
                    member_id,
                    group_instance_id: instance(client),
                    generation_id: self.pick_gen(client, &gen),
                    protocol_type: None,
                    protocol_name: None,
                    assignments,
                };
                let reply = self.h.sync_request(req);
                self.route();
                match reply {
                    Reply::Now(r) => {
                        if r.error.is_none() {
                            assert_eq!(self.h.group.state(), GroupState::Stable);
                        }
                    }
                    Reply::Held { member_id } => {
                        self.sync_holder.insert(member_id, client);
                    }
                }
            }
            Op::Heartbeat { client, gen } => {
                let member_id = self.clients[client].member_id.clone();
                let gen = self.pick_gen(client, &gen);
                let _ = self
                    .h
                    .heartbeat(&member_id, instance(client).as_deref(), gen);
            }
            Op::Leave {
                client,
                by_instance,
            } => {
                let member_id = if by_instance {
                    String::new()
                } else {
                    self.clients[client].member_id.clone()
                };
                let inst = instance(client);
                let _ = self.h.leave(&[(member_id.as_str(), inst.as_deref())]);
                self.route();
            }
            Op::Commit { client, gen } => {
                let member_id = self.clients[client].member_id.clone();
                let gen = self.pick_gen(client, &gen);
                let before = self.h.group.clone();
                if self
                    .h
                    .commit(&member_id, gen, instance(client).as_deref())
                    .is_err()
                {
                    assert_eq!(self.h.group, before, "a refused commit changed the group");
                }
            }
            Op::SyncAll => {
                for client in 0..CLIENTS {
                    if !self.clients[client].member_id.is_empty() {
                        let leader =
                            self.h.group.leader() == Some(self.clients[client].member_id.as_str());
                        self.apply(&Op::Sync {
                            client,
                            id: IdPick::Own,
                            gen: GenPick::Own,
                            assign: leader,
                        });
                    }
                }
                self.apply(&Op::Persist { ok: true });
            }
            Op::JoinAll => {
                for client in 0..CLIENTS {
                    self.apply(&Op::Join {
                        client,
                        id: IdPick::Own,
                        known: true,
                        protocols: 0,
                    });
                }
            }
            Op::Restart(client) => self.apply(&Op::Join {
                client,
                id: IdPick::Empty,
                known: true,
                protocols: 0,
            }),
            Op::Advance(dt) => {
                self.h.tick(now + dt);
                self.route();
            }
            Op::ToDeadline => {
                if let Some(at) = self.h.group.next_deadline() {
                    self.h.tick(at.max(now));
                    self.route();
                }
            }
            Op::Persist { ok } => {
                if !self.h.persists.is_empty() {
                    let result = if ok {
                        Ok(())
                    } else {
                        Err(ErrorCode::NotLeaderOrFollower)
                    };
                    self.h.persist(result);
                    self.route();
                }
            }
            Op::Reload => {
                let g = &self.h.group;
                if matches!(g.state(), GroupState::Stable | GroupState::Empty)
                    && self.h.held_joins.is_empty()
                    && self.h.held_syncs.is_empty()
                {
                    let before = g.describe();
                    self.h.reload();
                    assert_eq!(self.h.group.describe(), before);
                }
            }
            Op::Delete => {
                let state = self.h.group.state();
                let result = self.h.group.delete(now);
                assert_eq!(result.is_ok(), state == GroupState::Empty);
                if result.is_ok() {
                    self.recreate();
                }
            }
            Op::Unload => {
                self.h.unload();
                self.route();
                assert!(self.join_holder.is_empty() && self.sync_holder.is_empty());
                self.recreate();
            }
        }
        assert_eq!(
            self.join_holder.keys().collect::<Vec<_>>(),
            self.h.held_joins.iter().collect::<Vec<_>>()
        );
        assert_eq!(
            self.sync_holder.keys().collect::<Vec<_>>(),
            self.h.held_syncs.iter().collect::<Vec<_>>()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_requests_keep_group_invariants(ops in prop::collection::vec(op(), 1..150)) {
        let mut world = World::new();
        for op in &ops {
            world.apply(op);
        }
    }
}

/// The happy path, as the random clients would find it when they behave:
/// everyone joins, the leader assigns, everyone syncs and keeps heartbeating;
/// the group stays Stable in generation 1.
#[test]
fn well_behaved_clients_stabilise() {
    let mut world = World::new();
    for c in 0..CLIENTS {
        world.apply(&Op::Join {
            client: c,
            id: IdPick::Own,
            known: true,
            protocols: 0,
        });
    }
    for c in 2..CLIENTS {
        world.apply(&Op::Join {
            client: c,
            id: IdPick::Own,
            known: true,
            protocols: 0,
        });
    }
    // The initial delay, extended by the members that came after the first,
    // but only up to the first member's 5 s rebalance timeout.
    world.apply(&Op::ToDeadline);
    assert_eq!(world.h.group.state(), GroupState::PreparingRebalance);
    world.apply(&Op::ToDeadline);
    assert_eq!(world.h.now, 5000);
    assert_eq!(world.h.group.state(), GroupState::CompletingRebalance);
    let leader = world
        .clients
        .iter()
        .position(|c| Some(c.member_id.as_str()) == world.h.group.leader())
        .unwrap();
    for c in 0..CLIENTS {
        world.apply(&Op::Sync {
            client: c,
            id: IdPick::Own,
            gen: GenPick::Own,
            assign: c == leader,
        });
    }
    world.apply(&Op::Persist { ok: true });
    assert_eq!(world.h.group.state(), GroupState::Stable);
    for round in 0..20 {
        world.apply(&Op::Advance(3_000));
        for c in 0..CLIENTS {
            world.apply(&Op::Heartbeat {
                client: c,
                gen: GenPick::Own,
            });
        }
        assert_eq!(world.h.group.state(), GroupState::Stable, "round {round}");
    }
    assert_eq!(world.h.group.generation_id(), 1);
    assert_eq!(world.h.group.members().len(), CLIENTS);
    for m in world.h.group.members() {
        assert_eq!(
            m.assignment().unwrap(),
            &Bytes::from(format!("a-{}", m.member_id()))
        );
    }
}

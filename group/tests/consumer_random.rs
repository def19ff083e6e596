//! KIP-848 groups under random joins, leaves, crashes, subscription
//! changes, partition growth and coordinator moves, with clients that
//! revoke late; two of the six clients speak the classic protocol
//! (JoinGroup with what they own, SyncGroup, Heartbeat, LeaveGroup) inside
//! the consumer-protocol group. Checked throughout: no partition is handed to a member
//! while another client still owns it, no live client is fenced, and a
//! coordinator loading the records holds what the live one holds. Checked
//! at the end: once clients only heartbeat, every subscribed partition is
//! owned by exactly one client, the group is Stable, and nothing moves.

use std::collections::BTreeMap;

use proptest::prelude::*;
use strand_group::consumer::embedded::{decode_assignment, encode_subscription, Subscription};
use strand_group::consumer::{
    Assignment, ClassicJoin, ClassicJoinAnswer, ConsumerGroup, ConsumerGroupConfig,
    ConsumerGroupState, Epoch, HeartbeatRequest, MigrationPolicy, Record, TopicId, TopicImage,
};
use strand_protocol::ErrorCode;

const SUBSCRIPTIONS: [&[&str]; 3] = [&["t1"], &["t1", "t2"], &["t2"]];

#[derive(Clone, Debug)]
enum Op {
    Join(usize, usize),
    Heartbeat(usize),
    /// The client finishes revoking and takes its last assignment.
    Apply(usize),
    Leave(usize),
    Crash(usize),
    Subscribe(usize, usize),
    /// Live clients heartbeat, then time passes and timers run.
    Advance(u16),
    AddPartition(usize),
    CoordinatorMove,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..6usize, 0..4usize).prop_map(|(c, s)| Op::Join(c, s)),
        (0..6usize).prop_map(Op::Heartbeat),
        (0..6usize).prop_map(Op::Heartbeat),
        (0..6usize).prop_map(Op::Apply),
        (0..6usize).prop_map(Op::Leave),
        (0..6usize).prop_map(Op::Crash),
        (0..6usize, 0..4usize).prop_map(|(c, s)| Op::Subscribe(c, s)),
        (100..3000u16).prop_map(Op::Advance),
        (0..2usize).prop_map(Op::AddPartition),
        Just(Op::CoordinatorMove),
    ]
}

#[derive(Clone, Debug, Default)]
struct Client {
    member_id: String,
    instance_id: Option<String>,
    joined: bool,
    epoch: i32,
    /// 0..3: by names; 3: the regex `t.*`.
    subscription: usize,
    subscription_sent: bool,
    owned: Assignment,
    pending: Option<Assignment>,
    incarnation: u32,
    /// Speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat).
    classic: bool,
    /// A classic client told to join again (REBALANCE_IN_PROGRESS).
    rejoin: bool,
}

struct Sim {
    group: ConsumerGroup,
    log: Vec<Record>,
    cfg: ConsumerGroupConfig,
    topics: Vec<(String, TopicId, i32)>,
    clients: Vec<Client>,
    now: i64,
}

fn pairs(a: &Assignment) -> impl Iterator<Item = (TopicId, i32)> + '_ {
    a.iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
}

impl Sim {
    fn new(p1: i32, p2: i32) -> Sim {
        Sim {
            group: ConsumerGroup::new("g"),
            log: Vec::new(),
            // The group stays a consumer-protocol group when only classic
            // members are left (the downgrade is tested on its own).
            cfg: ConsumerGroupConfig {
                migration: MigrationPolicy::Upgrade,
                ..ConsumerGroupConfig::default()
            },
            topics: vec![
                ("t1".into(), TopicId::from_bytes([1; 16]), p1),
                ("t2".into(), TopicId::from_bytes([2; 16]), p2),
            ],
            clients: (0..6)
                .map(|i| Client {
                    instance_id: (i % 2 == 0).then(|| format!("instance-{i}")),
                    classic: i == 1 || i == 5,
                    ..Client::default()
                })
                .collect(),
            now: 0,
        }
    }

    fn image(&self) -> TopicImage {
        TopicImage::new(self.topics.iter().cloned())
    }

    /// No other client owns what client `c` is about to own.
    fn check_free(&self, c: usize, a: &Assignment) {
        for tp in pairs(a) {
            for (j, other) in self.clients.iter().enumerate() {
                if j != c && other.joined {
                    assert!(
                        !pairs(&other.owned).any(|x| x == tp),
                        "{tp:?} handed to client {c} while client {j} owns it"
                    );
                }
            }
        }
    }

    /// A classic client's turn: JoinGroup (with what it owns) and
    /// SyncGroup when it has to join, else a Heartbeat.
    fn classic_turn(&mut self, c: usize) {
        let image = self.image();
        let cl = &self.clients[c];
        if cl.epoch != 0 && !cl.rejoin {
            match self
                .group
                .classic_heartbeat(&cl.member_id, None, cl.epoch, self.now)
            {
                Ok(()) => {}
                Err(e) if e.code == ErrorCode::RebalanceInProgress => self.clients[c].rejoin = true,
                Err(e) => panic!("classic client {c} (generation {}): {e:?}", cl.epoch),
            }
            return;
        }
        let name = |id: &TopicId| {
            self.topics
                .iter()
                .find(|(_, t, _)| t == id)
                .map(|(n, _, _)| n.clone())
                .unwrap_or_default()
        };
        let topics: Vec<String> = match cl.subscription {
            3 => vec!["t1".into(), "t2".into()],
            s => SUBSCRIPTIONS[s].iter().map(|n| n.to_string()).collect(),
        };
        let metadata = encode_subscription(&Subscription {
            version: 1,
            topics,
            owned: cl
                .owned
                .iter()
                .map(|(t, ps)| (name(t), ps.iter().copied().collect()))
                .collect(),
            ..Subscription::default()
        });
        let join = ClassicJoin {
            member_id: if cl.epoch == 0 {
                String::new()
            } else {
                cl.member_id.clone()
            },
            fresh_id: cl.member_id.clone(),
            rebalance_timeout_ms: 60_000,
            session_timeout_ms: 45_000,
            protocol_type: "consumer".into(),
            protocols: vec![("cooperative-sticky".into(), metadata)],
            client_id: format!("client-{c}"),
            client_host: "/127.0.0.1".into(),
            ..ClassicJoin::default()
        };
        let (answer, records) = self
            .group
            .classic_join(&join, &image, &self.cfg, self.now)
            .unwrap_or_else(|e| panic!("classic client {c} joins: {e:?}"));
        self.log.extend(records);
        let ClassicJoinAnswer::Joined {
            member_id,
            generation_id,
            protocol_name,
        } = answer
        else {
            panic!("classic client {c}: {answer:?}");
        };
        let synced = self.group.classic_sync(
            &member_id,
            None,
            generation_id,
            Some("consumer"),
            Some(&protocol_name),
            &image,
            self.now,
        );
        let cl = &mut self.clients[c];
        cl.member_id = member_id;
        cl.epoch = generation_id;
        cl.subscription_sent = true;
        match synced {
            Ok(bytes) => {
                let mut a = Assignment::new();
                for (topic, ps) in decode_assignment(&bytes).expect("an assignment").partitions {
                    if let Some((_, id, _)) = self.topics.iter().find(|(n, _, _)| *n == topic) {
                        a.entry(*id).or_default().extend(ps);
                    }
                }
                cl.rejoin = false;
                // Revoked and taken up later, at Apply, as a client's
                // callbacks take time.
                cl.pending = Some(a);
            }
            Err(e) if e.code == ErrorCode::RebalanceInProgress => cl.rejoin = true,
            Err(e) => panic!("classic client {c} syncs: {e:?}"),
        }
    }

    fn heartbeat(&mut self, c: usize) {
        if !self.clients[c].joined {
            return;
        }
        if self.clients[c].classic {
            self.classic_turn(c);
            return;
        }
        let cl = &self.clients[c];
        let send_subscription = cl.epoch == 0 || !cl.subscription_sent;
        let (names, regex) = match cl.subscription {
            3 => (None, Some("t.*".to_string())),
            s => (
                Some(SUBSCRIPTIONS[s].iter().map(|n| n.to_string()).collect()),
                Some(String::new()),
            ),
        };
        let req = HeartbeatRequest {
            member_id: cl.member_id.clone(),
            member_epoch: cl.epoch,
            instance_id: cl.instance_id.clone(),
            rebalance_timeout_ms: if cl.epoch == 0 { 60_000 } else { -1 },
            subscribed_topic_names: if send_subscription { names } else { None },
            subscribed_topic_regex: if send_subscription { regex } else { None },
            owned: Some(if cl.epoch == 0 {
                Assignment::new()
            } else {
                cl.owned.clone()
            }),
            client_id: format!("client-{c}"),
            client_host: "/127.0.0.1".into(),
            ..HeartbeatRequest::default()
        };
        let image = self.image();
        match self.group.heartbeat(&req, &image, &self.cfg, self.now) {
            Ok((answer, records)) => {
                self.log.extend(records);
                if let Some(a) = &answer.assignment {
                    let added: Assignment = a
                        .iter()
                        .map(|(t, ps)| {
                            let owned = self.clients[c].owned.get(t);
                            (
                                *t,
                                ps.iter()
                                    .filter(|p| owned.is_none_or(|o| !o.contains(p)))
                                    .copied()
                                    .collect(),
                            )
                        })
                        .collect();
                    self.check_free(c, &added);
                }
                let cl = &mut self.clients[c];
                cl.epoch = answer.member_epoch.get();
                cl.subscription_sent = true;
                if let Some(a) = answer.assignment {
                    // The client revokes and takes new partitions later,
                    // at Apply (its revocation callback and commit take
                    // time): until then it owns what it owned.
                    cl.pending = Some(a);
                }
            }
            Err(e) if req.member_epoch == 0 && e.code == ErrorCode::UnreleasedInstanceId => {
                // Its old incarnation still holds the instance id.
                self.clients[c].joined = false;
            }
            Err(e) => panic!("client {c} (epoch {}): {e:?}", req.member_epoch),
        }
    }

    fn apply(&mut self, c: usize) {
        if let Some(a) = self.clients[c].pending.take() {
            self.check_free(c, &a);
            self.clients[c].owned = a;
        }
    }

    fn join(&mut self, c: usize, subscription: usize) {
        // A classic client joins a consumer-protocol group only while it
        // has members (an empty one would become a classic group).
        if self.clients[c].joined || (self.clients[c].classic && self.group.members().is_empty()) {
            return;
        }
        let cl = &mut self.clients[c];
        cl.incarnation += 1;
        cl.member_id = format!("member-{c}-{}", cl.incarnation);
        cl.joined = true;
        cl.epoch = 0;
        cl.subscription = subscription;
        cl.subscription_sent = false;
        cl.owned.clear();
        cl.pending = None;
        cl.rejoin = false;
        self.heartbeat(c);
    }

    fn leave(&mut self, c: usize) {
        if !self.clients[c].joined {
            return;
        }
        if self.clients[c].classic {
            let image = self.image();
            let id = self.clients[c].member_id.clone();
            let (results, records) = self.group.classic_leave(&[(id, None)], &image, &self.cfg);
            assert_eq!(results, vec![Ok(())], "classic client {c} leaves");
            self.log.extend(records);
            self.crash(c);
            return;
        }
        let cl = &self.clients[c];
        let epoch = if cl.instance_id.is_some() && cl.incarnation.is_multiple_of(2) {
            Epoch::STATIC_LEAVE.get()
        } else {
            Epoch::LEAVE.get()
        };
        let req = HeartbeatRequest {
            member_id: cl.member_id.clone(),
            member_epoch: epoch,
            instance_id: cl.instance_id.clone(),
            rebalance_timeout_ms: -1,
            ..HeartbeatRequest::default()
        };
        let image = self.image();
        let (answer, records) = self
            .group
            .heartbeat(&req, &image, &self.cfg, self.now)
            .expect("a member leaves");
        assert_eq!(answer.member_epoch.get(), epoch);
        self.log.extend(records);
        let cl = &mut self.clients[c];
        cl.joined = false;
        cl.owned.clear();
        cl.pending = None;
    }

    fn crash(&mut self, c: usize) {
        let cl = &mut self.clients[c];
        cl.joined = false;
        cl.owned.clear();
        cl.pending = None;
    }

    fn advance(&mut self, ms: i64) {
        for c in 0..self.clients.len() {
            self.heartbeat(c);
        }
        self.now += ms;
        let image = self.image();
        let records = self.group.tick(self.now, &image, &self.cfg);
        self.log.extend(records);
    }

    /// A coordinator that loads the log holds what the live one holds.
    fn reload(&self) -> ConsumerGroup {
        let mut g = ConsumerGroup::new("g");
        for r in &self.log {
            g.replay(r);
        }
        assert_eq!(g.durable_state(), self.group.durable_state());
        g
    }

    fn run(&mut self, op: &Op) {
        match *op {
            Op::Join(c, s) => self.join(c, s),
            Op::Heartbeat(c) => self.heartbeat(c),
            Op::Apply(c) => self.apply(c),
            Op::Leave(c) => self.leave(c),
            Op::Crash(c) => self.crash(c),
            Op::Subscribe(c, s) => {
                if self.clients[c].joined && self.clients[c].subscription != s {
                    self.clients[c].subscription = s;
                    self.clients[c].subscription_sent = false;
                    self.clients[c].rejoin = true;
                    self.heartbeat(c);
                }
            }
            Op::Advance(ms) => self.advance(i64::from(ms)),
            Op::AddPartition(t) => {
                self.topics[t].2 += 1;
                // A classic client sees the count change in its metadata
                // and joins again (as the Java client and librdkafka do);
                // the coordinator learns of it from consumer-protocol
                // heartbeats and from joins.
                let name = self.topics[t].0.clone();
                for cl in self.clients.iter_mut().filter(|c| c.joined && c.classic) {
                    if cl.subscription == 3
                        || SUBSCRIPTIONS[cl.subscription].contains(&name.as_str())
                    {
                        cl.rejoin = true;
                    }
                }
            }
            Op::CoordinatorMove => {
                let mut g = self.reload();
                g.on_loaded(&self.cfg, self.now);
                self.group = g;
            }
        }
    }

    /// Clients heartbeat and take their assignments until every member
    /// is at the target and the crashed ones have expired.
    fn settle(&mut self) {
        for _ in 0..200 {
            for c in 0..self.clients.len() {
                self.heartbeat(c);
                self.apply(c);
            }
            self.advance(1_000);
            let joined = self.clients.iter().filter(|c| c.joined).count();
            if self.group.members().len() == joined
                && matches!(
                    self.group.state(),
                    ConsumerGroupState::Stable | ConsumerGroupState::Empty
                )
                && self.clients.iter().all(|c| c.pending.is_none())
            {
                return;
            }
        }
        panic!("the group never settled: {:?}", self.group.state());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn partitions_move_only_when_released(
        p1 in 1..8i32,
        p2 in 1..8i32,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut sim = Sim::new(p1, p2);
        for op in &ops {
            sim.run(op);
        }
        sim.reload();
        sim.settle();

        // Every partition some live client subscribes to is owned by
        // exactly one client, one that subscribes to its topic.
        let mut owners: BTreeMap<(TopicId, i32), usize> = BTreeMap::new();
        for (i, c) in sim.clients.iter().enumerate().filter(|(_, c)| c.joined) {
            for tp in pairs(&c.owned) {
                prop_assert!(owners.insert(tp, i).is_none(), "{tp:?} owned twice");
            }
        }
        for (name, id, n) in &sim.topics {
            let subscribed = sim.clients.iter().any(|c| {
                c.joined && (c.subscription == 3 || SUBSCRIPTIONS[c.subscription].contains(&name.as_str()))
            });
            for p in 0..*n {
                prop_assert_eq!(owners.contains_key(&(*id, p)), subscribed, "{}-{}", name, p);
            }
        }
        for c in sim.clients.iter().filter(|c| c.joined) {
            prop_assert_eq!(c.epoch, sim.group.assignment_epoch().get());
        }

        // Nothing changes when nothing changed.
        let before: Vec<Assignment> = sim.clients.iter().map(|c| c.owned.clone()).collect();
        let log_len = sim.log.len();
        for c in 0..sim.clients.len() {
            sim.heartbeat(c);
            sim.apply(c);
        }
        let after: Vec<Assignment> = sim.clients.iter().map(|c| c.owned.clone()).collect();
        prop_assert_eq!(before, after);
        prop_assert_eq!(sim.log.len(), log_len, "records written with nothing changed");
    }
}

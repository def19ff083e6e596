//! A deterministic simulation of Strand's data path. One thread, one seed:
//! three brokers, each with the real [`Partition`] (log on
//! [`MemStorage`], producer state, leader state) of one topic partition
//! with replication factor 3 and min.insync.replicas 2; a controller that
//! decides with the real controller rules (`strand_controller::manager`:
//! registration, heartbeats and fencing, AlterPartition, elections) over a
//! [`MetadataImage`]; a producer and two transactional producers whose
//! markers are written by a coordinator that retries until each lands.
//! Brokers follow their leader with the same calls the broker binary makes
//! (`record_follower_fetch`, `read`, `apply_fetched`, `apply_registration`,
//! `maybe_shrink_isr`, `on_alter_partition_result`, `ack_decision`).
//!
//! Time is a [`ManualClock`]; the network delivers each message after a
//! seeded delay (so reorders), drops some, and can be cut between any two
//! nodes; disks are in memory. A seeded schedule of faults (isolations,
//! splits, controller cut-offs, loss, pauses, kill -9 and restart, failing
//! fsync) runs, then everything heals and the cluster must converge. The
//! invariants of ARCHITECTURE.md are checked after every event:
//!
//! - the HW never passes what a member of the leader's (maximal) ISR holds;
//! - HW and LSO never move backwards on a leader (one term of one process);
//! - no two brokers append in the same leader epoch;
//! - no acknowledged record is lost, and the replicas agree up to the HW;
//! - markers complete every transaction (the LSO reaches the HW).
//!
//! The same seed replays the same run.

// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use strand_controller::manager::cluster::{
    caught_up_offset, fence_stale_brokers, heartbeat, register_broker, BrokerHeartbeats,
    BrokerRegistrationRequest, HeartbeatRequest,
};
use strand_controller::manager::replication::{alter_partition, AlterPartitionRequest};
use strand_controller::manager::{create_topic, ApiError, ControllerConfig, NewTopic};
use strand_log::storage::{Fault, MemStorage};
use strand_log::{LogConfig, LogError};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::MetadataRecord;
use strand_partition::log_dir_failure::LogDirFailures;
use strand_partition::{
    FollowerFetchState, Partition, PartitionIo, PartitionSettings, ReplicaState,
};
use strand_protocol::batch::BatchIter;
use strand_protocol::kafka_protocol::records::Compression;
use strand_protocol::testing::encode_records_txn;
use strand_protocol::ErrorCode;
use strand_replication::leader::{AlterPartitionResult, IsrProposal, LeaderConfig};
use strand_replication::rules::{self, AckDecision, Acks, FetchOrigin, FetchedPartition};
use strand_types::{
    BrokerEpoch, BrokerId, Clock, LeaderEpoch, ManualClock, Offset, ProducerEpoch, ProducerId,
};
use uuid::Uuid;

/// Simulated wall-clock time at the start of every run.
const START_MS: i64 = 1_700_000_000_000;
/// How many history lines a violation shows (`STRAND_SIM_TRACE` adds
/// every message, so more are kept then).
const HISTORY_SHOWN: usize = 40;
const CONTROLLER: i32 = 0;
const CLIENT: i32 = 100;

const TOPIC: &str = "t";
const DIR: &str = "/data/t-0";
const TICK_MS: i64 = 10;
const HEARTBEAT_MS: i64 = 100;
const SESSION_TIMEOUT_MS: u64 = 1_500;
const LAG_TIME_MAX_MS: i64 = 1_000;
const FETCH_TIMEOUT_MS: i64 = 500;
const ACK_TIMEOUT_MS: i64 = 2_000;
const CLIENT_TIMEOUT_MS: i64 = 3_000;
const FETCH_MAX_BYTES: usize = 16 * 1024;
const TXN_PRODUCERS: [ProducerId; 2] = [ProducerId::new(1_000), ProducerId::new(1_001)];

/// What a run does.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub brokers: i32,
    /// Simulated time with faults.
    pub fault_ms: i64,
    /// Longest simulated time, after the faults heal, to converge.
    pub settle_ms: i64,
    /// Inject faults (off: a fault-free run, for the baseline).
    pub faults: bool,
    /// Also cut the power of one broker at a time (its unsynced writes are
    /// lost or torn). Off by default: like Kafka, Strand acknowledges
    /// writes the ISR holds in memory, so a power cut of ISR members can
    /// lose them; the RocketMQ durability policies (issue 15) are for that.
    pub power_cuts: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            brokers: 3,
            fault_ms: 5_000,
            settle_ms: 30_000,
            faults: true,
            power_cuts: false,
        }
    }
}

/// What a run that held every invariant did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub events: u64,
    pub acknowledged: usize,
    pub transactions: usize,
    pub faults: usize,
    pub leader_epochs: usize,
    pub final_hw: i64,
}

/// An invariant that did not hold, with the run's recent history.
#[derive(Debug, Clone)]
pub struct Violation {
    pub seed: u64,
    /// Simulated milliseconds since the run started.
    pub at_ms: i64,
    pub what: String,
    pub history: Vec<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {} at {} ms: {}", self.seed, self.at_ms, self.what)?;
        for h in &self.history {
            writeln!(f, "  {h}")?;
        }
        Ok(())
    }
}

/// Runs one seed.
pub fn run(seed: u64, config: &SimConfig) -> Result<Report, Violation> {
    let mut sim = Sim::new(seed, config.clone());
    sim.run()
}

#[derive(Debug, Clone)]
enum Msg {
    /// `id` ties the answer to the request, as an RPC's: the broker takes
    /// the epoch of the registration it is waiting for, not a late answer
    /// to one it gave up on (each registration is a new broker epoch).
    Register {
        id: u64,
        incarnation: Uuid,
    },
    RegisterReply {
        id: u64,
        broker_epoch: BrokerEpoch,
    },
    Heartbeat {
        broker_epoch: BrokerEpoch,
        applied: u64,
    },
    Image(Arc<MetadataImage>),
    /// None: sent by a process not registered yet (no broker epoch to
    /// name), which the controller answers STALE_BROKER_EPOCH as it does
    /// any epoch but the registered one.
    AlterPartition(Option<AlterPartitionRequest>, IsrProposal),
    AlterPartitionReply(IsrProposal, AlterPartitionResult),
    Fetch(FetchRequest),
    FetchReply {
        id: u64,
        leader_epoch: LeaderEpoch,
        fetch_offset: Offset,
        fetched: FetchedPartition,
        records: Bytes,
    },
    Produce {
        id: u64,
        batch: Bytes,
    },
    WriteMarker {
        id: u64,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        commit: bool,
    },
    Reply {
        id: u64,
        result: Result<Offset, ErrorCode>,
    },
}

impl Msg {
    /// One line for a trace.
    fn short(&self) -> String {
        match self {
            Msg::Image(i) => {
                let p = i.partition(TOPIC, 0);
                format!(
                    "image {} {:?}",
                    i.applied,
                    p.map(|p| (p.leader, p.leader_epoch, p.isr.clone(), p.partition_epoch))
                )
            }
            Msg::FetchReply {
                leader_epoch,
                fetch_offset,
                fetched,
                records,
                ..
            } => format!(
                "fetch reply epoch {leader_epoch} at {fetch_offset}: {fetched:?}, {} bytes",
                records.len()
            ),
            Msg::Produce { id, .. } => format!("produce {id}"),
            other => format!("{other:?}"),
        }
    }
}

/// A follower's fetch of the partition. `id` ties the answer to its
/// request, as a fetcher's one outstanding request on its connection is: an
/// answer to an abandoned fetch is never applied.
#[derive(Debug, Clone, Copy)]
struct FetchRequest {
    id: u64,
    broker_epoch: BrokerEpoch,
    leader_epoch: LeaderEpoch,
    fetch_offset: Offset,
    last_fetched_epoch: Option<LeaderEpoch>,
}

/// An acks=all append (a produce or a marker) waiting for the HW.
struct PendingAck {
    id: u64,
    leader_epoch: LeaderEpoch,
    base_offset: Offset,
    required_offset: Offset,
    deadline: i64,
}

struct Node {
    id: i32,
    storage: MemStorage,
    alive: bool,
    paused_until: i64,
    incarnation: u128,
    /// The epoch of this process's registration; None until registered.
    broker_epoch: Option<BrokerEpoch>,
    last_register: i64,
    /// The registration request waiting for its answer.
    register_id: u64,
    last_heartbeat: i64,
    image: Arc<MetadataImage>,
    partition: Option<Arc<Partition>>,
    failures: Arc<LogDirFailures>,
    following: Option<i32>,
    /// The outstanding fetch: (id, when sent).
    fetch: Option<(u64, i64)>,
    /// AlterPartition requests without an answer yet, with when they went.
    alters: Vec<(IsrProposal, i64)>,
    pending: Vec<PendingAck>,
    /// Highest (HW, LSO) seen while leading in (incarnation, leader epoch).
    leading_high: Option<(u128, LeaderEpoch, Offset, Offset)>,
}

struct Controller {
    image: MetadataImage,
    heartbeats: BrokerHeartbeats,
    config: ControllerConfig,
    last_broadcast: i64,
}

#[derive(Debug, Clone)]
struct Txn {
    producer_id: ProducerId,
    epoch: ProducerEpoch,
    data: Bytes,
    data_id: u64,
    data_sent_at: i64,
    acked_offset: Option<i64>,
    data_answered: bool,
    commit: Option<bool>,
    marker_id: Option<u64>,
    marker_sent_at: i64,
    marker_done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FaultKind {
    Isolate(i32),
    CutFromController(i32),
    Split(i32),
    Loss,
    Pause(i32),
    Crash(i32),
    PowerCut(i32),
    DiskFailure(i32),
}

struct Sim {
    seed: u64,
    config: SimConfig,
    rng: StdRng,
    clock: ManualClock,
    now: i64,
    seq: u64,
    queue: BTreeMap<(i64, u64), (i32, i32, Msg)>,
    nodes: Vec<Node>,
    controller: Controller,
    /// Pairs that cannot talk (both directions).
    cut: Vec<(i32, i32)>,
    loss: f64,
    heals: Vec<(i64, FaultKind)>,
    next_fault: i64,
    next_id: u64,
    // Client state.
    in_flight: BTreeMap<u64, (i64, Bytes)>,
    acked: BTreeMap<i64, Bytes>,
    next_value: u64,
    next_produce: i64,
    txns: Vec<Txn>,
    txn_epochs: BTreeMap<ProducerId, ProducerEpoch>,
    txn_next_start: BTreeMap<ProducerId, i64>,
    /// Which broker appended in each leader epoch.
    appenders: BTreeMap<LeaderEpoch, i32>,
    history: Vec<String>,
    events: u64,
    faults: usize,
    healed_at: Option<i64>,
    /// Every delivered message goes into the history (STRAND_SIM_TRACE=1).
    trace: bool,
}

fn violation<T>(sim: &Sim, what: String) -> Result<T, Violation> {
    Err(Violation {
        seed: sim.seed,
        at_ms: sim.now - START_MS,
        what,
        history: sim
            .history
            .iter()
            .rev()
            .take(HISTORY_SHOWN)
            .rev()
            .cloned()
            .collect(),
    })
}

impl Sim {
    fn new(seed: u64, config: SimConfig) -> Sim {
        let clock = ManualClock::starting_at(START_MS);
        let nodes = (1..=config.brokers)
            .map(|id| Node {
                id,
                storage: MemStorage::new(),
                alive: true,
                paused_until: 0,
                incarnation: u128::from(seed) << 32 | id as u128,
                broker_epoch: None,
                last_register: i64::MIN / 2,
                register_id: 0,
                last_heartbeat: i64::MIN / 2,
                image: Arc::new(MetadataImage::default()),
                partition: None,
                failures: LogDirFailures::new(),
                following: None,
                fetch: None,
                alters: Vec::new(),
                pending: Vec::new(),
                leading_high: None,
            })
            .collect();
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::ClusterFormatted {
            cluster_id: "sim".into(),
        });
        let controller = Controller {
            image,
            heartbeats: BrokerHeartbeats::default(),
            config: ControllerConfig {
                node_id: BrokerId::new(CONTROLLER),
                num_partitions: 1,
                default_replication_factor: 3,
                producer_id_block_size: 1000,
                max_replication_factor: 3,
            },
            last_broadcast: 0,
        };
        let now = clock.now_ms();
        Sim {
            seed,
            config,
            rng: StdRng::seed_from_u64(seed),
            clock,
            now,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            controller,
            cut: Vec::new(),
            loss: 0.0,
            heals: Vec::new(),
            next_fault: now + 1_500,
            next_id: 1,
            in_flight: BTreeMap::new(),
            acked: BTreeMap::new(),
            next_value: 0,
            next_produce: now + 500,
            txns: Vec::new(),
            txn_epochs: TXN_PRODUCERS
                .iter()
                .map(|p| (*p, ProducerEpoch::ZERO))
                .collect(),
            txn_next_start: TXN_PRODUCERS.iter().map(|p| (*p, now + 700)).collect(),
            appenders: BTreeMap::new(),
            history: Vec::new(),
            events: 0,
            faults: 0,
            healed_at: None,
            trace: std::env::var("STRAND_SIM_TRACE").as_deref() == Ok("1"),
        }
    }

    fn note(&mut self, what: String) {
        let line = format!("{:>6} ms {what}", self.now - START_MS);
        self.history.push(line);
        let keep = if self.trace { 100_000 } else { 200 };
        if self.history.len() > keep {
            self.history.drain(..keep / 2);
        }
    }

    fn node(&mut self, id: i32) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    fn send(&mut self, from: i32, to: i32, msg: Msg) {
        let blocked = self
            .cut
            .iter()
            .any(|&(a, b)| (a, b) == (from, to) || (b, a) == (from, to));
        if blocked || self.rng.gen_bool(self.loss) {
            return;
        }
        let delay = self.rng.gen_range(1..=15);
        self.seq += 1;
        self.queue
            .insert((self.now + delay, self.seq), (from, to, msg));
    }

    fn run(&mut self) -> Result<Report, Violation> {
        let start = self.now;
        let fault_end = start + 1_500 + self.config.fault_ms;
        let deadline = fault_end + self.config.settle_ms;
        loop {
            self.now += TICK_MS;
            self.clock.set(self.now);
            for n in &self.nodes {
                n.storage.set_now_ms(self.now);
            }
            // Deliver what is due, in (time, send order).
            while let Some((&(at, seq), _)) = self.queue.first_key_value() {
                if at > self.now {
                    break;
                }
                let Some((from, to, msg)) = self.queue.remove(&(at, seq)) else {
                    break;
                };
                self.deliver(from, to, msg)?;
                self.events += 1;
                self.check()?;
            }
            self.controller_tick();
            for id in 1..=self.config.brokers {
                self.broker_tick(id)?;
                self.check()?;
            }
            self.client_tick();
            if self.config.faults && self.now < fault_end {
                self.maybe_fault();
            }
            self.heal_due(self.now >= fault_end);
            if self.now >= fault_end {
                self.healed_at.get_or_insert(self.now);
                if self.converged() {
                    return self.final_check();
                }
            }
            if self.now >= deadline {
                let state = self.describe();
                return violation(
                    self,
                    format!("did not converge after the faults healed: {state}"),
                );
            }
        }
    }

    // ---- faults ----

    fn maybe_fault(&mut self) {
        if self.now < self.next_fault {
            return;
        }
        self.next_fault = self.now + self.rng.gen_range(200..1_200);
        let b = self.rng.gen_range(1..=self.config.brokers);
        let mut kinds = vec![
            FaultKind::Isolate(b),
            FaultKind::CutFromController(b),
            FaultKind::Split(b),
            FaultKind::Loss,
            FaultKind::Pause(b),
            FaultKind::Crash(b),
            FaultKind::DiskFailure(b),
        ];
        if self.config.power_cuts {
            kinds.push(FaultKind::PowerCut(b));
        }
        let kind = kinds[self.rng.gen_range(0..kinds.len())];
        let lasts = self.rng.gen_range(100..2_500);
        self.faults += 1;
        self.note(format!("fault {kind:?} for {lasts} ms"));
        let all: Vec<i32> = (0..=self.config.brokers).chain([CLIENT]).collect();
        match kind {
            FaultKind::Isolate(b) => {
                for &o in &all {
                    if o != b {
                        self.cut.push((b, o));
                    }
                }
            }
            FaultKind::CutFromController(b) => self.cut.push((b, CONTROLLER)),
            FaultKind::Split(b) => {
                // b and the client on one side, the others and the
                // controller on the other.
                for o in 0..=self.config.brokers {
                    if o != b {
                        self.cut.push((b, o));
                        self.cut.push((CLIENT, o));
                    }
                }
            }
            FaultKind::Loss => self.loss = self.rng.gen_range(0.05..0.3),
            FaultKind::Pause(b) => {
                let until = self.now + lasts;
                self.node(b).paused_until = until;
            }
            FaultKind::Crash(b) | FaultKind::PowerCut(b) | FaultKind::DiskFailure(b) => {
                if kind == FaultKind::DiskFailure(b) {
                    self.node(b).storage.inject(Fault::FailSync(DIR.into()));
                } else {
                    self.crash(b, kind == FaultKind::PowerCut(b));
                }
            }
        }
        self.heals.push((self.now + lasts, kind));
    }

    fn heal_due(&mut self, all: bool) {
        let now = self.now;
        let (due, rest): (Vec<_>, Vec<_>) =
            self.heals.drain(..).partition(|(at, _)| all || *at <= now);
        self.heals = rest;
        for (_, kind) in due {
            self.note(format!("heal {kind:?}"));
            match kind {
                FaultKind::Isolate(b) | FaultKind::Split(b) => self
                    .cut
                    .retain(|&(x, y)| x != b && y != b && x != CLIENT && y != CLIENT),
                FaultKind::CutFromController(b) => self.cut.retain(|&p| p != (b, CONTROLLER)),
                FaultKind::Loss => self.loss = 0.0,
                FaultKind::Pause(b) => self.node(b).paused_until = 0,
                FaultKind::Crash(b) | FaultKind::PowerCut(b) => {
                    if !self.node(b).alive {
                        self.restart(b);
                    }
                }
                FaultKind::DiskFailure(b) => {
                    self.node(b).storage.clear_faults();
                    if !self.node(b).alive {
                        self.restart(b);
                    }
                }
            }
        }
        if all {
            self.cut.clear();
            self.loss = 0.0;
            for id in 1..=self.config.brokers {
                self.node(id).paused_until = 0;
                if !self.node(id).alive {
                    self.node(id).storage.clear_faults();
                    self.restart(id);
                }
            }
        }
    }

    fn crash(&mut self, id: i32, power_cut: bool) {
        let tears: Vec<f64> = (0..8).map(|_| self.rng.gen_range(0.0..=1.0)).collect();
        let n = self.node(id);
        if !n.alive {
            return;
        }
        n.alive = false;
        n.partition = None;
        n.pending.clear();
        n.alters.clear();
        n.following = None;
        n.fetch = None;
        if power_cut {
            let mut i = 0;
            n.storage.crash(|_, unsynced| {
                i += 1;
                (unsynced as f64 * tears[i % tears.len()]) as usize
            });
        }
        self.note(format!("broker {id} down (power cut: {power_cut})"));
    }

    fn restart(&mut self, id: i32) {
        let n = self.node(id);
        n.alive = true;
        n.incarnation += 1 << 8;
        n.broker_epoch = None;
        n.last_register = i64::MIN / 2;
        n.image = Arc::new(MetadataImage::default());
        n.failures = LogDirFailures::new();
        n.leading_high = None;
        self.note(format!("broker {id} restarted"));
    }

    // ---- controller ----

    fn apply(&mut self, records: Vec<MetadataRecord>) {
        if records.is_empty() {
            return;
        }
        for r in &records {
            self.controller.image.apply(r);
        }
        if let Some(p) = self.controller.image.partition(TOPIC, 0) {
            let line = format!(
                "controller: leader {} epoch {} isr {:?} (partition epoch {})",
                BrokerId::to_wire(p.leader),
                p.leader_epoch,
                p.isr,
                p.partition_epoch
            );
            self.note(line);
        }
        self.broadcast();
    }

    fn broadcast(&mut self) {
        self.controller.last_broadcast = self.now;
        let image = Arc::new(self.controller.image.clone());
        for id in 1..=self.config.brokers {
            self.send(CONTROLLER, id, Msg::Image(image.clone()));
        }
    }

    fn controller_tick(&mut self) {
        let now = self.now as u64;
        let stale = fence_stale_brokers(
            &self.controller.image,
            &self.controller.heartbeats,
            now,
            SESSION_TIMEOUT_MS,
        );
        self.apply(stale);
        let all_active =
            (1..=self.config.brokers).all(|b| self.controller.image.is_active(BrokerId::new(b)));
        if all_active && !self.controller.image.topics.contains_key(TOPIC) {
            let t = NewTopic {
                name: TOPIC.into(),
                num_partitions: 1,
                replication_factor: 3,
                assignments: vec![],
                configs: vec![("min.insync.replicas".into(), Some("2".into()))],
            };
            let created = create_topic(
                &self.controller.image,
                &self.controller.config,
                &t,
                Uuid::from_u128(1),
                0,
            );
            if let Ok((records, _)) = created {
                self.apply(records);
            }
        }
        if self.now - self.controller.last_broadcast >= 300 {
            self.broadcast();
        }
    }

    fn controller_receive(&mut self, from: i32, msg: Msg) {
        let now = self.now as u64;
        match msg {
            Msg::Register {
                id: register_id,
                incarnation,
            } => {
                let req = BrokerRegistrationRequest {
                    broker_id: BrokerId::new(from),
                    incarnation_id: incarnation,
                    host: format!("b{from}"),
                    port: 9092,
                    rack: None,
                };
                let registered = register_broker(
                    &self.controller.image,
                    &mut self.controller.heartbeats,
                    &req,
                    now,
                    SESSION_TIMEOUT_MS,
                );
                if let Ok((records, broker_epoch)) = registered {
                    self.apply(records);
                    self.send(
                        CONTROLLER,
                        from,
                        Msg::RegisterReply {
                            id: register_id,
                            broker_epoch,
                        },
                    );
                }
            }
            Msg::Heartbeat {
                broker_epoch,
                applied,
            } => {
                let Some(b) = self.controller.image.brokers.get(&BrokerId::new(from)) else {
                    return;
                };
                let req = HeartbeatRequest {
                    broker_id: BrokerId::new(from),
                    broker_epoch,
                    current_metadata_offset: applied,
                    want_fence: false,
                    want_shutdown: false,
                };
                let caught_up = caught_up_offset(b);
                if let Ok((records, _)) = heartbeat(
                    &self.controller.image,
                    &mut self.controller.heartbeats,
                    &req,
                    caught_up,
                    now,
                ) {
                    self.apply(records);
                }
            }
            Msg::AlterPartition(req, proposal) => {
                let decision = match req {
                    Some(req) => alter_partition(&self.controller.image, &req),
                    None => Err(ApiError::new(
                        ErrorCode::StaleBrokerEpoch,
                        format!("No broker epoch given by broker {from}"),
                    )),
                };
                let result = match decision {
                    Ok((records, state)) => {
                        self.apply(records);
                        AlterPartitionResult::Ok {
                            leader_epoch: state.leader_epoch,
                            partition_epoch: state.partition_epoch,
                            isr: state.isr,
                        }
                    }
                    Err(e) => AlterPartitionResult::Err(e.code),
                };
                self.send(CONTROLLER, from, Msg::AlterPartitionReply(proposal, result));
            }
            _ => {}
        }
    }

    // ---- brokers ----

    fn settings() -> PartitionSettings {
        PartitionSettings {
            log: LogConfig {
                // Small segments: rolls, several segments, recovery across them.
                segment_bytes: 2_048,
                index_interval_bytes: 256,
                ..LogConfig::default()
            },
            max_message_bytes: 1 << 20,
            log_append_time: false,
            min_insync_replicas: 2,
            compacted: false,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
        }
    }

    fn reconcile(&mut self, id: i32) {
        let clock: Arc<dyn Clock> = Arc::new(self.clock.clone());
        let n = self.node(id);
        let image = n.image.clone();
        let Some(record) = image.partition(TOPIC, 0).cloned() else {
            return;
        };
        if !record.replicas.contains(&BrokerId::new(id)) {
            return;
        }
        let replica = ReplicaState {
            leader_epoch: record.leader_epoch,
            partition_epoch: record.partition_epoch,
            replicas: record.replicas.clone(),
            isr: record.isr.clone(),
            leader: record.leader,
        };
        if n.partition.is_none() {
            let io = PartitionIo {
                storage: n.storage.shared(),
                clock,
            };
            let opened = Partition::open_in(
                io,
                Path::new(DIR),
                TOPIC,
                record.topic_id,
                0,
                replica.clone(),
                Self::settings(),
            );
            match opened {
                Ok(p) => n.partition = Some(Arc::new(p.report_failures_to(&n.failures))),
                Err(e) => {
                    // Opening fails only on a failing disk: the broker stops.
                    let line = format!("broker {id} cannot open its partition: {e}");
                    self.note(line);
                    self.crash(id, false);
                    return;
                }
            }
        }
        let n = self.node(id);
        let Some(p) = n.partition.clone() else {
            return;
        };
        let config = LeaderConfig {
            min_insync_replicas: 2,
            replica_lag_time_max_ms: LAG_TIME_MAX_MS,
        };
        let eligible = |r: BrokerId| image.is_active(r);
        let follow = p.apply_registration(replica, config, &eligible, BrokerId::new(id));
        // The node to fetch from: the leader, when following a live one.
        let leader = record.leader.filter(|_| follow).map(BrokerId::get);
        if n.following != leader {
            n.following = leader;
            n.fetch = None;
        }
    }

    fn broker_tick(&mut self, id: i32) -> Result<(), Violation> {
        let now = self.now;
        if !self.node(id).alive || self.node(id).paused_until > now {
            return Ok(());
        }
        let Some(registered_epoch) = self.node(id).broker_epoch else {
            if now - self.node(id).last_register >= 300 {
                let register_id = self.next_id;
                self.next_id += 1;
                self.node(id).last_register = now;
                self.node(id).register_id = register_id;
                let incarnation = Uuid::from_u128(self.node(id).incarnation);
                self.send(
                    id,
                    CONTROLLER,
                    Msg::Register {
                        id: register_id,
                        incarnation,
                    },
                );
            }
            return Ok(());
        };
        if now - self.node(id).last_heartbeat >= HEARTBEAT_MS {
            self.node(id).last_heartbeat = now;
            let applied = self.node(id).image.applied;
            self.send(
                id,
                CONTROLLER,
                Msg::Heartbeat {
                    broker_epoch: registered_epoch,
                    applied,
                },
            );
        }
        let Some(p) = self.node(id).partition.clone() else {
            return Ok(());
        };
        // Follower: fetch when no fetch is outstanding.
        if let Some(leader) = self.node(id).following {
            // A fetch unanswered for long is abandoned (the fetcher drops
            // its connection) and a new one sent.
            let due = self
                .node(id)
                .fetch
                .is_none_or(|(_, at)| now - at >= FETCH_TIMEOUT_MS);
            if due {
                if let Some(FollowerFetchState {
                    fetch_offset,
                    last_fetched_epoch,
                    leader_epoch,
                    ..
                }) = p.follower_fetch_state()
                {
                    let fetch_id = self.next_id;
                    self.next_id += 1;
                    self.node(id).fetch = Some((fetch_id, now));
                    self.send(
                        id,
                        leader,
                        Msg::Fetch(FetchRequest {
                            id: fetch_id,
                            broker_epoch: registered_epoch,
                            leader_epoch,
                            fetch_offset,
                            last_fetched_epoch,
                        }),
                    );
                }
            }
        }
        // Leader: ISR shrink, then the acks=all waits.
        let image = self.node(id).image.clone();
        if let Some(proposal) = p.maybe_shrink_isr(&|r| image.is_active(r)) {
            self.send_alter(id, &p, proposal);
        }
        // An AlterPartition whose answer never came fails as the RPC would
        // (the broker's controller channel times out) and is retried.
        let (lost, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.node(id).alters)
            .into_iter()
            .partition(|(_, at)| now - at >= 1_000);
        self.node(id).alters = waiting;
        for (proposal, _) in lost {
            let result = AlterPartitionResult::Err(ErrorCode::RequestTimedOut);
            if let Some(again) = p.on_alter_partition_result(&proposal, result) {
                self.send_alter(id, &p, again);
            }
        }
        let pending = std::mem::take(&mut self.node(id).pending);
        let mut keep = Vec::new();
        for a in pending {
            match p.ack_decision(a.leader_epoch, a.required_offset) {
                AckDecision::Ack { error: None, .. } => {
                    self.send(
                        id,
                        CLIENT,
                        Msg::Reply {
                            id: a.id,
                            result: Ok(a.base_offset),
                        },
                    );
                }
                AckDecision::Ack { error: Some(e), .. } | AckDecision::Reject(e) => {
                    self.send(
                        id,
                        CLIENT,
                        Msg::Reply {
                            id: a.id,
                            result: Err(e),
                        },
                    );
                }
                AckDecision::Wait if now >= a.deadline => {
                    self.send(
                        id,
                        CLIENT,
                        Msg::Reply {
                            id: a.id,
                            result: Err(ErrorCode::RequestTimedOut),
                        },
                    );
                }
                AckDecision::Wait => keep.push(a),
            }
        }
        self.node(id).pending = keep;
        self.check_disk(id);
        Ok(())
    }

    fn send_alter(&mut self, id: i32, p: &Partition, proposal: IsrProposal) {
        let req = self
            .node(id)
            .broker_epoch
            .map(|broker_epoch| AlterPartitionRequest {
                broker_id: BrokerId::new(id),
                broker_epoch,
                topic_id: p.topic_id,
                partition: 0,
                leader_epoch: proposal.leader_epoch,
                partition_epoch: proposal.partition_epoch,
                new_isr: proposal.new_isr.clone(),
                broker_epochs: proposal.broker_epochs.clone(),
            });
        let now = self.now;
        self.node(id).alters.push((proposal.clone(), now));
        self.send(id, CONTROLLER, Msg::AlterPartition(req, proposal));
    }

    /// A broker whose log directory failed stops, as the binary does.
    fn check_disk(&mut self, id: i32) {
        if self.node(id).alive && self.node(id).failures.is_offline() {
            self.note(format!("broker {id}: log directory failed"));
            self.crash(id, false);
        }
    }

    fn broker_receive(&mut self, id: i32, from: i32, msg: Msg) -> Result<(), Violation> {
        match msg {
            Msg::RegisterReply {
                id: register_id,
                broker_epoch,
            } if self.node(id).broker_epoch.is_none()
                && self.node(id).register_id == register_id =>
            {
                self.node(id).broker_epoch = Some(broker_epoch);
                self.note(format!("broker {id} registered at epoch {broker_epoch}"));
            }
            Msg::Image(image) if image.applied > self.node(id).image.applied => {
                self.node(id).image = image;
                self.reconcile(id);
            }
            Msg::AlterPartitionReply(proposal, result) => {
                let Some(i) = self
                    .node(id)
                    .alters
                    .iter()
                    .position(|(p, _)| *p == proposal)
                else {
                    // Already given up on (and retried).
                    return Ok(());
                };
                self.node(id).alters.remove(i);
                if let Some(p) = self.node(id).partition.clone() {
                    if let Some(again) = p.on_alter_partition_result(&proposal, result) {
                        self.send_alter(id, &p, again);
                    }
                }
            }
            Msg::Fetch(req) => self.serve_fetch(id, from, req),
            Msg::FetchReply {
                id: fetch_id,
                leader_epoch,
                fetch_offset,
                fetched,
                records,
            } if self.node(id).following == Some(from)
                && self.node(id).fetch.map(|(f, _)| f) == Some(fetch_id) =>
            {
                self.node(id).fetch = None;
                if let Some(p) = self.node(id).partition.clone() {
                    if let Err(e) = p.apply_fetched(leader_epoch, fetch_offset, &fetched, &records)
                    {
                        self.note(format!("broker {id}: follower write failed: {e}"));
                    }
                }
            }
            Msg::Produce { id: req, batch } => {
                let appended = match self.node(id).partition.clone() {
                    Some(p) if p.is_leader() => p.append(&batch, Acks::All, 9).map_err(|e| e.code),
                    _ => Err(ErrorCode::NotLeaderOrFollower),
                };
                self.appended(id, req, appended)?;
            }
            Msg::WriteMarker {
                id: req,
                producer_id,
                producer_epoch,
                commit,
            } => {
                let appended = match self.node(id).partition.clone() {
                    Some(p) if p.is_leader() => p
                        .write_txn_marker(Some(producer_id), Some(producer_epoch), 0, commit)
                        .map_err(|e| e.code),
                    _ => Err(ErrorCode::NotLeaderOrFollower),
                };
                self.appended(id, req, appended)?;
            }
            _ => {}
        }
        self.check_disk(id);
        Ok(())
    }

    fn appended(
        &mut self,
        id: i32,
        req: u64,
        appended: Result<strand_partition::AppendOutcome, ErrorCode>,
    ) -> Result<(), Violation> {
        match appended {
            Ok(o) => {
                if let Some(&other) = self.appenders.get(&o.leader_epoch) {
                    if other != id {
                        return violation(
                            self,
                            format!(
                                "brokers {other} and {id} both appended in leader epoch {}",
                                o.leader_epoch
                            ),
                        );
                    }
                }
                self.appenders.insert(o.leader_epoch, id);
                let deadline = self.now + ACK_TIMEOUT_MS;
                self.node(id).pending.push(PendingAck {
                    id: req,
                    leader_epoch: o.leader_epoch,
                    base_offset: o.base_offset,
                    required_offset: o.required_offset,
                    deadline,
                });
            }
            Err(code) => self.send(
                id,
                CLIENT,
                Msg::Reply {
                    id: req,
                    result: Err(code),
                },
            ),
        }
        Ok(())
    }

    fn serve_fetch(&mut self, id: i32, from: i32, req: FetchRequest) {
        let FetchRequest {
            id: fetch_id,
            broker_epoch,
            leader_epoch,
            fetch_offset,
            last_fetched_epoch,
        } = req;
        let image = self.node(id).image.clone();
        let registered = BrokerId::from_wire(from)
            .and_then(|b| image.brokers.get(&b))
            .map(|b| b.broker_epoch);
        let mut fetched = FetchedPartition {
            error: None,
            diverging_epoch: None,
            high_watermark: None,
            log_start_offset: None,
        };
        let mut records = Bytes::new();
        let origin = rules::fetch_origin(
            15,
            BrokerId::from_wire(from),
            Some(broker_epoch),
            registered,
        );
        let partition = self.node(id).partition.clone();
        match (origin, partition) {
            (Err(code), _) => fetched.error = Some(code),
            (Ok(FetchOrigin::Consumer), _) | (_, None) => {
                fetched.error = Some(ErrorCode::NotLeaderOrFollower)
            }
            (Ok(FetchOrigin::Follower(follower)), Some(p)) => {
                let checked = if p.is_leader() {
                    p.check_leader_epoch(Some(leader_epoch))
                } else {
                    Err(ErrorCode::NotLeaderOrFollower)
                };
                let recorded = checked.and_then(|()| {
                    p.record_follower_fetch(
                        follower,
                        broker_epoch,
                        fetch_offset,
                        last_fetched_epoch,
                    )
                });
                match recorded {
                    Err(code) => fetched.error = Some(code),
                    Ok(proposal) => {
                        if let Some(proposal) = proposal {
                            self.send_alter(id, &p, proposal);
                        }
                        let offsets = p.offsets();
                        fetched.high_watermark = Some(offsets.high_watermark);
                        fetched.log_start_offset = Some(offsets.log_start_offset);
                        if let Some(d) = p.diverging_epoch(last_fetched_epoch, fetch_offset) {
                            fetched.diverging_epoch = Some(d);
                        } else {
                            match p.read(
                                fetch_offset,
                                FETCH_MAX_BYTES,
                                offsets.log_end_offset,
                                true,
                            ) {
                                Ok(r) => records = r.records,
                                Err(LogError::OffsetOutOfRange { .. }) => {
                                    fetched.error = Some(ErrorCode::OffsetOutOfRange)
                                }
                                Err(_) => fetched.error = Some(ErrorCode::KafkaStorageError),
                            }
                        }
                    }
                }
            }
        }
        self.send(
            id,
            from,
            Msg::FetchReply {
                id: fetch_id,
                leader_epoch,
                fetch_offset,
                fetched,
                records,
            },
        );
    }

    fn deliver(&mut self, from: i32, to: i32, msg: Msg) -> Result<(), Violation> {
        if self.trace {
            let line = format!("{from} -> {to}: {}", msg.short());
            self.note(line);
        }
        if to == CONTROLLER {
            self.controller_receive(from, msg);
            return Ok(());
        }
        if to == CLIENT {
            self.client_receive(msg);
            return Ok(());
        }
        let now = self.now;
        let n = self.node(to);
        if !n.alive {
            return Ok(());
        }
        if n.paused_until > now {
            // A paused process reads its socket when it resumes.
            let at = n.paused_until;
            self.seq += 1;
            self.queue.insert((at, self.seq), (from, to, msg));
            return Ok(());
        }
        self.broker_receive(to, from, msg)
    }

    // ---- clients ----

    fn leader(&self) -> Option<i32> {
        self.controller
            .image
            .partition(TOPIC, 0)
            .and_then(|p| p.leader)
            .map(BrokerId::get)
    }

    fn client_tick(&mut self) {
        let now = self.now;
        self.in_flight
            .retain(|_, (sent, _)| now - *sent < CLIENT_TIMEOUT_MS);
        let Some(leader) = self.leader() else {
            return;
        };
        // Writes stop once the faults heal, so the replicas can converge.
        if self.healed_at.is_none() && now >= self.next_produce && self.in_flight.len() < 8 {
            self.next_produce = now + self.rng.gen_range(5..40);
            self.next_value += 1;
            let value = format!("value-{}", self.next_value);
            let batch = Bytes::from(encode_records_txn(
                &[(None, Some(Bytes::from(value)), now)],
                -1,
                -1,
                -1,
                Compression::None,
                false,
            ));
            let id = self.next_id;
            self.next_id += 1;
            self.in_flight.insert(id, (now, batch.clone()));
            self.send(CLIENT, leader, Msg::Produce { id, batch });
        }
        for pid in TXN_PRODUCERS {
            self.txn_tick(pid, leader);
        }
    }

    fn txn_tick(&mut self, pid: ProducerId, leader: i32) {
        let now = self.now;
        let open = self
            .txns
            .iter()
            .rposition(|t| t.producer_id == pid && !t.marker_done);
        let Some(i) = open else {
            if self.healed_at.is_some() || now < self.txn_next_start[&pid] {
                return;
            }
            // A new transaction: one transactional batch at this epoch.
            let epoch = self.txn_epochs[&pid];
            self.next_value += 1;
            let value = format!("txn-{pid}-{epoch}-{}", self.next_value);
            let data = Bytes::from(encode_records_txn(
                &[(None, Some(Bytes::from(value)), now)],
                pid.get(),
                epoch.get(),
                0,
                Compression::None,
                true,
            ));
            let data_id = self.next_id;
            self.next_id += 1;
            self.txns.push(Txn {
                producer_id: pid,
                epoch,
                data: data.clone(),
                data_id,
                data_sent_at: now,
                acked_offset: None,
                data_answered: false,
                commit: None,
                marker_id: None,
                marker_sent_at: 0,
                marker_done: false,
            });
            self.send(
                CLIENT,
                leader,
                Msg::Produce {
                    id: data_id,
                    batch: data,
                },
            );
            return;
        };
        let t = &self.txns[i];
        if !t.data_answered && now - t.data_sent_at < CLIENT_TIMEOUT_MS {
            return;
        }
        if t.commit.is_none() {
            let commit = t.acked_offset.is_some() && self.rng.gen_bool(0.7);
            self.txns[i].commit = Some(commit);
        }
        let t = &self.txns[i];
        if t.marker_id.is_none() || now - t.marker_sent_at >= 300 {
            // The coordinator ends the transaction with the epoch bumped
            // (transaction.version 2), so a late batch of it is fenced.
            let (epoch, commit) = (t.epoch.next(), t.commit == Some(true));
            let id = self.next_id;
            self.next_id += 1;
            self.txns[i].marker_id = Some(id);
            self.txns[i].marker_sent_at = now;
            self.send(
                CLIENT,
                leader,
                Msg::WriteMarker {
                    id,
                    producer_id: pid,
                    producer_epoch: epoch,
                    commit,
                },
            );
        }
    }

    fn client_receive(&mut self, msg: Msg) {
        let Msg::Reply { id, result } = msg else {
            return;
        };
        if let Some((_, batch)) = self.in_flight.remove(&id) {
            if let Ok(offset) = result {
                self.acked.insert(offset.get(), batch);
            }
            return;
        }
        let now = self.now;
        for t in &mut self.txns {
            if t.data_id == id && !t.data_answered {
                t.data_answered = true;
                t.acked_offset = result.ok().map(Offset::get);
            }
            if t.marker_id == Some(id) && result.is_ok() && !t.marker_done {
                t.marker_done = true;
                let next = t.epoch.next();
                self.txn_epochs.insert(t.producer_id, next);
                self.txn_next_start.insert(t.producer_id, now + 50);
            }
        }
    }

    // ---- invariants ----

    /// Checked after every event.
    fn check(&mut self) -> Result<(), Violation> {
        for i in 0..self.nodes.len() {
            let (alive, partition, incarnation) = {
                let n = &self.nodes[i];
                (n.alive, n.partition.clone(), n.incarnation)
            };
            let Some(p) = partition.filter(|_| alive) else {
                continue;
            };
            let Some(isr) = p.maximal_isr() else {
                self.nodes[i].leading_high = None;
                continue;
            };
            let id = self.nodes[i].id;
            let o = p.offsets();
            // HW never passes what an ISR member holds.
            for r in isr {
                let Some(rp) = self
                    .nodes
                    .get((r.get() - 1) as usize)
                    .filter(|n| n.alive)
                    .and_then(|n| n.partition.clone())
                else {
                    continue;
                };
                let leo = rp.offsets().log_end_offset;
                if leo < o.high_watermark {
                    return violation(
                        self,
                        format!(
                            "leader {id} (epoch {}) has HW {} but ISR member {r} has LEO {leo}",
                            LeaderEpoch::to_wire(o.leading_epoch),
                            o.high_watermark
                        ),
                    );
                }
            }
            // HW and LSO never move backwards within one leadership.
            let epoch = p.leader_epoch();
            let high = self.nodes[i].leading_high;
            match high {
                Some((inc, e, hw, lso))
                    if inc == incarnation
                        && e == epoch
                        && (o.high_watermark < hw || o.last_stable_offset < lso) =>
                {
                    return violation(
                        self,
                        format!(
                            "leader {id} epoch {epoch}: HW {hw} -> {} / LSO {lso} -> {}",
                            o.high_watermark, o.last_stable_offset
                        ),
                    );
                }
                _ => {}
            }
            self.nodes[i].leading_high =
                Some((incarnation, epoch, o.high_watermark, o.last_stable_offset));
        }
        Ok(())
    }

    /// Everything healed: every broker up and in the ISR, caught up with
    /// the leader's LEO and HW, every transaction ended.
    fn converged(&self) -> bool {
        let Some(record) = self.controller.image.partition(TOPIC, 0) else {
            return false;
        };
        let Some(leader) = self.leader() else {
            return false;
        };
        if record.isr.len() != self.config.brokers as usize
            || self.txns.iter().any(|t| !t.marker_done)
        {
            return false;
        }
        let Some(lp) = self.nodes[(leader - 1) as usize].partition.clone() else {
            return false;
        };
        if !lp.is_leader() || lp.leader_epoch() != record.leader_epoch {
            return false;
        }
        let lo = lp.offsets();
        if lo.high_watermark != lo.log_end_offset {
            return false;
        }
        self.nodes.iter().all(|n| {
            n.alive
                && n.partition.as_ref().is_some_and(|p| {
                    let o = p.offsets();
                    o.log_end_offset == lo.log_end_offset && o.high_watermark == lo.high_watermark
                })
        })
    }

    fn describe(&self) -> String {
        let record = self.controller.image.partition(TOPIC, 0);
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| {
                let o = n.partition.as_ref().map(|p| p.offsets());
                format!(
                    "b{} alive {} epoch {} {:?}",
                    n.id,
                    n.alive,
                    BrokerEpoch::to_wire(n.broker_epoch),
                    o.map(|o| (o.log_end_offset, o.high_watermark, o.last_stable_offset))
                )
            })
            .collect();
        let open = self.txns.iter().filter(|t| !t.marker_done).count();
        format!("{record:?}; {}; open transactions {open}", nodes.join("; "))
    }

    fn final_check(&mut self) -> Result<Report, Violation> {
        let Some(leader) = self.leader() else {
            return violation(self, "no leader at the end".into());
        };
        let lp = self.nodes[(leader - 1) as usize]
            .partition
            .clone()
            .expect("converged: the leader's partition is open");
        let o = lp.offsets();
        let read = |p: &Partition| -> Vec<(i64, Vec<u8>)> {
            let mut out = Vec::new();
            let mut offset = p.offsets().log_start_offset;
            while offset < o.high_watermark {
                let Ok(r) = p.read(offset, 1 << 20, o.high_watermark, true) else {
                    break;
                };
                if r.records.is_empty() {
                    break;
                }
                for (pos, h) in BatchIter::new(&r.records) {
                    if h.base_offset >= offset.get() {
                        out.push((h.base_offset, r.records[pos..pos + h.total_size()].to_vec()));
                    }
                    offset = offset.max(Offset::new(h.next_offset()));
                }
            }
            out
        };
        let log = read(&lp);
        // The replicas agree up to the HW.
        for n in &self.nodes {
            let p = n
                .partition
                .clone()
                .expect("converged: every partition is open");
            let theirs = read(&p);
            if theirs != log {
                let at = theirs.iter().zip(&log).position(|(a, b)| a != b);
                let show = |l: &[(i64, Vec<u8>)], i: usize| -> Vec<(i64, i32)> {
                    l.iter()
                        .skip(i.saturating_sub(2))
                        .take(5)
                        .map(|(o, b)| (*o, i32::from_be_bytes([b[12], b[13], b[14], b[15]])))
                        .collect()
                };
                let i = at.unwrap_or(theirs.len().min(log.len()));
                return violation(
                    self,
                    format!(
                        "broker {} disagrees with leader {leader} below the HW {}: \
                         (offset, leader epoch) from batch {i}: theirs {:?}, leader's {:?}; \
                         lengths {} and {}",
                        n.id,
                        o.high_watermark,
                        show(&theirs, i),
                        show(&log, i),
                        theirs.len(),
                        log.len()
                    ),
                );
            }
        }
        // No acknowledged record is lost: the batch is at its offset, as sent
        // (everything from the magic byte on: offsets and epoch excepted).
        let by_offset: BTreeMap<i64, Vec<u8>> = log.into_iter().collect();
        let acked: Vec<(i64, Bytes)> = self.acked.iter().map(|(o, b)| (*o, b.clone())).collect();
        let txn_acked: Vec<(i64, Bytes)> = self
            .txns
            .iter()
            .filter_map(|t| t.acked_offset.map(|o| (o, t.data.clone())))
            .collect();
        for (offset, batch) in acked.iter().chain(&txn_acked) {
            match by_offset.get(offset) {
                Some(b) if b.get(16..) == batch.get(16..) => {}
                other => {
                    return violation(
                        self,
                        format!(
                            "acknowledged record at offset {offset} lost (found {:?} bytes)",
                            other.map(Vec::len)
                        ),
                    )
                }
            }
        }
        // Markers completed every transaction.
        if o.last_stable_offset != o.high_watermark {
            return violation(
                self,
                format!(
                    "LSO {} below HW {} after every transaction ended",
                    o.last_stable_offset, o.high_watermark
                ),
            );
        }
        for t in &self.txns {
            if lp.has_ongoing_txn(t.producer_id, Some(t.epoch)) {
                return violation(
                    self,
                    format!(
                        "transaction of {} at epoch {} still open",
                        t.producer_id, t.epoch
                    ),
                );
            }
        }
        Ok(Report {
            events: self.events,
            acknowledged: self.acked.len() + txn_acked.len(),
            transactions: self.txns.len(),
            faults: self.faults,
            leader_epochs: self.appenders.len(),
            final_hw: o.high_watermark.get(),
        })
    }
}

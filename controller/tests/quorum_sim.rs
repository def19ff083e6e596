//! A deterministic, seeded simulation of the controller quorum over the
//! in-memory Raft backend.
//!
//! Three controllers run `start_on_raft` on openraft instances joined by an
//! in-process network (clients call the target's `Raft` directly) that the test
//! can cut: a node can be crashed (its Raft shut down and removed from the
//! network; a restart is a new Raft over the same memory log store and state
//! machine, modelling durable storage) or isolated from the others. A seeded
//! driver registers brokers, heartbeats them (or lets their sessions lapse),
//! asks for controlled shutdowns, creates and deletes topics, grows
//! partitions, toggles unclean leader election, crashes and restarts the
//! active controller and partitions nodes. Safety invariants are checked on
//! every image every node publishes and every Raft metrics change (background
//! watchers), and after every step:
//!
//! - at most one leader per Raft term;
//! - per node, `applied` and every partition's leader and partition epochs
//!   never decrease; broker epochs never decrease;
//! - every partition leader (if any) is in the ISR and replicas and is an
//!   active (registered, unfenced, not shutting down) broker; an inactive ISR
//!   member is only the last member of an offline partition's ISR;
//! - one leader per (partition, leader epoch) and one state per (partition,
//!   partition epoch), across nodes and time; one incarnation per broker epoch;
//! - images are prefix-consistent: two images with the same `applied` are equal;
//! - acknowledged writes survive failover (the leader's image after every
//!   successful request agrees with the acknowledged topic operations);
//! - an isolated node never commits a write.
//!
//! At the end the network heals, crashed nodes restart, a leader must exist,
//! a CreateTopics must succeed and all nodes must converge to one image.
//!
//! The whole run is a function of the seed: each seed runs on its own
//! current-thread tokio runtime with time paused (it jumps to the next timer
//! when every task waits), the controllers' clock is that time, their choices
//! (placement, topic ids) are seeded, each node's election timeout is one
//! value drawn from the seed, and the action sequence draws from an RNG
//! seeded by (seed, step). `quorum_sim_seed_replays_identically` checks that
//! two runs of a seed agree line for line. `SIM_SEED=<n>` runs one seed,
//! `SIM_STEPS=<n>` changes the number of steps per seed.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, ServerState, SnapshotPolicy};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use strand_controller::manager::cluster::{BrokerRegistrationRequest, HeartbeatRequest};
use strand_controller::manager::{ConfigOp, ControllerConfig, NewTopic};
use strand_controller::raft::store::{open_memory, MemLogStore, StateMachineStore};
use strand_controller::raft::{NodeId, Raft, TypeConfig};
use strand_controller::{
    start_on_raft, ControllerHandle, ControllerReply, ControllerRequest, QuorumSettings, StoreKind,
};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::PartitionRecord;
use strand_protocol::ErrorCode;
use strand_types::{BrokerEpoch, BrokerId, Clock, LeaderEpoch, PartitionEpoch};
use tokio::task::JoinHandle;
// Simulated time: every seed runs on its own paused current-thread runtime.
use tokio::time::Instant;
use uuid::Uuid;

const CONTROLLERS: [NodeId; 3] = [11, 12, 13];
const BROKERS: std::ops::RangeInclusive<i32> = 1..=5;
const TOPICS: [&str; 6] = ["t0", "t1", "t2", "t.3", "t_3", "t5"];
const SESSION_TIMEOUT_MS: u64 = 1500;
const ELECTION_TIMEOUT_MS: u64 = 150;
const CLUSTER_ID: &str = "sim-cluster";
const DEFAULT_SEEDS: [u64; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
const DEFAULT_STEPS: usize = 250;

// ---------------------------------------------------------------------------
// The in-process network.

#[derive(Default)]
struct NetState {
    /// Running nodes: id -> (generation, Raft).
    nodes: BTreeMap<NodeId, (u64, Raft)>,
    /// Nodes cut off from every other node.
    isolated: BTreeSet<NodeId>,
    /// Bumped on every isolation change (probes check it did not move).
    isolation_gen: u64,
    /// A armed cut: the next AppendEntries carrying entries from `leader`
    /// after `remaining` such deliveries isolates the leader instead, so a
    /// write is cut off mid-replication.
    trip: Option<Trip>,
    /// InstallSnapshot transfers started.
    snapshots_sent: u64,
}

struct Trip {
    leader: NodeId,
    remaining: usize,
}

type Net = Arc<Mutex<NetState>>;

/// The network factory of one Raft instance (node `from`, generation `gen`):
/// a crashed instance's in-flight RPCs are dropped too.
struct SimNetwork {
    from: NodeId,
    gen: u64,
    net: Net,
}

struct SimConn {
    from: NodeId,
    gen: u64,
    target: NodeId,
    net: Net,
}

impl RaftNetworkFactory<TypeConfig> for SimNetwork {
    type Network = SimConn;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> SimConn {
        SimConn {
            from: self.from,
            gen: self.gen,
            target,
            net: self.net.clone(),
        }
    }
}

fn unreachable<E: std::error::Error>(why: &str) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(why.to_string())))
}

impl SimConn {
    /// The target's Raft if the link from this instance to it is up.
    #[allow(clippy::result_large_err)]
    fn link<E: std::error::Error>(&self) -> Result<Raft, RPCError<NodeId, BasicNode, E>> {
        let st = self.net.lock();
        if st.nodes.get(&self.from).map(|(g, _)| *g) != Some(self.gen) {
            return Err(unreachable("sender is down"));
        }
        if st.isolated.contains(&self.from) || st.isolated.contains(&self.target) {
            return Err(unreachable("partitioned"));
        }
        match st.nodes.get(&self.target) {
            Some((_, raft)) => Ok(raft.clone()),
            None => Err(unreachable("target is down")),
        }
    }

    /// Delivers one RPC: the link must be up both when it is sent and when
    /// the response comes back (else the message is lost).
    async fn deliver<T, E, F>(
        &self,
        option: &RPCOption,
        send: impl FnOnce(Raft) -> F,
    ) -> Result<T, RPCError<NodeId, BasicNode, E>>
    where
        E: std::error::Error,
        F: std::future::Future<Output = Result<T, E>>,
    {
        let raft = self.link::<E>()?;
        let res = tokio::time::timeout(option.hard_ttl(), send(raft))
            .await
            .map_err(|_| unreachable("timed out"))?;
        self.link::<E>()?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for SimConn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        if !rpc.entries.is_empty() {
            let mut st = self.net.lock();
            if let Some(t) = st.trip.as_mut().filter(|t| t.leader == self.from) {
                if t.remaining == 0 {
                    st.trip = None;
                    st.isolated.insert(self.from);
                    st.isolation_gen += 1;
                } else {
                    t.remaining -= 1;
                }
            }
        }
        self.deliver(
            &option,
            |raft| async move { raft.append_entries(rpc).await },
        )
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        if rpc.offset == 0 {
            let st = &mut *self.net.lock();
            st.snapshots_sent += 1;
            if std::env::var("SIM_TRACE").is_ok() {
                eprintln!(
                    "net: InstallSnapshot {} -> {} up to {:?} (vote {})",
                    self.from,
                    self.target,
                    rpc.meta.last_log_id.map(|l| l.index),
                    rpc.vote
                );
            }
        }
        self.deliver(
            &option,
            |raft| async move { raft.install_snapshot(rpc).await },
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.deliver(&option, |raft| async move { raft.vote(rpc).await })
            .await
    }
}

// ---------------------------------------------------------------------------
// Invariants.

/// The leader a partition had in a leader epoch, the node that saw it, and
/// that node's applied position then.
type EpochLeader = (Option<BrokerId>, NodeId, u64);

#[derive(Default)]
struct Checker {
    violations: Vec<String>,
    /// Raft term -> the leader of that term (from any node's metrics).
    term_leader: BTreeMap<u64, (NodeId, NodeId)>,
    last_applied: HashMap<NodeId, u64>,
    /// (node, topic id, partition) -> last seen (leader epoch, partition epoch).
    last_epochs: HashMap<(NodeId, Uuid, i32), (LeaderEpoch, PartitionEpoch)>,
    /// (topic id, partition, leader epoch) -> leader.
    epoch_leader: HashMap<(Uuid, i32, LeaderEpoch), EpochLeader>,
    /// (topic id, partition, partition epoch) -> state.
    at_partition_epoch: HashMap<(Uuid, i32, PartitionEpoch), PartitionRecord>,
    /// applied -> the first image seen at that position.
    images_at: BTreeMap<u64, (NodeId, Arc<MetadataImage>)>,
    /// (node, broker) -> last seen broker epoch.
    broker_epochs: HashMap<(NodeId, BrokerId), BrokerEpoch>,
    /// (broker, epoch) -> incarnation.
    registrations: HashMap<(BrokerId, BrokerEpoch), Uuid>,
}

impl Checker {
    fn violation(&mut self, v: String) {
        if self.violations.len() < 50 {
            self.violations.push(v);
        }
    }

    /// `observer` sees `leader` as the leader of `term`.
    fn observe_leader(&mut self, observer: NodeId, term: u64, leader: NodeId) {
        match self.term_leader.get(&term) {
            Some(&(l, who)) if l != leader => self.violation(format!(
                "two leaders in term {term}: node {who} saw {l}, node {observer} sees {leader}"
            )),
            Some(_) => {}
            None => {
                if std::env::var("SIM_TRACE").is_ok() {
                    eprintln!("raft: node {leader} leads term {term} (seen by {observer})");
                }
                self.term_leader.insert(term, (leader, observer));
            }
        }
    }

    fn observe_image(&mut self, node: NodeId, img: &Arc<MetadataImage>) {
        let applied = img.applied;
        if let Some(&prev) = self.last_applied.get(&node) {
            if applied < prev {
                self.violation(format!(
                    "node {node}: applied went back from {prev} to {applied}"
                ));
            }
        }
        self.last_applied.insert(node, applied);
        match self.images_at.get(&applied) {
            Some((who, prev)) => {
                if **prev != **img {
                    let (who, prev) = (*who, prev.clone());
                    self.violation(format!(
                        "images diverge at applied {applied}: node {who} had {prev:?}, node {node} has {img:?}"
                    ));
                }
            }
            None => {
                self.images_at.insert(applied, (node, img.clone()));
            }
        }
        if !img.cluster_id.is_empty() && img.cluster_id != CLUSTER_ID {
            self.violation(format!("node {node}: cluster id {}", img.cluster_id));
        }
        for (id, b) in &img.brokers {
            if let Some(&prev) = self.broker_epochs.get(&(node, *id)) {
                if b.broker_epoch < prev {
                    self.violation(format!(
                        "node {node}: broker {id} epoch went back from {prev} to {}",
                        b.broker_epoch
                    ));
                }
            }
            self.broker_epochs.insert((node, *id), b.broker_epoch);
            let inc = *self
                .registrations
                .entry((*id, b.broker_epoch))
                .or_insert(b.incarnation_id);
            if inc != b.incarnation_id {
                self.violation(format!(
                    "node {node}: broker {id} epoch {} held by incarnations {inc} and {}",
                    b.broker_epoch, b.incarnation_id
                ));
            }
        }
        for (name, topic) in &img.topics {
            if img.topic_names.get(&topic.topic_id) != Some(name) {
                self.violation(format!(
                    "node {node}: topic {name} missing from topic_names"
                ));
            }
            for (i, p) in topic.partitions.iter().enumerate() {
                self.check_partition(node, img, name, i, p, applied);
            }
        }
    }

    fn check_partition(
        &mut self,
        node: NodeId,
        img: &MetadataImage,
        name: &str,
        index: usize,
        p: &PartitionRecord,
        applied: u64,
    ) {
        let at = format!(
            "node {node} applied {applied}: {name}-{} (leader {} epoch {}, partition epoch {}, replicas {:?}, isr {:?})",
            p.partition,
            BrokerId::to_wire(p.leader),
            p.leader_epoch,
            p.partition_epoch,
            p.replicas,
            p.isr
        );
        if p.partition as usize != index {
            self.violation(format!("{at}: stored at index {index}"));
        }
        let key = (node, p.topic_id, p.partition);
        if let Some(&(le, pe)) = self.last_epochs.get(&key) {
            if p.leader_epoch < le || p.partition_epoch < pe {
                self.violation(format!(
                    "{at}: epochs went back from (leader {le}, partition {pe})"
                ));
            }
        }
        self.last_epochs
            .insert(key, (p.leader_epoch, p.partition_epoch));
        match self
            .epoch_leader
            .get(&(p.topic_id, p.partition, p.leader_epoch))
        {
            Some(&(l, who, when)) if l != p.leader => self.violation(format!(
                "{at}: node {who} at applied {when} had leader {} in the same leader epoch",
                BrokerId::to_wire(l)
            )),
            Some(_) => {}
            None => {
                self.epoch_leader.insert(
                    (p.topic_id, p.partition, p.leader_epoch),
                    (p.leader, node, applied),
                );
            }
        }
        match self
            .at_partition_epoch
            .get(&(p.topic_id, p.partition, p.partition_epoch))
        {
            Some(prev) if prev != p => {
                let prev = prev.clone();
                self.violation(format!("{at}: the same partition epoch held {prev:?}"));
            }
            Some(_) => {}
            None => {
                self.at_partition_epoch
                    .insert((p.topic_id, p.partition, p.partition_epoch), p.clone());
            }
        }
        if p.isr.is_empty() {
            self.violation(format!("{at}: empty ISR"));
        }
        let distinct: BTreeSet<_> = p.isr.iter().collect();
        if distinct.len() != p.isr.len() || p.isr.iter().any(|r| !p.replicas.contains(r)) {
            self.violation(format!("{at}: ISR not a set of replicas"));
        }
        if let Some(leader) = p.leader {
            if !p.isr.contains(&leader) {
                self.violation(format!("{at}: leader not in ISR"));
            }
            if !img.is_active(leader) {
                self.violation(format!(
                    "{at}: leader is not an active broker ({:?})",
                    img.brokers.get(&leader)
                ));
            }
        }
        for &r in &p.isr {
            let offline_last = p.leader.is_none() && p.isr.len() == 1;
            if !(img.is_active(r) || offline_last) {
                self.violation(format!(
                    "{at}: inactive broker {r} in the ISR of a partition that is not offline with it as last member ({:?})",
                    img.brokers.get(&r)
                ));
            }
        }
    }
}

type SharedChecker = Arc<Mutex<Checker>>;

/// Watches a Raft instance's metrics: every leader claim and every follower's
/// view of the leader goes to the checker.
fn watch_metrics(id: NodeId, raft: &Raft, checker: SharedChecker) -> JoinHandle<()> {
    let mut rx = raft.metrics();
    tokio::spawn(async move {
        loop {
            {
                let m = rx.borrow_and_update();
                let mut c = checker.lock();
                if m.state == ServerState::Leader {
                    c.observe_leader(id, m.current_term, id);
                }
                if let Some(l) = m.current_leader {
                    c.observe_leader(id, m.current_term, l);
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
}

/// Watches every image a node's state machine publishes.
///
/// The image is read with the checker locked, as `Sim::check` does: the
/// per-node monotonicity checks compare observations in the order they are
/// recorded, so each must be recorded in the order it was read. (Reading
/// first and then waiting for the lock let a stale read be recorded after a
/// newer one `check` had taken meanwhile, which looked like the node going
/// backwards although its published image never did.)
fn watch_images(id: NodeId, sm: &StateMachineStore, checker: SharedChecker) -> JoinHandle<()> {
    let mut rx = sm.subscribe();
    tokio::spawn(async move {
        loop {
            {
                let mut c = checker.lock();
                let img = rx.borrow_and_update().clone();
                c.observe_image(id, &img);
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
}

// ---------------------------------------------------------------------------
// The simulated cluster.

struct Running {
    raft: Raft,
    handle: ControllerHandle,
    metrics_task: JoinHandle<()>,
}

struct SimNode {
    log: MemLogStore,
    sm: StateMachineStore,
    gen: u64,
    running: Option<Running>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum BrokerPhase {
    /// No process (never started, hung, or shut down).
    Offline,
    /// Started: registers every round until it gets an epoch.
    Registering,
    /// Registered at `epoch`: heartbeats every round.
    Running { epoch: BrokerEpoch },
    /// Heartbeats asking to shut down until told to.
    ShuttingDown { epoch: BrokerEpoch },
}

/// The current process of one broker id.
#[derive(Debug, Clone)]
struct BrokerModel {
    incarnation: Uuid,
    phase: BrokerPhase,
}

/// What the acknowledged topic operations say about a topic.
#[derive(Debug, Clone, PartialEq)]
enum TopicModel {
    Absent,
    Present {
        id: Uuid,
        partitions: i32,
    },
    /// The last operation's outcome is unknown (resolved at the next success).
    Unknown,
}

fn create_request(name: &str, partitions: i32, rf: i16) -> ControllerRequest {
    ControllerRequest::CreateTopics {
        topics: vec![NewTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: rf,
            ..Default::default()
        }],
        validate_only: false,
    }
}

#[derive(Debug, Clone)]
enum Action {
    /// A CreateTopics at the active controller, which is crashed (or
    /// isolated) `delay_us` after the request is sent.
    WriteDuringFailover {
        topic: usize,
        partitions: i32,
        rf: i16,
        /// Followers that get the entry before the leader is cut off.
        reach: usize,
        isolate: bool,
    },
    /// A new process for the broker id (the previous one, if any, is gone).
    StartBroker {
        broker: i32,
        inc: u128,
    },
    Lapse {
        broker: i32,
    },
    ControlledShutdown {
        broker: i32,
    },
    CreateTopic {
        topic: usize,
        partitions: i32,
        rf: i16,
    },
    DeleteTopic {
        topic: usize,
    },
    CreatePartitions {
        topic: usize,
        add: i32,
    },
    ToggleUnclean {
        topic: usize,
        on: bool,
    },
    CrashLeader,
    Restart,
    Isolate {
        leader: bool,
        pick: usize,
    },
    Heal,
    Sleep {
        ms: u64,
    },
    IsolatedProbe,
}

fn step_rng(seed: u64, step: usize) -> StdRng {
    StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (step as u64 + 1))
}

fn draw_action(rng: &mut StdRng) -> Action {
    let broker = rng.gen_range(BROKERS);
    let topic = rng.gen_range(0..TOPICS.len());
    match rng.gen_range(0..100) {
        0..=11 => Action::StartBroker {
            broker,
            inc: rng.gen(),
        },
        12..=17 => Action::Lapse { broker },
        18..=20 => Action::ControlledShutdown { broker },
        21..=32 => Action::CreateTopic {
            topic,
            partitions: rng.gen_range(1..=3),
            rf: [-1, 1, 2, 3][rng.gen_range(0..4)],
        },
        33..=36 => Action::WriteDuringFailover {
            topic,
            partitions: rng.gen_range(1..=3),
            rf: rng.gen_range(1..=2),
            reach: rng.gen_range(0..=1),
            isolate: rng.gen_bool(0.4),
        },
        37..=47 => Action::DeleteTopic { topic },
        48..=55 => Action::CreatePartitions {
            topic,
            add: rng.gen_range(1..=2),
        },
        56..=59 => Action::ToggleUnclean {
            topic,
            on: rng.gen_bool(0.5),
        },
        60..=66 => Action::CrashLeader,
        67..=73 => Action::Restart,
        74..=80 => Action::Isolate {
            leader: rng.gen_bool(0.6),
            pick: rng.gen_range(0..CONTROLLERS.len()),
        },
        81..=88 => Action::Heal,
        89..=93 => Action::Sleep {
            ms: rng.gen_range(200..=1600),
        },
        _ => Action::IsolatedProbe,
    }
}

struct Sim {
    seed: u64,
    /// Each node's Raft configuration (its own election timeout).
    configs: BTreeMap<NodeId, Arc<Config>>,
    clock: Arc<dyn Clock>,
    net: Net,
    nodes: BTreeMap<NodeId, SimNode>,
    checker: SharedChecker,
    image_tasks: Vec<JoinHandle<()>>,
    brokers: BTreeMap<i32, BrokerModel>,
    topics: BTreeMap<String, TopicModel>,
    crashed: Option<NodeId>,
    isolated: Option<NodeId>,
    /// Probes sent to isolated nodes: a success while still isolated is a bug.
    probes: Vec<JoinHandle<Option<String>>>,
    history: Vec<String>,
    step: usize,
    started: Instant,
}

/// The controllers' clock: the runtime's (paused, simulated) time, from a
/// fixed start, so broker sessions expire at the same simulated instant in
/// every run of a seed.
struct SimClock {
    start: Instant,
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        1_700_000_000_000 + self.monotonic_ms()
    }

    fn monotonic_ms(&self) -> i64 {
        self.start.elapsed().as_millis() as i64
    }
}

/// `seed` differs per node and per start: a controller that restarts must
/// not draw the topic ids it drew before (Kafka's are random).
fn settings(id: NodeId, seed: u64, clock: Arc<dyn Clock>) -> QuorumSettings {
    let voters: BTreeMap<NodeId, String> = CONTROLLERS
        .iter()
        .map(|&v| (v, "127.0.0.1:1".to_string()))
        .collect();
    QuorumSettings {
        node_id: id,
        cluster_id: CLUSTER_ID.into(),
        voters: voters.clone(),
        initial_voters: voters,
        store: StoreKind::Memory,
        election_timeout_ms: ELECTION_TIMEOUT_MS,
        session_timeout_ms: SESSION_TIMEOUT_MS,
        write_lease_ms: strand_controller::DEFAULT_WRITE_LEASE_MS,
        listener: None,
        rpc: strand_controller::PlainRpc::shared(),
        bootstrap: Vec::new(),
        controller: ControllerConfig {
            node_id: BrokerId::new(id as i32),
            num_partitions: 3,
            default_replication_factor: 2,
            producer_id_block_size: 1000,
            max_replication_factor: usize::MAX,
            leader_balance_interval_ms: None,
            unclean_leader_election_enable: false,
            unclean_election_interval_ms: None,
            group_bounds: Default::default(),
        },
        clock,
        seed: Some(seed),
    }
}

/// A runtime for one simulation: a single thread, time paused (it jumps
/// to the next timer whenever every task waits), so a seed's run is a
/// function of the seed.
fn sim_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

impl Sim {
    async fn new(seed: u64) -> Sim {
        // openraft draws each election timeout from the thread's RNG, which
        // no seed reaches; a range of one value per node, drawn from the
        // seed, keeps elections a function of the seed (distinct values, so
        // no two candidates time out together for ever).
        let mut rng = StdRng::seed_from_u64(seed);
        let mut spread: Vec<u64> = (0..CONTROLLERS.len() as u64)
            .map(|i| i * ELECTION_TIMEOUT_MS / 3)
            .collect();
        for i in (1..spread.len()).rev() {
            spread.swap(i, rng.gen_range(0..=i));
        }
        let configs = CONTROLLERS
            .iter()
            .zip(spread)
            .map(|(&id, extra)| {
                let timeout =
                    ELECTION_TIMEOUT_MS + extra + rng.gen_range(0..ELECTION_TIMEOUT_MS / 4);
                let config = Config {
                    cluster_name: CLUSTER_ID.into(),
                    heartbeat_interval: (ELECTION_TIMEOUT_MS / 5).max(20),
                    election_timeout_min: timeout,
                    election_timeout_max: timeout + 1,
                    // Snapshot and purge often, so lagging and restarted nodes
                    // catch up by InstallSnapshot too.
                    snapshot_policy: SnapshotPolicy::LogsSinceLast(20),
                    max_in_snapshot_log_to_keep: 3,
                    purge_batch_size: 1,
                    ..Default::default()
                };
                (id, Arc::new(config.validate().expect("valid raft config")))
            })
            .collect();
        let checker = SharedChecker::default();
        let mut sim = Sim {
            seed,
            configs,
            clock: Arc::new(SimClock {
                start: Instant::now(),
            }),
            net: Net::default(),
            nodes: BTreeMap::new(),
            checker: checker.clone(),
            image_tasks: vec![],
            // Every broker starts with the cluster.
            brokers: BROKERS
                .map(|b| {
                    (
                        b,
                        BrokerModel {
                            incarnation: Uuid::from_u128(b as u128),
                            phase: BrokerPhase::Registering,
                        },
                    )
                })
                .collect(),
            topics: TOPICS
                .iter()
                .map(|t| (t.to_string(), TopicModel::Absent))
                .collect(),
            crashed: None,
            isolated: None,
            probes: vec![],
            history: vec![],
            step: 0,
            started: Instant::now(),
        };
        for id in CONTROLLERS {
            let (log, sm) = open_memory();
            sim.image_tasks.push(watch_images(id, &sm, checker.clone()));
            sim.nodes.insert(
                id,
                SimNode {
                    log,
                    sm,
                    gen: 0,
                    running: None,
                },
            );
        }
        for id in CONTROLLERS {
            sim.start(id).await;
        }
        sim
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        let keep = if std::env::var("SIM_VERBOSE").is_ok() {
            usize::MAX
        } else {
            25
        };
        let tail: Vec<&String> = self.history.iter().rev().take(keep).rev().collect();
        panic!(
            "quorum_sim seed {} step {}: {what}\nlast actions:\n  {}\nrerun with SIM_SEED={}",
            self.seed,
            self.step,
            tail.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n  "),
            self.seed
        );
    }

    fn note(&mut self, s: impl Into<String>) {
        let s = s.into();
        let ms = self.started.elapsed().as_millis();
        self.history.push(format!("[{} @{ms}ms] {s}", self.step));
        if std::env::var("SIM_TRACE").is_ok() {
            eprintln!(
                "seed {} {}",
                self.seed,
                self.history.last().expect("just pushed")
            );
        }
    }

    /// Starts (or restarts) a node: a new Raft over its stores, then the controller.
    async fn start(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).expect("known node");
        node.gen += 1;
        let gen = node.gen;
        let network = SimNetwork {
            from: id,
            gen: node.gen,
            net: self.net.clone(),
        };
        let raft = match Raft::new(
            id,
            self.configs[&id].clone(),
            network,
            node.log.clone(),
            node.sm.clone(),
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                let e = e.to_string();
                self.fail(format!("Raft::new for node {id} failed: {e}"))
            }
        };
        self.net.lock().nodes.insert(id, (node.gen, raft.clone()));
        let metrics_task = watch_metrics(id, &raft, self.checker.clone());
        let sm = node.sm.clone();
        let started = start_on_raft(
            raft.clone(),
            sm,
            settings(
                id,
                StdRng::seed_from_u64(self.seed ^ (id << 32) ^ gen).gen(),
                self.clock.clone(),
            ),
        )
        .await;
        let mut started = match started {
            Ok(n) => n,
            Err(e) => {
                let e = e.to_string();
                self.fail(format!("start_on_raft for node {id} failed: {e}"))
            }
        };
        started.handle.request_timeout = Duration::from_millis(300);
        let node = self.nodes.get_mut(&id).expect("known node");
        node.running = Some(Running {
            raft,
            handle: started.handle,
            metrics_task,
        });
    }

    /// Crashes a node: off the network, Raft shut down, controller dropped.
    async fn crash(&mut self, id: NodeId) {
        self.net.lock().nodes.remove(&id);
        let node = self.nodes.get_mut(&id).expect("known node");
        if let Some(r) = node.running.take() {
            let _ = r.raft.shutdown().await;
            drop(r.handle);
            // Let the metrics watcher see the final state, then stop it.
            tokio::time::sleep(Duration::from_millis(20)).await;
            r.metrics_task.abort();
        }
        // Let the state machine worker of the old instance drain before a
        // restart reuses the stores.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    fn set_isolated(&mut self, id: Option<NodeId>) {
        let mut net = self.net.lock();
        net.isolated.clear();
        net.isolated.extend(id);
        net.isolation_gen += 1;
        drop(net);
        self.isolated = id;
    }

    /// Every running node's Raft state, for failure reports.
    fn metrics_dump(&self) -> String {
        let mut out = vec![];
        for (id, n) in &self.nodes {
            let Some(r) = &n.running else {
                out.push(format!("{id}: down"));
                continue;
            };
            let m = r.raft.metrics().borrow().clone();
            out.push(format!(
                "{id}: {:?} term {} leader {:?} last_log {:?} applied {:?} snapshot {:?} purged {:?} replication {:?} image applied {}",
                m.state,
                m.current_term,
                m.current_leader,
                m.last_log_index,
                m.last_applied.map(|l| l.index),
                m.snapshot.map(|l| l.index),
                m.purged.map(|l| l.index),
                m.replication,
                n.sm.image().applied,
            ));
        }
        out.join("; ")
    }

    fn running_ids(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.running.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    fn handle(&self, id: NodeId) -> Option<ControllerHandle> {
        self.nodes[&id].running.as_ref().map(|r| r.handle.clone())
    }

    /// The leader of the reachable side: a running, non-isolated node that is
    /// Raft leader (the highest term wins).
    fn current_leader(&self) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter(|(id, _)| Some(**id) != self.isolated)
            .filter_map(|(id, n)| {
                let r = n.running.as_ref()?;
                let m = r.raft.metrics().borrow().clone();
                (m.state == ServerState::Leader).then_some((m.current_term, *id))
            })
            .max()
            .map(|(_, id)| id)
    }

    async fn wait_leader(&self, deadline: Instant) -> Option<NodeId> {
        loop {
            if let Some(l) = self.current_leader() {
                return Some(l);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sends a request to the active controller. None: no answer (no leader
    /// found, or the outcome is unknown because the call timed out).
    async fn request(&mut self, req: ControllerRequest) -> Option<(NodeId, ControllerReply)> {
        let deadline = Instant::now() + Duration::from_secs(6);
        loop {
            if let Some(l) = self.wait_leader(deadline).await {
                let h = self.handle(l).expect("leader runs");
                match tokio::time::timeout(Duration::from_secs(5), h.call(req.clone())).await {
                    Ok(Ok(ControllerReply::NotController { .. })) => {}
                    Ok(Ok(reply)) => return Some((l, reply)),
                    // Refused before deciding: safe to retry.
                    Ok(Err(_)) => {}
                    Err(_) => {
                        // The leader of the reachable majority (at most one
                        // node is ever impaired) answers in milliseconds; 5 s
                        // of silence means its event loop is wedged.
                        let dump = self.metrics_dump();
                        self.fail(format!(
                            "liveness: the active controller {l} did not answer {req:?} within 5 s although its Raft leads a reachable majority; raft: {dump}"
                        ));
                    }
                }
            }
            if Instant::now() >= deadline {
                self.note("no active controller answered");
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn leader_image(&self, leader: NodeId) -> Arc<MetadataImage> {
        self.nodes[&leader].sm.image()
    }

    fn actual_topic(img: &MetadataImage, name: &str) -> TopicModel {
        match img.topics.get(name) {
            Some(t) => TopicModel::Present {
                id: t.topic_id,
                partitions: t.partitions.len() as i32,
            },
            None => TopicModel::Absent,
        }
    }

    /// After a successful request at `leader`: its image holds every
    /// committed write, so it must agree with every acknowledged topic
    /// operation. Topics whose last operation's outcome is unknown are
    /// resolved from it (an uncertain write is decided by the time a later
    /// request succeeds at the active controller).
    fn check_model(&mut self, leader: NodeId) {
        let img = self.leader_image(leader);
        let mut errors = vec![];
        for (name, model) in self.topics.iter_mut() {
            let actual = Self::actual_topic(&img, name);
            if *model == TopicModel::Unknown {
                *model = actual;
            } else if *model != actual {
                errors.push(format!(
                    "acknowledged state of topic {name} is {model:?}, but the active controller {leader} (applied {}) has {actual:?}",
                    img.applied
                ));
            }
        }
        if let Some(e) = errors.into_iter().next() {
            self.fail(e);
        }
    }

    /// A topic operation answered at `leader` with `outcome`: Some(state) when
    /// it succeeded, None when it was refused (no change); then the model is
    /// checked. An unknown outcome makes the topic Unknown.
    fn topic_outcome(
        &mut self,
        name: &str,
        leader: NodeId,
        result: Result<TopicModel, strand_controller::manager::ApiError>,
    ) {
        match result {
            Ok(state) => {
                self.note(format!("{name} acknowledged: {state:?}"));
                self.topics.insert(name.to_string(), state);
                self.check_model(leader);
            }
            Err(e) if e.code == ErrorCode::NotController => {
                self.note(format!("{name}: outcome unknown ({})", e.message));
                self.topics.insert(name.to_string(), TopicModel::Unknown);
            }
            Err(e) => {
                self.note(format!("{name}: refused with {:?}", e.code));
                self.check_model(leader);
            }
        }
    }

    /// No answer to a topic operation: its outcome is unknown.
    fn unknown(&mut self, name: &str, reply: Option<(NodeId, ControllerReply)>) {
        self.note(format!("{name}: no decision ({reply:?})"));
        self.topics.insert(name.to_string(), TopicModel::Unknown);
    }

    async fn act(&mut self, action: &Action) {
        match action.clone() {
            Action::StartBroker { broker, inc } => {
                self.brokers.insert(
                    broker,
                    BrokerModel {
                        incarnation: Uuid::from_u128(inc),
                        phase: BrokerPhase::Registering,
                    },
                );
            }
            Action::Lapse { broker } => {
                self.brokers.get_mut(&broker).expect("known broker").phase = BrokerPhase::Offline;
            }
            Action::ControlledShutdown { broker } => {
                let b = self.brokers.get_mut(&broker).expect("known broker");
                if let BrokerPhase::Running { epoch } = b.phase {
                    b.phase = BrokerPhase::ShuttingDown { epoch };
                }
            }
            Action::CreateTopic {
                topic,
                partitions,
                rf,
            } => {
                let name = TOPICS[topic];
                match self.request(create_request(name, partitions, rf)).await {
                    Some((l, ControllerReply::CreateTopics(r))) if r.len() == 1 => {
                        let prior = self.topics[name].clone();
                        let result = r[0].clone().map(|created| TopicModel::Present {
                            id: created.topic_id,
                            partitions: created.num_partitions,
                        });
                        if result.is_ok()
                            && !matches!(prior, TopicModel::Absent | TopicModel::Unknown)
                        {
                            self.fail(format!("created {name}, which exists: {prior:?}"));
                        }
                        self.topic_outcome(name, l, result);
                    }
                    other => self.unknown(name, other),
                }
            }
            Action::WriteDuringFailover {
                topic,
                partitions,
                rf,
                reach,
                isolate,
            } => {
                let name = TOPICS[topic];
                if self.crashed.is_some() || self.isolated.is_some() {
                    self.note("write during failover: skipped (a node is impaired)");
                    return;
                }
                let Some(l) = self
                    .wait_leader(Instant::now() + Duration::from_secs(5))
                    .await
                else {
                    return;
                };
                let h = self.handle(l).expect("leader runs");
                let req = create_request(name, partitions, rf);
                self.net.lock().trip = Some(Trip {
                    leader: l,
                    remaining: reach,
                });
                let call = tokio::spawn(async move {
                    tokio::time::timeout(Duration::from_secs(2), h.call(req)).await
                });
                // Wait for the cut (a refused write appends nothing: cut anyway).
                let cut_by = Instant::now() + Duration::from_millis(500);
                while self.net.lock().trip.is_some() && Instant::now() < cut_by {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                self.net.lock().trip = None;
                self.set_isolated(Some(l));
                if isolate {
                    self.note(format!(
                        "leader {l} isolated during a write (reach {reach})"
                    ));
                } else {
                    self.note(format!("leader {l} crashed during a write (reach {reach})"));
                    self.crash(l).await;
                    self.crashed = Some(l);
                    self.set_isolated(None);
                }
                match call.await {
                    Ok(Ok(Ok(ControllerReply::CreateTopics(r)))) if r.len() == 1 => {
                        let prior = self.topics[name].clone();
                        match r[0].clone() {
                            Ok(created) => {
                                if !matches!(prior, TopicModel::Absent | TopicModel::Unknown) {
                                    self.fail(format!("created {name}, which exists: {prior:?}"));
                                }
                                // Acknowledged before the failover: it must survive.
                                self.note(format!(
                                    "{name} acknowledged by {l} before the failover"
                                ));
                                self.topics.insert(
                                    name.to_string(),
                                    TopicModel::Present {
                                        id: created.topic_id,
                                        partitions: created.num_partitions,
                                    },
                                );
                            }
                            Err(e) if e.code == ErrorCode::NotController => {
                                self.note(format!("{name}: outcome unknown ({})", e.message));
                                self.topics.insert(name.to_string(), TopicModel::Unknown);
                            }
                            Err(e) => self.note(format!("{name}: refused with {:?}", e.code)),
                        }
                    }
                    other => {
                        self.note(format!("{name}: outcome unknown ({other:?})"));
                        self.topics.insert(name.to_string(), TopicModel::Unknown);
                    }
                }
            }
            Action::DeleteTopic { topic } => {
                let name = TOPICS[topic];
                let req = ControllerRequest::DeleteTopics {
                    names: vec![name.to_string()],
                };
                match self.request(req).await {
                    Some((l, ControllerReply::DeleteTopics(r))) if r.len() == 1 => {
                        let prior = self.topics[name].clone();
                        if let Ok(id) = &r[0] {
                            match prior {
                                TopicModel::Present { id: known, .. } if known == *id => {}
                                TopicModel::Unknown => {}
                                other => self.fail(format!(
                                    "deleted {name} ({id}), but the model has {other:?}"
                                )),
                            }
                        }
                        let result = r[0].clone().map(|_| TopicModel::Absent);
                        self.topic_outcome(name, l, result);
                    }
                    other => self.unknown(name, other),
                }
            }
            Action::CreatePartitions { topic, add } => {
                let name = TOPICS[topic];
                let prior = self.topics[name].clone();
                let current = match prior {
                    TopicModel::Present { partitions, .. } => partitions,
                    _ => 1,
                };
                let req = ControllerRequest::CreatePartitions {
                    topics: vec![(name.to_string(), current + add, None)],
                    validate_only: false,
                };
                match self.request(req).await {
                    Some((l, ControllerReply::Each(r))) if r.len() == 1 => {
                        let result = match (&r[0], prior) {
                            (Ok(()), TopicModel::Present { id, .. }) => Ok(TopicModel::Present {
                                id,
                                partitions: current + add,
                            }),
                            (Ok(()), TopicModel::Unknown) => {
                                // What it grew is unknown: take it from the image.
                                Ok(Self::actual_topic(&self.leader_image(l), name))
                            }
                            (Ok(()), TopicModel::Absent) => {
                                self.fail(format!("grew {name}, which the model says is absent"))
                            }
                            (Err(e), _) => Err(e.clone()),
                        };
                        self.topic_outcome(name, l, result);
                    }
                    other => self.unknown(name, other),
                }
            }
            Action::ToggleUnclean { topic, on } => {
                let name = TOPICS[topic].to_string();
                let op = if on {
                    ConfigOp::Set("true".into())
                } else {
                    ConfigOp::Delete
                };
                let req = ControllerRequest::AlterTopicConfigs {
                    topics: vec![(
                        name.clone(),
                        vec![("unclean.leader.election.enable".into(), op)],
                    )],
                    incremental: true,
                    validate_only: false,
                };
                let r = self.request(req).await;
                self.note(format!(
                    "unclean election {on} on {name}: {:?}",
                    r.map(|x| x.1)
                ));
            }
            Action::CrashLeader => {
                if self.crashed.is_some() || self.isolated.is_some() {
                    return self.note("crash leader: skipped (a node is impaired)");
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                if let Some(l) = self.wait_leader(deadline).await {
                    self.note(format!("crash leader {l}"));
                    self.crash(l).await;
                    self.crashed = Some(l);
                }
            }
            Action::Restart => {
                if let Some(id) = self.crashed.take() {
                    self.note(format!("restart {id}"));
                    self.start(id).await;
                }
            }
            Action::Isolate { leader, pick } => {
                if self.crashed.is_some() || self.isolated.is_some() {
                    return self.note("isolate: skipped (a node is impaired)");
                }
                let target = if leader {
                    self.wait_leader(Instant::now() + Duration::from_secs(5))
                        .await
                        .unwrap_or(CONTROLLERS[pick])
                } else {
                    CONTROLLERS[pick]
                };
                self.note(format!("isolate {target}"));
                self.set_isolated(Some(target));
            }
            Action::Heal => {
                if let Some(id) = self.isolated {
                    self.note(format!("heal {id}"));
                    self.set_isolated(None);
                }
            }
            Action::Sleep { ms } => {
                self.note(format!("sleep {ms} ms"));
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Action::IsolatedProbe => {
                let Some(id) = self.isolated else { return };
                let Some(h) = self.handle(id) else { return };
                let net = self.net.clone();
                let gen = net.lock().isolation_gen;
                let name = format!("probe-{}", self.step);
                self.note(format!("probe isolated node {id} with {name}"));
                self.probes.push(tokio::spawn(async move {
                    let req = ControllerRequest::CreateTopics {
                        topics: vec![NewTopic {
                            name: name.clone(),
                            num_partitions: 1,
                            replication_factor: 1,
                            ..Default::default()
                        }],
                        validate_only: false,
                    };
                    let r = tokio::time::timeout(Duration::from_secs(3), h.call(req)).await;
                    let still_isolated = net.lock().isolation_gen == gen;
                    match r {
                        Ok(Ok(ControllerReply::CreateTopics(v)))
                            if still_isolated && v.iter().any(|x| x.is_ok()) =>
                        {
                            Some(format!(
                                "isolated node {id} acknowledged CreateTopics {name}: {v:?}"
                            ))
                        }
                        _ => None,
                    }
                }));
            }
        }
    }

    /// Every broker process does its part: registering ones register,
    /// running ones heartbeat (reporting a lagging offset now and then).
    async fn broker_round(&mut self, rng: &mut StdRng) {
        for id in BROKERS {
            let lag = rng.gen_bool(0.1);
            let b = self.brokers[&id].clone();
            match b.phase {
                BrokerPhase::Offline => {}
                BrokerPhase::Registering => self.register(id, b.incarnation).await,
                BrokerPhase::Running { epoch } | BrokerPhase::ShuttingDown { epoch } => {
                    let shutting = matches!(b.phase, BrokerPhase::ShuttingDown { .. });
                    self.heartbeat(id, epoch, lag, shutting).await
                }
            }
        }
    }

    async fn register(&mut self, broker: i32, incarnation: Uuid) {
        let req = BrokerRegistrationRequest {
            broker_id: BrokerId::new(broker),
            incarnation_id: incarnation,
            host: "localhost".into(),
            port: 9000 + broker as u16,
            rack: None,
            endpoints: vec![],
            cluster_id: String::new(),
            log_dirs: vec![],
        };
        match self.request(ControllerRequest::RegisterBroker(req)).await {
            Some((l, ControllerReply::Registered(Ok(epoch)))) => {
                self.note(format!("broker {broker} registered at epoch {epoch}"));
                let img = self.leader_image(l);
                match img.brokers.get(&BrokerId::new(broker)) {
                    Some(b) if b.broker_epoch == epoch && b.incarnation_id == incarnation => {}
                    other => self.fail(format!(
                        "registration of broker {broker} at epoch {epoch} acknowledged, but leader {l}'s image has {other:?}"
                    )),
                }
                self.brokers.get_mut(&broker).expect("known broker").phase =
                    BrokerPhase::Running { epoch };
            }
            Some((_, ControllerReply::Registered(Err(e))))
                if e.code == ErrorCode::DuplicateBrokerRegistration =>
            {
                self.note(format!(
                    "broker {broker}: duplicate registration, will retry"
                ));
            }
            other => self.note(format!("broker {broker}: registration {other:?}")),
        }
    }

    async fn heartbeat(&mut self, id: i32, epoch: BrokerEpoch, lag: bool, want_shutdown: bool) {
        let offset = match self.current_leader() {
            Some(l) if !lag => self.leader_image(l).applied,
            _ => 0,
        };
        let req = HeartbeatRequest {
            broker_id: BrokerId::new(id),
            broker_epoch: epoch,
            current_metadata_offset: offset,
            want_fence: false,
            want_shutdown,
            offline_log_dirs: vec![],
        };
        match self.request(ControllerRequest::Heartbeat(req)).await {
            Some((_, ControllerReply::Heartbeat(Ok(reply)))) if reply.should_shutdown => {
                self.note(format!("broker {id} shut down"));
                self.brokers.get_mut(&id).expect("known broker").phase = BrokerPhase::Offline;
            }
            Some((_, ControllerReply::Heartbeat(Err(e)))) => {
                // Only this process registers this id, at the epoch it was given.
                self.note(format!("broker {id} heartbeat at epoch {epoch}: {e:?}"));
                if e.code != ErrorCode::NotController {
                    self.fail(format!(
                        "heartbeat of broker {id} at its acknowledged epoch {epoch} refused: {e:?}"
                    ));
                }
            }
            _ => {}
        }
    }

    /// Checks every node's current image and metrics, and the background
    /// watchers' findings.
    async fn check(&mut self) {
        for (id, node) in &self.nodes {
            {
                // Read under the checker's lock (see `watch_images`).
                let mut c = self.checker.lock();
                let img = node.sm.image();
                c.observe_image(*id, &img);
            }
            if let Some(r) = &node.running {
                let m = r.raft.metrics().borrow().clone();
                let mut c = self.checker.lock();
                if m.state == ServerState::Leader {
                    c.observe_leader(*id, m.current_term, *id);
                }
                if let Some(l) = m.current_leader {
                    c.observe_leader(*id, m.current_term, l);
                }
            }
        }
        let mut done = vec![];
        for p in std::mem::take(&mut self.probes) {
            if p.is_finished() {
                done.push(p);
            } else {
                self.probes.push(p);
            }
        }
        for p in done {
            if let Ok(Some(v)) = p.await {
                self.checker.lock().violation(v);
            }
        }
        let violations = self.checker.lock().violations.clone();
        if !violations.is_empty() {
            self.fail(format!("invariants violated:\n{}", violations.join("\n")));
        }
    }

    async fn run(&mut self, steps: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        if self.wait_leader(deadline).await.is_none() {
            self.fail("no leader elected at start");
        }
        for step in 0..steps {
            self.step = step;
            let mut rng = step_rng(self.seed, step);
            let action = draw_action(&mut rng);
            self.note(format!("{action:?}"));
            self.act(&action).await;
            self.broker_round(&mut rng).await;
            self.check().await;
            // Some wall-clock time per step, so sessions expire and ticks
            // fence brokers between and during steps.
            let pause = rng.gen_range(0..=40);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        self.step = steps;
        self.finish().await;
    }

    /// Liveness: heal, restart, a leader answers, all nodes converge.
    async fn finish(&mut self) {
        self.note("heal everything");
        self.set_isolated(None);
        if let Some(id) = self.crashed.take() {
            self.start(id).await;
        }
        let Some(_) = self
            .wait_leader(Instant::now() + Duration::from_secs(10))
            .await
        else {
            self.fail("no leader after healing")
        };
        let req = ControllerRequest::CreateTopics {
            topics: vec![NewTopic {
                name: "final".into(),
                num_partitions: 1,
                replication_factor: 1,
                ..Default::default()
            }],
            validate_only: false,
        };
        // A leader may still change as the healed nodes rejoin: a write whose
        // leader stepped down answers "outcome unknown" (NOT_CONTROLLER), and
        // a client retries it, as Kafka's admin client does; after such an
        // answer TOPIC_ALREADY_EXISTS means the first attempt committed.
        let retry_until = Instant::now() + Duration::from_secs(10);
        let mut unknown = false;
        loop {
            match self.request(req.clone()).await {
                Some((l, ControllerReply::CreateTopics(r)))
                    if r.len() == 1
                        && r[0].as_ref().map_or_else(
                            |e| {
                                e.code == ErrorCode::InvalidReplicationFactor
                                    || (unknown && e.code == ErrorCode::TopicAlreadyExists)
                            },
                            |_| true,
                        ) =>
                {
                    // With every broker fenced the topic cannot be placed, but the
                    // controller answered a decision: the quorum is live.
                    self.note(format!("final create: {:?}", r[0]));
                    self.check_model(l);
                    break;
                }
                Some((_, ControllerReply::CreateTopics(r)))
                    if r.len() == 1
                        && r[0]
                            .as_ref()
                            .is_err_and(|e| e.code == ErrorCode::NotController)
                        && Instant::now() < retry_until =>
                {
                    self.note(format!("final create: {:?}, retried", r[0]));
                    unknown = true;
                }
                other => self.fail(format!("final CreateTopics failed: {other:?}")),
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let imgs: Vec<Arc<MetadataImage>> = self.nodes.values().map(|n| n.sm.image()).collect();
            if imgs.windows(2).all(|w| w[0] == w[1]) {
                break;
            }
            if Instant::now() >= deadline {
                let applied: Vec<u64> = imgs.iter().map(|i| i.applied).collect();
                self.fail(format!(
                    "images did not converge after healing: applied {applied:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.check().await;
    }

    async fn shutdown(&mut self) {
        for id in self.running_ids() {
            self.crash(id).await;
        }
        for t in self.image_tasks.drain(..) {
            t.abort();
        }
        for p in self.probes.drain(..) {
            p.abort();
        }
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(s) => s
            .split(',')
            .map(|x| x.trim().parse().expect("SIM_SEED: comma-separated u64s"))
            .collect(),
        Err(_) => match std::env::var("SIM_SEEDS") {
            Ok(n) => (1..=n.parse().expect("SIM_SEEDS: a number")).collect(),
            Err(_) => DEFAULT_SEEDS.to_vec(),
        },
    }
}

fn steps() -> usize {
    std::env::var("SIM_STEPS")
        .ok()
        .map(|s| s.parse().expect("SIM_STEPS: a number"))
        .unwrap_or(DEFAULT_STEPS)
}

/// The action sequence is a function of the seed alone.
#[test]
fn quorum_sim_actions_are_deterministic() {
    for seed in DEFAULT_SEEDS {
        let a: Vec<String> = (0..DEFAULT_STEPS)
            .map(|s| format!("{:?}", draw_action(&mut step_rng(seed, s))))
            .collect();
        let b: Vec<String> = (0..DEFAULT_STEPS)
            .map(|s| format!("{:?}", draw_action(&mut step_rng(seed, s))))
            .collect();
        assert_eq!(a, b, "seed {seed}");
    }
}

/// One seed's simulation: a summary line when it passes, and its history.
async fn simulate(seed: u64, steps: usize) -> (String, Vec<String>) {
    let started = Instant::now();
    let wall = std::time::Instant::now();
    let mut sim = Sim::new(seed).await;
    sim.run(steps).await;
    let terms = sim.checker.lock().term_leader.len();
    let applied = sim
        .nodes
        .values()
        .next()
        .map_or(0, |n| n.sm.image().applied);
    let snapshots: Vec<String> = sim
        .nodes
        .iter()
        .filter_map(|(id, n)| {
            let m = n.running.as_ref()?.raft.metrics().borrow().clone();
            Some(format!(
                "{id}: snapshot {:?} purged {:?}",
                m.snapshot.map(|l| l.index),
                m.purged.map(|l| l.index)
            ))
        })
        .collect();
    if std::env::var("SIM_VERBOSE").is_ok() {
        eprintln!("{}", sim.history.join("\n"));
    }
    let acked = sim
        .history
        .iter()
        .filter(|h| h.contains(" acknowledged"))
        .count();
    let fenced = sim
        .history
        .iter()
        .filter(|h| h.contains("shut down"))
        .count();
    sim.shutdown().await;
    let history = std::mem::take(&mut sim.history);
    assert!(
        terms >= 2 && acked >= 5,
        "quorum_sim seed {seed}: the run did too little ({terms} terms, {acked} acknowledged topic operations)"
    );
    let summary = format!(
        "quorum_sim seed {seed}: {steps} steps passed in {:.1?} simulated ({:.1?} wall): {terms} terms, {applied} records, {acked} acknowledged topic ops, {fenced} controlled shutdowns; {}",
        started.elapsed(),
        wall.elapsed(),
        snapshots.join(", ")
    );
    (summary, history)
}

/// Runs one seed on its own simulated-time runtime.
fn simulate_seed(seed: u64, steps: usize) -> (String, Vec<String>) {
    sim_runtime().block_on(simulate(seed, steps))
}

/// The seeds run side by side, one thread per core, each seed on its own
/// simulated time.
#[test]
fn quorum_sim() {
    let steps = steps();
    let queue = Arc::new(Mutex::new(seeds()));
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runs: Vec<_> = (0..workers)
        .map(|_| {
            let queue = queue.clone();
            std::thread::spawn(move || {
                let mut failures = vec![];
                loop {
                    let Some(seed) = queue.lock().pop() else {
                        return failures;
                    };
                    let run = std::thread::spawn(move || simulate_seed(seed, steps));
                    match run.join() {
                        Ok((summary, _)) => eprintln!("{summary}"),
                        Err(p) => {
                            let msg = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default();
                            failures.push(format!("seed {seed} FAILED:\n{msg}"));
                        }
                    }
                }
            })
        })
        .collect();
    let failures: Vec<String> = runs
        .into_iter()
        .flat_map(|r| r.join().expect("a worker collects its seeds' failures"))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A seed replays: two runs of one seed take the same steps with the same
/// outcomes at the same simulated instants (elections, acknowledgements,
/// sessions fenced), so a failing seed reproduces.
#[test]
fn quorum_sim_seed_replays_identically() {
    for seed in [DEFAULT_SEEDS[0], DEFAULT_SEEDS[1]] {
        let (_, first) = simulate_seed(seed, 120);
        let (_, second) = simulate_seed(seed, 120);
        assert!(first.len() > 120, "seed {seed}: a history of every step");
        if let Some(i) = (0..first.len().min(second.len())).find(|&i| first[i] != second[i]) {
            panic!(
                "seed {seed} diverged at history line {i}:\n  first:  {}\n  second: {}",
                first[i], second[i]
            );
        }
        assert_eq!(first.len(), second.len(), "seed {seed}: history lengths");
    }
}

/// A scenario around the wedge the simulation found (see `quorum_sim`,
/// seed 4): the active controller proposes a write and is cut off before
/// replicating it; the majority commits `grow` entries (enough to snapshot
/// and purge past the cut-off index when large); then the network heals and
/// the old active controller must answer requests again (its pending write
/// must be resolved). openraft 0.9 answers a pending `client_write` only when
/// its index is applied or truncated as a conflict; if the old leader catches
/// up purely by InstallSnapshot (its log shorter than the snapshot), the write
/// is never answered and `Controller::commit` blocks the event loop for good.
/// Whether the healed node is reached by a conflicting AppendEntries first
/// (which resolves the write) or by the snapshot depends on the new leader's
/// probing, so these scenarios do not force the wedge; the simulation hit it.
async fn cut_off_write(grow: usize) -> Result<(), String> {
    let mut sim = Sim::new(0).await;
    sim.wait_leader(Instant::now() + Duration::from_secs(10))
        .await
        .ok_or("no leader")?;
    let mut rng = StdRng::seed_from_u64(0);
    for _ in 0..3 {
        sim.broker_round(&mut rng).await;
    }
    let l = sim
        .wait_leader(Instant::now() + Duration::from_secs(10))
        .await
        .ok_or("no leader")?;
    sim.net.lock().trip = Some(Trip {
        leader: l,
        remaining: 0,
    });
    let h = sim.handle(l).expect("leader runs");
    let pending = tokio::spawn(async move { h.call(create_request("cut", 1, 1)).await });
    let cut_by = Instant::now() + Duration::from_secs(2);
    while sim.net.lock().trip.is_some() && Instant::now() < cut_by {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if sim.net.lock().trip.take().is_some() {
        return Err("the write was never sent".into());
    }
    sim.set_isolated(Some(l));
    for i in 0..grow {
        let action = if i % 2 == 0 {
            Action::CreateTopic {
                topic: 0,
                partitions: 1,
                rf: 1,
            }
        } else {
            Action::DeleteTopic { topic: 0 }
        };
        sim.act(&action).await;
    }
    sim.set_isolated(None);
    let h = sim.handle(l).expect("old leader runs");
    let answered = tokio::time::timeout(
        Duration::from_secs(5),
        h.call(ControllerRequest::DescribeQuorum),
    )
    .await
    .is_ok();
    let snapshot = sim.net.lock().snapshots_sent;
    let dump = sim.metrics_dump();
    let pending_done = pending.is_finished();
    if pending_done && std::env::var("SIM_TRACE").is_ok() {
        eprintln!("cut-off write answered: {:?}", pending.await);
    } else {
        pending.abort();
    }
    sim.shutdown().await;
    if !answered {
        return Err(format!(
            "after healing, the old active controller {l} answers nothing (its cut-off write pending: {}; InstallSnapshot transfers: {snapshot}); raft: {dump}",
            !pending_done
        ));
    }
    Ok(())
}

/// Control: healed before the majority snapshots, the old leader's
/// uncommitted entry is truncated as a conflict and its controller resumes.
#[test]
fn quorum_sim_cut_off_write_healed_early() {
    sim_runtime().block_on(cut_off_write(2)).unwrap();
}

/// Healed after the majority snapshotted and purged past the cut-off write.
#[test]
fn quorum_sim_cut_off_write_healed_after_snapshot() {
    sim_runtime().block_on(cut_off_write(40)).unwrap();
}

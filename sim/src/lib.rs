//! A deterministic simulation of Strand's data path and its transaction
//! coordinator. One thread, one seed: three brokers, each hosting the real
//! [`Partition`]s (logs on [`MemStorage`], producer state, leader state)
//! of a data topic with two partitions and of `__transaction_state`, all
//! with replication factor 3 and min.insync.replicas 2, kept in line with
//! the metadata image by the broker's own plan
//! (`strand_broker::replica_plan`); a controller that decides with the real
//! controller rules (`strand_controller::manager`: registration, heartbeats
//! and fencing, AlterPartition, elections) over a [`MetadataImage`]; on the
//! leader of `__transaction_state`, the real transaction coordinator
//! (`strand_txn::shard::TxnShard`, loaded from that partition's records
//! when leadership moves, its writes appended there acks=all, its markers
//! sent to the data partitions' leaders); a producer of plain records and
//! transactional clients (transaction.version 2: partitions added by their
//! leaders, KIP-890) that commit, abort, abandon transactions and are
//! fenced by newer instances of their transactional id. Brokers follow
//! their leaders with the same calls the broker binary makes
//! (`record_follower_fetch`, `read`, `apply_fetched`, `apply_registration`,
//! `maybe_shrink_isr`, `on_alter_partition_result`, `ack_decision`,
//! `write_txn_marker`).
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
//! - no two brokers append to a partition in the same leader epoch;
//! - a transaction is decided once (commit or abort), and a commit is
//!   never decided for an instance after a newer instance of its
//!   transactional id was granted its producer id (a fenced instance never
//!   commits);
//!
//! and at the end: no acknowledged record is lost and the replicas agree up
//! to the HW; every transactional batch is followed by a marker of its
//! producer that matches the coordinator's decision for its transaction
//! (nothing of an aborted or fenced transaction visible, all of a committed
//! one), so markers completed every transaction (the LSO reaches the HW).
//!
//! The same seed replays the same run.

// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod broker;
mod checks;
mod clients;
mod controller;
mod coordinator;
mod faults;
mod groups;
pub mod live;
mod msg;
mod state;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;
use strand_controller::manager::cluster::BrokerHeartbeats;
use strand_controller::manager::ControllerConfig;
use strand_log::storage::MemStorage;
use strand_metadata::image::MetadataImage;
use strand_metadata::records::MetadataRecord;
use strand_partition::log_dir_failure::LogDirFailures;
use strand_types::{
    BrokerId, Clock, LeaderEpoch, ManualClock, ProducerEpoch, ProducerId, TopicPartition,
};

use msg::{Instance, Msg};
use state::{ClientTxn, Node, PlainCommitter, TxnClient};

/// Simulated wall-clock time at the start of every run.
const START_MS: i64 = 1_700_000_000_000;
/// How many history lines a violation shows (`STRAND_SIM_TRACE` adds
/// every message, so more are kept then).
const HISTORY_SHOWN: usize = 40;
const CONTROLLER: i32 = 0;
const CLIENT: i32 = 100;
const DATA_TOPIC: &str = "t";
const DATA_PARTITIONS: i32 = 2;
const TXN_TOPIC: &str = "__transaction_state";
const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The group the transactional clients commit their inputs' offsets for
/// (one input partition per transactional id), and the group of the plain
/// committer.
const TXN_GROUP: &str = "pipeline";
const PLAIN_GROUP: &str = "plain";
/// The transactional ids the clients use (by index).
const TXN_IDS: [&str; 2] = ["app-a", "app-b"];
const TICK_MS: i64 = 10;
const HEARTBEAT_MS: i64 = 100;
const SESSION_TIMEOUT_MS: u64 = 1_500;
const LAG_TIME_MAX_MS: i64 = 1_000;
const FETCH_TIMEOUT_MS: i64 = 500;
const ACK_TIMEOUT_MS: i64 = 2_000;
const CLIENT_TIMEOUT_MS: i64 = 3_000;
const FETCH_MAX_BYTES: usize = 16 * 1024;
/// transaction.timeout.ms of the transactional clients: an abandoned
/// transaction is aborted by the coordinator after it.
const TXN_TIMEOUT_MS: i32 = 3_000;
/// How often a coordinator looks for timed-out transactions.
const TXN_TIMEOUT_CHECK_MS: i64 = 500;
/// Every partition directory lives under this one log directory.
const LOG_DIR: &str = "/data";
/// A WriteMarker or AddPartition unanswered for this long is sent again.
const RPC_RETRY_MS: i64 = 300;

/// The data partitions.
fn data_tps() -> Vec<TopicPartition> {
    (0..DATA_PARTITIONS)
        .map(|p| TopicPartition::new(DATA_TOPIC, p))
        .collect()
}

/// The one `__transaction_state` partition (every transactional id maps to it).
fn txn_tp() -> TopicPartition {
    TopicPartition::new(TXN_TOPIC, 0)
}

/// The one `__consumer_offsets` partition (every group maps to it).
fn offsets_tp() -> TopicPartition {
    TopicPartition::new(OFFSETS_TOPIC, 0)
}

/// Every partition of the run.
fn all_tps() -> Vec<TopicPartition> {
    let mut tps = data_tps();
    tps.push(txn_tp());
    tps.push(offsets_tp());
    tps
}

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
    /// Acknowledged records checked at the end (plain and transactional).
    pub acknowledged: usize,
    /// Plain records the producer sent (acknowledged, refused or unknown).
    pub produced: usize,
    pub faults: usize,
    /// Leader epochs in which some partition took appends.
    pub leader_epochs: usize,
    /// Transactions the coordinator decided: committed and aborted.
    pub committed: usize,
    pub aborted: usize,
    /// Client instances fenced by a newer instance of their transactional id.
    pub fenced: usize,
    /// Loads of `__transaction_state` (coordinator moves).
    pub coordinator_loads: usize,
    /// Transactional batches whose fate (commit or abort marker) was checked.
    pub transactional_batches: usize,
    /// The plain committer's acknowledged commits and checked fetches.
    pub offset_commits: usize,
    pub offset_fetches: usize,
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

struct Controller {
    image: MetadataImage,
    heartbeats: BrokerHeartbeats,
    config: ControllerConfig,
    last_broadcast: i64,
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

/// A transaction the coordinator decided: when a Prepare record committed.
#[derive(Debug, Clone, Copy)]
struct Decision {
    commit: bool,
    at: i64,
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
    // The plain producer.
    in_flight: BTreeMap<u64, (i64, TopicPartition, Bytes)>,
    acked: BTreeMap<(TopicPartition, i64), Bytes>,
    produced: usize,
    next_value: u64,
    next_produce: i64,
    // The plain committer of the PLAIN_GROUP's offsets, and the checker's
    // fetch of the transactional group's: (request id, when, input).
    plain: PlainCommitter,
    checker: Option<(u64, i64, usize)>,
    // The transactional clients, and every transaction they ran.
    clients: Vec<TxnClient>,
    client_txns: Vec<ClientTxn>,
    /// Producer ids the coordinators hand out (the broker takes blocks from
    /// the controller; one sequence here).
    next_producer_id: i64,
    // The model the checks compare with.
    /// The instance each transaction (producer id, epoch of its data)
    /// belongs to.
    owners: BTreeMap<(ProducerId, ProducerEpoch), (usize, Instance)>,
    /// The coordinator's decision for each transaction (producer id, epoch
    /// of its data), once its Prepare record committed.
    decisions: BTreeMap<(ProducerId, ProducerEpoch), Decision>,
    /// The transaction (producer id, epoch of its data) that sent each
    /// input position as its offsets (values are unique).
    offset_values: BTreeMap<i64, (ProducerId, ProducerEpoch)>,
    /// The highest transactional-group offset fetched so far, per input.
    fetched_high: BTreeMap<i32, i64>,
    /// The instance each transactional id was last granted to: every
    /// other instance is fenced.
    grants: BTreeMap<usize, Instance>,
    /// An invariant found broken inside a step that cannot return it; the
    /// next check reports it.
    broken: Option<String>,
    /// Which broker appended to each partition in each leader epoch.
    appenders: BTreeMap<(TopicPartition, LeaderEpoch), i32>,
    coordinator_loads: usize,
    fenced: usize,
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
            .take(if sim.trace { usize::MAX } else { HISTORY_SHOWN })
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
                started: false,
                image: Arc::new(MetadataImage::default()),
                replicas: BTreeMap::new(),
                failed: BTreeMap::new(),
                failures: LogDirFailures::new(),
                pending: Vec::new(),
                parked: Vec::new(),
                coordinator: None,
                groups: None,
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
                leader_balance_interval_ms: None,
                unclean_leader_election_enable: false,
                unclean_election_interval_ms: None,
                group_bounds: Default::default(),
            },
            last_broadcast: 0,
        };
        let now = clock.now_ms();
        let clients = (0..TXN_IDS.len())
            .map(|txn| TxnClient {
                txn,
                instance: 0,
                producer: None,
                state: state::ClientState::Idle { at: now + 700 },
            })
            .collect();
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
            produced: 0,
            next_value: 0,
            next_produce: now + 500,
            plain: PlainCommitter::default(),
            checker: None,
            clients,
            client_txns: Vec::new(),
            next_producer_id: 1_000,
            owners: BTreeMap::new(),
            decisions: BTreeMap::new(),
            offset_values: BTreeMap::new(),
            fetched_high: BTreeMap::new(),
            grants: BTreeMap::new(),
            broken: None,
            appenders: BTreeMap::new(),
            coordinator_loads: 0,
            fenced: 0,
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

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id - 1
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
                    if std::env::var("STRAND_SIM_DUMP").is_ok() {
                        for h in &self.history {
                            eprintln!("{h}");
                        }
                    }
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
            return self.client_receive(msg);
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

    /// The leader of `tp` as the controller's image has it.
    fn leader_of(&self, tp: &TopicPartition) -> Option<i32> {
        self.controller
            .image
            .partition(&tp.topic, tp.partition)
            .and_then(|p| p.leader)
            .map(BrokerId::get)
    }
}

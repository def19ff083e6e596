//! The live simulation: the broker binary's own async code, not copies of
//! it. Three real broker nodes (`strand_broker`'s replica manager, replica
//! fetcher, request server and handlers, both coordinators and the node's
//! timers, logs on disk in a temporary directory) and a quorum of three
//! real controllers (`strand_controller::start_in_process`: the in-memory
//! Raft store, Raft between them in process) run in one thread on a
//! current-thread tokio runtime whose time is paused: it jumps to the next
//! timer whenever every task waits, so a minute of cluster time takes a
//! fraction of that.
//!
//! Brokers talk to each other and clients talk to brokers over
//! [`net::SimNetwork`], plugged into the broker's transport seam
//! (`strand_broker::transport`); the controllers' Raft and each host's
//! calls to the active controller go over the same links. A seeded
//! schedule cuts them: a partition leader isolated from everyone, a broker
//! from the controllers or from the active one only, a broker from the
//! other brokers, a leader from one follower, the active controller from
//! everyone; every cut heals after a while. Clients produce unique values
//! acks=all to a topic with replication factor 3 and min.insync.replicas
//! 2, run transactions over both its partitions, commit a consumer
//! group's offsets, and join, sync, heartbeat and leave another group as
//! its two members, each on its own connection as a Kafka client would.
//!
//! Checked while it runs (sampled every 20 ms of cluster time, in one
//! step, so no task moves in between): the HW of a leader never passes the
//! LEO of a member of its maximal ISR, and never moves backwards within one
//! leadership; at most one broker leads a partition at a leader epoch. At
//! the end, after the heal: every replica holds the same records, the HW
//! and LSO at every LEO; every acknowledged value is read back by a
//! consumer Fetch at the offset it was acknowledged at, and no value
//! appears twice; read_committed shows a committed transaction's writes,
//! none of an aborted one's, all or none of one whose commit answer was
//! lost; a group's committed offset, fetched back, is at least the last
//! one acknowledged; within a generation the members were told one leader
//! and given disjoint partitions.
//!
//! Seeded, but not replayable bit for bit: tokio's scheduler picks among
//! ready branches of a `select!` at random, and the broker's hash maps
//! iterate in per-process order. The deterministic, replayable simulation
//! is the crate's main one ([`crate::run`]); this one trades replay for
//! running the binary's I/O code itself.

pub mod net;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    fetch_request, ApiKey, FetchRequest, FetchResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use net::{Host, SimNetwork};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use strand_broker::broker_client::BrokerConn;
use strand_broker::config::BrokerConfig;
use strand_broker::controller_link::ControllerLink;
use strand_broker::replica_manager::ReplicaManager;
use strand_broker::{lifecycle, node::Node, server};
use strand_controller::manager::ControllerConfig;
use strand_controller::{QuorumSettings, StoreKind};
use strand_metadata::controller_api::{
    ApiError, ControllerCall, ControllerClient, ControllerReply, ControllerRequest, ElectionType,
    NewTopic,
};
use strand_metadata::image::MetadataImage;
use strand_types::{BrokerId, Clock, LeaderEpoch, Offset};
use tokio::sync::watch;
use tokio::time::Instant;

const BROKERS: u32 = 3;
/// The controllers' hosts (their node ids too): a quorum of three.
const CONTROLLERS: [Host; 3] = [101, 102, 103];
/// The clients' host.
const CLIENTS: Host = 200;
const TOPIC: &str = "live";
const PARTITIONS: i32 = 2;
const GROUP: &str = "live-group";
const SESSION_TIMEOUT_MS: u64 = 6_000;
/// Write leases are on in the live simulation (`strand.write.lease.*`),
/// shorter than the session so a leader cut off from the controller stops
/// writing before it is fenced.
const WRITE_LEASE_MS: u64 = 4_000;

/// What a run does.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Cluster time the workload and faults run before the heal.
    pub run_ms: u64,
    /// Cluster time allowed after the heal for the cluster to converge.
    pub settle_ms: u64,
    pub faults: bool,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            run_ms: 60_000,
            settle_ms: 90_000,
            faults: true,
        }
    }
}

/// What a run did.
#[derive(Debug, Default, Clone)]
pub struct LiveReport {
    pub acknowledged: u64,
    pub refused: u64,
    pub faults: u64,
    pub leader_epochs: u64,
    pub commits: u64,
    pub samples: u64,
    pub transactions_committed: u64,
    pub transactions_aborted: u64,
    /// Times the active controller changed.
    pub controller_changes: u64,
    /// Samples where two brokers led one partition at once (the write
    /// lease let at most one of them append).
    pub overlapping_leaders: u64,
    /// Preferred elections that moved a leadership away from a leader cut
    /// off from the controllers.
    pub elective_moves: u64,
    /// Times a leader's ISR got smaller.
    pub isr_shrinks: u64,
    /// Generations of the members' group, and SyncGroups completed.
    pub generations: u64,
    pub syncs: u64,
}

/// Time on the runtime's clock: tokio's, which the paused runtime moves.
struct TokioClock {
    start: Instant,
}

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        1_700_000_000_000 + self.monotonic_ms()
    }

    fn monotonic_ms(&self) -> i64 {
        self.start.elapsed().as_millis() as i64
    }
}

/// The controller quorum: three real controllers, Raft between them over
/// the network's links (`strand_controller::start_in_process`).
struct Quorum {
    net: SimNetwork,
    nodes: Vec<(Host, strand_controller::ControllerNode)>,
}

impl Quorum {
    /// The active controller's handle, if `from` can reach it.
    fn active_from(&self, from: Host) -> Option<(Host, &strand_controller::ControllerHandle)> {
        self.nodes
            .iter()
            .find(|(id, n)| n.current_leader() == Some(*id as u64) && self.net.connected(from, *id))
            .map(|(id, n)| (*id, &n.handle))
    }

    /// The newest image among the controllers `from` can reach (a broker
    /// follows the metadata log from whichever it reaches).
    fn image_from(&self, from: Option<Host>) -> Option<Arc<MetadataImage>> {
        self.nodes
            .iter()
            .filter(|(id, _)| from.is_none_or(|f| self.net.connected(f, *id)))
            .map(|(_, n)| n.handle.image())
            .max_by_key(|i| i.applied)
    }
}

/// A host's calls to the active controller: retried while an election
/// settles, failing after a while when none can be reached (as an RPC
/// timing out would); an answer computed while the link was cut never
/// arrives.
struct ControllerReach {
    quorum: Arc<Quorum>,
    host: Host,
}

impl ControllerCall for ControllerReach {
    fn call(
        &self,
        request: ControllerRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ControllerReply, ApiError>> + Send + '_>> {
        Box::pin(async move {
            let deadline = Instant::now() + Duration::from_secs(3);
            loop {
                if let Some((id, handle)) = self.quorum.active_from(self.host) {
                    let handle = handle.clone();
                    let reply = handle.call(request.clone()).await;
                    let delivered = self.quorum.net.connected(self.host, id);
                    match reply {
                        Ok(ControllerReply::NotController { .. }) | Err(_) => {}
                        Ok(reply) if delivered => return Ok(reply),
                        Ok(_) => return Err(ApiError::not_controller()),
                    }
                }
                if Instant::now() >= deadline {
                    return Err(ApiError::not_controller());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }
}

/// The images a host sees: the newest of the controllers it reaches,
/// every 50 ms; all of them for `None` (the clients' metadata).
fn image_feed(quorum: Arc<Quorum>, host: Option<Host>) -> watch::Receiver<Arc<MetadataImage>> {
    let first = quorum.image_from(host).unwrap_or_default();
    let (tx, rx) = watch::channel(first);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Some(latest) = quorum.image_from(host) {
                if latest.applied > tx.borrow().applied && tx.send(latest).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

struct BrokerNode {
    id: BrokerId,
    broker: Arc<ReplicaManager>,
    _dir: tempfile::TempDir,
}

/// What the clients were told.
#[derive(Default)]
struct Outcomes {
    /// partition -> offset -> value acknowledged there.
    acknowledged: BTreeMap<i32, BTreeMap<i64, String>>,
    refused: u64,
    /// The last offset commit acknowledged (and none begun after it).
    committed: Option<i64>,
    commits: u64,
    txns: Vec<Txn>,
}

/// The leadership facts sampled along the run.
#[derive(Default)]
struct Watch {
    /// (partition, leader epoch) -> the broker that led it.
    leaders: HashMap<(i32, LeaderEpoch), BrokerId>,
    /// (broker, partition) -> (leader epoch, HW) last seen while leading.
    leading_high: HashMap<(BrokerId, i32), (LeaderEpoch, Offset)>,
    samples: u64,
    /// Samples in which two brokers led a partition at once (different
    /// epochs, as a leadership moves), where leases kept one from writing.
    overlapping_leaders: u64,
    /// (broker, partition) -> the ISR size last seen while leading.
    isr_seen: HashMap<(BrokerId, i32), usize>,
    /// Times a leader's ISR got smaller (lag, eviction, fencing).
    isr_shrinks: u64,
}

/// Runs one seed; `Err` describes the first violation.
pub fn run_live(seed: u64, config: &LiveConfig) -> Result<LiveReport, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let result = runtime.block_on(live(seed, config.clone()));
    // Background tasks (fetchers, timers, servers) end with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn live(seed: u64, config: LiveConfig) -> Result<LiveReport, String> {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock {
        start: Instant::now(),
    });
    let net = SimNetwork::new(Duration::from_micros(500));
    let quorum = start_quorum(seed, clock.clone(), &net).await?;
    let images = image_feed(quorum.clone(), None);

    let mut nodes = Vec::new();
    for i in 1..=BROKERS {
        nodes.push(start_broker(i, &net, &quorum, clock.clone()).await?);
    }
    let client = ControllerClient::new(Arc::new(ControllerReach {
        quorum: quorum.clone(),
        host: CLIENTS,
    }));
    create_topic(&client, seed).await?;
    await_leaders(&images, Duration::from_secs(30)).await?;

    let outcomes = Arc::new(parking_lot::Mutex::new(Outcomes::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for partition in 0..PARTITIONS {
        workers.push(tokio::spawn(produce_loop(
            net.clone(),
            images.clone(),
            partition,
            outcomes.clone(),
            stop.clone(),
        )));
    }
    workers.push(tokio::spawn(txn_loop(
        net.clone(),
        images.clone(),
        outcomes.clone(),
        stop.clone(),
        seed,
    )));
    let membership = Arc::new(parking_lot::Mutex::new(Membership::default()));
    for member in 0..2u64 {
        workers.push(tokio::spawn(member_loop(
            net.clone(),
            images.clone(),
            membership.clone(),
            stop.clone(),
            seed ^ (member << 40),
        )));
    }
    workers.push(tokio::spawn(commit_loop(
        net.clone(),
        images.clone(),
        outcomes.clone(),
        stop.clone(),
    )));

    let mut rng = StdRng::seed_from_u64(seed);
    let mut watch = Watch::default();
    let mut report = LiveReport::default();
    let start = Instant::now();
    let run_for = Duration::from_millis(config.run_ms);
    // The next fault and its heal.
    let mut next_fault = start + Duration::from_millis(rng.gen_range(2_000..6_000));
    let mut heal_at: Option<Instant> = None;
    // A second step of the fault in progress: isolate this host then.
    let mut isolate_at: Option<(Instant, Host)> = None;
    let mut active = quorum.active_from(CLIENTS).map(|(id, _)| id);
    while start.elapsed() < run_for {
        tokio::time::sleep(Duration::from_millis(20)).await;
        check(&nodes, &mut watch)?;
        if let Some(now_active) = quorum.active_from(CLIENTS).map(|(id, _)| id) {
            if active != Some(now_active) {
                report.controller_changes += 1;
                active = Some(now_active);
            }
        }

        let now = Instant::now();
        if let Some(at) = heal_at.filter(|at| now >= *at) {
            let _ = at;
            net.heal_all();
            heal_at = None;
            isolate_at = None;
            next_fault = now + Duration::from_millis(rng.gen_range(500..4_000));
        } else if config.faults && heal_at.is_none() && now >= next_fault {
            let image = images.borrow().clone();
            let active = quorum.active_from(CLIENTS).map(|(id, _)| id);
            let mut lasts = Duration::from_millis(rng.gen_range(1_000..12_000));
            match inject(&net, &image, active, &mut rng) {
                Some(Then::Elect(moved)) => {
                    // A leadership moved away from a live broker: a
                    // preferred election, asked as a client would.
                    let client = ControllerClient::new(Arc::new(ControllerReach {
                        quorum: quorum.clone(),
                        host: CLIENTS,
                    }));
                    tokio::spawn(async move {
                        let r = client
                            .elect_leaders(
                                ElectionType::Preferred,
                                Some(vec![(TOPIC.into(), moved)]),
                            )
                            .await;
                        tracing::info!(partition = moved, outcome = ?r, "preferred election");
                    });
                    report.elective_moves += 1;
                }
                Some(Then::Isolate(host, after)) => {
                    // Long enough for the isolated leader to be fenced and
                    // replaced while it lasts.
                    isolate_at = Some((now + after, host));
                    lasts = lasts.max(after + Duration::from_millis(2 * SESSION_TIMEOUT_MS));
                }
                None => {}
            }
            report.faults += 1;
            heal_at = Some(now + lasts);
        }
        if let Some((at, host)) = isolate_at.filter(|(at, _)| now >= *at && heal_at.is_some()) {
            let _ = at;
            for h in (1..=BROKERS)
                .chain(CONTROLLERS)
                .chain([CLIENTS])
                .filter(|h| *h != host)
            {
                net.cut(host, h);
            }
            tracing::info!(
                host,
                "fault: the leader, already cut from a follower, isolated"
            );
            isolate_at = None;
        }
    }
    net.heal_all();
    stop.store(true, std::sync::atomic::Ordering::Release);
    for w in workers {
        let _ = w.await;
    }
    settle(&nodes, &mut watch, Duration::from_millis(config.settle_ms)).await?;
    verify_final(&net, &images, &nodes, &outcomes).await?;
    check_membership(&membership.lock())?;

    {
        let m = membership.lock();
        report.generations = m.leaders.len() as u64;
        report.syncs = m.syncs;
    }
    let o = outcomes.lock();
    report.acknowledged = o.acknowledged.values().map(|m| m.len() as u64).sum();
    report.refused = o.refused;
    report.commits = o.commits;
    report.transactions_committed = o
        .txns
        .iter()
        .filter(|t| t.outcome == TxnOutcome::Committed)
        .count() as u64;
    report.transactions_aborted = o
        .txns
        .iter()
        .filter(|t| t.outcome == TxnOutcome::Aborted)
        .count() as u64;
    report.leader_epochs = watch.leaders.len() as u64;
    report.overlapping_leaders = watch.overlapping_leaders;
    report.isr_shrinks = watch.isr_shrinks;
    report.samples = watch.samples;
    Ok(report)
}

/// Starts the three controllers and waits for an active one.
async fn start_quorum(
    seed: u64,
    clock: Arc<dyn Clock>,
    net: &SimNetwork,
) -> Result<Arc<Quorum>, String> {
    let links = net.clone();
    let raft_net = strand_controller::raft::in_process::InProcessNetwork::new(
        Arc::new(move |a, b| links.connected(a as Host, b as Host)),
        Duration::from_micros(500),
    );
    // The handles' own forwarding finds nothing at these addresses: hosts
    // call the active controller's handle themselves (`ControllerReach`).
    let voters: BTreeMap<u64, String> = CONTROLLERS
        .iter()
        .map(|id| (*id as u64, "127.0.0.1:1".to_string()))
        .collect();
    let mut nodes = Vec::new();
    for id in CONTROLLERS {
        let mut node = strand_controller::start_in_process(
            &raft_net,
            QuorumSettings {
                node_id: id as u64,
                cluster_id: "live-sim".into(),
                voters: voters.clone(),
                initial_voters: voters.clone(),
                store: StoreKind::Memory,
                election_timeout_ms: 1_000,
                session_timeout_ms: SESSION_TIMEOUT_MS,
                write_lease_ms: WRITE_LEASE_MS,
                listener: None,
                rpc: strand_controller::PlainRpc::shared(),
                bootstrap: Vec::new(),
                controller: ControllerConfig {
                    node_id: BrokerId::new(id as i32),
                    num_partitions: PARTITIONS,
                    default_replication_factor: 3,
                    producer_id_block_size: 1000,
                    max_replication_factor: usize::MAX,
                    leader_balance_interval_ms: None,
                    unclean_leader_election_enable: false,
                    unclean_election_interval_ms: None,
                    group_bounds: Default::default(),
                },
                clock: clock.clone(),
                seed: Some(seed ^ (u64::from(id) << 32)),
            },
        )
        .await
        .map_err(|e| format!("controller {id} start failed: {e}"))?;
        node.handle.request_timeout = Duration::from_millis(500);
        nodes.push((id, node));
    }
    let quorum = Arc::new(Quorum {
        net: net.clone(),
        nodes,
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while quorum.active_from(CLIENTS).is_none() {
        if Instant::now() >= deadline {
            return Err("no active controller after 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(quorum)
}

async fn start_broker(
    host: Host,
    net: &SimNetwork,
    quorum: &Arc<Quorum>,
    clock: Arc<dyn Clock>,
) -> Result<BrokerNode, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let addr = SimNetwork::addr_of(host, 9092);
    let pairs: Vec<(String, String)> = [
        ("node.id", host.to_string()),
        ("process.roles", "broker".into()),
        ("listeners", format!("PLAINTEXT://{addr}")),
        ("advertised.listeners", format!("PLAINTEXT://{addr}")),
        (
            "controller.quorum.voters",
            "101@127.0.0.1:1,102@127.0.0.1:1,103@127.0.0.1:1".into(),
        ),
        ("log.dirs", dir.path().display().to_string()),
        ("default.replication.factor", "3".into()),
        ("min.insync.replicas", "2".into()),
        ("offsets.topic.replication.factor", "3".into()),
        ("offsets.topic.num.partitions", "1".into()),
        ("transaction.state.log.replication.factor", "3".into()),
        ("transaction.state.log.num.partitions", "1".into()),
        ("replica.lag.time.max.ms", "5000".into()),
        ("broker.heartbeat.interval.ms", "1000".into()),
        ("broker.session.timeout.ms", SESSION_TIMEOUT_MS.to_string()),
        ("strand.write.lease.enable", "true".into()),
        ("strand.write.lease.ms", WRITE_LEASE_MS.to_string()),
        ("strand.write.lease.safety.margin.ms", "300".into()),
        // The cleaner's threads run on the wall clock, outside the
        // simulated runtime: not simulated.
        ("log.cleaner.enable", "false".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config =
        Arc::new(BrokerConfig::from_pairs(pairs).map_err(|e| format!("broker config: {e}"))?);
    let reach: Arc<dyn ControllerCall> = Arc::new(ControllerReach {
        quorum: quorum.clone(),
        host,
    });
    let link = ControllerLink::new(
        ControllerClient::new(reach),
        image_feed(quorum.clone(), Some(host)),
    );
    let lease = lifecycle::write_lease(&config);
    let log_dirs = Arc::new(strand_broker::log_dirs::LogDirs::single(
        &config.log_dirs[0],
    ));
    let registration = lifecycle::register(&config, "", &link, &lease, &*clock, &log_dirs).await?;
    lifecycle::spawn_heartbeats(
        config.clone(),
        link.clone(),
        &registration,
        lease.clone(),
        clock.clone(),
        log_dirs.clone(),
    );
    let broker = Arc::new(ReplicaManager::new(
        config.clone(),
        link,
        registration.broker_epoch,
        clock,
        net.transport(host),
        lease,
        log_dirs,
    ));
    let node = Node::new(broker.clone());
    let image = broker.image();
    broker.finish_pending_deletes();
    broker.remove_orphan_dirs(&image);
    broker.reconcile();
    broker.resume_replica_moves();
    node.spawn_background();
    let listener = net.listen(host, addr);
    // Never shut down: the runtime's end stops it.
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(async move {
        server::serve(listener, "PLAINTEXT".into(), node, shutdown_rx).await;
        drop(shutdown_tx);
    });
    Ok(BrokerNode {
        id: BrokerId::new(host as i32),
        broker,
        _dir: dir,
    })
}

/// The topic; odd seeds acknowledge by replica count (2 of 3, followers
/// that hold that up evicted after 100 ms: `strand.acks.*`), even seeds as
/// Kafka does, so the same checks (no acknowledged write lost, HW within
/// what the ISR holds) cover both.
async fn create_topic(client: &ControllerClient, seed: u64) -> Result<(), String> {
    let mut configs = vec![("min.insync.replicas".into(), Some("2".into()))];
    if seed % 2 == 1 {
        configs.extend([
            ("strand.acks.policy".into(), Some("replica-count".into())),
            ("strand.acks.replicas".into(), Some("2".into())),
            ("strand.acks.eviction.ms".into(), Some("100".into())),
        ]);
    }
    let topic = NewTopic {
        name: TOPIC.into(),
        num_partitions: PARTITIONS,
        replication_factor: 3,
        assignments: vec![],
        configs,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.create_topics(vec![topic.clone()], false).await.pop() {
            Some(Ok(_)) => return Ok(()),
            Some(Err(e)) if Instant::now() < deadline => {
                tracing::debug!(error = %e.message, "create topic: retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => return Err(format!("cannot create {TOPIC}: {other:?}")),
        }
    }
}

/// Waits until every partition of the topic has a leader and a full ISR.
async fn await_leaders(
    images: &watch::Receiver<Arc<MetadataImage>>,
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let image = images.borrow().clone();
        let ready = image.topics.get(TOPIC).is_some_and(|t| {
            t.partitions
                .iter()
                .all(|p| p.leader.is_some() && p.isr.len() == BROKERS as usize)
        });
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{TOPIC} has no full ISR after {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a fault does after its first cut.
enum Then {
    /// Ask for a preferred election of this partition.
    Elect(i32),
    /// Cut this host from everyone after a while.
    Isolate(Host, Duration),
}

/// One seeded cut, and what follows it.
fn inject(
    net: &SimNetwork,
    image: &MetadataImage,
    active: Option<Host>,
    rng: &mut StdRng,
) -> Option<Then> {
    let broker = rng.gen_range(1..=BROKERS);
    let index = rng.gen_range(0..PARTITIONS);
    let leader = image
        .partition(TOPIC, index)
        .and_then(|p| p.leader)
        .map(|b| b.get() as Host)
        .unwrap_or(broker);
    let others = |me: Host| (1..=BROKERS).filter(move |b| *b != me);
    let everyone = |me: Host| {
        (1..=BROKERS)
            .chain(CONTROLLERS)
            .chain([CLIENTS])
            .filter(move |h| *h != me)
    };
    match rng.gen_range(0..10) {
        // A leader that is not its partition's preferred replica is cut
        // from every controller (it keeps its clients and followers, and
        // its lease for a while) and a preferred election moves its
        // leadership away: it learns of that only once healed, so until its
        // lease runs out the new leader must not write.
        6 | 7 => {
            let movable = (0..PARTITIONS).find_map(|i| {
                let p = image.partition(TOPIC, i)?;
                let preferred = *p.replicas.first()?;
                (Some(preferred) != p.leader && p.isr.contains(&preferred))
                    .then_some((i, p.leader?.get() as Host))
            });
            let (moved, leader) = match movable {
                Some((i, l)) => (Some(i), l),
                None => (None, leader),
            };
            for c in CONTROLLERS {
                net.cut(leader, c);
            }
            tracing::info!(
                host = leader,
                ?moved,
                "fault: leader cut from the controllers, its leadership moved"
            );
            return moved.map(Then::Elect);
        }
        // A leader loses one follower (the other keeps up, so replica-count
        // acknowledgements go on), then everything: the controller elects
        // one of the followers, which must hold every acknowledged write.
        8 | 9 => {
            if let Some(b) = others(leader).nth(rng.gen_range(0..(BROKERS as usize - 1))) {
                net.cut(leader, b);
                tracing::info!(
                    host = leader,
                    follower = b,
                    "fault: leader cut from a follower, then from everyone"
                );
                return Some(Then::Isolate(
                    leader,
                    Duration::from_millis(rng.gen_range(1_000..3_000)),
                ));
            }
        }
        // Isolated from everyone: brokers, controllers and clients.
        0 => {
            for h in everyone(leader) {
                net.cut(leader, h);
            }
            tracing::info!(host = leader, "fault: leader isolated");
        }
        // Cut from the controllers only: it is fenced, the others go on.
        1 => {
            for c in CONTROLLERS {
                net.cut(broker, c);
            }
            tracing::info!(host = broker, "fault: cut from the controllers");
        }
        // The active controller isolated: the quorum elects another, the
        // brokers follow it.
        4 => {
            if let Some(c) = active {
                for h in everyone(c) {
                    net.cut(c, h);
                }
                tracing::info!(host = c, "fault: active controller isolated");
            }
        }
        // A broker cut from the active controller only (it may still see
        // the metadata of the others).
        5 => {
            if let Some(c) = active {
                net.cut(broker, c);
                tracing::info!(
                    host = broker,
                    controller = c,
                    "fault: cut from the active controller"
                );
            }
        }
        // Cut from the other brokers only: it keeps its session, loses
        // its followers (or its leader).
        2 => {
            for b in others(broker) {
                net.cut(broker, b);
            }
            tracing::info!(host = broker, "fault: cut from the other brokers");
        }
        // The leader keeps its clients and controller but loses one follower.
        _ => {
            if let Some(b) = others(leader).nth(rng.gen_range(0..(BROKERS as usize - 1))) {
                net.cut(leader, b);
                tracing::info!(
                    host = leader,
                    follower = b,
                    "fault: leader cut from a follower"
                );
            }
        }
    }
    None
}

/// One sample of every partition on every broker, taken in one step.
fn check(nodes: &[BrokerNode], watch: &mut Watch) -> Result<(), String> {
    watch.samples += 1;
    // Write leases: at most one broker would take an append for a
    // partition at any moment, however the leaderships look.
    for index in 0..PARTITIONS {
        let writers: Vec<BrokerId> = nodes
            .iter()
            .filter(|n| {
                n.broker
                    .partition(TOPIC, index)
                    .is_some_and(|p| p.may_append())
            })
            .map(|n| n.id)
            .collect();
        if writers.len() > 1 {
            return Err(format!(
                "{TOPIC}-{index}: brokers {writers:?} would all take appends at once"
            ));
        }
        let leaders = nodes
            .iter()
            .filter(|n| {
                n.broker
                    .partition(TOPIC, index)
                    .is_some_and(|p| p.is_leader())
            })
            .count();
        if leaders > 1 {
            watch.overlapping_leaders += 1;
        }
    }
    for n in nodes {
        for index in 0..PARTITIONS {
            let Some(p) = n.broker.partition(TOPIC, index) else {
                continue;
            };
            let o = p.offsets();
            let (Some(epoch), Some(isr)) = (o.leading_epoch, p.maximal_isr()) else {
                watch.leading_high.remove(&(n.id, index));
                continue;
            };
            if let Some(before) = watch.isr_seen.insert((n.id, index), isr.len()) {
                if isr.len() < before {
                    watch.isr_shrinks += 1;
                }
            }
            // At most one leader per leader epoch.
            match watch.leaders.insert((index, epoch), n.id) {
                Some(other) if other != n.id => {
                    return Err(format!(
                        "{TOPIC}-{index}: brokers {other} and {} both led epoch {epoch}",
                        n.id
                    ))
                }
                _ => {}
            }
            // The HW never passes what an ISR member holds.
            for member in isr {
                let held = nodes
                    .iter()
                    .find(|m| m.id == member)
                    .and_then(|m| m.broker.partition(TOPIC, index))
                    .map(|m| m.offsets().log_end_offset);
                if let Some(leo) = held.filter(|leo| *leo < o.high_watermark) {
                    return Err(format!(
                        "{TOPIC}-{index}: leader {} (epoch {epoch}) has HW {} but ISR member {member} has LEO {leo}",
                        n.id, o.high_watermark
                    ));
                }
            }
            // The HW never moves backwards within one leadership.
            if let Some((e, hw)) = watch.leading_high.get(&(n.id, index)) {
                if *e == epoch && o.high_watermark < *hw {
                    return Err(format!(
                        "{TOPIC}-{index}: leader {} epoch {epoch}: HW {hw} -> {}",
                        n.id, o.high_watermark
                    ));
                }
            }
            watch
                .leading_high
                .insert((n.id, index), (epoch, o.high_watermark));
        }
    }
    Ok(())
}

/// After the heal: every replica converges on the leader's log (equal up
/// to the HW, the HW at every LEO), checked throughout.
async fn settle(nodes: &[BrokerNode], watch: &mut Watch, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        check(nodes, watch)?;
        let mut converged = true;
        for index in 0..PARTITIONS {
            let offsets: Vec<_> = nodes
                .iter()
                .filter_map(|n| n.broker.partition(TOPIC, index).map(|p| p.offsets()))
                .collect();
            let leader = offsets.iter().find(|o| o.leading_epoch.is_some());
            converged &= offsets.len() == nodes.len()
                && leader.is_some_and(|l| {
                    offsets.iter().all(|o| {
                        o.log_end_offset == l.log_end_offset
                            && l.high_watermark == l.log_end_offset
                            && l.last_stable_offset == l.high_watermark
                    })
                });
        }
        if converged {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let state: Vec<String> = nodes
                .iter()
                .flat_map(|n| {
                    (0..PARTITIONS).filter_map(move |i| {
                        n.broker.partition(TOPIC, i).map(|p| {
                            let o = p.offsets();
                            format!(
                                "broker {} {TOPIC}-{i}: leading {:?} HW {} LSO {} LEO {} ISR {:?}",
                                n.id,
                                o.leading_epoch,
                                o.high_watermark,
                                o.last_stable_offset,
                                o.log_end_offset,
                                p.maximal_isr()
                            )
                        })
                    })
                })
                .collect();
            return Err(format!(
                "no convergence {within:?} after the heal:\n{}",
                state.join("\n")
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A connection to `partition`'s leader as the controller names it now
/// (what a client's metadata refresh would give).
async fn connect_leader(
    net: &SimNetwork,
    images: &watch::Receiver<Arc<MetadataImage>>,
    topic: &str,
    partition: i32,
) -> Option<BrokerConn> {
    let image = images.borrow().clone();
    let leader = image.partition(topic, partition)?.leader?;
    let b = image.brokers.get(&leader)?;
    let addr = format!("{}:{}", b.host, b.port);
    BrokerConn::connect(&*net.transport(CLIENTS), &addr, "live-client".into())
        .await
        .ok()
}

fn produce_request(partition: i32, value: &str) -> ProduceRequest {
    let records = Bytes::from(strand_protocol::testing::encode_records(
        &[(None, Some(Bytes::from(value.to_string())), 0)],
        -1,
        -1,
        -1,
        kafka_protocol::records::Compression::None,
    ));
    produce_request_of(partition, records)
}

fn produce_request_of(partition: i32, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

/// Sends unique values to `partition`, one at a time, acks=all; an
/// answer not received (timeout, lost connection) is neither counted
/// acknowledged nor retried with the same value.
async fn produce_loop(
    net: SimNetwork,
    images: watch::Receiver<Arc<MetadataImage>>,
    partition: i32,
    outcomes: Arc<parking_lot::Mutex<Outcomes>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut conn: Option<BrokerConn> = None;
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        if conn.is_none() {
            conn = connect_leader(&net, &images, TOPIC, partition).await;
            if conn.is_none() {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        }
        let value = format!("p{partition}-{n}");
        n += 1;
        let req = produce_request(partition, &value);
        let c = conn.as_mut().expect("connected above");
        let sent = tokio::time::timeout(
            Duration::from_secs(10),
            c.send::<_, ProduceResponse>(ApiKey::Produce, 9, &req),
        )
        .await;
        match sent {
            Ok(Ok(resp)) => {
                let p = &resp.responses[0].partition_responses[0];
                let acknowledged = p.error_code == 0;
                {
                    let mut o = outcomes.lock();
                    if acknowledged {
                        o.acknowledged
                            .entry(partition)
                            .or_default()
                            .insert(p.base_offset, value);
                    } else {
                        o.refused += 1;
                    }
                }
                if !acknowledged {
                    // NOT_LEADER, NOT_ENOUGH_REPLICAS, timeouts: look again.
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            _ => {
                conn = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The group coordinator's partition leader (FindCoordinator's answer, read
/// from the image: `__consumer_offsets` has one partition here).
async fn connect_coordinator(
    net: &SimNetwork,
    images: &watch::Receiver<Arc<MetadataImage>>,
) -> Option<BrokerConn> {
    connect_coordinator_for(net, images, 0, GROUP).await
}

/// The coordinator of `key` (`key_type` 0: a group, 1: a transactional
/// id): the leader of its internal topic's only partition. Asks a broker
/// (FindCoordinator) when that topic does not exist yet, which creates it.
async fn connect_coordinator_for(
    net: &SimNetwork,
    images: &watch::Receiver<Arc<MetadataImage>>,
    key_type: i8,
    key: &'static str,
) -> Option<BrokerConn> {
    let topic = if key_type == 0 {
        "__consumer_offsets"
    } else {
        "__transaction_state"
    };
    match connect_leader(net, images, topic, 0).await {
        Some(c) => Some(c),
        None => {
            find_coordinator(net, images, key_type, key).await;
            None
        }
    }
}

/// Commits ever larger offsets for one partition of a group (a simple
/// consumer's commits, generation -1), reading each back; the offset read
/// must be the last acknowledged commit or a later attempted one.
async fn commit_loop(
    net: SimNetwork,
    images: watch::Receiver<Arc<MetadataImage>>,
    outcomes: Arc<parking_lot::Mutex<Outcomes>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    // The first commit creates __consumer_offsets (through a broker's
    // FindCoordinator in a client; here the controller's auto-create is
    // driven by the coordinator lookup below).
    let mut conn: Option<BrokerConn> = None;
    let mut next = 1i64;
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if conn.is_none() {
            conn = connect_coordinator(&net, &images).await;
            if conn.is_none() {
                continue;
            }
        }
        let c = conn.as_mut().expect("connected above");
        let offset = next;
        next += 1;
        let req = OffsetCommitRequest::default()
            .with_group_id(StrBytes::from_static_str(GROUP).into())
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)])]);
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            c.send::<_, OffsetCommitResponse>(ApiKey::OffsetCommit, 8, &req),
        )
        .await;
        let code = match answer {
            Ok(Ok(r)) => r
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .map(|p| p.error_code),
            _ => None,
        };
        match code {
            Some(0) => {
                let mut o = outcomes.lock();
                o.committed = Some(offset);
                o.commits += 1;
            }
            _ => conn = None,
        }
    }
}

/// Asks a broker for a coordinator, which creates its internal topic the
/// first time.
async fn find_coordinator(
    net: &SimNetwork,
    images: &watch::Receiver<Arc<MetadataImage>>,
    key_type: i8,
    key: &'static str,
) {
    use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    let image = images.borrow().clone();
    let Some(b) = image.brokers.values().next() else {
        return;
    };
    let addr = format!("{}:{}", b.host, b.port);
    let Ok(mut c) =
        BrokerConn::connect(&*net.transport(CLIENTS), &addr, "live-client".into()).await
    else {
        return;
    };
    let req = FindCoordinatorRequest::default()
        .with_key_type(key_type)
        .with_coordinator_keys(vec![StrBytes::from_static_str(key)]);
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        c.send::<_, FindCoordinatorResponse>(ApiKey::FindCoordinator, 4, &req),
    )
    .await;
}

/// The end: what consumers read must hold every acknowledged value at
/// its offset, no value twice, and the group's offset must be the last
/// acknowledged commit (or a later one that was attempted).
async fn verify_final(
    net: &SimNetwork,
    images: &watch::Receiver<Arc<MetadataImage>>,
    nodes: &[BrokerNode],
    outcomes: &Arc<parking_lot::Mutex<Outcomes>>,
) -> Result<(), String> {
    // What read_committed shows of every partition (the LSO is at the HW
    // once settled), for the all-or-nothing check below.
    let mut visible_all = std::collections::HashSet::new();
    for index in 0..PARTITIONS {
        let end = nodes
            .iter()
            .filter_map(|n| n.broker.partition(TOPIC, index))
            .map(|p| p.offsets())
            .find(|o| o.leading_epoch.is_some())
            .map(|o| o.high_watermark.get())
            .ok_or_else(|| format!("{TOPIC}-{index} has no leader at the end"))?;
        let read = read_all(net, images, index, end, false).await?;
        let committed = read_all(net, images, index, end, true).await?;
        visible_all.extend(committed.iter().map(|(_, v)| v.clone()));
        let visible: std::collections::HashSet<&str> =
            committed.iter().map(|(_, v)| v.as_str()).collect();
        for txn in &outcomes.lock().txns {
            let mine: Vec<&str> = txn
                .values
                .iter()
                .filter(|(p, _)| *p == index)
                .map(|(_, v)| v.as_str())
                .collect();
            for v in &mine {
                let shown = visible.contains(v);
                match txn.outcome {
                    TxnOutcome::Committed if !shown => {
                        return Err(format!(
                            "{TOPIC}-{index}: {v} of a committed transaction is not visible to read_committed"
                        ))
                    }
                    TxnOutcome::Aborted if shown => {
                        return Err(format!(
                            "{TOPIC}-{index}: {v} of an aborted transaction is visible to read_committed"
                        ))
                    }
                    _ => {}
                }
            }
        }
        let mut seen: HashMap<&str, i64> = HashMap::new();
        for (offset, value) in &read {
            if let Some(first) = seen.insert(value.as_str(), *offset) {
                return Err(format!(
                    "{TOPIC}-{index}: {value} at offsets {first} and {offset}"
                ));
            }
        }
        let o = outcomes.lock();
        for (offset, value) in o.acknowledged.get(&index).into_iter().flatten() {
            let at = read.iter().find(|(off, _)| off == offset).map(|(_, v)| v);
            if at != Some(value) {
                return Err(format!(
                    "{TOPIC}-{index}: {value} was acknowledged at offset {offset}; a consumer reads {at:?} there (HW {end})"
                ));
            }
        }
    }
    // A transaction whose commit answer was lost shows all its writes or none.
    for txn in outcomes.lock().txns.iter() {
        let shown = txn
            .values
            .iter()
            .filter(|(_, v)| visible_all.contains(v))
            .count();
        if shown != 0 && shown != txn.values.len() {
            return Err(format!(
                "a transaction ({:?}) is visible in {shown} of its {} writes: {:?}",
                txn.outcome,
                txn.values.len(),
                txn.values
            ));
        }
    }
    let expected = outcomes.lock().committed;
    if let Some(committed) = expected {
        let fetched = fetch_committed(net, images).await?;
        // A commit whose answer was lost may have landed after the last
        // acknowledged one; nothing earlier may come back.
        if fetched < committed {
            return Err(format!(
                "group {GROUP}: offset {committed} was committed, OffsetFetch returns {fetched}"
            ));
        }
    }
    Ok(())
}

/// Every record of `partition` below `end`, read by consumer Fetches
/// from its leader; under read_committed, without what aborted
/// transactions wrote (dropped as a Kafka consumer drops them: the
/// answer's aborted transactions, each until its producer's abort marker)
/// and without control records.
async fn read_all(
    net: &SimNetwork,
    images: &watch::Receiver<Arc<MetadataImage>>,
    partition: i32,
    end: i64,
    read_committed: bool,
) -> Result<Vec<(i64, String)>, String> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let topic_id = images
        .borrow()
        .topics
        .get(TOPIC)
        .map(|t| t.topic_id)
        .ok_or("no topic id")?;
    while offset < end {
        if Instant::now() >= deadline {
            return Err(format!(
                "{TOPIC}-{partition}: read stuck at {offset} of {end}"
            ));
        }
        let Some(mut c) = connect_leader(net, images, TOPIC, partition).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let req = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_isolation_level(i8::from(read_committed))
            .with_topics(vec![fetch_request::FetchTopic::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![fetch_request::FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])]);
        let resp: FetchResponse = match c.send(ApiKey::Fetch, 13, &req).await {
            Ok(r) => r,
            Err(_) => continue,
        };
        let Some(pd) = resp.responses.first().and_then(|t| t.partitions.first()) else {
            continue;
        };
        if pd.error_code != 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let mut aborted: Vec<(i64, i64)> = pd
            .aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.first_offset, a.producer_id.0))
            .collect();
        aborted.sort_unstable();
        let mut aborted = aborted.into_iter().peekable();
        let mut aborting = std::collections::HashSet::new();
        let mut bytes = pd.records.clone().unwrap_or_default();
        while !bytes.is_empty() {
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes)
                .map_err(|e| format!("{TOPIC}-{partition}: undecodable batch: {e}"))?;
            for r in set.records {
                while let Some((_, pid)) = aborted.next_if(|(first, _)| *first <= r.offset) {
                    aborting.insert(pid);
                }
                let skip = if r.control {
                    // The control record's key: version, then type (0 abort).
                    let abort = r.key.as_ref().is_some_and(|k| k.get(2..4) == Some(&[0, 0]));
                    if abort {
                        aborting.remove(&r.producer_id);
                    }
                    true
                } else {
                    read_committed && r.transactional && aborting.contains(&r.producer_id)
                };
                if !skip && r.offset >= offset && r.offset < end {
                    let value = r
                        .value
                        .map(|v| String::from_utf8_lossy(&v).into_owned())
                        .unwrap_or_default();
                    out.push((r.offset, value));
                }
                offset = offset.max(r.offset + 1);
            }
        }
    }
    Ok(out)
}

async fn fetch_committed(
    net: &SimNetwork,
    images: &watch::Receiver<Arc<MetadataImage>>,
) -> Result<i64, String> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if Instant::now() >= deadline {
            return Err(format!("group {GROUP}: OffsetFetch never answered"));
        }
        if let Some(mut c) = connect_coordinator(net, images).await {
            let req = OffsetFetchRequest::default()
                .with_group_id(StrBytes::from_static_str(GROUP).into())
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                    .with_partition_indexes(vec![0])]));
            if let Ok(r) = c
                .send::<_, OffsetFetchResponse>(ApiKey::OffsetFetch, 7, &req)
                .await
            {
                let p = r.topics.first().and_then(|t| t.partitions.first());
                if r.error_code == 0 {
                    if let Some(p) = p.filter(|p| p.error_code == 0) {
                        return Ok(p.committed_offset);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How a transaction ended, as its client knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnOutcome {
    /// Still open when the client stopped or gave up on it before asking
    /// to commit: never committed (the coordinator aborts it).
    Aborted,
    Committed,
    /// A commit was asked and its answer lost: all or nothing.
    Unknown,
}

/// One transaction's acknowledged writes and how it ended.
#[derive(Debug)]
struct Txn {
    values: Vec<(i32, String)>,
    outcome: TxnOutcome,
}

const TRANSACTIONAL_ID: &str = "live-txn";

/// A transactional producer (the classic protocol: AddPartitionsToTxn,
/// then produce, then EndTxn) writing one value to each partition per
/// transaction and committing most of them. Any error ends the
/// instance: a new InitProducerId fences it and aborts what it left open.
async fn txn_loop(
    net: SimNetwork,
    images: watch::Receiver<Arc<MetadataImage>>,
    outcomes: Arc<parking_lot::Mutex<Outcomes>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    seed: u64,
) {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
        InitProducerIdRequest, InitProducerIdResponse, ProducerId, TransactionalId,
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7478_6e73);
    let txn_id = TransactionalId(StrBytes::from_static_str(TRANSACTIONAL_ID));
    let mut producer: Option<(i64, i16)> = None;
    let mut sequences = [0i32; PARTITIONS as usize];
    let mut number = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Some(mut coordinator) =
            connect_coordinator_for(&net, &images, 1, TRANSACTIONAL_ID).await
        else {
            continue;
        };
        let (pid, epoch) = match producer {
            Some(p) => p,
            None => {
                let req = InitProducerIdRequest::default()
                    .with_transactional_id(Some(txn_id.clone()))
                    .with_transaction_timeout_ms(10_000)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
                match send_within(&mut coordinator, ApiKey::InitProducerId, 3, &req).await {
                    Some(InitProducerIdResponse {
                        error_code: 0,
                        producer_id,
                        producer_epoch,
                        ..
                    }) => {
                        producer = Some((producer_id.0, producer_epoch));
                        sequences = [0; PARTITIONS as usize];
                        (producer_id.0, producer_epoch)
                    }
                    _ => continue,
                }
            }
        };
        number += 1;
        let mut txn = Txn {
            values: Vec::new(),
            outcome: TxnOutcome::Aborted,
        };
        let add = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn_id.clone())
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions((0..PARTITIONS).collect())]);
        let added = send_within::<_, AddPartitionsToTxnResponse>(
            &mut coordinator,
            ApiKey::AddPartitionsToTxn,
            3,
            &add,
        )
        .await
        .is_some_and(|r| {
            r.results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| t.results_by_partition.iter())
                .all(|p| p.partition_error_code == 0)
        });
        let mut failed = !added;
        for partition in 0..PARTITIONS {
            if failed {
                break;
            }
            let value = format!("t{number}-p{partition}");
            let seq = sequences[partition as usize];
            let records = Bytes::from(strand_protocol::testing::encode_records_txn(
                &[(None, Some(Bytes::from(value.clone())), 0)],
                pid,
                epoch,
                seq,
                kafka_protocol::records::Compression::None,
                true,
            ));
            let req =
                produce_request_of(partition, records).with_transactional_id(Some(txn_id.clone()));
            let answer = match connect_leader(&net, &images, TOPIC, partition).await {
                Some(mut c) => {
                    send_within::<_, ProduceResponse>(&mut c, ApiKey::Produce, 9, &req).await
                }
                None => None,
            };
            match answer.map(|r| r.responses[0].partition_responses[0].clone()) {
                Some(p) if p.error_code == 0 => {
                    sequences[partition as usize] += 1;
                    outcomes
                        .lock()
                        .acknowledged
                        .entry(partition)
                        .or_default()
                        .insert(p.base_offset, value.clone());
                    txn.values.push((partition, value));
                }
                _ => failed = true,
            }
        }
        if !failed {
            let commit = rng.gen_bool(0.7);
            let end = EndTxnRequest::default()
                .with_transactional_id(txn_id.clone())
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(commit);
            let ended = send_within::<_, EndTxnResponse>(&mut coordinator, ApiKey::EndTxn, 3, &end)
                .await
                .is_some_and(|r| r.error_code == 0);
            txn.outcome = match (commit, ended) {
                (true, true) => TxnOutcome::Committed,
                (true, false) => TxnOutcome::Unknown,
                (false, _) => TxnOutcome::Aborted,
            };
            failed = !ended;
        }
        if failed {
            // A new instance fences this one and ends what it left open.
            producer = None;
        }
        outcomes.lock().txns.push(txn);
    }
}

/// Sends one request and waits at most 10 s for its answer.
async fn send_within<Req, Resp>(
    c: &mut BrokerConn,
    key: ApiKey,
    version: i16,
    req: &Req,
) -> Option<Resp>
where
    Req: kafka_protocol::protocol::Encodable,
    Resp: kafka_protocol::protocol::Decodable,
{
    tokio::time::timeout(Duration::from_secs(10), c.send(key, version, req))
        .await
        .ok()
        .and_then(Result::ok)
}

/// The group whose members join, sync and heartbeat.
const MEMBERS_GROUP: &str = "live-members";
/// Partitions the members' leader assigns among them.
const ASSIGNED_PARTITIONS: i32 = 4;

/// What the members were told, by generation, once their SyncGroup
/// succeeded: a JoinGroup answer alone promises nothing (as in Kafka, a
/// generation is stored with its assignment, so one whose sync never
/// completed can be lost with its coordinator and its number reused).
#[derive(Default)]
struct Membership {
    /// generation -> (the leader a member was told, that member).
    leaders: BTreeMap<i32, Vec<(String, String)>>,
    /// generation -> (member, the partitions SyncGroup gave it).
    assignments: BTreeMap<i32, Vec<(String, Vec<i32>)>>,
    /// Syncs completed.
    syncs: u64,
}

/// A consumer's subscription (ConsumerProtocolSubscription v0: the topic).
fn subscription() -> Bytes {
    let mut b = Vec::new();
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&(TOPIC.len() as i16).to_be_bytes());
    b.extend_from_slice(TOPIC.as_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    Bytes::from(b)
}

/// One member of [`MEMBERS_GROUP`] (the classic protocol, as a Kafka
/// consumer runs it): JoinGroup (with the member id the coordinator asks
/// for), SyncGroup (the leader assigns the partitions round-robin over the
/// sorted members), then heartbeats every second until a rebalance or an
/// error sends it back to JoinGroup; now and then it leaves (LeaveGroup)
/// and joins again as a new member, as a restarted consumer does.
async fn member_loop(
    net: SimNetwork,
    images: watch::Receiver<Arc<MetadataImage>>,
    membership: Arc<parking_lot::Mutex<Membership>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    seed: u64,
) {
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};
    let mut rng = StdRng::seed_from_u64(seed);
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::{
        HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, SyncGroupRequest,
        SyncGroupResponse,
    };
    let group = || StrBytes::from_static_str(MEMBERS_GROUP).into();
    let mut member_id = StrBytes::default();
    let mut conn: Option<BrokerConn> = None;
    'member: while !stop.load(std::sync::atomic::Ordering::Acquire) {
        if conn.is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            conn = connect_coordinator_for(&net, &images, 0, MEMBERS_GROUP).await;
            continue;
        }
        let c = conn.as_mut().expect("connected above");
        let join = JoinGroupRequest::default()
            .with_group_id(group())
            .with_session_timeout_ms(6_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(member_id.clone())
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(subscription())]);
        let joined: Option<JoinGroupResponse> =
            tokio::time::timeout(Duration::from_secs(30), c.send(ApiKey::JoinGroup, 5, &join))
                .await
                .ok()
                .and_then(Result::ok);
        let Some(joined) = joined else {
            conn = None;
            continue;
        };
        match joined.error_code {
            0 => {}
            // MEMBER_ID_REQUIRED: join again with the id given.
            79 => {
                member_id = joined.member_id;
                continue;
            }
            // UNKNOWN_MEMBER_ID: start over as a new member.
            25 => {
                member_id = StrBytes::default();
                continue;
            }
            _ => {
                conn = None;
                continue;
            }
        }
        member_id = joined.member_id.clone();
        let generation = joined.generation_id;
        let assignments = if joined.leader == member_id {
            let mut members: Vec<StrBytes> =
                joined.members.iter().map(|m| m.member_id.clone()).collect();
            members.sort();
            members
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let mine: Vec<String> = (0..ASSIGNED_PARTITIONS)
                        .filter(|p| *p as usize % members.len() == i)
                        .map(|p| p.to_string())
                        .collect();
                    SyncGroupRequestAssignment::default()
                        .with_member_id(m.clone())
                        .with_assignment(Bytes::from(mine.join(",")))
                })
                .collect()
        } else {
            Vec::new()
        };
        let sync = SyncGroupRequest::default()
            .with_group_id(group())
            .with_generation_id(generation)
            .with_member_id(member_id.clone())
            .with_assignments(assignments);
        let synced: Option<SyncGroupResponse> =
            tokio::time::timeout(Duration::from_secs(30), c.send(ApiKey::SyncGroup, 3, &sync))
                .await
                .ok()
                .and_then(Result::ok);
        let Some(synced) = synced else {
            conn = None;
            continue;
        };
        if synced.error_code != 0 {
            if synced.error_code == 25 {
                member_id = StrBytes::default();
            }
            continue;
        }
        let partitions: Vec<i32> = String::from_utf8_lossy(&synced.assignment)
            .split(',')
            .filter_map(|p| p.parse().ok())
            .collect();
        {
            let mut m = membership.lock();
            m.syncs += 1;
            m.leaders
                .entry(generation)
                .or_default()
                .push((joined.leader.to_string(), member_id.to_string()));
            m.assignments
                .entry(generation)
                .or_default()
                .push((member_id.to_string(), partitions));
        }
        // Heartbeats until the generation ends for this member.
        let mut beats_left = rng.gen_range(3..20);
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            beats_left -= 1;
            if beats_left == 0 {
                if let Some(c) = conn.as_mut() {
                    let leave = LeaveGroupRequest::default()
                        .with_group_id(group())
                        .with_members(vec![
                            MemberIdentity::default().with_member_id(member_id.clone())
                        ]);
                    let _: Option<LeaveGroupResponse> =
                        send_within(c, ApiKey::LeaveGroup, 3, &leave).await;
                }
                member_id = StrBytes::default();
                continue 'member;
            }
            let Some(c) = conn.as_mut() else {
                conn = connect_coordinator_for(&net, &images, 0, MEMBERS_GROUP).await;
                continue;
            };
            let beat = HeartbeatRequest::default()
                .with_group_id(group())
                .with_generation_id(generation)
                .with_member_id(member_id.clone());
            let answer: Option<HeartbeatResponse> =
                tokio::time::timeout(Duration::from_secs(5), c.send(ApiKey::Heartbeat, 3, &beat))
                    .await
                    .ok()
                    .and_then(Result::ok);
            match answer.map(|a| a.error_code) {
                Some(0) => {}
                // REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION: join again.
                Some(27) | Some(22) => continue 'member,
                Some(25) => {
                    member_id = StrBytes::default();
                    continue 'member;
                }
                // Coordinator moved or unreachable: find it and keep beating.
                _ => conn = None,
            }
        }
    }
}

/// Within a generation every member was told the same leader, and no
/// partition was given to two members.
fn check_membership(m: &Membership) -> Result<(), String> {
    for (generation, told) in &m.leaders {
        if let Some((first, _)) = told.first() {
            if let Some((other, member)) = told.iter().find(|(l, _)| l != first) {
                return Err(format!(
                    "group {MEMBERS_GROUP} generation {generation}: leader {first} for some members, {other} for {member}"
                ));
            }
        }
    }
    for (generation, given) in &m.assignments {
        let mut owner: BTreeMap<i32, &str> = BTreeMap::new();
        for (member, partitions) in given {
            for p in partitions {
                if let Some(other) = owner.insert(*p, member).filter(|o| o != member) {
                    return Err(format!(
                        "group {MEMBERS_GROUP} generation {generation}: partition {p} given to {other} and {member}"
                    ));
                }
            }
        }
    }
    Ok(())
}

//! The KRaft-like controller. All metadata mutations are events on one queue,
//! handled by one task that owns the controller state: each event is a pure
//! function of the image (`manager`) returning metadata records and a result;
//! the records of one event are proposed to the Raft quorum as one entry,
//! committed, and applied by every node's state machine to its image; only
//! then is the event answered. State changes only by replaying committed
//! records, at start-up as in steady state.
//!
//! Every controller runs the event loop, but only the Raft leader (the active
//! controller) decides: others answer NOT_CONTROLLER with the leader's id,
//! and `ControllerHandle` forwards there. Brokers that are not controllers
//! follow the committed image over the controller RPC (`FetchImage`).
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod manager;
pub mod metrics;
pub mod raft;

use manager::cluster::BrokerHeartbeats;
use manager::replication::ElectionType;
use manager::{ApiError, ControllerConfig};
use openraft::BasicNode;
pub use raft::network::{BoxRpcStream, PlainRpc, RpcFuture, RpcSecurity};
use raft::network::{Network, RpcClient, RpcRequest, RpcResponse};
use raft::store::StateMachineStore;
use raft::{MetadataBatch, NodeId, Raft};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
pub use strand_metadata::controller_api::{
    ControllerCall, ControllerClient, ControllerReply, ControllerRequest, PartitionGrowth,
    QuorumInfo, TopicConfigOps,
};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::MetadataRecord;
use strand_protocol::ErrorCode;
use strand_types::Clock;
use tokio::sync::{mpsc, oneshot, watch};

/// A request, where its answer goes, and when it was queued.
type Envelope = (
    ControllerRequest,
    oneshot::Sender<ControllerReply>,
    std::time::Instant,
);

/// The default of `strand.write.lease.ms`: three heartbeat intervals
/// (Kafka's `broker.heartbeat.interval.ms`, 2 s) less a little, and below
/// the session timeout (9 s), so a broker that misses two heartbeats in a
/// row keeps writing, and one cut off from the controller stops before
/// its session ends.
pub const DEFAULT_WRITE_LEASE_MS: u64 = 6_000;

/// Submits requests to the active controller (locally or over RPC) and reads
/// the committed metadata image.
#[derive(Clone)]
pub struct ControllerHandle {
    local_id: Option<NodeId>,
    local: Option<mpsc::Sender<Envelope>>,
    peers: Arc<BTreeMap<NodeId, Arc<RpcClient>>>,
    leader_hint: Arc<parking_lot::Mutex<Option<NodeId>>>,
    /// On a controller node: its own Raft's view of the leader. A request
    /// goes to that leader, and one in flight to a controller the quorum has
    /// since replaced (a paused process answers nothing until its RPC times
    /// out) is given up as soon as this node learns of the new leader.
    local_leader: Option<watch::Receiver<Option<NodeId>>>,
    image: watch::Receiver<Arc<MetadataImage>>,
    /// How long a request keeps looking for the active controller.
    pub request_timeout: Duration,
}

impl ControllerHandle {
    /// The latest committed metadata image known here.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// A receiver that sees every image published here.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.image.clone()
    }

    /// Typed calls through this handle.
    pub fn client(&self) -> ControllerClient {
        ControllerClient::new(Arc::new(self.clone()))
    }

    /// Sends a request to one node; RPC failures come back as NotController.
    async fn send_to(&self, target: NodeId, request: &ControllerRequest) -> ControllerReply {
        if Some(target) == self.local_id {
            if let Some(local) = &self.local {
                let (tx, rx) = oneshot::channel();
                if local
                    .send((request.clone(), tx, std::time::Instant::now()))
                    .await
                    .is_ok()
                {
                    if let Ok(reply) = rx.await {
                        return reply;
                    }
                }
            }
            return ControllerReply::NotController { leader_id: None };
        }
        let Some(client) = self.peers.get(&target) else {
            return ControllerReply::NotController { leader_id: None };
        };
        let Ok(value) = serde_json::to_value(request) else {
            return ControllerReply::NotController { leader_id: None };
        };
        let request = RpcRequest::Controller(value);
        let rpc = client.call(&request, Duration::from_secs(10));
        let answer = match self.local_leader.clone() {
            Some(mut leader) => {
                // Given up once this node's Raft names another leader.
                let moved = async move {
                    loop {
                        if let Some(l) = *leader.borrow_and_update() {
                            if l != target {
                                return l;
                            }
                        }
                        if leader.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                };
                tokio::select! {
                    answer = rpc => answer,
                    l = moved => return ControllerReply::NotController { leader_id: Some(l) },
                }
            }
            None => rpc.await,
        };
        match answer {
            Ok(RpcResponse::Controller(v)) => serde_json::from_value(v)
                .unwrap_or(ControllerReply::NotController { leader_id: None }),
            _ => ControllerReply::NotController { leader_id: None },
        }
    }

    /// Calls the active controller, following leader hints and trying each
    /// controller in turn until `request_timeout`.
    pub async fn call(&self, request: ControllerRequest) -> Result<ControllerReply, ApiError> {
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let ids: Vec<NodeId> = self
            .local_id
            .into_iter()
            .chain(
                self.peers
                    .keys()
                    .copied()
                    .filter(|id| Some(*id) != self.local_id),
            )
            .collect();
        if ids.is_empty() {
            return Err(ApiError::not_controller());
        }
        let mut next = 0usize;
        loop {
            // This node's Raft knows the leader best; else the last answer's
            // hint, else each controller in turn.
            let local = self
                .local_leader
                .as_ref()
                .and_then(|l| *l.borrow())
                .filter(|l| ids.contains(l));
            let hint = local.or(*self.leader_hint.lock());
            let target = hint.unwrap_or_else(|| {
                next += 1;
                ids[(next - 1) % ids.len()]
            });
            match self.send_to(target, &request).await {
                ControllerReply::NotController { leader_id } => {
                    *self.leader_hint.lock() =
                        leader_id.filter(|l| *l != target && ids.contains(l));
                }
                reply => {
                    *self.leader_hint.lock() = Some(target);
                    return Ok(reply);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ApiError::not_controller());
            }
            // Back off briefly while an election settles.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl ControllerCall for ControllerHandle {
    fn call(
        &self,
        request: ControllerRequest,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<ControllerReply, ApiError>> + Send + '_>,
    > {
        Box::pin(ControllerHandle::call(self, request))
    }
}

/// Where the quorum keeps its log and state machine.
pub enum StoreKind {
    Rocks(PathBuf),
    /// Tests only: nothing survives the process.
    Memory,
}

/// What a node needs to join the metadata quorum.
pub struct QuorumSettings {
    pub node_id: NodeId,
    pub cluster_id: String,
    /// The controllers: id -> controller listener address.
    pub voters: BTreeMap<NodeId, String>,
    /// From the format step: initialise the quorum with these voters if this
    /// node has the lowest id among them and holds no Raft state yet.
    pub initial_voters: BTreeMap<NodeId, String>,
    pub store: StoreKind,
    pub election_timeout_ms: u64,
    pub session_timeout_ms: u64,
    /// How long a write lease granted in a heartbeat answer runs
    /// (`strand.write.lease.ms`).
    pub write_lease_ms: u64,
    /// The bound controller listener; None for a lone voter that needs no network.
    pub listener: Option<tokio::net::TcpListener>,
    /// How controller connections are opened and admitted (`PlainRpc` for TCP).
    pub rpc: Arc<dyn RpcSecurity>,
    /// Records the format step left (`--add-scram`): committed with the
    /// cluster's first record by whichever controller is active first.
    pub bootstrap: Vec<MetadataRecord>,
    pub controller: ControllerConfig,
    /// What broker sessions are timed by (its monotonic side; a
    /// simulation's own time in `tests/quorum_sim.rs`).
    pub clock: Arc<dyn Clock>,
    /// Seeds the controller's choices (replica placement's starting broker,
    /// topic ids); `None` takes the seed from the OS. A simulation passes its
    /// own so a run reproduces.
    pub seed: Option<u64>,
}

/// A running controller: its Raft instance and a handle for requests.
pub struct ControllerNode {
    pub raft: Raft,
    pub handle: ControllerHandle,
    /// The event queue's and the metadata commits' times.
    pub metrics: Arc<metrics::ControllerMetrics>,
}

impl ControllerNode {
    /// The leader this node knows of (itself when it is the active controller).
    pub fn current_leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// Resolves, with why, once this node's Raft has stopped for good: a
    /// fatal error such as a failed write or fsync of the metadata store,
    /// after which this node can neither vote nor learn new metadata.
    pub fn stopped(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let mut metrics = self.raft.metrics();
        async move {
            loop {
                if let Err(fatal) = &metrics.borrow_and_update().running_state {
                    return fatal.to_string();
                }
                if metrics.changed().await.is_err() {
                    return "the metadata quorum's Raft stopped".to_string();
                }
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("metadata store: {0}")]
    Store(#[from] raft::store::StoreError),
    #[error("raft: {0}")]
    Raft(String),
    #[error("{0}")]
    ClusterIdMismatch(String),
}

/// Starts this node's controller: store, Raft, RPC listener, event loop.
pub async fn start_controller(settings: QuorumSettings) -> Result<ControllerNode, StartError> {
    let config = raft_config(&settings)?;
    let network = Network::new(settings.rpc.clone());
    let (raft, sm) = match &settings.store {
        StoreKind::Rocks(dir) => {
            let (log, sm) = raft::store::open_rocks(dir)?;
            (
                Raft::new(settings.node_id, config, network, log, sm.clone()).await,
                sm,
            )
        }
        StoreKind::Memory => {
            let (log, sm) = raft::store::open_memory();
            (
                Raft::new(settings.node_id, config, network, log, sm.clone()).await,
                sm,
            )
        }
    };
    let raft = raft.map_err(|e| StartError::Raft(e.to_string()))?;
    start_on_raft(raft, sm, settings).await
}

/// Raft's settings for a node: heartbeats at a fifth of the election
/// timeout, elections between one and two timeouts.
fn raft_config(settings: &QuorumSettings) -> Result<Arc<openraft::Config>, StartError> {
    let config = openraft::Config {
        cluster_name: settings.cluster_id.clone(),
        heartbeat_interval: (settings.election_timeout_ms / 5).max(20),
        election_timeout_min: settings.election_timeout_ms,
        election_timeout_max: settings.election_timeout_ms * 2,
        ..Default::default()
    };
    config
        .validate()
        .map(Arc::new)
        .map_err(|e| StartError::Raft(e.to_string()))
}

/// Starts a controller of an in-process quorum (simulations): the
/// in-memory store, Raft over `network`, the event loop. `settings.voters`
/// name the peers the handle forwards requests to; a simulation that calls
/// the active controller's own handle gives addresses nothing listens on.
pub async fn start_in_process(
    network: &raft::in_process::InProcessNetwork,
    settings: QuorumSettings,
) -> Result<ControllerNode, StartError> {
    let config = raft_config(&settings)?;
    let (log, sm) = raft::store::open_memory();
    let raft = Raft::new(
        settings.node_id,
        config,
        network.factory(settings.node_id),
        log,
        sm.clone(),
    )
    .await
    .map_err(|e| StartError::Raft(e.to_string()))?;
    network.join(settings.node_id, raft.clone());
    start_on_raft(raft, sm, settings).await
}

/// Runs the controller on an existing Raft instance and state machine (the
/// network and store are the caller's: tests use in-process ones). Checks the
/// cluster id, initialises a fresh quorum from the lowest initial voter,
/// serves the listener if given, and starts the event loop.
pub async fn start_on_raft(
    raft: Raft,
    sm: StateMachineStore,
    settings: QuorumSettings,
) -> Result<ControllerNode, StartError> {
    let stored = sm.image().cluster_id.clone();
    if !stored.is_empty() && stored != settings.cluster_id {
        return Err(StartError::ClusterIdMismatch(format!(
            "the metadata log belongs to cluster {stored}, but meta.properties says {}",
            settings.cluster_id
        )));
    }
    let lowest = settings.initial_voters.keys().next().copied();
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    // Only the lowest initial voter initialises, and only a node with no Raft
    // state: committed state is never re-initialised.
    if !initialized && lowest == Some(settings.node_id) {
        let members: BTreeMap<NodeId, BasicNode> = settings
            .initial_voters
            .iter()
            .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
            .collect();
        raft.initialize(members)
            .await
            .map_err(|e| StartError::Raft(e.to_string()))?;
        tracing::info!(node_id = settings.node_id, voters = ?settings.initial_voters.keys().collect::<Vec<_>>(), "initialised the metadata quorum");
    }

    let (tx, rx) = mpsc::channel::<Envelope>(1024);
    let peers: BTreeMap<NodeId, Arc<RpcClient>> = settings
        .voters
        .iter()
        .filter(|(id, _)| **id != settings.node_id)
        .map(|(id, addr)| {
            let client = RpcClient::new(addr.clone(), settings.rpc.clone());
            (*id, Arc::new(client))
        })
        .collect();
    let local_leader = {
        let mut metrics = raft.metrics();
        let (tx, rx) = watch::channel(metrics.borrow().current_leader);
        tokio::spawn(async move {
            while metrics.changed().await.is_ok() {
                let leader = metrics.borrow().current_leader;
                tx.send_if_modified(|l| std::mem::replace(l, leader) != leader);
                if tx.is_closed() {
                    return;
                }
            }
        });
        rx
    };
    let handle = ControllerHandle {
        local_id: Some(settings.node_id),
        local: Some(tx.clone()),
        peers: Arc::new(peers),
        leader_hint: Arc::new(parking_lot::Mutex::new(None)),
        local_leader: Some(local_leader),
        image: sm.subscribe(),
        request_timeout: Duration::from_secs(15),
    };
    if let Some(listener) = settings.listener {
        let sm = sm.clone();
        let tx = tx.clone();
        let serve_request = move |value| {
            let sm = sm.clone();
            let tx = tx.clone();
            async move {
                serde_json::to_value(serve_remote(value, &sm, &tx).await)
                    .unwrap_or(serde_json::Value::Null)
            }
        };
        let rpc = settings.rpc.clone();
        tokio::spawn(raft::network::serve(
            listener,
            rpc,
            raft.clone(),
            serve_request,
        ));
    }
    let metrics = Arc::new(metrics::ControllerMetrics::default());
    let controller = Controller {
        config: settings.controller,
        cluster_id: settings.cluster_id,
        raft: raft.clone(),
        sm,
        heartbeats: BrokerHeartbeats::default(),
        active: false,
        started_as_leader_before: false,
        session_timeout_ms: settings.session_timeout_ms,
        write_lease_ms: settings.write_lease_ms,
        clock: settings.clock,
        rng: match settings.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_entropy(),
        },
        last_event_ms: None,
        bootstrap: settings.bootstrap,
        next_balance_ms: None,
        next_unclean_ms: None,
        metrics: metrics.clone(),
    };
    tokio::spawn(controller.run(rx));
    Ok(ControllerNode {
        raft,
        handle,
        metrics,
    })
}

/// What `records` change in reassignments in flight, as lines for the
/// log: each adding replica that joins the ISR (with how many are in sync
/// now), and each reassignment that completes or is cancelled.
fn reassignment_progress(before: &MetadataImage, records: &[MetadataRecord]) -> Vec<String> {
    let ids = |v: &[strand_types::BrokerId]| {
        let v: Vec<String> = v.iter().map(|b| b.to_string()).collect();
        format!("[{}]", v.join(", "))
    };
    let mut lines = Vec::new();
    for r in records {
        let (MetadataRecord::Partition(after) | MetadataRecord::PartitionChange(after)) = r else {
            continue;
        };
        let Some(topic) = before.topic_by_id(after.topic_id) else {
            continue;
        };
        let Some(prev) = topic
            .partitions
            .iter()
            .find(|p| p.partition == after.partition)
        else {
            continue;
        };
        let name = format!("{}-{}", topic.name, after.partition);
        if prev.adding_replicas.is_empty() && prev.removing_replicas.is_empty() {
            if !after.adding_replicas.is_empty() || !after.removing_replicas.is_empty() {
                lines.push(format!(
                    "reassignment of {name} started: adding {}, removing {}",
                    ids(&after.adding_replicas),
                    ids(&after.removing_replicas)
                ));
            }
            continue;
        }
        if after.adding_replicas.is_empty() && after.removing_replicas.is_empty() {
            lines.push(format!(
                "reassignment of {name} ended: replicas {}, ISR {}",
                ids(&after.replicas),
                ids(&after.isr)
            ));
            continue;
        }
        let joined: Vec<strand_types::BrokerId> = after
            .adding_replicas
            .iter()
            .copied()
            .filter(|b| after.isr.contains(b) && !prev.isr.contains(b))
            .collect();
        if !joined.is_empty() {
            let in_sync = after
                .adding_replicas
                .iter()
                .filter(|b| after.isr.contains(b))
                .count();
            lines.push(format!(
                "reassignment of {name}: {} caught up ({in_sync} of {} adding replicas in sync)",
                ids(&joined),
                after.adding_replicas.len()
            ));
        }
    }
    lines
}

/// A controller request that arrived over RPC.
async fn serve_remote(
    value: serde_json::Value,
    sm: &StateMachineStore,
    events: &mpsc::Sender<Envelope>,
) -> ControllerReply {
    let Ok(request) = serde_json::from_value::<ControllerRequest>(value) else {
        return ControllerReply::NotController { leader_id: None };
    };
    if let ControllerRequest::FetchImage {
        known_applied,
        max_wait_ms,
    } = request
    {
        return fetch_image(sm, known_applied, max_wait_ms).await;
    }
    let (tx, rx) = oneshot::channel();
    if events
        .send((request, tx, std::time::Instant::now()))
        .await
        .is_err()
    {
        return ControllerReply::NotController { leader_id: None };
    }
    rx.await
        .unwrap_or(ControllerReply::NotController { leader_id: None })
}

/// Long-poll for a committed image newer than `known_applied`.
/// Answers with the committed records after `known_applied` (a delta) when
/// they are still in the state machine's recent window, else the image.
async fn fetch_image(
    sm: &StateMachineStore,
    known_applied: u64,
    max_wait_ms: u64,
) -> ControllerReply {
    let mut rx = sm.subscribe();
    let newer = |img: &Arc<MetadataImage>| img.applied > known_applied;
    let wait = tokio::time::timeout(Duration::from_millis(max_wait_ms), rx.wait_for(newer)).await;
    let image = match wait {
        Ok(Ok(img)) => img.clone(),
        _ => return ControllerReply::Image(None),
    };
    // The image is only a fallback for followers too far behind (or new).
    match sm
        .records_since(known_applied)
        .filter(|_| known_applied > 0)
    {
        Some(records) if !records.is_empty() => ControllerReply::Records(records),
        _ => ControllerReply::Image(Some(Box::new((*image).clone()))),
    }
}

/// A handle for a broker that is not a controller: requests go to the
/// controllers over RPC, and a background task follows the committed metadata
/// (deltas of records, or the whole image when it is too far behind).
pub fn remote_handle(
    voters: &BTreeMap<NodeId, String>,
    rpc: Arc<dyn RpcSecurity>,
) -> ControllerHandle {
    let peers: BTreeMap<NodeId, Arc<RpcClient>> = voters
        .iter()
        .map(|(id, addr)| (*id, Arc::new(RpcClient::new(addr.clone(), rpc.clone()))))
        .collect();
    let (publish, image) = watch::channel(Arc::new(MetadataImage::default()));
    let handle = ControllerHandle {
        local_id: None,
        local: None,
        peers: Arc::new(peers),
        leader_hint: Arc::new(parking_lot::Mutex::new(None)),
        local_leader: None,
        image,
        request_timeout: Duration::from_secs(15),
    };
    let follower = handle.clone();
    tokio::spawn(async move {
        loop {
            let known = follower.image().applied;
            let request = ControllerRequest::FetchImage {
                known_applied: known,
                max_wait_ms: 2_000,
            };
            // Any controller serves its committed state; a follower's may lag
            // a little but never holds uncommitted records.
            let mut got = None;
            for id in follower.peers.keys().copied().collect::<Vec<_>>() {
                let reply = follower.send_to(id, &request).await;
                if let ControllerReply::Image(_) | ControllerReply::Records(_) = reply {
                    got = Some(reply);
                    break;
                }
            }
            let current = follower.image();
            match got {
                // A delta: apply the records to a copy of the local image.
                Some(ControllerReply::Records(records)) if current.applied == known => {
                    let mut next = (*current).clone();
                    for r in &records {
                        next.apply(r);
                    }
                    publish.send_replace(Arc::new(next));
                }
                Some(ControllerReply::Image(Some(img))) if img.applied > current.applied => {
                    publish.send_replace(Arc::new(*img));
                }
                Some(_) => {}
                None => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    handle
}

/// Backstop for a Raft call on the active controller (a quorum round normally
/// takes milliseconds; losing leadership ends the wait sooner).
const RAFT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The event loop's state. Only the active controller decides; its soft
/// state (heartbeat sessions) is rebuilt whenever it becomes active.
struct Controller {
    config: ControllerConfig,
    cluster_id: String,
    raft: Raft,
    sm: StateMachineStore,
    heartbeats: BrokerHeartbeats,
    active: bool,
    /// Whether this process has been the active controller before.
    started_as_leader_before: bool,
    session_timeout_ms: u64,
    write_lease_ms: u64,
    clock: Arc<dyn Clock>,
    rng: StdRng,
    /// When the event loop last began an event (a request or a tick), on
    /// the session clock: a long gap is the controller's own stall.
    last_event_ms: Option<u64>,
    /// The format step's records (`QuorumSettings::bootstrap`).
    bootstrap: Vec<MetadataRecord>,
    /// When the next leader-balancing pass is due (session clock); None
    /// until this controller is active.
    next_balance_ms: Option<u64>,
    /// When the next unclean-election check is due.
    next_unclean_ms: Option<u64>,
    metrics: Arc<metrics::ControllerMetrics>,
}

impl Controller {
    /// Called as each event begins: a stall of the controller itself (a
    /// paused process, a loop held up by a slow commit) is credited to
    /// every broker session before anything is decided, so brokers whose
    /// heartbeats are queued behind the stall are not fenced for it.
    fn note_event(&mut self) {
        let now = self.now_ms();
        if let Some(stalled) =
            manager::cluster::controller_stall(self.last_event_ms, now, self.session_timeout_ms)
        {
            if self.active {
                tracing::warn!(
                    stalled_ms = stalled,
                    "the controller was not listening; broker sessions are credited with the stall"
                );
            }
            self.heartbeats.credit_stall(stalled);
        }
        self.last_event_ms = Some(now);
    }

    /// Broker sessions are timed on the monotonic clock: a stepped wall
    /// clock, or a machine paused and resumed, must not fence brokers whose
    /// heartbeats are queued behind the pause (a single node fenced itself
    /// this way after a 35 s pause of its VM).
    fn now_ms(&self) -> u64 {
        self.clock.monotonic_ms().max(0) as u64
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Envelope>) {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = rx.recv() => match event {
                    Some((request, reply, queued_at)) => {
                        self.note_event();
                        let started = std::time::Instant::now();
                        self.metrics.queued(started - queued_at);
                        let r = self.handle(request).await;
                        self.metrics.processed(started.elapsed());
                        let _ = reply.send(r);
                    }
                    None => return,
                },
                _ = tick.tick() => {
                    self.note_event();
                    self.on_tick().await
                }
            }
        }
    }

    fn leader_id(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    fn is_leader(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.current_leader == Some(m.id)
    }

    /// Confirms leadership with a quorum and waits until every committed entry
    /// is applied, so decisions see the latest image. On gaining leadership:
    /// heartbeat sessions restart and a fresh log gets its cluster id.
    async fn ensure_active(&mut self) -> Result<(), Option<NodeId>> {
        if !self.is_leader() {
            self.active = false;
            return Err(self.leader_id());
        }
        match self.while_leader(self.raft.ensure_linearizable()).await {
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                self.active = false;
                let hint = e
                    .forward_to_leader::<BasicNode>()
                    .and_then(|f| f.leader_id)
                    .or(self.leader_id());
                return Err(hint);
            }
            None => {
                self.active = false;
                return Err(self.leader_id());
            }
        }
        if !self.active {
            self.active = true;
            self.next_balance_ms = None;
            self.next_unclean_ms = None;
            let term = self.raft.metrics().borrow().current_term;
            self.heartbeats = BrokerHeartbeats::rebuild(
                &self.sm.image(),
                self.now_ms(),
                term,
                self.write_lease_ms,
            );
            if !self.started_as_leader_before {
                // A combined node's broker lives in this process: whatever
                // incarnation the image records from before the restart is dead.
                self.heartbeats.forget(self.config.node_id);
                self.started_as_leader_before = true;
            }
            tracing::info!(
                node_id = self.raft.metrics().borrow().id,
                "became the active controller"
            );
            if self.sm.image().cluster_id.is_empty() {
                let mut records = vec![MetadataRecord::ClusterFormatted {
                    cluster_id: self.cluster_id.clone(),
                }];
                records.extend(self.bootstrap.iter().cloned());
                // A format step that chose no levels (a lone node that
                // formats itself, an older `strand format`): Kafka 4.4's.
                if !records
                    .iter()
                    .any(|r| matches!(r, MetadataRecord::FeatureLevel { .. }))
                {
                    records.extend(
                        strand_metadata::features::defaults_for(
                            strand_metadata::features::LATEST_METADATA_VERSION,
                        )
                        .into_iter()
                        .map(|(name, level)| {
                            MetadataRecord::FeatureLevel {
                                name: name.into(),
                                level,
                            }
                        }),
                    );
                }
                if self.commit(records).await.is_err() {
                    self.active = false;
                    return Err(self.leader_id());
                }
            }
        }
        Ok(())
    }

    /// Proposes one event's records as one entry and waits until it is
    /// committed and applied here.
    async fn commit(&mut self, records: Vec<MetadataRecord>) -> Result<(), ApiError> {
        if records.is_empty() {
            return Ok(());
        }
        let proposed = std::time::Instant::now();
        let before = self.sm.image();
        let progress = reassignment_progress(&before, &records);
        let written = self
            .while_leader(self.raft.client_write(MetadataBatch(records)))
            .await;
        if matches!(written, Some(Ok(_))) {
            self.metrics.committed(proposed.elapsed());
            for line in progress {
                tracing::info!("{line}");
            }
        }
        match written {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => {
                self.active = false;
                tracing::warn!(error = %e, "metadata write not committed");
                Err(ApiError::new(
                    ErrorCode::NotController,
                    format!("metadata write failed: {e}"),
                ))
            }
            None => {
                // Leadership was lost (or the quorum is gone) with the entry
                // in flight: its outcome is unknown, and openraft may never
                // answer it (a snapshot can overtake an uncommitted entry), so
                // the event loop must not wait on it.
                self.active = false;
                tracing::warn!(
                    "metadata write outcome unknown: leadership lost or quorum unreachable"
                );
                Err(ApiError::new(
                    ErrorCode::NotController,
                    "metadata write outcome unknown: the controller lost leadership",
                ))
            }
        }
    }

    /// Runs a Raft call while this node stays leader of the current term;
    /// None when leadership is lost or `RAFT_CALL_TIMEOUT` passes first.
    async fn while_leader<F: std::future::Future>(&self, call: F) -> Option<F::Output> {
        let mut metrics = self.raft.metrics();
        let term = metrics.borrow().current_term;
        let lost = async move {
            loop {
                if metrics.changed().await.is_err() {
                    return;
                }
                let m = metrics.borrow();
                if m.current_term != term || m.current_leader != Some(m.id) {
                    return;
                }
            }
        };
        tokio::select! {
            out = call => Some(out),
            _ = lost => None,
            _ = tokio::time::sleep(RAFT_CALL_TIMEOUT) => None,
        }
    }

    /// Runs per-item decisions against a scratch image so later items see
    /// earlier ones, then commits all records as one entry.
    async fn decide_each<I, T: Clone>(
        &mut self,
        items: Vec<I>,
        validate_only: bool,
        mut decide: impl FnMut(&MetadataImage, I) -> Result<(Vec<MetadataRecord>, T), ApiError>,
    ) -> Vec<Result<T, ApiError>> {
        let mut scratch = (*self.sm.image()).clone();
        let mut all = Vec::new();
        let mut results = Vec::new();
        let count = items.len();
        for item in items {
            match decide(&scratch, item) {
                // The whole operation fails past the budget, as Kafka's
                // does (its records are one Raft entry).
                Ok((records, _))
                    if manager::check_record_budget(all.len(), records.len()).is_err() =>
                {
                    return vec![Err(manager::excessive_batch()); count];
                }
                Ok((records, out)) => {
                    for r in &records {
                        scratch.apply(r);
                    }
                    all.extend(records);
                    results.push(Ok(out));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if !validate_only {
            if let Err(e) = self.commit(all).await {
                return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
            }
        }
        results
    }

    async fn handle(&mut self, request: ControllerRequest) -> ControllerReply {
        if let ControllerRequest::FetchImage {
            known_applied,
            max_wait_ms,
        } = request
        {
            return fetch_image(&self.sm, known_applied, max_wait_ms.min(100)).await;
        }
        if let Err(leader_id) = self.ensure_active().await {
            return ControllerReply::NotController { leader_id };
        }
        let cfg = self.config.clone();
        let now = self.now_ms();
        // This request's own generator: the decisions below borrow `self`.
        let mut rng = StdRng::seed_from_u64(self.rng.gen());
        match request {
            ControllerRequest::CreateTopics {
                topics,
                validate_only,
            } => {
                let r = self
                    .decide_each(topics, validate_only, |img, t| {
                        let stripe = rng.gen_range(0..img.brokers.len().max(1));
                        let id = uuid::Builder::from_random_bytes(rng.gen()).into_uuid();
                        manager::create_topic(img, &cfg, &t, id, stripe)
                    })
                    .await;
                ControllerReply::CreateTopics(r)
            }
            ControllerRequest::DeleteTopics { names } => ControllerReply::DeleteTopics(
                self.decide_each(names, false, |img, n| manager::delete_topic(img, &n))
                    .await,
            ),
            ControllerRequest::CreatePartitions {
                topics,
                validate_only,
            } => {
                let r = self
                    .decide_each(topics, validate_only, |img, (name, count, assignments)| {
                        let stripe = rng.gen_range(0..img.brokers.len().max(1));
                        manager::create_partitions(
                            img,
                            &name,
                            count,
                            assignments.as_deref(),
                            stripe,
                        )
                        .map(|rec| (rec, ()))
                    })
                    .await;
                ControllerReply::Each(r)
            }
            ControllerRequest::AlterTopicConfigs {
                topics,
                incremental,
                validate_only,
            } => {
                let r = self
                    .decide_each(topics, validate_only, |img, (name, ops)| {
                        manager::alter_topic_configs(img, &name, &ops, incremental)
                            .map(|rec| (rec, ()))
                    })
                    .await;
                ControllerReply::Each(r)
            }
            ControllerRequest::AlterBrokerConfigs {
                brokers,
                incremental,
                validate_only,
            } => {
                let r = self
                    .decide_each(brokers, validate_only, |img, (name, ops)| {
                        manager::configs::alter_broker_configs(img, &name, &ops, incremental)
                            .map(|rec| (rec, ()))
                    })
                    .await;
                ControllerReply::Each(r)
            }
            ControllerRequest::AlterGroupConfigs {
                groups,
                incremental,
                validate_only,
            } => {
                let bounds = self.config.group_bounds.clone();
                let r = self
                    .decide_each(groups, validate_only, |img, (name, ops)| {
                        manager::configs::alter_group_configs(
                            img,
                            &name,
                            &ops,
                            incremental,
                            &bounds,
                        )
                        .map(|rec| (rec, ()))
                    })
                    .await;
                ControllerReply::Each(r)
            }
            ControllerRequest::CreateAcls { bindings } => {
                let r = self
                    .decide_each(bindings, false, |img, binding| {
                        let id = uuid::Builder::from_random_bytes(rng.gen()).into_uuid();
                        manager::acls::create_acl(img, &binding, id).map(|rec| (rec, ()))
                    })
                    .await;
                ControllerReply::Each(r)
            }
            ControllerRequest::RemoveAcls { ids } => {
                let records = manager::acls::remove_acls(&self.sm.image(), &ids);
                ControllerReply::Each(vec![self.commit(records).await.map(|_| ())])
            }
            ControllerRequest::AlterClientQuotas {
                entries,
                validate_only,
            } => {
                let r = self
                    .decide_each(entries, validate_only, |img, (entity, ops)| {
                        manager::alter_client_quotas(img, &entity, &ops).map(|rec| (rec, ()))
                    })
                    .await;
                ControllerReply::Each(r)
            }
            ControllerRequest::AlterUserScramCredentials { users } => {
                let r = self
                    .decide_each(users, false, |img, (name, ops)| {
                        manager::alter_user_scram_credentials(img, &name, &ops).map(|rec| (rec, ()))
                    })
                    .await;
                ControllerReply::Each(r)
            }
            ControllerRequest::AllocateProducerIds {
                broker_id,
                broker_epoch,
            } => {
                let decision =
                    manager::allocate_producer_ids(&self.sm.image(), &cfg, broker_id, broker_epoch);
                let r = match decision {
                    Ok((records, block)) => self.commit(records).await.map(|_| block),
                    Err(e) => Err(e),
                };
                ControllerReply::ProducerIds(r)
            }
            ControllerRequest::RegisterBroker(req) => {
                let image = self.sm.image();
                let decision = manager::register_broker(
                    &image,
                    &mut self.heartbeats,
                    &req,
                    now,
                    self.session_timeout_ms,
                );
                let r = match decision {
                    Ok((records, epoch)) => self.commit(records).await.map(|_| epoch),
                    Err(e) => Err(e),
                };
                ControllerReply::Registered(r)
            }
            ControllerRequest::Heartbeat(req) => {
                let image = self.sm.image();
                let caught_up = image
                    .brokers
                    .get(&req.broker_id)
                    .map(manager::cluster::caught_up_offset)
                    .unwrap_or(u64::MAX);
                let decision =
                    manager::cluster::heartbeat(&image, &mut self.heartbeats, &req, caught_up, now);
                let r = match decision {
                    Ok((records, reply)) => {
                        let changed = !records.is_empty();
                        let r = self.commit(records).await.map(|_| reply);
                        if changed {
                            self.unclean_check_soon();
                        }
                        r
                    }
                    Err(e) => Err(e),
                };
                ControllerReply::Heartbeat(r)
            }
            ControllerRequest::AlterPartition(req) => {
                let decision = manager::alter_partition(&self.sm.image(), &req);
                let r = match decision {
                    // The change completed a reassignment that moved the
                    // leadership away: written, but the requester leads no
                    // more (Kafka's NEW_LEADER_ELECTED).
                    Ok((records, state)) if state.leader != Some(req.broker_id) => {
                        self.commit(records).await.and_then(|_| {
                            Err(ApiError::new(
                                ErrorCode::NewLeaderElected,
                                format!(
                                    "The partition's reassignment completed and moved its leadership to {}",
                                    strand_types::BrokerId::to_wire(state.leader)
                                ),
                            ))
                        })
                    }
                    Ok((records, state)) => self.commit(records).await.map(|_| state),
                    Err(e) => Err(e),
                };
                ControllerReply::AlterPartition(r)
            }
            ControllerRequest::ElectLeaders {
                election_type,
                partitions,
            } => {
                let election_type = match ElectionType::try_from(election_type) {
                    Ok(t) => t,
                    // Unreachable through `ControllerHandle`; a forwarded
                    // request may carry anything.
                    Err(e) => {
                        let items = partitions.unwrap_or_default();
                        return ControllerReply::ElectLeaders(
                            items.into_iter().map(|tp| (tp, Err(e.clone()))).collect(),
                        );
                    }
                };
                let (records, results) =
                    manager::elect_leaders(&self.sm.image(), election_type, partitions.as_deref());
                let results = match self.commit(records).await {
                    Ok(()) => results,
                    Err(e) => results
                        .into_iter()
                        .map(|(tp, r)| (tp, r.and(Err(e.clone()))))
                        .collect(),
                };
                ControllerReply::ElectLeaders(results)
            }
            ControllerRequest::AlterPartitionReassignments { targets } => {
                let r = self
                    .decide_each(targets, false, |img, (topic, partition, target)| {
                        manager::reassignment::alter_partition_reassignment(
                            img,
                            &topic,
                            partition,
                            target.as_deref(),
                        )
                        .map(|rec| (rec, ()))
                    })
                    .await;
                ControllerReply::Each(r)
            }
            ControllerRequest::ListPartitionReassignments { partitions } => {
                ControllerReply::Reassignments(manager::reassignment::list_partition_reassignments(
                    &self.sm.image(),
                    partitions.as_deref(),
                ))
            }
            ControllerRequest::AssignReplicasToDirs {
                broker_id,
                broker_epoch,
                assignments,
            } => {
                let registered = match self.sm.image().brokers.get(&broker_id) {
                    None => Err(ApiError::new(
                        ErrorCode::BrokerIdNotRegistered,
                        format!("Broker {broker_id} is not registered."),
                    )),
                    Some(b) if b.broker_epoch != broker_epoch => Err(ApiError::new(
                        ErrorCode::StaleBrokerEpoch,
                        format!(
                            "Expected broker epoch {}, but got broker epoch {broker_epoch}",
                            b.broker_epoch
                        ),
                    )),
                    Some(_) => Ok(()),
                };
                let mv = self
                    .sm
                    .image()
                    .feature_level(strand_metadata::features::METADATA_VERSION);
                let registered = registered.and_then(|()| {
                    if mv < strand_metadata::features::MV_DIRECTORY_ASSIGNMENT {
                        Err(ApiError::new(
                            ErrorCode::UnsupportedVersion,
                            "Directory assignment is not supported yet.",
                        ))
                    } else {
                        Ok(())
                    }
                });
                if let Err(e) = registered {
                    return ControllerReply::Each(vec![Err(e); assignments.len()]);
                }
                let r = self
                    .decide_each(assignments, false, |img, a| {
                        manager::replication::assign_replica_to_dir(
                            img,
                            broker_id,
                            a.topic_id,
                            a.partition,
                            a.directory,
                        )
                        .map(|change| {
                            (
                                change
                                    .map(MetadataRecord::PartitionChange)
                                    .into_iter()
                                    .collect(),
                                (),
                            )
                        })
                    })
                    .await;
                ControllerReply::Each(r)
            }
            ControllerRequest::UnregisterBroker { broker_id } => {
                let decision = manager::cluster::unregister_broker(&self.sm.image(), broker_id);
                let r = match decision {
                    Ok(records) => {
                        let r = self.commit(records).await;
                        if r.is_ok() {
                            self.heartbeats.forget(broker_id);
                        }
                        r
                    }
                    Err(e) => Err(e),
                };
                ControllerReply::Each(vec![r])
            }
            ControllerRequest::UpdateFeatures {
                updates,
                validate_only,
            } => {
                let decision = manager::features::update_features(
                    &self.sm.image(),
                    self.config.node_id,
                    &updates,
                );
                let r = match decision {
                    Ok(_) if validate_only => Ok(()),
                    Ok(records) => self.commit(records).await,
                    Err(e) => Err(e),
                };
                ControllerReply::Each(vec![r])
            }
            ControllerRequest::DescribeQuorum => ControllerReply::Quorum(self.quorum_info()),
            ControllerRequest::FetchImage { .. } => unreachable!("answered above"),
        }
    }

    fn quorum_info(&self) -> QuorumInfo {
        let m = self.raft.metrics().borrow().clone();
        let voters = m
            .membership_config
            .membership()
            .voter_ids()
            .map(|id| {
                let matched = if id == m.id {
                    m.last_log_index
                } else {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(&id).cloned().flatten())
                        .map(|l| l.index)
                };
                (id, matched)
            })
            .collect();
        let membership = m.membership_config.membership();
        let voter_addrs = membership
            .voter_ids()
            .filter_map(|id| membership.get_node(&id).map(|n| (id, n.addr.clone())))
            .collect();
        QuorumInfo {
            leader_id: m.id,
            leader_epoch: m.current_term,
            high_watermark: m.last_applied.map(|l| l.index).unwrap_or(0),
            voters,
            voter_addrs,
        }
    }

    /// Fences brokers whose sessions expired (only on the active controller).
    async fn on_tick(&mut self) {
        if !self.is_leader() {
            self.active = false;
            return;
        }
        if self.ensure_active().await.is_err() {
            return;
        }
        let now = self.now_ms();
        let records = manager::cluster::fence_stale_brokers(
            &self.sm.image(),
            &mut self.heartbeats,
            now,
            self.session_timeout_ms,
        );
        if !records.is_empty() {
            tracing::info!(
                records = records.len(),
                "fencing brokers whose sessions expired"
            );
            let _ = self.commit(records).await;
            self.unclean_check_soon();
        }
        self.maybe_balance_leaders().await;
        self.maybe_elect_unclean_leaders().await;
    }

    /// With `unclean.leader.election.enable=true` in this controller's
    /// server.properties, Kafka elects unclean leaders as soon as a broker
    /// leaves: the next tick's check does (the dynamic settings act at
    /// once already, in the fencing's own partition changes).
    fn unclean_check_soon(&mut self) {
        if self.config.unclean_leader_election_enable {
            self.next_unclean_ms = Some(0);
        }
    }

    /// Every `unclean.leader.election.interval.ms` (the first an interval
    /// after becoming active), unclean elections for the leaderless
    /// partitions whose topic allows them; again at once while a pass hits
    /// its cap.
    async fn maybe_elect_unclean_leaders(&mut self) {
        let Some(interval) = self.config.unclean_election_interval_ms else {
            return;
        };
        let now = self.now_ms();
        let due = *self.next_unclean_ms.get_or_insert(now + interval);
        if now < due {
            return;
        }
        let (records, more) = manager::replication::elect_unclean_leaders(
            &self.sm.image(),
            self.config.unclean_leader_election_enable,
            manager::replication::MAX_ELECTIONS_PER_BALANCE,
        );
        let committed = self.commit(records).await.is_ok();
        self.next_unclean_ms = Some(if more && committed {
            now
        } else {
            now + interval
        });
    }

    /// Every `leader.imbalance.check.interval.seconds` (the first one an
    /// interval after becoming active), preferred elections for the
    /// partitions led off their first replica; again at once while a pass
    /// hits its cap.
    async fn maybe_balance_leaders(&mut self) {
        let Some(interval) = self.config.leader_balance_interval_ms else {
            return;
        };
        let now = self.now_ms();
        let due = *self.next_balance_ms.get_or_insert(now + interval);
        if now < due {
            return;
        }
        let (records, more) = manager::replication::balance_partition_leaders(
            &self.sm.image(),
            manager::replication::MAX_ELECTIONS_PER_BALANCE,
        );
        if !records.is_empty() {
            tracing::info!(
                partitions = records.len(),
                "moving leaderships back to preferred replicas"
            );
        }
        let committed = self.commit(records).await.is_ok();
        self.next_balance_ms = Some(if more && committed {
            now
        } else {
            now + interval
        });
    }
}

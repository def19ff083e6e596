//! The broker's replica manager: the partitions this node hosts, kept in line
//! with the metadata image (open, delete, lead or follow), the replica
//! fetchers, and the listeners (group and transaction coordinators) told
//! when an internal partition is led here or goes away.

use crate::config::BrokerConfig;
use crate::controller_link::ControllerLink;
use crate::listener_security::ListenerSecurity;
use crate::log_dirs::{choose_dir, LogDir, LogDirs};
use crate::replica_plan;
use crate::transport::Transport;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use strand_log::cleaner::CleanerLogConfig;
use strand_log::storage::FileStorage;
use strand_log::LogConfig;
use strand_metadata::configs::{resolve_topic_config, topic_config, BrokerLayers};
use strand_metadata::controller_api::{AlterPartitionRequest, ConfigOp, DirAssignment};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::ConfigMap;
use strand_partition::lease::WriteLease;
use strand_protocol::ErrorCode;
use strand_replication::ack::{AckPolicy, AckSettings};
use strand_replication::leader::{AlterPartitionResult, IsrProposal, LeaderConfig};
use strand_types::{BrokerEpoch, BrokerId, Clock, LeaderEpoch, ProducerId, TopicPartition};
use uuid::Uuid;

use strand_partition::{
    delete_dir, read_partition_metadata, Partition, PartitionIo, PartitionSettings, DELETE_SUFFIX,
};

/// Derives a partition's settings from its topic's configs and the
/// broker's settings (dynamic, then static).
pub fn partition_settings(
    broker: &BrokerLayers,
    topic_configs: &BTreeMap<String, String>,
) -> PartitionSettings {
    let get = |name: &str| -> String {
        let d = topic_config(name).expect("known topic config");
        resolve_topic_config(d, topic_configs, broker).0.to_string()
    };
    // Validated by the controller; were a value not to read, the default.
    let long = |name: &str| -> i64 {
        get(name)
            .trim()
            .parse()
            .or_else(|_| topic_config(name).map_or("0", |d| d.default).parse())
            .unwrap_or_default()
    };
    let policy = get("cleanup.policy");
    let policies = || policy.split(',').map(str::trim);
    // Time and size retention delete only where the policy includes delete:
    // a compact-only topic (`__consumer_offsets`, `__transaction_state`) keeps
    // every record until the log cleaner supersedes it, as in Kafka.
    let deletes = policies().any(|p| p == "delete");
    let log = LogConfig {
        segment_bytes: long("segment.bytes").max(14) as u64,
        segment_ms: long("segment.ms"),
        retention_ms: if deletes { long("retention.ms") } else { -1 },
        retention_bytes: if deletes { long("retention.bytes") } else { -1 },
        index_interval_bytes: long("index.interval.bytes").max(0) as u64,
        segment_index_bytes: long("segment.index.bytes").max(4) as u64,
        flush_interval_messages: long("flush.messages").max(1) as u64,
        flush_interval_ms: long("flush.ms"),
    };
    PartitionSettings {
        log,
        max_message_bytes: long("max.message.bytes").max(0) as usize,
        log_append_time: get("message.timestamp.type") == "LogAppendTime",
        min_insync_replicas: long("min.insync.replicas") as i32,
        compacted: policies().any(|p| p == "compact"),
        cleaner: CleanerLogConfig {
            delete_retention_ms: long("delete.retention.ms"),
            min_compaction_lag_ms: long("min.compaction.lag.ms"),
            max_compaction_lag_ms: long("max.compaction.lag.ms"),
            min_cleanable_ratio: get("min.cleanable.dirty.ratio")
                .trim()
                .parse()
                .or_else(|_| {
                    topic_config("min.cleanable.dirty.ratio")
                        .map_or("0", |d| d.default)
                        .parse()
                })
                .unwrap_or_default(),
        },
        timestamp_before_max_ms: long("message.timestamp.before.max.ms"),
        timestamp_after_max_ms: long("message.timestamp.after.max.ms"),
        acks: AckSettings {
            policy: AckPolicy::from_config(
                &get("strand.acks.policy"),
                long("strand.acks.replicas"),
            ),
            durable: get("strand.acks.durable").eq_ignore_ascii_case("true"),
            downgrade: get("strand.acks.downgrade.enable").eq_ignore_ascii_case("true"),
            eviction_ms: long("strand.acks.eviction.ms").max(1),
        },
        compression: strand_protocol::transcode::TopicCompression::from_topic_configs(
            &get("compression.type"),
            |name| get(name).parse().ok(),
        ),
    }
}

/// Follows the partitions of one topic hosted on this broker: the seam
/// through which the coordinators learn of leadership without the replica
/// manager knowing them.
pub trait PartitionListener: Send + Sync {
    /// The topic whose partitions it follows.
    fn topic(&self) -> &'static str;
    /// After every reconciliation, for each hosted partition of the topic
    /// (led or followed: the listener reads its leader state).
    fn on_partition(self: Arc<Self>, partition: &Arc<Partition>);
    /// The partition is no longer hosted here (deleted or reassigned).
    fn forget_partition(&self, index: i32);
}

/// A replica moving to another log directory of this broker.
pub struct ReplicaMove {
    /// The destination directory's id.
    pub dest: Uuid,
    cancelled: std::sync::atomic::AtomicBool,
    /// The copy's end and size (DescribeLogDirs' future replica).
    future_leo: std::sync::atomic::AtomicI64,
    future_size: AtomicU64,
}

impl ReplicaMove {
    fn new(dest: Uuid) -> ReplicaMove {
        ReplicaMove {
            dest,
            cancelled: Default::default(),
            future_leo: Default::default(),
            future_size: Default::default(),
        }
    }

    fn cancel(&self) {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::Acquire)
    }

    fn note(&self, future: &strand_partition::move_dir::FutureReplica) {
        use std::sync::atomic::Ordering::Release;
        self.future_leo
            .store(future.log_end_offset().get(), Release);
        self.future_size.store(future.size_bytes(), Release);
    }

    pub fn future_log_end_offset(&self) -> i64 {
        self.future_leo.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn future_size(&self) -> u64 {
        self.future_size.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// How often the partitions under replica-count acknowledgements check
/// for followers to evict (`ReplicaManager::evict_quorum_laggards`).
pub const QUORUM_CHECK_MS: u64 = 50;

pub struct ReplicaManager {
    pub config: Arc<BrokerConfig>,
    pub controller: ControllerLink,
    /// The node's clock: partitions, coordinators and handlers read time
    /// from it, never from the system directly.
    pub clock: Arc<dyn Clock>,
    /// How this node reaches other brokers (TCP, or a simulated network).
    pub transport: Arc<dyn Transport>,
    /// The broker's write lease (`strand.write.lease.*`), shared with every
    /// partition: installed by the heartbeat loop, asked by leader appends.
    pub lease: Arc<WriteLease>,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Serialises reconciliation with the metadata image.
    reconcile_lock: Mutex<()>,
    /// Partitions whose log could not be opened, with the topic id tried.
    failed: Mutex<BTreeMap<TopicPartition, Uuid>>,
    /// This broker's registration epoch (fences stale producer-id requests).
    broker_epoch: BrokerEpoch,
    /// The current producer id block: (next id, end exclusive); empty until
    /// the first id is asked for.
    producer_ids: tokio::sync::Mutex<(ProducerId, ProducerId)>,
    /// One fetcher per leader this broker follows partitions of.
    fetchers: crate::replica_fetcher::ReplicaFetcherManager,
    runtime: tokio::runtime::Handle,
    /// Told about the partitions of the topics they follow (the group and
    /// transaction coordinators, registered by the node at start-up).
    listeners: RwLock<Vec<Arc<dyn PartitionListener>>>,
    /// The log directories (`log.dirs`), each set offline by the first
    /// failed write, fsync or checkpoint of a log in it.
    pub log_dirs: Arc<LogDirs>,
    /// Replica directories to tell the controller of (AssignReplicasToDirs),
    /// and whether a task is sending them.
    assignments: Arc<Mutex<(Vec<DirAssignment>, bool)>>,
    /// Replicas moving to another of this broker's log directories
    /// (AlterReplicaLogDirs), each copied by a thread of its own.
    moves: Mutex<HashMap<TopicPartition, Arc<ReplicaMove>>>,
    /// Where replicas not hosted here yet are to go, by directory id
    /// (Kafka's preferred log dirs): named by AlterReplicaLogDirs before
    /// the replica exists, or by a move a stop interrupted. Placement
    /// takes them; at start-up a hosted replica elsewhere moves there.
    /// Only partitions the image has: bounded by the cluster's.
    preferred_dirs: Mutex<HashMap<TopicPartition, Uuid>>,
    /// The start-up's partitions are open (their logs recovered).
    recovered: std::sync::atomic::AtomicBool,
    /// This broker's metrics (`strand.http.listener`'s `/metrics`).
    pub metrics: Arc<crate::metrics::BrokerMetrics>,
    /// ACL decisions (`authorizer.class.name`).
    pub authorizer: crate::authorizer::Authorizer,
    /// Client quotas' usage (`quota.window.*`; the quotas are the image's).
    pub quotas: crate::client_quotas::ClientQuotaManager,
    /// Replication throttles (`*.replication.throttled.*`), from the image.
    pub throttles: Arc<crate::replication_quota::ReplicationThrottles>,
    /// Log levels changed at runtime (BROKER_LOGGER).
    pub loggers: crate::broker_loggers::BrokerLoggers,
    /// The TLS listeners (installed by the binary) and the dynamic
    /// `listener.name.*.ssl.*` settings they last took up.
    tls_listeners: std::sync::OnceLock<Vec<(String, Arc<ListenerSecurity>)>>,
    tls_applied: Mutex<BTreeMap<String, String>>,
}

impl ReplicaManager {
    pub fn new(
        config: Arc<BrokerConfig>,
        controller: ControllerLink,
        broker_epoch: BrokerEpoch,
        clock: Arc<dyn Clock>,
        transport: Arc<dyn Transport>,
        lease: Arc<WriteLease>,
        log_dirs: Arc<LogDirs>,
    ) -> ReplicaManager {
        let setting = |key: &str, default: i64| {
            config
                .setting(key)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(default)
        };
        let throttles = Arc::new(crate::replication_quota::ReplicationThrottles::new(
            config.broker_id(),
            crate::client_quotas::QuotaWindow {
                samples: setting("replication.quota.window.num", 11).clamp(1, 1000) as u32,
                window_ms: setting("replication.quota.window.size.seconds", 1).clamp(1, 86_400)
                    * 1000,
            },
        ));
        let metrics = Arc::new(crate::metrics::BrokerMetrics::new(
            config
                .setting("strand.http.listener")
                .is_some_and(|v| !v.is_empty()),
        ));
        let fetchers = crate::replica_fetcher::ReplicaFetcherManager::new(
            config.clone(),
            controller.clone(),
            broker_epoch,
            transport.clone(),
            throttles.clone(),
            clock.clone(),
            metrics.clone(),
        );
        let authorizer = crate::authorizer::Authorizer::new(&config);
        let quotas =
            crate::client_quotas::ClientQuotaManager::new(crate::client_quotas::QuotaWindow {
                samples: setting("quota.window.num", 11).clamp(1, 1000) as u32,
                window_ms: setting("quota.window.size.seconds", 1).clamp(1, 86_400) * 1000,
            });
        ReplicaManager {
            config,
            controller,
            clock,
            transport,
            lease,
            partitions: RwLock::new(HashMap::new()),
            reconcile_lock: Mutex::new(()),
            failed: Mutex::new(BTreeMap::new()),
            broker_epoch,
            producer_ids: tokio::sync::Mutex::new((ProducerId::new(0), ProducerId::new(0))),
            fetchers,
            runtime: tokio::runtime::Handle::current(),
            listeners: RwLock::new(Vec::new()),
            log_dirs,
            assignments: Default::default(),
            moves: Mutex::new(HashMap::new()),
            preferred_dirs: Mutex::new(HashMap::new()),
            recovered: Default::default(),
            metrics,
            authorizer,
            quotas,
            throttles,
            loggers: Default::default(),
            tls_listeners: Default::default(),
            tls_applied: Mutex::new(BTreeMap::new()),
        }
    }

    fn leader_config(&self, settings: &PartitionSettings) -> LeaderConfig {
        LeaderConfig {
            min_insync_replicas: settings.min_insync_replicas,
            replica_lag_time_max_ms: self.config.replica_lag_time_max_ms,
            acks: settings.acks,
        }
    }

    /// Sends an ISR change to the controller (AlterPartition) and hands the
    /// answer to the partition's leader state; retries retriable errors.
    pub fn send_alter_partition(&self, partition: Arc<Partition>, proposal: IsrProposal) {
        let controller = self.controller.clone();
        let broker_id = self.node_id();
        let broker_epoch = self.broker_epoch;
        tracing::info!(topic = %partition.topic, partition = partition.index, isr = ?proposal.new_isr, change = ?proposal.change, "proposing ISR change");
        let metrics = self.metrics.clone();
        match proposal.change {
            strand_replication::leader::IsrChange::Expand { .. } => metrics.isr_expands.inc(),
            strand_replication::leader::IsrChange::Shrink { .. } => metrics.isr_shrinks.inc(),
        };
        self.runtime.spawn(async move {
            let mut proposal = proposal;
            loop {
                let req = AlterPartitionRequest {
                    broker_id,
                    broker_epoch,
                    topic_id: partition.topic_id,
                    partition: partition.index,
                    leader_epoch: proposal.leader_epoch,
                    partition_epoch: proposal.partition_epoch,
                    new_isr: proposal.new_isr.clone(),
                    broker_epochs: proposal.broker_epochs.clone(),
                };
                let result = match controller.alter_partition(req).await {
                    Ok(s) => AlterPartitionResult::Ok {
                        leader_epoch: s.leader_epoch,
                        partition_epoch: s.partition_epoch,
                        isr: s.isr,
                    },
                    Err(e) => {
                        metrics.failed_isr_updates.inc();
                        AlterPartitionResult::Err(e.code)
                    }
                };
                tracing::debug!(topic = %partition.topic, partition = partition.index, ?result, "AlterPartition answered");
                match partition.on_alter_partition_result(&proposal, result) {
                    Some(again) if !partition.is_closed() => {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        proposal = again;
                    }
                    _ => return,
                }
            }
        });
    }

    /// The periodic ISR shrink check over the partitions this broker leads.
    pub fn maybe_shrink_isrs(&self) {
        self.shrink_isrs(|_| true)
    }

    /// The ISR check of the partitions whose acknowledgements count
    /// replicas (`strand.acks.policy=replica-count`): run every
    /// [`QUORUM_CHECK_MS`], so a follower that holds up their
    /// acknowledgements leaves the ISR within about `strand.acks.eviction.ms`.
    pub fn evict_quorum_laggards(&self) {
        self.shrink_isrs(|p| {
            matches!(
                p.settings().acks.policy,
                strand_replication::ack::AckPolicy::ReplicaCount(_)
            )
        })
    }

    fn shrink_isrs(&self, which: impl Fn(&Partition) -> bool) {
        let image = self.image();
        let eligible = |r: BrokerId| image.is_active(r);
        for p in self.all_partitions() {
            if !which(&p) {
                continue;
            }
            if let Some(proposal) = p.maybe_shrink_isr(&eligible) {
                self.send_alter_partition(p, proposal);
            }
        }
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.controller.image()
    }

    /// This broker's id (`node.id`).
    pub fn node_id(&self) -> BrokerId {
        self.config.broker_id()
    }

    /// The directory each partition to open goes to (KIP-858), in order:
    /// where it is on disk already, else the directory the controller
    /// recorded if it is online here, else the online directory with the
    /// fewest partitions. None: the recorded directory is offline, or none
    /// is online.
    fn place(&self, image: &MetadataImage, opens: &[TopicPartition]) -> Vec<Option<PathBuf>> {
        let me = self.node_id();
        let dirs = self.log_dirs.all();
        let mut counts: Vec<Option<usize>> = dirs
            .iter()
            .map(|d| (!d.is_offline()).then_some(0))
            .collect();
        for p in self.partitions.read().values() {
            if let Some(i) = dirs.iter().position(|d| p.dir().parent() == Some(&d.path)) {
                if let Some(c) = counts[i].as_mut() {
                    *c += 1;
                }
            }
        }
        let mut preferred = self.preferred_dirs.lock();
        opens
            .iter()
            .map(|tp| {
                let name = format!("{}-{}", tp.topic, tp.partition);
                let recorded = image
                    .partition(&tp.topic, tp.partition)
                    .map_or(Uuid::nil(), |p| p.directory_of(me));
                let on_disk = dirs
                    .iter()
                    .position(|d| !d.is_offline() && d.path.join(&name).is_dir());
                let mine = dirs
                    .iter()
                    .position(|d| !recorded.is_nil() && d.id == recorded);
                let asked = preferred
                    .get(tp)
                    .and_then(|id| dirs.iter().position(|d| d.id == *id && !d.is_offline()));
                let i = match (on_disk, mine, asked) {
                    (Some(i), _, _) => i,
                    (None, Some(i), _) if dirs[i].is_offline() => return None,
                    (None, Some(i), _) => i,
                    (None, None, Some(i)) => {
                        preferred.remove(tp);
                        i
                    }
                    (None, None, None) => choose_dir(&counts)?,
                };
                if let Some(c) = counts[i].as_mut() {
                    *c += 1;
                }
                Some(dirs[i].path.join(name))
            })
            .collect()
    }

    /// Tells the controller where replicas are kept (AssignReplicasToDirs)
    /// when it records otherwise: queued, and sent by one task at a time
    /// (retried while the controller cannot be reached) until the queue is
    /// empty.
    fn send_dir_assignments(&self, assignments: Vec<DirAssignment>) {
        if assignments.is_empty() {
            return;
        }
        {
            let mut queue = self.assignments.lock();
            for a in assignments {
                queue
                    .0
                    .retain(|q| (q.topic_id, q.partition) != (a.topic_id, a.partition));
                queue.0.push(a);
            }
            if queue.1 {
                return;
            }
            queue.1 = true;
        }
        let (controller, me, epoch) = (self.controller.clone(), self.node_id(), self.broker_epoch);
        let queue = self.assignments.clone();
        self.runtime.spawn(async move {
            loop {
                let batch: Vec<DirAssignment> = {
                    let mut q = queue.lock();
                    if q.0.is_empty() {
                        q.1 = false;
                        return;
                    }
                    // One batch of records per request, within the
                    // controller's budget.
                    let n = q.0.len().min(500);
                    q.0.drain(..n).collect()
                };
                for attempt in 0..20 {
                    let results = controller
                        .assign_replicas_to_dirs(me, epoch, batch.clone())
                        .await;
                    let retry = results.iter().any(|r| {
                        r.as_ref().is_err_and(|e| {
                            matches!(
                                e.code,
                                ErrorCode::NotController | ErrorCode::RequestTimedOut
                            )
                        })
                    });
                    for (a, r) in batch.iter().zip(&results) {
                        if let Err(e) = r {
                            tracing::debug!(topic_id = %a.topic_id, partition = a.partition, error = %e.message, "AssignReplicasToDirs refused");
                        }
                    }
                    if !retry {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200 << attempt.min(4)))
                        .await;
                }
            }
        });
    }

    /// AlterReplicaLogDirs for one replica (Kafka's
    /// ReplicaManager.alterReplicaLogDirs): moves it to the log directory
    /// at `path`. LOG_DIR_NOT_FOUND for a path that is not one of
    /// `log.dirs`, KAFKA_STORAGE_ERROR when it (or any directory) is
    /// offline or the replica is, NOT_LEADER_OR_FOLLOWER when the replica
    /// is not hosted here, UNKNOWN_TOPIC_OR_PARTITION when the partition
    /// does not exist. A move to another directory replaces one in
    /// flight; a move to where the replica is already cancels it.
    pub fn alter_replica_log_dir(
        self: &Arc<Self>,
        topic: &str,
        index: i32,
        path: &str,
    ) -> Result<(), ErrorCode> {
        let canonical =
            |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let want = canonical(std::path::Path::new(path));
        let Some(dest) = self
            .log_dirs
            .all()
            .iter()
            .find(|d| canonical(&d.path) == want)
        else {
            return Err(ErrorCode::LogDirNotFound);
        };
        if dest.is_offline() {
            return Err(ErrorCode::KafkaStorageError);
        }
        let tp = TopicPartition::new(topic, index);
        if self.failed.lock().contains_key(&tp) {
            return Err(ErrorCode::KafkaStorageError);
        }
        let Some(part) = self.partition_by_key(&tp) else {
            // As Kafka's getPartitionOrException; a partition the cluster
            // has is created in `dest` when this broker gets a replica.
            return Err(match self.image().partition(topic, index) {
                Some(_) => {
                    self.preferred_dirs.lock().insert(tp, dest.id);
                    ErrorCode::NotLeaderOrFollower
                }
                None => ErrorCode::UnknownTopicOrPartition,
            });
        };
        self.preferred_dirs.lock().remove(&tp);
        let current = self.log_dirs.of_partition_dir(&part.dir()).map(|d| d.id);
        let mut moves = self.moves.lock();
        if let Some(m) = moves.get(&tp) {
            if m.dest == dest.id {
                return Ok(());
            }
            m.cancel();
            moves.remove(&tp);
        }
        if current == Some(dest.id) {
            return Ok(());
        }
        // As Kafka: no copy while a directory is offline, so a replica is
        // never copied into two directories at once.
        if self.log_dirs.all().iter().any(|d| d.is_offline()) {
            return Err(ErrorCode::KafkaStorageError);
        }
        let m = Arc::new(ReplicaMove::new(dest.id));
        moves.insert(tp.clone(), m.clone());
        drop(moves);
        tracing::info!(topic = %tp.topic, partition = tp.partition, to = %dest.path.display(), "moving the replica to another log directory");
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("alter-log-dirs".into())
            .spawn(move || me.run_move(tp, part, m));
        spawned
            .map(|_| ())
            .map_err(|_| ErrorCode::UnknownServerError)
    }

    /// Copies a replica to its new directory and swaps it in (see
    /// `strand_partition::move_dir`), then tells the controller.
    fn run_move(&self, tp: TopicPartition, part: Arc<Partition>, m: Arc<ReplicaMove>) {
        use strand_partition::move_dir::SwapError;
        let Some(dest) = self.log_dirs.by_id(m.dest) else {
            return;
        };
        let outcome = (|| -> Result<bool, String> {
            let mut future = part.open_future(&dest.path).map_err(|e| e.to_string())?;
            future.report_failures_to(&dest.failures);
            loop {
                if m.is_cancelled() || part.is_closed() || dest.is_offline() {
                    delete_dir(future.dir());
                    return Ok(false);
                }
                self.wait_for_move_quota(&m);
                let quota = &self.throttles.alter_log_dirs;
                // Rounds of an eighth of a second's worth under a bound,
                // so that the rate holds evenly.
                let chunk = (quota.bound() / 8).clamp(4096, MOVE_CHUNK_BYTES as u64) as usize;
                let before = future.size_bytes();
                let caught_up = part
                    .copy_to_future(&mut future, chunk)
                    .map_err(|e| e.to_string());
                quota.record(
                    future.size_bytes().saturating_sub(before) as usize,
                    self.clock.now_ms(),
                );
                m.note(&future);
                if !caught_up.inspect_err(|_| delete_dir(future.dir()))? {
                    continue;
                }
                match part.swap_in_future(future) {
                    Ok(doomed) => {
                        if let Err(e) = std::fs::remove_dir_all(&doomed) {
                            tracing::warn!(dir = %doomed.display(), error = %e, "could not delete the moved replica's old directory");
                        }
                        return Ok(true);
                    }
                    Err(SwapError::Stale(f)) => future = *f,
                    Err(SwapError::Closed(f)) => {
                        delete_dir(f.dir());
                        return Ok(false);
                    }
                    Err(SwapError::Log(e)) => return Err(e.to_string()),
                }
            }
        })();
        {
            let mut moves = self.moves.lock();
            if moves.get(&tp).is_some_and(|x| Arc::ptr_eq(x, &m)) {
                moves.remove(&tp);
            }
        }
        match outcome {
            Ok(true) => {
                tracing::info!(topic = %tp.topic, partition = tp.partition, dir = %dest.path.display(), "replica moved to another log directory");
                self.send_dir_assignments(vec![DirAssignment {
                    topic_id: part.topic_id,
                    partition: tp.partition,
                    directory: dest.id,
                }]);
            }
            Ok(false) => {
                tracing::info!(topic = %tp.topic, partition = tp.partition, "replica move abandoned")
            }
            Err(e) => {
                tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "replica move failed")
            }
        }
    }

    /// Starts the moves a stop interrupted (see `finish_pending_deletes`),
    /// for the replicas hosted here; after the start-up reconciliation.
    pub fn resume_replica_moves(self: &Arc<Self>) {
        let pending: Vec<(TopicPartition, Uuid)> = self.preferred_dirs.lock().drain().collect();
        for (tp, dest) in pending {
            let Some(dir) = self.log_dirs.by_id(dest) else {
                continue;
            };
            if self.partition_by_key(&tp).is_none() {
                // Not hosted yet: it is created there when it is.
                self.preferred_dirs.lock().insert(tp, dest);
                continue;
            }
            tracing::info!(topic = %tp.topic, partition = tp.partition, to = %dir.path.display(), "resuming a replica move a stop interrupted");
            let path = dir.path.to_string_lossy().into_owned();
            if let Err(e) = self.alter_replica_log_dir(&tp.topic, tp.partition, &path) {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, error = ?e, "could not resume the replica move");
            }
        }
    }

    /// Holds a move's copy within `replica.alter.log.dirs.io.max.bytes.per.second`
    /// (the move's own thread waits; a cancelled move stops waiting).
    fn wait_for_move_quota(&self, m: &ReplicaMove) {
        let quota = &self.throttles.alter_log_dirs;
        loop {
            let wait = quota.wait_ms(self.clock.now_ms());
            if wait == 0 || m.is_cancelled() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(wait.min(100)));
        }
    }

    /// Replicas assigned here that are offline (failed to open, or in a
    /// failed log directory).
    pub fn offline_replica_count(&self) -> usize {
        self.failed.lock().len()
    }

    /// The moves in flight: (partition, its move).
    pub fn replica_moves(&self) -> Vec<(TopicPartition, Arc<ReplicaMove>)> {
        self.moves
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The listeners whose key and trust stores may change at runtime (the
    /// binary's TLS listeners), taken up from the image at once.
    pub fn install_tls_listeners(&self, listeners: Vec<(String, Arc<ListenerSecurity>)>) {
        let _ = self.tls_listeners.set(listeners);
        self.refresh_tls(&self.image());
    }

    /// This broker's dynamic `listener.name.<listener>.ssl.*` settings.
    fn dynamic_tls(&self, image: &MetadataImage) -> BTreeMap<String, String> {
        image
            .broker_configs
            .get(&self.node_id().to_string())
            .map(|c| {
                c.iter()
                    .filter(|(k, _)| strand_metadata::configs::listener_tls_key(k).is_some())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Serves new TLS connections with the key and trust stores the image
    /// now names (Kafka's dynamic SSL reconfiguration); a store that does
    /// not load leaves the listener on its current one, and says why.
    fn refresh_tls(&self, image: &MetadataImage) {
        let Some(listeners) = self.tls_listeners.get() else {
            return;
        };
        let dynamic = self.dynamic_tls(image);
        let mut applied = self.tls_applied.lock();
        if *applied == dynamic {
            return;
        }
        for (name, security) in listeners.iter().filter(|(_, s)| s.tls.is_some()) {
            match ListenerSecurity::tls_config_with(&self.config, name, &dynamic) {
                Ok(tls) => {
                    security.replace_tls(tls);
                    tracing::info!(listener = %name, "TLS key and trust stores reloaded");
                }
                Err(e) => {
                    tracing::error!(listener = %name, error = %e, "the new TLS settings do not load; the listener keeps its current ones")
                }
            }
        }
        *applied = dynamic;
    }

    /// Whether every TLS listener would load its stores after `ops` on
    /// this broker's dynamic configs: the reason one would not.
    pub fn check_tls_change(&self, ops: &[(String, ConfigOp)]) -> Result<(), String> {
        let Some(listeners) = self.tls_listeners.get() else {
            return Ok(());
        };
        if !ops
            .iter()
            .any(|(k, _)| strand_metadata::configs::listener_tls_key(k).is_some())
        {
            return Ok(());
        }
        let mut dynamic = self.dynamic_tls(&self.image());
        for (k, op) in ops {
            match op {
                ConfigOp::Set(v) => {
                    dynamic.insert(k.clone(), v.clone());
                }
                ConfigOp::Delete => {
                    dynamic.remove(k);
                }
                ConfigOp::Append(_) | ConfigOp::Subtract(_) => {}
            }
        }
        for (name, _) in listeners.iter().filter(|(_, s)| s.tls.is_some()) {
            ListenerSecurity::tls_config_with(&self.config, name, &dynamic)?;
        }
        Ok(())
    }

    /// Tells the listeners of the partition's topic it is gone from here.
    fn forget_in_listeners(&self, tp: &TopicPartition) {
        for l in self
            .listeners
            .read()
            .iter()
            .filter(|l| l.topic() == &*tp.topic)
        {
            l.forget_partition(tp.partition);
        }
    }

    /// A log directory failed (not the metadata one, not the last): its
    /// partitions stop here (they answer KAFKA_STORAGE_ERROR, waiting
    /// produces wake, the coordinators unload them, their fetchers stop)
    /// and the next heartbeat reports the directory, so the controller
    /// moves their leaderships and ISR places. The other directories keep
    /// serving (Kafka's ReplicaManager.handleLogDirFailure).
    pub fn handle_log_dir_failure(&self, dir: &LogDir) {
        let me = self.node_id();
        let image = self.image();
        let gone: Vec<(TopicPartition, Arc<Partition>)> = {
            let _guard = self.reconcile_lock.lock();
            let mut map = self.partitions.write();
            let keys: Vec<TopicPartition> = map
                .iter()
                .filter(|(_, p)| p.dir().parent() == Some(&dir.path))
                .map(|(k, _)| k.clone())
                .collect();
            let gone: Vec<_> = keys
                .into_iter()
                .filter_map(|k| map.remove(&k).map(|p| (k, p)))
                .collect();
            drop(map);
            let mut failed = self.failed.lock();
            for (tp, part) in &gone {
                failed.insert(tp.clone(), part.topic_id);
            }
            gone
        };
        for (tp, part) in &gone {
            self.forget_in_listeners(tp);
            part.mark_deleted();
        }
        tracing::error!(dir = %dir.path.display(), partitions = gone.len(), "log directory offline: its partitions stopped here; the others keep serving");
        // Replicas the controller has no directory for yet are named, so
        // it takes them offline too.
        let unrecorded: Vec<DirAssignment> = gone
            .iter()
            .filter(|(tp, _)| {
                image
                    .partition(&tp.topic, tp.partition)
                    .is_some_and(|p| p.directory_of(me).is_nil())
            })
            .map(|(tp, part)| DirAssignment {
                topic_id: part.topic_id,
                partition: tp.partition,
                directory: dir.id,
            })
            .collect();
        if !dir.id.is_nil() {
            self.send_dir_assignments(unrecorded);
        }
        self.reconcile();
        self.log_dirs.changed.notify_one();
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.partition_by_key(&TopicPartition::new(topic, index))
    }

    fn partition_by_key(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.read().get(tp).cloned()
    }

    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().cloned().collect()
    }

    /// Looks a partition up for a client request, with Kafka's error when absent.
    pub fn leader_partition(&self, topic: &str, index: i32) -> Result<Arc<Partition>, ErrorCode> {
        if self.log_dirs.is_fatal() {
            return Err(ErrorCode::KafkaStorageError);
        }
        if let Some(p) = self.partition(topic, index) {
            // Hosting a replica is not enough: only the leader serves clients.
            if !p.is_leader() {
                return Err(ErrorCode::NotLeaderOrFollower);
            }
            return Ok(p);
        }
        if self
            .failed
            .lock()
            .contains_key(&TopicPartition::new(topic, index))
        {
            // Its log could not be opened: offline here until a restart.
            return Err(ErrorCode::KafkaStorageError);
        }
        let image = self.image();
        match image.partition(topic, index) {
            // Known to the image but not open here yet: reconcile and retry.
            Some(p) if p.leader == Some(self.node_id()) => {
                self.reconcile();
                self.partition(topic, index)
                    .ok_or(ErrorCode::NotLeaderOrFollower)
            }
            Some(_) => Err(ErrorCode::NotLeaderOrFollower),
            None => Err(ErrorCode::UnknownTopicOrPartition),
        }
    }

    /// A replica this broker hosts, leader or follower, for a consumer's
    /// fetch from a follower (KIP-392), with the client's current leader
    /// epoch checked against the one this replica knows; otherwise
    /// [`ReplicaManager::leader_partition_at_epoch`]'s errors.
    pub fn replica_partition_at_epoch(
        &self,
        topic: &str,
        index: i32,
        current_leader_epoch: Option<LeaderEpoch>,
    ) -> Result<Arc<Partition>, ErrorCode> {
        if self.log_dirs.is_fatal() {
            return Err(ErrorCode::KafkaStorageError);
        }
        match self.partition(topic, index) {
            Some(p) => {
                p.check_leader_epoch(current_leader_epoch)?;
                Ok(p)
            }
            None => self.leader_partition_at_epoch(topic, index, current_leader_epoch),
        }
    }

    /// `leader_partition`, then the client's current leader epoch (KIP-320)
    /// checked against ours.
    pub fn leader_partition_at_epoch(
        &self,
        topic: &str,
        index: i32,
        current_leader_epoch: Option<LeaderEpoch>,
    ) -> Result<Arc<Partition>, ErrorCode> {
        let p = self.leader_partition(topic, index)?;
        p.check_leader_epoch(current_leader_epoch)?;
        Ok(p)
    }

    /// Opens partitions the image assigns to this node and removes those it no
    /// longer has (deleted topics); updates per-topic settings.
    ///
    /// Always works from the latest published image, taken under the lock, so
    /// an older image can never undo what a newer one did.
    ///
    /// Opening a topic's partitions creates files and syncs them (hundreds
    /// of partitions take seconds on a slow disk), and a second caller waits
    /// for the first: the work runs through [`disk::run`], never holding up
    /// an async worker's other tasks (heartbeats, followers' fetches).
    pub fn reconcile(&self) {
        crate::disk::run(|| self.reconcile_now())
    }

    fn reconcile_now(&self) {
        let started = std::time::Instant::now();
        let _guard = self.reconcile_lock.lock();
        if self.log_dirs.is_fatal() {
            // Nothing is opened, led or followed once the broker stops.
            return;
        }
        let image = self.image();
        let me = self.node_id();
        let hosted: BTreeMap<TopicPartition, Uuid> = self
            .partitions
            .read()
            .iter()
            .map(|(k, p)| (k.clone(), p.topic_id))
            .collect();
        let failed = self.failed.lock().clone();
        let me_name = me.to_string();
        let layers = BrokerLayers::of(&image, &me_name, &self.config.static_props);
        self.throttles.refresh(&image, &layers);
        self.refresh_tls(&image);
        let settings = |configs: &ConfigMap| partition_settings(&layers, configs);
        let changes = replica_plan::local_changes(&image, me, &hosted, &failed, &settings);

        for (tp, reason) in &changes.deletes {
            self.forget_in_listeners(tp);
            let Some(part) = self.partitions.write().remove(tp) else {
                continue;
            };
            part.mark_deleted();
            if !image.topics.contains_key(&*tp.topic) {
                self.metrics.remove_topic(&tp.topic);
            }
            tracing::info!(topic = %tp.topic, partition = tp.partition, ?reason, "deleting partition");
            delete_dir(&part.dir());
        }
        {
            let mut failed = self.failed.lock();
            for tp in &changes.forget_failed {
                failed.remove(tp);
            }
        }
        self.preferred_dirs
            .lock()
            .retain(|tp, _| image.partition(&tp.topic, tp.partition).is_some());
        // Opening is mostly waiting on the disk (directory creation, the
        // partition.metadata fsync): several at once overlap those waits
        // (each partition is its own state: no order among them matters),
        // so creating thousands of partitions takes seconds, not minutes.
        let homes = self.place(&image, &changes.opens);
        let mut opens = Vec::new();
        for (tp, home) in changes.opens.iter().zip(homes) {
            match home {
                Some(dir) => opens.push((tp.clone(), dir)),
                None => {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, "its log directory is offline; the replica is offline on this broker");
                    self.failed
                        .lock()
                        .insert(tp.clone(), changes.assigned[tp].topic_id);
                }
            }
        }
        // At start-up (log recovery), progress per log directory, as
        // Kafka's "Recovering ..." lines: each tenth of its partitions.
        let progress = (!self.recovered.load(std::sync::atomic::Ordering::Acquire))
            .then(|| LoadProgress::new(opens.iter().map(|(_, d)| d.as_path())));
        let opened = parallel_map(&opens, DISK_WORKERS, |(tp, dir)| {
            let _loaded = progress.as_ref().map(|p| p.loading(dir));
            let a = &changes.assigned[tp];
            let dir = dir.clone();
            // A directory left by an earlier topic of the same name is stale.
            if let Some(old) = read_partition_metadata(&dir) {
                if old != a.topic_id {
                    tracing::info!(dir = %dir.display(), "removing stale partition directory of a deleted topic");
                    delete_dir(&dir);
                }
            }
            let io = PartitionIo {
                storage: FileStorage::shared(),
                clock: self.clock.clone(),
                lease: self.lease.clone(),
            };
            Partition::open_in(
                io,
                &dir,
                &tp.topic,
                a.topic_id,
                tp.partition,
                a.replica.clone(),
                a.settings.clone(),
            )
            .map(|p| match self.log_dirs.of_partition_dir(&p.dir()) {
                Some(home) => p.report_failures_to(&home.failures),
                None => p,
            })
            .map(|p| match self.metrics.flush_listener() {
                Some(listener) => p.report_flushes_to(listener),
                None => p,
            })
            .map_err(|e| (dir, e))
        });
        if let Some(p) = progress {
            p.done();
        }
        self.recovered
            .store(true, std::sync::atomic::Ordering::Release);
        for ((tp, _), opened) in opens.iter().zip(opened) {
            match opened {
                Ok(p) => {
                    self.partitions.write().insert(tp.clone(), Arc::new(p));
                }
                Err((dir, e)) => {
                    tracing::error!(dir = %dir.display(), error = %e, "cannot open partition; it is offline on this broker");
                    self.failed
                        .lock()
                        .insert(tp.clone(), changes.assigned[tp].topic_id);
                }
            }
        }
        let opened_in = started.elapsed();
        // Lead or follow as the image says; followers fetch from their leader.
        let eligible = |r: BrokerId| image.is_active(r);
        // Becoming leader writes the leader-epoch checkpoint: in parallel too.
        let assigned: Vec<_> = changes.assigned.iter().collect();
        let followed = parallel_map(&assigned, DISK_WORKERS, |(tp, a)| {
            // None: failed to open, offline here.
            let part = self.partition_by_key(tp)?;
            part.update_settings(a.settings.clone());
            let config = self.leader_config(&a.settings);
            let following = part.apply_registration(a.replica.clone(), config, &eligible, me);
            match (following, a.role(me)) {
                (true, replica_plan::Role::Follower(leader)) => Some((leader, part)),
                _ => None,
            }
        });
        let mut follow: HashMap<BrokerId, Vec<Arc<Partition>>> = HashMap::new();
        for (leader, part) in followed.into_iter().flatten() {
            follow.entry(leader).or_default().push(part);
        }
        self.fetchers.update(follow);
        // The group and transaction coordinators follow leadership of
        // `__consumer_offsets` and `__transaction_state`.
        let listeners = self.listeners.read();
        for (tp, part) in self.partitions.read().iter() {
            for l in listeners.iter().filter(|l| l.topic() == &*tp.topic) {
                l.clone().on_partition(part);
            }
        }
        // Where each replica is kept, where the controller records otherwise.
        let wrong_dirs: Vec<DirAssignment> = self
            .partitions
            .read()
            .iter()
            .filter_map(|(tp, part)| {
                let actual = self.log_dirs.of_partition_dir(&part.dir())?.id;
                let recorded = image.partition(&tp.topic, tp.partition)?.directory_of(me);
                (!actual.is_nil() && actual != recorded).then(|| DirAssignment {
                    topic_id: part.topic_id,
                    partition: tp.partition,
                    directory: actual,
                })
            })
            .collect();
        self.send_dir_assignments(wrong_dirs);
        // Only now do the partitions reflect this image: what the
        // heartbeats may report as applied.
        self.lease.note_reconciled(image.applied);
        let total = started.elapsed();
        if total > std::time::Duration::from_millis(200) {
            tracing::info!(
                partitions = self.partitions.read().len(),
                opened_ms = opened_in.as_millis() as u64,
                total_ms = total.as_millis() as u64,
                "slow reconciliation with the image"
            );
        }
    }

    /// Adds a listener; it hears of every reconciliation from the next one.
    pub fn add_listener(&self, listener: Arc<dyn PartitionListener>) {
        self.listeners.write().push(listener);
    }

    /// What the online log directories hold, in `log.dirs` order.
    fn online_dir_entries(&self) -> impl Iterator<Item = std::fs::DirEntry> + '_ {
        self.log_dirs
            .online()
            .filter_map(|d| std::fs::read_dir(&d.path).ok())
            .flat_map(|e| e.flatten())
    }

    /// Removes partition directories on disk that the image does not know
    /// (a topic deleted while this node was down).
    pub fn remove_orphan_dirs(&self, image: &MetadataImage) {
        let entries = self.online_dir_entries();
        for entry in entries {
            let path = entry.path();
            let Some(id) = read_partition_metadata(&path) else {
                continue;
            };
            if image.topic_by_id(id).is_none() {
                tracing::info!(dir = %path.display(), "removing partition directory of a deleted topic");
                delete_dir(&path);
            }
        }
    }

    /// Finishes deletions a crash interrupted (directories renamed `*-delete`).
    pub fn finish_pending_deletes(&self) {
        use strand_partition::move_dir::FUTURE_SUFFIX;
        // Partition directories seen so far, by name: a second one of a
        // name is what a replica move left when it stopped between its two
        // renames (two whole, equal copies): the first listed is kept.
        let mut seen = std::collections::BTreeSet::new();
        let entries = self.online_dir_entries();
        for entry in entries {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let doomed = if name.ends_with(DELETE_SUFFIX) {
                Some("could not finish deleting")
            } else if let Some(stem) = name.strip_suffix(FUTURE_SUFFIX) {
                // A move the stop interrupted: it starts again from the
                // beginning (`resume_replica_moves`); the partial copy goes.
                let tp = stem.rsplit_once('-').and_then(|(topic, index)| {
                    Some(TopicPartition::new(topic, index.parse::<i32>().ok()?))
                });
                if let (Some(tp), Some(dir)) = (tp, self.log_dirs.of_partition_dir(&path)) {
                    self.preferred_dirs.lock().insert(tp, dir.id);
                }
                tracing::info!(dir = %path.display(), "removing the copy of an unfinished replica move; the move starts again");
                Some("could not remove an unfinished replica move")
            } else if read_partition_metadata(&path).is_some() && !seen.insert(name) {
                tracing::warn!(dir = %path.display(), "a second copy of a partition (a replica move stopped before its end); removing it");
                Some("could not remove a second copy of a partition")
            } else {
                None
            };
            if let Some(what) = doomed {
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    tracing::warn!(dir = %path.display(), error = %e, "{what}");
                }
            }
        }
    }

    /// Hands out a producer id from the current block, fetching a new block
    /// from the controller when it runs out.
    pub async fn next_producer_id(&self) -> Result<ProducerId, ErrorCode> {
        let mut block = self.producer_ids.lock().await;
        if block.0 >= block.1 {
            let (first, size) = self
                .controller
                .allocate_producer_ids(self.node_id(), Some(self.broker_epoch))
                .await
                .map_err(|e| e.code)?;
            let end = first
                .get()
                .checked_add(size)
                .ok_or(ErrorCode::UnknownServerError)?;
            *block = (first, ProducerId::new(end));
        }
        let id = block.0;
        block.0 = ProducerId::new(id.get() + 1);
        Ok(id)
    }

    /// Stops following: no fetched record is written any more.
    pub fn stop_fetchers(&self) {
        self.fetchers.shutdown();
    }

    /// Clean shutdown of every partition.
    pub fn shutdown(&self) {
        self.fetchers.shutdown();
        // Each close is a few fsyncs of its own files: in parallel, as opens.
        parallel_map(&self.all_partitions(), DISK_WORKERS, |p| {
            if let Err(e) = p.close() {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "clean close failed");
            }
        });
    }
}

/// Start-up progress: the partitions being opened in each log directory,
/// logged as each tenth of a directory's is done.
struct LoadProgress {
    /// (log directory, partitions to open there, opened so far).
    dirs: Vec<(PathBuf, usize, std::sync::atomic::AtomicUsize)>,
    started: std::time::Instant,
}

/// Counts one partition of a [`LoadProgress`] when dropped.
struct Loaded<'a>(&'a LoadProgress, usize);

impl LoadProgress {
    fn new<'a>(partition_dirs: impl Iterator<Item = &'a Path>) -> LoadProgress {
        let mut dirs: Vec<(PathBuf, usize, std::sync::atomic::AtomicUsize)> = Vec::new();
        for d in partition_dirs {
            let parent = d.parent().unwrap_or(d).to_path_buf();
            match dirs.iter_mut().find(|(p, _, _)| *p == parent) {
                Some(entry) => entry.1 += 1,
                None => dirs.push((parent, 1, Default::default())),
            }
        }
        for (dir, total, _) in &dirs {
            tracing::info!(dir = %dir.display(), partitions = total, "loading the partitions of a log directory (recovering logs not shut down cleanly)");
        }
        LoadProgress {
            dirs,
            started: std::time::Instant::now(),
        }
    }

    fn loading(&self, partition_dir: &Path) -> Option<Loaded<'_>> {
        let parent = partition_dir.parent()?;
        let i = self.dirs.iter().position(|(p, _, _)| p == parent)?;
        Some(Loaded(self, i))
    }

    fn done(self) {
        let total: usize = self.dirs.iter().map(|d| d.1).sum();
        tracing::info!(
            partitions = total,
            ms = self.started.elapsed().as_millis() as u64,
            "every log directory loaded"
        );
    }
}

impl Drop for Loaded<'_> {
    fn drop(&mut self) {
        let (dir, total, done) = &self.0.dirs[self.1];
        let n = done.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1;
        if n * 10 / total != (n - 1) * 10 / total {
            tracing::info!(
                dir = %dir.display(),
                "loaded {n} of {total} partitions ({}%)",
                n * 100 / total
            );
        }
    }
}

/// What one round of a replica move copies at most (Kafka's future
/// replica fetches `replica.fetch.max.bytes`, 1 MiB, at a time).
const MOVE_CHUNK_BYTES: usize = 1 << 20;

/// Partitions whose files are opened, closed or checkpointed at once: each
/// is mostly a wait on the disk (fsync), and the waits overlap.
pub(crate) const DISK_WORKERS: usize = 8;

/// `items.iter().map(f)` on up to `workers` threads (scoped: `f` may borrow),
/// results in the order of `items`. Few items run on the calling thread.
pub(crate) fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    const PER_WORKER_MIN: usize = 16;
    let workers = workers.min(items.len() / PER_WORKER_MIN).max(1);
    if workers == 1 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(workers);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(results) => results,
                // A panic in `f` is a bug; it is the caller's panic too.
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parallel_map_keeps_the_order_of_its_items() {
        for n in [0usize, 1, 15, 16, 17, 100, 1001] {
            let items: Vec<usize> = (0..n).collect();
            let threads = std::sync::Mutex::new(std::collections::HashSet::new());
            let out = super::parallel_map(&items, 8, |i| {
                threads.lock().unwrap().insert(std::thread::current().id());
                i * 3
            });
            assert_eq!(out, items.iter().map(|i| i * 3).collect::<Vec<_>>());
            let used = threads.lock().unwrap().len();
            assert!(
                used <= 8 && used <= (n / 16).max(1),
                "n {n}: {used} threads"
            );
        }
    }

    use super::*;

    /// Retention by time and size applies only where cleanup.policy includes
    /// delete (issue 12: it deleted committed consumer offsets).
    #[test]
    fn retention_only_where_the_policy_deletes() {
        let config = BrokerConfig::from_pairs(vec![
            ("log.retention.ms".into(), "3000".into()),
            ("log.retention.bytes".into(), "100".into()),
        ])
        .unwrap();
        for (policy, deletes) in [
            ("delete", true),
            ("compact", false),
            ("compact,delete", true),
            ("delete, compact", true),
        ] {
            let topic = BTreeMap::from([("cleanup.policy".to_string(), policy.to_string())]);
            let s = partition_settings(&BrokerLayers::static_only(&config.static_props), &topic);
            let expected = if deletes { (3000, 100) } else { (-1, -1) };
            assert_eq!(
                (s.log.retention_ms, s.log.retention_bytes),
                expected,
                "{policy}"
            );
            assert_eq!(s.compacted, policy.contains("compact"), "{policy}");
        }
    }
}

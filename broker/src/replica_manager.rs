//! The broker's replica manager: the partitions this node hosts, kept in line
//! with the metadata image (open, delete, lead or follow), the replica
//! fetchers, and the listeners (group and transaction coordinators) told
//! when an internal partition is led here or goes away.

use crate::config::BrokerConfig;
use crate::controller_link::ControllerLink;
use crate::replica_plan;
use crate::transport::Transport;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strand_log::cleaner::CleanerLogConfig;
use strand_log::storage::FileStorage;
use strand_log::LogConfig;
use strand_metadata::configs::{resolve_topic_config, topic_config, BrokerLayers};
use strand_metadata::controller_api::AlterPartitionRequest;
use strand_metadata::image::MetadataImage;
use strand_metadata::records::ConfigMap;
use strand_partition::lease::WriteLease;
use strand_protocol::ErrorCode;
use strand_replication::ack::{AckPolicy, AckSettings, DEFAULT_EVICTION_MS};
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
    let long = |name: &str, dflt: i64| get(name).parse::<i64>().unwrap_or(dflt);
    let policy = get("cleanup.policy");
    let policies = || policy.split(',').map(str::trim);
    // Time and size retention delete only where the policy includes delete:
    // a compact-only topic (`__consumer_offsets`, `__transaction_state`) keeps
    // every record until the log cleaner supersedes it, as in Kafka.
    let deletes = policies().any(|p| p == "delete");
    let log = LogConfig {
        segment_bytes: long("segment.bytes", 1 << 30).max(14) as u64,
        segment_ms: long("segment.ms", 604_800_000),
        retention_ms: if deletes {
            long("retention.ms", 604_800_000)
        } else {
            -1
        },
        retention_bytes: if deletes {
            long("retention.bytes", -1)
        } else {
            -1
        },
        index_interval_bytes: long("index.interval.bytes", 4096).max(0) as u64,
        segment_index_bytes: long("segment.index.bytes", 10 << 20).max(4) as u64,
        flush_interval_messages: long("flush.messages", i64::MAX).max(1) as u64,
        flush_interval_ms: long("flush.ms", i64::MAX),
    };
    PartitionSettings {
        log,
        max_message_bytes: long("max.message.bytes", 1048588).max(0) as usize,
        log_append_time: get("message.timestamp.type") == "LogAppendTime",
        min_insync_replicas: long("min.insync.replicas", 1) as i32,
        compacted: policies().any(|p| p == "compact"),
        cleaner: CleanerLogConfig {
            delete_retention_ms: long("delete.retention.ms", 86_400_000),
            min_compaction_lag_ms: long("min.compaction.lag.ms", 0),
            max_compaction_lag_ms: long("max.compaction.lag.ms", i64::MAX),
            min_cleanable_ratio: get("min.cleanable.dirty.ratio")
                .trim()
                .parse()
                .unwrap_or(0.5),
        },
        timestamp_before_max_ms: long("message.timestamp.before.max.ms", i64::MAX),
        timestamp_after_max_ms: long("message.timestamp.after.max.ms", 3_600_000),
        acks: AckSettings {
            policy: AckPolicy::from_config(
                &get("strand.acks.policy"),
                long("strand.acks.replicas", 2),
            ),
            durable: get("strand.acks.durable").eq_ignore_ascii_case("true"),
            downgrade: get("strand.acks.downgrade.enable").eq_ignore_ascii_case("true"),
            eviction_ms: long("strand.acks.eviction.ms", DEFAULT_EVICTION_MS).max(1),
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
    /// Set by the first failed write, fsync or checkpoint of any log.
    pub log_dir_failures: Arc<strand_partition::log_dir_failure::LogDirFailures>,
    /// ACL decisions (`authorizer.class.name`).
    pub authorizer: crate::authorizer::Authorizer,
    /// Client quotas' usage (`quota.window.*`; the quotas are the image's).
    pub quotas: crate::client_quotas::ClientQuotaManager,
    /// Replication throttles (`*.replication.throttled.*`), from the image.
    pub throttles: Arc<crate::replication_quota::ReplicationThrottles>,
}

impl ReplicaManager {
    pub fn new(
        config: Arc<BrokerConfig>,
        controller: ControllerLink,
        broker_epoch: BrokerEpoch,
        clock: Arc<dyn Clock>,
        transport: Arc<dyn Transport>,
        lease: Arc<WriteLease>,
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
        let fetchers = crate::replica_fetcher::ReplicaFetcherManager::new(
            config.clone(),
            controller.clone(),
            broker_epoch,
            transport.clone(),
            throttles.clone(),
            clock.clone(),
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
            log_dir_failures: strand_partition::log_dir_failure::LogDirFailures::new(),
            authorizer,
            quotas,
            throttles,
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
                    Err(e) => AlterPartitionResult::Err(e.code),
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

    fn log_dir(&self) -> &Path {
        &self.config.log_dirs[0]
    }

    fn partition_dir(&self, topic: &str, index: i32) -> PathBuf {
        self.log_dir().join(format!("{topic}-{index}"))
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
        if self.log_dir_failures.is_offline() {
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
        if self.log_dir_failures.is_offline() {
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
        if self.log_dir_failures.is_offline() {
            // Nothing is opened, led or followed on an offline directory.
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
        let settings = |configs: &ConfigMap| partition_settings(&layers, configs);
        let changes = replica_plan::local_changes(&image, me, &hosted, &failed, &settings);

        for (tp, reason) in &changes.deletes {
            for l in self
                .listeners
                .read()
                .iter()
                .filter(|l| l.topic() == &*tp.topic)
            {
                l.forget_partition(tp.partition);
            }
            let Some(part) = self.partitions.write().remove(tp) else {
                continue;
            };
            part.mark_deleted();
            tracing::info!(topic = %tp.topic, partition = tp.partition, ?reason, "deleting partition");
            delete_dir(&self.partition_dir(&tp.topic, tp.partition));
        }
        {
            let mut failed = self.failed.lock();
            for tp in &changes.forget_failed {
                failed.remove(tp);
            }
        }
        // Opening is mostly waiting on the disk (directory creation, the
        // partition.metadata fsync): several at once overlap those waits
        // (each partition is its own state: no order among them matters),
        // so creating thousands of partitions takes seconds, not minutes.
        let opened = parallel_map(&changes.opens, DISK_WORKERS, |tp| {
            let a = &changes.assigned[tp];
            let dir = self.partition_dir(&tp.topic, tp.partition);
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
            .map(|p| p.report_failures_to(&self.log_dir_failures))
            .map_err(|e| (dir, e))
        });
        for (tp, opened) in changes.opens.iter().zip(opened) {
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

    /// Removes partition directories on disk that the image does not know
    /// (a topic deleted while this node was down).
    pub fn remove_orphan_dirs(&self, image: &MetadataImage) {
        let Ok(entries) = std::fs::read_dir(self.log_dir()) else {
            return;
        };
        for entry in entries.flatten() {
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
        let Ok(entries) = std::fs::read_dir(self.log_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && path.to_string_lossy().ends_with(DELETE_SUFFIX) {
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    tracing::warn!(dir = %path.display(), error = %e, "could not finish deleting");
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

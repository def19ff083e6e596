//! The broker's replica manager: the partitions this node hosts, kept in line
//! with the metadata image, and the produce/fetch operations on them. Protocol
//! decisions (sequence checks, ack decision, HW advance) come from the
//! `strand-txn` and `strand-replication` rule functions; this module does the
//! I/O they decide on.

use crate::config::BrokerConfig;
use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use strand_controller::configs::{resolve_topic_config, topic_config};
use strand_controller::image::MetadataImage;
use strand_controller::ControllerHandle;
use strand_log::{LogConfig, LogError, PartitionLog};
use strand_protocol::batch::{validate_record_set, BatchError, BatchIter};
use strand_protocol::ErrorCode;
use strand_replication::rules::{self, Acks, PartitionAckState};
use strand_txn::{ProducerStateError, ProducerStateManager, SequenceCheck};
use tokio::sync::watch;
use uuid::Uuid;

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Per-topic settings a partition needs on its produce path.
#[derive(Debug, Clone)]
pub struct PartitionSettings {
    pub log: LogConfig,
    pub max_message_bytes: usize,
    pub log_append_time: bool,
    pub min_insync_replicas: i32,
    /// cleanup.policy includes compact: records must have keys.
    pub compacted: bool,
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
}

/// Offsets published on every change, so waiting produces and fetches
/// complete when the HW or LEO moves (never by polling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionOffsets {
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub log_start_offset: i64,
}

/// Leader-side replica state. On one node the ISR is this node alone.
#[derive(Debug, Clone)]
pub struct ReplicaState {
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader: i32,
}

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    pub log: RwLock<PartitionLog>,
    producers: Mutex<ProducerStateManager>,
    pub replica: Mutex<ReplicaState>,
    pub settings: RwLock<PartitionSettings>,
    offsets: watch::Sender<PartitionOffsets>,
    /// Base offset of the active segment when the last producer snapshot was taken.
    snapshot_segment: Mutex<Option<i64>>,
    /// Set (under the log write lock) when the partition is deleted or the
    /// broker shuts down: no append or housekeeping write may follow.
    closed: AtomicBool,
}

/// Outcome of appending one partition's records.
#[derive(Debug, Clone, Copy)]
pub struct AppendOutcome {
    pub base_offset: i64,
    /// Offset the HW must reach for acks=all (last offset + 1).
    pub required_offset: i64,
    pub log_append_time: i64,
    pub log_start_offset: i64,
}

/// Why a produce to one partition failed, with the message Kafka would give.
#[derive(Debug, Clone)]
pub struct PartitionError {
    pub code: ErrorCode,
    pub message: String,
    /// Per-record errors (index within the batch, message), as Produce v8+ reports them.
    pub record_errors: Vec<(i32, String)>,
}

impl PartitionError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        PartitionError {
            code,
            message: message.into(),
            record_errors: Vec::new(),
        }
    }
}

fn storage_error(e: LogError) -> PartitionError {
    tracing::error!(error = %e, "log I/O failed");
    match e {
        LogError::OffsetOutOfRange { .. } => {
            PartitionError::new(ErrorCode::OffsetOutOfRange, e.to_string())
        }
        _ => PartitionError::new(ErrorCode::KafkaStorageError, e.to_string()),
    }
}

impl Partition {
    fn open(
        dir: &Path,
        topic: &str,
        topic_id: Uuid,
        index: i32,
        replica: ReplicaState,
        settings: PartitionSettings,
    ) -> Result<Partition, LogError> {
        let log = PartitionLog::open(dir, settings.log.clone())?;
        write_partition_metadata(dir, topic_id)?;
        // Producer state: the latest snapshot, then every batch after it.
        let mut producers = None;
        let mut replay_from = log.log_start_offset();
        if let Some((offset, data)) = log.latest_producer_snapshot()? {
            match ProducerStateManager::from_snapshot(&data) {
                Ok(p) => {
                    producers = Some(p);
                    replay_from = offset;
                }
                Err(e) => {
                    tracing::warn!(topic, index, error = %e, "producer snapshot unreadable; rebuilding from the log")
                }
            }
        }
        let mut producers = producers.unwrap_or_default();
        for h in log.batch_headers_from(replay_from)? {
            if h.has_producer_id() {
                producers.record(&h, h.max_timestamp);
            }
        }
        // One replica: everything in the recovered log is on the whole ISR.
        let offsets = PartitionOffsets {
            high_watermark: log.log_end_offset(),
            log_end_offset: log.log_end_offset(),
            log_start_offset: log.log_start_offset(),
        };
        Ok(Partition {
            topic: topic.to_string(),
            topic_id,
            index,
            log: RwLock::new(log),
            producers: Mutex::new(producers),
            replica: Mutex::new(replica),
            settings: RwLock::new(settings),
            offsets: watch::channel(offsets).0,
            snapshot_segment: Mutex::new(None),
            closed: AtomicBool::new(false),
        })
    }

    pub fn offsets(&self) -> PartitionOffsets {
        *self.offsets.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<PartitionOffsets> {
        self.offsets.subscribe()
    }

    pub fn leader_epoch(&self) -> i32 {
        self.replica.lock().leader_epoch
    }

    /// Checks a client's current leader epoch against ours (KIP-320).
    pub fn check_leader_epoch(&self, client_epoch: i32) -> Result<(), ErrorCode> {
        let ours = self.leader_epoch();
        if client_epoch < 0 || client_epoch == ours {
            Ok(())
        } else if client_epoch < ours {
            Err(ErrorCode::FencedLeaderEpoch)
        } else {
            Err(ErrorCode::UnknownLeaderEpoch)
        }
    }

    /// Validates and appends one partition's record set as leader.
    pub fn append(
        &self,
        records: &Bytes,
        acks: Acks,
        produce_version: i16,
    ) -> Result<AppendOutcome, PartitionError> {
        let headers = validate_record_set(records).map_err(|e| match e {
            BatchError::UnsupportedMagic(_) => {
                PartitionError::new(ErrorCode::UnsupportedForMessageFormat, e.to_string())
            }
            _ => PartitionError::new(ErrorCode::CorruptMessage, e.to_string()),
        })?;
        let settings = self.settings.read().clone();
        check_client_batches(&headers, &settings, now_ms())?;
        if let Some(h) = headers
            .iter()
            .find(|h| h.total_size() > settings.max_message_bytes)
        {
            return Err(PartitionError::new(
                ErrorCode::MessageTooLarge,
                format!(
                    "The batch size {} is larger than the maximum allowed {}",
                    h.total_size(),
                    settings.max_message_bytes
                ),
            ));
        }
        if settings.compacted {
            check_keys_for_compaction(records, &self.topic, self.index)?;
        }
        if produce_version >= 3 && headers.len() != 1 {
            return Err(PartitionError::new(
                ErrorCode::InvalidRecord,
                "Produce requests v3+ must contain exactly one record batch per partition",
            ));
        }
        let (leader_epoch, isr_len, replica_count) = {
            let r = self.replica.lock();
            (r.leader_epoch, r.isr.len(), r.replicas.len())
        };
        let min_isr = rules::effective_min_isr(settings.min_insync_replicas, replica_count);
        rules::check_min_isr_before_append(acks, isr_len, min_isr).map_err(|code| {
            PartitionError::new(code, format!("The size of the current ISR {isr_len} is insufficient to satisfy the min.isr requirement of {min_isr}"))
        })?;

        let mut log = self.log.write();
        if self.closed.load(Ordering::Acquire) {
            return Err(PartitionError::new(
                ErrorCode::NotLeaderOrFollower,
                "partition is closed (deleted or shutting down)",
            ));
        }
        let mut producers = self.producers.lock();
        let first = &headers[0];
        if first.has_producer_id() {
            match producers.check(first) {
                Ok(SequenceCheck::Append) => {}
                Ok(SequenceCheck::Duplicate(meta)) => {
                    // Already appended: answer with the original offsets, append nothing.
                    return Ok(AppendOutcome {
                        base_offset: meta.first_offset,
                        required_offset: meta.last_offset + 1,
                        log_append_time: -1,
                        log_start_offset: log.log_start_offset(),
                    });
                }
                Err(e) => return Err(producer_error(e)),
            }
        }
        // One copy of the client's bytes so offsets and epoch can be written in place.
        let mut buf = BytesMut::from(&records[..]);
        let append_time = settings.log_append_time.then(now_ms);
        let info = log
            .append_as_leader(&mut buf, &headers, leader_epoch, append_time)
            .map_err(storage_error)?;
        for (_, h) in BatchIter::new(&buf) {
            if h.has_producer_id() {
                producers.record(&h, h.max_timestamp);
            }
        }
        drop(producers);
        let leo = log.log_end_offset();
        let log_start = log.log_start_offset();
        // Published under the log lock, so offsets are never overwritten by older ones.
        self.advance_high_watermark(leo, log_start, min_isr);
        drop(log);
        Ok(AppendOutcome {
            base_offset: info.first_offset,
            required_offset: info.last_offset + 1,
            log_append_time: append_time.unwrap_or(-1),
            log_start_offset: log_start,
        })
    }

    /// Applies the HW rule after the LEO moved and publishes the new offsets.
    fn advance_high_watermark(&self, leo: i64, log_start: i64, min_isr: usize) {
        self.offsets.send_modify(|o| {
            // The ISR is this node alone, so no follower LEOs bound the HW.
            o.high_watermark = rules::advance_high_watermark(o.high_watermark, leo, &[], min_isr);
            o.log_end_offset = leo;
            o.log_start_offset = log_start;
        });
    }

    /// The acks=all completion check for one appended partition (purgatory rule).
    pub fn ack_state(&self, required_offset: i64) -> PartitionAckState {
        let hw = self.offsets().high_watermark;
        let (isr_len, replicas) = {
            let r = self.replica.lock();
            (r.isr.len(), r.replicas.len())
        };
        let min_isr = rules::effective_min_isr(self.settings.read().min_insync_replicas, replicas);
        rules::produce_partition_state(hw, required_offset, isr_len, min_isr)
    }

    /// The highest offset a fetch may read to: HW, or the LSO under
    /// read_committed (no transactions yet, so LSO = HW).
    pub fn fetch_upper_bound(&self, _read_committed: bool) -> i64 {
        self.offsets().high_watermark
    }

    pub fn delete_records(&self, offset: i64) -> Result<i64, ErrorCode> {
        let hw = self.offsets().high_watermark;
        let target = if offset == -1 { hw } else { offset };
        let mut log = self.log.write();
        if target < 0 || target > hw {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        if target <= log.log_start_offset() {
            return Ok(log.log_start_offset());
        }
        let start = log
            .delete_records_before(target)
            .map_err(|e| storage_error(e).code)?;
        self.offsets
            .send_modify(|o| o.log_start_offset = o.log_start_offset.max(start));
        Ok(start)
    }

    /// Background housekeeping: time-based roll and flush, producer-id
    /// expiry, a producer-state snapshot after each roll (so recovery replays
    /// at most about one segment), retention.
    pub fn housekeeping(&self, now: i64, retention: bool, producer_id_expiration_ms: i64) {
        let mut log = self.log.write();
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let res = log.maybe_roll(now).and_then(|_| log.maybe_flush(now));
        if let Err(e) = res {
            tracing::error!(topic = %self.topic, partition = self.index, error = %e, "roll/flush failed");
        }
        {
            let mut producers = self.producers.lock();
            producers.expire(now, producer_id_expiration_ms);
            let active_base = log.segment_base_offsets().last().copied().unwrap_or(0);
            let mut last = self.snapshot_segment.lock();
            if *last != Some(active_base) {
                let leo = log.log_end_offset();
                match log.write_producer_snapshot(leo, &producers.snapshot()) {
                    Ok(()) => *last = Some(active_base),
                    Err(e) => {
                        tracing::error!(topic = %self.topic, partition = self.index, error = %e, "producer snapshot failed")
                    }
                }
            }
        }
        if retention {
            match log.apply_retention(now) {
                Ok(n) if n > 0 => {
                    let start = log.log_start_offset();
                    self.offsets
                        .send_modify(|o| o.log_start_offset = o.log_start_offset.max(start));
                    drop(log);
                    tracing::info!(topic = %self.topic, partition = self.index, segments = n, "retention deleted segments");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(topic = %self.topic, partition = self.index, error = %e, "retention failed")
                }
            }
        }
    }

    /// Clean shutdown: producer snapshot at the LEO, HW checkpoint, flush.
    fn close(&self) -> Result<(), LogError> {
        let mut log = self.log.write();
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let leo = log.log_end_offset();
        let snapshot = self.producers.lock().snapshot();
        log.write_producer_snapshot(leo, &snapshot)?;
        log.checkpoint_high_watermark(self.offsets().high_watermark)?;
        log.flush()?;
        log.close_clean()
    }
}

impl Partition {
    /// Stops appends and housekeeping before the directory is deleted.
    fn mark_deleted(&self) {
        let _log = self.log.write();
        self.closed.store(true, Ordering::Release);
    }
}

/// Kafka's checks on batches written by clients (INVALID_RECORD /
/// INVALID_TIMESTAMP): no control batches, no transactional batches outside a
/// transactional produce, a producer id needs a sequence, and CreateTime
/// timestamps within message.timestamp.before/after.max.ms of the broker clock.
fn check_client_batches(
    headers: &[strand_protocol::batch::BatchHeader],
    settings: &PartitionSettings,
    now: i64,
) -> Result<(), PartitionError> {
    let invalid = |m: String| Err(PartitionError::new(ErrorCode::InvalidRecord, m));
    let timestamp = |m: String| Err(PartitionError::new(ErrorCode::InvalidTimestamp, m));
    for h in headers {
        if h.is_control() {
            return invalid("Clients are not allowed to write control records".into());
        }
        if h.is_transactional() {
            return invalid("Transactional records need a transactional produce request".into());
        }
        if h.has_producer_id() && h.base_sequence < 0 {
            return invalid(format!(
                "Invalid sequence {} for producer {}",
                h.base_sequence, h.producer_id
            ));
        }
        if settings.log_append_time || h.is_log_append_time() {
            continue;
        }
        if h.max_timestamp > now.saturating_add(settings.timestamp_after_max_ms) {
            return timestamp(format!("Timestamp {} is after the broker's time {now} by more than message.timestamp.after.max.ms", h.max_timestamp));
        }
        if h.base_timestamp >= 0
            && h.base_timestamp < now.saturating_sub(settings.timestamp_before_max_ms)
        {
            return timestamp(format!("Timestamp {} is before the broker's time {now} by more than message.timestamp.before.max.ms", h.base_timestamp));
        }
    }
    Ok(())
}

/// Compacted topics need a key on every record (INVALID_RECORD otherwise).
fn check_keys_for_compaction(
    records: &[u8],
    topic: &str,
    index: i32,
) -> Result<(), PartitionError> {
    let keyless = strand_protocol::batch::keyless_record_indexes(records)
        .map_err(|e| PartitionError::new(ErrorCode::CorruptMessage, e))?;
    if keyless.is_empty() {
        return Ok(());
    }
    let message = format!(
        "Compacted topic cannot accept message without key in topic partition {topic}-{index}."
    );
    let mut err = PartitionError::new(ErrorCode::InvalidRecord, message.clone());
    err.record_errors = keyless.into_iter().map(|i| (i, message.clone())).collect();
    Err(err)
}

fn producer_error(e: ProducerStateError) -> PartitionError {
    PartitionError::new(e.error_code(), e.to_string())
}

fn write_partition_metadata(dir: &Path, topic_id: Uuid) -> Result<(), LogError> {
    let path = dir.join("partition.metadata");
    let text = format!("version: 0\ntopic_id: {topic_id}\n");
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return Ok(());
    }
    let tmp = dir.join("partition.metadata.tmp");
    std::fs::write(&tmp, &text)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

const DELETE_SUFFIX: &str = "-delete";

/// Deletes a partition directory the way Kafka does: first an atomic rename
/// out of the `<topic>-<partition>` namespace (so a crash never leaves a half
/// deleted directory that a recreated topic would adopt), then the removal.
fn delete_dir(dir: &Path) {
    let doomed = PathBuf::from(format!(
        "{}.{}{DELETE_SUFFIX}",
        dir.display(),
        Uuid::new_v4().simple()
    ));
    if let Err(e) = std::fs::rename(dir, &doomed) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "could not rename partition directory for deletion");
        }
        return;
    }
    if let Some(parent) = dir.parent() {
        let _ = std::fs::File::open(parent).and_then(|f| f.sync_all());
    }
    if let Err(e) = std::fs::remove_dir_all(&doomed) {
        tracing::warn!(dir = %doomed.display(), error = %e, "could not delete partition directory");
    }
}

fn read_partition_metadata(dir: &Path) -> Option<Uuid> {
    let text = std::fs::read_to_string(dir.join("partition.metadata")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|s| s.trim().parse().ok())
}

/// Derives a partition's settings from its topic's configs and the broker's static config.
pub fn partition_settings(
    config: &BrokerConfig,
    topic_configs: &BTreeMap<String, String>,
) -> PartitionSettings {
    let get = |name: &str| -> String {
        let d = topic_config(name).expect("known topic config");
        resolve_topic_config(d, topic_configs, &config.static_props)
            .0
            .to_string()
    };
    let long = |name: &str, dflt: i64| get(name).parse::<i64>().unwrap_or(dflt);
    let log = LogConfig {
        segment_bytes: long("segment.bytes", 1 << 30).max(14) as u64,
        segment_ms: long("segment.ms", 604_800_000),
        retention_ms: long("retention.ms", 604_800_000),
        retention_bytes: long("retention.bytes", -1),
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
        compacted: get("cleanup.policy")
            .split(',')
            .any(|p| p.trim() == "compact"),
        timestamp_before_max_ms: long("message.timestamp.before.max.ms", i64::MAX),
        timestamp_after_max_ms: long("message.timestamp.after.max.ms", i64::MAX),
    }
}

type PartitionKey = (String, i32);

pub struct Broker {
    pub config: Arc<BrokerConfig>,
    pub controller: ControllerHandle,
    partitions: RwLock<HashMap<PartitionKey, Arc<Partition>>>,
    /// Serialises reconciliation with the metadata image.
    reconcile_lock: Mutex<()>,
    /// Partitions whose log could not be opened, with the topic id tried.
    failed: Mutex<HashMap<PartitionKey, Uuid>>,
    /// This broker's registration epoch (fences stale producer-id requests).
    broker_epoch: i64,
    /// The current producer id block: (next id, end exclusive).
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
}

impl Broker {
    pub fn new(
        config: Arc<BrokerConfig>,
        controller: ControllerHandle,
        broker_epoch: i64,
    ) -> Broker {
        Broker {
            config,
            controller,
            partitions: RwLock::new(HashMap::new()),
            reconcile_lock: Mutex::new(()),
            failed: Mutex::new(HashMap::new()),
            broker_epoch,
            producer_ids: tokio::sync::Mutex::new((0, 0)),
        }
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.controller.image()
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    fn log_dir(&self) -> &Path {
        &self.config.log_dirs[0]
    }

    fn partition_dir(&self, topic: &str, index: i32) -> PathBuf {
        self.log_dir().join(format!("{topic}-{index}"))
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .get(&(topic.to_string(), index))
            .cloned()
    }

    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().cloned().collect()
    }

    /// Looks a partition up for a client request, with Kafka's error when absent.
    pub fn leader_partition(&self, topic: &str, index: i32) -> Result<Arc<Partition>, ErrorCode> {
        if let Some(p) = self.partition(topic, index) {
            // Hosting a replica is not enough: only the leader serves clients.
            if p.replica.lock().leader != self.node_id() {
                return Err(ErrorCode::NotLeaderOrFollower);
            }
            return Ok(p);
        }
        let key = (topic.to_string(), index);
        if self.failed.lock().contains_key(&key) {
            // Its log could not be opened: offline here until a restart.
            return Err(ErrorCode::KafkaStorageError);
        }
        let image = self.image();
        match image.partition(topic, index) {
            // Known to the image but not open here yet: reconcile and retry.
            Some(p) if p.leader == self.node_id() => {
                self.reconcile();
                self.partition(topic, index)
                    .ok_or(ErrorCode::NotLeaderOrFollower)
            }
            Some(_) => Err(ErrorCode::NotLeaderOrFollower),
            None => Err(ErrorCode::UnknownTopicOrPartition),
        }
    }

    /// `leader_partition`, then the client's current leader epoch (KIP-320)
    /// checked against ours.
    pub fn leader_partition_at_epoch(
        &self,
        topic: &str,
        index: i32,
        current_leader_epoch: i32,
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
    pub fn reconcile(&self) {
        let _guard = self.reconcile_lock.lock();
        let image = self.image();
        let me = self.node_id();
        let mut wanted: HashMap<PartitionKey, (Uuid, ReplicaState, PartitionSettings)> =
            HashMap::new();
        for (name, topic) in &image.topics {
            let settings = partition_settings(&self.config, &topic.configs);
            for p in &topic.partitions {
                if p.replicas.contains(&me) {
                    let replica = ReplicaState {
                        leader_epoch: p.leader_epoch,
                        replicas: p.replicas.clone(),
                        isr: p.isr.clone(),
                        leader: p.leader,
                    };
                    wanted.insert(
                        (name.clone(), p.partition),
                        (topic.topic_id, replica, settings.clone()),
                    );
                }
            }
        }
        let current: Vec<(PartitionKey, Arc<Partition>)> = self
            .partitions
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, part) in current {
            match wanted.get(&key) {
                Some((id, replica, settings)) if *id == part.topic_id => {
                    *part.replica.lock() = replica.clone();
                    let changed = {
                        let mut s = part.settings.write();
                        let changed = format!("{:?}", s.log) != format!("{:?}", settings.log);
                        *s = settings.clone();
                        changed
                    };
                    if changed {
                        part.log.write().set_config(settings.log.clone());
                    }
                }
                _ => {
                    self.partitions.write().remove(&key);
                    part.mark_deleted();
                    tracing::info!(topic = %key.0, partition = key.1, "deleting partition");
                    delete_dir(&self.partition_dir(&key.0, key.1));
                }
            }
        }
        self.failed
            .lock()
            .retain(|key, id| wanted.get(key).is_some_and(|w| w.0 == *id));
        for (key, (id, replica, settings)) in wanted {
            if self.partitions.read().contains_key(&key)
                || self.failed.lock().get(&key) == Some(&id)
            {
                continue;
            }
            let dir = self.partition_dir(&key.0, key.1);
            // A directory left by an earlier topic of the same name is stale.
            if let Some(old) = read_partition_metadata(&dir) {
                if old != id {
                    tracing::info!(dir = %dir.display(), "removing stale partition directory of a deleted topic");
                    delete_dir(&dir);
                }
            }
            match Partition::open(&dir, &key.0, id, key.1, replica, settings) {
                Ok(p) => {
                    self.partitions.write().insert(key, Arc::new(p));
                }
                Err(e) => {
                    tracing::error!(dir = %dir.display(), error = %e, "cannot open partition; it is offline on this broker");
                    self.failed.lock().insert(key, id);
                }
            }
        }
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
    pub async fn next_producer_id(&self) -> Result<i64, ErrorCode> {
        let mut block = self.producer_ids.lock().await;
        if block.0 >= block.1 {
            let (first, size) = self
                .controller
                .allocate_producer_ids(self.node_id(), Some(self.broker_epoch))
                .await
                .map_err(|e| e.code)?;
            *block = (first, first + size);
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }

    /// Clean shutdown of every partition.
    pub fn shutdown(&self) {
        for p in self.all_partitions() {
            if let Err(e) = p.close() {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "clean close failed");
            }
        }
    }
}

//! One partition replica on this broker: its log, idempotent-producer
//! state, aborted-transaction index and leader state, and the append, read
//! and truncate operations on them. Protocol decisions come from the
//! `strand-txn` and `strand-replication` rule functions; this module does
//! the I/O they decide on. It knows nothing of the broker around it.
//!
//! [`log_dir_failure`] is Kafka's LogDirFailureChannel: the first failed
//! write of any log takes the directory offline.

// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod lease;
pub mod log_dir_failure;
pub mod move_dir;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use strand_log::cleaner::{
    self, CleanError, CleanStats, Cleanable, CleanerLogConfig, CleanerResources, LastRecord,
    PassInputs, Urgency,
};
use strand_log::storage::{FileStorage, Storage};
use strand_log::{AbortedTxn, LogConfig, LogError, PartitionLog};
use strand_protocol::batch::{
    build_txn_marker_batch, end_txn_marker, validate_batch_framing, validate_record_set,
    BatchError, BatchHeader, ControlType, EndTxnMarker,
};
use strand_protocol::transcode::{
    needs_transcode, transcode_batch, TopicCompression, TranscodeError,
};
use strand_protocol::ErrorCode;
use strand_replication::ack::{AckPolicy, AckSettings, ReplicationDecision};
use strand_replication::leader::{
    AlterOutcome, AlterPartitionResult, IsrProposal, LeaderConfig, LeaderState, MetadataOutcome,
    PartitionRegistration,
};
use strand_replication::rules::{self, Acks, DivergingEpoch};
use strand_txn::{
    CompletedTxn, ProducerEntry, ProducerStateError, ProducerStateManager, SequenceCheck,
    VerificationGuard,
};
use strand_types::{
    BrokerEpoch, BrokerId, Clock, LeaderEpoch, Offset, PartitionEpoch, ProducerEpoch, ProducerId,
    SystemClock,
};
use tokio::sync::watch;
use uuid::Uuid;

/// The seams a partition does its I/O through: the storage its log lives
/// on and the clock its time-based decisions read, and the broker's write
/// lease its leader appends ask first.
#[derive(Clone)]
pub struct PartitionIo {
    pub storage: Arc<dyn Storage>,
    pub clock: Arc<dyn Clock>,
    pub lease: Arc<lease::WriteLease>,
}

/// Per-topic settings a partition needs on its produce path.
#[derive(Debug, Clone)]
pub struct PartitionSettings {
    pub log: LogConfig,
    pub max_message_bytes: usize,
    pub log_append_time: bool,
    pub min_insync_replicas: i32,
    /// cleanup.policy includes compact: records must have keys, and the log
    /// cleaner compacts the log.
    pub compacted: bool,
    /// The log cleaner's topic settings (used where `compacted`).
    pub cleaner: CleanerLogConfig,
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
    /// `strand.acks.*`: how acks=all is proven.
    pub acks: AckSettings,
    /// `compression.type` and its level: the codec client batches are
    /// stored with (`None`: each keeps its producer's).
    pub compression: Option<TopicCompression>,
}

/// Offsets published on every change, so waiting produces and fetches
/// complete when the HW or LEO moves or leadership changes (never by polling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionOffsets {
    pub high_watermark: Offset,
    /// min(HW, first offset of every unstable transaction): what
    /// read_committed readers may see. Published with the HW, so a waiting
    /// read_committed fetch wakes when it moves.
    pub last_stable_offset: Offset,
    pub log_end_offset: Offset,
    pub log_start_offset: Offset,
    /// The leader epoch this broker leads under; `None` while it follows.
    pub leading_epoch: Option<LeaderEpoch>,
    /// The partition epoch the leader's ISR is at (wakes waiters on ISR changes).
    pub partition_epoch: Option<PartitionEpoch>,
    /// Moves whenever a replica's fsynced offset does (the leader's own
    /// flush, a follower's report): wakes acknowledgements that wait on
    /// durability.
    pub durable_progress: u64,
}

/// The partition as the metadata image last described it.
#[derive(Debug, Clone)]
pub struct ReplicaState {
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    /// `None` while the partition has no leader.
    pub leader: Option<BrokerId>,
    /// The metadata offset (records applied) of the image this state was
    /// read from: where a leadership taken up from it begins, for the
    /// write lease.
    pub metadata_offset: u64,
}

impl ReplicaState {
    fn registration(&self, leader: BrokerId) -> PartitionRegistration {
        PartitionRegistration {
            leader,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            replicas: self.replicas.clone(),
            isr: self.isr.clone(),
        }
    }
}

/// What a follower's fetch for one partition carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerFetchState {
    /// Our LEO.
    pub fetch_offset: Offset,
    /// The epoch of our last batch (KIP-320's LastFetchedEpoch); `None`
    /// for an empty log.
    pub last_fetched_epoch: Option<LeaderEpoch>,
    pub log_start_offset: Offset,
    /// The leader epoch we follow.
    pub leader_epoch: LeaderEpoch,
    /// What we have fsynced (our recovery point): reported to the leader
    /// for durable acknowledgements.
    pub durable_offset: Offset,
}

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    /// The partition's directory (`<log dir>/<topic>-<index>`); another
    /// log directory's once a move (`move_dir`) swaps its log.
    dir: RwLock<PathBuf>,
    log: RwLock<PartitionLog>,
    producers: Mutex<ProducerStateManager>,
    replica: Mutex<ReplicaState>,
    /// Present while this broker leads the partition: follower progress, ISR,
    /// HW. Lock order: `leader` before `log`, so an append and a leadership
    /// change never interleave (a stale epoch never authorises a write).
    leader: Mutex<Option<LeaderState>>,
    settings: RwLock<PartitionSettings>,
    offsets: watch::Sender<PartitionOffsets>,
    /// Base offset of the active segment when the last producer snapshot was taken.
    snapshot_segment: Mutex<Option<Offset>>,
    /// Set (under the log write lock) when the partition is deleted or the
    /// broker shuts down: no append or housekeeping write may follow.
    closed: AtomicBool,
    /// What time-based decisions (ISR lag, timestamps checks) read.
    clock: Arc<dyn Clock>,
    /// The broker's write lease: asked before every leader append.
    lease: Arc<lease::WriteLease>,
    /// The metadata offset at which this broker took up its current
    /// leadership (0 for a partition led since its creation); written
    /// under the leader lock.
    leadership_offset: AtomicU64,
}

/// Who wrote a record set: clients are sequence-checked, coordinators not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    Client,
    Coordinator,
}

/// Outcome of appending one partition's records.
#[derive(Debug, Clone, Copy)]
pub struct AppendOutcome {
    pub base_offset: Offset,
    /// Offset the HW must reach for acks=all (last offset + 1).
    pub required_offset: Offset,
    /// The leader epoch that authorised the append.
    pub leader_epoch: LeaderEpoch,
    /// The broker's append time when the topic uses LogAppendTime.
    pub log_append_time: Option<i64>,
    pub log_start_offset: Offset,
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
    pub fn report_failures_to(
        self,
        failures: &Arc<crate::log_dir_failure::LogDirFailures>,
    ) -> Self {
        let mut log = self.log.write();
        log.set_failure_listener(failures.listener());
        log.set_dir_offline_flag(failures.offline_flag());
        drop(log);
        self
    }

    /// Tells `listener` how long each flush of this partition's log takes.
    pub fn report_flushes_to(self, listener: strand_log::FlushListener) -> Self {
        self.log.write().set_flush_listener(Some(listener));
        self
    }

    pub fn open(
        dir: &Path,
        topic: &str,
        topic_id: Uuid,
        index: i32,
        replica: ReplicaState,
        settings: PartitionSettings,
    ) -> Result<Partition, LogError> {
        let io = PartitionIo {
            storage: FileStorage::shared(),
            clock: SystemClock::shared(),
            lease: Arc::new(lease::WriteLease::unenforced()),
        };
        Self::open_in(io, dir, topic, topic_id, index, replica, settings)
    }

    /// [`Partition::open`] on the given storage (in memory for tests and
    /// the simulation).
    pub fn open_in(
        io: PartitionIo,
        dir: &Path,
        topic: &str,
        topic_id: Uuid,
        index: i32,
        replica: ReplicaState,
        settings: PartitionSettings,
    ) -> Result<Partition, LogError> {
        let PartitionIo {
            storage,
            clock,
            lease,
        } = io;
        let mut log =
            PartitionLog::open_in(storage.clone(), clock.clone(), dir, settings.log.clone())?;
        write_partition_metadata(&*storage, dir, topic_id)?;
        let mut producers = rebuild_producer_state(&mut log);
        // The checkpointed HW until a leader says more (a leader of a
        // single-member ISR moves it to the LEO at once).
        let hw = log.high_watermark_checkpoint().min(log.log_end_offset());
        producers.on_high_watermark(hw);
        let offsets = PartitionOffsets {
            high_watermark: hw,
            last_stable_offset: producers.last_stable_offset(hw),
            log_end_offset: log.log_end_offset(),
            log_start_offset: log.log_start_offset(),
            leading_epoch: None,
            partition_epoch: None,
            durable_progress: 0,
        };
        Ok(Partition {
            topic: topic.to_string(),
            topic_id,
            index,
            dir: RwLock::new(dir.to_path_buf()),
            log: RwLock::new(log),
            producers: Mutex::new(producers),
            replica: Mutex::new(replica),
            leader: Mutex::new(None),
            settings: RwLock::new(settings),
            offsets: watch::channel(offsets).0,
            snapshot_segment: Mutex::new(None),
            closed: AtomicBool::new(false),
            clock,
            lease,
            leadership_offset: AtomicU64::new(0),
        })
    }

    /// Now on this partition's clock (the one its log stamps batches and
    /// times rolls with).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn offsets(&self) -> PartitionOffsets {
        *self.offsets.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<PartitionOffsets> {
        self.offsets.subscribe()
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.replica.lock().leader_epoch
    }

    /// True while this broker leads the partition.
    pub fn is_leader(&self) -> bool {
        self.leader.lock().is_some()
    }

    /// Checks a client's current leader epoch against ours (KIP-320);
    /// `None` (-1 on the wire) skips the check.
    pub fn check_leader_epoch(&self, client_epoch: Option<LeaderEpoch>) -> Result<(), ErrorCode> {
        rules::check_request_leader_epoch(client_epoch, self.leader_epoch())
    }

    /// Publishes offsets; waiters wake only if something changed. The LSO is
    /// derived here, under the producer-state lock, after completed
    /// transactions the HW has passed are pruned: every change of the HW or
    /// of producer state is followed by a publish, so the published LSO is
    /// always current. Callers must not hold the producer-state lock (order:
    /// leader, log, producers).
    fn publish(&self, hw: Offset, leo: Offset, log_start: Offset, leader: Option<&LeaderState>) {
        let lso = {
            let mut producers = self.producers.lock();
            producers.on_high_watermark(hw);
            producers.last_stable_offset(hw)
        };
        self.offsets.send_if_modified(|o| {
            let next = PartitionOffsets {
                high_watermark: hw,
                last_stable_offset: lso,
                log_end_offset: leo,
                log_start_offset: log_start,
                leading_epoch: leader.map(LeaderState::leader_epoch),
                partition_epoch: leader.map(LeaderState::partition_epoch),
                durable_progress: o.durable_progress,
            };
            let changed = *o != next;
            *o = next;
            changed
        });
    }

    fn publish_leader(&self, state: &LeaderState, log: &PartitionLog) {
        self.publish(
            state.hw(),
            log.log_end_offset(),
            log.log_start_offset(),
            Some(state),
        );
    }

    /// Applies the metadata image's view of this partition: become (or stay)
    /// leader, or follow. Returns true when this broker follows a live leader.
    pub fn apply_registration(
        &self,
        replica: ReplicaState,
        config: LeaderConfig,
        eligible: &dyn Fn(BrokerId) -> bool,
        me: BrokerId,
    ) -> bool {
        let new_leader = replica.leader;
        let reg = replica.registration(me);
        *self.replica.lock() = replica;
        let now = self.clock.now_ms();
        let mut leader = self.leader.lock();
        if new_leader != Some(me) {
            if leader.take().is_some() {
                tracing::info!(topic = %self.topic, partition = self.index, ?new_leader, epoch = %reg.leader_epoch, "no longer leader; following");
            }
            let o = self.offsets();
            self.publish(o.high_watermark, o.log_end_offset, o.log_start_offset, None);
            return new_leader.is_some();
        }
        let mut log = self.log.write();
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let same_epoch = leader
            .as_ref()
            .is_some_and(|s| s.leader_epoch() == reg.leader_epoch);
        if same_epoch {
            // Only this module's lock holder replaces the state, so `leader` is Some.
            let state = leader.as_mut().expect("checked above");
            state.set_config(config);
            if (state.leader_epoch(), state.partition_epoch())
                != (reg.leader_epoch, reg.partition_epoch)
            {
                if let MetadataOutcome::Resign = state.on_metadata(&reg, now) {
                    *leader = None;
                }
            }
        } else {
            let leo = log.log_end_offset();
            // The new epoch starts at our LEO: followers truncate anything
            // past it that they got from an older leader.
            if let Err(e) = log.assign_epoch_start_offset(reg.leader_epoch, leo) {
                tracing::error!(topic = %self.topic, partition = self.index, error = %e, "cannot record leader epoch start");
            }
            let hw = self.offsets().high_watermark;
            tracing::info!(topic = %self.topic, partition = self.index, epoch = %reg.leader_epoch, %leo, %hw, isr = ?reg.isr, "becoming leader");
            let durable = log.recovery_point();
            // Leader epoch 0 is the partition's first leadership: no
            // predecessor that could still be writing.
            let taken_up_at = if reg.leader_epoch.get() == 0 {
                0
            } else {
                self.replica.lock().metadata_offset
            };
            self.leadership_offset.store(taken_up_at, Ordering::Release);
            let mut state = LeaderState::new(reg, config, leo, hw, now);
            state.on_leader_durable(durable, now);
            *leader = Some(state);
        }
        if let Some(state) = leader.as_mut() {
            for &r in state.replicas().to_vec().iter() {
                state.set_isr_eligible(r, eligible(r));
            }
            self.publish_leader(state, &log);
        }
        false
    }

    /// Validates and appends one partition's record set from a client as leader.
    pub fn append(
        &self,
        records: &Bytes,
        acks: Acks,
        produce_version: i16,
    ) -> Result<AppendOutcome, PartitionError> {
        self.append_from(records, acks, produce_version, AppendOrigin::Client)
    }

    /// [`append`](Self::append) of a client's record set verified with
    /// `guard` (KIP-890, [`start_verification`](Self::start_verification)):
    /// a transactional batch that would open a transaction is refused
    /// (INVALID_TXN_STATE) if a marker for its producer dropped the guard.
    pub fn append_verified(
        &self,
        records: &Bytes,
        acks: Acks,
        produce_version: i16,
        guard: VerificationGuard,
    ) -> Result<AppendOutcome, PartitionError> {
        let headers = validate_records(records)?;
        self.append_validated(
            records,
            headers,
            acks,
            produce_version,
            AppendOrigin::Client,
            Some(guard),
        )
    }

    /// Validates and appends a record set as leader; a coordinator's
    /// transactional records (TxnOffsetCommit) skip the sequence check.
    pub fn append_from(
        &self,
        records: &Bytes,
        acks: Acks,
        produce_version: i16,
        origin: AppendOrigin,
    ) -> Result<AppendOutcome, PartitionError> {
        let headers = validate_records(records)?;
        self.append_validated(records, headers, acks, produce_version, origin, None)
    }

    /// Starts (or joins) the verification of a transactional produce from
    /// `producer_id` (KIP-890; `supports_epoch_bump`: a transaction.version
    /// 2 client): the guard to append with, and whether its transaction at
    /// `producer_epoch` is already open here.
    pub fn start_verification(
        &self,
        producer_id: ProducerId,
        producer_epoch: Option<ProducerEpoch>,
        supports_epoch_bump: bool,
    ) -> (VerificationGuard, bool) {
        self.producers.lock().start_verification(
            producer_id,
            producer_epoch,
            supports_epoch_bump,
            self.clock.now_ms(),
        )
    }

    /// Appends a record set that [`validate_records`] accepted (`headers`
    /// are its batches), as leader. With `verification`, a transactional
    /// batch that would open a transaction is refused (INVALID_TXN_STATE)
    /// if a marker for its producer was written since it was verified.
    pub fn append_validated(
        &self,
        records: &Bytes,
        headers: Vec<BatchHeader>,
        acks: Acks,
        produce_version: i16,
        origin: AppendOrigin,
        verification: Option<VerificationGuard>,
    ) -> Result<AppendOutcome, PartitionError> {
        let settings = self.settings.read().clone();
        // compression.type: a client's batches are stored in the topic's
        // codec (Kafka's log validator), transcoded before any check that
        // reads sizes, off the async workers as the whole append is.
        let transcoded;
        let (records, headers) = match transcode_for_topic(records, &headers, &settings, origin)? {
            Some((bytes, headers)) => {
                transcoded = bytes;
                (&transcoded, headers)
            }
            None => (records, headers),
        };
        check_client_batches(&headers, &settings, self.clock.now_ms(), origin)?;
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
        let not_leader = || {
            PartitionError::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "This broker is not the leader of {}-{}",
                    self.topic, self.index
                ),
            )
        };
        let mut leader = self.leader.lock();
        let state = leader.as_mut().ok_or_else(not_leader)?;
        self.check_lease()?;
        state
            .check_min_isr_before_append(acks)
            .map_err(|code| insufficient_isr(state, code))?;
        let leader_epoch = state.leader_epoch();

        let mut log = self.log.write();
        if self.closed.load(Ordering::Acquire) {
            return Err(closed_partition());
        }
        let mut producers = self.producers.lock();
        let first = &headers[0];
        match ProducerId::from_wire(first.producer_id) {
            None => {}
            Some(producer_id) if origin == AppendOrigin::Coordinator => producers
                .check_coordinator_batch(
                    producer_id,
                    ProducerEpoch::from_wire(first.producer_epoch),
                )
                .map_err(producer_error)?,
            Some(_) => match producers.check(first) {
                Ok(SequenceCheck::Append) => {
                    if let Some(guard) = verification {
                        producers
                            .check_verification(first, guard)
                            .map_err(producer_error)?;
                    }
                }
                Ok(SequenceCheck::Duplicate(meta)) => {
                    // Already appended: answer with the original offsets, append nothing.
                    return Ok(AppendOutcome {
                        base_offset: meta.first_offset,
                        required_offset: meta.last_offset.next(),
                        leader_epoch,
                        log_append_time: None,
                        log_start_offset: log.log_start_offset(),
                    });
                }
                Err(e) => return Err(producer_error(e)),
            },
        }
        // Written from the client's bytes, each header replaced by the
        // leader's (offsets, epoch): no copy of the records.
        let append_time = settings.log_append_time.then(|| self.clock.now_ms());
        let info = log
            .append_as_leader(records, &headers, leader_epoch, append_time)
            .map_err(storage_error)?;
        // Client batches are never control batches (checked above), so
        // nothing here closes a transaction.
        for h in &info.batches {
            if h.has_producer_id() {
                producers.record(h, h.max_timestamp, None);
            }
        }
        drop(producers);
        state.on_leader_append(log.log_end_offset(), self.clock.now_ms());
        // Published under the log lock, so offsets are never overwritten by older ones.
        self.publish_leader(state, &log);
        let log_start = log.log_start_offset();
        drop(log);
        Ok(AppendOutcome {
            base_offset: info.first_offset,
            required_offset: info.last_offset.next(),
            leader_epoch,
            log_append_time: append_time,
            log_start_offset: log_start,
        })
    }

    /// Appends a transaction marker (WriteTxnMarkers) as leader: a control
    /// batch ending `producer_id`'s transaction on this partition with a
    /// commit or an abort. Runs under the same locks as [`append`](Self::append)
    /// (leader state, log, producer state) so a stale leader never writes
    /// one. The marker is refused for an older producer epoch
    /// (INVALID_PRODUCER_EPOCH) or an older coordinator epoch
    /// (TRANSACTION_COORDINATOR_FENCED). It is written even when the
    /// producer has no open transaction here (as Kafka does; e.g. a retried
    /// marker), but only an abort that closes one gets an aborted-index
    /// entry. Like an acks=all produce: refused with NOT_ENOUGH_REPLICAS
    /// when the ISR is below min ISR, and the caller waits for the HW with
    /// [`wait_for_ack`](Self::wait_for_ack) on the returned outcome. A marker
    /// without a producer id (`None`, -1 on the wire; no coordinator sends
    /// one) is written but checks and closes nothing: producer state keeps
    /// no entry for it, as on followers, in a replay, and in Kafka.
    pub fn write_txn_marker(
        &self,
        producer_id: Option<ProducerId>,
        producer_epoch: Option<ProducerEpoch>,
        coordinator_epoch: i32,
        commit: bool,
        transaction_version: i16,
    ) -> Result<AppendOutcome, PartitionError> {
        let control = ControlType::from_commit(commit);
        let settings = self.settings.read().clone();
        let mut leader = self.leader.lock();
        let state = leader.as_mut().ok_or_else(|| {
            PartitionError::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "This broker is not the leader of {}-{}",
                    self.topic, self.index
                ),
            )
        })?;
        self.check_lease()?;
        state
            .check_min_isr_before_append(Acks::All)
            .map_err(|code| insufficient_isr(state, code))?;
        let leader_epoch = state.leader_epoch();
        let mut log = self.log.write();
        if self.closed.load(Ordering::Acquire) {
            return Err(closed_partition());
        }
        let mut producers = self.producers.lock();
        if let Some(producer_id) = producer_id {
            producers
                .check_end_txn_marker(
                    producer_id,
                    producer_epoch,
                    coordinator_epoch,
                    transaction_version,
                )
                .map_err(producer_error)?;
        }
        let now = self.clock.now_ms();
        let batch = build_txn_marker_batch(
            ProducerId::to_wire(producer_id),
            ProducerEpoch::to_wire(producer_epoch),
            coordinator_epoch,
            control,
            now,
        )
        .map_err(|e| PartitionError::new(ErrorCode::UnknownServerError, e.to_string()))?;
        let headers = validate_record_set(&batch)
            .map_err(|e| PartitionError::new(ErrorCode::UnknownServerError, e.to_string()))?;
        let append_time = settings.log_append_time.then_some(now);
        let info = log
            .append_as_leader(&batch, &headers, leader_epoch, append_time)
            .map_err(storage_error)?;
        let marker_offset = info.first_offset;
        let completed = producer_id.and_then(|producer_id| {
            producers.record_end_txn_marker(
                producer_id,
                producer_epoch,
                coordinator_epoch,
                marker_offset,
                info.max_timestamp,
                control,
            )
        });
        tracing::debug!(topic = %self.topic, partition = self.index, ?producer_id, ?producer_epoch, coordinator_epoch, commit, %marker_offset, ?completed, "wrote transaction marker");
        if let Some(t) = completed {
            index_if_aborted(&mut log, &producers, &t).map_err(storage_error)?;
        }
        drop(producers);
        state.on_leader_append(log.log_end_offset(), self.clock.now_ms());
        self.publish_leader(state, &log);
        let log_start = log.log_start_offset();
        drop(log);
        Ok(AppendOutcome {
            base_offset: marker_offset,
            required_offset: marker_offset.next(),
            leader_epoch,
            log_append_time: append_time,
            log_start_offset: log_start,
        })
    }

    /// The ack decision for an acks=all append authorised under
    /// `authority_epoch` (purgatory completion check). A lapsed write
    /// lease is lost authority too.
    pub fn ack_decision(
        &self,
        authority_epoch: LeaderEpoch,
        required_offset: Offset,
    ) -> ReplicationDecision {
        match self.leader.lock().as_ref() {
            Some(state) => {
                let lease_valid = self.check_lease().is_ok();
                let leader_durable = self.log.read().recovery_point();
                state.decide(
                    authority_epoch,
                    required_offset,
                    leader_durable,
                    lease_valid,
                )
            }
            None => ReplicationDecision::Reject(ErrorCode::NotLeaderOrFollower),
        }
    }

    /// Whether an acknowledgement of `required_offset` waits on this
    /// leader's own fsync (`strand.acks.durable`, or local-durable), which
    /// [`Self::flush_to`] then does.
    pub fn ack_needs_flush(&self, required_offset: Offset) -> bool {
        let acks = self.settings.read().acks;
        (acks.durable || acks.policy == AckPolicy::LocalDurable)
            && self.log.read().recovery_point() < required_offset
    }

    /// Fsyncs the log up to at least `offset` (nothing when it already is),
    /// and wakes the acknowledgements waiting on it. Blocking disk work:
    /// the caller runs it off the async workers.
    pub fn flush_to(&self, offset: Offset) -> Result<(), PartitionError> {
        let mut leader = self.leader.lock();
        let mut log = self.log.write();
        if log.recovery_point() < offset {
            log.flush().map_err(storage_error)?;
        }
        // The leader state learns what is on disk (under durable
        // acknowledgements its HW counts it).
        if let Some(state) = leader.as_mut() {
            if state
                .on_leader_durable(log.recovery_point(), self.clock.now_ms())
                .is_some()
            {
                self.publish_leader(state, &log);
            }
        }
        drop(log);
        drop(leader);
        self.offsets.send_modify(|o| o.durable_progress += 1);
        Ok(())
    }

    /// Whether this partition's acknowledgements (and HW) count fsynced
    /// offsets only (`strand.acks.durable`): its leader fsyncs after every
    /// append (group-committed by [`Self::flush_to`]).
    pub fn durable(&self) -> bool {
        self.settings.read().acks.durable
    }

    /// The partition's per-topic settings.
    pub fn settings(&self) -> PartitionSettings {
        self.settings.read().clone()
    }

    /// Whether this replica would take a leader append now: it leads and
    /// the broker's write lease covers its leadership.
    pub fn may_append(&self) -> bool {
        let leader = self.leader.lock();
        leader.is_some() && self.check_lease().is_ok()
    }

    /// The broker's write lease allows this leadership to append now.
    /// Called under the leader lock, which `leadership_offset` is written
    /// under.
    fn check_lease(&self) -> Result<(), PartitionError> {
        self.lease
            .check(
                self.clock.monotonic_ms(),
                self.leadership_offset.load(Ordering::Acquire),
            )
            .map_err(|code| {
                PartitionError::new(
                    code,
                    format!(
                        "This broker holds no current write lease for {}-{}",
                        self.topic, self.index
                    ),
                )
            })
    }

    /// Waits until the acks=all decision for `outcome` is made (the DelayedProduce
    /// of one partition): `Ok` once acknowledged, the error otherwise,
    /// REQUEST_TIMED_OUT at `deadline`. Woken by offset, ISR and leadership
    /// changes.
    pub async fn wait_for_ack(
        &self,
        outcome: &AppendOutcome,
        deadline: tokio::time::Instant,
    ) -> Result<(), ErrorCode> {
        let mut rx = self.subscribe();
        loop {
            match self.ack_decision(outcome.leader_epoch, outcome.required_offset) {
                ReplicationDecision::Ack { .. } => return Ok(()),
                ReplicationDecision::Reject(e) => return Err(e),
                ReplicationDecision::Wait => {}
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(ErrorCode::RequestTimedOut),
            }
        }
    }

    /// A follower fetched from `fetch_offset`: record its progress; returns an
    /// ISR expansion to send to the controller, if one is due.
    pub fn on_follower_fetch(
        &self,
        replica: BrokerId,
        broker_epoch: BrokerEpoch,
        fetch_offset: Offset,
        durable_offset: Option<Offset>,
    ) -> Result<Option<IsrProposal>, ErrorCode> {
        let mut leader = self.leader.lock();
        let state = leader.as_mut().ok_or(ErrorCode::NotLeaderOrFollower)?;
        let outcome =
            state.on_follower_fetch(replica, broker_epoch, fetch_offset, self.clock.now_ms())?;
        let (durable_moved, durable_advanced) =
            state.on_follower_durable(replica, durable_offset, self.clock.now_ms());
        if outcome.hw_advanced.is_some() || durable_advanced.is_some() {
            let log = self.log.read();
            self.publish_leader(state, &log);
        }
        if durable_moved && self.settings.read().acks.durable {
            self.offsets.send_modify(|o| o.durable_progress += 1);
        }
        Ok(outcome.proposal)
    }

    /// KIP-320: when the fetcher's last fetched epoch ends before its fetch
    /// offset in our log, (epoch, end offset) tells it where to truncate.
    ///
    /// When we have no epoch at or below the follower's, the answer is
    /// (-1, -1), the wire's "no divergence" (`None` here), yet the fetch
    /// still moves no follower state (see [`Self::record_follower_fetch`]),
    /// as in Kafka.
    pub fn diverging_epoch(
        &self,
        last_fetched_epoch: Option<LeaderEpoch>,
        fetch_offset: Offset,
    ) -> Option<DivergingEpoch> {
        let (epoch, end_offset) = self.divergence(last_fetched_epoch, fetch_offset)??;
        Some(DivergingEpoch {
            epoch: Some(epoch),
            end_offset: Some(end_offset),
        })
    }

    /// Whether the follower's log is not a prefix of ours: `Some` with our
    /// (epoch, end offset) for its last fetched epoch, which is `None` (the
    /// wire's (-1, -1)) when we have no epoch at or below it.
    fn divergence(
        &self,
        last_fetched_epoch: Option<LeaderEpoch>,
        fetch_offset: Offset,
    ) -> Option<Option<(LeaderEpoch, Offset)>> {
        let last_fetched_epoch = last_fetched_epoch?;
        match self.log.read().end_offset_for_epoch(last_fetched_epoch) {
            None => Some(None),
            Some((epoch, end_offset)) => (end_offset < fetch_offset || epoch < last_fetched_epoch)
                .then_some(Some((epoch, end_offset))),
        }
    }

    /// The leader's side of one partition of a follower's fetch, before the
    /// read: a fetch whose log diverges from ours records nothing (the
    /// follower truncates first; the read says where), any other moves the
    /// follower's LEO and maybe the HW. Returns an ISR expansion due, if any.
    /// OFFSET_OUT_OF_RANGE is left to the read, which reports it with our
    /// HW and log start.
    pub fn record_follower_fetch(
        &self,
        replica: BrokerId,
        broker_epoch: BrokerEpoch,
        fetch_offset: Offset,
        last_fetched_epoch: Option<LeaderEpoch>,
        durable_offset: Option<Offset>,
    ) -> Result<Option<IsrProposal>, ErrorCode> {
        if self.divergence(last_fetched_epoch, fetch_offset).is_some() {
            return Ok(None);
        }
        match self.on_follower_fetch(replica, broker_epoch, fetch_offset, durable_offset) {
            Err(ErrorCode::OffsetOutOfRange) => Ok(None),
            other => other,
        }
    }

    /// Whole batches from `fetch_offset`, at most `max_bytes` (at least one
    /// batch with `min_one`), below `upper` (HW, LSO or, for followers, LEO).
    pub fn read(
        &self,
        fetch_offset: Offset,
        max_bytes: usize,
        upper: Offset,
        min_one: bool,
    ) -> Result<strand_log::ReadResult, LogError> {
        self.log
            .read()
            .read(fetch_offset, max_bytes, upper, min_one)
    }

    /// [`read`](Self::read) as slices of the segment files, unread (sent
    /// with `sendfile` by the server).
    pub fn read_slices(
        &self,
        fetch_offset: Offset,
        max_bytes: usize,
        upper: Offset,
        min_one: bool,
    ) -> Result<strand_log::FileSlices, LogError> {
        self.log
            .read()
            .read_slices(fetch_offset, max_bytes, upper, min_one)
    }

    /// Whether a write holds the log right now: a [`read`](Self::read)
    /// would wait for it (and for the disk, if the write waits on one).
    pub fn log_busy(&self) -> bool {
        self.log.is_locked_exclusive()
    }

    /// The ISR the leader's HW counts (committed ISR plus a pending
    /// expansion, or before a pending shrink); None unless leading.
    pub fn maximal_isr(&self) -> Option<Vec<BrokerId>> {
        self.leader.lock().as_ref().map(LeaderState::maximal_isr)
    }

    /// Whether `replica` is in the ISR: the leader's (committed plus a
    /// pending expansion) when leading, else the metadata image's.
    pub fn in_isr(&self, replica: BrokerId) -> bool {
        match self.maximal_isr() {
            Some(isr) => isr.contains(&replica),
            None => self.replica.lock().isr.contains(&replica),
        }
    }

    /// Installs new per-topic settings (an AlterConfigs took effect); the
    /// log's segment and retention settings follow when they changed.
    pub fn update_settings(&self, settings: PartitionSettings) {
        let log_changed = {
            let mut s = self.settings.write();
            let changed = s.log != settings.log;
            *s = settings;
            changed
        };
        if log_changed {
            let config = self.settings.read().log.clone();
            self.log.write().set_config(config);
        }
    }

    /// ListOffsets' MAX_TIMESTAMP: (offset, timestamp) of the largest
    /// timestamp in the log.
    pub fn max_timestamp_and_offset(&self) -> Result<Option<(Offset, i64)>, LogError> {
        self.log.read().max_timestamp_and_offset()
    }

    /// ListOffsets by time: (offset, timestamp) of the first record at or
    /// after `ts`.
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(Offset, i64)>, LogError> {
        self.log.read().offset_for_timestamp(ts)
    }

    /// OffsetForLeaderEpoch: (largest epoch <= `epoch`, its end offset);
    /// `None` where Kafka answers (-1, -1) (no such epoch).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.log.read().end_offset_for_epoch(epoch)
    }

    /// The leader epoch of the batch that holds `offset`, from the epoch cache.
    pub fn epoch_at(&self, offset: Offset) -> Option<LeaderEpoch> {
        self.log
            .read()
            .epoch_entries()
            .iter()
            .rev()
            .find(|(_, start)| *start <= offset)
            .map(|(e, _)| *e)
    }

    /// The log's size on disk (DescribeLogDirs).
    /// The partition's directory; its parent is the log directory.
    pub fn dir(&self) -> PathBuf {
        self.dir.read().clone()
    }

    pub fn size_bytes(&self) -> u64 {
        self.log.read().size_bytes()
    }

    /// The periodic ISR shrink check.
    pub fn maybe_shrink_isr(&self, eligible: &dyn Fn(BrokerId) -> bool) -> Option<IsrProposal> {
        let mut leader = self.leader.lock();
        let state = leader.as_mut()?;
        for &r in state.replicas().to_vec().iter() {
            state.set_isr_eligible(r, eligible(r));
        }
        state.maybe_shrink_isr(self.clock.now_ms())
    }

    /// The controller's answer to an AlterPartition; returns the proposal to
    /// send again if the error was retriable.
    pub fn on_alter_partition_result(
        &self,
        sent: &IsrProposal,
        result: AlterPartitionResult,
    ) -> Option<IsrProposal> {
        let mut leader = self.leader.lock();
        let state = leader.as_mut()?;
        let outcome = state.on_alter_partition_result(sent, result, self.clock.now_ms());
        tracing::debug!(topic = %self.topic, partition = self.index, ?outcome, "AlterPartition answered");
        match outcome {
            AlterOutcome::Committed { .. } | AlterOutcome::Reverted { .. } => {
                let log = self.log.read();
                self.publish_leader(state, &log);
                None
            }
            AlterOutcome::Retry(p) => Some(p),
            AlterOutcome::AwaitingMetadata | AlterOutcome::Superseded => None,
        }
    }

    /// What a follower fetch for this partition carries. None while this
    /// broker leads it or it is closed.
    pub fn follower_fetch_state(&self) -> Option<FollowerFetchState> {
        let leader = self.leader.lock();
        if leader.is_some() || self.closed.load(Ordering::Acquire) {
            return None;
        }
        let leader_epoch = self.replica.lock().leader_epoch;
        let log = self.log.read();
        Some(FollowerFetchState {
            fetch_offset: log.log_end_offset(),
            last_fetched_epoch: log.latest_epoch(),
            log_start_offset: log.log_start_offset(),
            leader_epoch,
            durable_offset: log.recovery_point().min(log.log_end_offset()),
        })
    }

    /// Runs `f` on the log as a follower of `leader_epoch`; nothing (false)
    /// if this broker leads the partition now or follows another epoch.
    fn as_follower<R>(
        &self,
        leader_epoch: LeaderEpoch,
        f: impl FnOnce(&mut PartitionLog, &mut ProducerStateManager) -> Result<R, LogError>,
    ) -> Result<Option<R>, LogError> {
        let leader = self.leader.lock();
        if leader.is_some() || self.replica.lock().leader_epoch != leader_epoch {
            return Ok(None);
        }
        let mut log = self.log.write();
        if self.closed.load(Ordering::Acquire) {
            return Ok(None);
        }
        let mut producers = self.producers.lock();
        let r = f(&mut log, &mut producers)?;
        drop(producers);
        drop(leader);
        Ok(Some(r))
    }

    /// Appends batches fetched from the leader (offsets and epochs as the
    /// leader wrote them), then takes the leader's HW (capped by our LEO)
    /// and log start offset. Returns false if the fetch is stale.
    pub fn append_as_follower(
        &self,
        leader_epoch: LeaderEpoch,
        fetch_offset: Offset,
        records: &[u8],
        leader_hw: Offset,
        leader_log_start: Offset,
    ) -> Result<bool, LogError> {
        let done = self.as_follower(leader_epoch, |log, producers| {
            if log.log_end_offset() != fetch_offset {
                return Ok(false);
            }
            if !records.is_empty() {
                // Never write what does not check out, even from the leader.
                let valid = strand_protocol::batch::valid_prefix_len(records);
                let records = &records[..valid];
                if !records.is_empty() {
                    // The leader validated the records; a follower checks
                    // framing and CRCs only (as Kafka's), never decompresses.
                    let headers = validate_batch_framing(records)
                        .map_err(|e| LogError::InvalidRecords(e.to_string()))?;
                    log.append_as_follower(records, &headers)?;
                    record_appended(log, producers, records, &headers)?;
                }
            }
            if leader_log_start > log.log_start_offset() && leader_log_start <= log.log_end_offset()
            {
                log.delete_records_before(leader_log_start)?;
            }
            Ok(true)
        })?;
        if done == Some(true) {
            let log = self.log.read();
            let leo = log.log_end_offset();
            self.publish(leader_hw.min(leo), leo, log.log_start_offset(), None);
        }
        Ok(done == Some(true))
    }

    /// Truncates our log to `offset` as a follower (a divergent suffix from an
    /// older leader epoch, or a log past the leader's end) and rebuilds the
    /// producer state.
    pub fn truncate_as_follower(
        &self,
        leader_epoch: LeaderEpoch,
        offset: Offset,
    ) -> Result<bool, LogError> {
        let done = self.as_follower(leader_epoch, |log, producers| {
            let leo = log.log_end_offset();
            // Also when nothing is cut: drops epochs that start past `offset`.
            log.truncate_to(offset)?;
            if log.log_end_offset() == leo {
                return Ok(false);
            }
            tracing::info!(topic = %self.topic, partition = self.index, from = %leo, to = %log.log_end_offset(), "truncated divergent log suffix");
            // The index lost the entries of the truncated markers; the
            // rebuilt state replays from a snapshot at or below the new end
            // and re-adds (idempotently) what it finds after it.
            *producers = rebuild_producer_state(log);
            Ok(true)
        })?;
        self.publish_after_truncation();
        Ok(done == Some(true))
    }

    /// The leader's log starts after our end: start again empty at its log start.
    pub fn restart_as_follower_at(
        &self,
        leader_epoch: LeaderEpoch,
        offset: Offset,
    ) -> Result<bool, LogError> {
        let done = self.as_follower(leader_epoch, |log, producers| {
            tracing::info!(topic = %self.topic, partition = self.index, %offset, "log behind the leader's log start; restarting it there");
            log.truncate_fully_and_start_at(offset)?;
            *producers = ProducerStateManager::default();
            Ok(true)
        })?;
        self.publish_after_truncation();
        Ok(done == Some(true))
    }

    fn publish_after_truncation(&self) {
        let log = self.log.read();
        let leo = log.log_end_offset();
        let hw = self.offsets().high_watermark.min(leo);
        self.publish(hw, leo, log.log_start_offset(), None);
    }

    /// Applies the leader's answer for this partition to a follower fetch
    /// made at `fetch_offset` under `leader_epoch`, as
    /// `rules::follower_fetch_action` decides; nothing if the log is no
    /// longer at `fetch_offset`. True when the log changed.
    pub fn apply_fetched(
        &self,
        leader_epoch: LeaderEpoch,
        fetch_offset: Offset,
        fetched: &rules::FetchedPartition,
        records: &[u8],
    ) -> Result<bool, LogError> {
        use rules::FollowerFetchAction::*;
        // As Kafka's fetcher: an answer applies only to the fetch state it
        // was asked from. One that arrives after the log moved on (a
        // retried or reordered fetch) would truncate or restart a log that
        // no longer diverges. The fetcher is the only writer of a follower's
        // log, so the check holds until the action runs.
        if self.log.read().log_end_offset() != fetch_offset {
            return Ok(false);
        }
        match rules::follower_fetch_action(fetch_offset, fetched) {
            TruncateToDivergence(diverging) => {
                let offset = self.divergence_truncation_offset(diverging);
                self.truncate_as_follower(leader_epoch, offset)
            }
            Append => {
                let offsets = self.offsets();
                let applied = self.append_as_follower(
                    leader_epoch,
                    fetch_offset,
                    records,
                    fetched.high_watermark.unwrap_or(offsets.high_watermark),
                    fetched.log_start_offset.unwrap_or(offsets.log_start_offset),
                )?;
                // Durable acknowledgements count what followers have
                // fsynced: sync what was fetched before the next fetch
                // reports it.
                if applied && !records.is_empty() && self.settings.read().acks.durable {
                    self.as_follower(leader_epoch, |log, _| log.flush())?;
                }
                Ok(applied)
            }
            RestartAt(offset) => self.restart_as_follower_at(leader_epoch, offset),
            TruncateTo(offset) => self.truncate_as_follower(leader_epoch, offset),
            Retry => Ok(false),
        }
    }

    /// Kafka's follower truncation on a diverging epoch in a fetch response.
    /// Returns the offset to truncate to.
    pub fn divergence_truncation_offset(&self, diverging: DivergingEpoch) -> Offset {
        let hw = self.offsets().high_watermark;
        let log = self.log.read();
        let local = diverging
            .epoch
            .and_then(|epoch| log.end_offset_for_epoch(epoch));
        rules::follower_truncation_offset(diverging, local, hw, log.log_end_offset())
    }

    /// The highest offset a fetch may read to: HW, or the LSO under
    /// read_committed.
    pub fn fetch_upper_bound(&self, read_committed: bool) -> Offset {
        if read_committed {
            self.last_stable_offset()
        } else {
            self.offsets().high_watermark
        }
    }

    /// min(HW, first offset of every open transaction and of every completed
    /// one whose marker the HW has not passed).
    pub fn last_stable_offset(&self) -> Offset {
        self.offsets().last_stable_offset
    }

    /// Aborted transactions overlapping `[start, upper)`, as (producer id,
    /// first offset), for a read_committed fetch response.
    pub fn aborted_transactions(&self, start: Offset, upper: Offset) -> Vec<(ProducerId, Offset)> {
        self.log.read().collect_aborted_txns(start, upper)
    }

    /// Whether `producer_id` at `producer_epoch` has a transaction open here
    /// (a transactional batch then needs no KIP-890 verification).
    pub fn has_ongoing_txn(
        &self,
        producer_id: ProducerId,
        producer_epoch: Option<ProducerEpoch>,
    ) -> bool {
        self.producers.lock().entry(producer_id).is_some_and(|e| {
            e.producer_epoch == producer_epoch && e.current_txn_first_offset.is_some()
        })
    }

    /// The producers this partition has state for (DescribeProducers), by id.
    pub fn producer_entries(&self) -> Vec<ProducerEntry> {
        let mut v: Vec<ProducerEntry> = self.producers.lock().entries().cloned().collect();
        v.sort_by_key(|e| e.producer_id);
        v
    }

    /// DeleteRecords: the log starts at `offset` (`None`, -1 on the wire:
    /// the HW); never past the HW. Returns the new log start offset.
    pub fn delete_records(&self, offset: Option<Offset>) -> Result<Offset, ErrorCode> {
        let hw = self.offsets().high_watermark;
        let target = offset.unwrap_or(hw);
        let mut log = self.log.write();
        if target > hw {
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
    pub fn housekeeping(
        &self,
        now: i64,
        retention: bool,
        checkpoint_hw: bool,
        producer_id_expiration_ms: i64,
    ) {
        let mut log = self.log.write();
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        if checkpoint_hw {
            if let Err(e) = log.checkpoint_high_watermark(self.offsets().high_watermark) {
                tracing::error!(topic = %self.topic, partition = self.index, error = %e, "HW checkpoint failed");
            }
        }
        let res = log.maybe_roll(now).and_then(|_| log.maybe_flush(now));
        if let Err(e) = res {
            tracing::error!(topic = %self.topic, partition = self.index, error = %e, "roll/flush failed");
        }
        {
            let mut producers = self.producers.lock();
            producers.expire(now, producer_id_expiration_ms);
            let active_base = log
                .segment_base_offsets()
                .last()
                .copied()
                .unwrap_or(Offset::ZERO);
            let mut last = self.snapshot_segment.lock();
            let leo = log.log_end_offset();
            if *last != Some(active_base) && snapshot_needed(&producers, &log) {
                match log.write_producer_snapshot(leo, &producers.snapshot()) {
                    Ok(()) => *last = Some(active_base),
                    Err(e) => {
                        tracing::error!(topic = %self.topic, partition = self.index, error = %e, "producer snapshot failed")
                    }
                }
            }
        }
        if retention {
            // Never past the HW: a segment goes only once the next one starts
            // at or below it (unreplicated data stays, as Kafka's
            // deletableSegments).
            let hw = self.offsets().high_watermark;
            match log.apply_retention_below(now, hw) {
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
    pub fn close(&self) -> Result<(), LogError> {
        let mut log = self.log.write();
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let leo = log.log_end_offset();
        let producers = self.producers.lock();
        if snapshot_needed(&producers, &log) {
            log.write_producer_snapshot(leo, &producers.snapshot())?;
        }
        drop(producers);
        log.checkpoint_high_watermark(self.offsets().high_watermark)?;
        log.flush()?;
        log.close_clean()
    }
}

impl Partition {
    /// How urgently the log cleaner should take this partition now (`None`:
    /// not compacted, closed, or nothing worth a pass). Reads no segment
    /// under a lock (the snapshot is summaries; the one header read for
    /// `max.compaction.lag.ms` is done after).
    pub fn cleaner_urgency(&self, now_ms: i64) -> Option<(Urgency, Cleanable)> {
        let settings = self.settings.read().clone();
        if !settings.compacted || self.is_closed() {
            return None;
        }
        let snapshot = self.log.read().clean_snapshot();
        snapshot.urgency(self.offsets().last_stable_offset, now_ms, &settings.cleaner)
    }

    /// One log cleaner pass (see `strand_log::cleaner`): the snapshot under
    /// the log's read lock and the producer state's (no I/O), the reading
    /// and writing of segments with no lock held, the swap under the write
    /// lock (renames and one directory fsync). `Ok(None)`: nothing to
    /// clean, or the log changed under the pass (a truncation, a segment
    /// deleted, the partition closed). A failed write or fsync takes the log
    /// directory offline, as any other log write's failure does.
    pub fn clean(
        &self,
        resources: &mut CleanerResources,
        now_ms: i64,
    ) -> Result<Option<CleanStats>, CleanError> {
        let settings = self.settings.read().clone();
        if !settings.compacted {
            return Ok(None);
        }
        let (snapshot, active_producers) = {
            let log = self.log.read();
            let producers = self.producers.lock();
            (log.clean_snapshot(), last_records(&producers))
        };
        // Records below the LSO (never above the HW) are final.
        let stable_bound = self.offsets().last_stable_offset;
        let closed = || self.is_closed();
        let inputs = PassInputs {
            snapshot: &snapshot,
            stable_bound,
            now_ms,
            config: &settings.cleaner,
            active_producers: &active_producers,
            abort: &closed,
        };
        let output = match cleaner::clean(&inputs, resources) {
            Ok(Some(output)) => output,
            Ok(None) | Err(CleanError::Aborted) => return Ok(None),
            Err(CleanError::Log(e)) => return Err(self.cleaner_failure(&snapshot, e)),
        };
        let stats = output.stats.clone();
        let committed = {
            let mut log = self.log.write();
            if self.is_closed() {
                output.discard();
                false
            } else {
                log.commit_clean(output)?
            }
        };
        if !committed {
            return Ok(None);
        }
        if let Err(e) = cleaner::write_checkpoint(&snapshot, Offset::new(stats.end)) {
            return Err(self.cleaner_failure(&snapshot, e));
        }
        let mut stats = stats;
        let after = self.log.read().clean_snapshot();
        stats.dirty_ratio_after = after
            .cleanable(stable_bound, now_ms, &settings.cleaner)
            .dirty_ratio();
        Ok(Some(stats))
    }

    /// A pass's error: an I/O error fails the log (its directory goes
    /// offline) unless the log changed under the pass, which explains it.
    fn cleaner_failure(&self, snapshot: &cleaner::LogSnapshot, e: LogError) -> CleanError {
        if let LogError::Io(io) = &e {
            let mut log = self.log.write();
            if self.is_closed() || !log.fail_if_unchanged(snapshot, io) {
                return CleanError::Aborted;
            }
        }
        CleanError::Log(e)
    }
}

/// Each active producer's last batch, as the cleaner must keep it.
fn last_records(
    producers: &ProducerStateManager,
) -> std::collections::HashMap<ProducerId, LastRecord> {
    producers
        .entries()
        .map(|e| {
            (
                e.producer_id,
                LastRecord {
                    last_data_offset: e.last_offset(),
                    producer_epoch: e.producer_epoch,
                },
            )
        })
        .collect()
}

/// Whether a producer snapshot has anything to keep: an empty log with no
/// producers needs none (without one, the empty state is rebuilt from the
/// log start), which saves a new partition two fsyncs.
fn snapshot_needed(producers: &ProducerStateManager, log: &PartitionLog) -> bool {
    !(producers.is_empty() && log.log_end_offset() == log.log_start_offset())
}

impl Partition {
    /// Whether the partition was closed or deleted: no more work is done
    /// on its behalf.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Stops appends and housekeeping before the directory is deleted.
    pub fn mark_deleted(&self) {
        {
            let _log = self.log.write();
            self.closed.store(true, Ordering::Release);
        }
        // A replica removed while it led (a reassignment moved it away)
        // resigns: produces waiting for acknowledgements and fetches
        // waiting for data wake and find no leader here
        // (NOT_LEADER_OR_FOLLOWER), as Kafka completes its purgatories
        // when it stops a partition.
        if self.leader.lock().take().is_some() {
            tracing::info!(topic = %self.topic, partition = self.index, "deleted while leading; resigned");
        }
        let o = self.offsets();
        self.publish(o.high_watermark, o.log_end_offset, o.log_start_offset, None);
    }
}

/// Records batches just appended to the log (follower path): producer state
/// for every batch with a producer id; a control batch's marker type is read
/// from its first record, and an abort that closes a transaction is added to
/// the aborted-transaction index (idempotently).
fn record_appended(
    log: &mut PartitionLog,
    producers: &mut ProducerStateManager,
    records: &[u8],
    headers: &[BatchHeader],
) -> Result<(), LogError> {
    let mut pos = 0usize;
    for h in headers {
        let size = h.total_size();
        if h.has_producer_id() {
            let marker = if h.is_control() {
                records.get(pos..pos + size).and_then(end_txn_marker)
            } else {
                None
            };
            if let Some(t) = producers.record(h, h.max_timestamp, marker) {
                index_if_aborted(log, producers, &t)?;
            }
        }
        pos += size;
    }
    Ok(())
}

/// Adds an aborted transaction to the index of its marker's segment, with the
/// LSO that followed the abort (Kafka's value: the next open transaction's
/// first offset, or one past the marker). A no-op for commits and for an
/// entry already present.
fn index_if_aborted(
    log: &mut PartitionLog,
    producers: &ProducerStateManager,
    t: &CompletedTxn,
) -> Result<(), LogError> {
    if !t.is_aborted {
        return Ok(());
    }
    log.append_aborted_txn(AbortedTxn {
        producer_id: t.producer_id,
        first_offset: t.first_offset,
        last_offset: t.last_offset,
        last_stable_offset: producers.stable_offset_after(t),
    })?;
    Ok(())
}

/// Producer state from the log: the latest snapshot, then every batch after
/// it (all batches if no snapshot is readable). Abort markers met on the way
/// are (re-)added to the aborted-transaction index: after a crash the marker
/// may be in the log while its index entry is not.
fn rebuild_producer_state(log: &mut PartitionLog) -> ProducerStateManager {
    let mut producers = None;
    let mut replay_from = log.log_start_offset();
    match log.latest_producer_snapshot() {
        Ok(Some((offset, data))) => match ProducerStateManager::from_snapshot(&data) {
            Ok(p) => {
                producers = Some(p);
                replay_from = offset;
            }
            Err(e) => {
                tracing::warn!(dir = %log.dir().display(), error = %e, "producer snapshot unreadable; rebuilding from the log")
            }
        },
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(dir = %log.dir().display(), error = %e, "producer snapshot unreadable; rebuilding from the log")
        }
    }
    let mut producers = producers.unwrap_or_default();
    let headers = match log.batch_headers_from(replay_from) {
        Ok(headers) => headers,
        Err(e) => {
            tracing::error!(dir = %log.dir().display(), error = %e, "cannot replay producer state from the log");
            return producers;
        }
    };
    for h in headers {
        if !h.has_producer_id() {
            continue;
        }
        let marker = if h.is_control() {
            read_end_txn_marker(log, &h)
        } else {
            None
        };
        if let Some(t) = producers.record(&h, h.max_timestamp, marker) {
            if let Err(e) = index_if_aborted(log, &producers, &t) {
                tracing::error!(dir = %log.dir().display(), error = %e, txn = ?t, "cannot re-add an aborted transaction to the index");
            }
        }
    }
    producers
}

/// The marker in the control batch `h` of the log; `None` (with a warning)
/// if it cannot be read.
fn read_end_txn_marker(log: &PartitionLog, h: &BatchHeader) -> Option<EndTxnMarker> {
    // The log holds no batch at a negative offset (it checks every append
    // and recovered batch); a header saying otherwise is not read.
    let (Some(base), Some(next)) = (
        Offset::from_wire(h.base_offset),
        Offset::from_wire(h.next_offset()),
    ) else {
        tracing::warn!(dir = %log.dir().display(), offset = h.base_offset, "control batch at a negative offset");
        return None;
    };
    match log.read(base, h.total_size(), next, true) {
        Ok(r) => {
            let t = end_txn_marker(&r.records);
            if t.is_none() {
                tracing::warn!(dir = %log.dir().display(), offset = h.base_offset, "control batch with a producer id is not a transaction marker");
            }
            t
        }
        Err(e) => {
            tracing::warn!(dir = %log.dir().display(), offset = h.base_offset, error = %e, "cannot read a control batch during replay");
            None
        }
    }
}

/// Kafka's checks on batches written by clients (INVALID_RECORD /
/// INVALID_TIMESTAMP): no control batches (transactional batches outside a
/// transactional produce are refused for the whole request by the produce
/// handler, as Kafka does), a producer id needs a sequence, and CreateTime
/// timestamps within message.timestamp.before/after.max.ms of the broker clock.
/// Checks a client's record set (`protocol::batch::validate_record_set`:
/// framing, CRC, and the record count, decompressing by streaming) and maps
/// what is wrong to Kafka's produce errors. A compressed set costs the time
/// of decompressing it: callers on the async runtime run it as blocking work.
///
/// The codes are the reference Kafka's (asked side by side,
/// `tests/differential.rs`): a record set that is not one well-formed v2
/// batch (framing, counts, record structure, an old magic) is
/// INVALID_RECORD; a CRC mismatch and an unknown magic are CORRUPT_MESSAGE.
/// A payload that does not decompress is CORRUPT_MESSAGE too, where Kafka
/// answers UNKNOWN_SERVER_ERROR (COMPATIBILITY.md).
pub fn validate_records(records: &[u8]) -> Result<Vec<BatchHeader>, PartitionError> {
    validate_record_set(records).map_err(|e| {
        let code = match e {
            BatchError::CrcMismatch { .. } | BatchError::Compression(_) | BatchError::Encode(_) => {
                ErrorCode::CorruptMessage
            }
            BatchError::UnsupportedMagic(m) if m > 2 => ErrorCode::CorruptMessage,
            BatchError::UnsupportedMagic(_)
            | BatchError::Truncated { .. }
            | BatchError::InvalidLength(_)
            | BatchError::CountMismatch { .. }
            | BatchError::Empty => ErrorCode::InvalidRecord,
        };
        PartitionError::new(code, e.to_string())
    })
}

/// The client's record set re-compressed into the topic's
/// `compression.type`, with its batch headers; `None` when every batch is
/// already stored as the topic asks (or the topic keeps the producer's).
fn transcode_for_topic(
    records: &Bytes,
    headers: &[BatchHeader],
    settings: &PartitionSettings,
    origin: AppendOrigin,
) -> Result<Option<(Bytes, Vec<BatchHeader>)>, PartitionError> {
    let Some(target) = settings
        .compression
        .filter(|_| origin == AppendOrigin::Client)
    else {
        return Ok(None);
    };
    if !headers
        .iter()
        .any(|h| needs_transcode(h.compression(), Some(target.codec)))
    {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(records.len());
    let mut pos = 0;
    for h in headers {
        let batch = &records[pos..pos + h.total_size()];
        pos += h.total_size();
        if !needs_transcode(h.compression(), Some(target.codec)) {
            out.extend_from_slice(batch);
            continue;
        }
        let t = transcode_batch(batch, target, settings.max_message_bytes).map_err(|e| {
            let code = match e {
                TranscodeError::TooLarge { .. } => ErrorCode::MessageTooLarge,
                TranscodeError::Compress { .. } => ErrorCode::UnknownServerError,
                TranscodeError::Decompress(_) | TranscodeError::Malformed(_) => {
                    ErrorCode::CorruptMessage
                }
            };
            PartitionError::new(code, e.to_string())
        })?;
        out.extend_from_slice(&t);
    }
    let out = Bytes::from(out);
    // The transcoder keeps the framing it was given; re-read for the headers.
    let headers = strand_protocol::batch::validate_batch_framing(&out).map_err(|e| {
        PartitionError::new(
            ErrorCode::UnknownServerError,
            format!("a transcoded batch is malformed: {e}"),
        )
    })?;
    Ok(Some((out, headers)))
}

fn check_client_batches(
    headers: &[strand_protocol::batch::BatchHeader],
    settings: &PartitionSettings,
    now: i64,
    origin: AppendOrigin,
) -> Result<(), PartitionError> {
    let invalid = |m: String| Err(PartitionError::new(ErrorCode::InvalidRecord, m));
    let timestamp = |m: String| Err(PartitionError::new(ErrorCode::InvalidTimestamp, m));
    for h in headers {
        if h.is_control() {
            return invalid("Clients are not allowed to write control records".into());
        }
        // A coordinator's transactional records carry no sequence.
        if h.has_producer_id() && h.base_sequence < 0 && origin == AppendOrigin::Client {
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

fn insufficient_isr(state: &LeaderState, code: ErrorCode) -> PartitionError {
    PartitionError::new(
        code,
        format!(
            "The size of the current ISR {:?} is insufficient to satisfy the min.isr requirement of {}",
            state.isr(),
            state.configured_min_isr()
        ),
    )
}

fn closed_partition() -> PartitionError {
    PartitionError::new(
        ErrorCode::NotLeaderOrFollower,
        "partition is closed (deleted or shutting down)",
    )
}

fn producer_error(e: ProducerStateError) -> PartitionError {
    PartitionError::new(e.error_code(), e.to_string())
}

fn write_partition_metadata(
    storage: &dyn Storage,
    dir: &Path,
    topic_id: Uuid,
) -> Result<(), LogError> {
    let path = dir.join("partition.metadata");
    let text = format!("version: 0\ntopic_id: {topic_id}\n");
    if storage.read_opt(&path).ok().flatten().as_deref() == Some(text.as_bytes()) {
        return Ok(());
    }
    storage.write_atomic(&path, text.as_bytes())?;
    Ok(())
}

pub const DELETE_SUFFIX: &str = "-delete";

/// Deletes a partition directory the way Kafka does: first an atomic rename
/// out of the `<topic>-<partition>` namespace (so a crash never leaves a half
/// deleted directory that a recreated topic would adopt), then the removal.
pub fn delete_dir(dir: &Path) {
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

pub fn read_partition_metadata(dir: &Path) -> Option<Uuid> {
    let text = std::fs::read_to_string(dir.join("partition.metadata")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|s| s.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use strand_protocol::batch::assign_offset_and_epoch;

    use strand_protocol::kafka_protocol::records::Compression;
    use strand_protocol::testing::{encode_records, encode_records_txn};

    /// A batch as a leader would have written it at `offset`.
    fn at(mut batch: Vec<u8>, offset: i64) -> Vec<u8> {
        assign_offset_and_epoch(&mut batch, offset, 0);
        batch
    }

    fn txn_data(pid: i64, seq: i32, offset: i64) -> Vec<u8> {
        let recs = vec![(None, Some(Bytes::from_static(b"v")), 1_000)];
        at(
            encode_records_txn(&recs, pid, 0, seq, Compression::None, true),
            offset,
        )
    }

    fn marker(pid: i64, control: ControlType, offset: i64) -> Vec<u8> {
        at(
            build_txn_marker_batch(pid, 0, 3, control, 1_000).unwrap(),
            offset,
        )
    }

    fn follow(log: &mut PartitionLog, producers: &mut ProducerStateManager, batch: &[u8]) {
        let headers = validate_record_set(batch).unwrap();
        log.append_as_follower(batch, &headers).unwrap();
        record_appended(log, producers, batch, &headers).unwrap();
    }

    /// Partition t-0 on in-memory storage and a manual clock, with
    /// `replica` as its registration, and a leader configuration (min ISR 1).
    fn in_memory(replica: ReplicaState) -> (Partition, LeaderConfig) {
        use strand_log::storage::MemStorage;
        use strand_types::ManualClock;
        let io = PartitionIo {
            storage: MemStorage::new().shared(),
            clock: Arc::new(ManualClock::starting_at(1_000)),
            lease: Arc::new(lease::WriteLease::unenforced()),
        };
        let settings = PartitionSettings {
            log: LogConfig::default(),
            max_message_bytes: 1 << 20,
            log_append_time: false,
            min_insync_replicas: 1,
            compacted: false,
            cleaner: CleanerLogConfig::default(),
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
            acks: Default::default(),
            compression: None,
        };
        let p = Partition::open_in(
            io,
            Path::new("/d/t-0"),
            "t",
            Uuid::nil(),
            0,
            replica,
            settings,
        )
        .unwrap();
        let config = LeaderConfig {
            min_insync_replicas: 1,
            replica_lag_time_max_ms: 1_000,
            acks: Default::default(),
        };
        (p, config)
    }

    /// The chaos run's late batch (chaos/findings/seed-1-aborted-read), at
    /// the partition: a transactional batch verified while its transaction
    /// was open and appended after the transaction's abort marker is refused
    /// with INVALID_TXN_STATE and appends nothing, so no later commit of the
    /// producer can make it committed; verified again after the marker, the
    /// producer's next transaction is appended.
    #[test]
    fn a_batch_verified_before_an_abort_is_refused_after_it() {
        let b1 = BrokerId::new(1);
        let replica = ReplicaState {
            leader_epoch: LeaderEpoch::new(1),
            partition_epoch: PartitionEpoch::ZERO,
            replicas: vec![b1],
            isr: vec![b1],
            leader: Some(b1),
            metadata_offset: 0,
        };
        let (p, config) = in_memory(replica.clone());
        p.apply_registration(replica, config, &|_| true, b1);
        let producer = ProducerId::new(1001);
        let batch = |epoch: i16, seq: i32| {
            Bytes::from(encode_records_txn(
                &[(None, Some(Bytes::from_static(b"v")), 1_000)],
                1001,
                epoch,
                seq,
                Compression::None,
                true,
            ))
        };
        let append = |records: Bytes, guard| {
            let headers = validate_records(&records).unwrap();
            p.append_validated(
                &records,
                headers,
                Acks::Leader,
                9,
                AppendOrigin::Client,
                guard,
            )
            .map(|o| o.base_offset)
            .map_err(|e| e.code)
        };
        // The transaction's first batch, then a second verified while it is open.
        let (g1, open) = p.start_verification(producer, ProducerEpoch::from_wire(0), false);
        assert!(!open);
        assert_eq!(append(batch(0, 0), Some(g1)), Ok(Offset::new(0)));
        let (g2, open) = p.start_verification(producer, ProducerEpoch::from_wire(0), false);
        assert!(open);
        // The coordinator aborts the transaction before the second is appended.
        p.write_txn_marker(Some(producer), ProducerEpoch::from_wire(0), 3, false, 1)
            .unwrap();
        let end = p.offsets().log_end_offset;
        assert_eq!(
            append(batch(0, 1), Some(g2)),
            Err(ErrorCode::InvalidTxnState)
        );
        assert_eq!(p.offsets().log_end_offset, end, "nothing appended");
        // The producer's next transaction (bumped epoch), verified after the marker.
        let (g3, open) = p.start_verification(producer, ProducerEpoch::from_wire(1), false);
        assert!(!open);
        assert_eq!(append(batch(1, 0), Some(g3)), Ok(end));

        // A transaction.version 2 client (produce v12): its markers carry the
        // epoch bumped at the transaction's end, and its next transaction runs
        // at that epoch. A late batch of the open transaction (epoch 1) and
        // the next transaction's first batch (epoch 2) are both verified before
        // the marker is written (the coordinator holds the next transaction's
        // add until its markers are done); they share one guard.
        let (late, open) = p.start_verification(producer, ProducerEpoch::from_wire(1), true);
        assert!(open);
        let (next, open) = p.start_verification(producer, ProducerEpoch::from_wire(2), true);
        assert!(!open);
        assert_eq!(late, next, "one producer, one guard");
        p.write_txn_marker(Some(producer), ProducerEpoch::from_wire(2), 3, true, 1)
            .unwrap();
        let end = p.offsets().log_end_offset;
        // The marker at the next transaction's epoch leaves its verification
        // standing, and the late batch's older epoch is fenced.
        assert_eq!(
            append(batch(1, 1), Some(late)),
            Err(ErrorCode::InvalidProducerEpoch)
        );
        assert_eq!(p.offsets().log_end_offset, end, "nothing appended");
        assert_eq!(append(batch(2, 0), Some(next)), Ok(end));
    }

    /// AlterReplicaLogDirs at the partition: a copy built in another log
    /// directory while appends go on is swapped in with every record at
    /// its offset and epoch, and the partition serves on from its new
    /// place; a truncation during the copy starts it again.
    #[test]
    fn a_replica_moved_to_another_directory_holds_every_record() {
        let b1 = BrokerId::new(1);
        let replica = ReplicaState {
            leader_epoch: LeaderEpoch::new(3),
            partition_epoch: PartitionEpoch::ZERO,
            replicas: vec![b1],
            isr: vec![b1],
            leader: Some(b1),
            metadata_offset: 0,
        };
        let (p, config) = in_memory(replica.clone());
        p.apply_registration(replica, config, &|_| true, b1);
        let append = |v: &str| {
            let records = Bytes::from(encode_records(
                &[(None, Some(Bytes::from(v.to_string())), 1_000)],
                -1,
                -1,
                -1,
                Compression::None,
            ));
            let headers = validate_records(&records).unwrap();
            p.append_validated(
                &records,
                headers,
                Acks::Leader,
                9,
                AppendOrigin::Client,
                None,
            )
            .unwrap()
            .base_offset
        };
        let values = |p: &Partition| -> Vec<(i64, String, i32)> {
            let leo = p.offsets().log_end_offset;
            let mut buf = p.read(Offset::ZERO, 1 << 20, leo, true).unwrap().records;
            let mut out = Vec::new();
            while !buf.is_empty() {
                let epoch = i32::from_be_bytes(buf[12..16].try_into().unwrap());
                let set =
                    strand_protocol::kafka_protocol::records::RecordBatchDecoder::decode(&mut buf)
                        .unwrap();
                for r in set.records {
                    let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
                    out.push((r.offset, v, epoch));
                }
            }
            out
        };
        for i in 0..10 {
            append(&format!("a{i}"));
        }
        let mut future = p.open_future(Path::new("/e")).unwrap();
        // Rounds of one batch each until caught up.
        let mut rounds = 0;
        while !p.copy_to_future(&mut future, 1).unwrap() {
            rounds += 1;
        }
        assert_eq!(rounds, 9, "one batch a round, caught up at the tenth");
        assert_eq!(future.log_end_offset(), Offset::new(10));
        // Appends go on; the swap copies them too.
        for i in 10..15 {
            append(&format!("a{i}"));
        }
        let before = values(&p);
        assert_eq!(before.len(), 15);
        let doomed = p.swap_in_future(future).unwrap();
        assert_eq!(p.dir(), PathBuf::from("/e/t-0"));
        assert!(doomed.to_string_lossy().starts_with("/d/t-0."));
        assert!(doomed.to_string_lossy().ends_with(DELETE_SUFFIX));
        assert_eq!(values(&p), before, "same records, offsets and epochs");
        assert_eq!(append("b"), Offset::new(15));
        assert_eq!(values(&p).last().unwrap(), &(15, "b".to_string(), 3));

        // A truncation while a copy is being taken (the replica followed a
        // new leader whose log diverged): the copy starts again and holds
        // the log as it is after the truncation.
        let b2 = BrokerId::new(2);
        let following = ReplicaState {
            leader_epoch: LeaderEpoch::new(4),
            partition_epoch: PartitionEpoch::new(1),
            replicas: vec![b1, b2],
            isr: vec![b1, b2],
            leader: Some(b2),
            metadata_offset: 0,
        };
        p.apply_registration(following, config, &|_| true, b1);
        let mut future = p.open_future(Path::new("/f")).unwrap();
        while !p.copy_to_future(&mut future, 1 << 20).unwrap() {}
        assert!(p
            .truncate_as_follower(LeaderEpoch::new(4), Offset::new(12))
            .unwrap());
        assert!(
            matches!(p.swap_in_future(future), Err(move_dir::SwapError::Stale(_))),
            "a copy from before the truncation is not swapped in"
        );
        let mut future = p.open_future(Path::new("/f")).unwrap();
        while !p.copy_to_future(&mut future, 1 << 20).unwrap() {}
        p.swap_in_future(future).unwrap();
        assert_eq!(values(&p), before[..12].to_vec());
    }

    /// A leader removed from its partition's replicas (a reassignment
    /// completed) deletes its copy: an acks=all produce waiting for a
    /// follower is answered NOT_LEADER_OR_FOLLOWER at once, not at its
    /// timeout, so the producer retries on the new leader.
    #[tokio::test]
    async fn deleting_a_leader_answers_its_waiting_produces() {
        let (b1, b2) = (BrokerId::new(1), BrokerId::new(2));
        let replica = ReplicaState {
            leader_epoch: LeaderEpoch::new(1),
            partition_epoch: PartitionEpoch::ZERO,
            replicas: vec![b1, b2],
            isr: vec![b1, b2],
            leader: Some(b1),
            metadata_offset: 0,
        };
        let (p, config) = in_memory(replica.clone());
        p.apply_registration(replica, config, &|_| true, b1);
        let records = Bytes::from(encode_records(
            &[(None, Some(Bytes::from_static(b"v")), 1_000)],
            -1,
            -1,
            -1,
            Compression::None,
        ));
        let outcome = p.append(&records, Acks::All, 9).unwrap();
        let p = Arc::new(p);
        let waiter = {
            let p = p.clone();
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
                p.wait_for_ack(&outcome, deadline).await
            })
        };
        tokio::task::yield_now().await;
        p.mark_deleted();
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("answered before its timeout")
            .unwrap();
        assert_eq!(answer, Err(ErrorCode::NotLeaderOrFollower));
    }

    /// An answer to an older fetch (the follower's log has moved on since)
    /// changes nothing, even one that says the logs diverge. (Found by the
    /// simulation: a reordered diverging answer cut a follower below the HW
    /// after it had rejoined the ISR.)
    #[test]
    fn a_stale_fetch_answer_is_ignored() {
        let (b1, b2) = (BrokerId::new(1), BrokerId::new(2));
        let epoch = LeaderEpoch::new(1);
        let replica = ReplicaState {
            leader_epoch: epoch,
            partition_epoch: PartitionEpoch::ZERO,
            replicas: vec![b1, b2],
            isr: vec![b1, b2],
            leader: Some(b2),
            metadata_offset: 0,
        };
        let (p, config) = in_memory(replica.clone());
        assert!(
            p.apply_registration(replica, config, &|_| true, b1),
            "follows 2"
        );
        let answer = |diverging: (i32, i64)| rules::FetchedPartition {
            error: None,
            diverging_epoch: DivergingEpoch::from_wire(diverging.0, diverging.1),
            high_watermark: Some(Offset::new(3)),
            log_start_offset: Some(Offset::ZERO),
        };
        let o = Offset::new;
        let mut records = Vec::new();
        for offset in 0..3 {
            let mut b = encode_records_txn(
                &[(None, Some(Bytes::from_static(b"v")), 1_000)],
                -1,
                -1,
                -1,
                Compression::None,
                false,
            );
            assign_offset_and_epoch(&mut b, offset, 1);
            records.extend_from_slice(&b);
        }
        assert!(p
            .apply_fetched(epoch, o(0), &answer((-1, -1)), &records)
            .unwrap());
        assert_eq!(p.offsets().log_end_offset, o(3));
        // The answer to a fetch made at offset 1 arrives late.
        assert!(!p.apply_fetched(epoch, o(1), &answer((0, 1)), &[]).unwrap());
        assert_eq!(p.offsets().log_end_offset, o(3), "nothing truncated");
        // The answer to the current fetch does apply.
        assert!(p.apply_fetched(epoch, o(3), &answer((1, 2)), &[]).unwrap());
        assert_eq!(p.offsets().log_end_offset, o(2));
    }

    /// A follower indexes abort markers as it appends them; after a
    /// truncation below a marker the rebuilt state has the transaction open
    /// again and the index no longer lists it; replaying the same batches
    /// again indexes it once.
    #[test]
    fn follower_markers_truncation_and_replay_agree() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
        let mut producers = ProducerStateManager::new();
        let batches = [
            txn_data(1, 0, 0),
            txn_data(2, 0, 1),
            marker(1, ControlType::Abort, 2),
            marker(2, ControlType::Commit, 3),
        ];
        for b in &batches {
            follow(&mut log, &mut producers, b);
        }
        let (o, pid) = (Offset::new, ProducerId::new);
        let entry = AbortedTxn {
            producer_id: pid(1),
            first_offset: o(0),
            last_offset: o(2),
            last_stable_offset: o(1),
        };
        assert_eq!(log.aborted_txns(), vec![entry]);
        assert_eq!(log.collect_aborted_txns(o(0), o(4)), vec![(pid(1), o(0))]);
        producers.on_high_watermark(o(4));
        assert_eq!(producers.last_stable_offset(o(4)), o(4));
        assert_eq!(producers.entry(pid(1)).unwrap().coordinator_epoch, 3);

        // Replay of the whole log (no snapshot) re-derives the same entry once.
        let replayed = rebuild_producer_state(&mut log);
        assert_eq!(log.aborted_txns(), vec![entry]);
        assert_eq!(replayed.entry(pid(1)).unwrap().coordinator_epoch, 3);
        assert_eq!(
            replayed.first_unstable_offset(),
            Some(o(0)),
            "until the HW passes the markers"
        );

        // Truncate below the abort marker: the transaction is open again.
        log.truncate_to(o(2)).unwrap();
        let mut producers = rebuild_producer_state(&mut log);
        assert!(log.aborted_txns().is_empty());
        assert_eq!(
            producers.entry(pid(1)).unwrap().current_txn_first_offset,
            Some(o(0))
        );
        producers.on_high_watermark(o(2));
        assert_eq!(producers.last_stable_offset(o(2)), o(0));
        // The leader's log again: same entry, once.
        follow(&mut log, &mut producers, &batches[2]);
        follow(&mut log, &mut producers, &batches[3]);
        assert_eq!(log.aborted_txns(), vec![entry]);
    }
}

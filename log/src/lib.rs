//! One partition's durable log.
//!
//! # On-disk layout
//!
//! A partition directory holds:
//!
//! * `<base>.log` — a segment: record batches (magic v2) stored byte-for-byte as
//!   the client encoded them, except that a leader's append writes its own
//!   base offset and partition leader epoch (outside the CRC) into each
//!   batch's header, and LogAppendTime stamping rewrites the attributes, max
//!   timestamp and CRC there (the records after the header are written from
//!   the client's bytes). `<base>` is the
//!   segment's base offset as 20 zero-padded decimal digits.
//! * `<base>.index` — sparse offset index: big-endian `(relative offset u32,
//!   file position u32)` entries, one per `index_interval_bytes` of log, pointing
//!   at the start of a batch whose base offset is `base + relative offset`.
//! * `<base>.timeindex` — sparse time index: `(timestamp i64, relative offset
//!   u32)` entries with strictly increasing timestamps: the largest batch max
//!   timestamp seen so far and the last offset of the batch that first reached it.
//! * `<base>.txnindex` — aborted-transaction index (see [`txn_index`]): one
//!   34-byte entry per transaction aborted by a marker in this segment,
//!   created on the first one. Truncation, recovery and segment deletion take
//!   its entries (or the file) with the markers they describe.
//! * `leader-epoch-checkpoint` (Kafka's text format `0\n<n>\n<epoch> <offset>\n…`),
//!   `high-watermark`, `log-start-offset`, `recovery-point` (`0\n<value>\n`).
//! * `<offset>.snapshot` — opaque producer-state snapshots (the latest two kept).
//! * `.kafka_cleanshutdown` — present only between a clean `close` and the next
//!   `open`.
//!
//! Every small file is written to `<name>.tmp`, fsynced, renamed over `<name>`,
//! and the directory is fsynced. Index files are plain append-only files whose
//! entries are also held in memory; lookups binary-search them.
//!
//! # Recovery rule
//!
//! At `open`, stray `*.tmp` files and index files without a `.log` are removed.
//! Without the clean-shutdown marker, every segment from the one containing the
//! persisted recovery point (the offset below which everything was fsynced: the
//! log is flushed on every roll, on `flush` and at `close`) to the last one is
//! scanned from its start: each batch must parse as magic v2, fit in the file,
//! pass its CRC32C, and have a base offset at or above the previous batch's next
//! offset. The segment is truncated at the first byte that fails (torn write,
//! flipped bits, garbage or zero fill), its indexes are rebuilt from the valid
//! batches, and any later segment is deleted (it cannot follow a hole). Other
//! segments (and all segments after a clean shutdown) only have their indexes
//! checked (whole entries, strictly increasing, positions inside the file) and
//! the batches after the last index entry walked; any mismatch sends the segment
//! through the same full recovery. A missing index file is rebuilt the same way,
//! and an empty last segment (a crash during a roll) is simply kept. Afterwards
//! the log end offset is the end of the last valid batch, the log start offset is
//! `max(checkpoint, first segment base)`, the leader-epoch cache is trimmed to
//! `[log start, LEO)`, producer snapshots above the LEO are deleted, recovered
//! segments are fsynced and the recovery point is set to the LEO. Nothing read
//! from disk can cause a panic: bad data is truncated or reported as
//! [`LogError::Corrupt`].
//!
//! Segment age for `log.roll.ms` is measured from when the segment was created
//! or loaded (wall clock), not from the first batch's timestamp, so clients with
//! skewed clocks cannot force a roll on every append.
//!
//! # Types
//!
//! The API speaks `strand_types`: offsets are [`Offset`], leader epochs
//! [`LeaderEpoch`], producer ids [`ProducerId`]; where Kafka answers -1 ("no
//! such epoch", "no offset") it is `None`. Timestamps stay `i64` (-1 = none).
//! The files keep Kafka's integers (bytes unchanged): values are converted
//! where they are read and written. A negative value, which is never
//! written, is treated as missing in the HW, log-start and recovery-point
//! checkpoints (as before: they are clamped), as malformed in the
//! leader-epoch checkpoint, and as the end of the valid entries in an
//! aborted-transaction index. Segments and their offset and time indexes
//! count in integers inside the crate (the indexes relative to the segment's
//! base).
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod cleaner;
pub mod epoch;
pub mod index;
pub mod storage;
pub mod txn_index;

mod checkpoint;
mod error;
mod segment;

pub use error::LogError;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use storage::FileSlice;
use storage::{FileStorage, Storage};

use bytes::Bytes;
use segment::{parse_base, Batches};
use strand_protocol::batch::{
    assign_offset_and_epoch, stamp_log_append_time_split, BatchHeader, BATCH_HEADER_LEN,
};
use strand_protocol::record_count;
use strand_types::{Clock, LeaderEpoch, Offset, ProducerId, SystemClock};

use crate::epoch::EpochCache;
use crate::segment::{Segment, Stop};
pub use crate::txn_index::AbortedTxn;

const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
const EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const HW_CHECKPOINT_FILE: &str = "high-watermark";
const LOG_START_CHECKPOINT_FILE: &str = "log-start-offset";
const RECOVERY_POINT_FILE: &str = "recovery-point";
const SNAPSHOT_SUFFIX: &str = ".snapshot";
/// Producer snapshots kept on disk.
const SNAPSHOTS_KEPT: usize = 2;

/// Per-partition log configuration (topic configs, Kafka names in comments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes` / `log.segment.bytes`.
    pub segment_bytes: u64,
    /// `segment.ms` / `log.roll.ms`.
    pub segment_ms: i64,
    /// `retention.ms`; -1 = unlimited.
    pub retention_ms: i64,
    /// `retention.bytes`; -1 = unlimited.
    pub retention_bytes: i64,
    /// `index.interval.bytes`.
    pub index_interval_bytes: u64,
    /// `segment.index.bytes`: maximum size of an index file.
    pub segment_index_bytes: u64,
    /// `flush.messages`: fsync after this many unflushed messages.
    pub flush_interval_messages: u64,
    /// `flush.ms`: fsync when the last flush is older than this.
    pub flush_interval_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            index_interval_bytes: 4096,
            segment_index_bytes: 10 * 1024 * 1024,
            flush_interval_messages: u64::MAX,
            flush_interval_ms: i64::MAX,
        }
    }
}

/// Result of an append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: Offset,
    pub last_offset: Offset,
    /// Largest batch max timestamp appended (-1 if none).
    pub max_timestamp: i64,
    /// Offset associated with `max_timestamp` (the batch's last offset for
    /// CreateTime, the first offset for LogAppendTime); `None` (Kafka's -1)
    /// when no batch carries a timestamp.
    pub offset_of_max_timestamp: Option<Offset>,
    /// The stamped LogAppendTime, -1 unless stamped.
    pub log_append_time: i64,
    pub log_start_offset: Offset,
    /// The headers of the batches as written (offsets assigned).
    pub batches: Vec<BatchHeader>,
}

/// Result of a read: whole batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    pub records: Bytes,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
}

/// Result of [`PartitionLog::read_slices`]: whole batches, as file slices.
#[derive(Debug, Clone)]
pub struct FileSlices {
    pub slices: Vec<FileSlice>,
    /// The slices' total length.
    pub len: usize,
    /// The offset after the last batch, `None` when nothing was read.
    pub next_offset: Option<Offset>,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
}

impl FileSlices {
    /// The batches' bytes, read from the files.
    pub fn to_bytes(&self) -> Result<Bytes, LogError> {
        if self.slices.is_empty() {
            return Ok(Bytes::new());
        }
        let mut out = Vec::with_capacity(self.len);
        for s in &self.slices {
            s.read_into(&mut out)?;
        }
        Ok(Bytes::from(out))
    }
}

/// The durable log of one partition. Not internally synchronised: callers hold
/// it behind a lock (`read` and the other `&self` methods only use positional
/// reads, so they may run concurrently with each other).
pub struct PartitionLog {
    storage: Arc<dyn Storage>,
    /// Segment creation times (for log.roll.ms), batch append times and
    /// flush intervals read this clock, never the system's directly.
    clock: Arc<dyn Clock>,
    dir: PathBuf,
    config: LogConfig,
    /// By base offset (segments count in integers: see `log_offset`).
    segments: BTreeMap<i64, Segment>,
    log_start: Offset,
    leo: Offset,
    hw: Offset,
    recovery_point: Offset,
    /// The recovery point last written to disk (may lag `recovery_point`);
    /// `None` until the first write at open.
    persisted_recovery_point: Option<Offset>,
    epochs: EpochCache,
    last_flush_ms: i64,
    /// Set when any write, fsync or checkpoint failed: every later write and
    /// flush is refused until the log is reopened (and recovered), as Kafka
    /// takes a failed log dir offline. Never retried: after a failed fsync
    /// the page cache may have dropped the data, and a second fsync that
    /// succeeds would be believed.
    failed: bool,
    /// Told of the first I/O error (the owner takes the directory offline).
    on_failure: Option<FailureListener>,
    /// Told how long each flush with something to flush took (the broker's
    /// log flush metric).
    on_flush: Option<FlushListener>,
    /// Set by the owner when the directory holding this log went offline
    /// (another log there failed): this one then refuses writes too.
    dir_offline: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Moves whenever a segment is deleted or truncated: a cleaner pass
    /// planned at another generation is not committed.
    generation: u64,
    /// Moves whenever the log is truncated (its end goes back): a copy of
    /// the log taken at another count may diverge from it.
    truncations: u64,
    /// Where the last cleaner pass ended (the first dirty offset).
    cleaner_checkpoint: Option<Offset>,
    /// The latest delete horizon the cleaner left in a batch.
    latest_delete_horizon: Option<i64>,
}

/// Called with the log's directory and the error of the first failed write,
/// fsync or checkpoint.
pub type FailureListener = std::sync::Arc<dyn Fn(&Path, &io::Error) + Send + Sync>;

/// Hears how long a flush took (only flushes with unflushed data).
pub type FlushListener = std::sync::Arc<dyn Fn(std::time::Duration) + Send + Sync>;

/// An offset read from the log's segments (a base, a batch's offset, a
/// segment's end): never negative. Segment bases are 20-digit file names or
/// the log's own offsets, and a segment holds only batches at or above its
/// base with increasing offsets (appends and recovery check both).
fn log_offset(offset: i64) -> Offset {
    debug_assert!(offset >= 0, "offset {offset} in a segment");
    Offset::new(offset)
}

/// Checks that `headers` describe `records` exactly, in order.
fn check_layout(records: &[u8], headers: &[BatchHeader]) -> Result<(), LogError> {
    if headers.is_empty() {
        return Err(LogError::InvalidRecords("no batches".into()));
    }
    let mut pos = 0usize;
    for h in headers {
        if h.last_offset_delta < 0 || h.batch_length < 0 {
            return Err(LogError::InvalidRecords(format!("bad batch header {h:?}")));
        }
        let size = h.total_size();
        match records.get(pos..pos + size) {
            Some(b) if BatchHeader::parse(b).is_ok_and(|p| p.batch_length == h.batch_length) => {}
            _ => {
                return Err(LogError::InvalidRecords(
                    "headers do not match the record bytes".into(),
                ))
            }
        }
        pos += size;
    }
    if pos != records.len() {
        return Err(LogError::InvalidRecords(format!(
            "{} trailing bytes after the last batch",
            records.len() - pos
        )));
    }
    Ok(())
}

impl PartitionLog {
    /// Opens the log in `dir` (created if missing), recovering it if the last
    /// shutdown was not clean. See the crate docs for the recovery rule.
    pub fn open(dir: &Path, config: LogConfig) -> Result<PartitionLog, LogError> {
        Self::open_in(FileStorage::shared(), SystemClock::shared(), dir, config)
    }

    /// [`PartitionLog::open`] on the given storage and clock.
    pub fn open_in(
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        dir: &Path,
        config: LogConfig,
    ) -> Result<PartitionLog, LogError> {
        storage.create_dir_all(dir)?;
        cleaner::complete_interrupted(&*storage, dir)?;
        let now = clock.now_ms();
        let interval = config.index_interval_bytes;
        let clean = storage.exists(&dir.join(CLEAN_SHUTDOWN_FILE));

        let mut bases = Vec::new();
        let mut index_files = Vec::new();
        for path in storage.list_dir(dir)? {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.ends_with(".tmp") {
                storage.remove_if_exists(&path)?;
            } else if let Some(base) = name.strip_suffix(".log").and_then(parse_base) {
                bases.push(base);
            } else if let Some(base) = name
                .strip_suffix(".index")
                .or_else(|| name.strip_suffix(".timeindex"))
                .or_else(|| name.strip_suffix(".txnindex"))
                .and_then(parse_base)
            {
                index_files.push((base, path.clone()));
            }
        }
        bases.sort_unstable();
        for (base, path) in index_files {
            if bases.binary_search(&base).is_err() {
                tracing::info!(path = %path.display(), "removing index file without a segment");
                storage.remove_if_exists(&path)?;
            }
        }

        let ckpt_log_start =
            checkpoint::read_value(&*storage, &dir.join(LOG_START_CHECKPOINT_FILE))?;
        let recovery_point = if clean {
            i64::MAX
        } else {
            // A damaged recovery point only widens the scan.
            checkpoint::read_value(&*storage, &dir.join(RECOVERY_POINT_FILE))
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        // A negative value (never written) counts as missing: 0, clamped below.
        let hw_on_disk = checkpoint::read_value(&*storage, &dir.join(HW_CHECKPOINT_FILE))?;
        let hw = hw_on_disk
            .and_then(Offset::from_wire)
            .unwrap_or(Offset::ZERO);
        let mut epochs = EpochCache::new(checkpoint::read_epochs(
            &*storage,
            &dir.join(EPOCH_CHECKPOINT_FILE),
        )?);
        let mut epochs_rebuilt = false;

        let mut segments = BTreeMap::new();
        // A log created now (no segment, no log-start checkpoint) is empty:
        // every checkpoint's missing-file default (log start and recovery
        // point 0) already describes it, and losing its empty segment file
        // in a crash loses nothing, so it is opened without a write or an
        // fsync (a broker creating 10,000 partitions would otherwise spend
        // a dozen fsyncs on each).
        let new_log = bases.is_empty() && ckpt_log_start.is_none();
        if bases.is_empty() {
            let base = ckpt_log_start.unwrap_or(0).max(0);
            segments.insert(base, Segment::open(&storage, dir, base, true, now)?);
        } else {
            let recover_from = if clean {
                i64::MAX
            } else {
                bases
                    .iter()
                    .rev()
                    .find(|b| **b <= recovery_point)
                    .copied()
                    .unwrap_or(bases[0])
            };
            let mut prev_next: Option<i64> = None;
            let mut drop_rest = false;
            for (i, &base) in bases.iter().enumerate() {
                let seg = Segment::open(&storage, dir, base, false, now)?;
                if drop_rest || prev_next.is_some_and(|n| base < n) {
                    tracing::warn!(segment = %seg.log_path().display(), "deleting segment after a recovered hole");
                    seg.delete_files()?;
                    drop_rest = true;
                    continue;
                }
                let mut seg = seg;
                let cut = if base >= recover_from {
                    let cut = seg.recover(interval)?;
                    // The checkpoint may lag the batches (written after an
                    // append that reached the page cache, or failed): epochs
                    // of recovered batches it lacks are added, as in
                    // Kafka's segment recovery.
                    // Only epochs above the latest known: an earlier one's
                    // batches start where the cache says, not at the first
                    // batch of this segment.
                    // A batch without an epoch (-1) adds none, as in Kafka.
                    seg.walk(0, |_, h| {
                        if let Some(epoch) = LeaderEpoch::from_wire(h.partition_leader_epoch) {
                            if epochs.latest_epoch().is_none_or(|latest| epoch > latest) {
                                epochs_rebuilt |= epochs.assign(epoch, log_offset(h.base_offset));
                            }
                        }
                        Ok(true)
                    })?;
                    cut
                } else {
                    seg.load(interval)?
                };
                if cut > 0 && i + 1 < bases.len() {
                    drop_rest = true;
                }
                prev_next = Some(seg.next_offset);
                segments.insert(base, seg);
            }
        }

        let mut log = PartitionLog {
            storage: storage.clone(),
            clock,
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start: Offset::ZERO,
            leo: Offset::ZERO,
            hw,
            recovery_point: Offset::ZERO,
            persisted_recovery_point: None,
            epochs,
            last_flush_ms: now,
            failed: false,
            on_failure: None,
            on_flush: None,
            dir_offline: None,
            generation: 0,
            truncations: 0,
            // A damaged checkpoint only makes the next pass read more.
            cleaner_checkpoint: checkpoint::read_value(
                &*storage,
                &dir.join(cleaner::CHECKPOINT_FILE),
            )
            .ok()
            .flatten()
            .and_then(Offset::from_wire),
            latest_delete_horizon: None,
        };
        log.leo = log_offset(log.active().next_offset);
        let first_base = log.first_base();
        log.log_start = log_offset(ckpt_log_start.unwrap_or(first_base).max(first_base));
        if log.log_start > log.leo {
            let start = log.log_start;
            log.truncate_fully_and_start_at(start)?;
        } else {
            log.delete_segments_below_log_start()?;
        }
        if ckpt_log_start != Some(log.log_start.get()) && !new_log {
            log.write_log_start()?;
        }
        let mut changed = epochs_rebuilt;
        changed |= log.epochs.truncate_from_end(log.leo);
        changed |= log.epochs.truncate_from_start(log.log_start);
        if changed {
            log.write_epochs()?;
        }
        // Rewritten when clamped, or when the file held a negative value.
        let clamped = log.hw.clamp(log.log_start, log.leo);
        if clamped.get() != hw_on_disk.unwrap_or(0) {
            checkpoint::write_value(&*storage, &dir.join(HW_CHECKPOINT_FILE), clamped.get())?;
            log.hw = clamped;
        }
        log.delete_snapshots_above(log.leo)?;
        if new_log {
            debug_assert!(log.leo == Offset::ZERO && log.log_start == Offset::ZERO);
            log.recovery_point = log.leo;
            // A clean-shutdown marker left without a log must not vouch for
            // what this one writes before its next clean close.
            if storage.exists(&dir.join(CLEAN_SHUTDOWN_FILE)) {
                storage.remove_file(&dir.join(CLEAN_SHUTDOWN_FILE))?;
                storage.sync_dir(dir)?;
            }
            return Ok(log);
        }
        for seg in log.segments.values_mut() {
            seg.flush()?;
        }
        let leo = log.leo;
        log.set_recovery_point(leo, true)?;
        storage.remove_if_exists(&dir.join(CLEAN_SHUTDOWN_FILE))?;
        storage.sync_dir(dir)?;
        Ok(log)
    }

    /// Registers who is told how long each flush took.
    pub fn set_flush_listener(&mut self, listener: Option<FlushListener>) {
        self.on_flush = listener;
    }

    pub fn flush_listener(&self) -> Option<FlushListener> {
        self.on_flush.clone()
    }

    /// Registers who is told of the first I/O error.
    pub fn set_failure_listener(&mut self, listener: FailureListener) {
        self.on_failure = Some(listener);
    }

    /// Shares the flag that says the log's directory is offline: once it is
    /// set, every write is refused as if this log had failed.
    pub fn set_dir_offline_flag(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.dir_offline = Some(flag);
    }

    /// Whether an I/O error has taken this log offline.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Runs a write: refused once the log has failed; an I/O error fails it
    /// (and tells the listener once).
    fn guarded<T>(
        &mut self,
        op: impl FnOnce(&mut Self) -> Result<T, LogError>,
    ) -> Result<T, LogError> {
        let dir_offline = self
            .dir_offline
            .as_ref()
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire));
        if self.failed || dir_offline {
            return Err(LogError::Io(io::Error::other(
                "an earlier write, fsync or checkpoint in this log directory failed; it is offline until the broker restarts and recovers it",
            )));
        }
        let result = op(self);
        if let Err(LogError::Io(e)) = &result {
            self.failed = true;
            if let Some(listener) = &self.on_failure {
                listener(&self.dir, e);
            }
        }
        result
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Replaces the configuration (topic configs can change at runtime).
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Base offset of the first segment.
    fn first_base(&self) -> i64 {
        *self
            .segments
            .keys()
            .next()
            .expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Effective segment size limit (positions are u32, Kafka caps at i32::MAX).
    fn segment_limit(&self) -> u64 {
        self.config.segment_bytes.clamp(1, i32::MAX as u64)
    }

    /// Appends batches from a produce request as the leader: assigns offsets from
    /// the LEO and `leader_epoch` in a copy of each batch's header (`records`
    /// is not changed), stamps LogAppendTime when given,
    /// rolls if needed, writes, indexes, updates the epoch cache, and flushes
    /// per `flush_interval_messages`.
    pub fn append_as_leader(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
        leader_epoch: LeaderEpoch,
        log_append_time_ms: Option<i64>,
    ) -> Result<AppendInfo, LogError> {
        let now = self.clock.now_ms();
        self.append_as_leader_at(records, headers, leader_epoch, log_append_time_ms, now)
    }

    /// `append_as_leader` with an explicit wall clock (for roll-by-time).
    pub fn append_as_leader_at(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
        leader_epoch: LeaderEpoch,
        log_append_time_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.guarded(|log| {
            log.append_as_leader_at_unguarded(
                records,
                headers,
                leader_epoch,
                log_append_time_ms,
                now_ms,
            )
        })
    }

    fn append_as_leader_at_unguarded(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
        leader_epoch: LeaderEpoch,
        log_append_time_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        check_layout(records, headers)?;
        let first = self.leo;
        let mut offset = first.get();
        let mut pos = 0usize;
        // The leader's fields go into a copy of each header only: the
        // records after it are written from the client's bytes.
        let mut heads = Vec::with_capacity(headers.len());
        let mut assigned = Vec::with_capacity(headers.len());
        let mut max_ts = -1i64;
        let mut offset_of_max = -1i64;
        for h in headers {
            let size = h.total_size();
            let (head_bytes, rest) = records[pos..pos + size].split_at(BATCH_HEADER_LEN);
            let mut head = [0u8; BATCH_HEADER_LEN];
            head.copy_from_slice(head_bytes);
            assign_offset_and_epoch(&mut head, offset, leader_epoch.get());
            if let Some(t) = log_append_time_ms {
                stamp_log_append_time_split(&mut head, rest, h, t);
            }
            let nh =
                BatchHeader::parse(&head).map_err(|e| LogError::InvalidRecords(e.to_string()))?;
            if nh.max_timestamp > max_ts {
                max_ts = nh.max_timestamp;
                offset_of_max = if log_append_time_ms.is_some() {
                    nh.base_offset
                } else {
                    nh.last_offset()
                };
            }
            offset = nh.next_offset();
            pos += size;
            heads.push(head);
            assigned.push(nh);
        }
        self.append_batches(
            Batches::WithHeads {
                records,
                heads: &heads,
            },
            &assigned,
            now_ms,
        )?;
        Ok(AppendInfo {
            first_offset: first,
            // At least one batch (checked), none empty: at or past `first`.
            last_offset: log_offset(offset - 1),
            max_timestamp: max_ts,
            offset_of_max_timestamp: Offset::from_wire(offset_of_max),
            log_append_time: log_append_time_ms.unwrap_or(-1),
            log_start_offset: self.log_start,
            batches: assigned,
        })
    }

    /// Appends batches fetched from the leader, keeping their offsets and epochs.
    /// The first base offset must be at or above the LEO and offsets must
    /// increase; otherwise `UnexpectedAppendOffset` / `InvalidRecords`.
    pub fn append_as_follower(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
    ) -> Result<AppendInfo, LogError> {
        self.guarded(|log| log.append_as_follower_unguarded(records, headers))
    }

    fn append_as_follower_unguarded(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
    ) -> Result<AppendInfo, LogError> {
        check_layout(records, headers)?;
        let Some(first_offset) = Offset::from_wire(headers[0].base_offset) else {
            return Err(LogError::InvalidRecords(format!(
                "negative base offset {}",
                headers[0].base_offset
            )));
        };
        if first_offset < self.leo {
            return Err(LogError::UnexpectedAppendOffset {
                first_offset,
                log_end: self.leo,
            });
        }
        let mut max_ts = -1i64;
        let mut offset_of_max = -1i64;
        let mut next = self.leo.get();
        for h in headers {
            if h.base_offset < next {
                return Err(LogError::InvalidRecords(format!(
                    "offsets not increasing: batch at {} after {}",
                    h.base_offset, next
                )));
            }
            next = h.next_offset();
            if h.max_timestamp > max_ts {
                max_ts = h.max_timestamp;
                offset_of_max = h.last_offset();
            }
        }
        let now = self.clock.now_ms();
        self.append_batches(Batches::Whole(records), headers, now)?;
        Ok(AppendInfo {
            first_offset,
            // Offsets increase from `first_offset` (checked), no batch empty.
            last_offset: log_offset(next - 1),
            max_timestamp: max_ts,
            offset_of_max_timestamp: Offset::from_wire(offset_of_max),
            log_append_time: -1,
            log_start_offset: self.log_start,
            batches: headers.to_vec(),
        })
    }

    fn append_batches(
        &mut self,
        records: Batches<'_>,
        headers: &[BatchHeader],
        now_ms: i64,
    ) -> Result<(), LogError> {
        self.append_batches_inner(records, headers, now_ms)
    }

    fn append_batches_inner(
        &mut self,
        records: Batches<'_>,
        headers: &[BatchHeader],
        now_ms: i64,
    ) -> Result<(), LogError> {
        let last_offset = headers
            .last()
            .map(|h| h.last_offset())
            .unwrap_or(self.leo.get());
        let limit = self.segment_limit();
        let (segment_ms, index_bytes, interval) = (
            self.config.segment_ms,
            self.config.segment_index_bytes,
            self.config.index_interval_bytes,
        );
        let seg = self.active();
        let should_roll = seg.size > 0
            && (seg.size + records.len() as u64 > limit
                || now_ms.saturating_sub(seg.created_ms) > segment_ms
                || seg.index_full(index_bytes)
                || !seg.can_hold(last_offset));
        if should_roll {
            self.roll(now_ms)?;
        }
        let seg = self.active_mut();
        if !seg.can_hold(last_offset) || seg.size + records.len() as u64 > u32::MAX as u64 {
            return Err(LogError::InvalidRecords(format!(
                "batches up to offset {last_offset} do not fit segment {}",
                seg.base
            )));
        }
        seg.append(records, headers, interval)?;
        self.leo = log_offset(last_offset + 1);
        let mut changed = false;
        for h in headers {
            // A batch without an epoch (-1) adds none, as in Kafka.
            if let Some(epoch) = LeaderEpoch::from_wire(h.partition_leader_epoch) {
                changed |= self.epochs.assign(epoch, log_offset(h.base_offset));
            }
        }
        if changed {
            self.write_epochs()?;
        }
        if self.leo.since(self.recovery_point).max(0) as u64 >= self.config.flush_interval_messages
        {
            self.flush_at(now_ms)?;
        }
        Ok(())
    }

    /// Closes the active segment (final time-index entry, fsync) and starts a
    /// new one at the LEO. A no-op when the active segment is empty.
    fn roll(&mut self, now_ms: i64) -> Result<(), LogError> {
        let leo = self.leo;
        let seg = self.active_mut();
        if seg.size == 0 {
            return Ok(());
        }
        seg.maybe_append_time_entry()?;
        seg.flush()?;
        let new = Segment::open(&self.storage, &self.dir, leo.get(), true, now_ms)?;
        self.storage.sync_dir(&self.dir)?;
        tracing::debug!(dir = %self.dir.display(), base = %leo, "rolled a new log segment");
        self.segments.insert(leo.get(), new);
        self.set_recovery_point(leo, true)?;
        Ok(())
    }

    /// Time-based roll for idle partitions (`segment_ms`).
    pub fn maybe_roll(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.guarded(|log| log.maybe_roll_unguarded(now_ms))
    }

    fn maybe_roll_unguarded(&mut self, now_ms: i64) -> Result<(), LogError> {
        let seg = self.active();
        if seg.size > 0 && now_ms.saturating_sub(seg.created_ms) > self.config.segment_ms {
            self.roll(now_ms)?;
        }
        Ok(())
    }

    /// Whole batches from the one containing `fetch_offset` (which may start
    /// before it), stopping before any batch whose last offset is `>= max_offset`,
    /// within `max_bytes` except that with `min_one` the first batch is returned
    /// whole. `fetch_offset` outside `[log start, LEO]` is `OffsetOutOfRange`.
    pub fn read(
        &self,
        fetch_offset: Offset,
        max_bytes: usize,
        max_offset: Offset,
        min_one: bool,
    ) -> Result<ReadResult, LogError> {
        let slices = self.read_slices(fetch_offset, max_bytes, max_offset, min_one)?;
        Ok(ReadResult {
            records: slices.to_bytes()?,
            log_start_offset: slices.log_start_offset,
            log_end_offset: slices.log_end_offset,
        })
    }

    /// What [`read`](Self::read) returns, as slices of the segment files
    /// instead of their bytes: the batches are not read here, and a fetch
    /// response sends them from the files (`sendfile`). The bytes under
    /// the slices never change while they are handed out below the HW
    /// (the log only appends there); a slice keeps its file open.
    pub fn read_slices(
        &self,
        fetch_offset: Offset,
        max_bytes: usize,
        max_offset: Offset,
        min_one: bool,
    ) -> Result<FileSlices, LogError> {
        if fetch_offset < self.log_start || fetch_offset > self.leo {
            return Err(self.out_of_range(fetch_offset));
        }
        let max_offset = max_offset.min(self.leo).get();
        let mut out = FileSlices {
            slices: Vec::new(),
            len: 0,
            next_offset: None,
            log_start_offset: self.log_start,
            log_end_offset: self.leo,
        };
        if fetch_offset.get() >= max_offset {
            return Ok(out);
        }
        let start_base = self.floor_base(fetch_offset);
        let mut first_seg = true;
        for seg in self.segments.range(start_base..).map(|(_, s)| s) {
            let start = if first_seg {
                first_seg = false;
                match seg.find_batch(fetch_offset.get())? {
                    Some((pos, _)) => pos,
                    None => continue,
                }
            } else {
                0
            };
            let taken = out.len;
            // Whole batches up to the index entry nearest the limits need
            // no header read.
            let (skip, mut next_offset) = seg.skip_to(
                start,
                start.saturating_add(max_bytes.saturating_sub(taken) as u64),
                max_offset,
            );
            let mut end = skip;
            let mut done = false;
            let (_, stop) = seg.walk(skip, |pos, h| {
                if h.last_offset() >= max_offset {
                    done = true;
                    return Ok(false);
                }
                let size = h.total_size();
                let first_batch = taken == 0 && end == start;
                if taken + (end - start) as usize + size > max_bytes && !(min_one && first_batch) {
                    done = true;
                    return Ok(false);
                }
                end = pos + size as u64;
                next_offset = Some(h.next_offset());
                Ok(true)
            })?;
            if matches!(stop, Stop::Invalid | Stop::Incomplete) {
                return Err(seg.corrupt(stop));
            }
            if end > start {
                let len = (end - start) as usize;
                out.slices.push(seg.slice(start, len));
                out.len += len;
                out.next_offset = next_offset.map(Offset::new);
            }
            if done {
                break;
            }
        }
        Ok(out)
    }

    fn out_of_range(&self, offset: Offset) -> LogError {
        LogError::OffsetOutOfRange {
            offset,
            log_start: self.log_start,
            log_end: self.leo,
        }
    }

    /// Base offset of the segment that would hold `offset` (the first segment if
    /// the offset is below all of them).
    fn floor_base(&self, offset: Offset) -> i64 {
        self.segments
            .range(..=offset.get())
            .next_back()
            .or_else(|| self.segments.iter().next())
            .map(|(b, _)| *b)
            .unwrap_or(0)
    }

    pub fn log_start_offset(&self) -> Offset {
        self.log_start
    }

    pub fn log_end_offset(&self) -> Offset {
        self.leo
    }

    /// Offset below which everything is known to be fsynced.
    pub fn recovery_point(&self) -> Offset {
        self.recovery_point
    }

    /// The high watermark last checkpointed (clamped to `[log start, LEO]` at open).
    pub fn high_watermark_checkpoint(&self) -> Offset {
        self.hw
    }

    /// Durably records the high watermark (skipped when unchanged).
    pub fn checkpoint_high_watermark(&mut self, hw: Offset) -> Result<(), LogError> {
        self.guarded(|log| log.checkpoint_high_watermark_unguarded(hw))
    }

    fn checkpoint_high_watermark_unguarded(&mut self, hw: Offset) -> Result<(), LogError> {
        // A missing file reads as 0: a new partition's HW of 0 needs no write.
        if hw != self.hw
            || (hw != Offset::ZERO && !self.storage.exists(&self.dir.join(HW_CHECKPOINT_FILE)))
        {
            checkpoint::write_value(&*self.storage, &self.dir.join(HW_CHECKPOINT_FILE), hw.get())?;
            self.hw = hw;
        }
        Ok(())
    }

    /// DeleteRecords: moves the log start offset up to `offset` (the caller has
    /// checked it against the HW), persists it, and deletes segments wholly below
    /// it (never the active one). Returns the new log start offset.
    pub fn delete_records_before(&mut self, offset: Offset) -> Result<Offset, LogError> {
        self.guarded(|log| log.delete_records_before_unguarded(offset))
    }

    fn delete_records_before_unguarded(&mut self, offset: Offset) -> Result<Offset, LogError> {
        if offset > self.leo {
            return Err(self.out_of_range(offset));
        }
        if offset <= self.log_start {
            return Ok(self.log_start);
        }
        self.log_start = offset;
        self.write_log_start()?;
        self.delete_segments_below_log_start()?;
        if self.epochs.truncate_from_start(self.log_start) {
            self.write_epochs()?;
        }
        Ok(self.log_start)
    }

    /// Deletes leading segments whose every offset is below the log start.
    fn delete_segments_below_log_start(&mut self) -> Result<usize, LogError> {
        let mut n = 0;
        loop {
            let mut keys = self.segments.keys();
            let (Some(_), Some(&second)) = (keys.next(), keys.next()) else {
                break;
            };
            if second > self.log_start.get() {
                break;
            }
            self.delete_first_segment()?;
            n += 1;
        }
        Ok(n)
    }

    fn delete_first_segment(&mut self) -> Result<(), LogError> {
        self.generation += 1;
        if let Some((_, seg)) = self.segments.pop_first() {
            tracing::info!(segment = %seg.log_path().display(), "deleting log segment");
            seg.delete_files()?;
        }
        Ok(())
    }

    /// ListOffsets by timestamp: the first record (at or above the log start)
    /// whose timestamp is `>= ts`, as (offset, timestamp).
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(Offset, i64)>, LogError> {
        let log_start = self.log_start.get();
        for seg in self.segments.values() {
            if seg.max_ts < ts || seg.next_offset <= log_start {
                continue;
            }
            let mut found = None;
            let (_, stop) = seg.walk(seg.position_for_timestamp(ts), |pos, h| {
                if h.max_timestamp < ts || h.last_offset() < log_start {
                    return Ok(true);
                }
                found = self.find_record(seg, pos, h, |o, t| o >= log_start && t >= ts)?;
                Ok(found.is_none())
            })?;
            if let Some((offset, timestamp)) = found {
                return Ok(Some((log_offset(offset), timestamp)));
            }
            if matches!(stop, Stop::Invalid | Stop::Incomplete) {
                return Err(seg.corrupt(stop));
            }
        }
        Ok(None)
    }

    /// Decodes the batch at `pos` and returns the first record matching
    /// `pred(offset, timestamp)`. LogAppendTime batches give every record the
    /// batch max timestamp. Offsets here are the segments' integers.
    fn find_record(
        &self,
        seg: &Segment,
        pos: u64,
        h: &BatchHeader,
        pred: impl Fn(i64, i64) -> bool,
    ) -> Result<Option<(i64, i64)>, LogError> {
        if h.is_log_append_time() {
            let offset = h.base_offset.max(self.log_start.get());
            return Ok((offset <= h.last_offset() && pred(offset, h.max_timestamp))
                .then_some((offset, h.max_timestamp)));
        }
        let mut buf = Vec::new();
        seg.read_bytes(pos, h.total_size(), &mut buf)?;
        // Walked by streaming decompression: a batch a client sent may
        // decompress to gigabytes, and nothing of it needs keeping.
        let mut found = None;
        let limit = usize::try_from(h.records_count).unwrap_or(0);
        let body = buf.get(BATCH_HEADER_LEN..).unwrap_or(&[]);
        record_count::visit_records(h.compression(), body, limit, &mut |r| {
            // Deltas come from a client: a record whose offset or time does
            // not add up (or falls outside its batch) is skipped.
            let offset = h.base_offset.checked_add(r.offset_delta);
            let timestamp = h.base_timestamp.checked_add(r.timestamp_delta);
            if let (Some(offset), Some(timestamp)) = (offset, timestamp) {
                let in_batch = (h.base_offset..=h.last_offset()).contains(&offset);
                if in_batch && pred(offset, timestamp) {
                    found = Some((offset, timestamp));
                }
            }
            found.is_none()
        })
        .map_err(|e| {
            LogError::Corrupt(format!(
                "cannot read batch at offset {}: {e:?}",
                h.base_offset
            ))
        })?;
        Ok(found)
    }

    /// ListOffsets MAX_TIMESTAMP: (offset, timestamp) of the first record with
    /// the largest timestamp; `None` on an empty log.
    pub fn max_timestamp_and_offset(&self) -> Result<Option<(Offset, i64)>, LogError> {
        let log_start = self.log_start.get();
        let mut best: Option<&Segment> = None;
        for seg in self.segments.values() {
            if seg.max_ts >= 0
                && seg.next_offset > log_start
                && best.is_none_or(|b| seg.max_ts > b.max_ts)
            {
                best = Some(seg);
            }
        }
        let Some(seg) = best else { return Ok(None) };
        // A segment with a max timestamp has its offset.
        let target = seg.offset_of_max_ts.max(log_start);
        let Some((pos, h)) = seg.find_batch(target)? else {
            return Ok(Some((log_offset(seg.offset_of_max_ts), seg.max_ts)));
        };
        let max = h.max_timestamp;
        let (offset, timestamp) = self
            .find_record(seg, pos, &h, |o, t| o >= log_start && t == max)?
            .unwrap_or((h.last_offset(), max));
        Ok(Some((log_offset(offset), timestamp)))
    }

    /// Records an aborted transaction in the index of the segment that holds
    /// its marker (`txn.last_offset`, which must be in the log). Returns
    /// false when the same entry (producer id and marker offset) is already
    /// there: replay re-derives entries that may have been written before a
    /// crash.
    pub fn append_aborted_txn(&mut self, txn: AbortedTxn) -> Result<bool, LogError> {
        self.guarded(|log| log.append_aborted_txn_unguarded(txn))
    }

    fn append_aborted_txn_unguarded(&mut self, txn: AbortedTxn) -> Result<bool, LogError> {
        if txn.last_offset < self.log_start
            || txn.last_offset >= self.leo
            || txn.first_offset > txn.last_offset
        {
            return Err(LogError::InvalidRecords(format!(
                "aborted transaction {txn:?} outside the log [{}, {})",
                self.log_start, self.leo
            )));
        }
        let base = self.floor_base(txn.last_offset);
        let seg = self.segments.get_mut(&base).ok_or_else(|| {
            LogError::InvalidRecords(format!("no segment for offset {}", txn.last_offset))
        })?;
        Ok(seg.txn.add(txn)?)
    }

    /// Aborted transactions that overlap a fetch of `[start_offset,
    /// upper_bound_offset)`: marker at or after the start, first batch before
    /// the upper bound, as (producer id, first offset) in marker order.
    /// Every segment from the one holding `start_offset` is consulted: a
    /// transaction that started early can end (and be indexed) in any later
    /// segment. Kafka stops at the first entry past the upper bound, which
    /// misses such a long transaction ending after a shorter one; the
    /// in-memory scan is cheap, so we do not. Segments with nothing starting
    /// below the bound are skipped by their smallest first offset.
    pub fn collect_aborted_txns(
        &self,
        start_offset: Offset,
        upper_bound_offset: Offset,
    ) -> Vec<(ProducerId, Offset)> {
        let mut found = Vec::new();
        if start_offset >= upper_bound_offset {
            return Vec::new();
        }
        let from = self.floor_base(start_offset);
        for seg in self.segments.range(from..).map(|(_, s)| s) {
            seg.txn
                .collect(start_offset, upper_bound_offset, &mut found);
        }
        found
            .into_iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect()
    }

    /// Every entry of every segment's aborted-transaction index, oldest first.
    pub fn aborted_txns(&self) -> Vec<AbortedTxn> {
        self.segments
            .values()
            .flat_map(|s| s.txn.entries().iter().copied())
            .collect()
    }

    /// The latest leader epoch in the epoch cache.
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.latest_epoch()
    }

    /// The leader-epoch cache entries: (epoch, start offset).
    pub fn epoch_entries(&self) -> Vec<(LeaderEpoch, Offset)> {
        self.epochs.entries().to_vec()
    }

    /// Records that `epoch` starts at `start_offset` (a new leader assigns its
    /// epoch at its LEO before appending).
    pub fn assign_epoch_start_offset(
        &mut self,
        epoch: LeaderEpoch,
        start_offset: Offset,
    ) -> Result<(), LogError> {
        self.guarded(|log| log.assign_epoch_start_offset_unguarded(epoch, start_offset))
    }

    fn assign_epoch_start_offset_unguarded(
        &mut self,
        epoch: LeaderEpoch,
        start_offset: Offset,
    ) -> Result<(), LogError> {
        if self.epochs.assign(epoch, start_offset) {
            self.write_epochs()?;
        }
        Ok(())
    }

    /// OffsetForLeaderEpoch, as Kafka's `LeaderEpochFileCache.endOffsetFor`:
    /// the largest epoch at or below `epoch` and its end offset; `None`
    /// (Kafka's (-1, -1)) when every known epoch is above it or none is known.
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.epochs.end_offset_for(epoch, self.leo)
    }

    /// Drops every batch with offsets at or above `offset` (a batch straddling it
    /// is dropped whole, so the LEO may end below `offset`), fixing indexes, the
    /// epoch cache, the recovery point, the HW checkpoint and producer snapshots.
    pub fn truncate_to(&mut self, offset: Offset) -> Result<(), LogError> {
        self.guarded(|log| log.truncate_to_unguarded(offset))
    }

    fn truncate_to_unguarded(&mut self, offset: Offset) -> Result<(), LogError> {
        if offset >= self.leo {
            // No batch goes, but epochs starting at or past `offset` do: a
            // leader epoch assigned at the LEO and never written must not be
            // offered as the last fetched epoch of this (now following) log.
            if self.epochs.truncate_from_end(offset) {
                self.write_epochs()?;
            }
            return Ok(());
        }
        if offset.get() < self.first_base() {
            return self.truncate_fully_and_start_at(offset);
        }
        self.generation += 1;
        self.truncations += 1;
        let above: Vec<i64> = self
            .segments
            .range(offset.get() + 1..)
            .map(|(b, _)| *b)
            .collect();
        for b in above {
            if let Some(seg) = self.segments.remove(&b) {
                seg.delete_files()?;
            }
        }
        let interval = self.config.index_interval_bytes;
        self.leo = log_offset(self.active_mut().truncate_to(offset.get(), interval)?);
        if self.log_start > self.leo {
            // As Kafka: the log start never stays above the end of the log.
            self.log_start = self.leo;
            self.write_log_start()?;
        }
        self.after_truncation()
    }

    /// Deletes every segment and restarts the log empty at `offset` (log start
    /// and LEO both `offset`); the epoch cache and producer snapshots are cleared.
    pub fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LogError> {
        self.guarded(|log| log.truncate_fully_and_start_at_unguarded(offset))
    }

    fn truncate_fully_and_start_at_unguarded(&mut self, offset: Offset) -> Result<(), LogError> {
        self.generation += 1;
        self.truncations += 1;
        while !self.segments.is_empty() {
            self.delete_first_segment()?;
        }
        let now = self.clock.now_ms();
        let seg = Segment::open(&self.storage, &self.dir, offset.get(), true, now)?;
        self.segments.insert(offset.get(), seg);
        self.leo = offset;
        self.log_start = offset;
        self.write_log_start()?;
        self.epochs = EpochCache::default();
        self.write_epochs()?;
        self.after_truncation()?;
        self.checkpoint_high_watermark(offset)
    }

    fn after_truncation(&mut self) -> Result<(), LogError> {
        if self.cleaner_checkpoint.is_some_and(|c| c > self.leo) {
            self.cleaner_checkpoint = None;
        }
        if self.epochs.truncate_from_end(self.leo) {
            self.write_epochs()?;
        }
        if self.hw > self.leo {
            let leo = self.leo;
            self.checkpoint_high_watermark(leo)?;
        }
        self.delete_snapshots_above(self.leo)?;
        let now = self.clock.now_ms();
        self.flush_at(now)
    }

    /// Fsyncs every segment and index with unflushed data and moves the recovery
    /// point to the LEO.
    pub fn flush(&mut self) -> Result<(), LogError> {
        self.guarded(|log| log.flush_unguarded())
    }

    fn flush_unguarded(&mut self) -> Result<(), LogError> {
        let now = self.clock.now_ms();
        self.flush_at(now)
    }

    fn flush_at(&mut self, now_ms: i64) -> Result<(), LogError> {
        let timed = self
            .on_flush
            .as_ref()
            .filter(|_| self.recovery_point < self.leo)
            .map(|f| (f.clone(), std::time::Instant::now()));
        for seg in self.segments.values_mut() {
            seg.flush()?;
        }
        if let Some((listener, started)) = timed {
            listener(started.elapsed());
        }
        self.last_flush_ms = now_ms;
        let leo = self.leo;
        self.set_recovery_point(leo, false)
    }

    /// Moves the recovery point (everything below it is fsynced). The file is
    /// rewritten only when forced, when the point moves back, or when it moves
    /// into another segment: a lagging file only widens the recovery scan, which
    /// always starts at the beginning of the segment holding the point.
    /// Before the first write (at open) the file counts as pointing into the
    /// first segment.
    fn set_recovery_point(&mut self, offset: Offset, force: bool) -> Result<(), LogError> {
        self.recovery_point = offset;
        let persisted = self.persisted_recovery_point;
        let persisted_base = persisted.map_or_else(|| self.first_base(), |p| self.floor_base(p));
        if force
            || persisted.is_some_and(|p| offset < p)
            || self.floor_base(offset) != persisted_base
        {
            checkpoint::write_value(
                &*self.storage,
                &self.dir.join(RECOVERY_POINT_FILE),
                offset.get(),
            )?;
            self.persisted_recovery_point = Some(offset);
        }
        Ok(())
    }

    /// Time-based flush (`flush_interval_ms`).
    pub fn maybe_flush(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.guarded(|log| log.maybe_flush_unguarded(now_ms))
    }

    fn maybe_flush_unguarded(&mut self, now_ms: i64) -> Result<(), LogError> {
        if self.leo > self.recovery_point
            && now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_interval_ms
        {
            self.flush_at(now_ms)?;
        }
        Ok(())
    }

    /// Deletes old segments by time and by size, never the active segment, and
    /// advances the log start offset. Returns the number of segments deleted.
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<usize, LogError> {
        self.guarded(|log| log.apply_retention_below_unguarded(now_ms, i64::MAX))
    }

    /// `apply_retention`, deleting only segments whose offsets all lie below
    /// `upper_bound` (pass the high watermark to keep unreplicated data).
    pub fn apply_retention_below(
        &mut self,
        now_ms: i64,
        upper_bound: Offset,
    ) -> Result<usize, LogError> {
        self.guarded(|log| log.apply_retention_below_unguarded(now_ms, upper_bound.get()))
    }

    fn apply_retention_below_unguarded(
        &mut self,
        now_ms: i64,
        upper_bound: i64,
    ) -> Result<usize, LogError> {
        let mut deleted = 0;
        let retention_ms = self.config.retention_ms;
        if retention_ms >= 0 {
            while let Some(next_base) = self.second_base() {
                let first = self.segments.values().next().expect("two segments");
                if next_base > upper_bound
                    || now_ms.saturating_sub(first.largest_timestamp()) <= retention_ms
                {
                    break;
                }
                self.delete_first_segment()?;
                deleted += 1;
            }
        }
        let retention_bytes = self.config.retention_bytes;
        if retention_bytes >= 0 {
            let mut excess = self.size_bytes() as i64 - retention_bytes;
            while let Some(next_base) = self.second_base() {
                let first_size = self.segments.values().next().expect("two segments").size as i64;
                if next_base > upper_bound || excess < first_size {
                    break;
                }
                excess -= first_size;
                self.delete_first_segment()?;
                deleted += 1;
            }
        }
        if deleted > 0 {
            let first_base = log_offset(self.first_base());
            if first_base > self.log_start {
                self.log_start = first_base;
                self.write_log_start()?;
                if self.epochs.truncate_from_start(self.log_start) {
                    self.write_epochs()?;
                }
            }
        }
        Ok(deleted)
    }

    fn second_base(&self) -> Option<i64> {
        self.segments.keys().nth(1).copied()
    }

    /// Total bytes of all segment files.
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size).sum()
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<Offset> {
        self.segments.keys().map(|b| log_offset(*b)).collect()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes over from `old` (the same partition's log, replaced by this
    /// copy): a generation past its own, so nothing planned on it (a
    /// cleaner pass) is committed here.
    pub fn continue_generation_of(&mut self, old: &PartitionLog) {
        self.generation = self.generation.max(old.generation) + 1;
        self.on_flush = old.on_flush.clone();
    }

    /// How many times the log was truncated since it was opened.
    pub fn truncations(&self) -> u64 {
        self.truncations
    }

    /// The storage the log's files are on.
    pub fn storage(&self) -> Arc<dyn Storage> {
        self.storage.clone()
    }

    /// Headers of every batch from the one containing `from_offset` (or the log
    /// start, if later) to the LEO, in order.
    pub fn batch_headers_from(&self, from_offset: Offset) -> Result<Vec<BatchHeader>, LogError> {
        let from = from_offset.max(self.log_start);
        let mut out = Vec::new();
        if from >= self.leo {
            return Ok(out);
        }
        let mut first_seg = true;
        for seg in self.segments.range(self.floor_base(from)..).map(|(_, s)| s) {
            let start = if first_seg {
                first_seg = false;
                match seg.find_batch(from.get())? {
                    Some((pos, _)) => pos,
                    None => continue,
                }
            } else {
                0
            };
            let (_, stop) = seg.walk(start, |_, h| {
                out.push(*h);
                Ok(true)
            })?;
            if stop != Stop::End {
                return Err(seg.corrupt(stop));
            }
        }
        Ok(out)
    }

    fn snapshot_path(&self, offset: Offset) -> PathBuf {
        let offset = offset.get();
        self.dir.join(format!("{offset:020}{SNAPSHOT_SUFFIX}"))
    }

    /// Snapshot offsets on disk, ascending.
    fn snapshot_offsets(&self) -> Result<Vec<Offset>, LogError> {
        let mut out = Vec::new();
        for path in self.storage.list_dir(&self.dir)? {
            if let Some(off) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(SNAPSHOT_SUFFIX))
                .and_then(parse_base)
                .and_then(Offset::from_wire)
            {
                out.push(off);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Durably writes an opaque producer-state snapshot taken at `offset` and
    /// keeps only the latest two.
    pub fn write_producer_snapshot(&mut self, offset: Offset, data: &[u8]) -> Result<(), LogError> {
        self.guarded(|log| log.write_producer_snapshot_unguarded(offset, data))
    }

    fn write_producer_snapshot_unguarded(
        &mut self,
        offset: Offset,
        data: &[u8],
    ) -> Result<(), LogError> {
        // Replay after a restart starts at the snapshot and re-derives only
        // the aborted-transaction entries after it: the ones before must be
        // durable first.
        for seg in self.segments.values_mut() {
            seg.txn.flush()?;
        }
        self.storage
            .write_atomic(&self.snapshot_path(offset), data)?;
        let offsets = self.snapshot_offsets()?;
        if offsets.len() > SNAPSHOTS_KEPT {
            for off in &offsets[..offsets.len() - SNAPSHOTS_KEPT] {
                self.storage.remove_if_exists(&self.snapshot_path(*off))?;
            }
        }
        Ok(())
    }

    /// The latest producer snapshot at or below the LEO.
    pub fn latest_producer_snapshot(&self) -> Result<Option<(Offset, Vec<u8>)>, LogError> {
        let offsets = self.snapshot_offsets()?;
        for off in offsets.into_iter().rev() {
            if off > self.leo {
                continue;
            }
            match self.storage.read(&self.snapshot_path(off)) {
                Ok(data) => return Ok(Some((off, data))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    fn delete_snapshots_above(&self, offset: Offset) -> Result<(), LogError> {
        for off in self.snapshot_offsets()? {
            if off > offset {
                self.storage.remove_if_exists(&self.snapshot_path(off))?;
            }
        }
        Ok(())
    }

    fn write_log_start(&self) -> Result<(), LogError> {
        Ok(checkpoint::write_value(
            &*self.storage,
            &self.dir.join(LOG_START_CHECKPOINT_FILE),
            self.log_start.get(),
        )?)
    }

    fn write_epochs(&self) -> Result<(), LogError> {
        Ok(checkpoint::write_epochs(
            &*self.storage,
            &self.dir.join(EPOCH_CHECKPOINT_FILE),
            self.epochs.entries(),
        )?)
    }

    /// Flushes everything and writes the clean-shutdown marker, so the next open
    /// skips recovery.
    pub fn close(mut self) -> Result<(), LogError> {
        self.close_clean()
    }

    /// `close` for owners that hold the log behind a lock: flushes and writes
    /// the clean-shutdown marker. No append may follow.
    pub fn close_clean(&mut self) -> Result<(), LogError> {
        self.guarded(|log| log.close_clean_unguarded())
    }

    fn close_clean_unguarded(&mut self) -> Result<(), LogError> {
        self.generation += 1;
        self.active_mut().maybe_append_time_entry()?;
        self.flush_unguarded()?;
        let leo = self.leo;
        self.set_recovery_point(leo, true)?;
        self.storage
            .write_atomic(&self.dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
        Ok(())
    }

    /// What a cleaner pass needs of the log, taken without I/O (see
    /// [`cleaner`]): segment summaries and open files, aborted
    /// transactions, the last pass's end and the generation.
    pub fn clean_snapshot(&self) -> cleaner::LogSnapshot {
        cleaner::LogSnapshot {
            storage: self.storage.clone(),
            dir: self.dir.clone(),
            segments: self
                .segments
                .values()
                .map(cleaner::SegmentRef::of)
                .collect(),
            log_start: self.log_start,
            checkpoint: self.cleaner_checkpoint,
            generation: self.generation,
            aborted: self.aborted_txns(),
            latest_delete_horizon: self.latest_delete_horizon,
            index_interval: self.config.index_interval_bytes,
            segment_bytes: self.segment_limit(),
        }
    }

    /// A cleaner pass failed with `e`: the log fails (as any write's
    /// failure fails it) unless it changed since the pass's snapshot
    /// (a truncation or deletion under the pass explains the error).
    /// Returns whether it failed.
    pub fn fail_if_unchanged(&mut self, snapshot: &cleaner::LogSnapshot, e: &io::Error) -> bool {
        if snapshot.generation != self.generation {
            return false;
        }
        if !self.failed {
            self.failed = true;
            if let Some(listener) = &self.on_failure {
                listener(&self.dir, e);
            }
        }
        true
    }

    /// Installs a cleaner pass's segments in place of those they replace
    /// (see [`cleaner`]): renames and removals only, and one directory
    /// fsync between them (the removals must be durable before a swap
    /// takes their name). Returns false, with the pass's files removed,
    /// when the log changed since the pass's snapshot (a truncation or a
    /// segment deletion) or has failed.
    pub fn commit_clean(&mut self, output: cleaner::CleanOutput) -> Result<bool, LogError> {
        let offline = self
            .dir_offline
            .as_ref()
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire));
        if output.generation != self.generation || self.failed || offline {
            output.discard();
            return Ok(false);
        }
        self.guarded(|log| log.commit_clean_unguarded(output))
    }

    fn commit_clean_unguarded(&mut self, output: cleaner::CleanOutput) -> Result<bool, LogError> {
        let active = *self.segments.keys().next_back().expect("an active segment");
        let mut replaced = Vec::new();
        for g in &output.groups {
            debug_assert!(
                g.last_base < active,
                "the cleaner never replaces the active segment"
            );
            let bases: Vec<i64> = self
                .segments
                .range(g.first_base..=g.last_base)
                .map(|(b, _)| *b)
                .collect();
            for b in bases {
                replaced.extend(self.segments.remove(&b));
            }
        }
        self.generation += 1;
        for seg in replaced {
            seg.delete_files()?;
        }
        self.storage.sync_dir(&self.dir)?;
        for g in output.groups {
            let mut seg = g.segment;
            seg.install_cleaned(&self.dir)?;
            for t in g.retained_aborts {
                seg.txn.add(t)?;
            }
            self.segments.insert(seg.base, seg);
        }
        self.cleaner_checkpoint = Some(log_offset(output.stats.end));
        self.latest_delete_horizon = output.latest_delete_horizon;
        Ok(true)
    }

    /// Removes the partition directory (topic deletion).
    pub fn delete(self) -> Result<(), LogError> {
        let (dir, storage) = (self.dir.clone(), self.storage.clone());
        drop(self);
        match storage.remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

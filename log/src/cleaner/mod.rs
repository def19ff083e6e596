//! The log cleaner: compaction of one log, with Kafka 4.x's semantics.
//!
//! A pass over a log:
//!
//! 1. **Snapshot** ([`PartitionLog::clean_snapshot`](crate::PartitionLog::clean_snapshot),
//!    under the owner's lock, no I/O): the segments' summaries and open
//!    files, the aborted transactions, the last pass's end, and a
//!    generation number that any truncation or segment deletion moves.
//! 2. **Plan** ([`rules::cleanable`]): whole segments below the first
//!    uncleanable offset (the active segment, the LSO, never above the HW,
//!    `min.compaction.lag.ms`) may be cleaned; the dirty ones are those
//!    from the last pass's end.
//! 3. **Map** (no lock): the dirty segments are read in offset order into
//!    the [`OffsetMap`] (key -> latest offset), skipping aborted
//!    transactions' records; a map that fills ends the pass's reach there
//!    (the rest waits for the next pass).
//! 4. **Rewrite** (no lock): every segment from the log's first up to the
//!    reach is read again and written, in groups of at most `segment.bytes`,
//!    to `<base>.log.cleaned`: a record stays if it is the latest of its
//!    key ([`rules::keep_record`]), a tombstone until its batch's delete
//!    horizon (KIP-534: set to now + `delete.retention.ms` by the first
//!    pass that keeps it), an aborted transaction's records go, a marker
//!    goes once nothing of its transaction is left and its horizon passed,
//!    and a producer's last batch stays (maybe as a header alone) so its
//!    sequence and epoch survive. Offsets never change: a batch keeps its
//!    base and last offset, so gaps appear between the records that stay.
//!    Each group is fsynced and renamed `<base>.log.swap.<last base>` (the
//!    bases of the segments it replaces), and the directory is fsynced: from
//!    then on a crash completes the swap at open.
//! 5. **Commit** ([`PartitionLog::commit_clean`](crate::PartitionLog::commit_clean),
//!    under the owner's write lock): if the generation moved or the log
//!    failed, the output is discarded; else the replaced segments' files
//!    are removed, the directory fsynced, and each swap file renamed to
//!    `<base>.log` (its indexes likewise). A crash at any point leaves the
//!    state before the pass (only `.cleaned` files, removed at open) or
//!    after it (a swap file, installed at open after the segments it names
//!    are removed), never a mix.
//!
//! Reads keep working throughout: a fetch holds the files it sends from,
//! and the replaced segments' files stay readable to it after their
//! removal.

pub mod offset_map;
pub mod rules;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strand_protocol::batch::{end_txn_marker, BatchHeader, ControlType, BATCH_HEADER_LEN};
use strand_protocol::records::{self, Rewrite};
use strand_types::{Offset, ProducerId};

pub use offset_map::OffsetMap;
pub use rules::{Cleanable, CleanerLogConfig, LastRecord, SegmentSummary, Urgency};

use crate::error::LogError;
use crate::segment::{self, Batches, Segment, Stop};
use crate::storage::{Storage, StorageFile};
use crate::txn_index::AbortedTxn;

/// The per-partition file holding where the last pass ended (the first
/// dirty offset), as Kafka's `cleaner-offset-checkpoint` does per log dir.
pub const CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// The infix of a cleaned segment's file between its fsync and its
/// installation: `<base>.log.swap.<last base replaced>`.
const SWAP_INFIX: &str = ".log.swap.";
/// What a pass writes to a cleaned segment at a time.
const WRITE_CHUNK: usize = 1 << 20;

/// A segment as a pass sees it: what is known without reading it, and its
/// file (held open: readable even once the log has replaced it).
#[derive(Clone)]
pub struct SegmentRef {
    pub summary: SegmentSummary,
    file: Arc<dyn StorageFile>,
}

impl SegmentRef {
    /// The segment as a pass sees it.
    pub(crate) fn of(seg: &Segment) -> SegmentRef {
        SegmentRef {
            summary: SegmentSummary {
                base: seg.base,
                next_offset: seg.next_offset,
                size: seg.size,
                max_ts: seg.max_ts,
            },
            file: seg.file(),
        }
    }
}

/// What a pass takes of a log under its owner's lock: no I/O, only
/// summaries, open files and the aborted-transaction index.
pub struct LogSnapshot {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) dir: PathBuf,
    /// Every segment, oldest first; the last is the active one.
    pub segments: Vec<SegmentRef>,
    pub log_start: Offset,
    /// Where the last pass ended (`None`: never cleaned).
    pub checkpoint: Option<Offset>,
    /// The log's generation: the commit is refused if it moved.
    pub(crate) generation: u64,
    pub(crate) aborted: Vec<AbortedTxn>,
    /// The latest delete horizon a pass left in the log.
    pub latest_delete_horizon: Option<i64>,
    pub(crate) index_interval: u64,
    /// `segment.bytes`: the largest group a pass writes as one segment.
    pub(crate) segment_bytes: u64,
}

impl LogSnapshot {
    fn summaries(&self) -> Vec<SegmentSummary> {
        self.segments.iter().map(|s| s.summary).collect()
    }

    /// What may be cleaned with records below `stable_bound` final.
    pub fn cleanable(
        &self,
        stable_bound: Offset,
        now_ms: i64,
        config: &CleanerLogConfig,
    ) -> Cleanable {
        rules::cleanable(
            &self.summaries(),
            self.log_start.get(),
            self.checkpoint.map(Offset::get),
            stable_bound.get(),
            now_ms,
            config.min_compaction_lag_ms,
        )
    }

    /// The first batch timestamp of the first dirty segment (one header
    /// read), for `max.compaction.lag.ms`.
    fn oldest_dirty_timestamp(&self, c: &Cleanable) -> Option<i64> {
        let seg = self.segments[..c.segments]
            .iter()
            .find(|s| s.summary.next_offset > c.first_dirty)?;
        let mut head = [0u8; BATCH_HEADER_LEN];
        seg.file.read_exact_at(&mut head, 0).ok()?;
        BatchHeader::parse(&head).ok().map(|h| h.max_timestamp)
    }

    /// Whether the log is worth a pass now, and how much.
    pub fn urgency(
        &self,
        stable_bound: Offset,
        now_ms: i64,
        config: &CleanerLogConfig,
    ) -> Option<(Urgency, Cleanable)> {
        let c = self.cleanable(stable_bound, now_ms, config);
        let oldest = if config.max_compaction_lag_ms < i64::MAX && c.dirty_bytes > 0 {
            self.oldest_dirty_timestamp(&c)
        } else {
            None
        };
        rules::urgency(&c, config, oldest, self.latest_delete_horizon, now_ms).map(|u| (u, c))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Caps the cleaner's reads and writes at `log.cleaner.io.max.bytes.per.second`.
struct Throttler {
    bytes_per_sec: f64,
    window_start: Instant,
    bytes: f64,
}

impl Throttler {
    const WINDOW: Duration = Duration::from_millis(300);

    fn maybe_throttle(&mut self, n: usize) {
        if !self.bytes_per_sec.is_finite() || self.bytes_per_sec <= 0.0 {
            return;
        }
        self.bytes += n as f64;
        let elapsed = self.window_start.elapsed();
        if elapsed < Self::WINDOW {
            return;
        }
        let due = Duration::from_secs_f64(self.bytes / self.bytes_per_sec);
        if due > elapsed {
            // The cleaner's own thread: nothing else waits on it.
            std::thread::sleep(due - elapsed);
        }
        self.window_start = Instant::now();
        self.bytes = 0.0;
    }
}

/// What one cleaner thread keeps across passes: its offset map (all the
/// memory `log.cleaner.dedupe.buffer.size` gives it) and its throttle.
pub struct CleanerResources {
    map: OffsetMap,
    throttler: Throttler,
    /// The largest body a batch may decompress to and still be cleaned; a
    /// larger one is kept whole, its records unexamined.
    pub max_batch_bytes: usize,
}

impl CleanerResources {
    pub fn new(map_memory: usize, load_factor: f64, io_bytes_per_sec: f64) -> CleanerResources {
        CleanerResources {
            map: OffsetMap::new(map_memory, load_factor),
            throttler: Throttler {
                bytes_per_sec: io_bytes_per_sec,
                window_start: Instant::now(),
                bytes: 0.0,
            },
            max_batch_bytes: 16 << 20,
        }
    }

    /// Bytes the offset map holds.
    pub fn map_memory(&self) -> usize {
        self.map.memory()
    }

    /// How full `keys` make the offset map, in percent of what it takes.
    pub fn map_utilization_percent(&self, keys: usize) -> f64 {
        100.0 * keys as f64 / self.map.capacity().max(1) as f64
    }
}

/// What a pass needs besides the snapshot.
pub struct PassInputs<'a> {
    pub snapshot: &'a LogSnapshot,
    /// The LSO (never above the HW): records below it are final.
    pub stable_bound: Offset,
    pub now_ms: i64,
    pub config: &'a CleanerLogConfig,
    /// Each active producer's last batch, from the producer state.
    pub active_producers: &'a HashMap<ProducerId, LastRecord>,
    /// Polled between batches: true when the pass should stop (the log
    /// was closed or deleted).
    pub abort: &'a (dyn Fn() -> bool + Sync),
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanStats {
    pub first_dirty: i64,
    /// The pass's reach: offsets below it were examined.
    pub end: i64,
    pub segments_cleaned: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_kept: u64,
    pub keys_in_map: usize,
    /// The dirty ratio before the pass.
    pub dirty_ratio: f64,
    /// And after it (set by the log's owner once the pass is installed).
    pub dirty_ratio_after: f64,
    pub duration: Duration,
}

impl CleanStats {
    /// Kafka's `cleaner-recopy-percent`: written over read.
    pub fn recopy_percent(&self) -> f64 {
        if self.bytes_read == 0 {
            0.0
        } else {
            100.0 * self.bytes_written as f64 / self.bytes_read as f64
        }
    }
}

/// A cleaned group: one new segment replacing those with bases in
/// `[first_base, last_base]`.
pub(crate) struct CleanedGroup {
    pub(crate) first_base: i64,
    pub(crate) last_base: i64,
    pub(crate) segment: Segment,
    /// The aborted transactions whose abort markers it kept.
    pub(crate) retained_aborts: Vec<AbortedTxn>,
}

/// A pass's output, durable on disk as swap files and waiting for
/// [`PartitionLog::commit_clean`](crate::PartitionLog::commit_clean).
pub struct CleanOutput {
    pub(crate) generation: u64,
    pub(crate) groups: Vec<CleanedGroup>,
    pub(crate) latest_delete_horizon: Option<i64>,
    pub stats: CleanStats,
}

impl CleanOutput {
    /// Removes the pass's files (it will not be committed).
    pub fn discard(self) {
        for g in self.groups {
            g.segment.discard_cleaned();
        }
    }
}

/// Why a pass produced nothing.
#[derive(Debug, thiserror::Error)]
pub enum CleanError {
    /// The log changed under the pass, or was closed: nothing to report.
    #[error("the pass was abandoned: the log changed under it")]
    Aborted,
    #[error(transparent)]
    Log(#[from] LogError),
}

impl From<io::Error> for CleanError {
    fn from(e: io::Error) -> Self {
        CleanError::Log(LogError::Io(e))
    }
}

/// The swap name of a cleaned segment replacing bases `first..=last`.
fn swap_path(dir: &Path, first: i64, last: i64) -> PathBuf {
    dir.join(format!("{first:020}{SWAP_INFIX}{last:020}"))
}

/// `(first base, last base)` of a swap file name.
fn parse_swap(name: &str) -> Option<(i64, i64)> {
    let (first, last) = name.split_once(SWAP_INFIX)?;
    Some((segment::parse_base(first)?, segment::parse_base(last)?))
}

/// At open, before the segments are read: removes what an interrupted pass
/// left unfinished (`.cleaned` files) and completes what it finished (each
/// swap file replaces the segments it names).
pub(crate) fn complete_interrupted(storage: &dyn Storage, dir: &Path) -> Result<(), LogError> {
    let mut swaps = Vec::new();
    let mut bases = Vec::new();
    for path in storage.list_dir(dir)? {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.ends_with(segment::CLEANED_SUFFIX) {
            storage.remove_if_exists(&path)?;
        } else if let Some(range) = parse_swap(name) {
            swaps.push((range, path.clone()));
        } else if let Some(base) = name.strip_suffix(".log").and_then(segment::parse_base) {
            bases.push(base);
        }
    }
    if swaps.is_empty() {
        return Ok(());
    }
    swaps.sort_by_key(|(r, _)| *r);
    for ((first, last), _) in &swaps {
        for &base in bases.iter().filter(|b| (*first..=*last).contains(*b)) {
            let (lp, ip, tp) = Segment::paths(dir, base);
            let xp = crate::txn_index::txn_index_path(dir, Offset::new(base));
            for p in [lp, ip, tp, xp] {
                storage.remove_if_exists(&p)?;
            }
        }
    }
    // The replaced files are gone for good before a swap takes their name.
    storage.sync_dir(dir)?;
    for ((first, _), path) in swaps {
        tracing::info!(swap = %path.display(), "completing an interrupted log cleaner swap");
        storage.rename(&path, &Segment::paths(dir, first).0)?;
    }
    storage.sync_dir(dir)?;
    Ok(())
}

/// Writes where a pass ended (after its commit, outside the log's lock).
pub fn write_checkpoint(snapshot: &LogSnapshot, end: Offset) -> Result<(), LogError> {
    crate::checkpoint::write_value(
        &*snapshot.storage,
        &snapshot.dir.join(CHECKPOINT_FILE),
        end.get(),
    )?;
    Ok(())
}

/// One batch as read from a segment.
struct BatchBuf {
    bytes: Vec<u8>,
}

impl BatchBuf {
    fn read(&mut self, file: &dyn StorageFile, pos: u64, h: &BatchHeader) -> io::Result<&[u8]> {
        self.bytes.resize(h.total_size(), 0);
        file.read_exact_at(&mut self.bytes, pos)?;
        Ok(&self.bytes)
    }
}

/// Walks the batches of a segment file, in order, to its size at the
/// snapshot; a batch that does not parse is an error (the log is damaged).
fn for_each_batch(
    seg: &SegmentRef,
    mut f: impl FnMut(u64, &BatchHeader) -> Result<(), CleanError>,
) -> Result<(), CleanError> {
    let mut failure = None;
    let (_, stop) = segment::walk(&*seg.file, 0, seg.summary.size, false, |pos, h| {
        match f(pos, h) {
            Ok(()) => Ok(true),
            Err(e) => {
                failure = Some(e);
                Ok(false)
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    if stop != Stop::End {
        return Err(CleanError::Log(LogError::Corrupt(format!(
            "segment {} of the log being cleaned: {stop:?} batch",
            seg.summary.base
        ))));
    }
    Ok(())
}

/// Runs a pass over a snapshot. `Ok(None)`: nothing to clean.
pub fn clean(
    inp: &PassInputs<'_>,
    res: &mut CleanerResources,
) -> Result<Option<CleanOutput>, CleanError> {
    let started = Instant::now();
    let snap = inp.snapshot;
    let c = snap.cleanable(inp.stable_bound, inp.now_ms, inp.config);
    // Nothing dirty, nothing done, even with delete horizons passed: as in
    // Kafka, whose pass reaches only as far as its map (a tombstone goes at
    // the first pass past its horizon that has new records to read).
    if c.segments == 0 || c.dirty_bytes == 0 {
        return Ok(None);
    }
    let mut stats = CleanStats {
        first_dirty: c.first_dirty,
        dirty_ratio: c.dirty_ratio(),
        ..CleanStats::default()
    };
    let read_to = build_map(inp, &c, res, &mut stats)?;
    let reach = snap.segments[..c.segments]
        .iter()
        .take_while(|s| s.summary.base < read_to)
        .count();
    let summaries: Vec<SegmentSummary> = snap.segments[..reach].iter().map(|s| s.summary).collect();
    let mut writer = Writer {
        inp,
        read_to,
        tracker: rules::TxnTracker::new(
            snap.aborted
                .iter()
                .filter(|t| t.first_offset.get() < c.first_uncleanable)
                .copied()
                .collect(),
        ),
        batch: BatchBuf { bytes: Vec::new() },
        kept: Vec::new(),
        out: Vec::new(),
        out_headers: Vec::new(),
        latest_delete_horizon: None,
        stats: &mut stats,
    };
    let mut groups = Vec::new();
    let result = (|| {
        for range in rules::group_by_size(&summaries, snap.segment_bytes) {
            let sources = &snap.segments[range];
            let first = sources[0].summary.base;
            let last = sources[sources.len() - 1].summary.base;
            let mut seg = Segment::create_cleaned(&snap.storage, &snap.dir, first, inp.now_ms)?;
            let written = writer.write_group(sources, &mut seg, res);
            let retained_aborts = match written {
                Ok(a) => a,
                Err(e) => {
                    seg.discard_cleaned();
                    return Err(e);
                }
            };
            // Durable before it may replace anything.
            let renamed = seg.flush().map_err(CleanError::from).and_then(|()| {
                seg.rename_log(&swap_path(&snap.dir, first, last))?;
                Ok(())
            });
            if let Err(e) = renamed {
                seg.discard_cleaned();
                return Err(e);
            }
            writer.stats.segments_cleaned += sources.len();
            groups.push(CleanedGroup {
                first_base: first,
                last_base: last,
                segment: seg,
                retained_aborts,
            });
        }
        snap.storage.sync_dir(&snap.dir)?;
        Ok(())
    })();
    let latest_delete_horizon = writer.latest_delete_horizon;
    let output = CleanOutput {
        generation: snap.generation,
        groups,
        latest_delete_horizon,
        stats,
    };
    if let Err(e) = result {
        output.discard();
        return Err(e);
    }
    let mut output = output;
    output.stats.end = read_to;
    output.stats.keys_in_map = res.map.len();
    output.stats.duration = started.elapsed();
    Ok(Some(output))
}

/// Step 3: the latest offset of every key in the dirty segments. Returns
/// the pass's reach: every offset below it was examined.
fn build_map(
    inp: &PassInputs<'_>,
    c: &Cleanable,
    res: &mut CleanerResources,
    stats: &mut CleanStats,
) -> Result<i64, CleanError> {
    let snap = inp.snapshot;
    res.map.clear();
    let dirty: Vec<&SegmentRef> = snap.segments[..c.segments]
        .iter()
        .filter(|s| s.summary.next_offset > c.first_dirty)
        .collect();
    let Some(first) = dirty.first() else {
        return Ok(c.first_dirty);
    };
    // Aborted transactions whose markers come at or after the first batch read.
    let walk_start = first.summary.base;
    let mut tracker = rules::TxnTracker::new(
        snap.aborted
            .iter()
            .filter(|t| {
                t.last_offset.get() >= walk_start && t.first_offset.get() < c.first_uncleanable
            })
            .copied()
            .collect(),
    );
    let mut batch = BatchBuf { bytes: Vec::new() };
    let mut full = false;
    for seg in dirty {
        for_each_batch(seg, |pos, h| {
            if full {
                return Ok(());
            }
            if (inp.abort)() {
                return Err(CleanError::Aborted);
            }
            let bytes = batch.read(&*seg.file, pos, h)?;
            res.throttler.maybe_throttle(bytes.len());
            stats.bytes_read += bytes.len() as u64;
            if h.is_control() {
                if let Some(m) = end_txn_marker(bytes) {
                    tracker.on_marker(h, m.control);
                }
            } else if !tracker.on_data_batch(h) && h.last_offset() >= c.first_dirty {
                match records::decompressed_body(bytes, h, res.max_batch_bytes) {
                    Ok(body) => {
                        for r in records::records(&body) {
                            let Ok(r) = r else { break };
                            let offset = h.base_offset + r.offset_delta;
                            let Some(key) = r.key else { continue };
                            if offset < c.first_dirty {
                                continue;
                            }
                            if !res.map.put(key, offset) {
                                full = true;
                                return Ok(());
                            }
                        }
                    }
                    // Kept whole at the rewrite: its keys supersede nothing.
                    Err(e) => {
                        tracing::warn!(offset = h.base_offset, error = %e, "log cleaner: a batch it cannot examine is kept whole")
                    }
                }
            }
            if h.last_offset() >= c.first_dirty {
                res.map.update_latest_offset(h.last_offset());
            }
            Ok(())
        })?;
        if full {
            break;
        }
    }
    Ok(if full {
        res.map.latest_offset().map_or(c.first_dirty, |l| l + 1)
    } else {
        c.first_uncleanable
    })
}

/// Step 4's state across the groups of a pass.
struct Writer<'a, 'b> {
    inp: &'a PassInputs<'b>,
    read_to: i64,
    tracker: rules::TxnTracker,
    batch: BatchBuf,
    /// The records a batch keeps (uncompressed), reused.
    kept: Vec<u8>,
    /// Batches waiting to be written to the cleaned segment.
    out: Vec<u8>,
    out_headers: Vec<BatchHeader>,
    latest_delete_horizon: Option<i64>,
    stats: &'a mut CleanStats,
}

impl Writer<'_, '_> {
    /// Writes what `sources` keep into `seg`; returns the aborted
    /// transactions whose markers it kept.
    fn write_group(
        &mut self,
        sources: &[SegmentRef],
        seg: &mut Segment,
        res: &mut CleanerResources,
    ) -> Result<Vec<AbortedTxn>, CleanError> {
        let mut retained_aborts: Vec<(ProducerId, i64)> = Vec::new();
        for src in sources {
            for_each_batch(src, |pos, h| {
                if (self.inp.abort)() {
                    return Err(CleanError::Aborted);
                }
                let len = {
                    let bytes = self.batch.read(&*src.file, pos, h)?;
                    bytes.len()
                };
                res.throttler.maybe_throttle(len);
                self.stats.bytes_read += len as u64;
                if let Some(abort) = self.clean_batch(h, res)? {
                    retained_aborts.push(abort);
                }
                if self.out.len() >= WRITE_CHUNK {
                    self.write_out(seg)?;
                }
                Ok(())
            })?;
        }
        self.write_out(seg)?;
        // Entries for markers this group kept, from the index they were in.
        Ok(retained_aborts
            .into_iter()
            .filter_map(|(pid, marker)| {
                self.inp
                    .snapshot
                    .aborted
                    .iter()
                    .find(|t| t.producer_id == pid && t.last_offset.get() == marker)
                    .copied()
            })
            .collect())
    }

    fn write_out(&mut self, seg: &mut Segment) -> Result<(), CleanError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let interval = self.inp.snapshot.index_interval;
        seg.append(Batches::Whole(&self.out), &self.out_headers, interval)?;
        self.stats.bytes_written += self.out.len() as u64;
        self.out.clear();
        self.out_headers.clear();
        Ok(())
    }

    /// Decides the batch in `self.batch` and appends what stays to
    /// `self.out`. Returns (producer, marker offset) of an abort marker kept.
    fn clean_batch(
        &mut self,
        h: &BatchHeader,
        res: &mut CleanerResources,
    ) -> Result<Option<(ProducerId, i64)>, CleanError> {
        let inp = self.inp;
        let now = inp.now_ms;
        let bytes = &self.batch.bytes;
        let count = u64::try_from(h.records_count).unwrap_or(0);
        self.stats.records_read += count;
        let last_of_producer = rules::is_last_of_producer(h, inp.active_producers);
        let mut marker = None;
        let mut marker_removable = false;
        let discard = if h.is_control() {
            match (end_txn_marker(bytes), ProducerId::from_wire(h.producer_id)) {
                (Some(m), Some(pid)) => {
                    marker_removable =
                        self.tracker.on_marker(h, m.control) == rules::MarkerFate::Removable;
                    if m.control == ControlType::Abort {
                        marker = Some((pid, h.base_offset));
                    }
                    marker_removable && h.delete_horizon_ms().is_some_and(|t| t <= now)
                }
                _ => false,
            }
        } else {
            self.tracker.on_data_batch(h)
        };
        let fate = rules::batch_fate(last_of_producer, discard);
        if fate == rules::BatchFate::Delete {
            return Ok(None);
        }
        let new_horizon = now.saturating_add(inp.config.delete_retention_ms);
        self.kept.clear();
        let (kept_count, all_kept, tombstone_kept, max_ts) = if discard {
            (0, false, false, h.max_timestamp)
        } else if h.is_control() {
            (h.records_count, true, false, h.max_timestamp)
        } else {
            match records::decompressed_body(bytes, h, res.max_batch_bytes) {
                Err(_) => (h.records_count, true, false, h.max_timestamp),
                Ok(body) => {
                    let mut n = 0i32;
                    let mut tombstone = false;
                    let mut max_ts = -1i64;
                    let mut total = 0i32;
                    let mut views = Vec::new();
                    for r in records::records(&body) {
                        let Ok(r) = r else {
                            // Unreadable past here: the batch stays whole.
                            views.clear();
                            total = -1;
                            break;
                        };
                        total += 1;
                        let offset = h.base_offset + r.offset_delta;
                        let latest = r.key.and_then(|k| res.map.get(k));
                        let keep = rules::keep_record(
                            offset,
                            self.read_to,
                            r.key.is_some(),
                            latest,
                            r.has_value,
                            h.delete_horizon_ms(),
                            now,
                        );
                        if keep {
                            n += 1;
                            tombstone |= !r.has_value;
                            max_ts = max_ts.max(h.base_timestamp.saturating_add(r.timestamp_delta));
                            views.push(r);
                        }
                    }
                    if total < 0 {
                        (h.records_count, true, false, h.max_timestamp)
                    } else {
                        let set_horizon = tombstone && h.delete_horizon_ms().is_none();
                        let all = n == total && !set_horizon;
                        if !all {
                            let base = if set_horizon {
                                new_horizon
                            } else {
                                h.base_timestamp
                            };
                            for r in &views {
                                let ts = h.base_timestamp.saturating_add(r.timestamp_delta);
                                r.write_with_timestamp_delta(
                                    ts.saturating_sub(base),
                                    &mut self.kept,
                                );
                            }
                        }
                        let max_ts = if h.is_log_append_time() || n == 0 {
                            h.max_timestamp
                        } else {
                            max_ts
                        };
                        (n, all, tombstone, max_ts)
                    }
                }
            }
        };
        self.stats.records_kept += u64::try_from(kept_count).unwrap_or(0);
        if kept_count == 0 && fate == rules::BatchFate::KeepIfAny {
            return Ok(None);
        }
        let set_horizon = h.delete_horizon_ms().is_none()
            && (tombstone_kept || (h.is_control() && marker_removable));
        let start = self.out.len();
        if all_kept && !set_horizon {
            self.out.extend_from_slice(bytes);
        } else if kept_count == 0 {
            let rewrite = Rewrite {
                records_count: 0,
                base_timestamp: h.max_timestamp,
                max_timestamp: h.max_timestamp,
                delete_horizon: false,
            };
            records::write_batch(h, rewrite, &[], &mut self.out).map_err(bad_batch)?;
        } else if h.is_control() {
            // A marker given its horizon: its one record re-based on it.
            let body = &bytes[BATCH_HEADER_LEN..h.total_size()];
            self.kept.clear();
            for r in records::records(body) {
                let r = r.map_err(bad_batch)?;
                let ts = h.base_timestamp.saturating_add(r.timestamp_delta);
                r.write_with_timestamp_delta(ts.saturating_sub(new_horizon), &mut self.kept);
            }
            let rewrite = Rewrite {
                records_count: h.records_count,
                base_timestamp: new_horizon,
                max_timestamp: h.max_timestamp,
                delete_horizon: true,
            };
            records::write_batch(h, rewrite, &self.kept, &mut self.out).map_err(bad_batch)?;
        } else {
            let rewrite = Rewrite {
                records_count: kept_count,
                base_timestamp: if set_horizon {
                    new_horizon
                } else {
                    h.base_timestamp
                },
                max_timestamp: max_ts,
                delete_horizon: set_horizon || h.delete_horizon_ms().is_some(),
            };
            records::write_batch(h, rewrite, &self.kept, &mut self.out).map_err(bad_batch)?;
        }
        let nh = BatchHeader::parse(&self.out[start..]).map_err(|e| bad_batch(e.to_string()))?;
        if let Some(horizon) = nh.delete_horizon_ms() {
            self.latest_delete_horizon = Some(
                self.latest_delete_horizon
                    .map_or(horizon, |l| l.max(horizon)),
            );
        }
        self.out_headers.push(nh);
        Ok(marker)
    }
}

fn bad_batch(e: impl std::fmt::Display) -> CleanError {
    CleanError::Log(LogError::Corrupt(format!(
        "log cleaner: cannot rewrite a batch: {e}"
    )))
}

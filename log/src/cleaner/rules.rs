//! The cleaner's decisions as pure functions (Kafka 4.x's `LogCleaner`,
//! `LogCleanerManager` and `CleanedTransactionMetadata` are the reference):
//! which part of a log may be cleaned, how dirty it is, which records and
//! batches a pass keeps, and what becomes of transaction markers. The pass
//! in [`super`] reads and writes segments and asks these.

use std::collections::{HashMap, HashSet, VecDeque};

use strand_protocol::batch::{BatchHeader, ControlType};
use strand_types::{Offset, ProducerEpoch, ProducerId};

use crate::txn_index::AbortedTxn;

/// A compacted topic's cleaner settings (topic configs, dynamic; Kafka's
/// names in the comments).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerLogConfig {
    /// `delete.retention.ms`: how long a tombstone, and a transaction marker
    /// with nothing left of its transaction, stay after the pass that first
    /// found them removable.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a segment holding a record younger than
    /// this is not cleaned.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a log whose oldest dirty record is older
    /// than this is cleaned whatever its dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`.
    pub min_cleanable_ratio: f64,
}

impl Default for CleanerLogConfig {
    fn default() -> Self {
        CleanerLogConfig {
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_ratio: 0.5,
        }
    }
}

/// What the cleaner knows of a segment without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    pub base: i64,
    /// One past the segment's last offset (`base` when empty).
    pub next_offset: i64,
    pub size: u64,
    /// Largest batch timestamp, -1 when none.
    pub max_ts: i64,
}

/// The part of a log a pass may clean, and how dirty it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cleanable {
    /// Where the records not cleaned yet start (the last pass's end).
    pub first_dirty: i64,
    /// The first offset a pass must not touch: segments from here on are
    /// kept as they are (the active segment, a segment reaching above the
    /// LSO or the HW, or one too young for `min.compaction.lag.ms`).
    pub first_uncleanable: i64,
    /// How many leading segments lie wholly below `first_uncleanable`.
    pub segments: usize,
    pub clean_bytes: u64,
    pub dirty_bytes: u64,
}

impl Cleanable {
    /// Kafka's cleanable ratio: dirty bytes over all cleanable bytes.
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }
}

/// Where cleaning may go in a log whose segments are `segments` (oldest
/// first, the last one active), whose records below `stable_bound` (the
/// LSO, never above the HW) are final, and whose last pass ended at
/// `checkpoint` (`None`: never cleaned). Whole segments only: a segment
/// holding the bound is not cleaned.
pub fn cleanable(
    segments: &[SegmentSummary],
    log_start: i64,
    checkpoint: Option<i64>,
    stable_bound: i64,
    now_ms: i64,
    min_compaction_lag_ms: i64,
) -> Cleanable {
    let leo = segments.last().map_or(log_start, |s| s.next_offset);
    // A checkpoint outside the log (truncated below it, or deleted below
    // the log start) counts the whole log dirty, as Kafka resets it.
    let first_dirty = match checkpoint {
        Some(c) if c >= log_start && c <= leo => c,
        _ => log_start,
    };
    let non_active = &segments[..segments.len().saturating_sub(1)];
    let mut n = 0;
    for s in non_active {
        let dirty = s.next_offset > first_dirty;
        let too_young = min_compaction_lag_ms > 0
            && dirty
            && s.max_ts > now_ms.saturating_sub(min_compaction_lag_ms);
        if s.next_offset > stable_bound || too_young {
            break;
        }
        n += 1;
    }
    let first_uncleanable = segments.get(n).map_or(leo, |s| s.base);
    let (mut clean_bytes, mut dirty_bytes) = (0, 0);
    for s in &segments[..n] {
        if s.next_offset > first_dirty {
            dirty_bytes += s.size;
        } else {
            clean_bytes += s.size;
        }
    }
    Cleanable {
        first_dirty: first_dirty.min(first_uncleanable),
        first_uncleanable,
        segments: n,
        clean_bytes,
        dirty_bytes,
    }
}

/// Why a log is worth a pass now, most urgent first (the cleaner takes
/// the most urgent log, and among equals the dirtiest).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub enum Urgency {
    /// Only tombstones or markers whose delete horizon has passed.
    Horizon,
    /// The dirty ratio is at or above `min.cleanable.dirty.ratio`.
    Dirty(f64),
    /// A dirty record is older than `max.compaction.lag.ms`.
    Overdue(f64),
}

/// Whether a log is worth a pass (Kafka's `grabFilthiestCompactedLog`):
/// dirty enough, or a dirty record older than the maximum lag
/// (`oldest_dirty_ts`: the first dirty segment's first batch timestamp),
/// or, with some dirty records however few, a delete horizon passed. A
/// log with nothing dirty is not (a pass reaches only as far as the dirty
/// records it reads, in Kafka as here).
pub fn urgency(
    c: &Cleanable,
    config: &CleanerLogConfig,
    oldest_dirty_ts: Option<i64>,
    latest_delete_horizon: Option<i64>,
    now_ms: i64,
) -> Option<Urgency> {
    let ratio = c.dirty_ratio();
    if c.dirty_bytes > 0 {
        let overdue = config.max_compaction_lag_ms < i64::MAX
            && oldest_dirty_ts.is_some_and(|ts| {
                ts >= 0 && now_ms.saturating_sub(ts) > config.max_compaction_lag_ms
            });
        if overdue {
            return Some(Urgency::Overdue(ratio));
        }
        if ratio >= config.min_cleanable_ratio {
            return Some(Urgency::Dirty(ratio));
        }
    }
    let horizon_passed = latest_delete_horizon.is_some_and(|h| h <= now_ms);
    (horizon_passed && c.dirty_bytes > 0).then_some(Urgency::Horizon)
}

/// Consecutive segments cleaned into one (Kafka's `groupSegmentsBySize`):
/// at most `max_bytes` together (`segment.bytes`), and offsets that fit
/// one segment (relative offsets are 32-bit). Returns index ranges.
pub fn group_by_size(segments: &[SegmentSummary], max_bytes: u64) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < segments.len() {
        let mut end = start + 1;
        let mut size = segments[start].size;
        while let Some(next) = segments.get(end) {
            let fits_offsets = next.next_offset - 1 - segments[start].base <= i32::MAX as i64;
            if size + next.size > max_bytes || !fits_offsets {
                break;
            }
            size += next.size;
            end += 1;
        }
        groups.push(start..end);
        start = end;
    }
    groups
}

/// Whether a pass keeps one record (Kafka's `shouldRetainRecord`).
/// `read_to`: the pass looked at every offset below it (records at or
/// above are kept untouched); `latest_for_key`: the latest offset the pass
/// saw for the record's key (`None` if it saw none); `delete_horizon`: the
/// batch's, if set.
pub fn keep_record(
    offset: i64,
    read_to: i64,
    key_present: bool,
    latest_for_key: Option<i64>,
    has_value: bool,
    delete_horizon: Option<i64>,
    now_ms: i64,
) -> bool {
    if offset >= read_to {
        return true;
    }
    // A compacted topic refuses keyless records; any that are here anyway
    // (written before the policy changed) go, as in Kafka.
    if !key_present {
        return false;
    }
    let latest = latest_for_key.is_none_or(|l| offset >= l);
    let tombstone_kept = delete_horizon.is_none_or(|h| now_ms < h);
    latest && (has_value || tombstone_kept)
}

/// What a pass does with a batch as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFate {
    /// Gone, whatever its records.
    Delete,
    /// Kept with the records kept, and gone if none is.
    KeepIfAny,
    /// Kept even with no record (a header alone): it is its producer's
    /// last, whose sequence and epoch the producer state needs.
    KeepEvenEmpty,
}

/// Kafka's batch retention: a producer's last batch stays (maybe empty);
/// otherwise a batch whose records all go (an aborted transaction's, a
/// marker past its horizon) goes whole.
pub fn batch_fate(last_of_active_producer: bool, discard_records: bool) -> BatchFate {
    if last_of_active_producer {
        BatchFate::KeepEvenEmpty
    } else if discard_records {
        BatchFate::Delete
    } else {
        BatchFate::KeepIfAny
    }
}

/// What the producer state says of an active producer's last write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRecord {
    /// The last offset of its last data batch, if it has one.
    pub last_data_offset: Option<Offset>,
    pub producer_epoch: Option<ProducerEpoch>,
}

/// Whether `h` is the batch that carries its producer's last sequence
/// (or, with no data batch left, its last epoch in a marker).
pub fn is_last_of_producer(h: &BatchHeader, active: &HashMap<ProducerId, LastRecord>) -> bool {
    let Some(pid) = ProducerId::from_wire(h.producer_id) else {
        return false;
    };
    active
        .get(&pid)
        .is_some_and(|last| match last.last_data_offset {
            Some(o) => h.last_offset() == o.get(),
            None => {
                h.is_control() && ProducerEpoch::from_wire(h.producer_epoch) == last.producer_epoch
            }
        })
}

/// What becomes of a transaction marker in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerFate {
    /// Records of its transaction were read in this pass: it stays.
    Keep,
    /// Nothing of its transaction is left: it may go once its delete
    /// horizon has passed (the pass sets one if it has none).
    Removable,
}

/// Which transactions a pass is inside of, read in offset order (Kafka's
/// `CleanedTransactionMetadata`): a data batch belongs to an aborted
/// transaction when its producer has one open at its offset.
#[derive(Debug, Default)]
pub struct TxnTracker {
    /// Aborted transactions not reached yet, by first offset.
    pending: VecDeque<AbortedTxn>,
    /// Aborted transactions reached and not closed by their marker, and
    /// whether a batch of theirs was read.
    open_aborted: HashMap<ProducerId, bool>,
    /// Producers with a transactional batch read and no marker since.
    open_committed: HashSet<ProducerId>,
}

impl TxnTracker {
    pub fn new(mut aborted: Vec<AbortedTxn>) -> TxnTracker {
        aborted.sort_by_key(|t| t.first_offset);
        TxnTracker {
            pending: aborted.into(),
            ..TxnTracker::default()
        }
    }

    fn reach(&mut self, offset: i64) {
        while self
            .pending
            .front()
            .is_some_and(|t| t.first_offset.get() <= offset)
        {
            let t = self.pending.pop_front().expect("front exists");
            self.open_aborted.insert(t.producer_id, false);
        }
    }

    /// A data batch: true when its records belong to an aborted
    /// transaction (they go).
    pub fn on_data_batch(&mut self, h: &BatchHeader) -> bool {
        self.reach(h.last_offset());
        if !h.is_transactional() {
            return false;
        }
        let Some(pid) = ProducerId::from_wire(h.producer_id) else {
            return false;
        };
        match self.open_aborted.get_mut(&pid) {
            Some(read) => {
                *read = true;
                true
            }
            None => {
                self.open_committed.insert(pid);
                false
            }
        }
    }

    /// A transaction marker of `control` type.
    pub fn on_marker(&mut self, h: &BatchHeader, control: ControlType) -> MarkerFate {
        self.reach(h.last_offset());
        let Some(pid) = ProducerId::from_wire(h.producer_id) else {
            return MarkerFate::Keep;
        };
        let read = match control {
            ControlType::Abort => self.open_aborted.remove(&pid).unwrap_or(false),
            ControlType::Commit => self.open_committed.remove(&pid),
        };
        if read {
            MarkerFate::Keep
        } else {
            MarkerFate::Removable
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(base: i64, next: i64, size: u64, max_ts: i64) -> SegmentSummary {
        SegmentSummary {
            base,
            next_offset: next,
            size,
            max_ts,
        }
    }

    #[test]
    fn cleanable_stops_at_the_active_segment_the_bound_and_the_lag() {
        let segs = [
            seg(0, 10, 100, 1_000),
            seg(10, 20, 100, 2_000),
            seg(20, 30, 100, 3_000),
            seg(30, 35, 50, 4_000), // active
        ];
        // (checkpoint, bound, now, min lag) -> (first dirty, first uncleanable, segments, clean, dirty)
        let table = [
            (None, 35, 10_000, 0, (0, 30, 3, 0, 300)),
            (Some(10), 35, 10_000, 0, (10, 30, 3, 100, 200)),
            (Some(30), 35, 10_000, 0, (30, 30, 3, 300, 0)),
            (None, 25, 10_000, 0, (0, 20, 2, 0, 200)), // LSO inside segment 20
            (None, 20, 10_000, 0, (0, 20, 2, 0, 200)), // LSO at its base
            (None, 35, 3_500, 1_000, (0, 20, 2, 0, 200)), // segment 20 too young
            (Some(20), 35, 3_500, 1_000, (20, 20, 2, 200, 0)),
            (Some(99), 35, 10_000, 0, (0, 30, 3, 0, 300)), // checkpoint past the LEO: reset
            (Some(-1), 35, 10_000, 0, (0, 30, 3, 0, 300)),
        ];
        for (ckpt, bound, now, lag, want) in table {
            let c = cleanable(&segs, 0, ckpt, bound, now, lag);
            assert_eq!(
                (
                    c.first_dirty,
                    c.first_uncleanable,
                    c.segments,
                    c.clean_bytes,
                    c.dirty_bytes
                ),
                want,
                "{ckpt:?} {bound} {now} {lag}"
            );
        }
        // A lone active segment is never cleaned.
        let c = cleanable(&segs[3..], 30, None, 35, 10_000, 0);
        assert_eq!((c.segments, c.first_uncleanable), (0, 30));
    }

    #[test]
    fn urgency_follows_ratio_lag_and_horizon() {
        let config = CleanerLogConfig {
            min_cleanable_ratio: 0.5,
            max_compaction_lag_ms: 1_000,
            ..CleanerLogConfig::default()
        };
        let c = |clean, dirty| Cleanable {
            first_dirty: 0,
            first_uncleanable: 10,
            segments: 1,
            clean_bytes: clean,
            dirty_bytes: dirty,
        };
        assert_eq!(
            urgency(&c(50, 50), &config, None, None, 0),
            Some(Urgency::Dirty(0.5))
        );
        assert_eq!(urgency(&c(60, 40), &config, None, None, 0), None);
        assert_eq!(
            urgency(&c(60, 40), &config, Some(100), None, 2_000),
            Some(Urgency::Overdue(0.4))
        );
        assert_eq!(urgency(&c(60, 40), &config, Some(-1), None, 2_000), None);
        assert_eq!(
            urgency(&c(90, 10), &config, None, Some(1_500), 2_000),
            Some(Urgency::Horizon)
        );
        assert_eq!(urgency(&c(90, 10), &config, None, Some(2_500), 2_000), None);
        assert_eq!(
            urgency(&c(100, 0), &config, Some(100), Some(1_500), 2_000),
            None,
            "nothing dirty"
        );
        assert!(Urgency::Overdue(0.1) > Urgency::Dirty(0.9));
        assert!(Urgency::Dirty(0.6) > Urgency::Dirty(0.5));
        assert!(Urgency::Dirty(0.0) > Urgency::Horizon);
    }

    #[test]
    fn groups_respect_size_and_offset_span() {
        let segs = [
            seg(0, 10, 40, 0),
            seg(10, 20, 40, 0),
            seg(20, 30, 40, 0),
            seg(30, 40, 100, 0),
        ];
        assert_eq!(group_by_size(&segs, 100), vec![0..2, 2..3, 3..4]);
        assert_eq!(group_by_size(&segs, 1_000), vec![0..4]);
        let wide = [
            seg(0, 10, 1, 0),
            seg(i32::MAX as i64, i32::MAX as i64 + 5, 1, 0),
        ];
        assert_eq!(group_by_size(&wide, 1_000), vec![0..1, 1..2]);
    }

    #[test]
    fn keep_record_table() {
        // (offset, read_to, key, latest, value, horizon, now) -> keep
        let table = [
            ((5, 10, true, Some(5), true, None, 0), true),
            ((4, 10, true, Some(5), true, None, 0), false), // superseded
            ((4, 3, true, Some(5), true, None, 0), true),   // past what the pass read
            ((4, 10, true, None, true, None, 0), true),     // key not in this pass's map
            ((5, 10, false, None, true, None, 0), false),   // keyless
            ((5, 10, true, Some(5), false, None, 0), true), // tombstone, no horizon yet
            ((5, 10, true, Some(5), false, Some(100), 99), true),
            ((5, 10, true, Some(5), false, Some(100), 100), false), // horizon passed
            ((5, 10, true, None, false, Some(100), 100), false),
            ((5, 10, true, Some(5), true, Some(100), 100), true), // a value is never timed out
        ];
        for ((o, r, k, l, v, h, n), want) in table {
            assert_eq!(
                keep_record(o, r, k, l, v, h, n),
                want,
                "{o} {r} {k} {l:?} {v} {h:?} {n}"
            );
        }
    }

    fn header(
        base: i64,
        last_delta: i32,
        pid: i64,
        epoch: i16,
        txn: bool,
        control: bool,
    ) -> BatchHeader {
        let mut attributes = 0;
        if txn {
            attributes |= 0x10;
        }
        if control {
            attributes |= 0x20;
        }
        BatchHeader {
            base_offset: base,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta: last_delta,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: 0,
            records_count: last_delta + 1,
        }
    }

    #[test]
    fn last_batch_of_a_producer_is_kept_even_empty() {
        let active = HashMap::from([
            (
                ProducerId::new(1),
                LastRecord {
                    last_data_offset: Some(Offset::new(9)),
                    producer_epoch: ProducerEpoch::from_wire(0),
                },
            ),
            (
                ProducerId::new(2),
                LastRecord {
                    last_data_offset: None,
                    producer_epoch: ProducerEpoch::from_wire(3),
                },
            ),
        ]);
        assert!(is_last_of_producer(
            &header(5, 4, 1, 0, false, false),
            &active
        ));
        assert!(!is_last_of_producer(
            &header(5, 3, 1, 0, false, false),
            &active
        ));
        assert!(is_last_of_producer(
            &header(20, 0, 2, 3, true, true),
            &active
        ));
        assert!(!is_last_of_producer(
            &header(20, 0, 2, 2, true, true),
            &active
        ));
        assert!(!is_last_of_producer(
            &header(20, 0, -1, -1, false, false),
            &active
        ));
        assert!(!is_last_of_producer(
            &header(20, 0, 3, 0, false, false),
            &active
        ));
        assert_eq!(batch_fate(true, true), BatchFate::KeepEvenEmpty);
        assert_eq!(batch_fate(false, true), BatchFate::Delete);
        assert_eq!(batch_fate(false, false), BatchFate::KeepIfAny);
    }

    #[test]
    fn markers_stay_while_their_transaction_has_batches() {
        let aborted = vec![AbortedTxn {
            producer_id: ProducerId::new(7),
            first_offset: Offset::new(10),
            last_offset: Offset::new(20),
            last_stable_offset: Offset::new(21),
        }];
        let mut t = TxnTracker::new(aborted.clone());
        // Producer 8 commits, producer 7 aborts; both interleaved.
        assert!(!t.on_data_batch(&header(5, 0, 8, 0, true, false)));
        assert!(t.on_data_batch(&header(10, 1, 7, 0, true, false)));
        assert!(!t.on_data_batch(&header(12, 0, 9, 0, false, false)));
        assert_eq!(
            t.on_marker(&header(15, 0, 8, 0, true, true), ControlType::Commit),
            MarkerFate::Keep
        );
        assert_eq!(
            t.on_marker(&header(20, 0, 7, 0, true, true), ControlType::Abort),
            MarkerFate::Keep
        );
        // A later pass, with the transactions' batches gone: both removable.
        let mut t = TxnTracker::new(aborted);
        assert_eq!(
            t.on_marker(&header(15, 0, 8, 0, true, true), ControlType::Commit),
            MarkerFate::Removable
        );
        assert_eq!(
            t.on_marker(&header(20, 0, 7, 0, true, true), ControlType::Abort),
            MarkerFate::Removable
        );
        // After its abort marker, producer 7's next transaction is not aborted.
        assert!(!t.on_data_batch(&header(30, 0, 7, 0, true, false)));
    }
}

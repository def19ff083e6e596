mod common;

use common::*;
use strand_log::{LogConfig, LogError, PartitionLog};
use strand_protocol::batch::{validate_record_set, BatchIter};

fn open(dir: &std::path::Path) -> PartitionLog {
    PartitionLog::open(dir, LogConfig::default()).unwrap()
}

#[test]
fn offsets_are_assigned_in_place_across_appends() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (o(0), o(0)));

    let a = append(&mut log, 3);
    assert_eq!((a.first_offset, a.last_offset), (o(0), o(2)));
    assert_eq!(a.max_timestamp, 1_002);
    assert_eq!(a.offset_of_max_timestamp, Some(o(2)));
    assert_eq!(a.log_append_time, -1);
    let b = append(&mut log, 1);
    assert_eq!((b.first_offset, b.last_offset), (o(3), o(3)));

    // Two batches in one record set, appended with epoch 4.
    let mut set = batch(2);
    set.extend_from_slice(&batch(5));
    let hs = validate_record_set(&set).unwrap();
    let orig = set.clone();
    let c = log.append_as_leader(&set, &hs, e(4), None).unwrap();
    assert_eq!((c.first_offset, c.last_offset), (o(4), o(10)));
    assert_eq!(log.log_end_offset(), o(11));
    assert_eq!(set, orig, "the caller's bytes are not changed");
    let written: Vec<(i64, i32)> = c
        .batches
        .iter()
        .map(|h| (h.base_offset, h.partition_leader_epoch))
        .collect();
    assert_eq!(written, vec![(4, 4), (6, 4)]);

    let all = read_all(&log);
    let got = validate_record_set(&all).unwrap();
    let bases: Vec<(i64, i64, i32)> = got
        .iter()
        .map(|h| (h.base_offset, h.last_offset(), h.partition_leader_epoch))
        .collect();
    assert_eq!(bases, vec![(0, 2, 0), (3, 3, 0), (4, 5, 4), (6, 10, 4)]);
    // The stored bytes are the appended bytes with only each batch's base
    // offset and epoch changed (the CRC does not cover them: still valid).
    let stored = &all[all.len() - set.len()..];
    let mut at = 0;
    for (h, (base, epoch)) in hs.iter().zip([(4i64, 4i32), (6, 4)]) {
        let (b, o) = (
            &stored[at..at + h.total_size()],
            &orig[at..at + h.total_size()],
        );
        assert_eq!(&b[0..8], &base.to_be_bytes());
        assert_eq!(&b[8..12], &o[8..12]);
        assert_eq!(&b[12..16], &epoch.to_be_bytes());
        assert_eq!(&b[16..], &o[16..]);
        at += h.total_size();
    }
}

#[test]
fn log_append_time_is_stamped() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path());
    append(&mut log, 2);
    let b = batch(3);
    let h = validate_record_set(&b).unwrap();
    let info = log.append_as_leader(&b, &h, e(1), Some(55_555)).unwrap();
    assert_eq!(info.log_append_time, 55_555);
    assert_eq!(info.max_timestamp, 55_555);
    assert_eq!(info.offset_of_max_timestamp, Some(o(2)));
    let r = log.read(o(2), usize::MAX, o(i64::MAX), false).unwrap();
    let hs = validate_record_set(&r.records).unwrap();
    assert_eq!(hs.len(), 1);
    assert!(hs[0].is_log_append_time());
    assert_eq!(hs[0].max_timestamp, 55_555);
    assert_eq!(
        log.offset_for_timestamp(50_000).unwrap(),
        Some((o(2), 55_555))
    );
    assert_eq!(
        log.max_timestamp_and_offset().unwrap(),
        Some((o(2), 55_555))
    );
}

#[test]
fn rejects_headers_that_do_not_match_the_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path());
    let b = batch(2);
    let h = validate_record_set(&b).unwrap();
    let mut longer = b.clone();
    longer.push(0);
    assert!(matches!(
        log.append_as_leader(&longer, &h, e(0), None),
        Err(LogError::InvalidRecords(_))
    ));
    assert!(matches!(
        log.append_as_leader(&b, &[], e(0), None),
        Err(LogError::InvalidRecords(_))
    ));
    assert_eq!(log.log_end_offset(), o(0));
    assert_eq!(log.size_bytes(), 0);
}

#[test]
fn read_boundaries() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(tmp.path(), small_segments(1 << 20)).unwrap();
    let sizes: Vec<usize> = (0..3)
        .map(|_| append_bytes(&mut log, batch(3), 0))
        .map(|_| batch(3).len())
        .collect();
    let one = sizes[0];
    let leo = log.log_end_offset();
    assert_eq!(leo, o(9));
    let bases = |r: &strand_log::ReadResult| {
        headers(&r.records)
            .iter()
            .map(|h| h.base_offset)
            .collect::<Vec<_>>()
    };

    // The first batch may start before the fetch offset.
    let r = log.read(o(4), usize::MAX, leo, false).unwrap();
    assert_eq!(bases(&r), vec![3, 6]);
    assert_eq!((r.log_start_offset, r.log_end_offset), (o(0), o(9)));
    // max_offset is exclusive and never splits a batch.
    assert_eq!(
        bases(&log.read(o(0), usize::MAX, o(6), false).unwrap()),
        vec![0, 3]
    );
    assert_eq!(
        bases(&log.read(o(0), usize::MAX, o(5), false).unwrap()),
        vec![0]
    );
    assert!(log
        .read(o(3), usize::MAX, o(5), false)
        .unwrap()
        .records
        .is_empty());
    // fetch_offset == max_offset -> empty.
    assert!(log
        .read(o(6), usize::MAX, o(6), true)
        .unwrap()
        .records
        .is_empty());
    assert!(log
        .read(o(9), usize::MAX, o(9), true)
        .unwrap()
        .records
        .is_empty());
    // max_bytes.
    assert_eq!(
        bases(&log.read(o(0), 2 * one, leo, false).unwrap()),
        vec![0, 3]
    );
    assert_eq!(
        bases(&log.read(o(0), 2 * one + 1, leo, false).unwrap()),
        vec![0, 3]
    );
    assert_eq!(
        bases(&log.read(o(0), 2 * one - 1, leo, false).unwrap()),
        vec![0]
    );
    assert!(log
        .read(o(0), one - 1, leo, false)
        .unwrap()
        .records
        .is_empty());
    assert_eq!(bases(&log.read(o(0), 1, leo, true).unwrap()), vec![0]);
    assert_eq!(log.read(o(0), 1, leo, true).unwrap().records.len(), one);
    // Out of range. (A negative fetch offset is no `Offset`: the fetch
    // handler answers OFFSET_OUT_OF_RANGE for it before reading.)
    let err = log.read(o(10), 100, o(20), true).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::OffsetOutOfRange {
                offset,
                log_start,
                log_end
            } if (offset, log_start, log_end) == (o(10), o(0), o(9))
        ),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "offset 10 is out of range [0, 9]");
}

#[test]
fn rolls_by_size_and_reads_across_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let one = batch(2).len() as u64;
    let mut log = PartitionLog::open(tmp.path(), small_segments(one * 3)).unwrap();
    for _ in 0..10 {
        append(&mut log, 2);
    }
    assert_eq!(log.segment_base_offsets(), [0, 6, 12, 18].map(o));
    assert_eq!(log.size_bytes(), one * 10);
    // Rolled segments were flushed.
    assert!(log.recovery_point() >= o(18));
    // Reads span segments and start mid-segment.
    let r = log.read(o(7), usize::MAX, o(20), false).unwrap();
    assert_eq!(
        headers(&r.records)
            .iter()
            .map(|h| h.base_offset)
            .collect::<Vec<_>>(),
        vec![6, 8, 10, 12, 14, 16, 18]
    );
    let r = log.read(o(6), (one * 2) as usize, o(20), false).unwrap();
    assert_eq!(headers(&r.records).len(), 2);
    for off in 0..20 {
        let r = log.read(o(off), 1, o(20), true).unwrap();
        let h = headers(&r.records);
        assert_eq!(h.len(), 1);
        assert!(h[0].base_offset <= off && off <= h[0].last_offset());
    }
    let before = read_all(&log);
    log.close().unwrap();
    let log = PartitionLog::open(tmp.path(), small_segments(one * 3)).unwrap();
    assert_eq!(log.log_end_offset(), o(20));
    assert_eq!(read_all(&log), before);
}

#[test]
fn rolls_by_time_and_index_fullness() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_ms: 1_000,
        ..LogConfig::default()
    };
    let mut log = PartitionLog::open(tmp.path(), cfg).unwrap();
    let t0 = 10_000_000_000_000i64; // far in the future relative to the open time
    let b = batch(1);
    let h = validate_record_set(&b).unwrap();
    log.append_as_leader_at(&b, &h, e(0), None, 0).unwrap();
    let b = batch(1);
    log.append_as_leader_at(&b, &h, e(0), None, t0).unwrap();
    assert_eq!(log.segment_base_offsets(), [0, 1].map(o));
    // An idle partition rolls on maybe_roll, an empty active segment does not.
    log.maybe_roll(t0).unwrap();
    assert_eq!(log.segment_base_offsets(), [0, 1].map(o));
    log.maybe_roll(t0 + 1_001).unwrap();
    assert_eq!(log.segment_base_offsets(), [0, 1, 2].map(o));
    log.maybe_roll(t0 + 100_000).unwrap();
    assert_eq!(log.segment_base_offsets(), [0, 1, 2].map(o));

    // A full offset index (2 entries of 8 bytes) forces a roll.
    let tmp = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        index_interval_bytes: 1,
        segment_index_bytes: 24,
        ..LogConfig::default()
    };
    let mut log = PartitionLog::open(tmp.path(), cfg).unwrap();
    for _ in 0..6 {
        append(&mut log, 1);
    }
    assert!(
        log.segment_base_offsets().len() >= 2,
        "{:?}",
        log.segment_base_offsets()
    );
    assert_eq!(read_all(&log).len(), batch(1).len() * 6);
}

#[test]
fn retention_by_size_and_time() {
    let tmp = tempfile::tempdir().unwrap();
    let one = batch(1).len() as u64;
    let mut cfg = small_segments(one * 2);
    cfg.retention_ms = -1;
    let mut log = PartitionLog::open(tmp.path(), cfg.clone()).unwrap();
    for _ in 0..9 {
        append(&mut log, 1);
    }
    assert_eq!(log.segment_base_offsets(), [0, 2, 4, 6, 8].map(o));
    assert_eq!(log.apply_retention(i64::MAX).unwrap(), 0);

    // Size: 9 batches, keep at most 5 -> delete segments while the excess covers them.
    cfg.retention_bytes = (one * 5) as i64;
    log.set_config(cfg.clone());
    assert_eq!(log.apply_retention(0).unwrap(), 2);
    assert_eq!(log.segment_base_offsets(), [4, 6, 8].map(o));
    assert_eq!(log.log_start_offset(), o(4));
    assert!(matches!(
        log.read(o(3), 100, o(9), true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(
        headers(&log.read(o(4), 1, o(9), true).unwrap().records)[0].base_offset,
        4
    );

    // Never the active segment, even if it alone exceeds the limit.
    cfg.retention_bytes = 0;
    log.set_config(cfg.clone());
    assert_eq!(log.apply_retention(0).unwrap(), 2);
    assert_eq!(log.segment_base_offsets(), [o(8)]);
    assert_eq!(log.log_start_offset(), o(8));
    assert_eq!(log.log_end_offset(), o(9));

    // Time: timestamps of encode_batch are 1000.., so a segment's largest is 1000.
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = small_segments(one * 2);
    cfg.retention_ms = 500;
    let mut log = PartitionLog::open(tmp.path(), cfg).unwrap();
    append(&mut log, 1);
    append(&mut log, 1);
    append_bytes(&mut log, batch_with_timestamps(&[5_000]), 0);
    append_bytes(&mut log, batch_with_timestamps(&[5_000]), 0);
    append(&mut log, 1);
    assert_eq!(log.segment_base_offsets(), [0, 2, 4].map(o));
    assert_eq!(log.apply_retention(1_500).unwrap(), 0);
    assert_eq!(log.apply_retention(1_501).unwrap(), 1);
    assert_eq!(log.segment_base_offsets(), [2, 4].map(o));
    // The second segment is younger; the active one (timestamp 1000) is kept.
    assert_eq!(log.apply_retention(5_500).unwrap(), 0);
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 1);
    assert_eq!(log.segment_base_offsets(), [o(4)]);
    assert_eq!(log.log_start_offset(), o(4));
    // Bounded by an upper offset (e.g. the HW).
    append(&mut log, 1);
    append(&mut log, 1);
    assert_eq!(log.apply_retention_below(1_000_000, o(5)).unwrap(), 0);
    assert_eq!(log.apply_retention_below(1_000_000, o(6)).unwrap(), 1);
    // The log start survives a reopen.
    let start = log.log_start_offset();
    drop(log);
    let log = open(tmp.path());
    assert_eq!(log.log_start_offset(), start);
}

#[test]
fn delete_records_moves_log_start_and_persists() {
    let tmp = tempfile::tempdir().unwrap();
    let one = batch(2).len() as u64;
    let mut log = PartitionLog::open(tmp.path(), small_segments(one * 2)).unwrap();
    for _ in 0..5 {
        append(&mut log, 2);
    }
    assert_eq!(log.segment_base_offsets(), [0, 4, 8].map(o));
    assert_eq!(log.delete_records_before(o(5)).unwrap(), o(5));
    assert_eq!(log.segment_base_offsets(), [4, 8].map(o));
    assert!(matches!(
        log.read(o(4), 100, o(10), true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    // The batch containing the new log start is returned whole.
    let r = log.read(o(5), 1, o(10), true).unwrap();
    assert_eq!(headers(&r.records)[0].base_offset, 4);
    assert_eq!(r.log_start_offset, o(5));
    // Lower values are no-ops; beyond the LEO is out of range.
    assert_eq!(log.delete_records_before(o(2)).unwrap(), o(5));
    assert!(matches!(
        log.delete_records_before(o(11)),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    // Up to the LEO: the active segment stays.
    assert_eq!(log.delete_records_before(o(10)).unwrap(), o(10));
    assert_eq!(log.segment_base_offsets(), [o(8)]);
    assert!(log
        .read(o(10), 100, o(10), true)
        .unwrap()
        .records
        .is_empty());
    drop(log);
    let mut log = open(tmp.path());
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (o(10), o(10))
    );
    assert_eq!(append(&mut log, 1).first_offset, o(10));
}

#[test]
fn truncate_to_drops_batches_and_fixes_state() {
    let tmp = tempfile::tempdir().unwrap();
    let one = batch(3).len() as u64;
    let mut log = PartitionLog::open(tmp.path(), small_segments(one * 2)).unwrap();
    for epoch in 0..6 {
        append_bytes(&mut log, batch(3), epoch / 2);
    }
    assert_eq!(log.log_end_offset(), o(18));
    assert_eq!(log.segment_base_offsets(), [0, 6, 12].map(o));
    assert_eq!(log.epoch_entries(), epochs(&[(0, 0), (1, 6), (2, 12)]));
    log.checkpoint_high_watermark(o(18)).unwrap();
    log.write_producer_snapshot(o(15), b"late").unwrap();
    log.write_producer_snapshot(o(6), b"early").unwrap();

    // Mid-batch: the straddling batch goes whole.
    log.truncate_to(o(13)).unwrap();
    assert_eq!(log.log_end_offset(), o(12));
    assert_eq!(log.segment_base_offsets(), [0, 6, 12].map(o));
    assert_eq!(log.epoch_entries(), epochs(&[(0, 0), (1, 6)]));
    assert_eq!(log.high_watermark_checkpoint(), o(12));
    assert_eq!(
        log.latest_producer_snapshot().unwrap(),
        Some((o(6), b"early".to_vec()))
    );
    // Batch boundary inside an older segment: later segments are deleted.
    log.truncate_to(o(3)).unwrap();
    assert_eq!(log.log_end_offset(), o(3));
    assert_eq!(log.segment_base_offsets(), [o(0)]);
    assert_eq!(log.end_offset_for_epoch(e(0)), Some((e(0), o(3))));
    assert_eq!(log.end_offset_for_epoch(e(1)), None);
    // No-op above the LEO.
    log.truncate_to(o(100)).unwrap();
    assert_eq!(log.log_end_offset(), o(3));
    // Appends continue.
    assert_eq!(append_bytes(&mut log, batch(2), 7).first_offset, o(3));
    assert_eq!(log.epoch_entries(), epochs(&[(0, 0), (7, 3)]));
    let all = read_all(&log);
    assert_eq!(
        headers(&all)
            .iter()
            .map(|h| h.base_offset)
            .collect::<Vec<_>>(),
        vec![0, 3]
    );
    drop(log);
    let log = PartitionLog::open(tmp.path(), small_segments(one * 2)).unwrap();
    assert_eq!(log.log_end_offset(), o(5));
    assert_eq!(read_all(&log), all);
    assert_eq!(log.epoch_entries(), epochs(&[(0, 0), (7, 3)]));

    // Truncating below the first segment restarts the log there.
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path());
    append(&mut log, 4);
    log.delete_records_before(o(4)).unwrap();
    append(&mut log, 2);
    log.truncate_fully_and_start_at(o(100)).unwrap();
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (o(100), o(100))
    );
    assert_eq!(append(&mut log, 1).first_offset, o(100));
}

#[test]
fn epoch_cache_end_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path());
    assert_eq!(log.latest_epoch(), None);
    assert_eq!(log.end_offset_for_epoch(e(0)), None);
    append_bytes(&mut log, batch(2), 1); // 0..2 epoch 1
    append_bytes(&mut log, batch(3), 1); // 2..5
    append_bytes(&mut log, batch(1), 3); // 5
    append_bytes(&mut log, batch(4), 6); // 6..10
    assert_eq!(log.latest_epoch(), Some(e(6)));
    // An undefined request (-1) is no `LeaderEpoch`: the OffsetForLeaderEpoch
    // handler answers it (-1, -1) without asking the log.
    let table = [
        (0, (0, 0)),
        (1, (1, 5)),
        (2, (1, 5)),
        (3, (3, 6)),
        (5, (3, 6)),
        (6, (6, 10)),
        (7, (-1, -1)),
    ];
    for (req, expect) in table {
        assert_eq!(
            wire(log.end_offset_for_epoch(e(req))),
            expect,
            "epoch {req}"
        );
    }
    // A new leader assigns its epoch at the LEO before writing.
    log.assign_epoch_start_offset(e(8), o(10)).unwrap();
    assert_eq!(log.end_offset_for_epoch(e(6)), Some((e(6), o(10))));
    assert_eq!(log.end_offset_for_epoch(e(8)), Some((e(8), o(10))));
    drop(log);
    // As in Kafka, reopening trims entries starting at or beyond the LEO (an
    // epoch with no data yet); the leader assigns it again when it takes over.
    let log = open(tmp.path());
    assert_eq!(log.epoch_entries(), epochs(&[(1, 0), (3, 5), (6, 6)]));
}

#[test]
fn follower_append_keeps_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let mut leader = open(&tmp.path().join("leader"));
    append_bytes(&mut leader, batch(2), 3);
    append_bytes(&mut leader, batch(2), 5);
    let data = read_all(&leader);
    let hs = validate_record_set(&data).unwrap();
    let mut follower = open(&tmp.path().join("follower"));
    let info = follower.append_as_follower(&data, &hs).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (o(0), o(3)));
    assert_eq!(follower.epoch_entries(), epochs(&[(3, 0), (5, 2)]));
    assert_eq!(read_all(&follower), data);
    let err = follower.append_as_follower(&data, &hs).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::UnexpectedAppendOffset {
                first_offset,
                log_end
            } if (first_offset, log_end) == (o(0), o(4))
        ),
        "{err:?}"
    );
}

/// A batch without a leader epoch (-1) or at a negative base offset, as a
/// broken leader might send: the first adds no epoch-cache entry (as Kafka
/// ignores an undefined epoch), the second is refused.
#[test]
fn follower_append_of_wire_sentinels() {
    use strand_protocol::batch::assign_offset_and_epoch;
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path());
    let mut b = batch(2);
    assign_offset_and_epoch(&mut b, 0, -1);
    let h = validate_record_set(&b).unwrap();
    let info = log.append_as_follower(&b, &h).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (o(0), o(1)));
    assert_eq!(log.epoch_entries(), vec![]);
    assert_eq!(log.latest_epoch(), None);
    let mut b = batch(1);
    assign_offset_and_epoch(&mut b, -1, 0);
    let h = validate_record_set(&b).unwrap();
    assert!(matches!(
        log.append_as_follower(&b, &h),
        Err(LogError::InvalidRecords(_))
    ));
    assert_eq!(log.log_end_offset(), o(2));
}

#[test]
fn timestamp_lookups() {
    let tmp = tempfile::tempdir().unwrap();
    let one = batch_with_timestamps(&[1, 2, 3]).len() as u64;
    let mut log = PartitionLog::open(tmp.path(), small_segments(one * 2)).unwrap();
    assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
    assert_eq!(log.max_timestamp_and_offset().unwrap(), None);
    append_bytes(&mut log, batch_with_timestamps(&[100, 300, 200]), 0); // 0..3
    append_bytes(&mut log, batch_with_timestamps(&[150, 400, 400]), 0); // 3..6
    append_bytes(&mut log, batch_with_timestamps(&[390, 500, 450]), 0); // 6..9 (new segment)
    append_bytes(&mut log, batch_with_timestamps(&[50, 60, 70]), 0); // 9..12
    assert!(log.segment_base_offsets().len() >= 2);
    let cases = [
        (0, Some((o(0), 100))),
        (100, Some((o(0), 100))),
        (101, Some((o(1), 300))),
        (250, Some((o(1), 300))),
        (301, Some((o(4), 400))),
        (400, Some((o(4), 400))),
        (401, Some((o(7), 500))),
        (460, Some((o(7), 500))),
        (501, None),
    ];
    for (ts, expect) in cases {
        assert_eq!(log.offset_for_timestamp(ts).unwrap(), expect, "ts {ts}");
    }
    assert_eq!(log.max_timestamp_and_offset().unwrap(), Some((o(7), 500)));
    // Records below the log start are skipped.
    log.delete_records_before(o(2)).unwrap();
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((o(2), 200)));
    // Still right after a clean reopen (max timestamp comes from the time index).
    log.close().unwrap();
    let log = PartitionLog::open(tmp.path(), small_segments(one * 2)).unwrap();
    assert_eq!(log.max_timestamp_and_offset().unwrap(), Some((o(7), 500)));
    assert_eq!(log.offset_for_timestamp(401).unwrap(), Some((o(7), 500)));
    assert_eq!(log.offset_for_timestamp(301).unwrap(), Some((o(4), 400)));
}

#[test]
fn batch_headers_from_walks_all_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let one = batch(2).len() as u64;
    let mut log = PartitionLog::open(tmp.path(), small_segments(one * 2)).unwrap();
    for _ in 0..5 {
        append(&mut log, 2);
    }
    let bases = |v: Vec<strand_protocol::batch::BatchHeader>| {
        v.iter().map(|h| h.base_offset).collect::<Vec<_>>()
    };
    assert_eq!(
        bases(log.batch_headers_from(o(0)).unwrap()),
        vec![0, 2, 4, 6, 8]
    );
    assert_eq!(bases(log.batch_headers_from(o(5)).unwrap()), vec![4, 6, 8]);
    assert_eq!(
        bases(log.batch_headers_from(o(10)).unwrap()),
        Vec::<i64>::new()
    );
    log.delete_records_before(o(3)).unwrap();
    assert_eq!(
        bases(log.batch_headers_from(o(0)).unwrap()),
        vec![2, 4, 6, 8]
    );
}

#[test]
fn checkpoints_and_snapshots_survive_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path());
    append(&mut log, 5);
    assert_eq!(log.high_watermark_checkpoint(), o(0));
    log.checkpoint_high_watermark(o(3)).unwrap();
    log.write_producer_snapshot(o(1), b"one").unwrap();
    log.write_producer_snapshot(o(3), b"three").unwrap();
    log.write_producer_snapshot(o(5), b"five").unwrap();
    let snaps: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.ends_with(".snapshot"))
        .collect();
    assert_eq!(snaps.len(), 2);
    assert_eq!(
        log.latest_producer_snapshot().unwrap(),
        Some((o(5), b"five".to_vec()))
    );
    log.close().unwrap();
    assert!(tmp.path().join(".kafka_cleanshutdown").exists());
    let log = open(tmp.path());
    assert!(!tmp.path().join(".kafka_cleanshutdown").exists());
    assert_eq!(log.high_watermark_checkpoint(), o(3));
    assert_eq!(
        log.latest_producer_snapshot().unwrap(),
        Some((o(5), b"five".to_vec()))
    );
    let dir = log.dir().to_path_buf();
    log.delete().unwrap();
    assert!(!dir.exists());
}

#[test]
fn flush_policies_move_the_recovery_point() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        flush_interval_messages: 4,
        ..LogConfig::default()
    };
    let mut log = PartitionLog::open(tmp.path(), cfg).unwrap();
    append(&mut log, 2);
    assert_eq!(log.recovery_point(), o(0));
    append(&mut log, 2);
    assert_eq!(log.recovery_point(), o(4));
    log.set_config(LogConfig {
        flush_interval_ms: 1_000,
        ..LogConfig::default()
    });
    append(&mut log, 1);
    log.maybe_flush(0).unwrap();
    assert_eq!(log.recovery_point(), o(4));
    log.maybe_flush(i64::MAX / 2).unwrap();
    assert_eq!(log.recovery_point(), o(5));
    append(&mut log, 1);
    log.flush().unwrap();
    assert_eq!(log.recovery_point(), o(6));
}

#[test]
fn concurrent_reads_share_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(tmp.path(), small_segments(4096)).unwrap();
    for _ in 0..50 {
        append(&mut log, 3);
    }
    let log = std::sync::Arc::new(parking_lot::RwLock::new(log));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for off in (t..150).step_by(7) {
                    let g = log.read();
                    let r = g.read(o(off), 1, o(150), true).unwrap();
                    let h = headers(&r.records);
                    assert!(h[0].base_offset <= off && off <= h[0].last_offset());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(BatchIter::new(&read_all(&log.read())).count(), 50);
}

#[test]
fn truncate_at_leo_drops_an_epoch_with_no_batches() {
    // A broker that led epoch 3 without writing, then follows again: its
    // epoch cache must not offer epoch 3 (which the leader may never have
    // had) as the last fetched epoch, or the follower would loop on the
    // diverging-epoch answer without ever truncating.
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path());
    append_bytes(&mut log, batch(3), 1);
    log.assign_epoch_start_offset(e(3), o(3)).unwrap();
    assert_eq!(log.epoch_entries(), epochs(&[(1, 0), (3, 3)]));
    log.truncate_to(o(3)).unwrap();
    assert_eq!(log.log_end_offset(), o(3));
    assert_eq!(log.epoch_entries(), epochs(&[(1, 0)]));
    assert_eq!(log.latest_epoch(), Some(e(1)));
    // The change is durable.
    drop(log);
    let log = open(tmp.path());
    assert_eq!(log.epoch_entries(), epochs(&[(1, 0)]));
}

/// The checkpoint files keep Kafka's text, and snapshot files their 20-digit
/// names: the newtypes are converted where the files are written.
#[test]
fn checkpoint_files_are_kafkas_text() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path());
    append_bytes(&mut log, batch(3), 0);
    append_bytes(&mut log, batch(2), 7);
    log.checkpoint_high_watermark(o(4)).unwrap();
    log.delete_records_before(o(1)).unwrap();
    log.write_producer_snapshot(o(5), b"five").unwrap();
    // The recovery point is rewritten as it moves into another segment, and
    // at close.
    log.close().unwrap();
    let read = |name: &str| String::from_utf8(std::fs::read(tmp.path().join(name)).unwrap());
    assert_eq!(read("leader-epoch-checkpoint").unwrap(), "0\n2\n0 1\n7 3\n");
    assert_eq!(read("high-watermark").unwrap(), "0\n4\n");
    assert_eq!(read("log-start-offset").unwrap(), "0\n1\n");
    assert_eq!(read("recovery-point").unwrap(), "0\n5\n");
    assert_eq!(
        std::fs::read(tmp.path().join("00000000000000000005.snapshot")).unwrap(),
        b"five"
    );
}

mod read_model {
    use super::*;
    use proptest::prelude::*;

    /// What a read must return, from the list of batches (base offset,
    /// next offset, size): whole batches from the one holding
    /// `fetch_offset`, stopping before a batch whose last offset reaches
    /// `max_offset` or that would pass `max_bytes` (unless it is the first
    /// and `min_one`).
    fn model(
        batches: &[(i64, i64, usize)],
        fetch_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one: bool,
    ) -> Vec<i64> {
        let mut out = Vec::new();
        let mut taken = 0;
        for &(base, next, size) in batches.iter().filter(|b| b.1 > fetch_offset) {
            // The batch's last offset is next - 1.
            if next > max_offset {
                break;
            }
            if taken + size > max_bytes && !(min_one && out.is_empty()) {
                break;
            }
            taken += size;
            out.push(base);
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The slices a fetch sends from the files are the batches the
        /// model names, whatever the index lets the read skip: batch sizes
        /// below and above the index interval, several segments, any
        /// limits; the bytes are the log's and the next offset follows the
        /// last batch.
        #[test]
        fn read_slices_is_the_model(
            sizes in proptest::collection::vec(1usize..12, 1..60),
            interval in 64u64..2048,
            segment in 2_000u64..20_000,
            fetch in 0i64..400,
            max_bytes in 0usize..30_000,
            upper in 0i64..400,
            min_one: bool,
        ) {
            let tmp = tempfile::tempdir().unwrap();
            let mut config = small_segments(segment);
            config.index_interval_bytes = interval;
            let mut log = PartitionLog::open(tmp.path(), config).unwrap();
            let mut batches = Vec::new();
            for n in &sizes {
                let info = append(&mut log, *n);
                let size = batch(*n).len();
                batches.push((info.first_offset.get(), info.last_offset.get() + 1, size));
            }
            let leo = log.log_end_offset().get();
            let fetch = fetch.min(leo);
            let want = model(&batches, fetch, max_bytes, upper, min_one);
            let slices = log.read_slices(o(fetch), max_bytes, o(upper), min_one).unwrap();
            let bytes = slices.to_bytes().unwrap();
            let got: Vec<i64> = headers(&bytes).iter().map(|h| h.base_offset).collect();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(slices.len, bytes.len());
            let next = want.last().map(|b| batches.iter().find(|x| x.0 == *b).unwrap().1);
            prop_assert_eq!(slices.next_offset.map(|o| o.get()), next);
            let read = log.read(o(fetch), max_bytes, o(upper), min_one).unwrap();
            prop_assert_eq!(read.records, bytes);
        }
    }
}

//! Crash recovery: the log is dropped without `close` (no clean-shutdown marker),
//! its files are damaged, and reopening must keep exactly the intact batches.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::*;
use proptest::prelude::*;
use strand_log::{LogConfig, LogError, PartitionLog};
use strand_protocol::batch::{validate_record_set, BatchIter};

/// Appends batches of the given record counts to a fresh single-segment log and
/// "crashes". Returns, per batch, (end position in the segment file, next offset).
fn crashed_log(dir: &Path, counts: &[usize], epochs: &[i32]) -> Vec<(u64, i64)> {
    let mut log = PartitionLog::open(dir, LogConfig::default()).unwrap();
    let mut out = Vec::new();
    let mut end = 0u64;
    for (i, c) in counts.iter().enumerate() {
        let b = batch(*c);
        end += b.len() as u64;
        let info = append_bytes(&mut log, b, epochs.get(i).copied().unwrap_or(0));
        out.push((end, info.last_offset.next().get()));
    }
    drop(log); // no close: no clean-shutdown marker
    out
}

fn seg0(dir: &Path) -> std::path::PathBuf {
    segment_file(dir, 0, "log")
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

fn cut(p: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(p)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn write_at(p: &Path, pos: u64, data: &[u8]) {
    OpenOptions::new()
        .write(true)
        .open(p)
        .unwrap()
        .write_all_at(data, pos)
        .unwrap();
}

fn flip(p: &Path, pos: u64) {
    let f = OpenOptions::new().read(true).write(true).open(p).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, pos).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, pos).unwrap();
}

/// Reopens and checks that exactly `keep` batches remain, then that appends
/// continue from the LEO and read back.
fn check_reopen(dir: &Path, batches: &[(u64, i64)], keep: usize) {
    let mut log = PartitionLog::open(dir, LogConfig::default()).unwrap();
    let (end, leo) = if keep == 0 { (0, 0) } else { batches[keep - 1] };
    let leo = o(leo);
    assert_eq!(log.log_end_offset(), leo, "LEO");
    assert_eq!(
        file_len(&seg0(dir)),
        end,
        "segment truncated to the last whole batch"
    );
    let all = read_all(&log);
    assert_eq!(all.len() as u64, end);
    let hs = validate_record_set(&all).unwrap_or_default();
    assert_eq!(hs.len(), keep);
    let info = append(&mut log, 2);
    assert_eq!(info.first_offset, leo);
    let r = log.read(leo, usize::MAX, leo.plus(2), false).unwrap();
    let h = validate_record_set(&r.records).unwrap();
    assert_eq!(
        (h.len(), h[0].base_offset, h[0].records_count),
        (1, leo.get(), 2)
    );
    // And it all survives another crash.
    drop(log);
    let log = PartitionLog::open(dir, LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), leo.plus(2));
    assert_eq!(BatchIter::new(&read_all(&log)).count(), keep + 1);
}

#[test]
fn torn_last_batch_is_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let b = crashed_log(tmp.path(), &[3, 1, 4, 2], &[]);
    cut(&seg0(tmp.path()), b[3].0 - 7);
    check_reopen(tmp.path(), &b, 3);
}

#[test]
fn partial_header_is_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let b = crashed_log(tmp.path(), &[3, 1, 4, 2], &[]);
    cut(&seg0(tmp.path()), b[2].0 + 5);
    check_reopen(tmp.path(), &b, 3);
}

#[test]
fn flipped_byte_truncates_from_that_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let b = crashed_log(tmp.path(), &[3, 1, 4, 2, 2], &[]);
    flip(&seg0(tmp.path()), b[1].0 + 40); // inside batch 2 (CRC-covered)
    check_reopen(tmp.path(), &b, 2);
}

#[test]
fn garbage_tail_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let b = crashed_log(tmp.path(), &[3, 1, 4], &[]);
    let garbage: Vec<u8> = (0..200u32).map(|i| (i * 37 % 251) as u8).collect();
    write_at(&seg0(tmp.path()), b[2].0, &garbage);
    check_reopen(tmp.path(), &b, 3);
}

#[test]
fn zero_filled_tail_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let b = crashed_log(tmp.path(), &[3, 1, 4], &[]);
    write_at(&seg0(tmp.path()), b[2].0, &vec![0u8; 4096]);
    check_reopen(tmp.path(), &b, 3);
}

#[test]
fn header_claiming_a_huge_length_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let b = crashed_log(tmp.path(), &[2, 2], &[]);
    let mut fake = batch(1);
    fake[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    write_at(&seg0(tmp.path()), b[1].0, &fake);
    check_reopen(tmp.path(), &b, 2);
}

#[test]
fn non_monotonic_offsets_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let b = crashed_log(tmp.path(), &[2, 2, 2], &[]);
    // A valid batch (good CRC) whose base offset goes backwards.
    let f = OpenOptions::new()
        .read(true)
        .open(seg0(tmp.path()))
        .unwrap();
    let mut first = vec![0u8; b[0].0 as usize];
    f.read_exact_at(&mut first, 0).unwrap();
    write_at(&seg0(tmp.path()), b[2].0, &first);
    check_reopen(tmp.path(), &b, 3);
}

#[test]
fn everything_garbage_gives_an_empty_log() {
    let tmp = tempfile::tempdir().unwrap();
    let b = crashed_log(tmp.path(), &[2, 2], &[]);
    flip(&seg0(tmp.path()), 16); // magic of the first batch
    check_reopen(tmp.path(), &b, 0);
}

#[test]
fn epoch_cache_is_trimmed_to_the_recovered_leo() {
    let tmp = tempfile::tempdir().unwrap();
    let b = crashed_log(tmp.path(), &[2, 2, 3], &[1, 1, 4]);
    cut(&seg0(tmp.path()), b[2].0 - 1);
    let log = PartitionLog::open(tmp.path(), LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), o(4));
    assert_eq!(log.epoch_entries(), epochs(&[(1, 0)]));
    assert_eq!(log.end_offset_for_epoch(e(1)), Some((e(1), o(4))));
    assert_eq!(log.latest_epoch(), Some(e(1)));
}

#[test]
fn clean_marker_with_torn_tail_still_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(tmp.path(), LogConfig::default()).unwrap();
    append(&mut log, 2);
    append(&mut log, 3);
    log.close().unwrap();
    let len = file_len(&seg0(tmp.path()));
    cut(&seg0(tmp.path()), len - 3);
    let log = PartitionLog::open(tmp.path(), LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), o(2));
    assert_eq!(BatchIter::new(&read_all(&log)).count(), 1);
}

/// Multi-segment log with every batch indexed, returned crashed.
fn crashed_segments(dir: &Path, n: usize) -> (LogConfig, Vec<u8>) {
    let one = batch(2).len() as u64;
    let cfg = small_segments(one * 3);
    let mut log = PartitionLog::open(dir, cfg.clone()).unwrap();
    for _ in 0..n {
        append(&mut log, 2);
    }
    assert_eq!(
        log.segment_base_offsets(),
        [0, 6, 12, 18].map(o)[..n.div_ceil(3)].to_vec()
    );
    let all = read_all(&log);
    drop(log);
    (cfg, all)
}

#[test]
fn only_the_tail_segment_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, all) = crashed_segments(tmp.path(), 11);
    let last = segment_file(tmp.path(), 18, "log");
    let len = file_len(&last);
    cut(&last, len - 1);
    let one = batch(2).len();
    let log = PartitionLog::open(tmp.path(), cfg).unwrap();
    assert_eq!(log.log_end_offset(), o(20));
    assert_eq!(log.segment_base_offsets(), [0, 6, 12, 18].map(o));
    assert_eq!(read_all(&log), all[..all.len() - one].to_vec());
}

#[test]
fn corrupt_middle_segment_drops_later_ones_when_unflushed() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, all) = crashed_segments(tmp.path(), 10);
    // Without a recovery point every segment is scanned.
    std::fs::remove_file(tmp.path().join("recovery-point")).unwrap();
    let one = batch(2).len() as u64;
    flip(&segment_file(tmp.path(), 6, "log"), one + 30);
    let log = PartitionLog::open(tmp.path(), cfg).unwrap();
    assert_eq!(log.log_end_offset(), o(8));
    assert_eq!(log.segment_base_offsets(), [0, 6].map(o));
    assert_eq!(read_all(&log), all[..(4 * one) as usize].to_vec());
    assert!(!segment_file(tmp.path(), 12, "log").exists());
    assert!(!segment_file(tmp.path(), 12, "index").exists());
}

#[test]
fn missing_or_inconsistent_indexes_are_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, all) = crashed_segments(tmp.path(), 10);
    let log = PartitionLog::open(tmp.path(), cfg.clone()).unwrap();
    log.close().unwrap();
    let idx0 = segment_file(tmp.path(), 0, "index");
    let good0 = std::fs::read(&idx0).unwrap();
    assert!(!good0.is_empty());
    std::fs::remove_file(&idx0).unwrap();
    std::fs::remove_file(segment_file(tmp.path(), 0, "timeindex")).unwrap();
    // Non-increasing entries.
    let idx6 = segment_file(tmp.path(), 6, "index");
    let good6 = std::fs::read(&idx6).unwrap();
    std::fs::write(&idx6, [0u8, 0, 0, 4, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0, 1]).unwrap();
    // An entry pointing past the end of the file, and a torn entry.
    let idx12 = segment_file(tmp.path(), 12, "index");
    std::fs::write(&idx12, [0u8, 0, 0, 2, 0, 1, 0, 0, 7]).unwrap();

    let log = PartitionLog::open(tmp.path(), cfg.clone()).unwrap();
    assert_eq!(log.log_end_offset(), o(20));
    assert_eq!(read_all(&log), all);
    for off in 0..20 {
        let r = log.read(o(off), 1, o(20), true).unwrap();
        let h = validate_record_set(&r.records).unwrap();
        assert!(h[0].base_offset <= off && off <= h[0].last_offset());
    }
    assert_eq!(std::fs::read(&idx0).unwrap(), good0);
    assert_eq!(std::fs::read(&idx6).unwrap(), good6);
    assert!(segment_file(tmp.path(), 0, "timeindex").exists());
}

#[test]
fn crash_during_roll_is_tolerated() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, all) = crashed_segments(tmp.path(), 9);
    // The roll created the next segment's log file but not its indexes.
    std::fs::write(segment_file(tmp.path(), 18, "log"), b"").unwrap();
    // Leftovers: a checkpoint temp file and an index without a segment.
    std::fs::write(tmp.path().join("high-watermark.tmp"), b"junk").unwrap();
    std::fs::write(segment_file(tmp.path(), 99, "index"), b"junk").unwrap();
    let mut log = PartitionLog::open(tmp.path(), cfg).unwrap();
    assert_eq!(log.log_end_offset(), o(18));
    assert_eq!(log.segment_base_offsets(), [0, 6, 12, 18].map(o));
    assert_eq!(read_all(&log), all);
    assert!(!tmp.path().join("high-watermark.tmp").exists());
    assert!(!segment_file(tmp.path(), 99, "index").exists());
    // An empty segment has no entries: its index files are made by the
    // first entry written, not by recovery.
    assert!(!segment_file(tmp.path(), 18, "index").exists());
    assert_eq!(append(&mut log, 1).first_offset, o(18));
}

#[test]
fn log_start_beyond_recovered_end_restarts_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(tmp.path(), LogConfig::default()).unwrap();
    append(&mut log, 3);
    append(&mut log, 3);
    log.delete_records_before(o(6)).unwrap();
    drop(log);
    cut(&seg0(tmp.path()), 10);
    let mut log = PartitionLog::open(tmp.path(), LogConfig::default()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (o(6), o(6)));
    assert_eq!(append(&mut log, 1).first_offset, o(6));
}

#[test]
fn malformed_checkpoints_are_errors_not_panics() {
    let tmp = tempfile::tempdir().unwrap();
    crashed_log(tmp.path(), &[1], &[]);
    std::fs::write(tmp.path().join("log-start-offset"), b"\xff\xfe nonsense").unwrap();
    assert!(matches!(
        PartitionLog::open(tmp.path(), LogConfig::default()),
        Err(LogError::Corrupt(_))
    ));
    std::fs::write(tmp.path().join("log-start-offset"), b"0\n0\n").unwrap();
    std::fs::write(tmp.path().join("leader-epoch-checkpoint"), b"0\n3\n1 0\n").unwrap();
    assert!(matches!(
        PartitionLog::open(tmp.path(), LogConfig::default()),
        Err(LogError::Corrupt(_))
    ));
    // A negative epoch or start offset is never written: malformed too.
    for entry in ["-1 0", "0 -1"] {
        let text = format!("0\n1\n{entry}\n");
        std::fs::write(tmp.path().join("leader-epoch-checkpoint"), text).unwrap();
        assert!(
            matches!(
                PartitionLog::open(tmp.path(), LogConfig::default()),
                Err(LogError::Corrupt(_))
            ),
            "{entry}"
        );
    }
    std::fs::remove_file(tmp.path().join("leader-epoch-checkpoint")).unwrap();
    // A damaged recovery point only widens the scan.
    std::fs::write(tmp.path().join("recovery-point"), b"zzz").unwrap();
    let log = PartitionLog::open(tmp.path(), LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), o(1));
}

#[derive(Debug, Clone)]
enum Damage {
    Cut(prop::sample::Index),
    Flip(prop::sample::Index, prop::sample::Index),
    Garbage(Vec<u8>),
    CutThenGarbage(prop::sample::Index, Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<prop::sample::Index>().prop_map(Damage::Cut),
        (any::<prop::sample::Index>(), any::<prop::sample::Index>())
            .prop_map(|(a, b)| Damage::Flip(a, b)),
        proptest::collection::vec(any::<u8>(), 1..300).prop_map(Damage::Garbage),
        (
            any::<prop::sample::Index>(),
            proptest::collection::vec(any::<u8>(), 1..100)
        )
            .prop_map(|(a, g)| Damage::CutThenGarbage(a, g)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any cut, flipped CRC-covered byte or garbage tail leaves exactly the
    /// whole valid batches before the damage, and the log keeps working.
    #[test]
    fn damage_keeps_a_prefix_of_whole_batches(counts in proptest::collection::vec(1usize..6, 1..8), d in damage()) {
        let tmp = tempfile::tempdir().unwrap();
        let b = crashed_log(tmp.path(), &counts, &[]);
        let p = seg0(tmp.path());
        let len = file_len(&p);
        let keep_below = |pos: u64| b.iter().filter(|(end, _)| *end <= pos).count();
        let keep = match d {
            Damage::Cut(i) => {
                let at = i.index(len as usize + 1) as u64;
                cut(&p, at);
                keep_below(at)
            }
            Damage::Flip(which, at) => {
                let k = which.index(b.len());
                let start = if k == 0 { 0 } else { b[k - 1].0 };
                // Bytes from the magic on are covered by the magic check or the CRC.
                let pos = start + 16 + at.index((b[k].0 - start - 16) as usize) as u64;
                flip(&p, pos);
                k
            }
            Damage::Garbage(g) => {
                write_at(&p, len, &g);
                b.len()
            }
            Damage::CutThenGarbage(i, g) => {
                let at = i.index(len as usize + 1) as u64;
                let original = std::fs::read(&p).unwrap();
                cut(&p, at);
                write_at(&p, at, &g);
                // Garbage can rewrite the bytes that were cut (a batch ending in
                // a zero byte is whole again after one zero): batches survive up
                // to the first byte that differs from the original file.
                let damaged = std::fs::read(&p).unwrap();
                let same = original.iter().zip(&damaged).take_while(|(a, b)| a == b).count() as u64;
                keep_below(same.max(at))
            }
        };
        check_reopen(tmp.path(), &b, keep);
    }
}

/// Every cut position followed by one zero byte (a torn write that left a
/// zeroed block behind) keeps exactly the whole batches before the damage.
#[test]
fn every_cut_then_zero_byte_keeps_whole_batches() {
    let counts = [1usize, 3, 1, 4, 4, 3];
    let probe = tempfile::tempdir().unwrap();
    let b = crashed_log(probe.path(), &counts, &[]);
    let len = file_len(&seg0(probe.path()));
    for at in 0..=len {
        let tmp = tempfile::tempdir().unwrap();
        let b2 = crashed_log(tmp.path(), &counts, &[]);
        assert_eq!(b, b2);
        let p = seg0(tmp.path());
        let original = std::fs::read(&p).unwrap();
        cut(&p, at);
        write_at(&p, at, &[0]);
        // A zero byte may restore the byte that was cut: count the batches that
        // are byte-identical to the original.
        let damaged = std::fs::read(&p).unwrap();
        let same = original
            .iter()
            .zip(&damaged)
            .take_while(|(a, b)| a == b)
            .count() as u64;
        let keep = b.iter().filter(|(end, _)| *end <= same.max(at)).count();
        let log = PartitionLog::open(tmp.path(), LogConfig::default()).unwrap();
        let (_, leo) = if keep == 0 { (0, 0) } else { b[keep - 1] };
        assert_eq!(log.log_end_offset(), o(leo), "cut at {at} of {len}");
    }
}

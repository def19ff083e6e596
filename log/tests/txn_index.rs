//! The aborted-transaction index through the partition log: entries go to the
//! segment holding the marker, searches span segments, and truncation,
//! recovery, retention and reopening keep the index in line with the log.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use common::*;
use strand_log::{AbortedTxn, LogConfig, PartitionLog};
use strand_types::Offset;

fn aborted(producer_id: i64, first: i64, last: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: pid(producer_id),
        first_offset: o(first),
        last_offset: o(last),
        last_stable_offset: o(last + 1),
    }
}

/// `collect_aborted_txns` between two offsets, as (producer id, first offset).
fn collect(log: &PartitionLog, start: i64, upper: i64) -> Vec<(i64, i64)> {
    log.collect_aborted_txns(o(start), o(upper))
        .into_iter()
        .map(|(producer_id, first)| (producer_id.get(), first.get()))
        .collect()
}

/// Appends `n` one-record batches; returns the LEO.
fn fill(log: &mut PartitionLog, n: usize) -> Offset {
    for _ in 0..n {
        append(log, 1);
    }
    log.log_end_offset()
}

#[test]
fn entries_span_segments_and_searches_find_long_transactions() {
    let dir = tempfile::tempdir().unwrap();
    // Tiny segments: every batch rolls.
    let mut log = PartitionLog::open(dir.path(), small_segments(100)).unwrap();
    fill(&mut log, 20);
    assert!(log.segment_base_offsets().len() > 5);
    // A long transaction 1: 2..=15; short ones inside it.
    assert!(log.append_aborted_txn(aborted(2, 4, 6)).unwrap());
    assert!(log.append_aborted_txn(aborted(3, 8, 9)).unwrap());
    assert!(log.append_aborted_txn(aborted(1, 2, 15)).unwrap());
    assert!(
        !log.append_aborted_txn(aborted(3, 8, 9)).unwrap(),
        "re-adding is a no-op"
    );
    // Each entry lives in the index file of the segment holding its marker.
    for last in [6, 9, 15] {
        assert!(segment_file(dir.path(), last, "txnindex").exists());
    }
    assert!(!segment_file(dir.path(), 0, "txnindex").exists());

    assert_eq!(collect(&log, 0, 4), vec![(1, 2)]);
    assert_eq!(collect(&log, 0, 5), vec![(2, 4), (1, 2)]);
    assert_eq!(collect(&log, 7, 9), vec![(3, 8), (1, 2)]);
    assert_eq!(collect(&log, 10, 20), vec![(1, 2)]);
    assert_eq!(collect(&log, 16, 20), vec![]);
    assert_eq!(collect(&log, 5, 5), vec![]);
    // A marker must be in the log.
    assert!(log.append_aborted_txn(aborted(4, 18, 25)).is_err());
    assert!(log.append_aborted_txn(aborted(4, 12, 11)).is_err());
}

#[test]
fn truncation_drops_entries_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_segments(300)).unwrap();
    fill(&mut log, 30);
    for (pid, last) in [(1, 5), (2, 12), (3, 13), (4, 25)] {
        log.append_aborted_txn(aborted(pid, last - 3, last))
            .unwrap();
    }
    log.truncate_to(o(13)).unwrap();
    assert_eq!(log.log_end_offset(), o(13));
    assert_eq!(
        log.aborted_txns(),
        vec![aborted(1, 2, 5), aborted(2, 9, 12)]
    );
    drop(log); // a crash: no clean shutdown
    let mut log = PartitionLog::open(dir.path(), small_segments(300)).unwrap();
    assert_eq!(
        log.aborted_txns(),
        vec![aborted(1, 2, 5), aborted(2, 9, 12)]
    );
    // Re-appending past the cut works, and a clean reopen keeps it.
    fill(&mut log, 5);
    log.append_aborted_txn(aborted(3, 13, 15)).unwrap();
    log.close().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_segments(300)).unwrap();
    assert_eq!(log.aborted_txns().len(), 3);

    log.truncate_fully_and_start_at(o(40)).unwrap();
    assert!(log.aborted_txns().is_empty());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".txnindex"))
        .collect();
    assert!(left.is_empty(), "index files go with their segments");
}

#[test]
fn recovered_torn_log_tail_takes_its_entries() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    fill(&mut log, 10);
    log.append_aborted_txn(aborted(1, 2, 4)).unwrap();
    log.append_aborted_txn(aborted(2, 5, 9)).unwrap();
    log.flush().unwrap();
    drop(log);
    // Tear the last batch (offset 9): recovery cuts it, and the abort at 9 goes.
    let seg = segment_file(dir.path(), 0, "log");
    let len = std::fs::metadata(&seg).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), o(9));
    assert_eq!(log.aborted_txns(), vec![aborted(1, 2, 4)]);
}

#[test]
fn torn_index_file_is_cut_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    fill(&mut log, 10);
    log.append_aborted_txn(aborted(1, 2, 4)).unwrap();
    log.append_aborted_txn(aborted(2, 5, 7)).unwrap();
    log.close().unwrap();
    let path = segment_file(dir.path(), 0, "txnindex");
    let len = std::fs::metadata(&path).unwrap().len();
    // Half of the second entry is lost; then garbage after a whole entry.
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let mut log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.aborted_txns(), vec![aborted(1, 2, 4)]);
    // The replay re-derives the lost entry.
    assert!(log.append_aborted_txn(aborted(2, 5, 7)).unwrap());
    log.close().unwrap();
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0xab; 50], std::fs::metadata(&path).unwrap().len())
        .unwrap();
    let log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.aborted_txns(), vec![aborted(1, 2, 4), aborted(2, 5, 7)]);
}

#[test]
fn retention_and_stray_files() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_bytes: 0,
        ..small_segments(100)
    };
    let mut log = PartitionLog::open(dir.path(), config.clone()).unwrap();
    fill(&mut log, 6);
    log.append_aborted_txn(aborted(1, 0, 1)).unwrap();
    log.append_aborted_txn(aborted(2, 2, 5)).unwrap();
    let deleted = log.apply_retention(0).unwrap();
    assert!(deleted > 0);
    assert!(!segment_file(dir.path(), 1, "txnindex").exists());
    assert_eq!(log.aborted_txns(), vec![aborted(2, 2, 5)]);
    log.close().unwrap();
    // An index file without its segment is removed at open.
    std::fs::write(segment_file(dir.path(), 1, "txnindex"), [0u8; 34]).unwrap();
    let log = PartitionLog::open(dir.path(), config).unwrap();
    assert!(!segment_file(dir.path(), 1, "txnindex").exists());
    assert_eq!(log.aborted_txns(), vec![aborted(2, 2, 5)]);
}

//! A log that hit an I/O error stays offline: nothing it does afterwards may
//! write, fsync or checkpoint again (a second fsync after a failed one can
//! succeed without the data: the fsyncgate problem), and its owner is told
//! once. Reopening (recovery) is the only way back.

mod common;

use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use strand_log::{LogConfig, LogError, PartitionLog};

/// An append, a flush and a checkpoint are all refused with an I/O error.
fn refuses_every_write(log: &mut PartitionLog) {
    let b = batch(1);
    let h = headers(&b);
    let hw = log.log_end_offset();
    assert!(matches!(
        log.append_as_leader(&b, &h, e(0), None),
        Err(LogError::Io(_))
    ));
    assert!(matches!(log.flush(), Err(LogError::Io(_))));
    assert!(matches!(
        log.checkpoint_high_watermark(hw),
        Err(LogError::Io(_))
    ));
}

#[test]
fn the_first_io_error_takes_the_log_offline_for_good() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = PartitionLog::open(&dir, LogConfig::default()).unwrap();
    let told = Arc::new(AtomicUsize::new(0));
    log.set_failure_listener({
        let told = told.clone();
        Arc::new(move |_, _| {
            told.fetch_add(1, Ordering::SeqCst);
        })
    });
    append(&mut log, 3);
    // A checkpoint cannot be written while its directory is gone.
    let moved = tmp.path().join("moved");
    std::fs::rename(&dir, &moved).unwrap();
    assert!(matches!(
        log.checkpoint_high_watermark(o(3)),
        Err(LogError::Io(_))
    ));
    assert!(log.is_failed());
    assert_eq!(told.load(Ordering::SeqCst), 1);
    // The directory is back, yet every write, flush and checkpoint is refused.
    std::fs::rename(&moved, &dir).unwrap();
    refuses_every_write(&mut log);
    assert!(matches!(log.close_clean(), Err(LogError::Io(_))));
    assert_eq!(
        log.log_end_offset(),
        o(3),
        "nothing appended after the failure"
    );
    assert_eq!(told.load(Ordering::SeqCst), 1, "told once");
    drop(log);
    // Reopened, it recovers what reached the file.
    let log = PartitionLog::open(&dir, LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), o(3));
    assert!(!log.is_failed());
}

/// Once the directory is offline (another log in it failed), a healthy log
/// there refuses writes too: nothing is written to a failing disk.
#[test]
fn an_offline_directory_stops_every_log_in_it() {
    use std::sync::atomic::AtomicBool;
    let tmp = tempfile::tempdir().unwrap();
    let offline = Arc::new(AtomicBool::new(false));
    let mut log = PartitionLog::open(&tmp.path().join("t-1"), LogConfig::default()).unwrap();
    log.set_dir_offline_flag(offline.clone());
    append(&mut log, 2);
    offline.store(true, Ordering::SeqCst);
    refuses_every_write(&mut log);
    assert_eq!(log.log_end_offset(), o(2));
}

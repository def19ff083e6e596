//! A partition log holds one open file per segment (its log file) and no
//! more: index files and the aborted-transaction index are opened for each
//! write and closed after it. A broker with 10,000 partitions needs 10,000
//! descriptors, not 30,000 (a per-process limit of 20,000 is common).

mod common;

use common::*;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use strand_log::storage::{FileStorage, Storage, StorageFile};
use strand_log::{AbortedTxn, PartitionLog};
use strand_types::SystemClock;

/// Real files, counting the handles alive at any moment.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn Storage>,
    open: Arc<AtomicIsize>,
    syncs: Arc<AtomicIsize>,
}

struct CountedFile {
    inner: Box<dyn StorageFile>,
    open: Arc<AtomicIsize>,
    syncs: Arc<AtomicIsize>,
}

impl Drop for CountedFile {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl StorageFile for CountedFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, pos)
    }
    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, pos)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        self.inner.sync()
    }
    fn modified_ms(&self) -> io::Result<i64> {
        self.inner.modified_ms()
    }
}

impl Storage for Counting {
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.inner.open(path, create)?;
        self.open.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(CountedFile {
            inner,
            open: self.open.clone(),
            syncs: self.syncs.clone(),
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        self.inner.list_dir(dir)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.remove_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.inner.write_atomic(path, data)
    }
}

/// Real files through a [`Counting`] storage, with its counters of open
/// handles and fsyncs.
fn counting() -> (Arc<dyn Storage>, Arc<AtomicIsize>, Arc<AtomicIsize>) {
    let (open, syncs) = (Arc::new(AtomicIsize::new(0)), Arc::new(AtomicIsize::new(0)));
    let storage = Arc::new(Counting {
        inner: FileStorage::shared(),
        open: open.clone(),
        syncs: syncs.clone(),
    });
    (storage, open, syncs)
}

fn open(storage: &Arc<dyn Storage>, dir: &Path) -> PartitionLog {
    PartitionLog::open_in(
        storage.clone(),
        SystemClock::shared(),
        dir,
        small_segments(4096),
    )
    .unwrap()
}

#[test]
fn a_log_holds_one_descriptor_per_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let (storage, open_files, _) = counting();
    let dir = tmp.path().join("t-0");
    let mut log = open(&storage, &dir);
    // Every batch gets index entries (interval 1 byte), segments roll at
    // 4 KiB, and some segments get an aborted transaction.
    for i in 0..400 {
        append(&mut log, 3);
        if i % 37 == 0 {
            let last = log.log_end_offset().get() - 1;
            log.append_aborted_txn(AbortedTxn {
                producer_id: pid(7),
                first_offset: o(last - 2),
                last_offset: o(last),
                last_stable_offset: o(last + 1),
            })
            .unwrap();
        }
        let segments = log.segment_base_offsets().len() as isize;
        assert!(segments > 0);
        assert_eq!(
            open_files.load(Ordering::SeqCst),
            segments,
            "after batch {i}: one open file per segment"
        );
    }
    let segments = log.segment_base_offsets().len();
    assert!(segments > 10, "the log rolled ({segments} segments)");
    let before = read_all(&log);
    log.flush().unwrap();
    assert_eq!(open_files.load(Ordering::SeqCst), segments as isize);
    log.close_clean().unwrap();
    drop(log);
    assert_eq!(open_files.load(Ordering::SeqCst), 0);

    // Reopened (clean: the indexes are loaded, not rebuilt), the log is the
    // same and again holds one file per segment, and the rolled segments'
    // index entries reached their files.
    let log = open(&storage, &dir);
    assert_eq!(read_all(&log), before);
    assert_eq!(log.aborted_txns().len(), 11);
    assert_eq!(open_files.load(Ordering::SeqCst), segments as isize);
    let bases = log.segment_base_offsets();
    for base in &bases[..bases.len() - 1] {
        let index = segment_file(&dir, base.get(), "index");
        let len = std::fs::metadata(&index).unwrap().len();
        assert!(len > 0, "{} was written", index.display());
    }
}

/// Index files are made by their first entry, so a segment too small for
/// an offset-index entry has no offset index. Reopened after a clean
/// close, such a segment is loaded as it is (a rebuild would fsync it
/// again: thousands of small partitions would pay that at every start),
/// while a segment whose index file is lost though entries were due is
/// rebuilt (`recovery.rs::missing_or_inconsistent_indexes_are_rebuilt`).
#[test]
fn a_small_segment_without_index_files_loads_without_a_rebuild() {
    let tmp = tempfile::tempdir().unwrap();
    let (storage, _, syncs) = counting();
    let dir = tmp.path().join("t-0");
    let config = strand_log::LogConfig::default();
    let mut log =
        PartitionLog::open_in(storage.clone(), SystemClock::shared(), &dir, config.clone())
            .unwrap();
    append(&mut log, 3);
    append(&mut log, 2);
    let before = read_all(&log);
    log.close_clean().unwrap();
    drop(log);
    assert!(
        !segment_file(&dir, 0, "index").exists(),
        "no entry, no file"
    );
    syncs.store(0, Ordering::SeqCst);
    let log = PartitionLog::open_in(storage, SystemClock::shared(), &dir, config).unwrap();
    assert_eq!(read_all(&log), before);
    assert_eq!(log.log_end_offset(), o(5));
    assert_eq!(syncs.load(Ordering::SeqCst), 0, "loaded, not rebuilt");
}

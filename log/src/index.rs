//! Sparse offset and time indexes of one segment.
//!
//! Both are append-only files of fixed-size big-endian entries, kept fully in
//! memory for lookups (they are small: one entry per `index_interval_bytes` of
//! log). The lookup functions are pure and binary-search the entries. The
//! files hold no descriptor between writes (see [`IndexFile`]).

use crate::storage::{Storage, StorageFile};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of one offset-index entry: relative offset u32 + file position u32.
pub const OFFSET_ENTRY_LEN: usize = 8;
/// Bytes of one time-index entry: timestamp i64 + relative offset u32.
pub const TIME_ENTRY_LEN: usize = 12;

/// One offset-index entry: the batch whose base offset is `base + rel_offset`
/// starts at byte `position` of the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    pub rel_offset: u32,
    pub position: u32,
}

/// One time-index entry: every record at an offset below `base + rel_offset`'s
/// batch has a timestamp below `timestamp`, and the batch holding
/// `base + rel_offset` reaches `timestamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp: i64,
    pub rel_offset: u32,
}

/// Index of the last entry whose key is `<= target`, for entries sorted by a
/// non-decreasing key. `None` when every key is above the target (or no entries).
pub fn floor_index<T, K: PartialOrd>(
    entries: &[T],
    target: K,
    key: impl Fn(&T) -> K,
) -> Option<usize> {
    entries.partition_point(|e| key(e) <= target).checked_sub(1)
}

/// The offset-index entry to start scanning from for `rel_offset`: the last entry
/// at or below it, or the start of the segment.
pub fn lookup_offset(entries: &[OffsetEntry], rel_offset: u32) -> OffsetEntry {
    match floor_index(entries, rel_offset, |e| e.rel_offset) {
        Some(i) => entries[i],
        None => OffsetEntry {
            rel_offset: 0,
            position: 0,
        },
    }
}

/// The time-index entry to start scanning from for `timestamp`: the last entry
/// whose timestamp is at or below it. `None` means "from the segment start".
pub fn lookup_time(entries: &[TimeEntry], timestamp: i64) -> Option<TimeEntry> {
    floor_index(entries, timestamp, |e| e.timestamp).map(|i| entries[i])
}

/// Offset-index entries are usable when relative offsets and positions both
/// strictly increase and every position lies inside the log file.
pub fn offset_entries_sane(entries: &[OffsetEntry], log_size: u64) -> bool {
    entries
        .windows(2)
        .all(|w| w[0].rel_offset < w[1].rel_offset && w[0].position < w[1].position)
        && entries.iter().all(|e| (e.position as u64) < log_size)
}

/// Time-index entries are usable when timestamps strictly increase and relative
/// offsets do not decrease.
pub fn time_entries_sane(entries: &[TimeEntry]) -> bool {
    entries
        .windows(2)
        .all(|w| w[0].timestamp < w[1].timestamp && w[0].rel_offset <= w[1].rel_offset)
}

pub trait Entry: Copy {
    const LEN: usize;
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(b: &[u8]) -> Self;
}

impl Entry for OffsetEntry {
    const LEN: usize = OFFSET_ENTRY_LEN;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.rel_offset.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        OffsetEntry {
            rel_offset: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            position: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

impl Entry for TimeEntry {
    const LEN: usize = TIME_ENTRY_LEN;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.rel_offset.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[0..8]);
        TimeEntry {
            timestamp: i64::from_be_bytes(ts),
            rel_offset: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        }
    }
}

/// Entries held in memory before they are written out: at most one
/// open-write-close per this many entries, so an index keeps no descriptor
/// between writes (Kafka maps its index files; a held descriptor per index
/// file would triple the descriptors of every partition).
const PENDING_WRITE: usize = 128;

/// An index file: entries in memory, written to the file in runs and on
/// `flush`. No descriptor is held: the file is opened for each write.
///
/// Entries not yet written are lost with the process, which is harmless:
/// a segment past the recovery point is rebuilt whole after an unclean
/// stop, and one before it was flushed (a roll flushes); `Segment::load`
/// walks the batches after the last entry on disk, however far back it is.
pub struct IndexFile<E: Entry> {
    path: PathBuf,
    storage: Arc<dyn Storage>,
    pub entries: Vec<E>,
    /// How many of `entries` are in the file (the rest are pending).
    written: usize,
    /// The file length was not a whole number of entries when loaded.
    pub torn: bool,
    /// The file has writes not yet fsynced.
    dirty: bool,
}

impl<E: Entry> IndexFile<E> {
    /// Loads the index file; a missing one is empty, and is created by the
    /// first write (an empty log has no index files: fewer files to create
    /// for a new partition).
    pub fn open(storage: &Arc<dyn Storage>, path: &Path) -> io::Result<Self> {
        let mut buf = Vec::new();
        match storage.open(path, false) {
            Ok(file) => {
                buf.resize(file.len()? as usize, 0);
                file.read_exact_at(&mut buf, 0)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let len = buf.len();
        let entries: Vec<E> = buf.chunks_exact(E::LEN).map(E::decode).collect();
        Ok(IndexFile {
            path: path.to_path_buf(),
            storage: storage.clone(),
            written: entries.len(),
            entries,
            torn: !len.is_multiple_of(E::LEN),
            dirty: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the file (if it was made) to `path`, which the index then
    /// writes to.
    pub fn rename_to(&mut self, path: &Path) -> io::Result<()> {
        match self.storage.rename(&self.path, path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        self.path = path.to_path_buf();
        Ok(())
    }

    pub fn last(&self) -> Option<E> {
        self.entries.last().copied()
    }

    pub fn append(&mut self, e: E) -> io::Result<()> {
        self.entries.push(e);
        if self.entries.len() - self.written >= PENDING_WRITE {
            self.write_pending(&*self.storage.open(&self.path, true)?)?;
        }
        Ok(())
    }

    fn write_pending(&mut self, file: &dyn StorageFile) -> io::Result<()> {
        let pending = &self.entries[self.written..];
        if pending.is_empty() {
            return Ok(());
        }
        let mut b = Vec::with_capacity(pending.len() * E::LEN);
        for e in pending {
            e.encode(&mut b);
        }
        file.write_all_at(&b, (self.written * E::LEN) as u64)?;
        self.written = self.entries.len();
        self.dirty = true;
        Ok(())
    }

    /// Keeps the first `n` entries.
    pub fn truncate_entries(&mut self, n: usize) -> io::Result<()> {
        if n < self.entries.len() || self.torn {
            self.entries.truncate(n);
            if n < self.written || self.torn {
                self.written = self.written.min(n);
                self.storage
                    .open(&self.path, true)?
                    .set_len((self.written * E::LEN) as u64)?;
                self.torn = false;
                self.dirty = true;
            }
        }
        Ok(())
    }

    /// Drops every entry.
    pub fn reset(&mut self) -> io::Result<()> {
        self.entries.clear();
        self.written = 0;
        match self.storage.open(&self.path, false) {
            Ok(file) => file.set_len(0)?,
            // Nothing to cut, and no file needed for no entries.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.torn = false;
        self.dirty = true;
        Ok(())
    }

    /// Writes the pending entries and fsyncs the file (none while there
    /// are no entries and no file).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.entries.is_empty() && !self.storage.exists(&self.path) {
            self.dirty = false;
            return Ok(());
        }
        if self.written < self.entries.len() || self.dirty {
            let file = self.storage.open(&self.path, true)?;
            self.write_pending(&*file)?;
            file.sync()?;
            self.dirty = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn oe(rel: u32, pos: u32) -> OffsetEntry {
        OffsetEntry {
            rel_offset: rel,
            position: pos,
        }
    }

    #[test]
    fn offset_lookup_table() {
        let idx = [oe(0, 0), oe(10, 100), oe(20, 250)];
        assert_eq!(lookup_offset(&idx, 0), oe(0, 0));
        assert_eq!(lookup_offset(&idx, 9), oe(0, 0));
        assert_eq!(lookup_offset(&idx, 10), oe(10, 100));
        assert_eq!(lookup_offset(&idx, 19), oe(10, 100));
        assert_eq!(lookup_offset(&idx, 1000), oe(20, 250));
        assert_eq!(lookup_offset(&[], 5), oe(0, 0));
        let idx = [oe(5, 40)];
        assert_eq!(lookup_offset(&idx, 4), oe(0, 0));
    }

    #[test]
    fn time_lookup_table() {
        let idx = [
            TimeEntry {
                timestamp: 100,
                rel_offset: 3,
            },
            TimeEntry {
                timestamp: 200,
                rel_offset: 9,
            },
        ];
        assert_eq!(lookup_time(&idx, 99), None);
        assert_eq!(lookup_time(&idx, 100), Some(idx[0]));
        assert_eq!(lookup_time(&idx, 150), Some(idx[0]));
        assert_eq!(lookup_time(&idx, 1000), Some(idx[1]));
    }

    #[test]
    fn sanity_checks() {
        assert!(offset_entries_sane(&[oe(0, 0), oe(1, 10)], 11));
        assert!(!offset_entries_sane(&[oe(0, 0), oe(1, 10)], 10));
        assert!(!offset_entries_sane(&[oe(1, 0), oe(1, 10)], 100));
        assert!(!offset_entries_sane(&[oe(0, 10), oe(1, 10)], 100));
        assert!(time_entries_sane(&[
            TimeEntry {
                timestamp: 1,
                rel_offset: 0
            },
            TimeEntry {
                timestamp: 2,
                rel_offset: 0
            }
        ]));
        assert!(!time_entries_sane(&[
            TimeEntry {
                timestamp: 2,
                rel_offset: 0
            },
            TimeEntry {
                timestamp: 2,
                rel_offset: 1
            }
        ]));
    }

    #[test]
    fn file_roundtrip_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.index");
        let storage = crate::storage::FileStorage::shared();
        let mut f = IndexFile::<OffsetEntry>::open(&storage, &p).unwrap();
        f.append(oe(1, 2)).unwrap();
        f.append(oe(3, 4)).unwrap();
        f.flush().unwrap();
        drop(f);
        let f = IndexFile::<OffsetEntry>::open(&storage, &p).unwrap();
        assert_eq!(f.entries, vec![oe(1, 2), oe(3, 4)]);
        assert!(!f.torn);
        drop(f);
        let raw = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&raw, &[1, 2, 3], 16).unwrap();
        let mut f = IndexFile::<OffsetEntry>::open(&storage, &p).unwrap();
        assert!(f.torn);
        assert_eq!(f.entries.len(), 2);
        f.truncate_entries(1).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 8);
    }

    proptest! {
        /// The binary search agrees with a linear scan on any sorted index.
        #[test]
        fn offset_lookup_matches_linear_scan(mut rels in proptest::collection::btree_set(0u32..10_000, 0..50),
                                             target in 0u32..12_000) {
            let entries: Vec<OffsetEntry> = std::mem::take(&mut rels).into_iter().enumerate()
                .map(|(i, r)| oe(r, i as u32 * 7)).collect();
            let expect = entries.iter().rev().find(|e| e.rel_offset <= target).copied().unwrap_or(oe(0, 0));
            prop_assert_eq!(lookup_offset(&entries, target), expect);
        }

        #[test]
        fn time_lookup_matches_linear_scan(ts in proptest::collection::btree_set(-5i64..10_000, 0..50),
                                           target in -10i64..12_000) {
            let entries: Vec<TimeEntry> = ts.into_iter().enumerate()
                .map(|(i, t)| TimeEntry { timestamp: t, rel_offset: i as u32 }).collect();
            let expect = entries.iter().rev().find(|e| e.timestamp <= target).copied();
            prop_assert_eq!(lookup_time(&entries, target), expect);
        }
    }
}

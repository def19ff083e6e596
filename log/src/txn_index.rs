//! The aborted-transaction index of one segment: `<base>.txnindex`.
//!
//! One entry per aborted transaction whose abort marker lies in the segment,
//! in marker-offset order, each [`TXN_ENTRY_LEN`] bytes big-endian, laid out
//! as Kafka's `AbortedTxn`:
//! ```text
//! version i16 (0) | producer_id i64 | first_offset i64 | last_offset i64 | last_stable_offset i64
//! ```
//! `last_offset` is the marker's offset; `first_offset` (the transaction's
//! first batch) may lie in an earlier segment, which is why a search for a
//! fetch range starting at `s` asks for `last_offset >= s` in every segment
//! from the one holding `s` onwards.
//!
//! The file is created on the first entry (most segments never see an abort).
//! At open, a torn tail (not a whole entry) or entries that cannot be right
//! (unknown version, a negative producer id or offset, a marker outside the
//! segment, offsets not increasing) are cut off, never trusted: the partition
//! re-derives missing entries when it replays the log after its last producer
//! snapshot.

use crate::storage::{Storage, StorageFile};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strand_types::{Offset, ProducerId};

/// Size of one entry on disk.
pub const TXN_ENTRY_LEN: usize = 2 + 8 + 8 + 8 + 8;
const TXN_ENTRY_VERSION: i16 = 0;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: ProducerId,
    /// Offset of the transaction's first batch on this partition.
    pub first_offset: Offset,
    /// Offset of the abort marker.
    pub last_offset: Offset,
    /// The LSO once the abort was appended (as Kafka records it).
    pub last_stable_offset: Offset,
}

impl AbortedTxn {
    fn encode(&self) -> [u8; TXN_ENTRY_LEN] {
        let mut b = [0u8; TXN_ENTRY_LEN];
        b[0..2].copy_from_slice(&TXN_ENTRY_VERSION.to_be_bytes());
        b[2..10].copy_from_slice(&self.producer_id.get().to_be_bytes());
        b[10..18].copy_from_slice(&self.first_offset.get().to_be_bytes());
        b[18..26].copy_from_slice(&self.last_offset.get().to_be_bytes());
        b[26..34].copy_from_slice(&self.last_stable_offset.get().to_be_bytes());
        b
    }

    /// `None` for an entry with an unknown version or a negative producer id
    /// or offset (none is ever written).
    fn decode(b: &[u8]) -> Option<AbortedTxn> {
        let i64_at = |at: usize| {
            let mut v = [0u8; 8];
            v.copy_from_slice(b.get(at..at + 8)?);
            Some(i64::from_be_bytes(v))
        };
        let version = i16::from_be_bytes([*b.first()?, *b.get(1)?]);
        if version != TXN_ENTRY_VERSION {
            return None;
        }
        Some(AbortedTxn {
            producer_id: ProducerId::from_wire(i64_at(2)?)?,
            first_offset: Offset::from_wire(i64_at(10)?)?,
            last_offset: Offset::from_wire(i64_at(18)?)?,
            last_stable_offset: Offset::from_wire(i64_at(26)?)?,
        })
    }
}

pub fn txn_index_path(dir: &Path, base: Offset) -> PathBuf {
    let base = base.get();
    dir.join(format!("{base:020}.txnindex"))
}

/// A segment's aborted-transaction index: entries in memory, the file
/// appended to as they are added. The file is opened for each change and
/// closed after it (aborts are rare; a held descriptor per segment is not).
pub struct TxnIndex {
    path: PathBuf,
    base: Offset,
    storage: Arc<dyn Storage>,
    entries: Vec<AbortedTxn>,
    /// Smallest `first_offset` of the entries (`None` when none): lets a
    /// search skip segments with nothing that starts below its upper bound.
    min_first: Option<Offset>,
    dirty: bool,
}

impl TxnIndex {
    /// Opens the index of segment `base` in `dir`, loading the file if it
    /// exists (`create_new` removes it). Entries from the first invalid one on
    /// are cut off, and the file with them.
    pub fn open(
        storage: &Arc<dyn Storage>,
        dir: &Path,
        base: Offset,
        create_new: bool,
    ) -> io::Result<TxnIndex> {
        let mut index = TxnIndex::detached(storage, txn_index_path(dir, base), base);
        if create_new {
            storage.remove_if_exists(&index.path)?;
            return Ok(index);
        }
        let file = match storage.open(&index.path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(index),
            Err(e) => return Err(e),
        };
        let len = file.len()? as usize;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, 0)?;
        for chunk in buf.chunks_exact(TXN_ENTRY_LEN) {
            let Some(e) = AbortedTxn::decode(chunk) else {
                break;
            };
            let ordered = index
                .entries
                .last()
                .is_none_or(|prev| e.last_offset > prev.last_offset);
            if !ordered || e.last_offset < base || e.first_offset > e.last_offset {
                break;
            }
            index.entries.push(e);
        }
        let valid = (index.entries.len() * TXN_ENTRY_LEN) as u64;
        if valid != len as u64 {
            tracing::warn!(path = %index.path.display(), valid, len, "cutting a torn or invalid aborted-transaction index tail");
            file.set_len(valid)?;
            index.dirty = true;
        }
        index.recompute_min();
        Ok(index)
    }

    /// An empty index that touches no file until an entry is added (the
    /// index of a segment the cleaner is writing, at `path`).
    pub fn detached(storage: &Arc<dyn Storage>, path: PathBuf, base: Offset) -> TxnIndex {
        TxnIndex {
            path,
            base,
            storage: storage.clone(),
            entries: Vec::new(),
            min_first: None,
            dirty: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    fn recompute_min(&mut self) {
        self.min_first = self.entries.iter().map(|e| e.first_offset).min();
    }

    fn file(&self) -> io::Result<Box<dyn StorageFile>> {
        self.storage.open(&self.path, true)
    }

    /// Adds an entry; `Ok(false)` if an entry with the same producer id and
    /// marker offset is already there (replay after a crash re-derives
    /// entries that may have reached the file already). Entries stay in
    /// marker order: one that belongs before the last is put in place by
    /// rewriting the (small) file.
    pub fn add(&mut self, txn: AbortedTxn) -> io::Result<bool> {
        if self
            .entries
            .iter()
            .any(|e| e.producer_id == txn.producer_id && e.last_offset == txn.last_offset)
        {
            return Ok(false);
        }
        let at = self
            .entries
            .partition_point(|e| e.last_offset < txn.last_offset);
        self.entries.insert(at, txn);
        self.min_first = Some(
            self.min_first
                .map_or(txn.first_offset, |m| m.min(txn.first_offset)),
        );
        if at + 1 == self.entries.len() {
            let pos = (at * TXN_ENTRY_LEN) as u64;
            self.file()?.write_all_at(&txn.encode(), pos)?;
        } else {
            self.rewrite()?;
        }
        self.dirty = true;
        Ok(true)
    }

    fn rewrite(&mut self) -> io::Result<()> {
        let mut buf = Vec::with_capacity(self.entries.len() * TXN_ENTRY_LEN);
        for e in &self.entries {
            buf.extend_from_slice(&e.encode());
        }
        let file = self.file()?;
        file.set_len(0)?;
        file.write_all_at(&buf, 0)?;
        Ok(())
    }

    /// Drops every entry whose marker is at or above `offset` (the segment
    /// was truncated there).
    pub fn truncate_from(&mut self, offset: Offset) -> io::Result<()> {
        let keep = self.entries.partition_point(|e| e.last_offset < offset);
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            let len = (keep * TXN_ENTRY_LEN) as u64;
            self.file()?.set_len(len)?;
            self.dirty = true;
            self.recompute_min();
        }
        Ok(())
    }

    /// Entries whose marker is at or after `start` and whose transaction
    /// begins before `upper`, appended to `out`.
    pub fn collect(&self, start: Offset, upper: Offset, out: &mut Vec<AbortedTxn>) {
        if self.min_first.is_none_or(|m| m >= upper) {
            return;
        }
        out.extend(
            self.entries
                .iter()
                .filter(|e| e.last_offset >= start && e.first_offset < upper),
        );
    }

    /// Base offset of the segment this index belongs to.
    pub fn base(&self) -> Offset {
        self.base
    }

    pub fn flush(&mut self) -> io::Result<()> {
        if self.dirty {
            self.file()?.sync()?;
            self.dirty = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn t(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: ProducerId::new(pid),
            first_offset: Offset::new(first),
            last_offset: Offset::new(last),
            last_stable_offset: Offset::new(last + 1),
        }
    }

    fn o(offset: i64) -> Offset {
        Offset::new(offset)
    }

    /// The bytes are Kafka's `AbortedTxn` layout: version 0, then the four
    /// big-endian i64s.
    #[test]
    fn entry_layout() {
        let b = t(7, 3, 12).encode();
        let mut want = vec![0u8, 0];
        for v in [7i64, 3, 12, 13] {
            want.extend_from_slice(&v.to_be_bytes());
        }
        assert_eq!(b.to_vec(), want);
        assert_eq!(AbortedTxn::decode(&b), Some(t(7, 3, 12)));
    }

    #[test]
    fn add_is_idempotent_and_ordered() {
        let dir = tempfile::tempdir().unwrap();
        let mut ix = TxnIndex::open(
            &crate::storage::FileStorage::shared(),
            dir.path(),
            o(100),
            false,
        )
        .unwrap();
        assert!(!ix.path().exists(), "created on the first entry");
        assert!(ix.add(t(1, 90, 105)).unwrap());
        assert!(ix.add(t(2, 101, 110)).unwrap());
        assert!(!ix.add(t(1, 90, 105)).unwrap(), "already present");
        // Out of order: put in place.
        assert!(ix.add(t(3, 102, 107)).unwrap());
        assert_eq!(
            ix.entries()
                .iter()
                .map(|e| e.last_offset)
                .collect::<Vec<_>>(),
            vec![o(105), o(107), o(110)]
        );
        ix.flush().unwrap();
        let back = TxnIndex::open(
            &crate::storage::FileStorage::shared(),
            dir.path(),
            o(100),
            false,
        )
        .unwrap();
        assert_eq!(back.entries(), ix.entries());

        let mut out = Vec::new();
        back.collect(o(106), o(108), &mut out);
        assert_eq!(out, vec![t(3, 102, 107), t(2, 101, 110)]);
        out.clear();
        back.collect(o(0), o(90), &mut out);
        assert!(out.is_empty(), "nothing starts below 90");
    }

    #[test]
    fn truncate_drops_markers_at_or_above() {
        let dir = tempfile::tempdir().unwrap();
        let mut ix = TxnIndex::open(
            &crate::storage::FileStorage::shared(),
            dir.path(),
            o(0),
            false,
        )
        .unwrap();
        for (i, last) in [5, 9, 12].iter().enumerate() {
            ix.add(t(i as i64, last - 2, *last)).unwrap();
        }
        ix.truncate_from(o(9)).unwrap();
        assert_eq!(ix.entries(), &[t(0, 3, 5)]);
        let back = TxnIndex::open(
            &crate::storage::FileStorage::shared(),
            dir.path(),
            o(0),
            false,
        )
        .unwrap();
        assert_eq!(back.entries(), &[t(0, 3, 5)]);
        assert_eq!(
            fs::metadata(back.path()).unwrap().len(),
            TXN_ENTRY_LEN as u64
        );
    }

    #[test]
    fn torn_and_garbage_tails_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut ix = TxnIndex::open(
            &crate::storage::FileStorage::shared(),
            dir.path(),
            o(10),
            false,
        )
        .unwrap();
        ix.add(t(1, 3, 12)).unwrap();
        ix.add(t(2, 11, 14)).unwrap();
        let path = ix.path().to_path_buf();
        drop(ix);
        let whole = fs::read(&path).unwrap();

        // Torn: half an entry at the end.
        let mut torn = whole.clone();
        torn.extend_from_slice(&t(3, 12, 20).encode()[..17]);
        fs::write(&path, &torn).unwrap();
        let ix = TxnIndex::open(
            &crate::storage::FileStorage::shared(),
            dir.path(),
            o(10),
            false,
        )
        .unwrap();
        assert_eq!(ix.entries().len(), 2);
        assert_eq!(fs::read(&path).unwrap(), whole);

        // Garbage: a whole entry with a bad version, then a valid-looking one.
        let mut garbage = whole.clone();
        garbage.extend_from_slice(&[0xff; TXN_ENTRY_LEN]);
        garbage.extend_from_slice(&t(3, 12, 20).encode());
        fs::write(&path, &garbage).unwrap();
        assert_eq!(
            TxnIndex::open(
                &crate::storage::FileStorage::shared(),
                dir.path(),
                o(10),
                false
            )
            .unwrap()
            .entries()
            .len(),
            2
        );

        // Not increasing, or a marker below the segment: cut there.
        let mut bad = whole.clone();
        bad.extend_from_slice(&t(3, 1, 13).encode());
        fs::write(&path, &bad).unwrap();
        assert_eq!(
            TxnIndex::open(
                &crate::storage::FileStorage::shared(),
                dir.path(),
                o(10),
                false
            )
            .unwrap()
            .entries()
            .len(),
            2
        );
        fs::write(&path, t(3, 1, 9).encode()).unwrap();
        assert!(TxnIndex::open(
            &crate::storage::FileStorage::shared(),
            dir.path(),
            o(10),
            false
        )
        .unwrap()
        .entries()
        .is_empty());

        // A negative producer id or offset (the wire's -1, never written): cut
        // there, and the file with it.
        for field in [2usize, 10, 26] {
            let mut negative = t(3, 12, 20).encode();
            negative[field..field + 8].copy_from_slice(&(-1i64).to_be_bytes());
            let mut bad = whole.clone();
            bad.extend_from_slice(&negative);
            fs::write(&path, &bad).unwrap();
            let ix = TxnIndex::open(
                &crate::storage::FileStorage::shared(),
                dir.path(),
                o(10),
                false,
            )
            .unwrap();
            assert_eq!(ix.entries().len(), 2, "field at {field}");
            assert_eq!(fs::read(&path).unwrap(), whole, "field at {field}");
        }

        // Arbitrary bytes never panic.
        for n in 0..200usize {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + n) as u8).collect();
            fs::write(&path, &bytes).unwrap();
            let ix = TxnIndex::open(
                &crate::storage::FileStorage::shared(),
                dir.path(),
                o(10),
                false,
            )
            .unwrap();
            assert!(ix.entries().len() * TXN_ENTRY_LEN <= n);
        }
    }

    #[test]
    fn create_new_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut ix = TxnIndex::open(
            &crate::storage::FileStorage::shared(),
            dir.path(),
            o(0),
            false,
        )
        .unwrap();
        ix.add(t(1, 0, 1)).unwrap();
        let ix = TxnIndex::open(
            &crate::storage::FileStorage::shared(),
            dir.path(),
            o(0),
            true,
        )
        .unwrap();
        assert!(ix.entries().is_empty());
        assert!(!ix.path().exists());
    }
}

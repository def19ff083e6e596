//! One segment: `<base>.log` with its `.index`, `.timeindex` and (once a
//! transaction is aborted in it) `.txnindex`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use strand_protocol::batch::{verify_crc, BatchHeader, BATCH_HEADER_LEN};

use crate::error::LogError;

/// Batches to write at the end of a segment.
#[derive(Debug, Clone, Copy)]
pub enum Batches<'a> {
    /// Written as they are.
    Whole(&'a [u8]),
    /// Each batch of `records` written with its header replaced by the
    /// matching one of `heads` (a leader's offsets, epoch and LogAppendTime),
    /// so a client's bytes are written without first being copied.
    WithHeads {
        records: &'a [u8],
        heads: &'a [[u8; BATCH_HEADER_LEN]],
    },
}

impl Batches<'_> {
    #[allow(clippy::len_without_is_empty)] // never empty: checked before a write
    pub fn len(&self) -> usize {
        match self {
            Batches::Whole(records) | Batches::WithHeads { records, .. } => records.len(),
        }
    }
}
use crate::index::{
    lookup_offset, lookup_time, offset_entries_sane, time_entries_sane, IndexFile, OffsetEntry,
    TimeEntry,
};
use crate::storage::{FileSlice, Storage, StorageFile};
use crate::txn_index::TxnIndex;
use strand_types::Offset;

/// First and largest read sizes used when walking a segment: small for the
/// fetch path (a few headers after an index entry), growing for long scans.
const FIRST_CHUNK: usize = 8 * 1024;
const MAX_CHUNK: usize = 1024 * 1024;

/// The suffix of a file the cleaner is still writing.
pub const CLEANED_SUFFIX: &str = ".cleaned";

/// `path` with `suffix` appended to its name.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Parses a 20-digit base-offset file stem.
pub fn parse_base(stem: &str) -> Option<i64> {
    if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
        stem.parse().ok()
    } else {
        None
    }
}

pub fn log_file_name(base: i64) -> String {
    format!("{base:020}.log")
}

/// Why a walk over a segment stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Reached the end of the range exactly.
    End,
    /// The remaining bytes hold a partial batch.
    Incomplete,
    /// The bytes at the stop position are not a valid batch (bad header or CRC).
    Invalid,
    /// The callback asked to stop.
    Callback,
}

/// Sequential reader with a buffer, over a byte range of a file.
struct ChunkReader<'a> {
    file: &'a dyn StorageFile,
    end: u64,
    buf: Vec<u8>,
    buf_pos: u64,
    chunk: usize,
}

impl<'a> ChunkReader<'a> {
    fn new(file: &'a dyn StorageFile, end: u64) -> Self {
        ChunkReader {
            file,
            end,
            buf: Vec::new(),
            buf_pos: 0,
            chunk: FIRST_CHUNK,
        }
    }

    /// `len` bytes at `pos`, or `None` if the range ends before them.
    fn get(&mut self, pos: u64, len: usize) -> io::Result<Option<&[u8]>> {
        let want_end = match pos.checked_add(len as u64) {
            Some(e) if e <= self.end => e,
            _ => return Ok(None),
        };
        let have_end = self.buf_pos + self.buf.len() as u64;
        if pos < self.buf_pos || want_end > have_end {
            let n = (len.max(self.chunk) as u64).min(self.end - pos) as usize;
            self.chunk = (self.chunk * 2).min(MAX_CHUNK);
            self.buf.resize(n, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.buf_pos = pos;
        }
        let at = (pos - self.buf_pos) as usize;
        Ok(Some(&self.buf[at..at + len]))
    }
}

/// Walks whole batches in `file[start..end)`. With `verify`, each batch's CRC is
/// checked. `f(position, header)` returns `false` to stop. Returns the position
/// where the walk stopped (the end of the last batch accepted) and why.
pub fn walk(
    file: &dyn StorageFile,
    start: u64,
    end: u64,
    verify: bool,
    mut f: impl FnMut(u64, &BatchHeader) -> Result<bool, LogError>,
) -> Result<(u64, Stop), LogError> {
    let mut r = ChunkReader::new(file, end);
    let mut pos = start;
    loop {
        if pos >= end {
            return Ok((pos, Stop::End));
        }
        let h = match r.get(pos, BATCH_HEADER_LEN)? {
            None => return Ok((pos, Stop::Incomplete)),
            Some(b) => match BatchHeader::parse(b) {
                Ok(h) => h,
                Err(_) => return Ok((pos, Stop::Invalid)),
            },
        };
        let size = h.total_size();
        if pos + size as u64 > end {
            return Ok((pos, Stop::Incomplete));
        }
        if verify {
            match r.get(pos, size)? {
                Some(b) if verify_crc(b, &h).is_ok() => {}
                _ => return Ok((pos, Stop::Invalid)),
            }
        }
        if !f(pos, &h)? {
            return Ok((pos, Stop::Callback));
        }
        pos += size as u64;
    }
}

/// Offsets here are the integers of the files (a base, and offsets relative
/// to it); none is negative: the base is a 20-digit name or one of the log's
/// offsets, and the segment holds only batches at or above it.
pub struct Segment {
    pub base: i64,
    log_path: PathBuf,
    storage: Arc<dyn Storage>,
    /// Shared so a walk can read while the segment indexes what it finds.
    log: Arc<dyn StorageFile>,
    pub size: u64,
    pub oi: IndexFile<OffsetEntry>,
    pub ti: IndexFile<TimeEntry>,
    /// Aborted transactions whose abort marker lies in this segment.
    pub txn: TxnIndex,
    bytes_since_index: u64,
    /// Largest batch max-timestamp in the segment, -1 if none.
    pub max_ts: i64,
    /// Last offset of the first batch that reached `max_ts`, -1 if none.
    pub offset_of_max_ts: i64,
    /// One past the last offset in the segment (`base` when empty).
    pub next_offset: i64,
    /// Wall-clock time the segment was created or loaded (for log.roll.ms).
    pub created_ms: i64,
    log_dirty: bool,
    /// An index file did not exist when the segment was opened (they are
    /// made by their first entry: see `load`).
    index_missing: bool,
}

impl Segment {
    pub fn paths(dir: &Path, base: i64) -> (PathBuf, PathBuf, PathBuf) {
        (
            dir.join(log_file_name(base)),
            dir.join(format!("{base:020}.index")),
            dir.join(format!("{base:020}.timeindex")),
        )
    }

    /// Opens (creating if missing) the files of segment `base` without
    /// validating anything; `size` is the log file length, the rest is unset.
    pub fn open(
        storage: &Arc<dyn Storage>,
        dir: &Path,
        base: i64,
        create_new: bool,
        now_ms: i64,
    ) -> Result<Segment, LogError> {
        let (lp, ip, tp) = Self::paths(dir, base);
        if create_new {
            for p in [&lp, &ip, &tp] {
                storage.remove_if_exists(p)?;
            }
        }
        let index_missing = !storage.exists(&ip) || !storage.exists(&tp);
        let log: Arc<dyn StorageFile> = Arc::from(storage.open(&lp, true)?);
        let size = log.len()?;
        Ok(Segment {
            base,
            log_path: lp,
            storage: storage.clone(),
            log,
            size,
            oi: IndexFile::open(storage, &ip)?,
            ti: IndexFile::open(storage, &tp)?,
            txn: TxnIndex::open(storage, dir, Offset::new(base), create_new)?,
            bytes_since_index: 0,
            max_ts: -1,
            offset_of_max_ts: -1,
            next_offset: base,
            created_ms: now_ms,
            log_dirty: create_new,
            index_missing,
        })
    }

    /// A new segment at `base` written by the cleaner: its files carry the
    /// `.cleaned` suffix until [`install_cleaned`](Self::install_cleaned)
    /// (a crash before leaves files recovery removes), and its
    /// aborted-transaction index is in memory only until then.
    pub fn create_cleaned(
        storage: &Arc<dyn Storage>,
        dir: &Path,
        base: i64,
        now_ms: i64,
    ) -> Result<Segment, LogError> {
        let (lp, ip, tp) = Self::paths(dir, base);
        let [lp, ip, tp] = [lp, ip, tp].map(|p| with_suffix(&p, CLEANED_SUFFIX));
        for p in [&lp, &ip, &tp] {
            storage.remove_if_exists(p)?;
        }
        let log: Arc<dyn StorageFile> = Arc::from(storage.open(&lp, true)?);
        log.set_len(0)?;
        let txn_path = with_suffix(
            &crate::txn_index::txn_index_path(dir, Offset::new(base)),
            CLEANED_SUFFIX,
        );
        Ok(Segment {
            base,
            log_path: lp,
            storage: storage.clone(),
            log,
            size: 0,
            oi: IndexFile::open(storage, &ip)?,
            ti: IndexFile::open(storage, &tp)?,
            txn: TxnIndex::detached(storage, txn_path, Offset::new(base)),
            bytes_since_index: 0,
            max_ts: -1,
            offset_of_max_ts: -1,
            next_offset: base,
            created_ms: now_ms,
            log_dirty: true,
            index_missing: false,
        })
    }

    /// Renames a cleaned segment's log file to `path` (its swap name).
    pub fn rename_log(&mut self, path: &Path) -> io::Result<()> {
        self.storage.rename(&self.log_path, path)?;
        self.log_path = path.to_path_buf();
        Ok(())
    }

    /// Gives a cleaned segment its final names (`<base>.log` and its
    /// indexes) once the segments it replaces are gone, and an (empty)
    /// aborted-transaction index there.
    pub fn install_cleaned(&mut self, dir: &Path) -> Result<(), LogError> {
        let (lp, ip, tp) = Self::paths(dir, self.base);
        self.rename_log(&lp)?;
        self.oi.rename_to(&ip)?;
        self.ti.rename_to(&tp)?;
        self.txn = TxnIndex::open(&self.storage, dir, Offset::new(self.base), true)?;
        Ok(())
    }

    /// Removes a cleaned segment's files that were never installed.
    pub fn discard_cleaned(self) {
        let paths = [
            self.log_path.clone(),
            self.oi.path().to_path_buf(),
            self.ti.path().to_path_buf(),
        ];
        let storage = self.storage.clone();
        drop(self);
        for p in paths {
            if let Err(e) = storage.remove_if_exists(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not remove a discarded cleaned segment file");
            }
        }
    }

    /// The log file (positional reads; it stays open while held, even
    /// once the segment is replaced or deleted).
    pub fn file(&self) -> Arc<dyn StorageFile> {
        self.log.clone()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    pub fn modified_ms(&self) -> i64 {
        self.log.modified_ms().unwrap_or(0)
    }

    /// Largest timestamp for time retention: the max batch timestamp, or the
    /// file's modification time when no batch carries one.
    pub fn largest_timestamp(&self) -> i64 {
        if self.max_ts >= 0 {
            self.max_ts
        } else {
            self.modified_ms()
        }
    }

    fn rel(&self, offset: i64) -> u32 {
        (offset - self.base).clamp(0, u32::MAX as i64) as u32
    }

    /// Whether an offset can be stored relative to this segment's base.
    pub fn can_hold(&self, last_offset: i64) -> bool {
        last_offset >= self.base && last_offset - self.base <= i32::MAX as i64
    }

    pub fn index_full(&self, segment_index_bytes: u64) -> bool {
        let oi_max = (segment_index_bytes / crate::index::OFFSET_ENTRY_LEN as u64).max(1);
        let ti_max = (segment_index_bytes / crate::index::TIME_ENTRY_LEN as u64).max(1);
        self.oi.entries.len() as u64 >= oi_max || self.ti.entries.len() as u64 >= ti_max
    }

    /// Updates the in-memory max timestamp and the indexes for a batch that lies
    /// at `pos` (already in the file).
    fn index_batch(&mut self, pos: u64, h: &BatchHeader, interval: u64) -> io::Result<()> {
        if h.max_timestamp > self.max_ts {
            self.max_ts = h.max_timestamp;
            self.offset_of_max_ts = h.last_offset();
        }
        if self.bytes_since_index >= interval {
            let rel = self.rel(h.base_offset);
            if self.oi.last().is_none_or(|e| e.rel_offset < rel) {
                self.oi.append(OffsetEntry {
                    rel_offset: rel,
                    position: pos as u32,
                })?;
            }
            self.maybe_append_time_entry()?;
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += h.total_size() as u64;
        self.next_offset = h.next_offset();
        Ok(())
    }

    /// Appends (max timestamp so far, its offset) to the time index if it is newer
    /// than the last entry.
    pub fn maybe_append_time_entry(&mut self) -> io::Result<()> {
        if self.max_ts < 0 {
            return Ok(());
        }
        let rel = self.rel(self.offset_of_max_ts);
        match self.ti.last() {
            Some(e) if e.timestamp >= self.max_ts || e.rel_offset > rel => Ok(()),
            _ => self.ti.append(TimeEntry {
                timestamp: self.max_ts,
                rel_offset: rel,
            }),
        }
    }

    /// Appends whole batches (already assigned offsets) at the end of the log.
    pub fn append(
        &mut self,
        batches: Batches<'_>,
        headers: &[BatchHeader],
        interval: u64,
    ) -> Result<(), LogError> {
        let start = self.size;
        match batches {
            Batches::Whole(records) => self.log.write_all_at(records, start)?,
            Batches::WithHeads { records, heads } => {
                debug_assert_eq!(heads.len(), headers.len(), "one header per batch");
                let mut pos = 0;
                for (head, h) in heads.iter().zip(headers) {
                    let at = start + pos as u64;
                    self.log.write_all_at(head, at)?;
                    let rest = &records[pos + BATCH_HEADER_LEN..pos + h.total_size()];
                    self.log.write_all_at(rest, at + BATCH_HEADER_LEN as u64)?;
                    pos += h.total_size();
                }
            }
        }
        self.size += batches.len() as u64;
        self.log_dirty = true;
        let mut pos = start;
        for h in headers {
            self.index_batch(pos, h, interval)?;
            pos += h.total_size() as u64;
        }
        Ok(())
    }

    /// Scans the whole segment with CRC and offset checks, truncates everything
    /// from the first invalid byte, and rebuilds both indexes. Returns the number
    /// of bytes truncated.
    pub fn recover(&mut self, interval: u64) -> Result<u64, LogError> {
        self.size = self.log.len()?;
        self.oi.reset()?;
        self.ti.reset()?;
        self.bytes_since_index = 0;
        self.max_ts = -1;
        self.offset_of_max_ts = -1;
        self.next_offset = self.base;
        let base = self.base;
        let mut expected = base;
        // A second handle so the walk can borrow it while the closure indexes.
        let file = self.log.clone();
        let (valid, _) = walk(&*file, 0, self.size, true, |pos, h| {
            let ok = h.base_offset >= expected
                && h.last_offset_delta >= 0
                && h.last_offset() - base <= i32::MAX as i64
                && h.records_count >= 0;
            if ok {
                expected = h.next_offset();
                self.index_batch(pos, h, interval)?;
            }
            Ok(ok)
        })?;
        let truncated = self.size - valid;
        if truncated > 0 {
            tracing::warn!(
                segment = %self.log_path.display(),
                valid,
                truncated,
                "truncating invalid bytes at the end of a log segment"
            );
            self.log.set_len(valid)?;
            self.size = valid;
        }
        self.maybe_append_time_entry()?;
        // Aborts whose markers did not survive go with them.
        self.txn.truncate_from(Offset::new(self.next_offset))?;
        self.log_dirty = true;
        Ok(truncated)
    }

    /// Loads a segment that needs no full scan: checks the indexes and walks the
    /// batches after the last offset-index entry to find the segment's end. Falls
    /// back to `recover` when anything does not fit. Returns truncated bytes.
    pub fn load(&mut self, interval: u64) -> Result<u64, LogError> {
        self.size = self.log.len()?;
        // Index files are made by their first entry, so a missing one is
        // right for a segment too small to have had an offset-index entry
        // (checked after the walk below); missing beside offset-index
        // entries (made together with time entries), it was lost.
        let missing = std::mem::take(&mut self.index_missing);
        let sane = (!missing || self.oi.entries.is_empty())
            && !self.oi.torn
            && !self.ti.torn
            && offset_entries_sane(&self.oi.entries, self.size)
            && time_entries_sane(&self.ti.entries);
        if !sane {
            return self.recover(interval);
        }
        let start = self.oi.last().map(|e| e.position as u64).unwrap_or(0);
        // The batch at the last index entry must start exactly at its offset.
        let expected_first = self.oi.last().map(|e| self.base + e.rel_offset as i64);
        let mut next = self.base;
        let mut tail_max: Option<(i64, i64)> = None;
        let mut since = 0u64;
        let mut first = true;
        let mut monotonic = true;
        let mut last_len = 0u64;
        let (end, stop) = walk(&*self.log, start, self.size, false, |_, h| {
            if first && expected_first.is_some_and(|o| o != h.base_offset) {
                monotonic = false;
                return Ok(false);
            }
            if h.base_offset < next || h.last_offset_delta < 0 {
                monotonic = false;
                return Ok(false);
            }
            first = false;
            next = h.next_offset();
            if tail_max.is_none_or(|(t, _)| h.max_timestamp > t) {
                tail_max = Some((h.max_timestamp, h.last_offset()));
            }
            since += h.total_size() as u64;
            last_len = h.total_size() as u64;
            Ok(true)
        })?;
        // Without an offset-index entry, every batch but the last came
        // before the first interval was full (as `index_batch` rules).
        let entry_was_due = self.oi.entries.is_empty() && since - last_len >= interval;
        let ti_beyond_end = self
            .ti
            .last()
            .is_some_and(|e| self.base + e.rel_offset as i64 >= next);
        if stop != Stop::End || !monotonic || end != self.size || ti_beyond_end || entry_was_due {
            return self.recover(interval);
        }
        if let Some(last) = self.ti.last() {
            if last.timestamp >= 0 {
                self.max_ts = last.timestamp;
                self.offset_of_max_ts = self.base + last.rel_offset as i64;
            }
        }
        if let Some((t, o)) = tail_max {
            if t > self.max_ts {
                self.max_ts = t;
                self.offset_of_max_ts = o;
            }
        }
        self.next_offset = next;
        self.bytes_since_index = since;
        // Entries past the segment's end (its tail was cut while the index
        // kept them, or the file is damaged) describe markers that are gone.
        self.txn.truncate_from(Offset::new(next))?;
        Ok(0)
    }

    /// Position and header of the first batch whose last offset is `>= offset`.
    pub fn find_batch(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>, LogError> {
        let entry = lookup_offset(&self.oi.entries, self.rel(offset));
        let mut found = None;
        let (_, stop) = walk(
            &*self.log,
            entry.position as u64,
            self.size,
            false,
            |pos, h| {
                if h.last_offset() >= offset {
                    found = Some((pos, *h));
                    return Ok(false);
                }
                Ok(true)
            },
        )?;
        if found.is_none() && stop != Stop::End {
            return Err(self.corrupt(stop));
        }
        Ok(found)
    }

    /// Where a read from `start` can skip to without reading the headers
    /// in between: the last indexed batch at or before `end_limit` whose
    /// base offset is at most `max_offset` (so every batch before it ends
    /// below both limits), with its base offset; `(start, None)` when no
    /// index entry lies after `start`. A 1 MiB fetch then reads the
    /// headers of the last index interval only, not the whole MiB.
    pub fn skip_to(&self, start: u64, end_limit: u64, max_offset: i64) -> (u64, Option<i64>) {
        let entries = &self.oi.entries;
        let n = entries.partition_point(|e| {
            (e.position as u64) <= end_limit.min(self.size)
                && self.base + i64::from(e.rel_offset) <= max_offset
        });
        match n.checked_sub(1).map(|i| entries[i]) {
            Some(e) if e.position as u64 > start => {
                (e.position as u64, Some(self.base + i64::from(e.rel_offset)))
            }
            _ => (start, None),
        }
    }

    /// Position to start a timestamp search from.
    pub fn position_for_timestamp(&self, ts: i64) -> u64 {
        match lookup_time(&self.ti.entries, ts) {
            Some(e) => lookup_offset(&self.oi.entries, e.rel_offset).position as u64,
            None => 0,
        }
    }

    pub fn corrupt(&self, stop: Stop) -> LogError {
        LogError::Corrupt(format!(
            "{}: {stop:?} batch while reading",
            self.log_path.display()
        ))
    }

    pub fn walk(
        &self,
        start: u64,
        f: impl FnMut(u64, &BatchHeader) -> Result<bool, LogError>,
    ) -> Result<(u64, Stop), LogError> {
        walk(&*self.log, start, self.size, false, f)
    }

    /// `len` bytes of the segment's file from `pos`, unread: the file stays
    /// open while the slice lives, even if the segment is deleted.
    pub fn slice(&self, pos: u64, len: usize) -> FileSlice {
        FileSlice {
            file: self.log.clone(),
            pos,
            len,
        }
    }

    pub fn read_bytes(&self, pos: u64, len: usize, out: &mut Vec<u8>) -> Result<(), LogError> {
        let at = out.len();
        out.resize(at + len, 0);
        self.log.read_exact_at(&mut out[at..], pos)?;
        Ok(())
    }

    /// Drops every batch whose last offset is `>= offset`. Returns the new next
    /// offset of the segment.
    pub fn truncate_to(&mut self, offset: i64, interval: u64) -> Result<i64, LogError> {
        let Some((pos, _)) = self.find_batch(offset)? else {
            return Ok(self.next_offset);
        };
        self.log.set_len(pos)?;
        self.size = pos;
        self.log_dirty = true;
        // Keep index entries that still point inside the file, then rebuild the
        // in-memory state (max timestamp, next offset) from what remains.
        let keep = self
            .oi
            .entries
            .partition_point(|e| (e.position as u64) < pos);
        self.oi.truncate_entries(keep)?;
        let rel = self.rel(offset);
        let keep_t = self.ti.entries.partition_point(|e| e.rel_offset < rel);
        self.ti.truncate_entries(keep_t)?;
        self.max_ts = -1;
        self.offset_of_max_ts = -1;
        self.load(interval)?;
        Ok(self.next_offset)
    }

    pub fn flush(&mut self) -> Result<(), LogError> {
        if self.log_dirty {
            self.log.sync()?;
            self.log_dirty = false;
        }
        self.oi.flush()?;
        self.ti.flush()?;
        self.txn.flush()?;
        Ok(())
    }

    /// Removes the segment's files.
    pub fn delete_files(self) -> Result<(), LogError> {
        let paths = [
            self.log_path.clone(),
            self.oi.path().to_path_buf(),
            self.ti.path().to_path_buf(),
            self.txn.path().to_path_buf(),
        ];
        let storage = self.storage.clone();
        drop(self);
        for p in paths {
            storage.remove_if_exists(&p)?;
        }
        Ok(())
    }
}

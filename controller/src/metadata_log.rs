//! The local metadata log for a single-node controller: an append-only file of
//! frames `[len u32][crc32c u32][json records]`, one frame per controller event
//! so that an event's records commit together. Each append is fsynced before
//! the event is answered. Replay at start stops at the first torn or corrupt
//! frame and truncates it (it was never acknowledged). The next issue replaces
//! this file with an openraft log without changing the event loop's shape.

use crate::records::MetadataRecord;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum MetadataLogError {
    #[error("metadata log I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("metadata batch of {0} bytes exceeds the frame limit")]
    TooLarge(usize),
    #[error("metadata record encoding: {0}")]
    Encode(#[from] serde_json::Error),
}

pub struct MetadataLog {
    path: PathBuf,
    file: File,
}

const MAX_FRAME: usize = 64 << 20;

impl MetadataLog {
    /// Opens (creating) the log and returns every committed batch of records.
    pub fn open(dir: &Path) -> Result<(MetadataLog, Vec<Vec<MetadataRecord>>), MetadataLogError> {
        let path = dir.join("metadata.log");
        let io = |source| MetadataLogError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).map_err(io)?;
        let (batches, valid) = parse_frames(&buf);
        if valid < buf.len() {
            tracing::warn!(path = %path.display(), valid, len = buf.len(), "truncating torn metadata log tail");
            file.set_len(valid as u64).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        Ok((MetadataLog { path, file }, batches))
    }

    /// Appends one event's records and fsyncs them.
    pub fn append(&mut self, records: &[MetadataRecord]) -> Result<(), MetadataLogError> {
        let body = serde_json::to_vec(records)?;
        if body.len() > MAX_FRAME {
            // Replay would treat a larger frame as torn: refuse it instead.
            return Err(MetadataLogError::TooLarge(body.len()));
        }
        let mut frame = Vec::with_capacity(body.len() + 8);
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        frame.extend_from_slice(&body);
        let io = |source| MetadataLogError::Io {
            path: self.path.clone(),
            source,
        };
        let before = self.file.metadata().map_err(io)?.len();
        if let Err(e) = self
            .file
            .write_all(&frame)
            .and_then(|_| self.file.sync_data())
        {
            // Leave no partial frame behind: later frames would be lost at replay.
            if self
                .file
                .set_len(before)
                .and_then(|_| self.file.sync_data())
                .is_err()
            {
                tracing::error!(path = %self.path.display(), "cannot undo a failed metadata append; stopping");
                std::process::abort();
            }
            return Err(io(e));
        }
        Ok(())
    }
}

/// Parses whole, checksummed frames; returns them and the length of the valid prefix.
pub fn parse_frames(buf: &[u8]) -> (Vec<Vec<MetadataRecord>>, usize) {
    let mut out = Vec::new();
    let mut pos = 0;
    while buf.len() - pos >= 8 {
        let len = u32::from_be_bytes(buf[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(buf[pos + 4..pos + 8].try_into().expect("4 bytes"));
        if len > MAX_FRAME || buf.len() - pos - 8 < len {
            break;
        }
        let body = &buf[pos + 8..pos + 8 + len];
        if crc32c::crc32c(body) != crc {
            break;
        }
        let Ok(records) = serde_json::from_slice::<Vec<MetadataRecord>>(body) else {
            break;
        };
        out.push(records);
        pos += 8 + len;
    }
    (out, pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec(i: i64) -> MetadataRecord {
        MetadataRecord::ProducerIds {
            broker_id: 1,
            next_producer_id: i,
        }
    }

    #[test]
    fn reopen_replays_and_truncates_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, batches) = MetadataLog::open(dir.path()).unwrap();
            assert!(batches.is_empty());
            log.append(&[rec(1), rec(2)]).unwrap();
            log.append(&[rec(3)]).unwrap();
        }
        let path = dir.path().join("metadata.log");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0, 0, 0, 50, 1, 2, 3]);
        std::fs::write(&path, &bytes).unwrap();
        let (mut log, batches) = MetadataLog::open(dir.path()).unwrap();
        assert_eq!(batches, vec![vec![rec(1), rec(2)], vec![rec(3)]]);
        log.append(&[rec(4)]).unwrap();
        drop(log);
        let (_, batches) = MetadataLog::open(dir.path()).unwrap();
        assert_eq!(batches.len(), 3);
    }

    proptest! {
        #[test]
        fn any_cut_or_flip_keeps_a_prefix(n in 1usize..6, cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>(), do_flip in any::<bool>()) {
            let dir = tempfile::tempdir().unwrap();
            let (mut log, _) = MetadataLog::open(dir.path()).unwrap();
            for i in 0..n { log.append(&[rec(i as i64)]).unwrap(); }
            drop(log);
            let path = dir.path().join("metadata.log");
            let mut bytes = std::fs::read(&path).unwrap();
            if do_flip { let i = flip.index(bytes.len()); bytes[i] ^= 0x5a; } else { bytes.truncate(cut.index(bytes.len() + 1)); }
            std::fs::write(&path, &bytes).unwrap();
            let (_, batches) = MetadataLog::open(dir.path()).unwrap();
            prop_assert!(batches.len() <= n);
            for (i, b) in batches.iter().enumerate() { prop_assert_eq!(b, &vec![rec(i as i64)]); }
        }
    }
}

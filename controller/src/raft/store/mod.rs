//! Storage for the metadata quorum: the Raft log store and the state machine.
//!
//! Two backends share one state-machine type:
//! - RocksDB (`open_rocks`), the default. One database holds the log, the
//!   vote, the committed log id and the latest snapshot. Every write that Raft
//!   relies on for safety (vote, append, truncate, purge, committed, snapshot)
//!   is a synced write: it is on disk before the call returns, and the append
//!   callback fires only after that. Losing any of them after a crash could
//!   cause a double vote in one term or lose acknowledged entries.
//! - Memory (`open_memory`), for tests that opt in explicitly. It does not
//!   survive a restart, so a node on it must never be restarted.
//!
//! The state machine is not written on `apply`: the snapshot is persisted, and
//! on restart the image is rebuilt from the snapshot and openraft re-applies the
//! committed entries after it (which is why `save_committed` is persisted too).
//! Values read back from disk are never trusted: a corrupt one becomes an
//! error (`StoreError` at open, else an openraft `StorageError`, which stops
//! the node), never a panic.

mod mem;
mod rocks;
mod state_machine;

pub use mem::MemLogStore;
pub use rocks::RocksLogStore;
pub use state_machine::StateMachineStore;

use openraft::AnyError;
use std::path::Path;

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A persisted value (the snapshot) does not decode.
    #[error("corrupt store: {0}")]
    Corrupt(#[from] AnyError),
}

/// Opens (creating if missing) the RocksDB store in `dir`: the log store and
/// the state machine share one database. The state machine starts from the
/// persisted snapshot, if any.
pub fn open_rocks(dir: &Path) -> Result<(RocksLogStore, StateMachineStore), StoreError> {
    std::fs::create_dir_all(dir)?;
    let db = rocks::open_db(dir)?;
    let log = RocksLogStore::new(db.clone());
    let sm = StateMachineStore::open_rocks(db)?;
    Ok((log, sm))
}

/// An in-memory log store and state machine. Nothing survives a restart.
pub fn open_memory() -> (MemLogStore, StateMachineStore) {
    (MemLogStore::default(), StateMachineStore::memory())
}

/// Checks an append of entries with `indexes` (in order) against the log:
/// `last_present` is the index of the last entry present, `last_purged` the
/// last purged index. Returns how many leading entries to skip because they
/// fall at or below the purge point (already covered by the snapshot; storing
/// them would put entries behind the purge marker). The rest must continue the
/// log with no hole and no overlap. A log that never held anything may start
/// anywhere (openraft begins at 0, or after a snapshot).
fn check_append(
    last_present: Option<u64>,
    last_purged: Option<u64>,
    indexes: &[u64],
) -> Result<usize, AnyError> {
    let skip = match last_purged {
        Some(p) => indexes.iter().take_while(|&&i| i <= p).count(),
        None => 0,
    };
    let mut expected = last_present.or(last_purged).map(|i| i + 1);
    for &index in &indexes[skip..] {
        if let Some(want) = expected {
            if index != want {
                return Err(AnyError::error(format!(
                    "non-contiguous append: entry index {index}, expected {want}"
                )));
            }
        }
        expected = Some(index + 1);
    }
    Ok(skip)
}

#[cfg(test)]
mod tests {
    use super::check_append;

    #[test]
    fn raft_store_contiguity() {
        assert_eq!(check_append(None, None, &[5, 6, 7]).unwrap(), 0);
        assert_eq!(check_append(Some(4), None, &[5, 6]).unwrap(), 0);
        assert_eq!(check_append(Some(4), Some(2), &[]).unwrap(), 0);
        assert!(check_append(Some(4), None, &[6]).is_err(), "hole");
        assert!(check_append(Some(4), None, &[4]).is_err(), "overlap");
        assert!(check_append(None, None, &[1, 3]).is_err(), "hole inside");
        // After a purge: continue from the purge point.
        assert_eq!(check_append(None, Some(2), &[3]).unwrap(), 0);
        assert!(check_append(None, Some(2), &[4]).is_err());
        // Entries the purge covers are skipped, not stored.
        assert_eq!(check_append(None, Some(2), &[1]).unwrap(), 1);
        assert_eq!(check_append(None, Some(2), &[1, 2, 3]).unwrap(), 2);
        assert!(check_append(Some(5), Some(2), &[2, 3]).is_err());
    }
}

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

mod contiguity;
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

//! openraft's storage conformance suite, on both backends.

use openraft::testing::{StoreBuilder, Suite};
use openraft::{StorageError, StorageIOError};
use strand_controller::raft::store::{
    open_memory, open_rocks, MemLogStore, RocksLogStore, StateMachineStore,
};
use strand_controller::raft::{NodeId, TypeConfig};
use tempfile::TempDir;

struct RocksBuilder;

impl StoreBuilder<TypeConfig, RocksLogStore, StateMachineStore, TempDir> for RocksBuilder {
    async fn build(
        &self,
    ) -> Result<(TempDir, RocksLogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let (log, sm) = open_rocks(dir.path()).map_err(|e| StorageIOError::write(&e))?;
        Ok((dir, log, sm))
    }
}

struct MemoryBuilder;

impl StoreBuilder<TypeConfig, MemLogStore, StateMachineStore> for MemoryBuilder {
    async fn build(&self) -> Result<((), MemLogStore, StateMachineStore), StorageError<NodeId>> {
        let (log, sm) = open_memory();
        Ok(((), log, sm))
    }
}

// The suite makes its own runtimes, so these are plain tests.

#[test]
fn raft_store_suite_rocks() {
    Suite::test_all(RocksBuilder).unwrap();
}

#[test]
fn raft_store_suite_memory() {
    Suite::test_all(MemoryBuilder).unwrap();
}

//! The in-memory log store, for tests that opt in. Same contract as the
//! RocksDB store (contiguity included), minus durability.

use super::contiguity::check_append;
use crate::raft::{NodeId, TypeConfig};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    Entry, LogId, LogState, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote,
};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;

#[derive(Default)]
struct MemLog {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    logs: BTreeMap<u64, Entry<TypeConfig>>,
}

/// The Raft log, vote and committed log id in memory. Clones share the log.
#[derive(Clone, Default)]
pub struct MemLogStore {
    inner: Arc<Mutex<MemLog>>,
}

type Result<T, E = StorageError<NodeId>> = std::result::Result<T, E>;

impl RaftLogReader<TypeConfig> for MemLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>> {
        let log = self.inner.lock();
        Ok(log.logs.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for MemLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>> {
        let log = self.inner.lock();
        let last_purged_log_id = log.last_purged;
        let last_log_id = log
            .logs
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<()> {
        self.inner.lock().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>> {
        Ok(self.inner.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<()> {
        self.inner.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>> {
        Ok(self.inner.lock().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        {
            let mut log = self.inner.lock();
            let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
            let last_present = log.logs.keys().next_back().copied();
            let skip = check_append(last_present, log.last_purged.map(|l| l.index), &indexes)
                .map_err(StorageIOError::write_logs)?;
            for e in entries.into_iter().skip(skip) {
                log.logs.insert(e.log_id.index, e);
            }
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        self.inner.lock().logs.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        let mut log = self.inner.lock();
        if log.last_purged >= Some(log_id) {
            return Ok(());
        }
        log.last_purged = Some(log_id);
        log.logs = match log_id.index.checked_add(1) {
            Some(next) => log.logs.split_off(&next),
            None => BTreeMap::new(),
        };
        Ok(())
    }
}

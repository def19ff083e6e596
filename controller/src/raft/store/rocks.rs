//! The RocksDB log store. Column families: `logs` (entries keyed by big-endian
//! index, so key order is log order), `meta` (vote, committed, last purged log
//! id) and `sm` (the latest snapshot). Every write goes through
//! `write_synced`: one atomic batch with `sync = true`, run on a blocking
//! thread so an fsync does not stall the async workers.

use super::contiguity::check_append;
use crate::raft::{NodeId, TypeConfig};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    AnyError, BasicNode, Entry, LogId, LogState, OptionalSend, RaftLogReader, SnapshotMeta,
    StorageError, StorageIOError, Vote,
};
use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch,
    WriteOptions, DB,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

const CF_LOGS: &str = "logs";
const CF_META: &str = "meta";
const CF_SM: &str = "sm";

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";
const KEY_SNAPSHOT_META: &[u8] = b"snapshot_meta";
const KEY_SNAPSHOT_DATA: &[u8] = b"snapshot_data";

/// Past every 8-byte index key (bytewise order), for open-ended range deletes.
const KEY_AFTER_ALL: [u8; 9] = [0xff; 9];

type Result<T, E = StorageError<NodeId>> = std::result::Result<T, E>;

pub(super) fn open_db(dir: &Path) -> Result<Arc<DB>, rocksdb::Error> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let cfs = [CF_LOGS, CF_META, CF_SM]
        .into_iter()
        .map(|name| ColumnFamilyDescriptor::new(name, Options::default()));
    Ok(Arc::new(DB::open_cf_descriptors(&opts, dir, cfs)?))
}

fn cf<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily, AnyError> {
    db.cf_handle(name)
        .ok_or_else(|| AnyError::error(format!("rocksdb column family {name} missing")))
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_index(key: &[u8]) -> Result<u64, AnyError> {
    let bytes: [u8; 8] = key
        .try_into()
        .map_err(|_| AnyError::error(format!("log key of {} bytes, want 8", key.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

fn to_json<T: Serialize>(v: &T) -> Result<Vec<u8>, AnyError> {
    serde_json::to_vec(v).map_err(|e| AnyError::new(&e))
}

fn from_json<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, AnyError> {
    serde_json::from_slice(bytes).map_err(|e| AnyError::new(&e).add_context(|| what.to_string()))
}

/// One write in a synced batch. `WriteBatch` is not `Send`, so the batch is
/// built on the blocking thread from these.
pub(super) enum Op {
    Put {
        cf: &'static str,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Deletes keys in `[from, to)`.
    DeleteRange {
        cf: &'static str,
        from: Vec<u8>,
        to: Vec<u8>,
    },
}

/// Writes `ops` as one atomic batch and fsyncs the WAL before returning.
pub(super) async fn write_synced(db: &Arc<DB>, ops: Vec<Op>) -> Result<(), AnyError> {
    let db = db.clone();
    let write = move || -> Result<(), AnyError> {
        let mut batch = WriteBatch::default();
        for op in &ops {
            match op {
                Op::Put {
                    cf: name,
                    key,
                    value,
                } => batch.put_cf(cf(&db, name)?, key, value),
                Op::DeleteRange { cf: name, from, to } => {
                    batch.delete_range_cf(cf(&db, name)?, from, to)
                }
            }
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        db.write_opt(batch, &wo).map_err(|e| AnyError::new(&e))
    };
    match tokio::task::spawn_blocking(write).await {
        Ok(r) => r,
        Err(join) => Err(AnyError::new(&join)),
    }
}

fn get_json<T: DeserializeOwned>(
    db: &DB,
    cf_name: &str,
    key: &[u8],
) -> Result<Option<T>, AnyError> {
    match db
        .get_cf(cf(db, cf_name)?, key)
        .map_err(|e| AnyError::new(&e))?
    {
        Some(bytes) => Ok(Some(from_json(&bytes, &String::from_utf8_lossy(key))?)),
        None => Ok(None),
    }
}

/// The persisted snapshot, if any: its meta and its data.
#[allow(clippy::type_complexity)]
pub(super) fn load_snapshot(
    db: &DB,
) -> Result<Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>, AnyError> {
    let Some(meta) = get_json::<SnapshotMeta<NodeId, BasicNode>>(db, CF_SM, KEY_SNAPSHOT_META)?
    else {
        return Ok(None);
    };
    let data = db
        .get_cf(cf(db, CF_SM)?, KEY_SNAPSHOT_DATA)
        .map_err(|e| AnyError::new(&e))?
        .ok_or_else(|| AnyError::error("snapshot meta present but snapshot data missing"))?;
    Ok(Some((meta, data)))
}

/// Replaces the persisted snapshot (meta and data in one synced batch).
pub(super) async fn save_snapshot(
    db: &Arc<DB>,
    meta: &SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
) -> Result<(), AnyError> {
    let ops = vec![
        Op::Put {
            cf: CF_SM,
            key: KEY_SNAPSHOT_DATA.to_vec(),
            value: data,
        },
        Op::Put {
            cf: CF_SM,
            key: KEY_SNAPSHOT_META.to_vec(),
            value: to_json(meta)?,
        },
    ];
    write_synced(db, ops).await
}

/// The Raft log, vote and committed log id on RocksDB. Cloning shares the
/// database; clones serve as log readers for replication.
#[derive(Clone)]
pub struct RocksLogStore {
    db: Arc<DB>,
}

impl RocksLogStore {
    pub(super) fn new(db: Arc<DB>) -> Self {
        Self { db }
    }

    fn last_purged(&self) -> Result<Option<LogId<NodeId>>, AnyError> {
        get_json(&self.db, CF_META, KEY_LAST_PURGED)
    }

    /// The last entry present, if any.
    fn last_entry(&self) -> Result<Option<Entry<TypeConfig>>, AnyError> {
        let cf = cf(&self.db, CF_LOGS)?;
        match self.db.iterator_cf(cf, IteratorMode::End).next() {
            None => Ok(None),
            Some(Err(e)) => Err(AnyError::new(&e)),
            Some(Ok((_, value))) => Ok(Some(from_json(&value, "log entry")?)),
        }
    }
}

impl RaftLogReader<TypeConfig> for RocksLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => match i.checked_add(1) {
                Some(i) => i,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        let cf = cf(&self.db, CF_LOGS).map_err(StorageIOError::read_logs)?;
        let start_key = index_key(start);
        let mut entries = Vec::new();
        for item in self
            .db
            .iterator_cf(cf, IteratorMode::From(&start_key, Direction::Forward))
        {
            let (key, value) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            let index = key_index(&key).map_err(StorageIOError::read_logs)?;
            if !range.contains(&index) {
                break;
            }
            let entry: Entry<TypeConfig> = from_json(&value, "log entry")
                .map_err(|e| StorageIOError::read_log_at_index(index, e))?;
            if entry.log_id.index != index {
                return Err(StorageIOError::read_log_at_index(
                    index,
                    AnyError::error(format!("entry has index {}", entry.log_id.index)),
                )
                .into());
            }
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for RocksLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>> {
        let last_purged_log_id = self.last_purged().map_err(StorageIOError::read_logs)?;
        let last_log_id = match self.last_entry().map_err(StorageIOError::read_logs)? {
            Some(e) => Some(e.log_id),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<()> {
        let ops = vec![Op::Put {
            cf: CF_META,
            key: KEY_VOTE.to_vec(),
            value: to_json(vote).map_err(StorageIOError::write_vote)?,
        }];
        write_synced(&self.db, ops)
            .await
            .map_err(|e| StorageIOError::write_vote(e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>> {
        get_json(&self.db, CF_META, KEY_VOTE).map_err(|e| StorageIOError::read_vote(e).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<()> {
        let ops = vec![Op::Put {
            cf: CF_META,
            key: KEY_COMMITTED.to_vec(),
            value: to_json(&committed).map_err(StorageIOError::write)?,
        }];
        write_synced(&self.db, ops)
            .await
            .map_err(|e| StorageIOError::write(e).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>> {
        let committed: Option<Option<LogId<NodeId>>> =
            get_json(&self.db, CF_META, KEY_COMMITTED).map_err(StorageIOError::read)?;
        Ok(committed.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
        let (last_present, last_purged) = (self.last_entry(), self.last_purged());
        let last_present = last_present.map_err(StorageIOError::read_logs)?;
        let last_purged = last_purged.map_err(StorageIOError::read_logs)?;
        let skip = check_append(
            last_present.map(|e| e.log_id.index),
            last_purged.map(|l| l.index),
            &indexes,
        )
        .map_err(StorageIOError::write_logs)?;
        let mut ops = Vec::with_capacity(entries.len());
        for e in &entries[skip..] {
            ops.push(Op::Put {
                cf: CF_LOGS,
                key: index_key(e.log_id.index).to_vec(),
                value: to_json(e).map_err(|err| StorageIOError::write_log_entry(e.log_id, err))?,
            });
        }
        if !ops.is_empty() {
            write_synced(&self.db, ops)
                .await
                .map_err(StorageIOError::write_logs)?;
        }
        // Only now are the entries on disk.
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        let ops = vec![Op::DeleteRange {
            cf: CF_LOGS,
            from: index_key(log_id.index).to_vec(),
            to: KEY_AFTER_ALL.to_vec(),
        }];
        write_synced(&self.db, ops)
            .await
            .map_err(|e| StorageIOError::write_logs(e).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        if self.last_purged().map_err(StorageIOError::read_logs)? >= Some(log_id) {
            return Ok(());
        }
        let to = match log_id.index.checked_add(1) {
            Some(next) => index_key(next).to_vec(),
            None => KEY_AFTER_ALL.to_vec(),
        };
        // The marker and the deletion commit together: no window where the
        // entries are gone but the log state does not say so.
        let ops = vec![
            Op::Put {
                cf: CF_META,
                key: KEY_LAST_PURGED.to_vec(),
                value: to_json(&log_id).map_err(StorageIOError::write_logs)?,
            },
            Op::DeleteRange {
                cf: CF_LOGS,
                from: index_key(0).to_vec(),
                to,
            },
        ];
        write_synced(&self.db, ops)
            .await
            .map_err(|e| StorageIOError::write_logs(e).into())
    }
}

//! Moving a replica to another log directory of the same broker
//! (AlterReplicaLogDirs; Kafka's future replica). A copy of the log, the
//! future replica, is built in the destination directory under the name
//! `<topic>-<index>-future` from the current log, batch for batch as a
//! follower copies its leader's (offsets, epochs and the aborted
//! transaction index as they are), while the partition serves as before.
//! Once it has caught up, [`Partition::swap_in_future`] takes the log's
//! write lock (appends wait), copies what came since, syncs and closes the
//! copy, renames it to the partition's name and the old directory for
//! deletion, and reopens the log in its new place.
//!
//! A truncation of the current log (a follower's divergence) starts the
//! copy again: a copy taken before it may hold a suffix the log no longer
//! has. A crash before the swap leaves a `-future` directory: the broker
//! removes it at the next start and starts the move again from the
//! beginning; a crash between the two renames leaves two whole, equal
//! copies, and the broker keeps one.

use super::*;

/// The suffix of a future replica's directory.
pub const FUTURE_SUFFIX: &str = "-future";

/// A copy of a partition's log being built in another log directory.
pub struct FutureReplica {
    log: PartitionLog,
    /// The aborted-transaction index is built as the follower path builds
    /// it; the producer state itself is the partition's.
    producers: ProducerStateManager,
    /// The current log's truncation count the copy is consistent with.
    truncations: u64,
    /// `<log dir>/<topic>-<index>-future`.
    dir: PathBuf,
    /// `<log dir>/<topic>-<index>`: where it goes at the swap.
    final_dir: PathBuf,
    /// The destination directory's failure channel, for the log reopened
    /// there at the swap.
    failures: Option<Arc<crate::log_dir_failure::LogDirFailures>>,
}

impl std::fmt::Debug for FutureReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FutureReplica")
            .field("dir", &self.dir)
            .field("log_end_offset", &self.log.log_end_offset())
            .finish()
    }
}

impl FutureReplica {
    pub fn log_end_offset(&self) -> Offset {
        self.log.log_end_offset()
    }

    pub fn size_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    /// The directory being written (deleted when the move is abandoned).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sends the copy's first I/O error to the destination directory's
    /// failure channel, and refuses writes once that directory is offline.
    pub fn report_failures_to(&mut self, failures: &Arc<crate::log_dir_failure::LogDirFailures>) {
        self.log.set_failure_listener(failures.listener());
        self.log.set_dir_offline_flag(failures.offline_flag());
        self.failures = Some(failures.clone());
    }
}

/// Why a swap did not happen.
#[derive(Debug)]
pub enum SwapError {
    /// The current log was truncated after the copy was taken: copy again.
    Stale(Box<FutureReplica>),
    /// The partition was closed or deleted; the move is over (the copy is
    /// handed back for its directory to be removed).
    Closed(Box<FutureReplica>),
    Log(LogError),
}

impl From<LogError> for SwapError {
    fn from(e: LogError) -> Self {
        SwapError::Log(e)
    }
}

impl Partition {
    /// Opens an empty future replica of this partition in `log_dir`
    /// (another log directory), replacing any left there.
    pub fn open_future(&self, log_dir: &Path) -> Result<FutureReplica, LogError> {
        let name = format!("{}-{}", self.topic, self.index);
        let dir = log_dir.join(format!("{name}{FUTURE_SUFFIX}"));
        let final_dir = log_dir.join(&name);
        let (storage, clock, config) = {
            let log = self.log.read();
            (log.storage(), self.clock.clone(), log.config().clone())
        };
        if storage.exists(&dir) {
            storage.remove_dir_all(&dir)?;
        }
        let log = PartitionLog::open_in(storage, clock, &dir, config)?;
        Ok(FutureReplica {
            log,
            producers: ProducerStateManager::default(),
            // Never a count the log has: the first round starts the copy
            // at the log start.
            truncations: u64::MAX,
            dir,
            final_dir,
            failures: None,
        })
    }

    /// One round of copying: up to `max_bytes` of what the log holds past
    /// the copy's end. True when the copy has caught up with the log end.
    /// The log is read under its read lock, as a fetch reads it; the copy
    /// is written after that lock is released.
    pub fn copy_to_future(
        &self,
        future: &mut FutureReplica,
        max_bytes: usize,
    ) -> Result<bool, LogError> {
        let (start, truncations) = {
            let log = self.log.read();
            (log.log_start_offset(), log.truncations())
        };
        let end = future.log.log_end_offset();
        if truncations != future.truncations || end < start {
            future.log.truncate_fully_and_start_at(start)?;
            future.producers = ProducerStateManager::default();
            future.truncations = truncations;
        }
        let read = {
            let log = self.log.read();
            if log.truncations() != future.truncations {
                return Ok(false);
            }
            let leo = log.log_end_offset();
            let from = future.log.log_end_offset();
            if from >= leo {
                return Ok(from == leo);
            }
            log.read(from, max_bytes, leo, true)?
        };
        if !append_copy(future, &read.records)? {
            // Batches no longer start where the copy ends (the cleaner
            // rewrote them): start again.
            future.truncations = u64::MAX;
            return Ok(false);
        }
        Ok(future.log.log_end_offset() >= read.log_end_offset)
    }

    /// Replaces this partition's log with the caught-up `future` (see the
    /// module docs); returns the old directory, renamed for deletion (the
    /// caller removes it, outside every lock). Appends wait for the swap;
    /// what was acknowledged before it is in the new log, synced.
    pub fn swap_in_future(&self, mut future: FutureReplica) -> Result<PathBuf, SwapError> {
        let mut log = self.log.write();
        if self.closed.load(Ordering::Acquire) {
            return Err(SwapError::Closed(Box::new(future)));
        }
        if log.truncations() != future.truncations {
            return Err(SwapError::Stale(Box::new(future)));
        }
        // What came since the last round; no append can add to it now.
        while future.log.log_end_offset() < log.log_end_offset() {
            let read = log.read(
                future.log.log_end_offset(),
                1 << 20,
                log.log_end_offset(),
                true,
            )?;
            if !append_copy(&mut future, &read.records)? {
                future.truncations = u64::MAX;
                return Err(SwapError::Stale(Box::new(future)));
            }
        }
        if future.log.log_start_offset() < log.log_start_offset() {
            future.log.delete_records_before(log.log_start_offset())?;
        }
        future
            .log
            .checkpoint_high_watermark(self.offsets().high_watermark)?;
        let storage = log.storage();
        let config = log.config().clone();
        let FutureReplica {
            log: mut copy,
            dir,
            final_dir,
            failures,
            ..
        } = future;
        copy.close_clean()?;
        drop(copy);
        write_partition_metadata(&*storage, &dir, self.topic_id)?;
        let old_dir = log.dir().to_path_buf();
        let doomed = PathBuf::from(format!(
            "{}.{}{DELETE_SUFFIX}",
            old_dir.display(),
            Uuid::new_v4().simple()
        ));
        // The copy takes the partition's name first: a crash between the
        // renames leaves two whole copies, never none.
        storage.rename(&dir, &final_dir).map_err(LogError::Io)?;
        if let Some(parent) = final_dir.parent() {
            storage.sync_dir(parent).map_err(LogError::Io)?;
        }
        let mut moved =
            PartitionLog::open_in(storage.clone(), self.clock.clone(), &final_dir, config)?;
        if let Some(failures) = failures {
            moved.set_failure_listener(failures.listener());
            moved.set_dir_offline_flag(failures.offline_flag());
        }
        // A cleaner pass planned on the old log must not commit to this one.
        moved.continue_generation_of(&log);
        // The old log's files stay open until it is dropped here: nothing
        // reads them after the swap (readers take the lock).
        std::mem::swap(&mut *log, &mut moved);
        *self.dir.write() = final_dir;
        drop(log);
        drop(moved);
        if let Err(e) = storage.rename(&old_dir, &doomed) {
            tracing::warn!(dir = %old_dir.display(), error = %e, "could not rename the moved replica's old directory for deletion");
        }
        if let Some(parent) = old_dir.parent() {
            let _ = storage.sync_dir(parent);
        }
        Ok(doomed)
    }
}

/// Appends whole batches read from the current log to the copy, with the
/// aborted-transaction index as the follower path builds it. False when
/// the first batch does not start at the copy's end.
fn append_copy(future: &mut FutureReplica, records: &[u8]) -> Result<bool, LogError> {
    if records.is_empty() {
        return Ok(true);
    }
    let valid = strand_protocol::batch::valid_prefix_len(records);
    let records = &records[..valid];
    let headers =
        validate_batch_framing(records).map_err(|e| LogError::InvalidRecords(e.to_string()))?;
    let Some(first) = headers.first() else {
        return Ok(true);
    };
    if first.base_offset != future.log.log_end_offset().get() {
        return Ok(false);
    }
    future.log.append_as_follower(records, &headers)?;
    record_appended(&mut future.log, &mut future.producers, records, &headers)?;
    Ok(true)
}

//! Log directory failure, as Kafka's LogDirFailureChannel: the first failed
//! write, fsync or checkpoint of any partition log takes the log directory
//! offline. From then on every partition answers KAFKA_STORAGE_ERROR and no
//! log is written again (each log also refuses on its own: see
//! `PartitionLog::guarded`). Strand keeps all partitions in one directory
//! (the first of `log.dirs`), so an offline directory is Kafka's "all log
//! directories have failed": the broker hands its leaderships over with a
//! controlled shutdown (the controller moves them to in-sync replicas and
//! takes this broker out of the ISRs at once, instead of after the session
//! timeout) and exits without its clean-shutdown path, which would flush and
//! checkpoint the failed logs. A restart recovers the logs from what reached
//! the disk.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use strand_log::FailureListener;
use tokio::sync::Notify;

#[derive(Default)]
pub struct LogDirFailures {
    /// Shared with every log in the directory, which refuse writes once set.
    offline: Arc<AtomicBool>,
    /// What failed first (for the exit message).
    first: Mutex<Option<String>>,
    failed: Notify,
}

impl LogDirFailures {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The listener each partition log reports its first I/O error to.
    pub fn listener(self: &Arc<Self>) -> FailureListener {
        let me = self.clone();
        Arc::new(move |dir: &Path, e: &std::io::Error| me.fail(dir, e))
    }

    /// The flag each log of the directory checks before every write.
    pub fn offline_flag(&self) -> Arc<AtomicBool> {
        self.offline.clone()
    }

    /// Takes the log directory offline (the first report wins).
    pub fn fail(&self, dir: &Path, e: &std::io::Error) {
        let what = format!("{}: {e}", dir.display());
        if self.offline.swap(true, Ordering::AcqRel) {
            tracing::error!(error = %what, "another log I/O error after the log directory went offline");
            return;
        }
        tracing::error!(error = %what, "log I/O failed: the log directory is offline");
        *self.first.lock().unwrap_or_else(|p| p.into_inner()) = Some(what);
        // notify_one keeps a permit, so a waiter that starts later still wakes.
        self.failed.notify_one();
    }

    pub fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Acquire)
    }

    /// Waits until the directory goes offline; returns what failed first.
    pub async fn wait(&self) -> String {
        while !self.is_offline() {
            self.failed.notified().await;
        }
        self.first
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn first_failure_is_kept_and_wakes_the_waiter() {
        let f = LogDirFailures::new();
        assert!(!f.is_offline());
        let waiter = tokio::spawn({
            let f = f.clone();
            async move { f.wait().await }
        });
        let listener = f.listener();
        listener(Path::new("/d/t-0"), &std::io::Error::other("fsync: EIO"));
        listener(Path::new("/d/t-1"), &std::io::Error::other("later"));
        assert!(f.is_offline());
        assert_eq!(waiter.await.unwrap(), "/d/t-0: fsync: EIO");
        // A late waiter returns at once.
        assert_eq!(f.wait().await, "/d/t-0: fsync: EIO");
    }
}

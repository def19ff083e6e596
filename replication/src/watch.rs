//! Wake-ups for purgatory: a DelayedProduce or DelayedFetch waits on its
//! partition's [`PartitionWatch`] and completes when the HW/LEO move, never by
//! polling.

use std::time::Duration;

use tokio::sync::watch;

/// A partition's replication progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogProgress {
    pub high_watermark: i64,
    pub log_end_offset: i64,
}

/// Publishes a partition's [`LogProgress`] to waiters.
#[derive(Debug)]
pub struct PartitionWatch {
    tx: watch::Sender<LogProgress>,
}

impl PartitionWatch {
    pub fn new(initial: LogProgress) -> Self {
        PartitionWatch {
            tx: watch::Sender::new(initial),
        }
    }

    pub fn current(&self) -> LogProgress {
        *self.tx.borrow()
    }

    /// Publishes new progress; waiters wake only if it changed.
    pub fn update(&self, progress: LogProgress) {
        self.tx.send_if_modified(|p| {
            let changed = *p != progress;
            *p = progress;
            changed
        });
    }

    /// A receiver for waiting without borrowing the watch (e.g. across tasks).
    pub fn subscribe(&self) -> watch::Receiver<LogProgress> {
        self.tx.subscribe()
    }

    /// Waits until `pred` holds for the current progress (checked immediately,
    /// then on each change) or `timeout` passes. Returns whether `pred` held.
    pub async fn wait_until<F>(&self, pred: F, timeout: Duration) -> bool
    where
        F: FnMut(&LogProgress) -> bool,
    {
        wait_until(self.subscribe(), pred, timeout).await
    }
}

/// [`PartitionWatch::wait_until`] on a receiver. Returns `false` on timeout or
/// when the watch is dropped before `pred` holds.
pub async fn wait_until<F>(mut rx: watch::Receiver<LogProgress>, pred: F, timeout: Duration) -> bool
where
    F: FnMut(&LogProgress) -> bool,
{
    matches!(
        tokio::time::timeout(timeout, rx.wait_for(pred)).await,
        Ok(Ok(_))
    )
}

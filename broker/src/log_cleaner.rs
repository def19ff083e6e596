//! The log cleaner's threads (Kafka's `LogCleaner`): `log.cleaner.threads`
//! OS threads, each with its share of `log.cleaner.dedupe.buffer.size` as
//! its offset map. A thread takes the hosted compacted partition most in
//! need of a pass (overdue for `max.compaction.lag.ms` first, then the
//! dirtiest at or above `min.cleanable.dirty.ratio`, then one with a delete
//! horizon passed), one partition per thread at a time, runs the pass
//! (`Partition::clean`: no lock held while it reads or writes segments)
//! and otherwise waits `log.cleaner.backoff.ms`. Nothing here runs on the
//! async workers or on a request's path.
//!
//! A partition whose log a pass finds damaged is left alone until the
//! broker restarts (Kafka marks it uncleanable); an I/O error has taken its
//! directory offline already.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use strand_log::cleaner::{CleanError, CleanStats, CleanerResources};
use strand_partition::Partition;
use strand_types::TopicPartition;

use crate::config::LogCleanerSettings;
use crate::replica_manager::ReplicaManager;

/// What the cleaner threads share.
#[derive(Default)]
struct Shared {
    /// Partitions a thread is cleaning now.
    busy: Mutex<HashSet<TopicPartition>>,
    /// Partitions whose logs a pass found damaged.
    uncleanable: Mutex<HashSet<TopicPartition>>,
    stop: Mutex<bool>,
    wake: Condvar,
    metrics: Mutex<CleanerMetrics>,
}

/// Kafka's cleaner metrics, as of the last pass of each thread.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanerMetrics {
    /// `max-dirty-percent`: the dirtiest log's dirty ratio at its last choice.
    pub max_dirty_percent: f64,
    /// `cleaner-recopy-percent`: bytes written over bytes read, last pass.
    pub cleaner_recopy_percent: f64,
    /// `max-clean-time-secs`: the longest pass so far.
    pub max_clean_time_secs: f64,
    /// `max-buffer-utilization-percent`: the offset map's fill, last pass.
    pub max_buffer_utilization_percent: f64,
    /// Passes completed.
    pub passes: u64,
    /// `uncleanable-partitions-count`.
    pub uncleanable_partitions_count: usize,
}

/// The running cleaner; its threads stop when it is dropped or the
/// replica manager is gone, and start again with new settings when they
/// change at runtime.
pub struct LogCleaner {
    replicas: Weak<ReplicaManager>,
    running: Mutex<(Arc<Shared>, LogCleanerSettings)>,
}

impl LogCleaner {
    /// Starts the threads (none when `log.cleaner.enable` is false).
    pub fn start(replicas: &Arc<ReplicaManager>, settings: &LogCleanerSettings) -> LogCleaner {
        let shared = Arc::new(Shared::default());
        spawn_threads(&shared, Arc::downgrade(replicas), settings);
        LogCleaner {
            replicas: Arc::downgrade(replicas),
            running: Mutex::new((shared, settings.clone())),
        }
    }

    /// Takes up new settings (Kafka's LogCleaner.reconfigure): the threads
    /// stop once their pass is done and new ones start with the new
    /// memory and rates; what was found uncleanable stays so. Nothing when
    /// the settings are the same.
    pub fn reconfigure(&self, settings: &LogCleanerSettings) {
        let mut running = self.running.lock();
        if running.1 == *settings {
            return;
        }
        let old = running.0.clone();
        stop(&old);
        let next = Arc::new(Shared::default());
        *next.uncleanable.lock() = old.uncleanable.lock().clone();
        *next.metrics.lock() = old.metrics.lock().clone();
        spawn_threads(&next, self.replicas.clone(), settings);
        tracing::info!(
            threads = settings.threads,
            dedupe_buffer_size = settings.dedupe_buffer_size,
            backoff_ms = settings.backoff_ms,
            "log cleaner restarted with new settings"
        );
        *running = (next, settings.clone());
    }

    fn shared(&self) -> Arc<Shared> {
        self.running.lock().0.clone()
    }
}

/// Asks `shared`'s threads to stop (each after its pass).
fn stop(shared: &Shared) {
    *shared.stop.lock() = true;
    shared.wake.notify_all();
}

/// Starts `settings.threads` threads on `shared` (none when the cleaner
/// is disabled).
fn spawn_threads(
    shared: &Arc<Shared>,
    replicas: Weak<ReplicaManager>,
    settings: &LogCleanerSettings,
) {
    {
        if settings.enable {
            let threads = settings.threads.max(1);
            for i in 0..threads {
                let (shared, replicas) = (shared.clone(), replicas.clone());
                let resources = CleanerResources::new(
                    settings.dedupe_buffer_size / threads,
                    settings.load_factor,
                    settings.io_max_bytes_per_second,
                );
                let backoff = Duration::from_millis(settings.backoff_ms);
                let spawned = std::thread::Builder::new()
                    .name(format!("kafka-log-cleaner-thread-{i}"))
                    .spawn(move || run(shared, replicas, resources, backoff));
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "could not start a log cleaner thread");
                }
            }
        }
    }
}

impl LogCleaner {
    /// The cleaner's metrics now.
    pub fn metrics(&self) -> CleanerMetrics {
        let shared = self.shared();
        let mut m = shared.metrics.lock().clone();
        m.uncleanable_partitions_count = shared.uncleanable.lock().len();
        m
    }

    /// Wakes the threads to look for work now (a test, or a topic whose
    /// settings just changed).
    pub fn wake(&self) {
        self.shared().wake.notify_all();
    }
}

impl Drop for LogCleaner {
    fn drop(&mut self) {
        stop(&self.running.lock().0);
    }
}

/// One thread's loop.
fn run(
    shared: Arc<Shared>,
    replicas: Weak<ReplicaManager>,
    mut resources: CleanerResources,
    backoff: Duration,
) {
    loop {
        if *shared.stop.lock() {
            return;
        }
        let Some(rm) = replicas.upgrade() else { return };
        let worked = if rm.log_dirs.is_fatal() {
            false
        } else {
            clean_one(&shared, &rm, &mut resources)
        };
        drop(rm);
        if !worked {
            let mut stop = shared.stop.lock();
            if !*stop {
                shared.wake.wait_for(&mut stop, backoff);
            }
        }
    }
}

/// Cleans the partition most in need of it; false when none is.
fn clean_one(shared: &Shared, rm: &ReplicaManager, resources: &mut CleanerResources) -> bool {
    let now = rm.clock.now_ms();
    let chosen = {
        let mut busy = shared.busy.lock();
        let uncleanable = shared.uncleanable.lock();
        let mut best: Option<(_, Arc<Partition>, TopicPartition)> = None;
        for p in rm.all_partitions() {
            let tp = TopicPartition::new(p.topic.clone(), p.index);
            if busy.contains(&tp) || uncleanable.contains(&tp) {
                continue;
            }
            if let Some((urgency, _)) = p.cleaner_urgency(now) {
                if best.as_ref().is_none_or(|(u, _, _)| urgency > *u) {
                    best = Some((urgency, p, tp));
                }
            }
        }
        let (urgency, p, tp) = match best {
            Some(b) => b,
            None => return false,
        };
        busy.insert(tp.clone());
        (urgency, p, tp)
    };
    let (urgency, p, tp) = chosen;
    let result = p.clean(resources, now);
    shared.busy.lock().remove(&tp);
    match result {
        Ok(Some(stats)) => {
            report(shared, &p, &stats, resources);
            tracing::debug!(?urgency, "log cleaner pass done");
            true
        }
        Ok(None) => false,
        Err(CleanError::Aborted) => false,
        Err(CleanError::Log(e)) => {
            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "log cleaner: the pass failed; the partition is not cleaned again until the broker restarts");
            shared.uncleanable.lock().insert(tp);
            false
        }
    }
}

fn report(shared: &Shared, p: &Partition, stats: &CleanStats, resources: &CleanerResources) {
    tracing::info!(
        topic = %p.topic,
        partition = p.index,
        segments = stats.segments_cleaned,
        bytes_read = stats.bytes_read,
        bytes_written = stats.bytes_written,
        records_read = stats.records_read,
        records_kept = stats.records_kept,
        dirty_ratio_before = format!("{:.3}", stats.dirty_ratio),
        dirty_ratio_after = format!("{:.3}", stats.dirty_ratio_after),
        first_dirty = stats.first_dirty,
        end = stats.end,
        keys = stats.keys_in_map,
        duration_ms = stats.duration.as_millis() as u64,
        "log cleaner pass"
    );
    let mut m = shared.metrics.lock();
    m.passes += 1;
    m.max_dirty_percent = 100.0 * stats.dirty_ratio;
    m.cleaner_recopy_percent = stats.recopy_percent();
    m.max_clean_time_secs = m.max_clean_time_secs.max(stats.duration.as_secs_f64());
    m.max_buffer_utilization_percent = resources.map_utilization_percent(stats.keys_in_map);
}

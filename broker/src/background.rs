//! A node's background work, each a task on the runtime: reconciliation
//! with every image the controller publishes, log housekeeping, the group
//! and transaction coordinators' timers and the ISR shrink check. Time
//! comes from the node's clock; the periods are Kafka's settings.

use crate::group_coordinator;
use crate::node::Node;
use std::sync::Arc;
use std::time::Duration;

impl Node {
    /// Starts the background tasks; they run until the runtime stops.
    pub fn spawn_background(self: &Arc<Self>) {
        let broker = &self.broker;
        // Keep the partitions in line with every image the controller publishes.
        let mut images = broker.controller.subscribe();
        let node = self.clone();
        tokio::spawn(async move {
            while images.changed().await.is_ok() {
                images.borrow_and_update();
                let node = node.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    node.broker.reconcile();
                    node.reconfigure_cleaner();
                })
                .await;
            }
        });

        // Housekeeping: time-based roll and flush every second, retention and
        // HW checkpoints at their intervals.
        let b = broker.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut last_retention = b.clock.now_ms();
            let mut last_hw_checkpoint = b.clock.now_ms();
            loop {
                tick.tick().await;
                let now = b.clock.now_ms();
                let retention = now - last_retention >= b.config.log_retention_check_interval_ms;
                if retention {
                    last_retention = now;
                }
                let checkpoint_hw = now - last_hw_checkpoint
                    >= b.config.replica_high_watermark_checkpoint_interval_ms;
                if checkpoint_hw {
                    last_hw_checkpoint = now;
                }
                let b = b.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if b.log_dirs.is_fatal() {
                        return;
                    }
                    // Each partition's HW checkpoint and snapshot are fsyncs
                    // of its own files: with thousands of partitions, done in
                    // parallel, as opens are.
                    let partitions = b.all_partitions();
                    crate::replica_manager::parallel_map(
                        &partitions,
                        crate::replica_manager::DISK_WORKERS,
                        |p| {
                            p.housekeeping(
                                now,
                                retention,
                                checkpoint_hw,
                                b.config.producer_id_expiration_ms,
                            )
                        },
                    );
                })
                .await;
            }
        });

        // Group timers (initial rebalance delay, rebalance and session timeouts).
        let (b, groups) = (broker.clone(), self.groups.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                groups
                    .tick(
                        |index| b.partition(group_coordinator::OFFSETS_TOPIC, index),
                        || group_coordinator::consumer_topics(&b.image()),
                    )
                    .await;
            }
        });

        // Offset expiration at offsets.retention.check.interval.ms.
        let (b, groups) = (broker.clone(), self.groups.clone());
        tokio::spawn(async move {
            let period = Duration::from_millis(b.config.offsets_retention_check_interval_ms as u64);
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            loop {
                tick.tick().await;
                groups
                    .expire_offsets(
                        |index| b.partition(group_coordinator::OFFSETS_TOPIC, index),
                        b.clock.now_ms(),
                    )
                    .await;
            }
        });

        let config = &broker.config;
        // Transactions past their timeout are aborted (with an epoch bump).
        let txns = self.txns.clone();
        every(
            config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            Start::Now,
            move || txns.abort_timed_out(),
        );
        // Transactional ids idle past transactional.id.expiration.ms are removed.
        let (txns, expiration_ms) = (self.txns.clone(), config.transactional_id_expiration_ms);
        every(
            config.transaction_remove_expired_transaction_cleanup_interval_ms,
            Start::AfterOnePeriod,
            move || txns.remove_expired(expiration_ms),
        );
        // ISR shrink: Kafka checks every replica.lag.time.max.ms / 2.
        let b = broker.clone();
        every(
            (config.replica_lag_time_max_ms / 2).max(0) as u64,
            Start::Now,
            move || b.maybe_shrink_isrs(),
        );
        // Replica-count acknowledgements: evict followers that hold them up
        // (strand.acks.eviction.ms) without waiting for the lag check.
        let b = broker.clone();
        every(
            crate::replica_manager::QUORUM_CHECK_MS,
            Start::Now,
            move || b.evict_quorum_laggards(),
        );
    }
}

/// When a periodic task first runs.
enum Start {
    Now,
    AfterOnePeriod,
}

/// Runs `f` every `period_ms` (at least 10 ms) on the runtime.
fn every(period_ms: u64, start: Start, mut f: impl FnMut() + Send + 'static) {
    let period = Duration::from_millis(period_ms.max(10));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        if matches!(start, Start::AfterOnePeriod) {
            tick.tick().await;
        }
        loop {
            tick.tick().await;
            f();
        }
    });
}

//! Followers replicate by fetching from their leader with the Kafka Fetch API
//! (v15: replica id and broker epoch in ReplicaState, KIP-903), one fetcher task per source broker serving every
//! partition this broker follows on it. The leader answers with whole
//! batches up to its LEO, its HW and log start offset, or a diverging epoch
//! when our log has a suffix the leader does not (KIP-320 / KIP-595 style
//! truncation, no separate OffsetForLeaderEpoch round trip).

use crate::broker_client::BrokerConn;
use crate::config::BrokerConfig;
use crate::controller_link::ControllerLink;
use crate::replication_quota::ReplicationThrottles;
use crate::transport::Transport;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use strand_partition::{FollowerFetchState, Partition};
use strand_protocol::{extensions, ErrorCode};
use strand_replication::rules::{
    follower_fetch_action, DivergingEpoch, FetchedPartition, FollowerFetchAction,
};
use strand_types::{BrokerEpoch, Clock, LeaderEpoch, Offset};
use tokio::sync::Notify;

/// v15+ (KIP-903): the replica's id and broker epoch travel in ReplicaState,
/// which the leader checks against the registration; topics go by id (v13+).
const FETCH_VERSION: i16 = 15;

struct Fetcher {
    partitions: Arc<Mutex<Vec<Arc<Partition>>>>,
    /// Bumped when a partition is added: the fetch in flight (a long poll of
    /// up to replica.fetch.wait.max.ms) is then abandoned, so that a new
    /// partition's first fetch (and the acks=all produces waiting on it) does
    /// not wait behind it.
    added: Arc<AtomicU64>,
    wake: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

/// The fetchers of this broker, keyed by the leader they fetch from.
pub struct ReplicaFetcherManager {
    config: Arc<BrokerConfig>,
    controller: ControllerLink,
    /// This broker's epoch (its registration), sent with every fetch.
    broker_epoch: BrokerEpoch,
    transport: Arc<dyn Transport>,
    throttles: Arc<ReplicationThrottles>,
    clock: Arc<dyn Clock>,
    metrics: Arc<crate::metrics::BrokerMetrics>,
    fetchers: Mutex<HashMap<strand_types::BrokerId, Fetcher>>,
}

impl ReplicaFetcherManager {
    pub fn new(
        config: Arc<BrokerConfig>,
        controller: ControllerLink,
        broker_epoch: BrokerEpoch,
        transport: Arc<dyn Transport>,
        throttles: Arc<ReplicationThrottles>,
        clock: Arc<dyn Clock>,
        metrics: Arc<crate::metrics::BrokerMetrics>,
    ) -> Self {
        ReplicaFetcherManager {
            config,
            controller,
            broker_epoch,
            transport,
            throttles,
            clock,
            metrics,
            fetchers: Mutex::new(HashMap::new()),
        }
    }

    /// Sets the partitions followed on each leader: fetchers start for new
    /// leaders and stop for leaders with nothing left to follow.
    pub fn update(&self, follow: HashMap<strand_types::BrokerId, Vec<Arc<Partition>>>) {
        let mut fetchers = self.fetchers.lock();
        fetchers.retain(|leader, f| {
            let keep = follow.contains_key(leader);
            if !keep {
                f.task.abort();
            }
            keep
        });
        for (leader, parts) in follow {
            if let Some(f) = fetchers.get(&leader) {
                let mut current = f.partitions.lock();
                let known: HashSet<*const Partition> = current.iter().map(Arc::as_ptr).collect();
                let grew = parts.iter().any(|p| !known.contains(&Arc::as_ptr(p)));
                *current = parts;
                drop(current);
                if grew {
                    f.added.fetch_add(1, Ordering::Release);
                }
                f.wake.notify_one();
                continue;
            }
            let partitions = Arc::new(Mutex::new(parts));
            let added = Arc::new(AtomicU64::new(0));
            let wake = Arc::new(Notify::new());
            let task = tokio::spawn(run_fetcher(
                self.config.clone(),
                self.controller.clone(),
                self.transport.clone(),
                (
                    self.throttles.clone(),
                    self.clock.clone(),
                    self.metrics.clone(),
                ),
                self.broker_epoch,
                leader,
                partitions.clone(),
                added.clone(),
                wake.clone(),
            ));
            fetchers.insert(
                leader,
                Fetcher {
                    partitions,
                    added,
                    wake,
                    task,
                },
            );
        }
    }

    pub fn shutdown(&self) {
        for (_, f) in self.fetchers.lock().drain() {
            f.task.abort();
        }
    }
}

/// One fetch state sent for a partition.
struct Sent {
    partition: Arc<Partition>,
    fetch_offset: Offset,
    leader_epoch: LeaderEpoch,
    /// A throttled replica outside the ISR: its bytes count against the
    /// follower quota.
    throttled: bool,
}

#[allow(clippy::too_many_arguments)]
async fn run_fetcher(
    config: Arc<BrokerConfig>,
    controller: ControllerLink,
    transport: Arc<dyn Transport>,
    (throttles, clock, metrics): (
        Arc<ReplicationThrottles>,
        Arc<dyn Clock>,
        Arc<crate::metrics::BrokerMetrics>,
    ),
    broker_epoch: BrokerEpoch,
    leader_id: strand_types::BrokerId,
    partitions: Arc<Mutex<Vec<Arc<Partition>>>>,
    added: Arc<AtomicU64>,
    wake: Arc<Notify>,
) {
    let backoff = Duration::from_millis(config.replica_fetch_backoff_ms.max(10));
    // The leader's id as the logs print it.
    let leader = leader_id.get();
    let mut conn: Option<Conn> = None;
    loop {
        // Read before the partition list: an addition after this is seen.
        let generation = added.load(Ordering::Acquire);
        let parts = partitions.lock().clone();
        let mut sent = Vec::with_capacity(parts.len());
        let mut by_topic: Vec<FetchTopic> = Vec::new();
        let me = config.broker_id();
        // KIP-73: while the follower quota is spent, throttled replicas
        // outside the ISR are left out of the fetch.
        let quota_spent = throttles.follower.is_exceeded(clock.now_ms());
        let mut held_back = false;
        for p in parts {
            let throttled = throttles.follower_throttled(&p.topic, p.index) && !p.in_isr(me);
            if throttled && quota_spent {
                held_back = true;
                continue;
            }
            let Some(FollowerFetchState {
                fetch_offset,
                last_fetched_epoch,
                log_start_offset,
                leader_epoch,
                durable_offset,
            }) = p.follower_fetch_state()
            else {
                continue;
            };
            let fp = FetchPartition::default()
                .with_partition(p.index)
                .with_current_leader_epoch(leader_epoch.get())
                .with_fetch_offset(fetch_offset.get())
                .with_last_fetched_epoch(LeaderEpoch::to_wire(last_fetched_epoch))
                .with_log_start_offset(log_start_offset.get())
                .with_partition_max_bytes(config.replica_fetch_max_bytes)
                .with_unknown_tagged_fields(
                    [(
                        extensions::FETCH_DURABLE_OFFSET_TAG,
                        extensions::encode_offset(durable_offset.get()),
                    )]
                    .into(),
                );
            match by_topic.iter_mut().find(|t| t.topic_id == p.topic_id) {
                Some(t) => t.partitions.push(fp),
                None => by_topic.push(
                    FetchTopic::default()
                        .with_topic_id(p.topic_id)
                        .with_partitions(vec![fp]),
                ),
            }
            sent.push(Sent {
                partition: p,
                fetch_offset,
                leader_epoch,
                throttled,
            });
        }
        if sent.is_empty() {
            // Held back by the quota: look again once it allows.
            let pause = if held_back {
                let wait = throttles.follower.wait_ms(clock.now_ms());
                Duration::from_millis(wait.clamp(10, 1_000))
            } else {
                Duration::from_secs(1)
            };
            let _ = tokio::time::timeout(pause, wake.notified()).await;
            continue;
        }
        if conn.is_none() {
            let addr = controller
                .image()
                .brokers
                .get(&leader_id)
                .map(|b| format!("{}:{}", b.host, b.port));
            match addr {
                Some(addr) => match Conn::connect(&*transport, &addr, config.node_id).await {
                    Ok(c) => conn = Some(c),
                    Err(e) => {
                        tracing::debug!(leader, %addr, error = %e, "cannot reach leader");
                    }
                },
                None => tracing::debug!(leader, "leader not in the metadata image"),
            }
            if conn.is_none() {
                wait_or_wake(&wake, backoff).await;
                continue;
            }
        }
        // A replica held back by the quota is fetched again once the quota
        // allows: the others' long poll does not hold it up longer.
        let max_wait_ms = if held_back {
            let wait = throttles.follower.wait_ms(clock.now_ms()).max(1);
            config
                .replica_fetch_wait_max_ms
                .min(i32::try_from(wait).unwrap_or(i32::MAX))
        } else {
            config.replica_fetch_wait_max_ms
        };
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_replica_state(
                ReplicaState::default()
                    .with_replica_id(BrokerId(config.broker_id().get()))
                    .with_replica_epoch(broker_epoch.get()),
            )
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(config.replica_fetch_min_bytes)
            .with_max_bytes(config.replica_fetch_response_max_bytes)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(by_topic);
        // A conn is present: set just above.
        let c = conn.as_mut().expect("connected above");
        let wait = Duration::from_millis(config.replica_fetch_wait_max_ms.max(0) as u64)
            + Duration::from_secs(30);
        let outcome = {
            let fetch = tokio::time::timeout(wait, c.fetch(&req));
            tokio::pin!(fetch);
            loop {
                tokio::select! {
                    r = &mut fetch => break Some(r),
                    _ = wake.notified() => {
                        if added.load(Ordering::Acquire) != generation {
                            break None;
                        }
                    }
                }
            }
        };
        let Some(outcome) = outcome else {
            // A partition was added while the fetch waited at the leader:
            // fetch again at once with it. The abandoned exchange leaves the
            // connection mid-response, so it is dropped.
            conn = None;
            continue;
        };
        let resp = match outcome {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => {
                tracing::debug!(leader, error = %e, "fetch from leader failed");
                conn = None;
                wait_or_wake(&wake, backoff).await;
                continue;
            }
            Err(_) => {
                tracing::warn!(leader, "fetch from leader timed out");
                conn = None;
                continue;
            }
        };
        if resp.error_code != 0 {
            tracing::debug!(leader, code = resp.error_code, "fetch from leader refused");
            wait_or_wake(&wake, backoff).await;
            continue;
        }
        // Appends and truncations write the log.
        let failed = crate::disk::run(|| {
            let mut failed = 0usize;
            let mut throttled_bytes = 0usize;
            let mut bytes = 0usize;
            for t in resp.responses {
                for pd in t.partitions {
                    bytes += pd.records.as_ref().map_or(0, |r| r.len());
                    let Some(s) = sent.iter().find(|s| {
                        s.partition.topic_id == t.topic_id
                            && s.partition.index == pd.partition_index
                    }) else {
                        continue;
                    };
                    if s.throttled {
                        throttled_bytes += pd.records.as_ref().map_or(0, |r| r.len());
                    }
                    if !handle_partition(s, pd) {
                        failed += 1;
                    }
                }
            }
            throttles.follower.record(throttled_bytes, clock.now_ms());
            metrics.replicated_in(bytes as u64);
            failed
        });
        if failed == sent.len() {
            // Nothing usable (e.g. the leader has not seen its new epoch yet).
            wait_or_wake(&wake, backoff).await;
        }
    }
}

async fn wait_or_wake(wake: &Notify, backoff: Duration) {
    let _ = tokio::time::timeout(backoff, wake.notified()).await;
}

/// Applies one partition's part of a fetch response; false on an error
/// that needs a back-off.
fn handle_partition(s: &Sent, pd: kafka_protocol::messages::fetch_response::PartitionData) -> bool {
    let p = &s.partition;
    let fetched = FetchedPartition {
        error: ErrorCode::try_from_code(pd.error_code),
        diverging_epoch: DivergingEpoch::from_wire(
            pd.diverging_epoch.epoch,
            pd.diverging_epoch.end_offset,
        ),
        high_watermark: Offset::from_wire(pd.high_watermark),
        log_start_offset: Offset::from_wire(pd.log_start_offset),
    };
    if let Some(code) = fetched.error.filter(|c| *c != ErrorCode::OffsetOutOfRange) {
        tracing::debug!(topic = %p.topic, partition = p.index, ?code, "follower fetch error");
    }
    let records = pd.records.as_deref().unwrap_or(&[]);
    match p.apply_fetched(s.leader_epoch, s.fetch_offset, &fetched, records) {
        // Applied, unless there was nothing to apply (the fetch backs off).
        Ok(_) => follower_fetch_action(s.fetch_offset, &fetched) != FollowerFetchAction::Retry,
        Err(e) => {
            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "follower write failed");
            false
        }
    }
}

/// The follower's connection to its leader.
struct Conn(BrokerConn);

impl Conn {
    async fn connect(transport: &dyn Transport, addr: &str, node_id: i32) -> std::io::Result<Conn> {
        BrokerConn::connect(transport, addr, format!("strand-replica-fetcher-{node_id}"))
            .await
            .map(Conn)
    }

    async fn fetch(&mut self, req: &FetchRequest) -> std::io::Result<FetchResponse> {
        self.0.send(ApiKey::Fetch, FETCH_VERSION, req).await
    }
}

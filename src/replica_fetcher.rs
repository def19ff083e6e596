//! Followers replicate by fetching from their leader with the Kafka Fetch API
//! (replica id set), one fetcher task per source broker serving every
//! partition this broker follows on it. The leader answers with whole
//! batches up to its LEO, its HW and log start offset, or a diverging epoch
//! when our log has a suffix the leader does not (KIP-320 / KIP-595 style
//! truncation, no separate OffsetForLeaderEpoch round trip).

use crate::broker::Partition;
use crate::config::BrokerConfig;
use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use strand_controller::ControllerHandle;
use strand_protocol::ErrorCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Fetch v12: the last version that names topics (v13+ use topic ids) and
/// carries the replica id in the request body.
const FETCH_VERSION: i16 = 12;

/// The largest response frame a fetcher accepts.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

struct Fetcher {
    partitions: Arc<Mutex<Vec<Arc<Partition>>>>,
    wake: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

/// The fetchers of this broker, keyed by the leader they fetch from.
pub struct ReplicaFetcherManager {
    config: Arc<BrokerConfig>,
    controller: ControllerHandle,
    fetchers: Mutex<HashMap<i32, Fetcher>>,
}

impl ReplicaFetcherManager {
    pub fn new(config: Arc<BrokerConfig>, controller: ControllerHandle) -> Self {
        ReplicaFetcherManager {
            config,
            controller,
            fetchers: Mutex::new(HashMap::new()),
        }
    }

    /// Sets the partitions followed on each leader: fetchers start for new
    /// leaders and stop for leaders with nothing left to follow.
    pub fn update(&self, follow: HashMap<i32, Vec<Arc<Partition>>>) {
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
                *f.partitions.lock() = parts;
                f.wake.notify_one();
                continue;
            }
            let partitions = Arc::new(Mutex::new(parts));
            let wake = Arc::new(Notify::new());
            let task = tokio::spawn(run_fetcher(
                self.config.clone(),
                self.controller.clone(),
                leader,
                partitions.clone(),
                wake.clone(),
            ));
            fetchers.insert(
                leader,
                Fetcher {
                    partitions,
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
    fetch_offset: i64,
    leader_epoch: i32,
}

async fn run_fetcher(
    config: Arc<BrokerConfig>,
    controller: ControllerHandle,
    leader: i32,
    partitions: Arc<Mutex<Vec<Arc<Partition>>>>,
    wake: Arc<Notify>,
) {
    let backoff = Duration::from_millis(config.replica_fetch_backoff_ms.max(10));
    let mut conn: Option<Conn> = None;
    loop {
        let parts = partitions.lock().clone();
        let mut sent = Vec::with_capacity(parts.len());
        let mut by_topic: Vec<FetchTopic> = Vec::new();
        for p in parts {
            let Some((fetch_offset, last_epoch, log_start, leader_epoch)) =
                p.follower_fetch_state()
            else {
                continue;
            };
            let fp = FetchPartition::default()
                .with_partition(p.index)
                .with_current_leader_epoch(leader_epoch)
                .with_fetch_offset(fetch_offset)
                .with_last_fetched_epoch(last_epoch)
                .with_log_start_offset(log_start)
                .with_partition_max_bytes(config.replica_fetch_max_bytes);
            match by_topic.iter_mut().find(|t| t.topic.0.as_str() == p.topic) {
                Some(t) => t.partitions.push(fp),
                None => by_topic.push(
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(p.topic.clone())))
                        .with_partitions(vec![fp]),
                ),
            }
            sent.push(Sent {
                partition: p,
                fetch_offset,
                leader_epoch,
            });
        }
        if sent.is_empty() {
            let _ = tokio::time::timeout(Duration::from_secs(1), wake.notified()).await;
            continue;
        }
        if conn.is_none() {
            let addr = controller
                .image()
                .brokers
                .get(&leader)
                .map(|b| format!("{}:{}", b.host, b.port));
            match addr {
                Some(addr) => match Conn::connect(&addr, config.node_id).await {
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
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(config.node_id))
            .with_max_wait_ms(config.replica_fetch_wait_max_ms)
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
        let resp = match tokio::time::timeout(wait, c.fetch(&req)).await {
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
        let mut failed = 0usize;
        for t in resp.responses {
            for pd in t.partitions {
                let Some(s) = sent.iter().find(|s| {
                    s.partition.topic == t.topic.0.as_str()
                        && s.partition.index == pd.partition_index
                }) else {
                    continue;
                };
                if !handle_partition(s, pd) {
                    failed += 1;
                }
            }
        }
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
    let result = match ErrorCode::try_from_code(pd.error_code) {
        None => {
            let diverging = &pd.diverging_epoch;
            if diverging.epoch >= 0 || diverging.end_offset >= 0 {
                let offset = p.divergence_truncation_offset(diverging.epoch, diverging.end_offset);
                p.truncate_as_follower(s.leader_epoch, offset)
            } else {
                let records = pd.records.as_deref().unwrap_or(&[]);
                p.append_as_follower(
                    s.leader_epoch,
                    s.fetch_offset,
                    records,
                    pd.high_watermark,
                    pd.log_start_offset,
                )
            }
        }
        Some(ErrorCode::OffsetOutOfRange) => {
            if pd.log_start_offset >= 0 && s.fetch_offset < pd.log_start_offset {
                p.restart_as_follower_at(s.leader_epoch, pd.log_start_offset)
            } else if pd.high_watermark >= 0 {
                // Our log is longer than the leader's: cut back to its HW.
                p.truncate_as_follower(s.leader_epoch, pd.high_watermark)
            } else {
                return false;
            }
        }
        Some(code) => {
            tracing::debug!(topic = %p.topic, partition = p.index, ?code, "follower fetch error");
            return false;
        }
    };
    match result {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "follower write failed");
            false
        }
    }
}

/// A Kafka-wire connection to the leader, one request at a time.
struct Conn {
    stream: TcpStream,
    correlation: i32,
    client_id: StrBytes,
}

impl Conn {
    async fn connect(addr: &str, node_id: i32) -> std::io::Result<Conn> {
        let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            correlation: 0,
            client_id: StrBytes::from_string(format!("strand-replica-fetcher-{node_id}")),
        })
    }

    async fn fetch(&mut self, req: &FetchRequest) -> std::io::Result<FetchResponse> {
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Fetch as i16)
            .with_request_api_version(FETCH_VERSION)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(self.client_id.clone()));
        let mut body = BytesMut::with_capacity(256);
        body.put_i32(0);
        header
            .encode(
                &mut body,
                ApiKey::Fetch.request_header_version(FETCH_VERSION),
            )
            .map_err(invalid)?;
        req.encode(&mut body, FETCH_VERSION).map_err(invalid)?;
        let len = (body.len() - 4) as i32;
        body[..4].copy_from_slice(&len.to_be_bytes());
        self.stream.write_all(&body).await?;

        let mut prefix = [0u8; 4];
        self.stream.read_exact(&mut prefix).await?;
        let len = i32::from_be_bytes(prefix);
        if len < 4 || len as usize > MAX_RESPONSE_BYTES {
            return Err(invalid(format!("bad response size {len}")));
        }
        let mut frame = BytesMut::zeroed(len as usize);
        self.stream.read_exact(&mut frame).await?;
        let mut frame = frame.freeze();
        let rh = ResponseHeader::decode(
            &mut frame,
            ApiKey::Fetch.response_header_version(FETCH_VERSION),
        )
        .map_err(invalid)?;
        if rh.correlation_id != self.correlation {
            return Err(invalid(format!(
                "response for correlation id {} while waiting for {}",
                rh.correlation_id, self.correlation
            )));
        }
        FetchResponse::decode(&mut frame, FETCH_VERSION).map_err(invalid)
    }
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

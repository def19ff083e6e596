//! The KRaft-like controller. All metadata mutations are events on one queue,
//! handled by one task that owns the state: each event is a pure function of
//! the image (`manager`) returning metadata records and a result; the records
//! are committed to the metadata log, then replayed into the image, then the
//! event is answered and the new image published to brokers. State changes only
//! by replaying committed records, at start-up as in steady state.

pub mod configs;
pub mod image;
pub mod manager;
pub mod metadata_log;
pub mod raft;
pub mod records;

use image::MetadataImage;
use manager::{ApiError, ConfigOp, ControllerConfig, CreatedTopic, NewTopic};
use metadata_log::{MetadataLog, MetadataLogError};
use rand::Rng;
use records::{BrokerRecord, MetadataRecord};
use std::path::Path;
use std::sync::Arc;
use strand_protocol::ErrorCode;
use tokio::sync::{mpsc, oneshot, watch};
use uuid::Uuid;

/// CreatePartitions for one topic: name, new total count, explicit assignments.
pub type PartitionGrowth = (String, i32, Option<Vec<Vec<i32>>>);
/// AlterConfigs for one topic: name and (config, operation) pairs.
pub type TopicConfigOps = (String, Vec<(String, ConfigOp)>);

/// Requests to the controller's event loop.
pub enum ControllerEvent {
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
        reply: oneshot::Sender<Vec<Result<CreatedTopic, ApiError>>>,
    },
    DeleteTopics {
        names: Vec<String>,
        reply: oneshot::Sender<Vec<Result<Uuid, ApiError>>>,
    },
    CreatePartitions {
        topics: Vec<PartitionGrowth>,
        validate_only: bool,
        reply: oneshot::Sender<Vec<Result<(), ApiError>>>,
    },
    AlterTopicConfigs {
        topics: Vec<TopicConfigOps>,
        incremental: bool,
        validate_only: bool,
        reply: oneshot::Sender<Vec<Result<(), ApiError>>>,
    },
    AllocateProducerIds {
        broker_id: i32,
        reply: oneshot::Sender<Result<(i64, i64), ApiError>>,
    },
    RegisterBroker {
        broker: BrokerRecord,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
}

/// A cheap handle for submitting events and reading the published image.
#[derive(Clone)]
pub struct ControllerHandle {
    events: mpsc::Sender<ControllerEvent>,
    image: watch::Receiver<Arc<MetadataImage>>,
}

fn unavailable() -> ApiError {
    ApiError::new(ErrorCode::NotController, "controller is shutting down")
}

impl ControllerHandle {
    /// The latest published metadata image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }
    /// A receiver that sees every published image.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.image.clone()
    }

    async fn call<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> ControllerEvent) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.events.send(make(tx)).await.ok()?;
        rx.await.ok()
    }

    pub async fn create_topics(
        &self,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<Result<CreatedTopic, ApiError>> {
        let n = topics.len();
        self.call(|reply| ControllerEvent::CreateTopics {
            topics,
            validate_only,
            reply,
        })
        .await
        .unwrap_or_else(|| vec![Err(unavailable()); n])
    }
    pub async fn delete_topics(&self, names: Vec<String>) -> Vec<Result<Uuid, ApiError>> {
        let n = names.len();
        self.call(|reply| ControllerEvent::DeleteTopics { names, reply })
            .await
            .unwrap_or_else(|| vec![Err(unavailable()); n])
    }
    pub async fn create_partitions(
        &self,
        topics: Vec<PartitionGrowth>,
        validate_only: bool,
    ) -> Vec<Result<(), ApiError>> {
        let n = topics.len();
        self.call(|reply| ControllerEvent::CreatePartitions {
            topics,
            validate_only,
            reply,
        })
        .await
        .unwrap_or_else(|| vec![Err(unavailable()); n])
    }
    pub async fn alter_topic_configs(
        &self,
        topics: Vec<TopicConfigOps>,
        incremental: bool,
        validate_only: bool,
    ) -> Vec<Result<(), ApiError>> {
        let n = topics.len();
        self.call(|reply| ControllerEvent::AlterTopicConfigs {
            topics,
            incremental,
            validate_only,
            reply,
        })
        .await
        .unwrap_or_else(|| vec![Err(unavailable()); n])
    }
    pub async fn allocate_producer_ids(&self, broker_id: i32) -> Result<(i64, i64), ApiError> {
        self.call(|reply| ControllerEvent::AllocateProducerIds { broker_id, reply })
            .await
            .unwrap_or_else(|| Err(unavailable()))
    }
    pub async fn register_broker(&self, broker: BrokerRecord) -> Result<(), ApiError> {
        self.call(|reply| ControllerEvent::RegisterBroker { broker, reply })
            .await
            .unwrap_or_else(|| Err(unavailable()))
    }
}

/// The state the event loop owns.
struct Controller {
    config: ControllerConfig,
    log: MetadataLog,
    image: MetadataImage,
    publish: watch::Sender<Arc<MetadataImage>>,
}

impl Controller {
    /// Commits records (fsync), then replays them. A failed commit leaves the
    /// image untouched and the event fails.
    fn commit(&mut self, records: &[MetadataRecord]) -> Result<(), ApiError> {
        if records.is_empty() {
            return Ok(());
        }
        self.log.append(records).map_err(|e| {
            tracing::error!(error = %e, "metadata log append failed");
            ApiError::new(ErrorCode::KafkaStorageError, e.to_string())
        })?;
        for r in records {
            self.image.apply(r);
        }
        // Publish before the event is answered, so a caller that reads the
        // image after its reply sees its own change.
        self.publish.send_replace(Arc::new(self.image.clone()));
        Ok(())
    }

    /// Runs a batch of per-item decisions against a scratch image so later
    /// items see earlier ones, then commits all records as one frame.
    fn decide_each<I, T>(
        &mut self,
        items: Vec<I>,
        validate_only: bool,
        mut decide: impl FnMut(&MetadataImage, I) -> Result<(Vec<MetadataRecord>, T), ApiError>,
    ) -> Vec<Result<T, ApiError>> {
        let mut scratch = self.image.clone();
        let mut all = Vec::new();
        let mut results = Vec::new();
        for item in items {
            match decide(&scratch, item) {
                Ok((records, out)) => {
                    for r in &records {
                        scratch.apply(r);
                    }
                    all.extend(records);
                    results.push(Ok(out));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if !validate_only {
            if let Err(e) = self.commit(&all) {
                return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
            }
        }
        results
    }

    /// Registers a broker and, until heartbeats drive fencing, unfences it at
    /// once so that it is usable for placement and leadership.
    fn register_and_unfence(&mut self, broker: BrokerRecord) -> Result<(), ApiError> {
        let req = manager::BrokerRegistrationRequest {
            broker_id: broker.broker_id,
            incarnation_id: broker.incarnation_id,
            host: broker.host,
            port: broker.port,
            rack: broker.rack,
        };
        let mut heartbeats = manager::BrokerHeartbeats::default();
        let (mut records, _epoch) = manager::register_broker(
            &self.image,
            &mut heartbeats,
            &req,
            0,
            manager::DEFAULT_SESSION_TIMEOUT_MS,
        )?;
        let mut scratch = self.image.clone();
        for r in &records {
            scratch.apply(r);
        }
        records.extend(manager::replication::handle_broker_unfenced(
            &scratch,
            req.broker_id,
        ));
        self.commit(&records)
    }

    fn handle(&mut self, event: ControllerEvent) {
        let cfg = self.config.clone();
        let mut rng = rand::thread_rng();
        match event {
            ControllerEvent::CreateTopics {
                topics,
                validate_only,
                reply,
            } => {
                let r = self.decide_each(topics, validate_only, |img, t| {
                    let stripe = rng.gen_range(0..img.brokers.len().max(1));
                    manager::create_topic(img, &cfg, &t, Uuid::new_v4(), stripe)
                });
                let _ = reply.send(r);
            }
            ControllerEvent::DeleteTopics { names, reply } => {
                let r = self.decide_each(names, false, |img, n| manager::delete_topic(img, &n));
                let _ = reply.send(r);
            }
            ControllerEvent::CreatePartitions {
                topics,
                validate_only,
                reply,
            } => {
                let r =
                    self.decide_each(topics, validate_only, |img, (name, count, assignments)| {
                        let stripe = rng.gen_range(0..img.brokers.len().max(1));
                        manager::create_partitions(
                            img,
                            &name,
                            count,
                            assignments.as_deref(),
                            stripe,
                        )
                        .map(|rec| (rec, ()))
                    });
                let _ = reply.send(r);
            }
            ControllerEvent::AlterTopicConfigs {
                topics,
                incremental,
                validate_only,
                reply,
            } => {
                let r = self.decide_each(topics, validate_only, |img, (name, ops)| {
                    manager::alter_topic_configs(img, &name, &ops, incremental).map(|rec| (rec, ()))
                });
                let _ = reply.send(r);
            }
            ControllerEvent::AllocateProducerIds { broker_id, reply } => {
                let r = manager::allocate_producer_ids(&self.image, &cfg, broker_id, None)
                    .and_then(|(records, block)| self.commit(&records).map(|_| block));
                let _ = reply.send(r);
            }
            ControllerEvent::RegisterBroker { broker, reply } => {
                let _ = reply.send(self.register_and_unfence(broker));
            }
        }
    }
}

/// Opens the metadata log in `dir`, replays it, formats a new cluster if the
/// log is empty, and starts the event loop. Returns once the image is ready.
pub fn start(
    dir: &Path,
    config: ControllerConfig,
) -> Result<(ControllerHandle, tokio::task::JoinHandle<()>), MetadataLogError> {
    let (mut log, batches) = MetadataLog::open(dir)?;
    let mut image = MetadataImage::default();
    for batch in &batches {
        for r in batch {
            image.apply(r);
        }
    }
    if image.cluster_id.is_empty() {
        let records = vec![MetadataRecord::ClusterFormatted {
            cluster_id: new_cluster_id(),
        }];
        log.append(&records)?;
        for r in &records {
            image.apply(r);
        }
    }
    tracing::info!(cluster_id = %image.cluster_id, topics = image.topics.len(), records = image.applied, "metadata log replayed");
    let (publish, image_rx) = watch::channel(Arc::new(image.clone()));
    let (tx, mut rx) = mpsc::channel(1024);
    let mut controller = Controller {
        config,
        log,
        image,
        publish,
    };
    // The event loop is the only owner of controller state: one event at a time.
    let task = tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            tokio::task::block_in_place(|| controller.handle(event));
        }
    });
    Ok((
        ControllerHandle {
            events: tx,
            image: image_rx,
        },
        task,
    ))
}

/// A Kafka-style cluster id: 16 random bytes, URL-safe base64 without padding.
fn new_cluster_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = Uuid::new_v4().into_bytes();
    let mut bits: u128 = u128::from_be_bytes(bytes);
    let mut out = String::with_capacity(22);
    for _ in 0..22 {
        out.push(ALPHABET[(bits >> 122) as usize & 63] as char);
        bits <<= 6;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ControllerConfig {
        ControllerConfig {
            node_id: 1,
            num_partitions: 2,
            default_replication_factor: 1,
            producer_id_block_size: 1000,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_commit_and_survive_restart() {
        let dir = tempfile::tempdir().unwrap();
        let cluster_id;
        {
            let (h, _task) = start(dir.path(), cfg()).unwrap();
            cluster_id = h.image().cluster_id.clone();
            assert_eq!(cluster_id.len(), 22);
            h.register_broker(BrokerRecord {
                broker_id: 1,
                broker_epoch: 0,
                host: "127.0.0.1".into(),
                port: 1,
                rack: None,
                ..Default::default()
            })
            .await
            .unwrap();
            let r = h
                .create_topics(
                    vec![NewTopic {
                        name: "a".into(),
                        num_partitions: -1,
                        replication_factor: -1,
                        ..Default::default()
                    }],
                    false,
                )
                .await;
            assert!(r[0].is_ok());
            let r = h
                .create_topics(
                    vec![NewTopic {
                        name: "v".into(),
                        num_partitions: 1,
                        replication_factor: 1,
                        ..Default::default()
                    }],
                    true,
                )
                .await;
            assert!(r[0].is_ok());
            assert!(
                !h.image().topics.contains_key("v"),
                "validate_only must not create"
            );
            let (first, size) = h.allocate_producer_ids(1).await.unwrap();
            assert_eq!((first, size), (0, 1000));
        }
        let (h, _task) = start(dir.path(), cfg()).unwrap();
        let img = h.image();
        assert_eq!(img.cluster_id, cluster_id);
        assert_eq!(img.topics["a"].partitions.len(), 2);
        let (first, _) = h.allocate_producer_ids(1).await.unwrap();
        assert_eq!(first, 1000, "producer ids never repeat across restarts");
    }
}

//! The controller's decisions as pure functions of (image [+ explicit soft
//! state], one request or observation, `now_ms`) -> (records, result). No I/O,
//! no clocks, no randomness here: the event loop persists the records, replays
//! them into the image and only then answers. Randomness (topic ids, placement
//! start) and time are passed in.
//!
//! - `topics`: CreateTopics, DeleteTopics, CreatePartitions.
//! - `placement`: striped, rack-aware replica placement; manual assignment checks.
//! - `replication`: leader election and ISR changes (fencing, unfencing,
//!   controlled shutdown, ElectLeaders, AlterPartition).
//! - `cluster`: broker registration, heartbeats, session expiry.
//! - `configs`: AlterConfigs / IncrementalAlterConfigs.
//! - `producer_ids`: AllocateProducerIds.

pub mod cluster;
pub mod configs;
pub mod placement;
pub mod producer_ids;
pub mod replication;
pub mod topics;

use strand_protocol::ErrorCode;

pub use cluster::{
    fence_stale_brokers, heartbeat, register_broker, BrokerHeartbeats, BrokerRegistrationRequest,
    HeartbeatReply, HeartbeatRequest,
};
pub use configs::{alter_topic_configs, ConfigOp};
pub use producer_ids::allocate_producer_ids;
pub use replication::{
    alter_partition, elect_leaders, elect_preferred, AlterPartitionRequest, AlterPartitionState,
    ElectionResult, ElectionType,
};
pub use topics::{
    create_partitions, create_topic, delete_topic, validate_topic_name, CreatedTopic, NewTopic,
    MAX_TOPIC_NAME_LEN,
};

/// Controller settings that decisions depend on.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub node_id: i32,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    /// Producer ids handed to a broker per AllocateProducerIds.
    pub producer_id_block_size: i64,
    /// The largest replication factor accepted. The broker sets 1 until
    /// follower replication exists, so no topic claims replicas it lacks.
    pub max_replication_factor: usize,
}

/// Error codes travel between controllers as their wire numbers.
mod error_code_serde {
    use serde::{Deserialize, Deserializer, Serializer};
    use strand_protocol::ErrorCode;

    pub fn serialize<S: Serializer>(code: &ErrorCode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i16(code.code())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ErrorCode, D::Error> {
        let code = i16::deserialize(d)?;
        Ok(ErrorCode::try_from_code(code).unwrap_or(ErrorCode::UnknownServerError))
    }
}

/// Kafka's broker.session.timeout.ms default.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 9000;

/// An error for one item of a request, as Kafka reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApiError {
    #[serde(with = "error_code_serde")]
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

/// The most records one client operation may produce (Kafka's
/// `MAX_RECORDS_PER_USER_OP`): one Raft entry stays far below the RPC frame
/// limit, and a request's claimed partition count never drives an allocation.
pub const MAX_RECORDS_PER_USER_OP: usize = 10_000;

/// What Kafka answers an operation past [`MAX_RECORDS_PER_USER_OP`].
pub fn excessive_batch() -> ApiError {
    ApiError::new(
        ErrorCode::PolicyViolation,
        "Unable to perform excessively large batch operation.",
    )
}

/// Checked before anything is built for `count` more records on top of
/// `so_far`.
pub fn check_record_budget(so_far: usize, count: usize) -> Result<(), ApiError> {
    match so_far.checked_add(count) {
        Some(total) if total <= MAX_RECORDS_PER_USER_OP => Ok(()),
        _ => Err(excessive_batch()),
    }
}

/// Helpers shared by the managers' unit tests.
#[cfg(test)]
pub(crate) mod testutil {
    use super::ControllerConfig;
    use crate::image::MetadataImage;
    use crate::records::{BrokerRecord, MetadataRecord, PartitionRecord};
    use uuid::Uuid;

    pub fn cfg() -> ControllerConfig {
        ControllerConfig {
            node_id: 1,
            num_partitions: 4,
            default_replication_factor: 1,
            producer_id_block_size: 1000,
            max_replication_factor: usize::MAX,
        }
    }

    pub fn broker(id: i32, rack: Option<&str>, fenced: bool) -> BrokerRecord {
        BrokerRecord {
            broker_id: id,
            broker_epoch: 100 + id as i64,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: rack.map(String::from),
            incarnation_id: Uuid::from_u128(id as u128),
            fenced,
            in_controlled_shutdown: false,
        }
    }

    /// An image with unfenced, rackless brokers.
    pub fn image_with_brokers(ids: &[i32]) -> MetadataImage {
        let mut img = MetadataImage::default();
        for id in ids {
            img.apply(&MetadataRecord::RegisterBroker(broker(*id, None, false)));
        }
        img
    }

    pub fn apply_all(img: &mut MetadataImage, recs: &[MetadataRecord]) {
        for r in recs {
            img.apply(r);
        }
    }

    pub fn topic_id(name: &str) -> Uuid {
        Uuid::from_u128(name.bytes().fold(7u128, |h, b| h * 31 + b as u128))
    }

    /// Adds topic `name` with the given (replicas, isr, leader) partitions, all epochs 0.
    pub fn add_topic(img: &mut MetadataImage, name: &str, parts: &[(&[i32], &[i32], i32)]) {
        let id = topic_id(name);
        img.apply(&MetadataRecord::Topic {
            name: name.into(),
            topic_id: id,
        });
        for (i, (replicas, isr, leader)) in parts.iter().enumerate() {
            img.apply(&MetadataRecord::Partition(PartitionRecord {
                topic_id: id,
                partition: i as i32,
                replicas: replicas.to_vec(),
                isr: isr.to_vec(),
                leader: *leader,
                leader_epoch: 0,
                partition_epoch: 0,
            }));
        }
    }
}

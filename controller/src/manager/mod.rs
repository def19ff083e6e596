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
//! - `reassignment`: AlterPartitionReassignments, ListPartitionReassignments.
//! - `cluster`: broker registration, heartbeats, session expiry.
//! - `configs`: AlterConfigs / IncrementalAlterConfigs (topics and brokers).
//! - `features`: UpdateFeatures.
//! - `producer_ids`: AllocateProducerIds.
//! - `scram`: AlterUserScramCredentials.
//! - `acls`: CreateAcls, DeleteAcls.
//! - `quotas`: AlterClientQuotas.

pub mod acls;
pub mod cluster;
mod common;
pub mod configs;
pub mod features;
pub mod placement;
pub mod producer_ids;
pub mod quotas;
pub mod reassignment;
pub mod replication;
pub mod scram;
pub mod topics;

pub use cluster::{
    fence_stale_brokers, heartbeat, register_broker, BrokerHeartbeats, BrokerRegistrationRequest,
    HeartbeatReply, HeartbeatRequest,
};
pub use configs::{alter_topic_configs, ConfigOp};
pub use producer_ids::allocate_producer_ids;
pub use quotas::alter_client_quotas;
pub use replication::{
    alter_partition, elect_leaders, elect_preferred, AlterPartitionRequest, AlterPartitionState,
    ElectionResult, ElectionType,
};
pub use scram::alter_user_scram_credentials;
pub use strand_metadata::configs::GroupBounds;
pub use topics::{
    create_partitions, create_topic, delete_topic, validate_topic_name, CreatedTopic, NewTopic,
};

pub use common::{
    check_record_budget, excessive_batch, ApiError, ControllerConfig, DEFAULT_SESSION_TIMEOUT_MS,
    MAX_RECORDS_PER_USER_OP,
};

/// Helpers shared by the managers' unit tests.
#[cfg(test)]
pub(crate) mod testutil {
    use super::ControllerConfig;
    use strand_metadata::image::MetadataImage;
    use strand_metadata::records::{BrokerRecord, MetadataRecord, PartitionRecord};
    use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch};
    use uuid::Uuid;

    pub fn b(id: i32) -> BrokerId {
        BrokerId::new(id)
    }

    pub fn ids(v: &[i32]) -> Vec<BrokerId> {
        v.iter().copied().map(b).collect()
    }

    pub fn be(epoch: i64) -> BrokerEpoch {
        BrokerEpoch::new(epoch)
    }

    /// An id or epoch as a request read from the controller RPC may carry
    /// it: any integer, a negative one too (serde does not check the sign).
    pub fn wire<T: serde::de::DeserializeOwned>(v: i64) -> T {
        serde_json::from_str(&v.to_string()).expect("an integer reads as an id or epoch")
    }

    pub fn cfg() -> ControllerConfig {
        ControllerConfig {
            node_id: b(1),
            num_partitions: 4,
            default_replication_factor: 1,
            producer_id_block_size: 1000,
            max_replication_factor: usize::MAX,
            leader_balance_interval_ms: None,
            unclean_leader_election_enable: false,
            unclean_election_interval_ms: None,
            group_bounds: Default::default(),
        }
    }

    pub fn broker(id: i32, rack: Option<&str>, fenced: bool) -> BrokerRecord {
        BrokerRecord {
            broker_id: b(id),
            broker_epoch: be(100 + id as i64),
            host: "127.0.0.1".into(),
            port: 9092,
            rack: rack.map(String::from),
            incarnation_id: Uuid::from_u128(id as u128),
            fenced,
            in_controlled_shutdown: false,
            endpoints: vec![],
            log_dirs: vec![],
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

    /// Adds topic `name` with the given (replicas, isr, leader) partitions, all
    /// epochs 0; a leader of -1 is none, as the wire writes it.
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
                replicas: ids(replicas),
                isr: ids(isr),
                leader: BrokerId::from_wire(*leader),
                leader_epoch: LeaderEpoch::ZERO,
                partition_epoch: PartitionEpoch::ZERO,
                adding_replicas: vec![],
                removing_replicas: vec![],
                directories: vec![],
            }));
        }
    }
}

//! Metadata records: the only way controller state changes. Each event handler
//! returns records; the event loop persists them to the metadata log and then
//! replays them into the image. Start-up replays the whole log.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Kinds of config resources, with Kafka's wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConfigResource {
    Topic,
    Broker,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataRecord {
    /// First record of a freshly formatted metadata log.
    ClusterFormatted {
        cluster_id: String,
    },
    RegisterBroker(BrokerRecord),
    Topic {
        name: String,
        topic_id: Uuid,
    },
    Partition(PartitionRecord),
    /// Removes the topic, its partitions and its configs.
    RemoveTopic {
        topic_id: Uuid,
    },
    /// Sets (Some) or deletes (None) one config of a resource.
    Config {
        resource: ConfigResource,
        resource_name: String,
        name: String,
        value: Option<String>,
    },
    /// The next producer id the controller will hand out; a block ends at this id.
    ProducerIds {
        broker_id: i32,
        next_producer_id: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub topic_id: Uuid,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

/// Topic config overrides, name -> value.
pub type ConfigMap = BTreeMap<String, String>;

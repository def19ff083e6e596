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
    /// A broker (re-)registration: replaces any previous registration of
    /// that id. Brokers register fenced and are unfenced by a heartbeat.
    RegisterBroker(BrokerRecord),
    /// The broker may no longer lead or be in an ISR. Ignored unless
    /// `broker_epoch` is the broker's current registration epoch.
    FenceBroker {
        broker_id: i32,
        broker_epoch: i64,
    },
    /// The broker caught up with the metadata log and may lead again; also
    /// ends any controlled shutdown. Ignored for a stale `broker_epoch`.
    UnfenceBroker {
        broker_id: i32,
        broker_epoch: i64,
    },
    /// The broker asked to shut down: it leads nothing and joins no ISR from
    /// here on. Ignored for a stale `broker_epoch`.
    BrokerControlledShutdown {
        broker_id: i32,
        broker_epoch: i64,
    },
    Topic {
        name: String,
        topic_id: Uuid,
    },
    /// A new partition.
    Partition(PartitionRecord),
    /// The full new state of an existing partition (leader, ISR, epochs).
    /// Every change has `partition_epoch` one above the current one, and
    /// `leader_epoch` one above when the leader changes. Ignored when the
    /// partition does not exist or the epoch does not move forward.
    PartitionChange(PartitionRecord),
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

/// A broker's registration. `broker_epoch` is the position (0-based) of the
/// registration record in the metadata log, so it grows with every
/// registration and a broker has seen its own registration once it has
/// applied `broker_epoch + 1` records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Random per broker process start; tells a restart from a retry.
    #[serde(default)]
    pub incarnation_id: Uuid,
    /// A fenced broker leads nothing and is in no ISR (except as the last
    /// member of an offline partition's ISR). New registrations are fenced.
    #[serde(default)]
    pub fenced: bool,
    #[serde(default)]
    pub in_controlled_shutdown: bool,
}

impl BrokerRecord {
    /// May lead and join ISRs: unfenced and not shutting down.
    pub fn is_active(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }
}

/// No leader: the partition is offline.
pub const NO_LEADER: i32 = -1;

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

//! Metadata records: the only way controller state changes. Each event handler
//! returns records; the event loop persists them to the metadata log and then
//! replays them into the image. Start-up replays the whole log.
//!
//! Records are serialised with serde (JSON) into the metadata log and its
//! snapshots, so their bytes are a stored format: ids and epochs are the
//! domain newtypes, serialised as the integers they replaced
//! (`strand_types`' `serde` feature), and a partition's leader as
//! [`leader_wire`] writes it (-1 for none). `tests/serialised_format.rs`
//! pins the bytes.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch, ProducerId};
use uuid::Uuid;

/// Kinds of config resources, with Kafka's wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConfigResource {
    Topic,
    Broker,
    /// A consumer group's own settings (KIP-848's GROUP resource, 32 on
    /// the wire), by group id; the group need not exist.
    Group,
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
        broker_id: BrokerId,
        broker_epoch: BrokerEpoch,
    },
    /// The broker caught up with the metadata log and may lead again; also
    /// ends any controlled shutdown. Ignored for a stale `broker_epoch`.
    UnfenceBroker {
        broker_id: BrokerId,
        broker_epoch: BrokerEpoch,
    },
    /// The broker asked to shut down: it leads nothing and joins no ISR from
    /// here on. Ignored for a stale `broker_epoch`.
    BrokerControlledShutdown {
        broker_id: BrokerId,
        broker_epoch: BrokerEpoch,
    },
    /// The broker's registration is removed (UnregisterBroker): it is no
    /// longer part of the cluster. Ignored for a stale `broker_epoch`.
    UnregisterBroker {
        broker_id: BrokerId,
        broker_epoch: BrokerEpoch,
    },
    /// The broker's online log directories changed (a directory failed:
    /// Kafka's BrokerRegistrationChangeRecord with LogDirs). Ignored for a
    /// stale `broker_epoch`.
    BrokerLogDirs {
        broker_id: BrokerId,
        broker_epoch: BrokerEpoch,
        log_dirs: Vec<Uuid>,
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
        broker_id: BrokerId,
        next_producer_id: ProducerId,
    },
    /// Sets a user's SCRAM credential for one mechanism (KIP-554's
    /// UserScramCredentialRecord): replaces any previous one.
    UserScramCredential(ScramCredentialRecord),
    /// An ACL binding (Kafka's AccessControlEntryRecord).
    AccessControlEntry(AclRecord),
    /// Removes the ACL binding of this id.
    RemoveAccessControlEntry {
        id: Uuid,
    },
    /// Removes a user's SCRAM credential for one mechanism.
    RemoveUserScramCredential {
        name: String,
        /// Kafka's ScramMechanism code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
        mechanism: i8,
    },
    /// A feature's finalized level (Kafka's FeatureLevelRecord); level 0
    /// removes the feature from the finalized set.
    FeatureLevel {
        name: String,
        level: i16,
    },
    /// Sets (Some) or removes (None) one quota of a client quota entity
    /// (Kafka's ClientQuotaRecord).
    ClientQuota {
        entity: crate::quotas::QuotaEntity,
        key: String,
        value: Option<crate::quotas::QuotaValue>,
    },
}

/// One ACL binding, with Kafka's wire codes (resource type, pattern type,
/// operation, permission).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclRecord {
    pub id: Uuid,
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

impl AclRecord {
    /// The same binding (whatever its id).
    pub fn same_binding(&self, other: &AclRecord) -> bool {
        (
            self.resource_type,
            &self.resource_name,
            self.pattern_type,
            &self.principal,
            &self.host,
            self.operation,
            self.permission_type,
        ) == (
            other.resource_type,
            &other.resource_name,
            other.pattern_type,
            &other.principal,
            &other.host,
            other.operation,
            other.permission_type,
        )
    }
}

/// A user's SCRAM credential (never the password: the salted keys, RFC 5802).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentialRecord {
    pub name: String,
    /// Kafka's ScramMechanism code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
    pub mechanism: i8,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// A broker's registration. `broker_epoch` is the position (0-based) of the
/// registration record in the metadata log, so it grows with every
/// registration and a broker has seen its own registration once it has
/// applied `broker_epoch + 1` records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    pub broker_id: BrokerId,
    pub broker_epoch: BrokerEpoch,
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
    /// Every advertised client listener (`advertised.listeners`, less the
    /// controller's): a client is told the address of the listener it
    /// connected on. `host`/`port` are the inter-broker listener's.
    /// Empty in records written before listeners were registered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<BrokerEndpoint>,
    /// The ids of its online log directories (KIP-858): those it registered
    /// with, less any it reported failed since. Empty: a broker that names
    /// none, every replica of which counts as online.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_dirs: Vec<Uuid>,
}

/// One advertised listener of a broker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerEndpoint {
    /// The listener's name (`PLAINTEXT`, `EXTERNAL`, ...).
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl BrokerRecord {
    /// Where a client connected on listener `listener` reaches this broker:
    /// that listener's advertised address; the inter-broker one when the
    /// broker registered none of that name (an older record, or listeners
    /// that differ between brokers).
    pub fn endpoint(&self, listener: &str) -> (&str, u16) {
        self.endpoints
            .iter()
            .find(|e| e.name == listener)
            .map_or((self.host.as_str(), self.port), |e| {
                (e.host.as_str(), e.port)
            })
    }

    /// May lead and join ISRs: unfenced and not shutting down.
    pub fn is_active(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }

    /// Whether a replica in log directory `dir` is online (Kafka's
    /// `hasOnlineDir`): an unassigned directory counts as online, as does
    /// any when the broker names none.
    pub fn has_online_dir(&self, dir: Uuid) -> bool {
        dir.is_nil() || self.log_dirs.is_empty() || self.log_dirs.contains(&dir)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub topic_id: Uuid,
    /// The partition's index within its topic.
    pub partition: i32,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    /// None: no leader, the partition is offline (stored as -1).
    #[serde(with = "leader_wire")]
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    /// Under reassignment (KIP-455): the target's replicas not in the
    /// original assignment. They are in `replicas` and fetch, but lead
    /// nothing until the reassignment completes. Empty otherwise (and then
    /// left out of the serialised record, whose bytes stay as before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<BrokerId>,
    /// Under reassignment: the original replicas the target drops. They
    /// stay in `replicas` (after the target's) until it completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<BrokerId>,
    /// The log directory of each replica, in `replicas` order (KIP-858),
    /// as the replica's broker reported it; the nil id is Kafka's
    /// UNASSIGNED. Empty when none is known (and then left out of the
    /// serialised record).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<Uuid>,
}

impl PartitionRecord {
    /// The log directory replica `r` is in; nil (unassigned) when unknown.
    pub fn directory_of(&self, r: BrokerId) -> Uuid {
        self.replicas
            .iter()
            .position(|&x| x == r)
            .and_then(|i| self.directories.get(i).copied())
            .unwrap_or(Uuid::nil())
    }

    /// The directories for `replicas` (a new assignment): each replica
    /// that stays keeps its directory, a new one is unassigned; empty when
    /// none is assigned.
    pub fn directories_for(&self, replicas: &[BrokerId]) -> Vec<Uuid> {
        let dirs: Vec<Uuid> = replicas.iter().map(|&r| self.directory_of(r)).collect();
        if dirs.iter().all(Uuid::is_nil) {
            Vec::new()
        } else {
            dirs
        }
    }

    /// A reassignment is in flight.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replicas the partition had before its reassignment began (all
    /// its replicas when none is in flight), in assignment order.
    pub fn original_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.adding_replicas.contains(r))
            .collect()
    }

    /// The replicas the partition will have when its reassignment
    /// completes (all its replicas when none is in flight).
    pub fn target_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
    }
}

/// A partition's leader in serialised records and answers: the broker id,
/// or -1 for none, as the field was written when it was an integer. Use as
/// `#[serde(with = "leader_wire")]` on an `Option<BrokerId>`.
pub mod leader_wire {
    use serde::{Deserialize, Deserializer, Serializer};
    use strand_types::BrokerId;

    pub fn serialize<S: Serializer>(leader: &Option<BrokerId>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i32(BrokerId::to_wire(*leader))
    }

    /// Any negative id is none, as the wire reads it.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BrokerId>, D::Error> {
        Ok(BrokerId::from_wire(i32::deserialize(d)?))
    }
}

/// Topic config overrides, name -> value.
pub type ConfigMap = BTreeMap<String, String>;

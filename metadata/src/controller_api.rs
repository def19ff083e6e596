//! The controller's API as the broker sees it: the requests a broker (or
//! an admin handler) sends to the active controller and their answers,
//! plain data that crosses the controller RPC as JSON, and
//! [`ControllerClient`], the typed calls over any [`ControllerCall`]. The
//! controller crate implements `ControllerCall` (its handle forwards to the
//! active controller); the broker depends on this module only, so it links
//! neither openraft nor RocksDB.
//!
//! Ids and epochs are the domain newtypes, serialised as the integers they
//! replaced (the controller RPC's JSON is unchanged; a leader is -1 for
//! none). The replica ids of a manual assignment (CreateTopics,
//! CreatePartitions) stay the request's wire integers: the controller checks
//! them against the registered brokers, a negative one included, in Kafka's
//! order of checks, and turns them into `BrokerId`s there.

use crate::quotas::{QuotaEntity, QuotaOp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use strand_protocol::ErrorCode;
use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch, ProducerId};
use uuid::Uuid;

use crate::image::MetadataImage;
use crate::records::{
    leader_wire, AclRecord, MetadataRecord, PartitionRecord, ScramCredentialRecord,
};

/// A controller's node id (`node.id` of a controller, the Raft node id).
pub type NodeId = u64;

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

/// An error for one item of a request, as Kafka reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

    /// NOT_CONTROLLER: no active controller could be reached in time.
    pub fn not_controller() -> Self {
        ApiError::new(
            ErrorCode::NotController,
            "no active controller could be reached",
        )
    }
}

/// A CreateTopics item.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewTopic {
    pub name: String,
    /// -1 = num.partitions
    pub num_partitions: i32,
    /// -1 = default.replication.factor
    pub replication_factor: i16,
    /// Explicit (partition, replicas); when given, the counts above must be
    /// -1. The replicas are the request's broker ids, not yet checked (any
    /// integer, as the wire allows).
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: Vec<(String, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedTopic {
    pub name: String,
    pub topic_id: Uuid,
    pub num_partitions: i32,
    pub replication_factor: i16,
}

/// How AlterConfigs changes one config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigOp {
    Set(String),
    Delete,
    Append(String),
    Subtract(String),
}

/// BrokerRegistration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistrationRequest {
    pub broker_id: BrokerId,
    pub incarnation_id: Uuid,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Every advertised client listener (see `BrokerRecord::endpoints`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<crate::records::BrokerEndpoint>,
    /// The cluster the broker's data belongs to (its meta.properties):
    /// a broker of another cluster is refused. Empty: not checked (a
    /// broker that sends none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_id: String,
    /// The ids of the log directories it loaded (KIP-858): a replica
    /// assigned to any other directory of this broker is offline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_dirs: Vec<Uuid>,
}

/// BrokerHeartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatRequest {
    pub broker_id: BrokerId,
    pub broker_epoch: BrokerEpoch,
    /// Records of the metadata log the broker has applied.
    pub current_metadata_offset: u64,
    pub want_fence: bool,
    pub want_shutdown: bool,
    /// Log directories that failed since registration (KIP-858's
    /// OfflineLogDirs): their replicas leave ISRs and leaderships.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offline_log_dirs: Vec<Uuid>,
}

/// One replica's log directory (AssignReplicasToDirs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirAssignment {
    pub topic_id: Uuid,
    pub partition: i32,
    pub directory: Uuid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HeartbeatReply {
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub in_controlled_shutdown: bool,
    pub should_shutdown: bool,
    /// A write lease for an active broker (unfenced, or in controlled
    /// shutdown while it still leads); none for a fenced one.
    #[serde(default)]
    pub lease: Option<LeaseGrant>,
}

/// A write lease granted in a heartbeat answer (`strand_replication::lease`
/// says what the broker does with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    pub broker_epoch: BrokerEpoch,
    /// Grows with every grant, across controller failovers.
    pub generation: u64,
    /// How long the lease runs from the heartbeat's send time.
    pub duration_ms: u64,
    /// Every broker whose lease may still run has applied this many
    /// metadata records.
    pub safe_metadata_offset: u64,
}

/// ElectLeaders' election types, with Kafka's wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    Preferred = 0,
    Unclean = 1,
}

impl TryFrom<u8> for ElectionType {
    type Error = ApiError;

    /// From Kafka's wire value; anything else is INVALID_REQUEST.
    fn try_from(v: u8) -> Result<Self, ApiError> {
        match v {
            0 => Ok(ElectionType::Preferred),
            1 => Ok(ElectionType::Unclean),
            _ => Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("Unknown election type {v}"),
            )),
        }
    }
}

/// One ElectLeaders item's outcome.
pub type ElectionResult = ((String, i32), Result<(), ApiError>);

/// One partition of an AlterPartition request: the leader `broker_id`
/// (registered as `broker_epoch`) asks for `new_isr`, naming the epochs it knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterPartitionRequest {
    pub broker_id: BrokerId,
    pub broker_epoch: BrokerEpoch,
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    pub new_isr: Vec<BrokerId>,
    /// The broker epoch each member of `new_isr` fetched at, as the leader
    /// saw it (Kafka's NewIsrWithEpochs, KIP-903). A member being added must
    /// be at its registered epoch: one that restarted since that fetch (and
    /// may have lost what it had) does not join on its old incarnation's
    /// word.
    #[serde(default)]
    pub broker_epochs: BTreeMap<BrokerId, BrokerEpoch>,
}

/// The partition's state after an AlterPartition (AlterPartitionResponse's
/// per-partition fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterPartitionState {
    /// None: no leader (serialised as -1).
    #[serde(with = "leader_wire")]
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    pub isr: Vec<BrokerId>,
}

impl From<&PartitionRecord> for AlterPartitionState {
    fn from(p: &PartitionRecord) -> Self {
        AlterPartitionState {
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr: p.isr.clone(),
        }
    }
}

/// A reassignment in flight (ListPartitionReassignments' per-partition
/// answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OngoingReassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<BrokerId>,
    pub adding: Vec<BrokerId>,
    pub removing: Vec<BrokerId>,
}

/// AlterPartitionReassignments for one partition: topic, partition, and
/// the target replicas as the wire carries them (None cancels).
pub type ReassignmentTarget = (String, i32, Option<Vec<i32>>);

/// CreatePartitions for one topic: name, new total count, explicit
/// assignments (the request's broker ids, not yet checked).
pub type PartitionGrowth = (String, i32, Option<Vec<Vec<i32>>>);
/// AlterConfigs for one topic: name and (config, operation) pairs.
pub type TopicConfigOps = (String, Vec<(String, ConfigOp)>);

/// One change to a user's SCRAM credentials (AlterUserScramCredentials).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScramOp {
    /// Removes the credential of this mechanism (Kafka's code).
    Delete { mechanism: i8 },
    /// Sets the credential (its keys already derived by the broker).
    Upsert(ScramCredentialRecord),
}

/// A user's changes, all applied or none.
pub type ScramUserOps = (String, Vec<ScramOp>);

/// A request to the controller, local or forwarded over the controller RPC.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ControllerRequest {
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
    },
    DeleteTopics {
        names: Vec<String>,
    },
    CreatePartitions {
        topics: Vec<PartitionGrowth>,
        validate_only: bool,
    },
    AlterTopicConfigs {
        topics: Vec<TopicConfigOps>,
        incremental: bool,
        validate_only: bool,
    },
    /// AlterConfigs / IncrementalAlterConfigs on BROKER resources: (broker
    /// id or "" for the cluster default, operations).
    AlterBrokerConfigs {
        brokers: Vec<TopicConfigOps>,
        incremental: bool,
        validate_only: bool,
    },
    /// AlterConfigs / IncrementalAlterConfigs on GROUP resources: (group
    /// id, operations).
    AlterGroupConfigs {
        groups: Vec<TopicConfigOps>,
        incremental: bool,
        validate_only: bool,
    },
    /// `broker_epoch` None skips the registration check (in-process callers).
    AllocateProducerIds {
        broker_id: BrokerId,
        broker_epoch: Option<BrokerEpoch>,
    },
    RegisterBroker(BrokerRegistrationRequest),
    Heartbeat(HeartbeatRequest),
    /// A partition leader's ISR change.
    AlterPartition(AlterPartitionRequest),
    /// `election_type` is Kafka's wire value (0 preferred, 1 unclean);
    /// `partitions` None means every partition.
    ElectLeaders {
        election_type: u8,
        partitions: Option<Vec<(String, i32)>>,
    },
    /// AlterPartitionReassignments: one result per item, in order.
    AlterPartitionReassignments {
        targets: Vec<ReassignmentTarget>,
    },
    /// ListPartitionReassignments: the reassignments in flight among
    /// these partitions (all when None).
    ListPartitionReassignments {
        partitions: Option<Vec<(String, Vec<i32>)>>,
    },
    /// UnregisterBroker.
    UnregisterBroker {
        broker_id: BrokerId,
    },
    /// AssignReplicasToDirs (KIP-858): where the broker keeps its replicas;
    /// one result per assignment, in order.
    AssignReplicasToDirs {
        broker_id: BrokerId,
        broker_epoch: BrokerEpoch,
        assignments: Vec<DirAssignment>,
    },
    /// UpdateFeatures: every update applied, or none.
    UpdateFeatures {
        updates: Vec<(String, i16, crate::features::UpgradeType)>,
        validate_only: bool,
    },
    /// Served by any controller from its committed image: how brokers that
    /// are not controllers follow the metadata log.
    FetchImage {
        known_applied: u64,
        max_wait_ms: u64,
    },
    /// The active controller's view of the quorum (DescribeQuorum).
    DescribeQuorum,
    /// AlterUserScramCredentials, per user.
    AlterUserScramCredentials {
        users: Vec<ScramUserOps>,
    },
    /// CreateAcls: each binding (its id given by the controller) is added
    /// unless the same binding exists.
    CreateAcls {
        bindings: Vec<AclRecord>,
    },
    /// DeleteAcls: the bindings of these ids that still exist are removed
    /// (the broker matched the request's filters against its image).
    RemoveAcls {
        ids: Vec<Uuid>,
    },
    /// AlterClientQuotas: each entity's changes, checked and applied together.
    AlterClientQuotas {
        entries: Vec<(QuotaEntity, Vec<QuotaOp>)>,
        validate_only: bool,
    },
}

/// The metadata quorum as the active controller sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumInfo {
    pub leader_id: NodeId,
    /// The Raft term: Kafka's leader epoch of the metadata partition.
    pub leader_epoch: u64,
    /// The committed (applied) log index.
    pub high_watermark: u64,
    /// Voters with the last log index the leader knows they hold.
    pub voters: Vec<(NodeId, Option<u64>)>,
    /// Each voter's controller address (`host:port`), as the quorum's
    /// membership records it.
    #[serde(default)]
    pub voter_addrs: Vec<(NodeId, String)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ControllerReply {
    CreateTopics(Vec<Result<CreatedTopic, ApiError>>),
    DeleteTopics(Vec<Result<Uuid, ApiError>>),
    Each(Vec<Result<(), ApiError>>),
    /// The block handed out: (first id, number of ids).
    ProducerIds(Result<(ProducerId, i64), ApiError>),
    /// The broker epoch of the registration.
    Registered(Result<BrokerEpoch, ApiError>),
    Heartbeat(Result<HeartbeatReply, ApiError>),
    AlterPartition(Result<AlterPartitionState, ApiError>),
    ElectLeaders(Vec<ElectionResult>),
    Reassignments(Vec<OngoingReassignment>),
    /// The image when it is newer than the caller's, else None after the wait.
    Image(Option<Box<MetadataImage>>),
    /// The records committed since the caller's image position (a delta).
    Records(Vec<MetadataRecord>),
    Quorum(QuorumInfo),
    /// This node is not the active controller; the leader if known.
    NotController {
        leader_id: Option<NodeId>,
    },
}

/// Where requests to the active controller go: the controller's handle
/// (local, or forwarded over its RPC) in the binary, a fake in tests.
pub trait ControllerCall: Send + Sync {
    /// Sends `request` to the active controller and returns its answer;
    /// NOT_CONTROLLER when none can be reached in time.
    fn call(
        &self,
        request: ControllerRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ControllerReply, ApiError>> + Send + '_>>;
}

/// Typed calls to the active controller.
#[derive(Clone)]
pub struct ControllerClient {
    channel: Arc<dyn ControllerCall>,
}

impl ControllerClient {
    pub fn new(channel: Arc<dyn ControllerCall>) -> Self {
        ControllerClient { channel }
    }

    /// The untyped call.
    pub async fn call(&self, request: ControllerRequest) -> Result<ControllerReply, ApiError> {
        self.channel.call(request).await
    }

    pub async fn create_topics(
        &self,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<Result<CreatedTopic, ApiError>> {
        let n = topics.len();
        match self
            .call(ControllerRequest::CreateTopics {
                topics,
                validate_only,
            })
            .await
        {
            Ok(ControllerReply::CreateTopics(r)) => r,
            Ok(_) => vec![Err(ApiError::not_controller()); n],
            Err(e) => vec![Err(e); n],
        }
    }

    pub async fn delete_topics(&self, names: Vec<String>) -> Vec<Result<Uuid, ApiError>> {
        let n = names.len();
        match self.call(ControllerRequest::DeleteTopics { names }).await {
            Ok(ControllerReply::DeleteTopics(r)) => r,
            Ok(_) => vec![Err(ApiError::not_controller()); n],
            Err(e) => vec![Err(e); n],
        }
    }

    async fn call_each(&self, request: ControllerRequest, n: usize) -> Vec<Result<(), ApiError>> {
        match self.call(request).await {
            Ok(ControllerReply::Each(r)) => r,
            Ok(_) => vec![Err(ApiError::not_controller()); n],
            Err(e) => vec![Err(e); n],
        }
    }

    pub async fn create_partitions(
        &self,
        topics: Vec<PartitionGrowth>,
        validate_only: bool,
    ) -> Vec<Result<(), ApiError>> {
        let n = topics.len();
        self.call_each(
            ControllerRequest::CreatePartitions {
                topics,
                validate_only,
            },
            n,
        )
        .await
    }

    pub async fn alter_topic_configs(
        &self,
        topics: Vec<TopicConfigOps>,
        incremental: bool,
        validate_only: bool,
    ) -> Vec<Result<(), ApiError>> {
        let n = topics.len();
        self.call_each(
            ControllerRequest::AlterTopicConfigs {
                topics,
                incremental,
                validate_only,
            },
            n,
        )
        .await
    }

    /// AlterConfigs on BROKER resources: one result per resource, in order.
    pub async fn alter_broker_configs(
        &self,
        brokers: Vec<TopicConfigOps>,
        incremental: bool,
        validate_only: bool,
    ) -> Vec<Result<(), ApiError>> {
        let n = brokers.len();
        if n == 0 {
            return vec![];
        }
        self.call_each(
            ControllerRequest::AlterBrokerConfigs {
                brokers,
                incremental,
                validate_only,
            },
            n,
        )
        .await
    }

    /// AlterConfigs on GROUP resources: one result per resource, in order.
    pub async fn alter_group_configs(
        &self,
        groups: Vec<TopicConfigOps>,
        incremental: bool,
        validate_only: bool,
    ) -> Vec<Result<(), ApiError>> {
        let n = groups.len();
        if n == 0 {
            return vec![];
        }
        self.call_each(
            ControllerRequest::AlterGroupConfigs {
                groups,
                incremental,
                validate_only,
            },
            n,
        )
        .await
    }

    /// CreateAcls: one result per binding, in order.
    pub async fn create_acls(&self, bindings: Vec<AclRecord>) -> Vec<Result<(), ApiError>> {
        let n = bindings.len();
        self.call_each(ControllerRequest::CreateAcls { bindings }, n)
            .await
    }

    /// Removes the ACL bindings of these ids (those that still exist).
    pub async fn remove_acls(&self, ids: Vec<Uuid>) -> Result<(), ApiError> {
        self.call_each(ControllerRequest::RemoveAcls { ids }, 1)
            .await
            .pop()
            .unwrap_or_else(|| Err(ApiError::not_controller()))
    }

    /// AlterClientQuotas: one result per entity, in order.
    pub async fn alter_client_quotas(
        &self,
        entries: Vec<(QuotaEntity, Vec<QuotaOp>)>,
        validate_only: bool,
    ) -> Vec<Result<(), ApiError>> {
        let n = entries.len();
        self.call_each(
            ControllerRequest::AlterClientQuotas {
                entries,
                validate_only,
            },
            n,
        )
        .await
    }

    /// AlterUserScramCredentials: one result per user, in order.
    pub async fn alter_user_scram_credentials(
        &self,
        users: Vec<ScramUserOps>,
    ) -> Vec<Result<(), ApiError>> {
        let n = users.len();
        self.call_each(ControllerRequest::AlterUserScramCredentials { users }, n)
            .await
    }

    pub async fn allocate_producer_ids(
        &self,
        broker_id: BrokerId,
        broker_epoch: Option<BrokerEpoch>,
    ) -> Result<(ProducerId, i64), ApiError> {
        match self
            .call(ControllerRequest::AllocateProducerIds {
                broker_id,
                broker_epoch,
            })
            .await?
        {
            ControllerReply::ProducerIds(r) => r,
            _ => Err(ApiError::not_controller()),
        }
    }

    pub async fn register_broker(
        &self,
        req: BrokerRegistrationRequest,
    ) -> Result<BrokerEpoch, ApiError> {
        match self.call(ControllerRequest::RegisterBroker(req)).await? {
            ControllerReply::Registered(r) => r,
            _ => Err(ApiError::not_controller()),
        }
    }

    pub async fn describe_quorum(&self) -> Result<QuorumInfo, ApiError> {
        match self.call(ControllerRequest::DescribeQuorum).await? {
            ControllerReply::Quorum(q) => Ok(q),
            _ => Err(ApiError::not_controller()),
        }
    }

    pub async fn heartbeat(&self, req: HeartbeatRequest) -> Result<HeartbeatReply, ApiError> {
        match self.call(ControllerRequest::Heartbeat(req)).await? {
            ControllerReply::Heartbeat(r) => r,
            _ => Err(ApiError::not_controller()),
        }
    }

    /// AlterPartition for one partition: the state after the change (or the
    /// current one when nothing changes).
    pub async fn alter_partition(
        &self,
        req: AlterPartitionRequest,
    ) -> Result<AlterPartitionState, ApiError> {
        match self.call(ControllerRequest::AlterPartition(req)).await? {
            ControllerReply::AlterPartition(r) => r,
            _ => Err(ApiError::not_controller()),
        }
    }

    /// AlterPartitionReassignments: one result per target, in order.
    pub async fn alter_partition_reassignments(
        &self,
        targets: Vec<ReassignmentTarget>,
    ) -> Vec<Result<(), ApiError>> {
        let n = targets.len();
        self.call_each(
            ControllerRequest::AlterPartitionReassignments { targets },
            n,
        )
        .await
    }

    /// ListPartitionReassignments, answered from the active controller's image.
    pub async fn list_partition_reassignments(
        &self,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<OngoingReassignment>, ApiError> {
        match self
            .call(ControllerRequest::ListPartitionReassignments { partitions })
            .await?
        {
            ControllerReply::Reassignments(r) => Ok(r),
            _ => Err(ApiError::not_controller()),
        }
    }

    /// UpdateFeatures: one result for the whole request.
    pub async fn update_features(
        &self,
        updates: Vec<(String, i16, crate::features::UpgradeType)>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.call_each(
            ControllerRequest::UpdateFeatures {
                updates,
                validate_only,
            },
            1,
        )
        .await
        .pop()
        .unwrap_or_else(|| Err(ApiError::not_controller()))
    }

    /// AssignReplicasToDirs: one result per assignment, in order.
    pub async fn assign_replicas_to_dirs(
        &self,
        broker_id: BrokerId,
        broker_epoch: BrokerEpoch,
        assignments: Vec<DirAssignment>,
    ) -> Vec<Result<(), ApiError>> {
        let n = assignments.len();
        self.call_each(
            ControllerRequest::AssignReplicasToDirs {
                broker_id,
                broker_epoch,
                assignments,
            },
            n,
        )
        .await
    }

    /// UnregisterBroker.
    pub async fn unregister_broker(&self, broker_id: BrokerId) -> Result<(), ApiError> {
        self.call_each(ControllerRequest::UnregisterBroker { broker_id }, 1)
            .await
            .pop()
            .unwrap_or_else(|| Err(ApiError::not_controller()))
    }

    /// ElectLeaders; `partitions` None means every partition, and then only
    /// the partitions that needed an election are in the results.
    pub async fn elect_leaders(
        &self,
        election_type: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<ElectionResult>, ApiError> {
        let request = ControllerRequest::ElectLeaders {
            election_type: election_type as u8,
            partitions,
        };
        match self.call(request).await? {
            ControllerReply::ElectLeaders(r) => Ok(r),
            _ => Err(ApiError::not_controller()),
        }
    }
}

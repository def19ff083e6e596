//! Metadata and DescribeCluster, answered from the metadata image; Metadata
//! auto-creates missing topics when both the broker and the request allow it.

use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
    DescribeQuorumResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strand_metadata::controller_api::NewTopic;
use strand_metadata::image::MetadataImage;
use strand_metadata::validate_topic_name;
use strand_protocol::ErrorCode;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A broker id as the response writes it.
fn wire(id: strand_types::BrokerId) -> BrokerId {
    BrokerId(id.get())
}

fn topic_entry(image: &MetadataImage, name: &str) -> MetadataResponseTopic {
    let Some(t) = image.topics.get(name) else {
        return MetadataResponseTopic::default()
            .with_name(Some(TopicName(s(name))))
            .with_error_code(ErrorCode::UnknownTopicOrPartition.code());
    };
    let partitions = t
        .partitions
        .iter()
        .map(|p| {
            let offline: Vec<BrokerId> = p
                .replicas
                .iter()
                .filter(|r| !image.brokers.contains_key(r))
                .map(|&r| wire(r))
                .collect();
            // No leader (every ISR member fenced): clients retry later.
            let error = if p.leader.is_none() {
                ErrorCode::LeaderNotAvailable.code()
            } else {
                0
            };
            MetadataResponsePartition::default()
                .with_error_code(error)
                .with_partition_index(p.partition)
                .with_leader_id(BrokerId(strand_types::BrokerId::to_wire(p.leader)))
                .with_leader_epoch(p.leader_epoch.get())
                .with_replica_nodes(p.replicas.iter().map(|&r| wire(r)).collect())
                .with_isr_nodes(p.isr.iter().map(|&r| wire(r)).collect())
                .with_offline_replicas(offline)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(s(name))))
        .with_topic_id(t.topic_id)
        .with_is_internal(name == "__consumer_offsets" || name == "__transaction_state")
        .with_partitions(partitions)
}

pub async fn handle(
    broker: &ReplicaManager,
    req: MetadataRequest,
    version: i16,
) -> MetadataResponse {
    let mut image = broker.image();
    // v0 has no null: an empty list means all topics, as a null list does later.
    let all_topics = match &req.topics {
        None => true,
        Some(t) => version == 0 && t.is_empty(),
    };
    let mut names: Vec<(Option<String>, uuid::Uuid)> = match &req.topics {
        Some(ts) if !all_topics => ts
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
            .collect(),
        _ => image
            .topics
            .keys()
            .map(|n| (Some(n.clone()), uuid::Uuid::nil()))
            .collect(),
    };
    // Auto-creation: v4+ carries the client's wish; older versions always ask.
    let allow_auto =
        broker.config.auto_create_topics_enable && (version < 4 || req.allow_auto_topic_creation);
    if allow_auto && !all_topics {
        let missing: Vec<NewTopic> = names
            .iter()
            .filter_map(|(n, _)| n.as_ref())
            .filter(|n| !image.topics.contains_key(*n) && validate_topic_name(n).is_ok())
            .map(|n| NewTopic {
                name: n.clone(),
                num_partitions: -1,
                replication_factor: -1,
                ..Default::default()
            })
            .collect();
        if !missing.is_empty() {
            let results = broker.controller.create_topics(missing, false).await;
            for r in results.iter().filter_map(|r| r.as_ref().err()) {
                if r.code != ErrorCode::TopicAlreadyExists {
                    tracing::warn!(error = %r.message, "auto-create failed");
                }
            }
            image = broker.image();
            broker.reconcile();
        }
    }
    let mut topics = Vec::with_capacity(names.len());
    for (name, id) in names.drain(..) {
        let entry = match name {
            Some(n) => match validate_topic_name(&n) {
                Err(_) => MetadataResponseTopic::default()
                    .with_name(Some(TopicName(s(&n))))
                    .with_error_code(ErrorCode::InvalidTopicException.code()),
                Ok(()) => topic_entry(&image, &n),
            },
            None => match image.topic_by_id(id) {
                Some(t) => topic_entry(&image, &t.name.clone()),
                None => MetadataResponseTopic::default()
                    .with_topic_id(id)
                    .with_error_code(ErrorCode::UnknownTopicId.code()),
            },
        };
        topics.push(entry);
    }
    // Like Kafka, only brokers that may serve (unfenced) are listed.
    let brokers = image
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(wire(b.broker_id))
                .with_host(s(&b.host))
                .with_port(b.port as i32)
                .with_rack(b.rack.as_deref().map(s))
        })
        .collect();
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(s(&image.cluster_id)))
        .with_controller_id(wire(broker.node_id()))
        .with_topics(topics)
}

pub fn describe_cluster(
    broker: &ReplicaManager,
    _req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let image = broker.image();
    let brokers = image
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(wire(b.broker_id))
                .with_host(s(&b.host))
                .with_port(b.port as i32)
                .with_rack(b.rack.as_deref().map(s))
        })
        .collect();
    DescribeClusterResponse::default()
        .with_cluster_id(s(&image.cluster_id))
        .with_controller_id(wire(broker.node_id()))
        .with_endpoint_type(1)
        .with_brokers(brokers)
}

/// DescribeQuorum: the metadata quorum as the active controller reports it.
pub async fn describe_quorum(
    broker: &ReplicaManager,
    req: DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    use kafka_protocol::messages::describe_quorum_response::{
        PartitionData, ReplicaState, TopicData,
    };
    let quorum = broker.controller.describe_quorum().await;
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut pd = PartitionData::default().with_partition_index(p.partition_index);
                    match (&quorum, t.topic_name.0.as_str(), p.partition_index) {
                        (Ok(q), "__cluster_metadata", 0) => {
                            pd.leader_id = BrokerId(q.leader_id as i32);
                            pd.leader_epoch = q.leader_epoch as i32;
                            pd.high_watermark = q.high_watermark as i64;
                            pd.current_voters = q
                                .voters
                                .iter()
                                .map(|(id, leo)| {
                                    ReplicaState::default()
                                        .with_replica_id(BrokerId(*id as i32))
                                        .with_log_end_offset(leo.map(|l| l as i64).unwrap_or(-1))
                                        .with_last_fetch_timestamp(-1)
                                        .with_last_caught_up_timestamp(-1)
                                })
                                .collect();
                        }
                        (Err(e), "__cluster_metadata", 0) => pd.error_code = e.code.code(),
                        _ => pd.error_code = ErrorCode::UnknownTopicOrPartition.code(),
                    }
                    pd
                })
                .collect();
            TopicData::default()
                .with_topic_name(t.topic_name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeQuorumResponse::default().with_topics(topics)
}

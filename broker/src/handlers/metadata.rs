//! Metadata, DescribeTopicPartitions and DescribeCluster, answered from the
//! metadata image; Metadata auto-creates missing topics when both the broker
//! and the request allow it.

use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    describe_topic_partitions_response, BrokerId, DescribeClusterRequest, DescribeClusterResponse,
    DescribeQuorumRequest, DescribeQuorumResponse, DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strand_metadata::controller_api::NewTopic;
use strand_metadata::image::MetadataImage;
use strand_metadata::records::PartitionRecord;
use strand_metadata::validate_topic_name;
use strand_protocol::ErrorCode;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A broker id as the response writes it.
fn wire(id: strand_types::BrokerId) -> BrokerId {
    BrokerId(id.get())
}

/// One partition as Metadata and DescribeTopicPartitions describe it.
struct PartitionView {
    error_code: i16,
    index: i32,
    leader: BrokerId,
    leader_epoch: i32,
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
    offline: Vec<BrokerId>,
}

fn partition_view(image: &MetadataImage, p: &PartitionRecord) -> PartitionView {
    // No leader (every ISR member fenced): clients retry later.
    let error_code = if p.leader.is_none() {
        ErrorCode::LeaderNotAvailable.code()
    } else {
        0
    };
    PartitionView {
        error_code,
        index: p.partition,
        leader: BrokerId(strand_types::BrokerId::to_wire(p.leader)),
        leader_epoch: p.leader_epoch.get(),
        replicas: p.replicas.iter().map(|&r| wire(r)).collect(),
        isr: p.isr.iter().map(|&r| wire(r)).collect(),
        offline: p
            .replicas
            .iter()
            .filter(|r| !image.brokers.contains_key(r))
            .map(|&r| wire(r))
            .collect(),
    }
}

fn is_internal(name: &str) -> bool {
    name == "__consumer_offsets" || name == "__transaction_state"
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
            let v = partition_view(image, p);
            MetadataResponsePartition::default()
                .with_error_code(v.error_code)
                .with_partition_index(v.index)
                .with_leader_id(v.leader)
                .with_leader_epoch(v.leader_epoch)
                .with_replica_nodes(v.replicas)
                .with_isr_nodes(v.isr)
                .with_offline_replicas(v.offline)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(s(name))))
        .with_topic_id(t.topic_id)
        .with_is_internal(is_internal(name))
        .with_partitions(partitions)
}

/// Kafka's `max.request.partition.size.limit`: the most partitions one
/// DescribeTopicPartitions answer carries, whatever the request asks.
const DESCRIBE_TOPIC_PARTITIONS_LIMIT: usize = 2000;

/// A page: (topic index, partition range) per topic, and where the next
/// page starts (topic index, partition).
type Page = (Vec<(usize, std::ops::Range<usize>)>, Option<(usize, usize)>);

/// One page of DescribeTopicPartitions: `topics` are the known topics to
/// describe, sorted by name, with their partition counts; the page starts
/// at `cursor` (a topic of the list and a partition) and holds at most
/// `limit` partitions. Returns, per topic of the page, the range of
/// partitions it carries, and where the next page starts (`None` when this
/// one ends the list). `Err` when the cursor names a topic not in the list.
fn describe_topic_partitions_page(
    topics: &[(&str, usize)],
    cursor: Option<(&str, usize)>,
    limit: usize,
) -> Result<Page, ()> {
    let (mut topic, mut partition) = match cursor {
        None => (0, 0),
        Some((name, p)) => (topics.iter().position(|(t, _)| *t == name).ok_or(())?, p),
    };
    let mut page = Vec::new();
    let mut left = limit.max(1);
    while topic < topics.len() {
        let count = topics[topic].1;
        let end = count.min(partition.saturating_add(left));
        if partition < end {
            page.push((topic, partition..end));
            left -= end - partition;
        }
        if end < count {
            return Ok((page, Some((topic, end))));
        }
        topic += 1;
        partition = 0;
        if left == 0 {
            return Ok((page, (topic < topics.len()).then_some((topic, 0))));
        }
    }
    Ok((page, None))
}

/// DescribeTopicPartitions (KIP-966's answer for the admin client's
/// describeTopics): every partition as Metadata gives it, with the
/// eligible-leader lists empty (Strand elects only from the ISR), sorted by
/// topic name and paged by the partition limit and cursor.
pub fn describe_topic_partitions(
    broker: &ReplicaManager,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    use describe_topic_partitions_response::{
        Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
    };
    let image = broker.image();
    let mut names: Vec<String> = if req.topics.is_empty() {
        image.topics.keys().cloned().collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    let mut known: Vec<(&str, usize)> = Vec::new();
    for n in &names {
        match image.topics.get(n) {
            Some(t) => known.push((n.as_str(), t.partitions.len())),
            None => out.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_name(Some(TopicName(s(n))))
                    .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                    .with_topic_authorized_operations(i32::MIN),
            ),
        }
    }
    let limit = usize::try_from(req.response_partition_limit)
        .unwrap_or(0)
        .min(DESCRIBE_TOPIC_PARTITIONS_LIMIT);
    let cursor = req.cursor.as_ref().map(|c| {
        (
            c.topic_name.0.as_str(),
            usize::try_from(c.partition_index).unwrap_or(0),
        )
    });
    let Ok((page, next)) = describe_topic_partitions_page(&known, cursor, limit) else {
        // Kafka refuses a cursor outside the topics asked for.
        let mut r = DescribeTopicPartitionsResponse::default();
        r.topics = vec![DescribeTopicPartitionsResponseTopic::default()
            .with_error_code(ErrorCode::InvalidRequest.code())];
        return r;
    };
    for (i, range) in page {
        let name = known[i].0;
        let Some(t) = image.topics.get(name) else {
            continue; // `known` was built from this image
        };
        let partitions = t.partitions[range]
            .iter()
            .map(|p| {
                let v = partition_view(&image, p);
                DescribeTopicPartitionsResponsePartition::default()
                    .with_error_code(v.error_code)
                    .with_partition_index(v.index)
                    .with_leader_id(v.leader)
                    .with_leader_epoch(v.leader_epoch)
                    .with_replica_nodes(v.replicas)
                    .with_isr_nodes(v.isr)
                    .with_eligible_leader_replicas(Some(Vec::new()))
                    .with_last_known_elr(Some(Vec::new()))
                    .with_offline_replicas(v.offline)
            })
            .collect();
        out.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(TopicName(s(name))))
                .with_topic_id(t.topic_id)
                .with_is_internal(is_internal(name))
                .with_partitions(partitions)
                .with_topic_authorized_operations(i32::MIN),
        );
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    DescribeTopicPartitionsResponse::default()
        .with_topics(out)
        .with_next_cursor(next.map(|(t, p)| {
            Cursor::default()
                .with_topic_name(TopicName(s(known[t].0)))
                .with_partition_index(p as i32)
        }))
}

/// Metadata; brokers are described by their address on `listener`, the
/// one the request came in on.
pub async fn handle(
    broker: &ReplicaManager,
    req: MetadataRequest,
    version: i16,
    listener: &str,
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
            let (host, port) = b.endpoint(listener);
            MetadataResponseBroker::default()
                .with_node_id(wire(b.broker_id))
                .with_host(s(host))
                .with_port(port as i32)
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
    req: DescribeClusterRequest,
    listener: &str,
) -> DescribeClusterResponse {
    let image = broker.image();
    // v2 (KIP-1073): fenced brokers too when asked, marked as such; a
    // broker unregistered is in neither answer.
    let brokers = image
        .brokers
        .values()
        .filter(|b| req.include_fenced_brokers || !b.fenced)
        .map(|b| {
            let (host, port) = b.endpoint(listener);
            DescribeClusterBroker::default()
                .with_broker_id(wire(b.broker_id))
                .with_host(s(host))
                .with_port(port as i32)
                .with_rack(b.rack.as_deref().map(s))
                .with_is_fenced(b.fenced)
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
    version: i16,
) -> DescribeQuorumResponse {
    use kafka_protocol::messages::describe_quorum_response::{
        Listener, Node, PartitionData, ReplicaState, TopicData,
    };
    let quorum = broker.controller.describe_quorum().await;
    // The leader is caught up with itself now; of the followers the quorum
    // keeps no fetch times (-1: unknown).
    let now = broker.clock.now_ms();
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
                                    let seen = if *id == q.leader_id { now } else { -1 };
                                    ReplicaState::default()
                                        .with_replica_id(BrokerId(*id as i32))
                                        .with_log_end_offset(leo.map(|l| l as i64).unwrap_or(-1))
                                        .with_last_fetch_timestamp(seen)
                                        .with_last_caught_up_timestamp(seen)
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
    // v2 (KIP-853) names each voter's controller endpoint.
    let listener = broker
        .config
        .controller_listener_names
        .first()
        .map_or("CONTROLLER", String::as_str);
    let nodes = match (&quorum, version >= 2) {
        (Ok(q), true) => q
            .voter_addrs
            .iter()
            .filter_map(|(id, addr)| {
                let (host, port) = addr.rsplit_once(':')?;
                Some(
                    Node::default()
                        .with_node_id(BrokerId(*id as i32))
                        .with_listeners(vec![Listener::default()
                            .with_name(s(listener))
                            .with_host(s(host.trim_start_matches('[').trim_end_matches(']')))
                            .with_port(port.parse().ok()?)]),
                )
            })
            .collect(),
        _ => vec![],
    };
    DescribeQuorumResponse::default()
        .with_topics(topics)
        .with_nodes(nodes)
}

#[cfg(test)]
mod tests {
    use super::describe_topic_partitions_page as page;

    #[test]
    fn describe_topic_partitions_pages() {
        let topics = [("a", 3), ("b", 0), ("c", 2)];
        // (cursor, limit) -> (page, next)
        assert_eq!(
            page(&topics, None, 10),
            Ok((vec![(0, 0..3), (2, 0..2)], None))
        );
        assert_eq!(page(&topics, None, 2), Ok((vec![(0, 0..2)], Some((0, 2)))));
        assert_eq!(
            page(&topics, Some(("a", 2)), 1),
            Ok((vec![(0, 2..3)], Some((1, 0))))
        );
        assert_eq!(
            page(&topics, Some(("b", 0)), 1),
            Ok((vec![(2, 0..1)], Some((2, 1))))
        );
        assert_eq!(
            page(&topics, None, 5),
            Ok((vec![(0, 0..3), (2, 0..2)], None))
        );
        assert_eq!(page(&topics, None, 3), Ok((vec![(0, 0..3)], Some((1, 0)))));
        assert_eq!(
            page(&topics, Some(("c", 1)), 7),
            Ok((vec![(2, 1..2)], None))
        );
        assert_eq!(page(&topics, Some(("z", 0)), 7), Err(()));
        // A limit of 0 still moves on (one partition), so paging ends.
        assert_eq!(page(&topics, None, 0), Ok((vec![(0, 0..1)], Some((0, 1)))));
    }
}

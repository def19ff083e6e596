//! The partition side of transactions: WriteTxnMarkers (sent by a
//! transaction coordinator to every partition leader of a transaction when it
//! commits or aborts) and DescribeProducers (the producer state of partitions
//! led here).
//!
//! WriteTxnMarkers appends one control batch per (marker, partition) with
//! `Partition::write_txn_marker` and answers each partition once its HW has
//! passed the marker (acks=all), so the coordinator only completes the
//! transaction when every marker is replicated.

use crate::group_coordinator::OFFSETS_TOPIC;
use crate::node::Node;
use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, ProducerId, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;
use std::time::Duration;
use strand_partition::{AppendOutcome, Partition};
use strand_protocol::ErrorCode;
use strand_types::{Offset, ProducerEpoch, Sequence};

/// How long a marker waits for its HW: WriteTxnMarkers carries no timeout,
/// Kafka uses `request.timeout.ms` (30 s by default).
const MARKER_ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// A marker appended to a partition, waiting for its HW.
struct Written {
    /// (marker, topic, partition) position in the response.
    at: (usize, usize, usize),
    partition: Arc<Partition>,
    outcome: AppendOutcome,
    producer_id: i64,
    commit: bool,
}

pub async fn write_txn_markers(
    node: &Node,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let broker = &node.broker;
    let mut results: Vec<WritableTxnMarkerResult> = Vec::with_capacity(req.markers.len());
    let mut written: Vec<Written> = Vec::new();
    for (mi, marker) in req.markers.iter().enumerate() {
        let producer_id = marker.producer_id.0;
        let commit = marker.transaction_result;
        let mut topics = Vec::with_capacity(marker.topics.len());
        for (ti, topic) in marker.topics.iter().enumerate() {
            let name = topic.name.0.as_str();
            let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
            for (pi, &index) in topic.partition_indexes.iter().enumerate() {
                let appended = broker.leader_partition(name, index).and_then(|p| {
                    // The marker is a log write.
                    crate::disk::run(|| {
                        p.write_txn_marker(
                            strand_types::ProducerId::from_wire(producer_id),
                            ProducerEpoch::from_wire(marker.producer_epoch),
                            marker.coordinator_epoch,
                            commit,
                            i16::from(marker.transaction_version),
                        )
                    })
                    .map(|outcome| (p, outcome))
                    .map_err(|e| {
                        tracing::debug!(topic = name, partition = index, producer_id, error = %e.message, "transaction marker refused");
                        e.code
                    })
                });
                let error = match appended {
                    Ok((partition, outcome)) => {
                        written.push(Written {
                            at: (mi, ti, pi),
                            partition,
                            outcome,
                            producer_id,
                            commit,
                        });
                        None
                    }
                    Err(code) => Some(code),
                };
                partitions.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(strand_protocol::code(error)),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
        }
        results.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(ProducerId(producer_id))
                .with_topics(topics),
        );
    }
    // All markers are appended before any wait, so replication of all of
    // them overlaps; one deadline covers the request.
    let deadline = tokio::time::Instant::now() + MARKER_ACK_TIMEOUT;
    for w in written {
        let result = crate::disk::acknowledged(&w.partition, &w.outcome, deadline).await;
        match result {
            Ok(()) => {
                let producer = strand_types::ProducerId::from_wire(w.producer_id);
                if let (true, Some(producer)) = (w.partition.topic == OFFSETS_TOPIC, producer) {
                    if !on_offsets_txn_marker(node, w.partition.index, producer, w.commit).await {
                        // The groups are still loading: the coordinator retries
                        // the marker (a repeat ends nothing and is harmless).
                        let (mi, ti, pi) = w.at;
                        results[mi].topics[ti].partitions[pi].error_code =
                            ErrorCode::NotEnoughReplicas.code();
                    }
                }
            }
            Err(code) => {
                let (mi, ti, pi) = w.at;
                results[mi].topics[ti].partitions[pi].error_code = code.code();
            }
        }
    }
    WriteTxnMarkersResponse::default().with_markers(results)
}

/// A commit or abort marker for `producer_id` reached the HW of
/// `__consumer_offsets` partition `partition`: offsets the producer committed
/// inside the transaction (TxnOffsetCommit) become visible on commit and are
/// dropped on abort.
pub async fn on_offsets_txn_marker(
    node: &Node,
    partition: i32,
    producer_id: strand_types::ProducerId,
    commit: bool,
) -> bool {
    node.groups
        .on_txn_marker(partition, producer_id, commit)
        .await
}

/// DescribeProducers (v0): the producer state of each requested partition
/// led here; NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION otherwise.
pub fn describe_producers(
    broker: &ReplicaManager,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let mut r = PartitionResponse::default().with_partition_index(index);
                    match broker.leader_partition(t.name.0.as_str(), index) {
                        Ok(p) => {
                            r.active_producers = p
                                .producer_entries()
                                .iter()
                                .map(|e| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(e.producer_id.get()))
                                        .with_producer_epoch(i32::from(ProducerEpoch::to_wire(
                                            e.producer_epoch,
                                        )))
                                        .with_last_sequence(Sequence::to_wire(e.last_seq()))
                                        .with_last_timestamp(e.last_timestamp)
                                        .with_coordinator_epoch(e.coordinator_epoch)
                                        .with_current_txn_start_offset(Offset::to_wire(
                                            e.current_txn_first_offset,
                                        ))
                                })
                                .collect();
                        }
                        Err(code) => {
                            r.error_code = code.code();
                            r.error_message = Some(StrBytes::from_string(format!(
                                "{code:?} for {}-{index}",
                                t.name.0.as_str()
                            )));
                        }
                    }
                    r
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

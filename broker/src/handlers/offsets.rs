//! ListOffsets, DeleteRecords, OffsetForLeaderEpoch and InitProducerId.

use crate::node::Node;
use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::*;
use strand_protocol::ErrorCode;
use strand_types::{LeaderEpoch, Offset};

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
/// KIP-405: the first offset in local storage; without tiering, the log start.
const EARLIEST_LOCAL: i64 = -4;

pub fn list_offsets(
    broker: &ReplicaManager,
    req: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let read_committed = req.isolation_level == 1;
    let mut topics: Vec<ListOffsetsTopicResponse> = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut r = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1);
                    let part = match broker.leader_partition_at_epoch(
                        t.name.0.as_str(),
                        p.partition_index,
                        LeaderEpoch::from_wire(p.current_leader_epoch),
                    ) {
                        Ok(part) => part,
                        Err(code) => {
                            r.error_code = code.code();
                            return r;
                        }
                    };
                    let offsets = part.offsets();
                    let upper = part.fetch_upper_bound(read_committed);
                    let found = match p.timestamp {
                        LATEST => {
                            r.offset = upper.get();
                            r.leader_epoch = part.leader_epoch().get();
                            return r;
                        }
                        EARLIEST | EARLIEST_LOCAL => Ok(Some((offsets.log_start_offset, -1))),
                        MAX_TIMESTAMP => part.max_timestamp_and_offset(),
                        ts if ts >= 0 => part.offset_for_timestamp(ts),
                        _ => {
                            r.error_code = ErrorCode::InvalidRequest.code();
                            return r;
                        }
                    };
                    match found {
                        // Records at or past the HW (LSO) are not visible yet.
                        Ok(Some((offset, ts)))
                            if offset < upper || (offset == upper && ts == -1) =>
                        {
                            r.offset = offset.get();
                            r.timestamp = ts;
                            // The epoch of the batch that holds the offset, as Kafka reports it.
                            r.leader_epoch = LeaderEpoch::to_wire(part.epoch_at(offset));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::error!(error = %e, "list offsets read failed");
                            r.error_code = ErrorCode::KafkaStorageError.code();
                        }
                    }
                    r
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    if version < 4 {
        // The leader epoch exists from v4: a v1-v3 response cannot carry one.
        for p in topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            p.leader_epoch = -1;
        }
    }
    ListOffsetsResponse::default().with_topics(topics)
}

pub fn delete_records(broker: &ReplicaManager, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut r = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    // -1 is the HW; other negative offsets are out of range.
                    let offset = match p.offset {
                        -1 => Ok(None),
                        o => Offset::from_wire(o)
                            .map(Some)
                            .ok_or(ErrorCode::OffsetOutOfRange),
                    };
                    match broker
                        .leader_partition(t.name.0.as_str(), p.partition_index)
                        .and_then(|part| part.delete_records(offset?))
                    {
                        Ok(low) => r.low_watermark = low.get(),
                        Err(code) => r.error_code = code.code(),
                    }
                    r
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

pub fn offset_for_leader_epoch(
    broker: &ReplicaManager,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut r = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    match broker.leader_partition_at_epoch(
                        t.topic.0.as_str(),
                        p.partition,
                        LeaderEpoch::from_wire(p.current_leader_epoch),
                    ) {
                        Ok(part) => {
                            // An unknown epoch (-1) has no end: (-1, -1).
                            // So is one above every epoch we know (or when we know none).
                            let requested = LeaderEpoch::from_wire(p.leader_epoch);
                            if let Some((epoch, end)) =
                                requested.and_then(|epoch| part.end_offset_for_epoch(epoch))
                            {
                                r.leader_epoch = epoch.get();
                                r.end_offset = end.get();
                            }
                        }
                        Err(code) => r.error_code = code.code(),
                    }
                    r
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

pub async fn init_producer_id(node: &Node, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let broker = &node.broker;
    let resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if req
        .transactional_id
        .as_ref()
        .is_some_and(|t| !t.0.is_empty())
    {
        return crate::handlers::txn::init_producer_id(node, req).await;
    }
    // Idempotent producers get a fresh id with epoch 0, whatever they held before.
    match broker.next_producer_id().await {
        Ok(id) => resp
            .with_producer_id(ProducerId(id.get()))
            .with_producer_epoch(0),
        Err(code) => resp.with_error_code(code.code()),
    }
}

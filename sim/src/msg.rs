//! What travels between the simulated nodes (brokers, the controller, the
//! clients), one message per RPC request or answer. `id`s tie an answer to
//! its request, as a connection's one outstanding request does: an answer
//! to a request its sender gave up on is never applied.

use bytes::Bytes;
use std::sync::Arc;
use strand_group::offsets::OffsetKey;
use strand_metadata::controller_api::AlterPartitionRequest;
use strand_metadata::image::MetadataImage;
use strand_protocol::ErrorCode;
use strand_replication::leader::{AlterPartitionResult, IsrProposal};
use strand_replication::rules::FetchedPartition;
use strand_types::{
    BrokerEpoch, BrokerId, LeaderEpoch, Offset, ProducerEpoch, ProducerId, TopicPartition,
};
use uuid::Uuid;

/// A follower's fetch of one partition.
#[derive(Debug, Clone, Copy)]
pub struct FetchRequest {
    pub id: u64,
    pub broker_epoch: BrokerEpoch,
    pub leader_epoch: LeaderEpoch,
    pub fetch_offset: Offset,
    pub last_fetched_epoch: Option<LeaderEpoch>,
    /// What the follower has fsynced (Strand's fetch extension).
    pub durable_offset: Offset,
}

/// A transactional id's requests carry the client instance that sends
/// them (for the checks: which instance a grant fenced).
pub type Instance = usize;

#[derive(Debug, Clone)]
pub enum Msg {
    Register {
        id: u64,
        incarnation: Uuid,
    },
    RegisterReply {
        id: u64,
        broker_epoch: BrokerEpoch,
    },
    Heartbeat {
        broker_epoch: BrokerEpoch,
        applied: u64,
    },
    Image(Arc<MetadataImage>),
    /// `None` inside: sent by a process not registered (the controller
    /// answers STALE_BROKER_EPOCH).
    AlterPartition(TopicPartition, Option<AlterPartitionRequest>, IsrProposal),
    AlterPartitionReply(TopicPartition, IsrProposal, AlterPartitionResult),
    Fetch(TopicPartition, FetchRequest),
    FetchReply {
        tp: TopicPartition,
        id: u64,
        leader_epoch: LeaderEpoch,
        fetch_offset: Offset,
        fetched: FetchedPartition,
        records: Bytes,
    },
    /// A client's produce of one batch; a transactional one names its
    /// transactional id (by index).
    Produce {
        id: u64,
        tp: TopicPartition,
        txn: Option<usize>,
        batch: Bytes,
    },
    /// The answer to a produce: the batch's base offset.
    Reply {
        id: u64,
        result: Result<Offset, ErrorCode>,
    },
    /// InitProducerId of transactional id `txn` (by index), transaction
    /// timeout `TXN_TIMEOUT_MS`.
    InitProducerId {
        id: u64,
        txn: usize,
        instance: Instance,
    },
    /// EndTxn, transaction.version 2 (the epoch is bumped).
    EndTxn {
        id: u64,
        txn: usize,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        commit: bool,
    },
    /// The coordinator's answer: the producer id and epoch to go on with.
    CoordinatorReply {
        id: u64,
        result: Result<(Option<ProducerId>, Option<ProducerEpoch>), ErrorCode>,
    },
    /// A partition leader adds the partition to the producer's transaction
    /// before a transactional batch opens one there (KIP-890 part 2,
    /// AddPartitionsToTxn v5 from the broker).
    AddPartition {
        id: u64,
        txn: usize,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        tp: TopicPartition,
    },
    AddPartitionReply {
        id: u64,
        result: Result<(), ErrorCode>,
    },
    /// The coordinator's WriteTxnMarkers for one partition.
    WriteMarker {
        id: u64,
        tp: TopicPartition,
        producer_id: Option<ProducerId>,
        producer_epoch: Option<ProducerEpoch>,
        commit: bool,
        coordinator_epoch: i32,
        transaction_version: i16,
    },
    MarkerReply {
        id: u64,
        result: Result<(), ErrorCode>,
    },
    /// OffsetCommit of `group`'s offset for `key` (a simple commit: no
    /// generation).
    OffsetCommit {
        id: u64,
        group: String,
        key: OffsetKey,
        value: i64,
    },
    /// TxnOffsetCommit (v5: the group coordinator adds `__consumer_offsets`
    /// to the transaction) of the transactional group's offset for the
    /// input partition of transactional id `txn`.
    TxnOffsetCommit {
        id: u64,
        txn: usize,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        value: i64,
    },
    OffsetFetch {
        id: u64,
        group: String,
        key: OffsetKey,
        require_stable: bool,
    },
    /// A commit's answer (`Ok(None)`), or a fetch's (the committed value).
    OffsetReply {
        id: u64,
        result: Result<Option<i64>, ErrorCode>,
    },
}

impl Msg {
    /// One line for a trace.
    pub fn short(&self) -> String {
        match self {
            Msg::Image(i) => {
                let parts: Vec<String> = i
                    .topics
                    .values()
                    .flat_map(|t| {
                        t.partitions.iter().map(move |p| {
                            format!(
                                "{}-{} l{} e{} isr{:?}",
                                t.name,
                                p.partition,
                                BrokerId::to_wire(p.leader),
                                p.leader_epoch,
                                p.isr
                            )
                        })
                    })
                    .collect();
                format!("image {} [{}]", i.applied, parts.join(", "))
            }
            Msg::FetchReply {
                tp,
                leader_epoch,
                fetch_offset,
                fetched,
                records,
                ..
            } => format!(
                "fetch reply {tp} epoch {leader_epoch} at {fetch_offset}: {fetched:?}, {} bytes",
                records.len()
            ),
            Msg::Produce { id, tp, txn, .. } => format!("produce {id} to {tp} (txn {txn:?})"),
            other => format!("{other:?}"),
        }
    }
}

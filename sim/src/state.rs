//! What each simulated node and client keeps.

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use strand_log::storage::MemStorage;
use strand_metadata::image::MetadataImage;
use strand_partition::log_dir_failure::LogDirFailures;
use strand_partition::Partition;
use strand_replication::leader::IsrProposal;
use strand_txn::shard::{Markers, TxnShard, WriteId};
use strand_types::{BrokerEpoch, LeaderEpoch, Offset, ProducerEpoch, ProducerId, TopicPartition};
use uuid::Uuid;

use crate::msg::Instance;
use strand_group::offsets::{GroupOffsets, OffsetKey};
use strand_group::records::CommittedOffset;

/// One partition a broker hosts.
pub struct Replica {
    pub partition: Arc<Partition>,
    /// The leader this replica fetches from, when it follows.
    pub following: Option<i32>,
    /// The outstanding fetch: (id, when sent).
    pub fetch: Option<(u64, i64)>,
    /// AlterPartition requests without an answer yet, with when they went.
    pub alters: Vec<(IsrProposal, i64)>,
    /// Highest (HW, LSO) seen while leading in (incarnation, leader epoch).
    pub leading_high: Option<(u128, LeaderEpoch, Offset, Offset)>,
}

/// Who an acks=all append answers once the HW covers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiter {
    /// A client's produce.
    Client(u64),
    /// A coordinator's WriteMarker, from broker `from`; on
    /// `__consumer_offsets` the group coordinator applies it (producer,
    /// commit) once it is in the HW.
    Marker {
        from: i32,
        id: u64,
        offsets: Option<(ProducerId, bool)>,
    },
    /// This broker's group coordinator (loaded at `epoch`).
    Group { epoch: i32, write: u64 },
    /// This broker's transaction coordinator shard (loaded at `epoch`).
    Shard { epoch: i32, write: WriteId },
}

/// An acks=all append waiting for the HW.
pub struct PendingAck {
    pub tp: TopicPartition,
    pub waiter: Waiter,
    pub leader_epoch: LeaderEpoch,
    pub base_offset: Offset,
    pub required_offset: Offset,
    pub deadline: i64,
}

/// A transactional produce waiting for the coordinator to add its
/// partition to the transaction (KIP-890).
pub struct ParkedProduce {
    pub client_id: u64,
    pub tp: TopicPartition,
    pub batch: Bytes,
    /// Taken before the partition's state was read: the append is refused
    /// if a marker for the producer was written meanwhile.
    pub guard: strand_txn::VerificationGuard,
    /// The AddPartition request sent for it.
    pub add_id: u64,
    pub deadline: i64,
}

/// One transaction's markers being written.
pub struct MarkerJob {
    pub markers: Markers,
    pub remaining: BTreeSet<TopicPartition>,
    /// WriteMarker requests in flight: id -> (partition, when sent).
    pub in_flight: BTreeMap<u64, (TopicPartition, i64)>,
    /// A partition refused the marker for good.
    pub fenced: bool,
}

/// Who waits for a shard's write.
#[derive(Debug, Clone, Copy)]
pub enum ShardWaiter {
    /// A client's InitProducerId (with the transactional id and instance
    /// a grant goes to) or EndTxn.
    Client {
        id: u64,
        grant: Option<(usize, Instance)>,
    },
    /// A partition leader's AddPartition.
    Leader { broker: i32, id: u64 },
}

/// A broker's transaction coordinator: the shard of `__transaction_state-0`
/// it loaded when it became that partition's leader.
pub struct ShardHost {
    pub epoch: i32,
    pub shard: TxnShard,
    pub waiting: BTreeMap<WriteId, ShardWaiter>,
    /// Writes of Prepare records: the transaction (producer id, epoch of
    /// its data) and whether it commits, recorded once the write commits.
    pub prepares: BTreeMap<WriteId, ((ProducerId, ProducerEpoch), bool)>,
    pub markers: Vec<MarkerJob>,
    /// Effects asked for after a failed write: carried out at this time.
    pub retry: Vec<(i64, Vec<strand_txn::shard::Effect>)>,
    pub last_timeout_check: i64,
}

pub struct Node {
    pub id: i32,
    pub storage: MemStorage,
    pub alive: bool,
    pub paused_until: i64,
    pub incarnation: u128,
    /// `None` until this incarnation is registered.
    pub broker_epoch: Option<BrokerEpoch>,
    pub last_register: i64,
    /// The registration request waiting for its answer.
    pub register_id: u64,
    pub last_heartbeat: i64,
    /// Registered and unfenced at least once since the start: only then
    /// does the broker open, lead or follow anything (as
    /// `lifecycle::register` orders the binary's start-up), so a restarted
    /// broker never acts on an image of its previous incarnation.
    pub started: bool,
    pub image: Arc<MetadataImage>,
    pub replicas: BTreeMap<TopicPartition, Replica>,
    /// Partitions whose log could not be opened, with the topic id tried.
    pub failed: BTreeMap<TopicPartition, Uuid>,
    pub failures: Arc<LogDirFailures>,
    pub pending: Vec<PendingAck>,
    pub parked: Vec<ParkedProduce>,
    pub coordinator: Option<ShardHost>,
    pub groups: Option<GroupHost>,
}

/// A write of the group coordinator, waiting for the HW.
#[derive(Debug, Clone)]
pub enum GroupWrite {
    /// OffsetCommit: committed once written.
    Commit {
        client: u64,
        group: String,
        key: OffsetKey,
        value: CommittedOffset,
    },
    /// TxnOffsetCommit: staged for the producer once written.
    Stage {
        client: u64,
        group: String,
        producer: ProducerId,
        key: OffsetKey,
        value: CommittedOffset,
    },
}

/// A TxnOffsetCommit waiting for the transaction coordinator to add
/// `__consumer_offsets` to the producer's transaction.
#[derive(Debug, Clone)]
pub struct ParkedTxnCommit {
    pub client: u64,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub key: OffsetKey,
    pub value: i64,
    pub deadline: i64,
}

/// A broker's group coordinator: the groups of `__consumer_offsets-0` it
/// loaded when it became that partition's leader.
pub struct GroupHost {
    pub epoch: i32,
    pub groups: BTreeMap<String, GroupOffsets>,
    pub writes: BTreeMap<u64, GroupWrite>,
    /// AddPartition request id -> the TxnOffsetCommit waiting for it.
    pub adding: BTreeMap<u64, ParkedTxnCommit>,
}

/// One batch of a client transaction, sent (and resent on retriable
/// errors, as a producer does) until acknowledged, refused for good, or
/// out of time.
#[derive(Debug, Clone)]
pub struct TxnSend {
    pub batch: Bytes,
    /// Every produce request sent for it; the last with when it went.
    pub requests: Vec<u64>,
    pub last_sent: Option<i64>,
    /// The offset once acknowledged.
    pub acked: Option<Offset>,
    /// Refused for good (or out of time): the transaction aborts.
    pub failed: bool,
}

/// The TxnOffsetCommit of a client transaction: the input position it
/// consumed up to, sent (and resent on retriable errors) until answered.
#[derive(Debug, Clone)]
pub struct TxnOffsets {
    pub value: i64,
    pub requests: Vec<u64>,
    pub last_sent: Option<i64>,
    pub acked: bool,
    pub failed: bool,
}

/// The plain committer's request in flight.
#[derive(Debug, Clone, Copy)]
pub enum PlainOp {
    /// OffsetCommit of this value.
    Commit(i64),
    /// OffsetFetch, which must return at least this (the highest value
    /// whose commit was answered before the fetch was sent).
    Fetch(i64),
}

/// The plain committer: commits ever larger values for its group's
/// partition and fetches them back.
#[derive(Debug, Clone, Default)]
pub struct PlainCommitter {
    pub sent: i64,
    pub acked: i64,
    /// (request id, when sent, what).
    pub in_flight: Option<(u64, i64, PlainOp)>,
    pub fetches: usize,
    /// Commits given up on without an answer: each may still take effect
    /// at any time (a request read before its connection was dropped), as
    /// in Kafka, so a fetch may see one of them after a later commit.
    pub unknown: std::collections::BTreeSet<i64>,
}

impl PlainCommitter {
    /// Whether `value` is what a fetch may return, given the highest
    /// commit acknowledged before it was sent.
    pub fn may_read(&self, value: i64, floor: i64) -> bool {
        value <= self.sent && (value >= floor || self.unknown.contains(&value))
    }
}

/// A transaction of a client instance, as the client saw it.
#[derive(Debug, Clone)]
pub struct ClientTxn {
    pub producer_id: ProducerId,
    pub epoch: ProducerEpoch,
    pub sends: BTreeMap<TopicPartition, TxnSend>,
    /// The offsets of the input it processed, sent to the transaction.
    pub offsets: TxnOffsets,
    pub started_at: i64,
    /// EndTxn decided: commit or abort.
    pub end: Option<bool>,
    /// The EndTxn in flight: (request id, when sent).
    pub end_request: Option<(u64, i64)>,
    /// EndTxn was answered without error.
    pub ended: bool,
}

impl ClientTxn {
    /// Every batch acknowledged or given up on.
    pub fn settled(&self) -> bool {
        self.sends.values().all(|s| s.acked.is_some() || s.failed)
            && (self.offsets.acked || self.offsets.failed)
    }

    /// Every batch and the offsets acknowledged: the transaction may commit.
    pub fn all_acknowledged(&self) -> bool {
        self.sends.values().all(|s| s.acked.is_some()) && self.offsets.acked
    }
}

/// What one instance of a transactional id is doing.
#[derive(Debug, Clone)]
pub enum ClientState {
    /// InitProducerId until granted; the request in flight, if any.
    Init(Option<(u64, i64)>),
    /// Between transactions, until `at`.
    Idle {
        at: i64,
    },
    InTxn(ClientTxn),
    /// Fenced (a fatal error) or abandoned mid-transaction: sends nothing.
    Stopped,
}

/// One application instance of a transactional id.
#[derive(Debug, Clone)]
pub struct TxnClient {
    pub txn: usize,
    pub instance: Instance,
    pub producer: Option<(ProducerId, ProducerEpoch)>,
    pub state: ClientState,
}

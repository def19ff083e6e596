//! The transaction coordinator of one `__transaction_state` partition at one
//! coordinator epoch, as a state machine without I/O: requests and timers go
//! in, [`Effect`]s and answers come out. It is what the broker's
//! `txn_coordinator` and the simulation both run; each carries out the
//! effects its own way (the broker appends to its partition and sends
//! WriteTxnMarkers over TCP; the simulation over simulated brokers).
//!
//! Every transition the [`crate::coordinator`] rules decide is persisted
//! before it is acted on: the shard marks it pending on the id
//! ([`TxnMetadata::begin_write`]), asks for an [`Effect::Append`] of its
//! record, and only when the runtime reports the write committed
//! ([`TxnShard::write_done`]) makes it current and answers the request that
//! caused it (or, for a Prepare state, asks for the markers). While a write
//! is pending, every other request for the id gets CONCURRENT_TRANSACTIONS.
//! A write that failed is undone (the id keeps its last persisted state)
//! and its request answered with the error; what the shard asks for after
//! a failed write (the Complete record again) the runtime carries out after
//! a back-off, so a partition that keeps refusing is not hammered.
//!
//! A shard lives for one load: the runtime makes one with [`TxnShard::load`]
//! when its broker becomes leader of the partition (the coordinator epoch is
//! that leader epoch) and drops it when leadership moves; answers to writes
//! of a dropped shard are never delivered to a newer one (their [`WriteId`]s
//! mean nothing there), so a coordinator that lost its partition cannot
//! write over what a newer one decided.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strand_protocol::ErrorCode;
use strand_types::{ProducerEpoch, ProducerId};

use crate::coordinator::{
    self as rules, EndOutcome, InitOutcome, ProducerIdAndEpoch, Step, TopicPartition, TxnMetadata,
    TxnRecord, TxnState,
};
use crate::txn_log;

/// Names one write of one shard, for [`TxnShard::write_done`].
pub type WriteId = u64;

/// What the runtime must do for the shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Append this record to the shard's partition with acks=all, then call
    /// [`TxnShard::write_done`] with `write` once the HW covers it, or with
    /// the error (timeout, lost leadership, ...).
    Append {
        write: WriteId,
        key: Bytes,
        /// `None`: a tombstone (the id is removed).
        value: Option<Bytes>,
    },
    /// Write these markers to every partition (retrying each until it is
    /// written), then call [`TxnShard::markers_done`].
    WriteMarkers(Markers),
}

/// One transaction's markers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markers {
    pub transactional_id: String,
    pub producer_id: Option<ProducerId>,
    pub producer_epoch: Option<ProducerEpoch>,
    pub commit: bool,
    pub coordinator_epoch: i32,
    /// The transaction's protocol: 2 (transaction.version 2) markers carry
    /// an epoch above the transaction's data, and partitions refuse one
    /// that does not (a late marker of an earlier transaction).
    pub transaction_version: i16,
    pub partitions: BTreeSet<TopicPartition>,
}

/// How writing a transaction's markers ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkersOutcome {
    /// Every partition has its marker.
    Written,
    /// A partition refused the marker for good (a newer producer epoch or
    /// coordinator epoch): the transaction is left to whoever is newer.
    Fenced,
}

/// The answer to a request, now or once its write is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    /// Answer with this at once.
    Now(Result<T, ErrorCode>),
    /// Call again with a newly allocated producer id.
    NeedProducerId,
    /// Carry out `effects`; the answer comes from [`TxnShard::write_done`]
    /// for `write`.
    Later {
        write: WriteId,
        effects: Vec<Effect>,
    },
}

/// An answer that waited for its write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    InitProducerId(Result<(ProducerId, ProducerEpoch), ErrorCode>),
    AddPartitions(Result<(), ErrorCode>),
    /// The producer id and epoch the client continues with.
    EndTxn(Result<(Option<ProducerId>, Option<ProducerEpoch>), ErrorCode>),
}

/// What follows a write once it is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Then {
    /// InitProducerId: grant this producer id and epoch.
    Grant((ProducerId, ProducerEpoch)),
    /// InitProducerId fenced an ongoing transaction: answer
    /// CONCURRENT_TRANSACTIONS (the client retries once the abort is done)
    /// and write the abort markers.
    FencedOngoing,
    /// AddPartitionsToTxn / AddOffsetsToTxn.
    Added,
    /// EndTxn: answer with what the client continues with, then markers.
    Prepared((Option<ProducerId>, Option<ProducerEpoch>)),
    /// A transaction past its timeout was fenced: markers, no answer.
    TimedOut,
    /// Every marker was written: nothing follows.
    Completed,
    /// The id expired: it is removed once the tombstone is written.
    Expired,
}

#[derive(Debug, Clone)]
struct Write {
    transactional_id: String,
    then: Then,
}

/// Limits the shard enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardConfig {
    /// transaction.max.timeout.ms
    pub max_timeout_ms: i32,
}

/// What a load found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    pub transactional_ids: usize,
    /// Transactions left in PrepareCommit / PrepareAbort, whose markers the
    /// load's effects write.
    pub completing: usize,
    /// Records that could not be decoded (skipped, with why).
    pub skipped: Vec<String>,
}

/// The transaction coordinator of one `__transaction_state` partition.
#[derive(Debug, Clone)]
pub struct TxnShard {
    partition: i32,
    coordinator_epoch: i32,
    config: ShardConfig,
    txns: BTreeMap<String, TxnMetadata>,
    writes: BTreeMap<WriteId, Write>,
    next_write: WriteId,
}

impl TxnShard {
    /// An empty shard (a partition with no records).
    pub fn new(partition: i32, coordinator_epoch: i32, config: ShardConfig) -> TxnShard {
        TxnShard {
            partition,
            coordinator_epoch,
            config,
            txns: BTreeMap::new(),
            writes: BTreeMap::new(),
            // Distinct from the ids of a shard of another load (defence in
            // depth: the runtime delivers answers only to the shard that asked).
            next_write: (coordinator_epoch.max(0) as u64) << 32,
        }
    }

    /// Loads the partition from its records, oldest first (key, value or
    /// `None` for a tombstone): the last record of each id is its state.
    /// Transactions left in a Prepare state get their markers written
    /// again (the effects), as Kafka's coordinator does after a takeover.
    pub fn load<'a>(
        partition: i32,
        coordinator_epoch: i32,
        config: ShardConfig,
        records: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> (TxnShard, Vec<Effect>, LoadReport) {
        let mut shard = TxnShard::new(partition, coordinator_epoch, config);
        let mut report = LoadReport::default();
        let mut state: BTreeMap<String, TxnRecord> = BTreeMap::new();
        for (key, value) in records {
            let id = match txn_log::decode_key(key) {
                Ok(id) => id,
                Err(e) => {
                    report.skipped.push(format!("key: {e}"));
                    continue;
                }
            };
            match value.map(txn_log::decode_value) {
                None => {
                    state.remove(&id);
                }
                Some(Ok(r)) => {
                    state.insert(id, r);
                }
                Some(Err(e)) => report.skipped.push(format!("{id}: {e}")),
            }
        }
        let mut effects = Vec::new();
        for (id, record) in state {
            let prepare = record.state.is_prepare();
            shard.txns.insert(
                id.clone(),
                TxnMetadata {
                    transactional_id: id.clone(),
                    current: record,
                    pending: None,
                },
            );
            if prepare {
                report.completing += 1;
                effects.extend(shard.markers_for(&id));
            }
        }
        report.transactional_ids = shard.txns.len();
        (shard, effects, report)
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The partition's leader epoch this shard was loaded at: the
    /// coordinator epoch its markers carry.
    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// The id's metadata, if it has any persisted state.
    pub fn get(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.txns
            .get(transactional_id)
            .filter(|m| m.current.producer_id.is_some())
    }

    /// Every id with persisted state.
    pub fn all(&self) -> impl Iterator<Item = &TxnMetadata> {
        self.txns
            .values()
            .filter(|m| m.current.producer_id.is_some())
    }

    fn begin(
        &mut self,
        transactional_id: &str,
        record: TxnRecord,
        fencing: bool,
        then: Then,
    ) -> (WriteId, Effect) {
        let write = self.next_write;
        self.next_write += 1;
        let value = txn_log::encode_value(&record);
        self.txns
            .entry(transactional_id.to_string())
            .or_insert_with(|| rules::new_metadata(transactional_id, None, 0, 0))
            .begin_write(record, fencing);
        self.writes.insert(
            write,
            Write {
                transactional_id: transactional_id.to_string(),
                then,
            },
        );
        let effect = Effect::Append {
            write,
            key: txn_log::encode_key(transactional_id),
            value: Some(value),
        };
        (write, effect)
    }

    fn later<T>(&mut self, id: &str, record: TxnRecord, fencing: bool, then: Then) -> Answer<T> {
        let (write, effect) = self.begin(id, record, fencing, then);
        Answer::Later {
            write,
            effects: vec![effect],
        }
    }

    /// InitProducerId with a transactional id (Kafka `handleInitProducerId`).
    /// `expected`: the producer id and epoch a recovering client names
    /// (KIP-360); `fresh_producer_id`: a newly allocated id, once the shard
    /// asked for one ([`Answer::NeedProducerId`]).
    pub fn init_producer_id(
        &mut self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        fresh_producer_id: Option<ProducerId>,
        server_tv2: bool,
        now: i64,
    ) -> Answer<(ProducerId, ProducerEpoch)> {
        // An id never persisted (nothing, or a placeholder whose first write
        // is pending) is unknown to the rules; a pending write answers
        // CONCURRENT_TRANSACTIONS there.
        let meta = self
            .txns
            .get(transactional_id)
            .filter(|m| m.current.producer_id.is_some() || m.pending.is_some());
        let outcome = rules::init_producer_id(
            meta,
            transactional_id,
            timeout_ms,
            self.config.max_timeout_ms,
            expected,
            fresh_producer_id,
            server_tv2,
            now,
        );
        match outcome {
            Err(code) => Answer::Now(Err(code)),
            Ok(InitOutcome::NeedProducerId) => Answer::NeedProducerId,
            Ok(InitOutcome::Grant(Step::Respond(grant))) => Answer::Now(Ok(grant)),
            Ok(InitOutcome::Grant(Step::Write { record, respond })) => {
                self.later(transactional_id, record, false, Then::Grant(respond))
            }
            Ok(InitOutcome::FenceOngoing(record)) => {
                self.later(transactional_id, record, true, Then::FencedOngoing)
            }
        }
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn (the partitions exist: the
    /// runtime checks the metadata first). `transaction_version` is 2 for
    /// the implicit add of a KIP-890 part 2 client.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: Option<ProducerId>,
        producer_epoch: Option<ProducerEpoch>,
        partitions: &[TopicPartition],
        transaction_version: i16,
        now: i64,
    ) -> Answer<()> {
        let Some(meta) = self.get(transactional_id) else {
            return Answer::Now(Err(ErrorCode::InvalidProducerIdMapping));
        };
        match rules::add_partitions(
            meta,
            producer_id,
            producer_epoch,
            partitions,
            transaction_version,
            now,
        ) {
            Err(code) => Answer::Now(Err(code)),
            Ok(Step::Respond(())) => Answer::Now(Ok(())),
            Ok(Step::Write { record, .. }) => {
                self.later(transactional_id, record, false, Then::Added)
            }
        }
    }

    /// KIP-890 part 1: whether each partition is in the producer's ongoing
    /// transaction (the verify-only AddPartitionsToTxn a partition leader
    /// sends before a transactional batch opens a transaction).
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: Option<ProducerId>,
        producer_epoch: Option<ProducerEpoch>,
        partitions: &[TopicPartition],
    ) -> Vec<Option<ErrorCode>> {
        let Some(meta) = self.get(transactional_id) else {
            return vec![Some(ErrorCode::InvalidProducerIdMapping); partitions.len()];
        };
        partitions
            .iter()
            .map(|tp| rules::verify_partition(meta, producer_id, producer_epoch, tp).err())
            .collect()
    }

    /// EndTxn (Kafka `endTransaction`); `tv2` for EndTxn v5+ (KIP-890 part 2).
    /// The answer is the producer id and epoch the client continues with.
    #[allow(clippy::too_many_arguments)]
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        producer_id: Option<ProducerId>,
        producer_epoch: Option<ProducerEpoch>,
        commit: bool,
        tv2: bool,
        fresh_producer_id: Option<ProducerId>,
        now: i64,
    ) -> Answer<(Option<ProducerId>, Option<ProducerEpoch>)> {
        let Some(meta) = self.get(transactional_id) else {
            return Answer::Now(Err(ErrorCode::InvalidProducerIdMapping));
        };
        let current = (meta.current.producer_id, meta.current.producer_epoch);
        match rules::end_txn(
            meta,
            producer_id,
            producer_epoch,
            commit,
            tv2,
            fresh_producer_id,
            now,
        ) {
            Err(code) => Answer::Now(Err(code)),
            Ok(EndOutcome::NeedProducerId) => Answer::NeedProducerId,
            Ok(EndOutcome::AlreadyDone) => Answer::Now(Ok(current)),
            Ok(EndOutcome::Prepare(record)) => {
                let next = rules::producer_after(&record);
                self.later(transactional_id, record, false, Then::Prepared(next))
            }
        }
    }

    /// A write the shard asked for is done: committed (`Ok`) or failed.
    /// Returns the answer of the request that caused it, if one waits, and
    /// what follows (markers after a Prepare state, the Complete record
    /// after markers). An unknown `write` (answered already, or of another
    /// load) changes nothing.
    pub fn write_done(
        &mut self,
        write: WriteId,
        result: Result<(), ErrorCode>,
        now: i64,
    ) -> (Option<Reply>, Vec<Effect>) {
        let Some(Write {
            transactional_id: id,
            then,
        }) = self.writes.remove(&write)
        else {
            return (None, Vec::new());
        };
        let Some(meta) = self.txns.get_mut(&id) else {
            return (None, Vec::new());
        };
        match result {
            Err(code) => {
                meta.abort_write();
                // A placeholder whose first write failed is forgotten.
                if meta.current.producer_id.is_none() && meta.pending.is_none() {
                    self.txns.remove(&id);
                }
                let reply = match then {
                    Then::Grant(_) | Then::FencedOngoing => Some(Reply::InitProducerId(Err(code))),
                    Then::Added => Some(Reply::AddPartitions(Err(code))),
                    Then::Prepared(_) => Some(Reply::EndTxn(Err(code))),
                    Then::TimedOut | Then::Expired => None,
                    // Markers are all written: the Complete record is
                    // needed still, so it is written again.
                    Then::Completed => return (None, self.complete(&id, now)),
                };
                (reply, Vec::new())
            }
            Ok(()) => {
                meta.complete_write();
                match then {
                    Then::Grant(grant) => (Some(Reply::InitProducerId(Ok(grant))), Vec::new()),
                    Then::FencedOngoing => (
                        Some(Reply::InitProducerId(Err(
                            ErrorCode::ConcurrentTransactions,
                        ))),
                        self.markers_for(&id),
                    ),
                    Then::Added => (Some(Reply::AddPartitions(Ok(()))), Vec::new()),
                    Then::Prepared(next) => (Some(Reply::EndTxn(Ok(next))), self.markers_for(&id)),
                    Then::TimedOut => (None, self.markers_for(&id)),
                    Then::Completed => (None, Vec::new()),
                    Then::Expired => {
                        self.txns.remove(&id);
                        (None, Vec::new())
                    }
                }
            }
        }
    }

    /// The markers of `id`'s transaction, if it is in a Prepare state.
    fn markers_for(&self, id: &str) -> Vec<Effect> {
        let Some(meta) = self.txns.get(id) else {
            return Vec::new();
        };
        let cur = &meta.current;
        if !cur.state.is_prepare() {
            return Vec::new();
        }
        vec![Effect::WriteMarkers(Markers {
            transactional_id: id.to_string(),
            producer_id: cur.producer_id,
            producer_epoch: cur.producer_epoch,
            commit: cur.state == TxnState::PrepareCommit,
            coordinator_epoch: self.coordinator_epoch,
            transaction_version: cur.transaction_version,
            partitions: cur.partitions.clone(),
        })]
    }

    /// The markers of `markers` are written (or fenced): CompleteCommit /
    /// CompleteAbort is persisted next. Nothing happens if the transaction
    /// is no longer the one the markers were for.
    pub fn markers_done(
        &mut self,
        markers: &Markers,
        outcome: MarkersOutcome,
        now: i64,
    ) -> Vec<Effect> {
        if outcome == MarkersOutcome::Fenced {
            return Vec::new();
        }
        let Some(meta) = self.txns.get(&markers.transactional_id) else {
            return Vec::new();
        };
        let cur = &meta.current;
        let same = cur.state.is_prepare()
            && cur.producer_id == markers.producer_id
            && cur.producer_epoch == markers.producer_epoch
            && (cur.state == TxnState::PrepareCommit) == markers.commit;
        if !same || meta.pending.is_some() {
            return Vec::new();
        }
        self.complete(&markers.transactional_id, now)
    }

    fn complete(&mut self, id: &str, now: i64) -> Vec<Effect> {
        let Some(meta) = self.txns.get(id) else {
            return Vec::new();
        };
        if meta.pending.is_some() {
            return Vec::new();
        }
        match rules::complete(&meta.current, now) {
            Some(record) => {
                let (_, effect) = self.begin(id, record, false, Then::Completed);
                vec![effect]
            }
            None => Vec::new(),
        }
    }

    /// Aborts (with an epoch bump) every transaction that outlived its
    /// timeout (Kafka `abortTimedOutTransactions`) at the finalized
    /// `transaction.version` (`server_tv2`, see [`rules::fence`]); the
    /// markers follow once each fence is written.
    pub fn abort_timed_out(&mut self, now: i64, server_tv2: bool) -> Vec<Effect> {
        let timed_out: Vec<(String, TxnRecord)> = self
            .txns
            .iter()
            .filter(|(_, m)| m.is_timed_out(now))
            .map(|(id, m)| (id.clone(), rules::fence(&m.current, now, server_tv2)))
            .collect();
        timed_out
            .into_iter()
            .map(|(id, record)| self.begin(&id, record, true, Then::TimedOut).1)
            .collect()
    }

    /// Removes ids idle for transactional.id.expiration.ms: Dead while the
    /// tombstone is written (every request for the id waits, answered
    /// CONCURRENT_TRANSACTIONS), then gone.
    pub fn remove_expired(&mut self, now: i64, expiration_ms: i64) -> Vec<Effect> {
        let expired: Vec<(String, TxnRecord)> = self
            .txns
            .iter()
            .filter(|(_, m)| m.current.producer_id.is_some() && m.is_expired(now, expiration_ms))
            .map(|(id, m)| {
                let mut dead = m.current.clone();
                dead.state = TxnState::Dead;
                (id.clone(), dead)
            })
            .collect();
        let mut effects = Vec::new();
        for (id, dead) in expired {
            let (write, effect) = self.begin(&id, dead, false, Then::Expired);
            // The record written is a tombstone, not the Dead state.
            if let Effect::Append { key, .. } = effect {
                effects.push(Effect::Append {
                    write,
                    key,
                    value: None,
                });
            }
        }
        effects
    }
}

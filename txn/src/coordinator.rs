//! The transaction coordinator's rules: one transactional id's metadata and
//! what each request or timer does to it, as pure functions. The broker's
//! coordinator persists every transition to `__transaction_state` (acks=all)
//! before acting on it: it marks the target record pending
//! ([`TxnMetadata::begin_write`]), appends it, and on success makes it current
//! ([`TxnMetadata::complete_write`]); while a write is pending every other
//! request for the id gets `CONCURRENT_TRANSACTIONS`.
//!
//! States (Kafka's ids and names):
//!
//! | state | id | reached from |
//! |---|---|---|
//! | Empty | 0 | Empty, CompleteCommit, CompleteAbort (InitProducerId) |
//! | Ongoing | 1 | Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitionsToTxn / AddOffsetsToTxn) |
//! | PrepareCommit | 2 | Ongoing (EndTxn commit) |
//! | PrepareAbort | 3 | Ongoing (EndTxn abort, or a fence: InitProducerId on an ongoing transaction, timeout); Empty, CompleteCommit, CompleteAbort (KIP-890 part 2 abort of an empty transaction) |
//! | CompleteCommit | 4 | PrepareCommit (all markers written) |
//! | CompleteAbort | 5 | PrepareAbort (all markers written) |
//! | Dead | 6 | Empty, CompleteCommit, CompleteAbort (transactional id expired) |
//! | PrepareEpochFence | 7 | Ongoing; never persisted: shown while a fencing abort (epoch bumped) is being written |
//!
//! The fence writes `PrepareAbort` with the bumped epoch in one record, so a
//! coordinator that takes over finds either the old Ongoing state (and fences
//! again) or the PrepareAbort (and finishes it); the in-memory
//! PrepareEpochFence is what Kafka calls the pending fence.
//!
//! Producer ids and epochs are [`ProducerId`] and [`ProducerEpoch`]; where
//! a record or a request may carry none (Kafka's -1) they are `Option`s,
//! compared as Kafka compares the integers: `None` equals only `None` and
//! sorts below every epoch. Coordinator epochs (the `__transaction_state`
//! partition's leader epoch, carried by markers) stay `i32`.

use std::collections::BTreeSet;

use strand_protocol::ErrorCode;
use strand_types::{ProducerEpoch, ProducerId};

/// A topic partition taking part in a transaction.
pub type TopicPartition = (String, i32);

/// An epoch at or above this cannot be bumped again: a new producer id is needed
/// (Kafka's `isEpochExhausted`: `Short.MaxValue - 1`).
pub const MAX_BUMPABLE_EPOCH: ProducerEpoch = ProducerEpoch::new(i16::MAX - 1);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// Kafka's persisted state id.
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The name DescribeTransactions / ListTransactions report.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states this one may be entered from.
    pub fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            // The Empty/Complete ones: a KIP-890 part 2 abort of an empty transaction.
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    pub fn can_follow(self, previous: TxnState) -> bool {
        self.valid_previous().contains(&previous)
    }

    /// Markers are being written (or must be, after a takeover).
    pub fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// What `__transaction_state` stores for one transactional id (and what the
/// coordinator keeps in memory as current).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRecord {
    /// `None` in the broker's placeholder for an id whose first
    /// InitProducerId has not been persisted yet.
    pub producer_id: Option<ProducerId>,
    /// The producer id before the last rotation (epoch exhausted), if any: lets
    /// a retried InitProducerId from that producer get the new id (KIP-360).
    pub previous_producer_id: Option<ProducerId>,
    /// `None` until the first InitProducerId bumps it to 0.
    pub producer_epoch: Option<ProducerEpoch>,
    /// The epoch before the last bump, if any (KIP-360 retries).
    pub last_producer_epoch: Option<ProducerEpoch>,
    /// KIP-890 part 2: the producer id the client moves to when an EndTxn
    /// exhausted its epoch (set while the transaction completes), if any.
    pub next_producer_id: Option<ProducerId>,
    /// The client's transaction protocol for the current transaction: 2 =
    /// KIP-890 part 2 (epoch bumped by every EndTxn, partitions added by the
    /// brokers), lower = the classic protocol.
    pub transaction_version: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the current transaction started (first partition added), or -1.
    pub start_timestamp: i64,
    pub last_update_timestamp: i64,
}

impl TxnRecord {
    fn transition(&self, state: TxnState, now: i64) -> TxnRecord {
        TxnRecord {
            state,
            last_update_timestamp: now,
            ..self.clone()
        }
    }
}

/// One transactional id on its coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    /// The last persisted state.
    pub current: TxnRecord,
    /// A transition being written; `fencing` marks a fence (shown as PrepareEpochFence).
    pub pending: Option<Pending>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub target: TxnRecord,
    pub fencing: bool,
}

/// What a request leads to when its checks pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<R> {
    /// Nothing to persist: answer at once.
    Respond(R),
    /// Persist `record` (acks=all), then answer.
    Write { record: TxnRecord, respond: R },
}

/// InitProducerId's outcome for a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// Answer with this producer id and epoch (after writing `record`, if any).
    Grant(Step<(ProducerId, ProducerEpoch)>),
    /// A transaction is ongoing: persist this fencing PrepareAbort (epoch
    /// bumped), write its abort markers, and answer the caller
    /// CONCURRENT_TRANSACTIONS so it retries once the abort completes.
    FenceOngoing(TxnRecord),
    /// A new producer id is needed: call again with one.
    NeedProducerId,
}

/// EndTxn's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOutcome {
    /// A retry of a transaction that already ended this way: success.
    AlreadyDone,
    /// Persist this PrepareCommit/PrepareAbort, answer, then write markers.
    Prepare(TxnRecord),
    /// The epoch is exhausted (KIP-890 part 2): call again with a new producer id.
    NeedProducerId,
}

/// The KIP-360 expectation an InitProducerId may carry: (producer id, epoch).
/// A request carries one only when it names a producer id (not -1); its
/// epoch may still be the wire's -1 (`None`).
pub type ProducerIdAndEpoch = (ProducerId, Option<ProducerEpoch>);

impl TxnMetadata {
    /// The state as reported (PrepareEpochFence while a fence is being written).
    pub fn reported_state(&self) -> TxnState {
        match &self.pending {
            Some(p) if p.fencing => TxnState::PrepareEpochFence,
            _ => self.current.state,
        }
    }

    /// Marks `target` as being written. The caller must hold no other write.
    pub fn begin_write(&mut self, target: TxnRecord, fencing: bool) {
        self.pending = Some(Pending { target, fencing });
    }

    /// The pending record was persisted: it becomes current.
    pub fn complete_write(&mut self) {
        if let Some(p) = self.pending.take() {
            self.current = p.target;
        }
    }

    /// The write failed: the metadata stays as it was.
    pub fn abort_write(&mut self) {
        self.pending = None;
    }

    /// No transaction running or pending and idle for at least
    /// `transactional.id.expiration.ms`: the id is removed (a tombstone is
    /// written) and a later InitProducerId starts afresh (Kafka
    /// `removeExpiredTransactionalIds`).
    pub fn is_expired(&self, now: i64, expiration_ms: i64) -> bool {
        self.pending.is_none()
            && matches!(
                self.current.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            )
            && now.saturating_sub(self.current.last_update_timestamp) >= expiration_ms
    }

    /// Ongoing for longer than its timeout, with nothing pending: the
    /// coordinator aborts it with an epoch bump ([`fence`]).
    pub fn is_timed_out(&self, now: i64) -> bool {
        self.pending.is_none()
            && self.current.state == TxnState::Ongoing
            && self.current.start_timestamp >= 0
            && now > self.current.start_timestamp + i64::from(self.current.timeout_ms)
    }
}

/// A new transactional id's first metadata (not yet persisted); `None` for
/// the broker's placeholder before a producer id is allocated.
pub fn new_metadata(
    transactional_id: &str,
    producer_id: Option<ProducerId>,
    timeout_ms: i32,
    now: i64,
) -> TxnMetadata {
    TxnMetadata {
        transactional_id: transactional_id.to_string(),
        current: TxnRecord {
            producer_id,
            previous_producer_id: None,
            producer_epoch: None,
            last_producer_epoch: None,
            next_producer_id: None,
            transaction_version: 0,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_timestamp: -1,
            last_update_timestamp: now,
        },
        pending: None,
    }
}

/// InitProducerId for a transactional id (Kafka `handleInitProducerId`).
/// `meta` is `None` for an id never seen (or expired); metadata without a
/// producer id (the broker's placeholder, nothing persisted) is the same.
/// `fresh_producer_id` is a newly allocated id when the caller has one.
#[allow(clippy::too_many_arguments)]
pub fn init_producer_id(
    meta: Option<&TxnMetadata>,
    transactional_id: &str,
    timeout_ms: i32,
    max_timeout_ms: i32,
    expected: Option<ProducerIdAndEpoch>,
    fresh_producer_id: Option<ProducerId>,
    server_tv2: bool,
    now: i64,
) -> Result<InitOutcome, ErrorCode> {
    if timeout_ms <= 0 || timeout_ms > max_timeout_ms {
        return Err(ErrorCode::InvalidTransactionTimeout);
    }
    let new_id = || {
        let Some(pid) = fresh_producer_id else {
            return Ok(InitOutcome::NeedProducerId);
        };
        let fresh = new_metadata(transactional_id, Some(pid), timeout_ms, now);
        bump_epoch(&fresh.current, pid, timeout_ms, None, now).map(InitOutcome::Grant)
    };
    let Some(meta) = meta else {
        return new_id();
    };
    if meta.pending.is_some() {
        return Err(ErrorCode::ConcurrentTransactions);
    }
    let cur = &meta.current;
    let Some(current_pid) = cur.producer_id else {
        return new_id();
    };
    // KIP-360: a client recovering from an error names the id and epoch it had.
    if let Some((pid, epoch)) = expected {
        let valid = cur.producer_epoch.is_none()
            || pid == current_pid
            || (Some(pid) == cur.previous_producer_id && epoch >= Some(MAX_BUMPABLE_EPOCH));
        if !valid {
            return Err(ErrorCode::ProducerFenced);
        }
    }
    match cur.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
            Err(ErrorCode::ConcurrentTransactions)
        }
        TxnState::Dead => Err(ErrorCode::ConcurrentTransactions),
        TxnState::Ongoing => Ok(InitOutcome::FenceOngoing(fence(cur, now, server_tv2))),
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let exhausted = cur.producer_epoch >= Some(MAX_BUMPABLE_EPOCH);
            if exhausted && expected.is_none_or(|(_, e)| e == cur.producer_epoch) {
                // Rotate to a new producer id at epoch 0.
                let Some(new_pid) = fresh_producer_id else {
                    return Ok(InitOutcome::NeedProducerId);
                };
                let record = TxnRecord {
                    producer_id: Some(new_pid),
                    previous_producer_id: Some(current_pid),
                    producer_epoch: Some(ProducerEpoch::ZERO),
                    last_producer_epoch: None,
                    next_producer_id: None,
                    transaction_version: cur.transaction_version,
                    timeout_ms,
                    state: TxnState::Empty,
                    partitions: BTreeSet::new(),
                    start_timestamp: -1,
                    last_update_timestamp: now,
                };
                return Ok(InitOutcome::Grant(Step::Write {
                    record,
                    respond: (new_pid, ProducerEpoch::ZERO),
                }));
            }
            if let (Some((pid, _)), Some(epoch)) = (expected, cur.producer_epoch) {
                if Some(pid) == cur.previous_producer_id && pid != current_pid {
                    // The rotation's answer was lost: hand out the new id again.
                    return Ok(InitOutcome::Grant(Step::Respond((current_pid, epoch))));
                }
            }
            bump_epoch(cur, current_pid, timeout_ms, expected, now).map(InitOutcome::Grant)
        }
    }
}

/// The epoch after a bump: 0 from none, saturating at the highest.
fn bumped(epoch: Option<ProducerEpoch>) -> ProducerEpoch {
    epoch.map_or(ProducerEpoch::ZERO, ProducerEpoch::saturating_next)
}

/// Kafka's `prepareIncrementProducerEpoch`: bump (remembering the old epoch
/// when the client named it), or a retry of a bump whose answer was lost.
/// `producer_id` is `cur`'s.
fn bump_epoch(
    cur: &TxnRecord,
    producer_id: ProducerId,
    timeout_ms: i32,
    expected: Option<ProducerIdAndEpoch>,
    now: i64,
) -> Result<Step<(ProducerId, ProducerEpoch)>, ErrorCode> {
    let bumped = bumped(cur.producer_epoch);
    let (epoch, last_epoch) = match (expected, cur.producer_epoch) {
        (None, _) => (bumped, None),
        (Some(_), None) => (bumped, None),
        (Some((_, e)), Some(current)) if e == Some(current) => (bumped, Some(current)),
        (Some((_, e)), Some(current)) if e == cur.last_producer_epoch => {
            return Ok(Step::Respond((producer_id, current)));
        }
        (Some(_), Some(_)) => return Err(ErrorCode::ProducerFenced),
    };
    let record = TxnRecord {
        producer_epoch: Some(epoch),
        last_producer_epoch: last_epoch,
        timeout_ms,
        state: TxnState::Empty,
        partitions: BTreeSet::new(),
        start_timestamp: -1,
        last_update_timestamp: now,
        ..cur.clone()
    };
    Ok(Step::Write {
        respond: (producer_id, epoch),
        record,
    })
}

/// The fencing abort of an ongoing transaction (InitProducerId from a new
/// instance, or the transaction timed out): PrepareAbort with the epoch
/// bumped, so markers and the old producer's later requests are fenced.
///
/// The abort is the coordinator's own, so Kafka runs it at the cluster's
/// finalized `transaction.version`, whatever the client's (`server_tv2`:
/// level 2 or above). At 2 the epoch before the bump stays the last one, so
/// the fenced producer recovers with InitProducerId naming it (KIP-360);
/// below, the fence forgets it and that InitProducerId is PRODUCER_FENCED
/// (both measured on Kafka 4.4, tests/differential.rs).
pub fn fence(cur: &TxnRecord, now: i64, server_tv2: bool) -> TxnRecord {
    let mut record = cur.transition(TxnState::PrepareAbort, now);
    if cur.producer_epoch < Some(ProducerEpoch::MAX) {
        record.producer_epoch = Some(bumped(cur.producer_epoch));
        record.last_producer_epoch = if server_tv2 { cur.producer_epoch } else { None };
    }
    record
}

/// The checks every client request about a running transaction makes first
/// (producer id mapping, epoch equality, nothing pending), in Kafka's order.
/// The request's id and epoch are `None` where it carries the wire's -1.
fn check_producer(
    meta: &TxnMetadata,
    producer_id: Option<ProducerId>,
    producer_epoch: Option<ProducerEpoch>,
) -> Result<(), ErrorCode> {
    // A request without a producer id never matches: not even the broker's
    // placeholder, whose id is not allocated yet (Kafka allocates the id
    // with the metadata, so -1 never maps to a transaction there either).
    if producer_id.is_none() || producer_id != meta.current.producer_id {
        return Err(ErrorCode::InvalidProducerIdMapping);
    }
    if producer_epoch != meta.current.producer_epoch {
        return Err(ErrorCode::ProducerFenced);
    }
    if meta.pending.is_some() {
        return Err(ErrorCode::ConcurrentTransactions);
    }
    Ok(())
}

/// AddPartitionsToTxn / AddOffsetsToTxn (Kafka `handleAddPartitionsToTransaction`).
/// `transaction_version` is 2 when a broker adds the partition for a
/// KIP-890 part 2 client (AddPartitionsToTxn v5 from a partition leader or
/// the group coordinator).
pub fn add_partitions(
    meta: &TxnMetadata,
    producer_id: Option<ProducerId>,
    producer_epoch: Option<ProducerEpoch>,
    partitions: &[TopicPartition],
    transaction_version: i16,
    now: i64,
) -> Result<Step<()>, ErrorCode> {
    check_producer(meta, producer_id, producer_epoch)?;
    let cur = &meta.current;
    match cur.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
            Err(ErrorCode::ConcurrentTransactions)
        }
        TxnState::Dead => Err(ErrorCode::InvalidTxnState),
        TxnState::Ongoing if partitions.iter().all(|p| cur.partitions.contains(p)) => {
            Ok(Step::Respond(()))
        }
        TxnState::Ongoing
        | TxnState::Empty
        | TxnState::CompleteCommit
        | TxnState::CompleteAbort => {
            let mut record = cur.transition(TxnState::Ongoing, now);
            if cur.state != TxnState::Ongoing {
                record.partitions.clear();
                record.start_timestamp = now;
                record.transaction_version = transaction_version;
            }
            record.partitions.extend(partitions.iter().cloned());
            Ok(Step::Write {
                record,
                respond: (),
            })
        }
    }
}

/// KIP-890 part 1: the verify-only AddPartitionsToTxn a partition leader sends
/// before appending a transactional batch: the partition must be in the
/// producer's ongoing transaction.
pub fn verify_partition(
    meta: &TxnMetadata,
    producer_id: Option<ProducerId>,
    producer_epoch: Option<ProducerEpoch>,
    partition: &TopicPartition,
) -> Result<(), ErrorCode> {
    if producer_id.is_none() || producer_id != meta.current.producer_id {
        return Err(ErrorCode::InvalidProducerIdMapping);
    }
    if producer_epoch != meta.current.producer_epoch {
        return Err(ErrorCode::ProducerFenced);
    }
    // The transaction is ending (a Prepare or fence being written).
    if meta
        .pending
        .as_ref()
        .is_some_and(|p| p.target.state != TxnState::Ongoing)
    {
        return Err(ErrorCode::ConcurrentTransactions);
    }
    if meta.current.state != TxnState::Ongoing || !meta.current.partitions.contains(partition) {
        return Err(ErrorCode::InvalidTxnState);
    }
    Ok(())
}

/// EndTxn (Kafka `endTransaction`), checks in order: producer id mapping,
/// epoch (client requests need equality), a pending transition, then the state.
///
/// With `tv2` (EndTxn v5+, KIP-890 part 2) the prepare bumps the epoch, so the
/// markers fence every write of the ended transaction; the answer carries the
/// new epoch (or a new producer id when the epoch is exhausted: call again
/// with `fresh_producer_id`). A retry with the epoch before that bump finds
/// the transaction ended the same way and succeeds.
pub fn end_txn(
    meta: &TxnMetadata,
    producer_id: Option<ProducerId>,
    producer_epoch: Option<ProducerEpoch>,
    commit: bool,
    tv2: bool,
    fresh_producer_id: Option<ProducerId>,
    now: i64,
) -> Result<EndOutcome, ErrorCode> {
    let cur = &meta.current;
    let target = if commit {
        TxnState::PrepareCommit
    } else {
        TxnState::PrepareAbort
    };
    let same_end = matches!(
        (cur.state, commit),
        (TxnState::CompleteCommit, true)
            | (TxnState::CompleteAbort, false)
            | (TxnState::PrepareCommit, true)
            | (TxnState::PrepareAbort, false)
    );
    if tv2 && meta.pending.is_none() && same_end {
        // A retry of an EndTxn whose answer was lost: the epoch was bumped
        // (or the id rotated) by the first attempt.
        let retried_bump = producer_id == cur.producer_id
            && cur.last_producer_epoch.is_some()
            && producer_epoch == cur.last_producer_epoch;
        let retried_rotation = producer_id.is_some()
            && producer_id == cur.previous_producer_id
            && producer_epoch >= Some(MAX_BUMPABLE_EPOCH)
            && cur.producer_epoch == Some(ProducerEpoch::ZERO);
        if retried_bump || retried_rotation {
            return if cur.state.is_prepare() {
                Err(ErrorCode::ConcurrentTransactions)
            } else {
                Ok(EndOutcome::AlreadyDone)
            };
        }
    }
    check_producer(meta, producer_id, producer_epoch)?;
    let prepare = |fresh: Option<ProducerId>| -> Result<EndOutcome, ErrorCode> {
        let mut record = cur.transition(target, now);
        if tv2 {
            record.transaction_version = 2;
            if cur.producer_epoch >= Some(MAX_BUMPABLE_EPOCH) {
                let Some(next) = fresh else {
                    return Ok(EndOutcome::NeedProducerId);
                };
                record.next_producer_id = Some(next);
            }
            record.last_producer_epoch = cur.producer_epoch;
            record.producer_epoch = Some(bumped(cur.producer_epoch));
        }
        Ok(EndOutcome::Prepare(record))
    };
    match (cur.state, commit) {
        (TxnState::Ongoing, _) => prepare(fresh_producer_id),
        // KIP-890 part 2: aborting a transaction that added nothing still
        // bumps the epoch (how a client recovers from an abortable error).
        (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false) if tv2 => {
            prepare(fresh_producer_id)
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
            Ok(EndOutcome::AlreadyDone)
        }
        // While the markers of the ending transaction are written, Kafka
        // 4.4 answers either end with CONCURRENT_TRANSACTIONS (seen side by
        // side: an abort right after a commit); the client retries and, once
        // complete, gets AlreadyDone or INVALID_TXN_STATE. An INVALID_TXN_STATE
        // here failed franz-go's transactional sessions on a rebalance.
        (TxnState::PrepareCommit | TxnState::PrepareAbort, _) => {
            Err(ErrorCode::ConcurrentTransactions)
        }
        (TxnState::PrepareEpochFence, _) => Err(ErrorCode::ConcurrentTransactions),
        _ => Err(ErrorCode::InvalidTxnState),
    }
}

/// The producer id and epoch a client continues with after `record` (the
/// next id at epoch 0 once an exhausted epoch rotated it).
pub fn producer_after(record: &TxnRecord) -> (Option<ProducerId>, Option<ProducerEpoch>) {
    match record.next_producer_id {
        Some(next) => (Some(next), Some(ProducerEpoch::ZERO)),
        None => (record.producer_id, record.producer_epoch),
    }
}

/// Every marker of a Prepare state is written: CompleteCommit / CompleteAbort,
/// with the partitions cleared. `None` when not in a Prepare state.
pub fn complete(cur: &TxnRecord, now: i64) -> Option<TxnRecord> {
    let state = match cur.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        _ => return None,
    };
    let mut record = cur.transition(state, now);
    record.partitions.clear();
    record.start_timestamp = -1;
    if let Some(next) = cur.next_producer_id {
        // KIP-890 part 2 rotation: the client continues with the next id.
        record.previous_producer_id = cur.producer_id;
        record.producer_id = Some(next);
        record.next_producer_id = None;
        record.producer_epoch = Some(ProducerEpoch::ZERO);
        record.last_producer_epoch = None;
    }
    Some(record)
}

/// Whether a state transition is one the machine may make (for checks on
/// loaded records and in tests).
pub fn is_valid_transition(from: TxnState, to: TxnState) -> bool {
    to.can_follow(from)
}

//! Per-partition producer state: entries, the sequence check, and recording appends.

use std::collections::{BTreeMap, HashMap, VecDeque};

use strand_protocol::batch::{BatchHeader, ControlType, EndTxnMarker};
use strand_protocol::ErrorCode;
use strand_types::{Offset, ProducerEpoch, ProducerId, Sequence};
use thiserror::Error;

/// How many recent batches per producer are remembered for duplicate detection
/// (Kafka's `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`; clients cap in-flight
/// requests per connection at 5 with idempotence).
pub const MAX_REMEMBERED_BATCHES: usize = 5;

/// Sequence range and offsets of one appended batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// `None` for a batch without sequences (Kafka's `NO_SEQUENCE`, -1: a
    /// coordinator's transactional offsets carry none).
    pub first_seq: Option<Sequence>,
    pub last_seq: Option<Sequence>,
    pub first_offset: Offset,
    pub last_offset: Offset,
    /// Max timestamp of the batch (what Kafka returns for a duplicate).
    pub timestamp: i64,
}

/// State of one producer id on one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_id: ProducerId,
    /// `None` while no epoch is known (Kafka's `NO_PRODUCER_EPOCH`, -1, e.g.
    /// a batch that carried none). `None` sorts below every epoch, as -1
    /// does, which the sequence rules rely on.
    pub producer_epoch: Option<ProducerEpoch>,
    /// The last (at most [`MAX_REMEMBERED_BATCHES`]) batches of the current epoch, oldest first.
    pub batches: VecDeque<BatchMetadata>,
    /// Timestamp of the last batch or marker; drives expiration. -1 = none.
    pub last_timestamp: i64,
    /// Epoch of the transaction coordinator that wrote the last marker. -1 =
    /// none. Kept as the wire integer markers carry: an older one is fenced
    /// by comparing the integers, as Kafka does (-1 is below every epoch).
    pub coordinator_epoch: i32,
    /// First offset of the open transaction, if one is open.
    pub current_txn_first_offset: Option<Offset>,
}

impl ProducerEntry {
    /// An entry with an epoch and nothing else.
    pub fn new(producer_id: ProducerId, producer_epoch: Option<ProducerEpoch>) -> Self {
        ProducerEntry {
            producer_id,
            producer_epoch,
            batches: VecDeque::with_capacity(MAX_REMEMBERED_BATCHES),
            last_timestamp: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        }
    }

    /// Last sequence of the newest remembered batch; `None` without batches
    /// or when that batch has no sequences (Kafka's `NO_SEQUENCE`).
    pub fn last_seq(&self) -> Option<Sequence> {
        self.batches.back().and_then(|b| b.last_seq)
    }

    /// Last offset of the newest remembered batch, if any.
    pub fn last_offset(&self) -> Option<Offset> {
        self.batches.back().map(|b| b.last_offset)
    }

    /// The remembered batch with exactly this epoch and sequence range, if any.
    pub fn find_duplicate(
        &self,
        producer_epoch: Option<ProducerEpoch>,
        first_seq: Option<Sequence>,
        last_seq: Option<Sequence>,
    ) -> Option<BatchMetadata> {
        if producer_epoch != self.producer_epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
            .copied()
    }

    /// Moves to `epoch`; a different epoch forgets the remembered batches
    /// (Kafka's `maybeUpdateProducerEpoch`).
    fn update_epoch(&mut self, epoch: Option<ProducerEpoch>) {
        if self.producer_epoch != epoch {
            self.batches.clear();
            self.producer_epoch = epoch;
        }
    }

    fn add_batch(&mut self, epoch: Option<ProducerEpoch>, batch: BatchMetadata) {
        self.update_epoch(epoch);
        if self.batches.len() == MAX_REMEMBERED_BATCHES {
            self.batches.pop_front();
        }
        self.batches.push_back(batch);
        self.last_timestamp = batch.timestamp;
    }
}

/// Outcome of a successful check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// The batch is new and in sequence: append it.
    Append,
    /// The batch was already appended: answer with these offsets, append nothing.
    Duplicate(BatchMetadata),
}

/// Why a producer's batch or marker is rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProducerStateError {
    /// The batch's epoch is older than the one the partition has seen (a fenced
    /// zombie; `None`, no epoch, is older than any). Kafka >= 2.7 answers
    /// produce with `INVALID_PRODUCER_EPOCH`.
    // Messages print a missing value as the wire's -1, as Kafka's do.
    #[error(
        "producer epoch {} is older than the current epoch {current_epoch}",
        ProducerEpoch::to_wire(*.producer_epoch)
    )]
    InvalidProducerEpoch {
        producer_epoch: Option<ProducerEpoch>,
        current_epoch: ProducerEpoch,
    },
    /// The batch does not continue the producer's sequence.
    #[error(
        "out of order sequence for producer epoch {producer_epoch}: first sequence {}, expected {expected_seq}",
        Sequence::to_wire(*.first_seq)
    )]
    OutOfOrderSequence {
        producer_epoch: ProducerEpoch,
        first_seq: Option<Sequence>,
        expected_seq: Sequence,
    },
    /// A non-transactional batch arrived while the producer has an open transaction.
    #[error("expected a transactional batch from producer {producer_id}: a transaction is open")]
    InvalidTxnState { producer_id: ProducerId },
    /// A transactional batch verified before a marker for its producer was
    /// written would open a new transaction (Kafka's verification guard).
    #[error("producer {producer_id}'s transaction ended after this batch was verified")]
    TransactionNotVerified { producer_id: ProducerId },
    /// A transaction marker from an older coordinator epoch.
    #[error("coordinator epoch {coordinator_epoch} is older than the current {current_coordinator_epoch}")]
    TransactionCoordinatorFenced {
        coordinator_epoch: i32,
        current_coordinator_epoch: i32,
    },
}

impl ProducerStateError {
    /// The Kafka error code to put in the response.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ProducerStateError::InvalidProducerEpoch { .. } => ErrorCode::InvalidProducerEpoch,
            ProducerStateError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequenceNumber,
            ProducerStateError::InvalidTxnState { .. }
            | ProducerStateError::TransactionNotVerified { .. } => ErrorCode::InvalidTxnState,
            ProducerStateError::TransactionCoordinatorFenced { .. } => {
                ErrorCode::TransactionCoordinatorFenced
            }
        }
    }
}

/// Pure: checks one incoming client batch against the producer's entry
/// (`None` = the partition has no state for this producer). See the crate docs
/// for the rule table. The batch's epoch and sequences are `None` where its
/// header carries the wire's -1.
pub fn check_sequence(
    entry: Option<&ProducerEntry>,
    producer_epoch: Option<ProducerEpoch>,
    first_seq: Option<Sequence>,
    last_seq: Option<Sequence>,
) -> Result<SequenceCheck, ProducerStateError> {
    let Some(entry) = entry else {
        // Kafka 3.x: no state (never seen, expired, or removed with the log) -> accept any sequence.
        return Ok(SequenceCheck::Append);
    };
    if let Some(dup) = entry.find_duplicate(producer_epoch, first_seq, last_seq) {
        return Ok(SequenceCheck::Duplicate(dup));
    }
    let Some(current) = entry.producer_epoch else {
        // NO_PRODUCER_EPOCH: any sequence.
        return Ok(SequenceCheck::Append);
    };
    // A batch without an epoch is older than any (Kafka compares its -1).
    let epoch = match producer_epoch {
        Some(e) if e >= current => e,
        _ => {
            return Err(ProducerStateError::InvalidProducerEpoch {
                producer_epoch,
                current_epoch: current,
            })
        }
    };
    // A new epoch starts at 0; the same epoch continues the last remembered
    // batch (an entry without batches has no last sequence, Kafka's
    // NO_SEQUENCE, so expects 0).
    let expected_seq = if epoch != current {
        Sequence::ZERO
    } else {
        entry
            .last_seq()
            .map_or(Sequence::ZERO, Sequence::next_wrapping)
    };
    if first_seq == Some(expected_seq) {
        Ok(SequenceCheck::Append)
    } else {
        Err(ProducerStateError::OutOfOrderSequence {
            producer_epoch: epoch,
            first_seq,
            expected_seq,
        })
    }
}

/// A transaction ended by a marker: its offset range, for the aborted-transaction index / LSO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
    /// Offset of the marker.
    pub last_offset: Offset,
    /// Ended by an abort marker (its batches go into the aborted-transaction index).
    pub is_aborted: bool,
}

/// Pure: the last stable offset for a high watermark, the first offsets of the
/// open transactions, and the completed transactions. A transaction stays
/// unstable until its marker is below the HW (replicated), as Kafka keeps it
/// in `unreplicatedTxns`: LSO = min(HW, first offset of every open
/// transaction, first offset of every completed one whose marker offset is
/// `>= hw`).
pub fn last_stable_offset(
    hw: Offset,
    open_first_offsets: impl IntoIterator<Item = Offset>,
    completed: impl IntoIterator<Item = CompletedTxn>,
) -> Offset {
    let open = open_first_offsets.into_iter().min();
    let unreplicated = completed
        .into_iter()
        .filter(|t| t.last_offset >= hw)
        .map(|t| t.first_offset)
        .min();
    [Some(hw), open, unreplicated]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(hw)
}

/// What a transactional produce's verification saw (KIP-890's verification
/// guard): taken before the partition's state or the coordinator is asked,
/// and dropped when a marker for the producer ends the transaction it was
/// verified for. A batch that would open a transaction is appended only
/// while its guard is still the producer's, so a batch verified before a
/// marker and delayed past it cannot open a transaction at the old epoch
/// (which the producer's next commit would then commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationGuard(u64);

/// One producer's verification in progress (Kafka's `VerificationStateEntry`).
#[derive(Debug, Clone, Copy)]
struct Verification {
    guard: VerificationGuard,
    /// The highest epoch verified with this guard.
    epoch: Option<ProducerEpoch>,
    /// Verified for a transaction.version 2 client (produce v12+), whose
    /// every transaction ends with an epoch bump: a marker at the verified
    /// epoch then ended the previous transaction, not this one.
    supports_epoch_bump: bool,
    started_ms: i64,
}

/// The guards of the producers being verified on a leader. In memory only,
/// as Kafka's: not part of the state replicas agree on, so two states
/// compare equal whatever guards they hold.
#[derive(Debug, Clone, Default)]
pub struct VerificationGuards {
    by_producer: HashMap<ProducerId, Verification>,
}

/// Guards are numbered across the process, never per producer state: a
/// state rebuilt meanwhile (a follower's truncation, a restart of the
/// partition) must not issue a number a produce still holds from before.
static ISSUED_GUARDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl PartialEq for VerificationGuards {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for VerificationGuards {}

/// Producer state of one partition: producer id -> [`ProducerEntry`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStateManager {
    pub(crate) entries: HashMap<ProducerId, ProducerEntry>,
    /// Transactional produces being verified (leader only).
    pub(crate) verifications: VerificationGuards,
    /// One past the last offset whose batch has been recorded (Kafka's `lastMapOffset`).
    pub(crate) map_end_offset: Offset,
    /// Transactions whose marker has been appended but not yet passed by the
    /// HW, by first offset. They still bound the LSO: a read_committed reader
    /// must not see a transaction's data before its marker is replicated
    /// (a new leader might not have the marker). Pruned by
    /// [`on_high_watermark`](Self::on_high_watermark).
    pub(crate) unreplicated: BTreeMap<Offset, CompletedTxn>,
}

impl ProducerStateManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks one batch of a produce request against the current state. Does not
    /// mutate. Batches without a producer id (`pid < 0`) always `Append`.
    pub fn check(&self, h: &BatchHeader) -> Result<SequenceCheck, ProducerStateError> {
        match ProducerBatch::of(h) {
            Some(b) => check_batch(self.entries.get(&b.producer_id), &b),
            None => Ok(SequenceCheck::Append),
        }
    }

    /// Starts (or joins) the verification of a transactional produce from
    /// `producer_id` at `producer_epoch` (`supports_epoch_bump`: a
    /// transaction.version 2 client): the guard its append must still hold,
    /// and whether the producer's transaction at that epoch is already open
    /// here (then the coordinator need not be asked). Concurrent
    /// verifications of one producer share a guard, as Kafka's do, so one
    /// cannot invalidate another; it is dropped by the producer's next
    /// transactional append or marker, or by [`expire`](Self::expire).
    pub fn start_verification(
        &mut self,
        producer_id: ProducerId,
        producer_epoch: Option<ProducerEpoch>,
        supports_epoch_bump: bool,
        now_ms: i64,
    ) -> (VerificationGuard, bool) {
        let open = self.entries.get(&producer_id).is_some_and(|e| {
            e.producer_epoch == producer_epoch && e.current_txn_first_offset.is_some()
        });
        let v = self
            .verifications
            .by_producer
            .entry(producer_id)
            .or_insert_with(|| {
                let issued = ISSUED_GUARDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Verification {
                    guard: VerificationGuard(issued),
                    epoch: producer_epoch,
                    supports_epoch_bump,
                    started_ms: now_ms,
                }
            });
        v.epoch = v.epoch.max(producer_epoch);
        (v.guard, open)
    }

    /// Whether a marker of `producer_id` at `marker_epoch` leaves the
    /// producer's verification standing: only a transaction.version 2
    /// verification at the marker's epoch, whose transaction is the next one
    /// (such a client's every marker carries the epoch its transaction ended
    /// with bumped, and its next transaction runs at that epoch). Every other
    /// marker ended the transaction a guard was taken for, or one before it.
    fn marker_keeps_verification(
        &self,
        producer_id: ProducerId,
        marker_epoch: Option<ProducerEpoch>,
    ) -> bool {
        self.verifications
            .by_producer
            .get(&producer_id)
            .is_some_and(|v| v.supports_epoch_bump && v.epoch == marker_epoch)
    }

    /// Checks a verified client batch: a transactional batch that would open
    /// a transaction (none is open for its producer at its epoch) must hold
    /// the producer's current guard; a marker written since its verification
    /// dropped it (Kafka answers INVALID_TXN_STATE).
    pub fn check_verification(
        &self,
        h: &BatchHeader,
        guard: VerificationGuard,
    ) -> Result<(), ProducerStateError> {
        let Some(b) = ProducerBatch::of(h).filter(|b| b.transactional) else {
            return Ok(());
        };
        let open = self
            .entries
            .get(&b.producer_id)
            .is_some_and(|e| e.producer_epoch == b.epoch && e.current_txn_first_offset.is_some());
        let current = self.verifications.by_producer.get(&b.producer_id);
        if open || current.is_some_and(|v| v.guard == guard) {
            Ok(())
        } else {
            Err(ProducerStateError::TransactionNotVerified {
                producer_id: b.producer_id,
            })
        }
    }

    /// Checks all batches of one partition's record set, as Kafka's
    /// `analyzeAndValidateProducerState` does: each batch is checked against the
    /// state updated by the batches before it, duplicates are looked up in the
    /// state before the request, and the first duplicate makes the whole record
    /// set a duplicate. `base_offset`s need not be assigned yet.
    pub fn check_batches(
        &self,
        headers: &[BatchHeader],
    ) -> Result<SequenceCheck, ProducerStateError> {
        let mut scratch: HashMap<ProducerId, ProducerEntry> = HashMap::new();
        for b in headers.iter().filter_map(ProducerBatch::of) {
            let before = self.entries.get(&b.producer_id);
            if let Some(dup) =
                before.and_then(|e| e.find_duplicate(b.epoch, b.first_seq, b.last_seq))
            {
                return Ok(SequenceCheck::Duplicate(dup));
            }
            let current = scratch.get(&b.producer_id).or(before);
            check_batch(current, &b)?;
            let mut updated = current
                .cloned()
                .unwrap_or_else(|| ProducerEntry::new(b.producer_id, b.epoch));
            // Offsets are not assigned yet: the scratch entries are read for
            // epochs, sequences and whether a transaction is open, never
            // for offsets.
            apply_data_batch(&mut updated, &b, Offset::ZERO, Offset::ZERO, -1);
            scratch.insert(b.producer_id, updated);
        }
        Ok(SequenceCheck::Append)
    }

    /// Records an appended batch whose header carries its real base offset. Used
    /// after a leader append, on followers, and when replaying the log at
    /// start-up; it does not validate. `timestamp` is the batch's max timestamp.
    /// For a control batch, `marker` is what it says
    /// ([`end_txn_marker`](strand_protocol::batch::end_txn_marker)): it closes
    /// the producer's transaction and takes the marker's coordinator epoch. A
    /// control batch that could not be read (`None`) closes it as a commit
    /// keeping the entry's coordinator epoch: without a readable abort there
    /// is nothing to index. Data batches ignore `marker`. Returns the
    /// transaction a marker closed. A header whose offsets are negative
    /// (not log positions: the base offset lies outside the CRC) records
    /// nothing.
    pub fn record(
        &mut self,
        h: &BatchHeader,
        timestamp: i64,
        marker: Option<EndTxnMarker>,
    ) -> Option<CompletedTxn> {
        if let Some(next) = Offset::from_wire(h.next_offset()) {
            self.map_end_offset = self.map_end_offset.max(next);
        }
        let b = ProducerBatch::of(h)?;
        let first_offset = Offset::from_wire(h.base_offset)?;
        if h.is_control() {
            let marker = marker.unwrap_or_else(|| EndTxnMarker {
                control: ControlType::Commit,
                coordinator_epoch: self
                    .entries
                    .get(&b.producer_id)
                    .map_or(-1, |e| e.coordinator_epoch),
            });
            return self.record_end_txn_marker(
                b.producer_id,
                b.epoch,
                marker.coordinator_epoch,
                first_offset,
                timestamp,
                marker.control,
            );
        }
        let last_offset = Offset::from_wire(h.last_offset())?;
        if b.transactional {
            // Its transaction is open now: later batches need no guard.
            self.verifications.by_producer.remove(&b.producer_id);
        }
        let entry = self
            .entries
            .entry(b.producer_id)
            .or_insert_with(|| ProducerEntry::new(b.producer_id, b.epoch));
        apply_data_batch(entry, &b, first_offset, last_offset, timestamp);
        None
    }

    /// Checks a coordinator's transactional batch (TxnOffsetCommit records):
    /// no sequence check (they carry none), only an older epoch is fenced
    /// (Kafka's `AppendOrigin.Coordinator`).
    pub fn check_coordinator_batch(
        &self,
        producer_id: ProducerId,
        producer_epoch: Option<ProducerEpoch>,
    ) -> Result<(), ProducerStateError> {
        let current = self
            .entries
            .get(&producer_id)
            .and_then(|e| e.producer_epoch);
        check_not_older(producer_epoch, current)
    }

    /// Checks a transaction marker (WriteTxnMarkers) before it is appended;
    /// `transaction_version` is the marker's (WriteTxnMarkers v2; 0 before).
    pub fn check_end_txn_marker(
        &self,
        producer_id: ProducerId,
        producer_epoch: Option<ProducerEpoch>,
        coordinator_epoch: i32,
        transaction_version: i16,
    ) -> Result<(), ProducerStateError> {
        let Some(entry) = self.entries.get(&producer_id) else {
            return Ok(());
        };
        check_marker_epoch(
            producer_epoch,
            entry.producer_epoch,
            entry.current_txn_first_offset.is_some(),
            transaction_version,
        )?;
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(ProducerStateError::TransactionCoordinatorFenced {
                coordinator_epoch,
                current_coordinator_epoch: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Records an appended commit/abort marker at `marker_offset`; returns the
    /// transaction it closed, if one was open. The closed transaction stays
    /// unstable (bounds the LSO) until the HW passes the marker.
    pub fn record_end_txn_marker(
        &mut self,
        producer_id: ProducerId,
        producer_epoch: Option<ProducerEpoch>,
        coordinator_epoch: i32,
        marker_offset: Offset,
        timestamp: i64,
        control: ControlType,
    ) -> Option<CompletedTxn> {
        self.map_end_offset = self.map_end_offset.max(marker_offset.next());
        // A produce verified before this marker no longer opens a transaction.
        if !self.marker_keeps_verification(producer_id, producer_epoch) {
            self.verifications.by_producer.remove(&producer_id);
        }
        let entry = self
            .entries
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::new(producer_id, producer_epoch));
        entry.update_epoch(producer_epoch);
        entry.coordinator_epoch = coordinator_epoch;
        entry.last_timestamp = timestamp;
        let completed = entry
            .current_txn_first_offset
            .take()
            .map(|first_offset| CompletedTxn {
                producer_id,
                first_offset,
                last_offset: marker_offset,
                is_aborted: control == ControlType::Abort,
            })?;
        self.unreplicated.insert(completed.first_offset, completed);
        Some(completed)
    }

    /// The HW moved to `hw`: transactions whose marker is below it are
    /// replicated and no longer bound the LSO (Kafka's
    /// `onHighWatermarkUpdated`).
    pub fn on_high_watermark(&mut self, hw: Offset) {
        self.unreplicated.retain(|_, t| t.last_offset >= hw);
    }

    /// The LSO for high watermark `hw` (see [`last_stable_offset`]).
    pub fn last_stable_offset(&self, hw: Offset) -> Offset {
        last_stable_offset(
            hw,
            self.entries
                .values()
                .filter_map(|e| e.current_txn_first_offset),
            self.unreplicated.values().copied(),
        )
    }

    /// The `last_stable_offset` an aborted-transaction index entry records for
    /// `completed` (Kafka's `lastStableOffset(completedTxn)`): the first offset
    /// of the earliest transaction still open, or one past the marker when
    /// none is. Independent of the HW, so a leader, its followers and a replay
    /// all derive the same entry. Call it after recording the marker.
    pub fn stable_offset_after(&self, completed: &CompletedTxn) -> Offset {
        self.entries
            .values()
            .filter(|e| e.producer_id != completed.producer_id)
            .filter_map(|e| e.current_txn_first_offset)
            .min()
            .unwrap_or(completed.last_offset.next())
    }

    /// Completed transactions whose markers the HW has not passed yet, by first offset.
    pub fn unreplicated_txns(&self) -> impl Iterator<Item = &CompletedTxn> {
        self.unreplicated.values()
    }

    /// Notes that the log now ends at `offset` (e.g. after appending batches
    /// without a producer id through another path).
    pub fn update_map_end_offset(&mut self, offset: Offset) {
        self.map_end_offset = self.map_end_offset.max(offset);
    }

    /// One past the last recorded offset; a snapshot taken now covers `[0, map_end_offset)`.
    pub fn map_end_offset(&self) -> Offset {
        self.map_end_offset
    }

    pub fn entry(&self, producer_id: ProducerId) -> Option<&ProducerEntry> {
        self.entries.get(&producer_id)
    }

    pub fn entries(&self) -> impl Iterator<Item = &ProducerEntry> {
        self.entries.values()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// First offset of the earliest unstable transaction on this partition:
    /// open, or completed with its marker not yet below the HW (bounds the LSO).
    pub fn first_unstable_offset(&self) -> Option<Offset> {
        let open = self
            .entries
            .values()
            .filter_map(|e| e.current_txn_first_offset)
            .min();
        let unreplicated = self.unreplicated.keys().next().copied();
        open.into_iter().chain(unreplicated).min()
    }

    /// Removes producers idle for at least `producer_id_expiration_ms`
    /// (`producer.id.expiration.ms`, default 1 day) that have no open
    /// transaction, as Kafka's `removeExpiredProducers` does, and
    /// verifications started as long ago (one that failed is not dropped
    /// at once: another verification may share its guard). Returns how many
    /// producers.
    pub fn expire(&mut self, now_ms: i64, producer_id_expiration_ms: i64) -> usize {
        self.verifications
            .by_producer
            .retain(|_, v| now_ms.saturating_sub(v.started_ms) < producer_id_expiration_ms);
        let before = self.entries.len();
        self.entries.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp) < producer_id_expiration_ms
        });
        before - self.entries.len()
    }
}

/// What producer state reads of a batch header with a producer id, in
/// domain types: the header's -1s (no epoch, no sequence) are `None`.
#[derive(Debug, Clone, Copy)]
struct ProducerBatch {
    producer_id: ProducerId,
    epoch: Option<ProducerEpoch>,
    first_seq: Option<Sequence>,
    last_seq: Option<Sequence>,
    transactional: bool,
}

impl ProducerBatch {
    /// `None` for a batch without a producer id (not idempotent).
    fn of(h: &BatchHeader) -> Option<ProducerBatch> {
        Some(ProducerBatch {
            producer_id: ProducerId::from_wire(h.producer_id)?,
            epoch: ProducerEpoch::from_wire(h.producer_epoch),
            first_seq: Sequence::from_wire(h.base_sequence),
            // The header wraps at i32::MAX as Kafka does.
            last_seq: Sequence::from_wire(h.last_sequence()),
            transactional: h.is_transactional(),
        })
    }
}

/// INVALID_PRODUCER_EPOCH for an epoch older than `current` (none is older
/// than any); nothing to compare with when the entry has no epoch.
/// The producer epoch a transaction marker must carry. A transaction.version
/// 2 coordinator bumps the epoch before it writes a transaction's markers,
/// and the producer's next transaction writes at that bumped epoch; so a
/// valid marker's epoch is strictly above the epoch the partition has seen
/// (the transaction's data). A marker at the current epoch is a late or
/// repeated marker of the previous transaction: written again, harmless,
/// when no transaction is open, but refused while one is (it would end the
/// next transaction, under the previous one's outcome). Markers of the
/// classic protocol carry the transaction's own epoch: not older is enough.
/// (Kafka's `ProducerAppendInfo.checkProducerEpoch`, KAFKA-19999.)
pub fn check_marker_epoch(
    marker_epoch: Option<ProducerEpoch>,
    current: Option<ProducerEpoch>,
    transaction_open: bool,
    transaction_version: i16,
) -> Result<(), ProducerStateError> {
    let Some(current) = current else {
        return Ok(());
    };
    let invalid = if transaction_version >= 2 {
        marker_epoch <= Some(current)
    } else {
        marker_epoch < Some(current)
    };
    let repeated = transaction_version >= 2 && marker_epoch == Some(current) && !transaction_open;
    if invalid && !repeated {
        return Err(ProducerStateError::InvalidProducerEpoch {
            producer_epoch: marker_epoch,
            current_epoch: current,
        });
    }
    Ok(())
}

fn check_not_older(
    producer_epoch: Option<ProducerEpoch>,
    current: Option<ProducerEpoch>,
) -> Result<(), ProducerStateError> {
    match current {
        Some(current) if producer_epoch < Some(current) => {
            Err(ProducerStateError::InvalidProducerEpoch {
                producer_epoch,
                current_epoch: current,
            })
        }
        _ => Ok(()),
    }
}

fn check_batch(
    entry: Option<&ProducerEntry>,
    b: &ProducerBatch,
) -> Result<SequenceCheck, ProducerStateError> {
    let result = check_sequence(entry, b.epoch, b.first_seq, b.last_seq)?;
    if result == SequenceCheck::Append
        && !b.transactional
        && entry.is_some_and(|e| e.current_txn_first_offset.is_some())
    {
        return Err(ProducerStateError::InvalidTxnState {
            producer_id: b.producer_id,
        });
    }
    Ok(result)
}

fn apply_data_batch(
    entry: &mut ProducerEntry,
    b: &ProducerBatch,
    first_offset: Offset,
    last_offset: Offset,
    timestamp: i64,
) {
    entry.add_batch(
        b.epoch,
        BatchMetadata {
            first_seq: b.first_seq,
            last_seq: b.last_seq,
            first_offset,
            last_offset,
            timestamp,
        },
    );
    if b.transactional && entry.current_txn_first_offset.is_none() {
        entry.current_txn_first_offset = Some(first_offset);
    }
}

//! Idempotent-producer state for one partition, and the transaction
//! coordinator's state machine.
//!
//! This crate holds the pure rules of Kafka's idempotent producer
//! (Kafka 3.7 `ProducerStateManager` / `ProducerAppendInfo` / `ProducerStateEntry`
//! semantics). Producer-id blocks come from the controller
//! (`AllocateProducerIds`). It does no I/O: the log
//! crate calls [`ProducerStateManager::check`] before an append, appends, then
//! calls [`ProducerStateManager::record`] with the offsets the log assigned, and
//! persists [`ProducerStateManager::snapshot`] bytes next to its segments.
//!
//! # Sequence rules ([`check_sequence`])
//! Per (producer id, partition) the broker remembers the producer epoch and the
//! last [`MAX_REMEMBERED_BATCHES`] batches (sequence range and offsets).
//!
//! | state | incoming batch | result |
//! |---|---|---|
//! | no entry (never seen, or expired) | any sequence | `Append` (Kafka 3.x accepts; KIP-360 retired `UNKNOWN_PRODUCER_ID` on this path) |
//! | entry epoch is `None` (Kafka's `NO_PRODUCER_EPOCH`, -1) | any sequence | `Append` |
//! | same epoch, identical `(first_seq, last_seq)` to a remembered batch | | `Duplicate(original metadata)` – nothing is appended, the original offsets are returned |
//! | `epoch < current` (a batch without an epoch, -1, is older than any) | | `INVALID_PRODUCER_EPOCH` (47); Kafka >= 2.7 answers produce with this, not `PRODUCER_FENCED` |
//! | `epoch > current` | `first_seq == 0` | `Append` |
//! | `epoch > current` | `first_seq != 0` | `OUT_OF_ORDER_SEQUENCE_NUMBER` (45) |
//! | same epoch | `first_seq == last remembered last_seq + 1` (`i32::MAX` wraps to 0) | `Append` |
//! | same epoch, entry has no batches (e.g. after an epoch-bumping marker) | `first_seq == 0` | `Append` (Kafka compares with `NO_SEQUENCE` = -1, here `None`, so only 0 is in sequence) |
//! | same epoch | anything else | `OUT_OF_ORDER_SEQUENCE_NUMBER` (45) |
//!
//! [`ProducerStateManager::check`] adds Kafka's transactional rule: a
//! non-transactional batch from a producer with an open transaction is
//! `INVALID_TXN_STATE` (48).
//!
//! # Transactions and the LSO
//! A transactional batch opens the producer's transaction on the partition
//! (its first offset is `current_txn_first_offset`); a commit or abort
//! marker closes it ([`ProducerStateManager::record_end_txn_marker`], or
//! [`ProducerStateManager::record`] with the marker's
//! [`ControlType`](strand_protocol::batch::ControlType)) and returns a
//! [`CompletedTxn`]. A completed transaction stays unstable until the HW passes
//! its marker ([`ProducerStateManager::on_high_watermark`] prunes), so
//! [`last_stable_offset`] = min(HW, first offset of every open transaction
//! and of every completed one whose marker is at or above the HW).
//!
//! # Truncation
//! There is no in-place `truncate_to`: like Kafka's `truncateAndReload`, the log
//! rebuilds the state after a truncation to offset `o` by loading the newest
//! snapshot whose [`ProducerStateManager::map_end_offset`] is `<= o` (or
//! [`ProducerStateManager::new`]) and replaying the batches in `[map_end_offset, o)`
//! through [`ProducerStateManager::record`]. Removing batches from an entry in
//! place cannot restore the older batches that the five-batch window forgot.
//!
//! # Types
//! Offsets, producer ids, producer epochs and sequences are the
//! `strand_types` newtypes; a missing one (Kafka's -1) is `None`. They are
//! read from the wire where this crate reads a protocol
//! [`BatchHeader`](strand_protocol::batch::BatchHeader), and converted in the
//! snapshot and `__transaction_state` codecs, whose bytes are unchanged.
//! Coordinator epochs and timestamps stay integers (-1 = none).
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod coordinator;
mod producer_state;
pub mod shard;
mod snapshot;
pub mod txn_log;

pub use producer_state::{
    check_marker_epoch, check_sequence, last_stable_offset, BatchMetadata, CompletedTxn,
    ProducerEntry, ProducerStateError, ProducerStateManager, SequenceCheck, VerificationGuard,
    MAX_REMEMBERED_BATCHES,
};
pub use snapshot::{SnapshotError, SNAPSHOT_VERSION};

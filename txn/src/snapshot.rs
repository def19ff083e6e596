//! Binary snapshot of a [`ProducerStateManager`].
//!
//! Layout (big-endian), version 2:
//! ```text
//! version i16 | crc u32 (CRC32C of every byte after this field)
//! map_end_offset i64 | entry_count i32
//! entry_count x {
//!   producer_id i64 | producer_epoch i16 | last_timestamp i64 | coordinator_epoch i32
//!   current_txn_first_offset i64 (-1 = none) | batch_count i8 (0..=5)
//!   batch_count x { first_seq i32 | last_seq i32 | first_offset i64 | last_offset i64 | timestamp i64 }
//! }
//! unreplicated_count i32
//! unreplicated_count x { producer_id i64 | first_offset i64 | last_offset i64 | aborted i8 (0/1) }
//! ```
//! Version 1 is the same without the unreplicated section; it still loads
//! (with no unreplicated transactions, as written before transactions
//! existed). The unreplicated section keeps completed transactions whose
//! marker the HW had not passed when the snapshot was taken, so after a
//! restart they still bound the LSO until the HW passes them.
//! Unlike Kafka's snapshot (which keeps only each producer's last batch) all
//! remembered batches are stored, so duplicate detection survives a restart.
//! Entries are written in producer-id order, so equal states give equal bytes.
//!
//! The fields are the wire integers of the domain types: a missing epoch,
//! sequence or transaction offset is written as -1 and read back as `None`
//! (any negative value reads as `None`). Producer ids and offsets are never
//! missing: a negative one is a malformed snapshot.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::{Buf, BufMut};
use strand_types::{Offset, ProducerEpoch, ProducerId, Sequence};
use thiserror::Error;

use crate::producer_state::{
    BatchMetadata, CompletedTxn, ProducerEntry, ProducerStateManager, MAX_REMEMBERED_BATCHES,
};

/// The snapshot format version written by [`ProducerStateManager::snapshot`].
pub const SNAPSHOT_VERSION: i16 = 2;
/// The format before transactions: no unreplicated section.
const SNAPSHOT_VERSION_1: i16 = 1;

const HEADER_LEN: usize = 2 + 4;
const ENTRY_FIXED_LEN: usize = 8 + 2 + 8 + 4 + 8 + 1;
const BATCH_LEN: usize = 4 + 4 + 8 + 8 + 8;
const COMPLETED_LEN: usize = 8 + 8 + 8 + 1;

/// A snapshot that cannot be loaded; the caller rebuilds the state from the log.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SnapshotError {
    #[error("producer snapshot truncated")]
    Truncated,
    #[error("unsupported producer snapshot version {0}")]
    UnsupportedVersion(i16),
    #[error("producer snapshot CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("malformed producer snapshot: {0}")]
    Malformed(&'static str),
}

impl ProducerStateManager {
    /// Serialises the state (see the module docs for the format).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut ids: Vec<&ProducerId> = self.entries.keys().collect();
        ids.sort_unstable();
        let mut body = Vec::with_capacity(12 + ids.len() * (ENTRY_FIXED_LEN + BATCH_LEN));
        body.put_i64(self.map_end_offset.get());
        body.put_i32(ids.len() as i32);
        for id in ids {
            let e = &self.entries[id];
            body.put_i64(e.producer_id.get());
            body.put_i16(ProducerEpoch::to_wire(e.producer_epoch));
            body.put_i64(e.last_timestamp);
            body.put_i32(e.coordinator_epoch);
            body.put_i64(Offset::to_wire(e.current_txn_first_offset));
            body.put_i8(e.batches.len() as i8);
            for b in &e.batches {
                body.put_i32(Sequence::to_wire(b.first_seq));
                body.put_i32(Sequence::to_wire(b.last_seq));
                body.put_i64(b.first_offset.get());
                body.put_i64(b.last_offset.get());
                body.put_i64(b.timestamp);
            }
        }
        body.put_i32(self.unreplicated.len() as i32);
        for t in self.unreplicated.values() {
            body.put_i64(t.producer_id.get());
            body.put_i64(t.first_offset.get());
            body.put_i64(t.last_offset.get());
            body.put_i8(t.is_aborted as i8);
        }
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.put_i16(SNAPSHOT_VERSION);
        out.put_u32(crc32c::crc32c(&body));
        out.extend_from_slice(&body);
        out
    }

    /// Loads a snapshot written by [`snapshot`](Self::snapshot). Any damage
    /// (truncation, bit flips, unknown version, trailing bytes) is an error.
    pub fn from_snapshot(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let mut buf = bytes;
        need(buf, HEADER_LEN)?;
        let version = buf.get_i16();
        if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_1 {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let stored = buf.get_u32();
        let computed = crc32c::crc32c(buf);
        if stored != computed {
            return Err(SnapshotError::CrcMismatch { stored, computed });
        }
        need(buf, 12)?;
        let map_end_offset = offset(buf.get_i64())?;
        let count = buf.get_i32();
        if count < 0 {
            return Err(SnapshotError::Malformed("negative entry count"));
        }
        let mut entries = HashMap::with_capacity((count as usize).min(buf.len() / ENTRY_FIXED_LEN));
        for _ in 0..count {
            need(buf, ENTRY_FIXED_LEN)?;
            let producer_id = producer_id(buf.get_i64())?;
            let producer_epoch = ProducerEpoch::from_wire(buf.get_i16());
            let last_timestamp = buf.get_i64();
            let coordinator_epoch = buf.get_i32();
            let txn_first = Offset::from_wire(buf.get_i64());
            let batch_count = buf.get_i8();
            if !(0..=MAX_REMEMBERED_BATCHES as i8).contains(&batch_count) {
                return Err(SnapshotError::Malformed("batch count out of range"));
            }
            need(buf, batch_count as usize * BATCH_LEN)?;
            let batches = (0..batch_count)
                .map(|_| {
                    Ok(BatchMetadata {
                        first_seq: Sequence::from_wire(buf.get_i32()),
                        last_seq: Sequence::from_wire(buf.get_i32()),
                        first_offset: offset(buf.get_i64())?,
                        last_offset: offset(buf.get_i64())?,
                        timestamp: buf.get_i64(),
                    })
                })
                .collect::<Result<VecDeque<BatchMetadata>, SnapshotError>>()?;
            let entry = ProducerEntry {
                producer_id,
                producer_epoch,
                batches,
                last_timestamp,
                coordinator_epoch,
                current_txn_first_offset: txn_first,
            };
            if entries.insert(producer_id, entry).is_some() {
                return Err(SnapshotError::Malformed("duplicate producer id"));
            }
        }
        let mut unreplicated = BTreeMap::new();
        if version >= SNAPSHOT_VERSION {
            need(buf, 4)?;
            let count = buf.get_i32();
            if count < 0 {
                return Err(SnapshotError::Malformed("negative unreplicated count"));
            }
            for _ in 0..count {
                need(buf, COMPLETED_LEN)?;
                let t = CompletedTxn {
                    producer_id: producer_id(buf.get_i64())?,
                    first_offset: offset(buf.get_i64())?,
                    last_offset: offset(buf.get_i64())?,
                    is_aborted: match buf.get_i8() {
                        0 => false,
                        1 => true,
                        _ => return Err(SnapshotError::Malformed("bad aborted flag")),
                    },
                };
                if unreplicated.insert(t.first_offset, t).is_some() {
                    return Err(SnapshotError::Malformed(
                        "duplicate unreplicated transaction",
                    ));
                }
            }
        }
        if buf.has_remaining() {
            return Err(SnapshotError::Malformed("trailing bytes"));
        }
        Ok(ProducerStateManager {
            entries,
            map_end_offset,
            unreplicated,
            verifications: Default::default(),
        })
    }
}

/// An offset field: never missing, so a negative one is damage.
fn offset(wire: i64) -> Result<Offset, SnapshotError> {
    Offset::from_wire(wire).ok_or(SnapshotError::Malformed("negative offset"))
}

/// A producer id field: state is kept only for batches with one.
fn producer_id(wire: i64) -> Result<ProducerId, SnapshotError> {
    ProducerId::from_wire(wire).ok_or(SnapshotError::Malformed("negative producer id"))
}

fn need(buf: &[u8], n: usize) -> Result<(), SnapshotError> {
    if buf.len() < n {
        Err(SnapshotError::Truncated)
    } else {
        Ok(())
    }
}

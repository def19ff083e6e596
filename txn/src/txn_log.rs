//! Records of `__transaction_state`: key = transactional id, value = the
//! [`TxnRecord`] (a tombstone when the id is removed).
//!
//! Layout (big-endian, Kafka's TransactionLogKey / TransactionLogValue v0,
//! followed by Strand's fields, which a v0 reader ignores):
//! ```text
//! key:   version i16 (0) | transactional_id string (i16 length)
//! value: version i16 (0) | producer_id i64 | producer_epoch i16 | timeout_ms i32
//!        | state i8 | partitions: i32 count x { topic string | i32 count x partition i32 }
//!        | last_update_timestamp i64 | start_timestamp i64
//!        | previous_producer_id i64 | last_producer_epoch i16      (Strand, optional)
//!        | next_producer_id i64 | transaction_version i16        (Strand, optional)
//! ```
//! A missing producer id or epoch is written as -1 and any negative one reads
//! back as `None`.

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use strand_types::{ProducerEpoch, ProducerId};
use thiserror::Error;

use crate::coordinator::{TxnRecord, TxnState};

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TxnLogError {
    #[error("transaction log record truncated reading {0}")]
    Truncated(&'static str),
    #[error("unsupported transaction log {what} version {version}")]
    UnsupportedVersion { what: &'static str, version: i16 },
    #[error("invalid transaction state id {0}")]
    InvalidState(i8),
    #[error("transaction log string is not UTF-8")]
    InvalidString,
}

fn put_str(b: &mut BytesMut, s: &str) {
    // Topic names and transactional ids are far below i16::MAX bytes (validated on input).
    b.put_i16(s.len().min(i16::MAX as usize) as i16);
    b.put_slice(&s.as_bytes()[..s.len().min(i16::MAX as usize)]);
}

fn need(b: &Bytes, n: usize, what: &'static str) -> Result<(), TxnLogError> {
    if b.remaining() < n {
        Err(TxnLogError::Truncated(what))
    } else {
        Ok(())
    }
}

fn get_str(b: &mut Bytes, what: &'static str) -> Result<String, TxnLogError> {
    need(b, 2, what)?;
    let len = b.get_i16();
    if len < 0 {
        return Err(TxnLogError::Truncated(what));
    }
    need(b, len as usize, what)?;
    let s = b.split_to(len as usize);
    String::from_utf8(s.to_vec()).map_err(|_| TxnLogError::InvalidString)
}

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(KEY_VERSION);
    put_str(&mut b, transactional_id);
    b.freeze()
}

pub fn decode_key(key: &[u8]) -> Result<String, TxnLogError> {
    let mut b = Bytes::copy_from_slice(key);
    need(&b, 2, "key version")?;
    let version = b.get_i16();
    if version != KEY_VERSION {
        return Err(TxnLogError::UnsupportedVersion {
            what: "key",
            version,
        });
    }
    get_str(&mut b, "transactional id")
}

pub fn encode_value(r: &TxnRecord) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(VALUE_VERSION);
    b.put_i64(ProducerId::to_wire(r.producer_id));
    b.put_i16(ProducerEpoch::to_wire(r.producer_epoch));
    b.put_i32(r.timeout_ms);
    b.put_i8(r.state.id());
    // Grouped by topic, as Kafka writes them.
    let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
    for (t, p) in &r.partitions {
        match topics.last_mut() {
            Some((name, parts)) if *name == t.as_str() => parts.push(*p),
            _ => topics.push((t.as_str(), vec![*p])),
        }
    }
    b.put_i32(topics.len() as i32);
    for (t, parts) in topics {
        put_str(&mut b, t);
        b.put_i32(parts.len() as i32);
        for p in parts {
            b.put_i32(p);
        }
    }
    b.put_i64(r.last_update_timestamp);
    b.put_i64(r.start_timestamp);
    b.put_i64(ProducerId::to_wire(r.previous_producer_id));
    b.put_i16(ProducerEpoch::to_wire(r.last_producer_epoch));
    b.put_i64(ProducerId::to_wire(r.next_producer_id));
    b.put_i16(r.transaction_version);
    b.freeze()
}

pub fn decode_value(value: &[u8]) -> Result<TxnRecord, TxnLogError> {
    let mut b = Bytes::copy_from_slice(value);
    need(&b, 2, "value version")?;
    let version = b.get_i16();
    if version != VALUE_VERSION {
        return Err(TxnLogError::UnsupportedVersion {
            what: "value",
            version,
        });
    }
    need(&b, 8 + 2 + 4 + 1 + 4, "value fields")?;
    let producer_id = ProducerId::from_wire(b.get_i64());
    let producer_epoch = ProducerEpoch::from_wire(b.get_i16());
    let timeout_ms = b.get_i32();
    let state_id = b.get_i8();
    let state = TxnState::from_id(state_id).ok_or(TxnLogError::InvalidState(state_id))?;
    let topic_count = b.get_i32();
    let mut partitions = BTreeSet::new();
    for _ in 0..topic_count.max(0) {
        let topic = get_str(&mut b, "topic")?;
        need(&b, 4, "partition count")?;
        let n = b.get_i32();
        for _ in 0..n.max(0) {
            need(&b, 4, "partition")?;
            partitions.insert((topic.clone(), b.get_i32()));
        }
    }
    need(&b, 16, "timestamps")?;
    let last_update_timestamp = b.get_i64();
    let start_timestamp = b.get_i64();
    let (previous_producer_id, last_producer_epoch) = if b.remaining() >= 10 {
        (
            ProducerId::from_wire(b.get_i64()),
            ProducerEpoch::from_wire(b.get_i16()),
        )
    } else {
        (None, None)
    };
    let (next_producer_id, transaction_version) = if b.remaining() >= 10 {
        (ProducerId::from_wire(b.get_i64()), b.get_i16())
    } else {
        (None, 0)
    };
    Ok(TxnRecord {
        producer_id,
        previous_producer_id,
        producer_epoch,
        last_producer_epoch,
        next_producer_id,
        transaction_version,
        timeout_ms,
        state,
        partitions,
        start_timestamp,
        last_update_timestamp,
    })
}

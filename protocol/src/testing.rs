//! Helpers for tests in this and other crates: batches encoded the way a real
//! client encodes them (kafka-protocol's encoder, magic v2).

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// One record of a test batch: key, value, timestamp.
pub type TestRecord = (Option<Bytes>, Option<Bytes>, i64);

/// Encodes `records` as one v2 batch (offsets from 0). `pid < 0` gives a
/// non-idempotent batch (base sequence -1); otherwise sequences start at `seq`.
pub fn encode_records(
    records: &[TestRecord],
    pid: i64,
    epoch: i16,
    seq: i32,
    compression: Compression,
) -> Vec<u8> {
    encode_records_txn(records, pid, epoch, seq, compression, false)
}

/// [`encode_records`] with the transactional attribute set or not (a
/// transactional producer's batch).
pub fn encode_records_txn(
    records: &[TestRecord],
    pid: i64,
    epoch: i16,
    seq: i32,
    compression: Compression,
    transactional: bool,
) -> Vec<u8> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value, timestamp))| Record {
            transactional,
            control: false,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch where offset - sequence changes,
            // so keep it constant (a non-idempotent batch's base sequence is -1).
            sequence: if pid < 0 {
                i as i32 - 1
            } else {
                seq.wrapping_add(i as i32)
            },
            timestamp: *timestamp,
            key: key.clone(),
            value: value.clone(),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encoding well-formed test records cannot fail");
    buf.to_vec()
}

/// Encodes one v2 batch of `n` records (timestamps 1000.., keys `k{i}`,
/// values of growing length).
pub fn encode_batch(n: usize, pid: i64, epoch: i16, seq: i32, compression: Compression) -> Vec<u8> {
    let records: Vec<TestRecord> = (0..n)
        .map(|i| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(vec![b'v'; 10 + i])),
                1_000 + i as i64,
            )
        })
        .collect();
    encode_records(&records, pid, epoch, seq, compression)
}

/// Appends `v` as a zig-zag varint (Kafka's record framing).
pub use crate::records::put_varint;

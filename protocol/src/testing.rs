//! Helpers for tests in this and other crates: real client-encoded batches.

use bytes::BytesMut;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// Encodes one v2 batch of `n` records the way a client would (offsets from 0,
/// timestamps 1000.., keys `k{i}`). `pid < 0` gives a non-idempotent batch.
pub fn encode_batch(n: usize, pid: i64, epoch: i16, seq: i32, compression: Compression) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder splits batches where offset - sequence changes, so keep it constant.
            sequence: if seq < 0 {
                i as i32 - 1
            } else {
                seq + i as i32
            },
            timestamp: 1_000 + i as i64,
            key: Some(bytes::Bytes::from(format!("k{i}"))),
            value: Some(bytes::Bytes::from(vec![b'v'; 10 + i])),
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
    .expect("encode");
    buf.to_vec()
}

#![allow(dead_code)]
use std::path::{Path, PathBuf};

use kafka_protocol::records::Compression;
use strand_log::{AppendInfo, LogConfig, PartitionLog};
use strand_protocol::batch::{validate_record_set, BatchHeader, BatchIter};
use strand_protocol::testing::{encode_batch, encode_records, TestRecord};
use strand_types::{LeaderEpoch, Offset, ProducerId};

pub fn o(offset: i64) -> Offset {
    Offset::new(offset)
}

pub fn e(epoch: i32) -> LeaderEpoch {
    LeaderEpoch::new(epoch)
}

pub fn pid(id: i64) -> ProducerId {
    ProducerId::new(id)
}

/// Epoch-cache entries: (epoch, start offset).
pub fn epochs(entries: &[(i32, i64)]) -> Vec<(LeaderEpoch, Offset)> {
    entries
        .iter()
        .map(|&(epoch, start)| (e(epoch), o(start)))
        .collect()
}

/// An OffsetForLeaderEpoch answer as the wire writes it: (-1, -1) for none.
pub fn wire(answer: Option<(LeaderEpoch, Offset)>) -> (i32, i64) {
    let (epoch, end) = answer.unzip();
    (LeaderEpoch::to_wire(epoch), Offset::to_wire(end))
}

pub fn batch(n: usize) -> Vec<u8> {
    encode_batch(n, -1, -1, -1, Compression::None)
}

/// One batch whose records carry the given timestamps.
pub fn batch_with_timestamps(ts: &[i64]) -> Vec<u8> {
    let records: Vec<TestRecord> = ts
        .iter()
        .map(|t| (None, Some(bytes::Bytes::from(vec![b'x'; 8])), *t))
        .collect();
    encode_records(&records, -1, -1, -1, Compression::None)
}

pub fn append_bytes(log: &mut PartitionLog, b: Vec<u8>, epoch: i32) -> AppendInfo {
    let h = validate_record_set(&b).unwrap();
    log.append_as_leader(&b, &h, e(epoch), None).unwrap()
}

pub fn append(log: &mut PartitionLog, n: usize) -> AppendInfo {
    append_bytes(log, batch(n), 0)
}

pub fn headers(b: &[u8]) -> Vec<BatchHeader> {
    BatchIter::new(b).map(|(_, h)| h).collect()
}

/// Everything from the log start to the LEO.
pub fn read_all(log: &PartitionLog) -> Vec<u8> {
    log.read(log.log_start_offset(), usize::MAX, o(i64::MAX), true)
        .unwrap()
        .records
        .to_vec()
}

pub fn small_segments(bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes: bytes,
        index_interval_bytes: 1,
        ..LogConfig::default()
    }
}

pub fn segment_file(dir: &Path, base: i64, ext: &str) -> PathBuf {
    dir.join(format!("{base:020}.{ext}"))
}

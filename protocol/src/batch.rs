//! Views over magic-v2 record batches as clients encoded them.
//!
//! The broker never decodes records on the produce or fetch path: it reads the
//! 61-byte batch header, checks the CRC32C over everything after the CRC field,
//! and writes the base offset and partition leader epoch in place (neither is
//! covered by the CRC, so the client's checksum stays valid).
//!
//! Layout (big-endian):
//! ```text
//!  0 base_offset i64         8 batch_length i32     12 partition_leader_epoch i32
//! 16 magic i8               17 crc u32              21 attributes i16
//! 23 last_offset_delta i32  27 base_timestamp i64   35 max_timestamp i64
//! 43 producer_id i64        51 producer_epoch i16   53 base_sequence i32
//! 57 records_count i32      61 records...
//! ```

use crate::record_count::{self, CountError};
use thiserror::Error;

/// Size of the v2 batch header, including base offset and length.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes before `batch_length` counts: base offset (8) + length field (4).
pub const LOG_OVERHEAD: usize = 12;
/// Offset of the first byte covered by the CRC (the attributes field).
const CRC_START: usize = 21;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;
pub const NO_SEQUENCE: i32 = -1;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// Why a batch (or a run of batches) is not acceptable.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BatchError {
    #[error("record set truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("unsupported record batch magic {0} (only v2 is served)")]
    UnsupportedMagic(i8),
    #[error("batch length {0} is invalid")]
    InvalidLength(i32),
    #[error("CRC mismatch: header says {expected:#010x}, computed {computed:#010x}")]
    CrcMismatch { expected: u32, computed: u32 },
    #[error("record count {count} does not fit last_offset_delta {last_offset_delta}")]
    CountMismatch { count: i32, last_offset_delta: i32 },
    #[error("empty record set")]
    Empty,
    #[error("compressed records cannot be read: {0}")]
    Compression(String),
    #[error("cannot encode a record batch: {0}")]
    Encode(String),
}

/// Header fields of one v2 batch, parsed from its first 61 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    // The caller has checked that `b` holds the whole header, so the slice is 8 bytes.
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8-byte slice"))
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4-byte slice"))
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().expect("2-byte slice"))
}

impl BatchHeader {
    /// Parses the header at the start of `buf` without checking the CRC.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < LOG_OVERHEAD + 5 {
            return Err(BatchError::Truncated {
                needed: LOG_OVERHEAD + 5,
                available: buf.len(),
            });
        }
        let magic = buf[16] as i8;
        if magic != 2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        if buf.len() < BATCH_HEADER_LEN {
            return Err(BatchError::Truncated {
                needed: BATCH_HEADER_LEN,
                available: buf.len(),
            });
        }
        let batch_length = be_i32(buf, 8);
        if batch_length < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32 {
            return Err(BatchError::InvalidLength(batch_length));
        }
        Ok(BatchHeader {
            base_offset: be_i64(buf, 0),
            batch_length,
            partition_leader_epoch: be_i32(buf, 12),
            magic,
            crc: u32::from_be_bytes(buf[17..21].try_into().expect("4-byte slice")),
            attributes: be_i16(buf, 21),
            last_offset_delta: be_i32(buf, 23),
            base_timestamp: be_i64(buf, 27),
            max_timestamp: be_i64(buf, 35),
            producer_id: be_i64(buf, 43),
            producer_epoch: be_i16(buf, 51),
            base_sequence: be_i32(buf, 53),
            records_count: be_i32(buf, 57),
        })
    }

    /// Whole size of the batch on the wire and on disk.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }
    /// Saturating: `base_offset` is outside the CRC, so on disk it may be garbage.
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(self.last_offset_delta as i64)
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_TIMESTAMP_TYPE != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
    /// Sequence of the last record, wrapping at i32::MAX as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        if last > i32::MAX as i64 {
            (last - i32::MAX as i64 - 1) as i32
        } else {
            last as i32
        }
    }
}

/// Verifies the CRC32C of one complete batch (`buf` is exactly the batch).
pub fn verify_crc(buf: &[u8], header: &BatchHeader) -> Result<(), BatchError> {
    let computed = crc32c::crc32c(&buf[CRC_START..header.total_size()]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            expected: header.crc,
            computed,
        });
    }
    Ok(())
}

/// Checks a record set from a produce request: one or more complete v2 batches,
/// each with a valid CRC and a record count that matches its offset delta.
/// Returns the headers in order. Nothing is decompressed.
pub fn validate_record_set(buf: &[u8]) -> Result<Vec<BatchHeader>, BatchError> {
    validate_batches(buf, true)
}

/// [`validate_record_set`] without counting the records: whole v2 batches,
/// CRCs, and no more records than offsets (a compacted batch keeps its
/// offsets and fewer records, maybe none). For batches a leader has
/// already validated (a follower's appends); nothing is decompressed.
pub fn validate_batch_framing(buf: &[u8]) -> Result<Vec<BatchHeader>, BatchError> {
    validate_batches(buf, false)
}

/// Whether any complete batch at the start of `buf` is compressed (a cheap
/// look at the headers; validation is what checks them).
pub fn has_compressed_batch(buf: &[u8]) -> bool {
    let mut pos = 0;
    while let Ok(h) = BatchHeader::parse(&buf[pos..]) {
        if h.compression() != 0 {
            return true;
        }
        pos = match pos.checked_add(h.total_size()) {
            Some(p) if p < buf.len() => p,
            _ => return false,
        };
    }
    false
}

fn validate_batches(buf: &[u8], count_records: bool) -> Result<Vec<BatchHeader>, BatchError> {
    if buf.is_empty() {
        return Err(BatchError::Empty);
    }
    let mut headers = Vec::with_capacity(1);
    let mut pos = 0;
    while pos < buf.len() {
        let rest = &buf[pos..];
        let h = BatchHeader::parse(rest)?;
        let size = h.total_size();
        if rest.len() < size {
            return Err(BatchError::Truncated {
                needed: size,
                available: rest.len(),
            });
        }
        verify_crc(&rest[..size], &h)?;
        // A leader's log may hold batches its cleaner compacted: fewer
        // records than offsets (their last offset kept), or none at all.
        let count_fits = if count_records {
            h.records_count > 0 && h.last_offset_delta == h.records_count - 1
        } else {
            h.records_count >= 0
                && h.last_offset_delta >= 0
                && i64::from(h.records_count) <= i64::from(h.last_offset_delta) + 1
        };
        if !count_fits {
            return Err(BatchError::CountMismatch {
                count: h.records_count,
                last_offset_delta: h.last_offset_delta,
            });
        }
        if !count_records {
            headers.push(h);
            pos += size;
            continue;
        }
        // Records are counted by their length prefixes, after decompressing a
        // compressed batch (as Kafka validates it); nothing is decoded or
        // kept (`record_count`).
        let claimed = h.records_count as usize;
        let mismatch = BatchError::CountMismatch {
            count: h.records_count,
            last_offset_delta: h.last_offset_delta,
        };
        match record_count::count_records(h.compression(), &rest[BATCH_HEADER_LEN..size], claimed) {
            Ok(n) if n == claimed => {}
            Ok(_) | Err(CountError::TooMany | CountError::Malformed | CountError::Stopped) => {
                return Err(mismatch)
            }
            Err(CountError::Codec(reason)) => return Err(BatchError::Compression(reason)),
            Err(CountError::UnknownCodec(c)) => {
                return Err(BatchError::Compression(format!(
                    "unknown compression codec {c}"
                )))
            }
        }
        headers.push(h);
        pos += size;
    }
    Ok(headers)
}

/// Walks the complete batches at the start of `buf` (as read from a segment)
/// and returns how many bytes of it are valid batches with correct CRCs. Used by
/// log recovery to find where a torn or corrupt tail begins.
pub fn valid_prefix_len(buf: &[u8]) -> usize {
    let mut pos = 0;
    while pos < buf.len() {
        let rest = &buf[pos..];
        let Ok(h) = BatchHeader::parse(rest) else {
            break;
        };
        let size = h.total_size();
        if rest.len() < size || verify_crc(&rest[..size], &h).is_err() {
            break;
        }
        pos += size;
    }
    pos
}

/// Writes `base_offset` and `partition_leader_epoch` into the header of the batch
/// at the start of `buf`. These two fields lie outside the CRC, so the client's
/// checksum stays valid; records are never re-encoded.
pub fn assign_offset_and_epoch(buf: &mut [u8], base_offset: i64, leader_epoch: i32) {
    buf[0..8].copy_from_slice(&base_offset.to_be_bytes());
    buf[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
}

/// Stamps LogAppendTime into a batch: sets the timestamp-type bit and
/// max_timestamp, then recomputes the CRC (both fields are CRC-covered).
pub fn stamp_log_append_time(buf: &mut [u8], header: &BatchHeader, now_ms: i64) {
    let (head, rest) = buf.split_at_mut(BATCH_HEADER_LEN);
    stamp_log_append_time_split(
        head,
        &rest[..header.total_size() - BATCH_HEADER_LEN],
        header,
        now_ms,
    );
}

/// [`stamp_log_append_time`] on a batch held in two parts: its header
/// (`head`, the first [`BATCH_HEADER_LEN`] bytes, a copy the caller may
/// change) and the records after it (`rest`, left as they are), so a leader
/// can stamp a client's batch without copying it.
pub fn stamp_log_append_time_split(
    head: &mut [u8],
    rest: &[u8],
    header: &BatchHeader,
    now_ms: i64,
) {
    let attrs = header.attributes | ATTR_TIMESTAMP_TYPE;
    head[21..23].copy_from_slice(&attrs.to_be_bytes());
    head[35..43].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&head[CRC_START..BATCH_HEADER_LEN]), rest);
    head[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Iterates the batch headers of a run of batches read from the log. Stops at
/// the first incomplete or unparsable header.
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        BatchIter { buf, pos: 0 }
    }
}

impl<'a> Iterator for BatchIter<'a> {
    /// (position of the batch in the buffer, its header)
    type Item = (usize, BatchHeader);
    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.buf[self.pos..];
        let h = BatchHeader::parse(rest).ok()?;
        if rest.len() < h.total_size() {
            return None;
        }
        let at = self.pos;
        self.pos += h.total_size();
        Some((at, h))
    }
}

/// The transaction marker a control batch carries (Kafka's `ControlRecordType`
/// ABORT = 0 and COMMIT = 1; the other control types, such as KRaft's, carry
/// no producer id and are not transaction markers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlType {
    Abort,
    Commit,
}

impl ControlType {
    /// The type id in the control record's key.
    pub fn code(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
        }
    }

    pub fn from_code(code: i16) -> Option<ControlType> {
        match code {
            0 => Some(ControlType::Abort),
            1 => Some(ControlType::Commit),
            _ => None,
        }
    }

    pub fn from_commit(commit: bool) -> ControlType {
        if commit {
            ControlType::Commit
        } else {
            ControlType::Abort
        }
    }
}

/// Version written in a control record's key and in an end-transaction
/// marker's value (Kafka writes 0 for both).
const CONTROL_RECORD_VERSION: i16 = 0;

/// Builds the control batch a partition leader appends for WriteTxnMarkers:
/// magic 2, transactional + control attributes, the producer's id and epoch,
/// base sequence -1 and one record whose key is (version 0, type) and whose
/// value is (version 0, coordinator epoch), all big-endian, as Kafka's
/// `EndTransactionMarker`. Base offset 0 and leader epoch 0: the log assigns
/// both in place. kafka-protocol's encoder writes the batch and its CRC32C.
pub fn build_txn_marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    control: ControlType,
    timestamp_ms: i64,
) -> Result<Vec<u8>, BatchError> {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&CONTROL_RECORD_VERSION.to_be_bytes());
    key.extend_from_slice(&control.code().to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&CONTROL_RECORD_VERSION.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = Record {
        transactional: true,
        control: true,
        partition_leader_epoch: 0,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        // Base sequence -1: markers are not part of the producer's sequence.
        sequence: NO_SEQUENCE,
        timestamp: timestamp_ms,
        key: Some(bytes::Bytes::from(key)),
        value: Some(bytes::Bytes::from(value)),
        headers: Default::default(),
        delete_horizon: false,
    };
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        std::iter::once(&record),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| BatchError::Encode(e.to_string()))?;
    Ok(buf.to_vec())
}

/// What a transaction marker says: commit or abort, and the epoch of the
/// coordinator that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndTxnMarker {
    pub control: ControlType,
    pub coordinator_epoch: i32,
}

/// The end-transaction marker of a control batch (`batch` is one whole
/// batch), read from its first record: type from the key, coordinator epoch
/// from the value. `None` when the batch is not a control batch, cannot be
/// decoded, or carries another control type. Followers and the start-up
/// replay use it to tell a commit from an abort and to keep the coordinator
/// epoch that fences older coordinators.
pub fn end_txn_marker(batch: &[u8]) -> Option<EndTxnMarker> {
    let h = BatchHeader::parse(batch).ok()?;
    // Control batches are never compressed: one that claims to be is not a
    // marker (and is not decompressed: it could claim gigabytes).
    if !h.is_control() || batch.len() < h.total_size() || h.compression() != 0 {
        return None;
    }
    let (key, value) = first_record_key_value(&batch[BATCH_HEADER_LEN..h.total_size()])?;
    if key.len() < 4 || value.len() < 6 {
        return None;
    }
    let key_version = i16::from_be_bytes([key[0], key[1]]);
    let value_version = i16::from_be_bytes([value[0], value[1]]);
    if key_version < 0 || value_version < 0 {
        return None;
    }
    Some(EndTxnMarker {
        control: ControlType::from_code(i16::from_be_bytes([key[2], key[3]]))?,
        coordinator_epoch: i32::from_be_bytes([value[2], value[3], value[4], value[5]]),
    })
}

/// The key and value of the first record of an uncompressed records
/// section, as slices of it (`None` if it does not parse or either is null).
fn first_record_key_value(records: &[u8]) -> Option<(&[u8], &[u8])> {
    fn varint(buf: &mut &[u8], max: usize) -> Option<i64> {
        let n = buf.iter().take(max).position(|b| b & 0x80 == 0)? + 1;
        let raw = buf[..n]
            .iter()
            .enumerate()
            .fold(0u64, |v, (i, b)| v | (u64::from(b & 0x7f) << (7 * i)));
        *buf = &buf[n..];
        Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }
    fn bytes<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
        let len = usize::try_from(varint(buf, 5)?).ok()?;
        let (b, rest) = (buf.get(..len)?, buf.get(len..)?);
        *buf = rest;
        Some(b)
    }
    let mut buf = records;
    let len = usize::try_from(varint(&mut buf, 5)?).ok()?;
    let mut record = buf.get(..len)?;
    record = record.get(1..)?; // attributes
    varint(&mut record, 10)?; // timestamp delta
    varint(&mut record, 5)?; // offset delta
    let key = bytes(&mut record)?;
    let value = bytes(&mut record)?;
    Some((key, value))
}

/// The transaction marker type of a control batch; see [`end_txn_marker`].
pub fn control_record_type(batch: &[u8]) -> Option<ControlType> {
    end_txn_marker(batch).map(|m| m.control)
}

/// Whether any batch of a record set has the transactional bit (Kafka answers
/// such a produce without a transactional id with
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
pub fn has_transactional_batch(records: &[u8]) -> bool {
    BatchIter::new(records).any(|(_, h)| h.is_transactional())
}

/// Indexes (counted across the set) of records that have no key, the
/// first [`record_count::MAX_KEYLESS_REPORTED`](crate::record_count::MAX_KEYLESS_REPORTED)
/// of them. Kafka rejects such records on compacted topics. The records are
/// walked by streaming decompression, never materialised (a compressed
/// batch may expand to gigabytes), so it costs what validating the set
/// costs; it runs only for compacted topics.
pub fn keyless_record_indexes(records: &[u8]) -> Result<Vec<i32>, String> {
    let mut keyless = Vec::new();
    let (mut pos, mut base) = (0, 0i32);
    while pos < records.len() {
        let h = BatchHeader::parse(&records[pos..]).map_err(|e| e.to_string())?;
        let end = pos + h.total_size();
        let body = records
            .get(pos + BATCH_HEADER_LEN..end)
            .ok_or_else(|| format!("batch at {pos} is truncated"))?;
        let limit = usize::try_from(h.records_count).unwrap_or(0);
        let found = crate::record_count::keyless_records(h.compression(), body, limit)
            .map_err(|e| format!("{e:?}"))?;
        keyless.extend(found.into_iter().map(|i| base.saturating_add(i)));
        base = base.saturating_add(h.records_count);
        pos = end;
    }
    Ok(keyless)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::encode_batch;
    use kafka_protocol::records::Compression;
    use proptest::prelude::*;

    #[test]
    fn parses_header_written_by_kafka_protocol() {
        let b = encode_batch(3, 42, 7, 10, Compression::None);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.magic, 2);
        assert_eq!(h.records_count, 3);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.producer_id, 42);
        assert_eq!(h.producer_epoch, 7);
        assert_eq!(h.base_sequence, 10);
        assert_eq!(h.last_sequence(), 12);
        assert_eq!(h.base_timestamp, 1_000);
        assert_eq!(h.max_timestamp, 1_002);
        assert_eq!(h.total_size(), b.len());
        assert_eq!(validate_record_set(&b).unwrap(), vec![h]);
    }

    #[test]
    fn detects_crc_corruption_and_count_mismatch() {
        let mut b = encode_batch(2, -1, -1, -1, Compression::None);
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(matches!(
            validate_record_set(&b),
            Err(BatchError::CrcMismatch { .. })
        ));

        let mut b = encode_batch(2, -1, -1, -1, Compression::None);
        b[57..61].copy_from_slice(&5i32.to_be_bytes());
        let h = BatchHeader::parse(&b).unwrap();
        let crc = crc32c::crc32c(&b[21..h.total_size()]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_record_set(&b),
            Err(BatchError::CountMismatch { .. })
        ));
    }

    #[test]
    fn rejects_old_magic_truncation_and_empty() {
        let mut b = encode_batch(1, -1, -1, -1, Compression::None);
        b[16] = 1;
        assert_eq!(
            validate_record_set(&b),
            Err(BatchError::UnsupportedMagic(1))
        );
        let b = encode_batch(1, -1, -1, -1, Compression::None);
        assert!(matches!(
            validate_record_set(&b[..b.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        assert!(matches!(
            validate_record_set(&b[..30]),
            Err(BatchError::Truncated { .. })
        ));
        assert_eq!(validate_record_set(&[]), Err(BatchError::Empty));
    }

    #[test]
    fn finds_keyless_records() {
        use crate::testing::encode_records;
        let records: Vec<_> = (0..5)
            .map(|i| {
                (
                    if i % 2 == 0 {
                        None
                    } else {
                        Some(bytes::Bytes::from_static(b"k"))
                    },
                    None,
                    0,
                )
            })
            .collect();
        let buf = encode_records(&records, -1, -1, -1, Compression::Gzip);
        assert_eq!(keyless_record_indexes(&buf).unwrap(), vec![0, 2, 4]);
        assert!(
            keyless_record_indexes(&encode_batch(3, -1, -1, -1, Compression::Lz4))
                .unwrap()
                .is_empty()
        );
    }

    /// Found by the record_batch fuzz target: a control batch claiming a
    /// codec was decoded whole (and decompressed) to read its marker. Control
    /// batches are never compressed; such a batch is no marker.
    #[test]
    fn compressed_control_batches_are_not_markers() {
        let marker = build_txn_marker_batch(7, 1, 3, ControlType::Commit, 1_000).unwrap();
        let m = end_txn_marker(&marker).unwrap();
        assert_eq!((m.control, m.coordinator_epoch), (ControlType::Commit, 3));
        let mut compressed = marker.clone();
        compressed[22] |= 4; // zstd
        let crc = crc32c::crc32c(&compressed[21..]);
        compressed[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(end_txn_marker(&compressed), None);
    }

    /// Found by the record_batch fuzz target: a snappy batch whose block
    /// claims 2.9 GB made the keyless check (compacted topics) allocate it
    /// through a full decode. The walk refuses the claim instead.
    #[test]
    fn keyless_check_allocates_nothing_a_batch_claims() {
        // A raw snappy block whose length preamble claims 0xB0000000 bytes.
        let body = [0x80, 0x80, 0x80, 0x80, 0x0b, 0x00];
        let mut b = Vec::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&((BATCH_HEADER_LEN - LOG_OVERHEAD + body.len()) as i32).to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&2i16.to_be_bytes()); // snappy
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&[0; 16]);
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&body);
        let err = keyless_record_indexes(&b).unwrap_err();
        assert!(err.contains("claims"), "{err}");
    }

    #[test]
    fn record_count_must_match_the_records_present() {
        // A header claiming more records than the (uncompressed) body holds.
        let mut b = encode_batch(2, -1, -1, -1, Compression::None);
        let claimed = i32::MAX;
        b[23..27].copy_from_slice(&(claimed - 1).to_be_bytes());
        b[57..61].copy_from_slice(&claimed.to_be_bytes());
        let h = BatchHeader::parse(&b).unwrap();
        let crc = crc32c::crc32c(&b[21..h.total_size()]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_record_set(&b),
            Err(BatchError::CountMismatch { .. })
        ));
    }

    #[test]
    fn compressed_record_count_is_checked() {
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut b = encode_batch(4, -1, -1, -1, codec);
            assert!(validate_record_set(&b).is_ok(), "{codec:?}");
            b[23..27].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
            b[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
            let h = BatchHeader::parse(&b).unwrap();
            let crc = crc32c::crc32c(&b[21..h.total_size()]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
            assert!(
                matches!(
                    validate_record_set(&b),
                    Err(BatchError::CountMismatch { .. })
                ),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn garbage_base_offset_does_not_overflow() {
        let mut b = encode_batch(3, -1, -1, -1, Compression::None);
        b[0..8].copy_from_slice(&i64::MAX.to_be_bytes());
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.last_offset(), i64::MAX);
        assert_eq!(h.next_offset(), i64::MAX);
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut b = encode_batch(3, 1, 0, 0, Compression::None);
        b[53..57].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.last_sequence(), 0);
    }

    #[test]
    fn log_append_time_stamp_keeps_crc_valid() {
        let mut b = encode_batch(2, -1, -1, -1, Compression::None);
        let h = BatchHeader::parse(&b).unwrap();
        stamp_log_append_time(&mut b, &h, 99_999);
        let h2 = validate_record_set(&b).unwrap()[0];
        assert!(h2.is_log_append_time());
        assert_eq!(h2.max_timestamp, 99_999);
    }

    #[test]
    fn txn_marker_batch_round_trip() {
        for (control, coordinator_epoch) in [(ControlType::Commit, 7), (ControlType::Abort, 0)] {
            let mut b = build_txn_marker_batch(42, 3, coordinator_epoch, control, 1_234).unwrap();
            let h = validate_record_set(&b).unwrap()[0];
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    h.base_offset
                ),
                (42, 3, NO_SEQUENCE, 0)
            );
            assert_eq!((h.records_count, h.last_offset_delta), (1, 0));
            assert_eq!(h.max_timestamp, 1_234);
            assert_eq!(control_record_type(&b), Some(control));
            assert_eq!(
                end_txn_marker(&b),
                Some(EndTxnMarker {
                    control,
                    coordinator_epoch
                })
            );
            // Offset and epoch assigned in place keep it valid and readable.
            assign_offset_and_epoch(&mut b, 110, 5);
            assert!(validate_record_set(&b).is_ok());
            assert_eq!(control_record_type(&b), Some(control));
            // The record's key and value as Kafka lays them out.
            let mut bytes = bytes::Bytes::from(b);
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes).unwrap();
            let r = &set.records[0];
            assert!(r.control && r.transactional);
            assert_eq!(r.offset, 110);
            let key = r.key.as_ref().unwrap();
            assert_eq!(&key[..], &[0, 0, 0, control.code() as u8]);
            let value = r.value.as_ref().unwrap();
            assert_eq!(&value[..2], &[0, 0]);
            assert_eq!(&value[2..], &coordinator_epoch.to_be_bytes());
        }
    }

    #[test]
    fn control_type_of_other_batches_is_none() {
        let data = encode_batch(2, 5, 0, 0, Compression::None);
        assert_eq!(control_record_type(&data), None);
        assert!(!has_transactional_batch(&data));
        let marker = build_txn_marker_batch(5, 0, 0, ControlType::Abort, 0).unwrap();
        assert!(has_transactional_batch(&marker));
        // Truncated or garbage input never panics.
        for n in 0..marker.len() {
            assert_eq!(control_record_type(&marker[..n]), None);
        }
        let mut bad = marker.clone();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        let _ = control_record_type(&bad);
        assert_eq!(ControlType::from_code(2), None);
        assert_eq!(ControlType::from_commit(true), ControlType::Commit);
    }

    proptest! {
        /// The streaming keyless walk finds exactly the records a full
        /// decode finds without a key, in every codec, whatever the keys,
        /// values and timestamps (large ones stretch the record head).
        #[test]
        fn keyless_walk_agrees_with_a_full_decode(
            recs in proptest::collection::vec(
                (proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
                 0i64..1 << 45),
                1..30),
            codec in 0u8..5,
        ) {
            let compression = [Compression::None, Compression::Gzip, Compression::Snappy,
                               Compression::Lz4, Compression::Zstd][codec as usize];
            let records: Vec<crate::testing::TestRecord> = recs
                .iter()
                .map(|(k, v, ts)| (k.clone().map(bytes::Bytes::from), v.clone().map(bytes::Bytes::from), *ts))
                .collect();
            let buf = crate::testing::encode_records(&records, -1, -1, -1, compression);
            let mut b = bytes::Bytes::from(buf.clone());
            let decoded = kafka_protocol::records::RecordBatchDecoder::decode(&mut b).unwrap();
            let want: Vec<i32> = decoded.records.iter().enumerate()
                .filter(|(_, r)| r.key.is_none()).map(|(i, _)| i as i32).collect();
            prop_assert_eq!(keyless_record_indexes(&buf).unwrap(), want);
        }

        /// In-place assignment sets exactly the two fields, keeps the CRC valid and
        /// leaves every other byte as the client wrote it.
        #[test]
        fn assign_in_place_keeps_batch_valid(n in 1usize..20, base in 0i64..i64::MAX / 2, epoch in 0i32..i32::MAX,
                                             codec in 0u8..3) {
            let compression = match codec { 0 => Compression::None, 1 => Compression::Gzip, _ => Compression::Snappy };
            let orig = encode_batch(n, 5, 1, 0, compression);
            let mut b = orig.clone();
            assign_offset_and_epoch(&mut b, base, epoch);
            let h = validate_record_set(&b).unwrap()[0];
            prop_assert_eq!(h.base_offset, base);
            prop_assert_eq!(h.partition_leader_epoch, epoch);
            prop_assert_eq!(h.last_offset(), base + n as i64 - 1);
            prop_assert_eq!(&b[16..], &orig[16..]);
            prop_assert_eq!(&b[8..12], &orig[8..12]);
        }

        /// A valid run of batches followed by garbage: the valid prefix is exactly
        /// the batches, whatever the garbage is.
        #[test]
        fn valid_prefix_stops_at_garbage(counts in proptest::collection::vec(1usize..5, 1..5),
                                         garbage in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut log = Vec::new();
            for (i, c) in counts.iter().enumerate() {
                let mut b = encode_batch(*c, -1, -1, -1, Compression::None);
                assign_offset_and_epoch(&mut b, i as i64 * 10, 0);
                log.extend_from_slice(&b);
            }
            let valid = log.len();
            log.extend_from_slice(&garbage);
            let got = valid_prefix_len(&log);
            // Garbage can only extend the prefix if it happens to be a whole valid batch,
            // which random bytes are not (the CRC would have to match).
            prop_assert_eq!(got, valid);
            prop_assert_eq!(BatchIter::new(&log[..valid]).count(), counts.len());
        }

        /// Cutting a valid log anywhere leaves a prefix made of whole batches.
        #[test]
        fn truncation_keeps_whole_batches(counts in proptest::collection::vec(1usize..5, 1..6), cut in any::<prop::sample::Index>()) {
            let mut log = Vec::new();
            let mut ends = vec![0usize];
            for c in &counts {
                log.extend_from_slice(&encode_batch(*c, -1, -1, -1, Compression::None));
                ends.push(log.len());
            }
            let cut = cut.index(log.len() + 1);
            let got = valid_prefix_len(&log[..cut]);
            let expect = *ends.iter().filter(|e| **e <= cut).max().unwrap();
            prop_assert_eq!(got, expect);
        }
    }
}

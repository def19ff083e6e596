//! The records inside a magic-v2 batch, for the one reader that needs them:
//! the log cleaner (compaction keeps the last record per key, so it reads
//! keys and whether a value is null, and writes batches that keep some of
//! a batch's records).
//!
//! A record, after the batch header (all varints zig-zag):
//! ```text
//! length varint | attributes i8 | timestamp_delta varlong | offset_delta varint
//! | key_length varint | key | value_length varint | value | header_count varint | headers
//! ```
//! Nothing here allocates per record: a [`RecordView`] borrows the
//! (decompressed) body, and a kept record is copied as its bytes, re-encoded
//! only where its timestamp delta must change (a batch given a delete
//! horizon has the horizon as its base timestamp, KIP-534).

use std::borrow::Cow;

use crate::batch::{BatchHeader, BATCH_HEADER_LEN, LOG_OVERHEAD};
use crate::record_count::{self, CountError};
use crate::transcode::{self, Codec, TranscodeError};

/// The attribute bit saying a batch's base timestamp is its delete horizon
/// (KIP-534): the time after which the cleaner may remove its tombstones,
/// or the batch itself when it is a transaction marker.
pub const ATTR_DELETE_HORIZON: i16 = 0x40;

/// One record of an uncompressed records section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The whole record, its length prefix included.
    pub raw: &'a [u8],
    /// Where the fields after the length prefix start in `raw`.
    body_at: usize,
    /// Where the fields after the timestamp delta start in `raw`.
    after_timestamp_at: usize,
    pub timestamp_delta: i64,
    pub offset_delta: i64,
    /// `None`: a null key.
    pub key: Option<&'a [u8]>,
    /// False for a null value: a tombstone.
    pub has_value: bool,
}

/// Why a records section could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("malformed record at byte {0}")]
    Malformed(usize),
    #[error("the batch does not decompress: {0:?}")]
    Decompress(CountError),
    #[error("the batch decompresses to more than {0} bytes")]
    TooLarge(usize),
    #[error("cannot compress the batch: {0}")]
    Compress(#[from] TranscodeError),
    #[error("unknown codec {0}")]
    UnknownCodec(i16),
}

/// Reads a zig-zag varint of at most `max` bytes at `*at`.
fn varint(buf: &[u8], at: &mut usize, max: usize) -> Option<i64> {
    let mut rest = buf.get(*at..)?;
    let v = record_count::read_varint(&mut rest, max).ok()?;
    *at = buf.len() - rest.len();
    Some(v)
}

/// Appends `v` as a zig-zag varint (Kafka's record framing).
pub fn put_varint(v: i64, out: &mut Vec<u8>) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A length-prefixed byte string at `*at` (`None` inside: a null one).
fn bytes<'a>(buf: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let len = varint(buf, at, 5)?;
    if len < 0 {
        return Some(None);
    }
    let len = usize::try_from(len).ok()?;
    let b = buf.get(*at..at.checked_add(len)?)?;
    *at += len;
    Some(Some(b))
}

/// The records of an uncompressed records section, in order.
pub struct Records<'a> {
    buf: &'a [u8],
    at: usize,
}

/// Iterates the records of `body` (uncompressed).
pub fn records(body: &[u8]) -> Records<'_> {
    Records { buf: body, at: 0 }
}

impl<'a> Records<'a> {
    fn parse(&self, start: usize) -> Option<(RecordView<'a>, usize)> {
        let mut at = start;
        let len = usize::try_from(varint(self.buf, &mut at, 5)?).ok()?;
        let body_at = at;
        let end = body_at.checked_add(len)?;
        let rec = self.buf.get(..end)?;
        at += 1; // attributes
        let timestamp_delta = varint(rec, &mut at, 10)?;
        let after_timestamp_at = at;
        let offset_delta = varint(rec, &mut at, 5)?;
        let key = bytes(rec, &mut at)?;
        let value = bytes(rec, &mut at)?;
        if at > end {
            return None;
        }
        let raw = &self.buf[start..end];
        Some((
            RecordView {
                raw,
                body_at: body_at - start,
                after_timestamp_at: after_timestamp_at - start,
                timestamp_delta,
                offset_delta,
                key,
                has_value: value.is_some(),
            },
            end,
        ))
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RecordView<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.buf.len() {
            return None;
        }
        match self.parse(self.at) {
            Some((r, end)) => {
                self.at = end;
                Some(Ok(r))
            }
            None => {
                let at = self.at;
                self.at = self.buf.len();
                Some(Err(RecordError::Malformed(at)))
            }
        }
    }
}

impl RecordView<'_> {
    /// Appends the record to `out` with its timestamp delta replaced (its
    /// length prefix follows); the other fields are copied as they are.
    pub fn write_with_timestamp_delta(&self, timestamp_delta: i64, out: &mut Vec<u8>) {
        let attributes = self.raw[self.body_at];
        let rest = &self.raw[self.after_timestamp_at..];
        let mut ts = Vec::with_capacity(10);
        put_varint(timestamp_delta, &mut ts);
        let len = 1 + ts.len() + rest.len();
        put_varint(len as i64, out);
        out.push(attributes);
        out.extend_from_slice(&ts);
        out.extend_from_slice(rest);
    }
}

/// The records section of a whole batch (`batch`, exactly one batch),
/// decompressed (borrowed when it is not compressed); at most `limit`
/// bytes, else [`RecordError::TooLarge`] (what a batch decompresses to is
/// bounded by nothing but this).
pub fn decompressed_body<'a>(
    batch: &'a [u8],
    h: &BatchHeader,
    limit: usize,
) -> Result<Cow<'a, [u8]>, RecordError> {
    let body = batch
        .get(BATCH_HEADER_LEN..h.total_size())
        .ok_or(RecordError::Malformed(0))?;
    if h.compression() == 0 {
        if body.len() > limit {
            return Err(RecordError::TooLarge(limit));
        }
        return Ok(Cow::Borrowed(body));
    }
    let mut out = Vec::with_capacity(body.len().saturating_mul(2).min(limit));
    let mut too_large = false;
    let r = record_count::decompress_into(h.compression(), body, &mut |chunk| {
        if out.len() + chunk.len() > limit {
            too_large = true;
            return Err(CountError::Stopped);
        }
        out.extend_from_slice(chunk);
        Ok(())
    });
    match r {
        _ if too_large => Err(RecordError::TooLarge(limit)),
        Err(CountError::UnknownCodec(c)) => Err(RecordError::UnknownCodec(c)),
        Err(e) => Err(RecordError::Decompress(e)),
        Ok(()) => Ok(Cow::Owned(out)),
    }
}

/// The codec of a batch's attributes.
fn codec_of(h: &BatchHeader) -> Result<Codec, RecordError> {
    Ok(match h.compression() {
        0 => Codec::None,
        1 => Codec::Gzip,
        2 => Codec::Snappy,
        3 => Codec::Lz4,
        4 => Codec::Zstd,
        other => return Err(RecordError::UnknownCodec(other)),
    })
}

/// What changes in a batch that keeps some of its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewrite {
    /// Records in `records` (uncompressed, as [`RecordView::raw`] or
    /// re-encoded by [`RecordView::write_with_timestamp_delta`]).
    pub records_count: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    /// Sets [`ATTR_DELETE_HORIZON`] (then `base_timestamp` is the horizon).
    pub delete_horizon: bool,
}

/// Writes a batch like `original` (same base offset and last offset delta,
/// so the producer's last sequence is unchanged; same producer fields,
/// leader epoch, codec, timestamp type, transactional and control bits)
/// holding `records` instead of its own, compressed with its codec, with a
/// new length and CRC. With no records it is the header alone: Kafka's
/// empty batch, kept to remember a producer's last sequence.
pub fn write_batch(
    original: &BatchHeader,
    rewrite: Rewrite,
    records: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let start = out.len();
    let mut attributes = original.attributes;
    if rewrite.delete_horizon {
        attributes |= ATTR_DELETE_HORIZON;
    }
    if records.is_empty() {
        // No body to decompress: an empty batch is written uncompressed.
        attributes &= !0x07;
    }
    out.extend_from_slice(&original.base_offset.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes()); // length, below
    out.extend_from_slice(&original.partition_leader_epoch.to_be_bytes());
    out.push(2);
    out.extend_from_slice(&0u32.to_be_bytes()); // CRC, below
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&original.last_offset_delta.to_be_bytes());
    out.extend_from_slice(&rewrite.base_timestamp.to_be_bytes());
    out.extend_from_slice(&rewrite.max_timestamp.to_be_bytes());
    out.extend_from_slice(&original.producer_id.to_be_bytes());
    out.extend_from_slice(&original.producer_epoch.to_be_bytes());
    out.extend_from_slice(&original.base_sequence.to_be_bytes());
    out.extend_from_slice(&rewrite.records_count.to_be_bytes());
    debug_assert_eq!(out.len() - start, BATCH_HEADER_LEN);
    match codec_of(original)? {
        _ if records.is_empty() => {}
        Codec::None => out.extend_from_slice(records),
        codec => out.extend_from_slice(&transcode::compress(codec, records)?),
    }
    let length = i32::try_from(out.len() - start - LOG_OVERHEAD)
        .map_err(|_| RecordError::TooLarge(i32::MAX as usize))?;
    out[start + 8..start + 12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&out[start + 21..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

impl BatchHeader {
    /// The batch's delete horizon (KIP-534), when the cleaner has set one.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & ATTR_DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{validate_batch_framing, validate_record_set, verify_crc};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    fn record(offset: i64, key: Option<&str>, value: Option<&str>, ts: i64) -> Record {
        Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 7,
            producer_id: 42,
            producer_epoch: 3,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: offset as i32,
            timestamp: ts,
            key: key.map(|k| bytes::Bytes::from(k.as_bytes().to_vec())),
            value: value.map(|v| bytes::Bytes::from(v.as_bytes().to_vec())),
            headers: Default::default(),
            delete_horizon: false,
        }
    }

    fn encode(records: &[Record], compression: Compression) -> Vec<u8> {
        let mut buf = bytes::BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        buf.to_vec()
    }

    /// Every codec: the records read back as written, and a batch keeping
    /// some of them (one with a moved timestamp delta) decodes, by another
    /// implementation, to exactly those records at their offsets, with the
    /// batch's last offset and producer fields unchanged.
    #[test]
    fn read_and_rewrite_round_trip_through_kafka_protocol() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let recs = vec![
                record(100, Some("a"), Some("1"), 1_000),
                record(101, Some("b"), None, 1_005),
                record(102, None, Some("3"), 1_010),
                record(103, Some("a"), Some("4"), 1_020),
            ];
            let batch = encode(&recs, compression);
            let h = validate_record_set(&batch).unwrap()[0];
            let body = decompressed_body(&batch, &h, 1 << 20).unwrap();
            let views: Vec<_> = records(&body).map(|r| r.unwrap()).collect();
            assert_eq!(views.len(), 4);
            assert_eq!(views[0].key, Some(&b"a"[..]));
            assert!(!views[1].has_value);
            assert_eq!(views[2].key, None);
            assert_eq!(
                views.iter().map(|v| v.offset_delta).collect::<Vec<_>>(),
                [0, 1, 2, 3]
            );
            // Keep b (tombstone) and the second a, with the horizon as base.
            let horizon = 5_000;
            let mut kept = Vec::new();
            for v in [views[1], views[3]] {
                v.write_with_timestamp_delta(
                    h.base_timestamp + v.timestamp_delta - horizon,
                    &mut kept,
                );
            }
            let mut out = Vec::new();
            write_batch(
                &h,
                Rewrite {
                    records_count: 2,
                    base_timestamp: horizon,
                    max_timestamp: 1_020,
                    delete_horizon: true,
                },
                &kept,
                &mut out,
            )
            .unwrap();
            // What a follower accepts (a compacted batch has fewer records
            // than offsets; a client's produce would be refused).
            let nh = validate_batch_framing(&out).unwrap()[0];
            assert!(validate_record_set(&out).is_err());
            assert_eq!(nh.last_offset(), h.last_offset());
            assert_eq!(nh.delete_horizon_ms(), Some(horizon));
            assert_eq!((nh.producer_id, nh.base_sequence), (42, h.base_sequence));
            let mut bytes = bytes::Bytes::from(out);
            let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
            let got: Vec<_> = set
                .records
                .iter()
                .map(|r| (r.offset, r.key.clone(), r.value.clone(), r.timestamp))
                .collect();
            let want: Vec<_> = [&recs[1], &recs[3]]
                .iter()
                .map(|r| (r.offset, r.key.clone(), r.value.clone(), r.timestamp))
                .collect();
            assert_eq!(got, want, "{compression:?}");
        }
    }

    #[test]
    fn an_empty_batch_keeps_offsets_and_producer() {
        let batch = encode(&[record(10, Some("k"), Some("v"), 5)], Compression::Zstd);
        let h = validate_record_set(&batch).unwrap()[0];
        let mut out = Vec::new();
        let rewrite = Rewrite {
            records_count: 0,
            base_timestamp: h.base_timestamp,
            max_timestamp: h.max_timestamp,
            delete_horizon: false,
        };
        write_batch(&h, rewrite, &[], &mut out).unwrap();
        assert_eq!(out.len(), BATCH_HEADER_LEN);
        let nh = validate_batch_framing(&out).unwrap()[0];
        verify_crc(&out, &nh).unwrap();
        assert_eq!(
            nh.compression(),
            0,
            "an empty batch is written uncompressed"
        );
        assert_eq!(
            (
                nh.base_offset,
                nh.last_offset(),
                nh.records_count,
                nh.producer_id
            ),
            (10, 10, 0, 42)
        );
    }

    #[test]
    fn malformed_and_oversized_bodies_are_errors() {
        assert!(records(&[0x7f]).next().unwrap().is_err());
        // A record claiming more bytes than there are.
        assert!(records(&[0x20, 0, 0, 0]).next().unwrap().is_err());
        let batch = encode(
            &[record(0, Some("k"), Some(&"v".repeat(10_000)), 5)],
            Compression::Gzip,
        );
        let h = validate_record_set(&batch).unwrap()[0];
        assert_eq!(
            decompressed_body(&batch, &h, 1_000),
            Err(RecordError::TooLarge(1_000))
        );
    }
}

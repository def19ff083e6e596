//! Counting the records of a batch body without materialising it.
//!
//! A produce request's batches are checked as Kafka checks them: the records
//! of a compressed batch are counted after decompression. A few kilobytes of
//! zstd or gzip can expand to gigabytes, so nothing here keeps what it
//! decompresses: the bytes stream through one fixed buffer into a counter
//! that walks the records' length prefixes and skips their bodies, and stops
//! as soon as the batch holds more records than its header claims. What a
//! codec would allocate from a claimed length is capped first:
//!
//! * snappy (raw, or xerial-framed blocks) states each block's decompressed
//!   length up front and needs that much output space; a length beyond
//!   snappy's worst-case expansion of the compressed bytes is refused before
//!   any allocation, so a block costs at most [`SNAPPY_MAX_EXPANSION`] times
//!   its wire size;
//! * zstd frames may ask for a window of up to 2^[`ZSTD_WINDOW_LOG_MAX`]
//!   bytes (16 MiB; producers' default levels use 1-8 MiB); larger ones are
//!   refused;
//! * lz4 frames hold blocks of at most 4 MiB, gzip a 32 KiB window.
//!
//! Memory per batch is thus bounded by the codec, not by what the batch
//! claims or decompresses to; the time is that of decompressing, which the
//! broker spends off its async workers.

use std::io::Read;

/// Bytes read from a decompressor at a time.
const CHUNK: usize = 64 * 1024;
/// The largest zstd window accepted (as a power of two).
pub const ZSTD_WINDOW_LOG_MAX: u32 = 24;
/// Snappy's largest expansion: a 3-byte copy element yields at most 64 bytes.
pub const SNAPPY_MAX_EXPANSION: usize = 22;
/// The xerial (snappy-java) stream header: magic, then version and compat (4 bytes each).
pub(crate) const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;

/// Why the records of a batch body could not be counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountError {
    /// More records than the header claims (counting stopped there).
    TooMany,
    /// A record length prefix is invalid, or the body ends inside a record.
    Malformed,
    /// The compressed bytes do not decompress (or ask for too much memory).
    Codec(String),
    /// An attribute value that names no codec.
    UnknownCodec(i16),
    /// The visitor stopped the walk (internal: never returned).
    Stopped,
}

/// Bytes of a record's start that hold its key length: attributes (1),
/// timestamp delta (varlong, at most 10), offset delta and key length
/// (varints, at most 5 each).
const RECORD_HEAD: usize = 21;
/// The most keyless record indexes kept (the batch is refused anyway).
pub const MAX_KEYLESS_REPORTED: usize = 1000;

/// The start of a record: what is known of it without reading its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHead {
    /// Index of the record within the batch.
    pub index: usize,
    pub timestamp_delta: i64,
    pub offset_delta: i64,
    /// -1: no key.
    pub key_len: i64,
}

/// Called with each record's head; `false` stops the walk.
type Visitor<'a> = &'a mut dyn FnMut(RecordHead) -> bool;

/// Walks records' length prefixes (zig-zag varints) and skips their bodies,
/// across chunk boundaries; with a visitor, reads each record's head first.
struct Counter<'a> {
    count: usize,
    limit: usize,
    varint: u64,
    varint_len: u32,
    skip: u64,
    visit: Option<Visitor<'a>>,
    head: [u8; RECORD_HEAD],
    head_len: usize,
    head_want: usize,
}

impl<'a> Counter<'a> {
    fn new(limit: usize, visit: Option<Visitor<'a>>) -> Self {
        Counter {
            count: 0,
            limit,
            varint: 0,
            varint_len: 0,
            skip: 0,
            visit,
            head: [0; RECORD_HEAD],
            head_len: 0,
            head_want: 0,
        }
    }

    fn feed(&mut self, mut buf: &[u8]) -> Result<(), CountError> {
        while !buf.is_empty() {
            if self.head_want > self.head_len {
                let n = (self.head_want - self.head_len).min(buf.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&buf[..n]);
                self.head_len += n;
                self.skip -= n as u64;
                buf = &buf[n..];
                if self.head_len == self.head_want {
                    self.visit_head()?;
                }
                continue;
            }
            if self.skip > 0 {
                let n = usize::try_from(self.skip).map_or(buf.len(), |s| s.min(buf.len()));
                self.skip -= n as u64;
                buf = &buf[n..];
                continue;
            }
            let b = buf[0];
            buf = &buf[1..];
            self.varint |= u64::from(b & 0x7f) << (7 * self.varint_len);
            self.varint_len += 1;
            if b & 0x80 != 0 {
                if self.varint_len == 5 {
                    return Err(CountError::Malformed);
                }
                continue;
            }
            let len = ((self.varint >> 1) as i64) ^ -((self.varint & 1) as i64);
            if len <= 0 || len > i64::from(i32::MAX) {
                return Err(CountError::Malformed);
            }
            self.varint = 0;
            self.varint_len = 0;
            self.skip = len as u64;
            self.count += 1;
            if self.count > self.limit {
                return Err(CountError::TooMany);
            }
            if self.visit.is_some() {
                self.head_len = 0;
                self.head_want = RECORD_HEAD.min(len as usize);
            }
        }
        Ok(())
    }

    /// The current record's head is in: hands it to the visitor.
    fn visit_head(&mut self) -> Result<(), CountError> {
        let mut rest = &self.head[..self.head_len];
        // attributes, timestamp delta, offset delta, key length.
        rest = rest.get(1..).ok_or(CountError::Malformed)?;
        let timestamp_delta = read_varint(&mut rest, 10)?;
        let offset_delta = read_varint(&mut rest, 5)?;
        let key_len = read_varint(&mut rest, 5)?;
        let head = RecordHead {
            index: self.count - 1,
            timestamp_delta,
            offset_delta,
            key_len,
        };
        match self.visit.as_mut() {
            Some(visit) => {
                if visit(head) {
                    Ok(())
                } else {
                    Err(CountError::Stopped)
                }
            }
            None => Ok(()),
        }
    }

    fn finish(&self) -> Result<usize, CountError> {
        if self.varint_len != 0 || self.skip != 0 {
            return Err(CountError::Malformed);
        }
        Ok(self.count)
    }
}

/// Where decompressed bytes go, a chunk at a time.
trait Sink {
    fn feed(&mut self, buf: &[u8]) -> Result<(), CountError>;
}

impl Sink for Counter<'_> {
    fn feed(&mut self, buf: &[u8]) -> Result<(), CountError> {
        Counter::feed(self, buf)
    }
}

/// A closure as a sink (see [`decompress_into`]).
struct FnSink<'a>(&'a mut dyn FnMut(&[u8]) -> Result<(), CountError>);

impl Sink for FnSink<'_> {
    fn feed(&mut self, buf: &[u8]) -> Result<(), CountError> {
        (self.0)(buf)
    }
}

/// Reads `r` to its end through one fixed buffer into `sink`.
fn drain(sink: &mut dyn Sink, mut r: impl Read) -> Result<(), CountError> {
    let mut chunk = vec![0u8; CHUNK];
    loop {
        match r.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => sink.feed(&chunk[..n])?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CountError::Codec(e.to_string())),
        }
    }
}

/// Reads a zig-zag varint of at most `max` bytes from the front of `buf`.
pub(crate) fn read_varint(buf: &mut &[u8], max: usize) -> Result<i64, CountError> {
    let n = buf
        .iter()
        .take(max)
        .position(|b| b & 0x80 == 0)
        .map(|i| i + 1)
        .ok_or(CountError::Malformed)?;
    let raw = buf[..n]
        .iter()
        .enumerate()
        .fold(0u64, |v, (i, b)| v | (u64::from(b & 0x7f) << (7 * i)));
    *buf = &buf[n..];
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// Counts the records of a batch body compressed with `codec` (the
/// attributes' low three bits), failing with [`CountError::TooMany`] as soon
/// as there are more than `limit`.
pub fn count_records(codec: i16, body: &[u8], limit: usize) -> Result<usize, CountError> {
    walk(Counter::new(limit, None), codec, body)
}

/// Hands each record's head to `visit`, in order, until it returns false,
/// by the same streaming walk as [`count_records`] (nothing is
/// materialised, whatever the batch decompresses to). Returns the number of
/// records walked.
pub fn visit_records(
    codec: i16,
    body: &[u8],
    limit: usize,
    visit: &mut dyn FnMut(RecordHead) -> bool,
) -> Result<usize, CountError> {
    walk(Counter::new(limit, Some(visit)), codec, body)
}

/// The indexes (within the batch) of the records that have no key, the
/// first [`MAX_KEYLESS_REPORTED`] of them.
pub fn keyless_records(codec: i16, body: &[u8], limit: usize) -> Result<Vec<i32>, CountError> {
    let mut keyless = Vec::new();
    visit_records(codec, body, limit, &mut |r| {
        if r.key_len < 0 && keyless.len() < MAX_KEYLESS_REPORTED {
            keyless.push(r.index as i32);
        }
        true
    })?;
    Ok(keyless)
}

fn walk(mut counter: Counter<'_>, codec: i16, body: &[u8]) -> Result<usize, CountError> {
    match feed_all(&mut counter, codec, body) {
        Err(CountError::Stopped) => Ok(counter.count),
        Err(e) => Err(e),
        Ok(()) => counter.finish(),
    }
}

/// Hands the decompressed body of a batch compressed with `codec` to
/// `sink` a chunk at a time, with the same caps on what a codec may
/// allocate as [`count_records`]: memory stays bounded by the codec, not by
/// what the body decompresses to.
pub fn decompress_into(
    codec: i16,
    body: &[u8],
    sink: &mut dyn FnMut(&[u8]) -> Result<(), CountError>,
) -> Result<(), CountError> {
    feed_all(&mut FnSink(sink), codec, body)
}

fn feed_all(sink: &mut dyn Sink, codec: i16, body: &[u8]) -> Result<(), CountError> {
    let codec_error = |e: std::io::Error| CountError::Codec(e.to_string());
    match codec {
        0 => sink.feed(body),
        1 => drain(sink, flate2::read::MultiGzDecoder::new(body)),
        2 => snappy(body, sink),
        3 => drain(sink, lz4::Decoder::new(body).map_err(codec_error)?),
        4 => {
            let mut d = zstd::stream::read::Decoder::with_buffer(body).map_err(codec_error)?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(codec_error)?;
            drain(sink, d)
        }
        other => Err(CountError::UnknownCodec(other)),
    }
}

/// One snappy block into `out` (reused), its claimed length checked first.
fn snappy_block<'a>(block: &[u8], out: &'a mut Vec<u8>) -> Result<&'a [u8], CountError> {
    let claimed = snap::raw::decompress_len(block).map_err(|e| CountError::Codec(e.to_string()))?;
    if claimed > block.len().saturating_mul(SNAPPY_MAX_EXPANSION) + 64 {
        return Err(CountError::Codec(format!(
            "a snappy block of {} bytes claims {claimed} decompressed bytes",
            block.len()
        )));
    }
    out.clear();
    out.resize(claimed, 0);
    let n = snap::raw::Decoder::new()
        .decompress(block, out)
        .map_err(|e| CountError::Codec(e.to_string()))?;
    Ok(&out[..n])
}

/// Raw snappy, or the xerial framing Java clients write (as Kafka's
/// SnappyInputStream tells them apart: by the magic).
fn snappy(body: &[u8], counter: &mut dyn Sink) -> Result<(), CountError> {
    let mut out = Vec::new();
    if !body.starts_with(XERIAL_MAGIC) {
        return counter.feed(snappy_block(body, &mut out)?);
    }
    let mut rest = body
        .get(XERIAL_HEADER_LEN..)
        .ok_or_else(|| CountError::Codec("truncated snappy stream header".into()))?;
    while !rest.is_empty() {
        let len = rest
            .get(..4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| CountError::Codec("truncated snappy block length".into()))?;
        let block = rest
            .get(4..4 + len)
            .ok_or_else(|| CountError::Codec("truncated snappy block".into()))?;
        counter.feed(snappy_block(block, &mut out)?)?;
        rest = &rest[4 + len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::put_varint;
    use std::io::Write;

    /// `n` length-prefixed records of `size` bytes each.
    fn records(n: usize, size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            put_varint(size as i64, &mut out);
            out.extend(std::iter::repeat_n(i as u8, size));
        }
        out
    }

    #[test]
    fn counter_walks_prefixes_across_any_chunking() {
        let body = records(7, 300);
        for chunk in [1, 2, 3, 7, 64, 301, body.len()] {
            let mut c = Counter::new(100, None);
            for part in body.chunks(chunk) {
                c.feed(part).unwrap();
            }
            assert_eq!(c.finish(), Ok(7), "chunk {chunk}");
        }
        assert_eq!(count_records(0, &[], 5), Ok(0));
        assert_eq!(count_records(0, &[0x02, 0xaa], 5), Ok(1));
        assert_eq!(
            count_records(0, &[0x04, 0xaa], 5),
            Err(CountError::Malformed)
        );
        assert_eq!(
            count_records(0, &[0x80, 0x80, 0x80, 0x80, 0x80, 0x01], 5),
            Err(CountError::Malformed),
            "varint too long"
        );
        assert_eq!(
            count_records(0, &[0x00], 5),
            Err(CountError::Malformed),
            "zero length"
        );
        assert_eq!(
            count_records(0, &[0x01], 5),
            Err(CountError::Malformed),
            "negative length"
        );
        assert_eq!(
            count_records(0, &records(3, 1), 2),
            Err(CountError::TooMany)
        );
        assert_eq!(
            count_records(9, &records(3, 1), 5),
            Err(CountError::UnknownCodec(9))
        );
    }

    #[test]
    fn a_record_longer_than_i32_is_malformed() {
        let mut body = Vec::new();
        put_varint(i64::from(i32::MAX) + 1, &mut body);
        assert_eq!(count_records(0, &body, 5), Err(CountError::Malformed));
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn lz4(data: &[u8]) -> Vec<u8> {
        let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        e.write_all(data).unwrap();
        let (out, r) = e.finish();
        r.unwrap();
        out
    }

    const XERIAL_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";

    fn xerial(data: &[u8]) -> Vec<u8> {
        let mut out = XERIAL_HEADER.to_vec();
        for block in data.chunks(32 * 1024) {
            let c = snap::raw::Encoder::new().compress_vec(block).unwrap();
            out.extend((c.len() as u32).to_be_bytes());
            out.extend(c);
        }
        out
    }

    #[test]
    fn every_codec_counts() {
        let body = records(50, 1000);
        let zstd = zstd::encode_all(&body[..], 3).unwrap();
        let raw_snappy = snap::raw::Encoder::new().compress_vec(&body).unwrap();
        for (codec, compressed) in [
            (1, gzip(&body)),
            (2, raw_snappy),
            (2, xerial(&body)),
            (3, lz4(&body)),
            (4, zstd),
        ] {
            assert_eq!(
                count_records(codec, &compressed, 50),
                Ok(50),
                "codec {codec}"
            );
            assert_eq!(
                count_records(codec, &compressed, 49),
                Err(CountError::TooMany),
                "codec {codec}"
            );
            // Cut short: an error, or fewer records (lz4 ends quietly).
            let cut = &compressed[..compressed.len() / 2];
            assert_ne!(
                count_records(codec, cut, 50),
                Ok(50),
                "codec {codec}, truncated"
            );
        }
    }

    /// A one-record batch whose record has a large body: counted by
    /// streaming (the bytes are never held), refused when the body ends short.
    #[test]
    fn a_large_record_streams_through() {
        let size = 64 << 20;
        let mut body = Vec::new();
        put_varint(size as i64, &mut body);
        body.resize(body.len() + size, 0);
        let zstd = zstd::encode_all(&body[..], 1).unwrap();
        assert!(zstd.len() < 64 * 1024);
        assert_eq!(count_records(4, &zstd, 1), Ok(1));
        assert_eq!(count_records(1, &gzip(&body), 1), Ok(1));
        let short = zstd::encode_all(&body[..body.len() - 1], 1).unwrap();
        assert_eq!(count_records(4, &short, 1), Err(CountError::Malformed));
    }

    #[test]
    fn snappy_claims_are_capped_before_allocating() {
        // A raw snappy preamble claiming 4 GiB, then one literal byte.
        let mut lie = Vec::new();
        let mut v: u64 = u64::from(u32::MAX);
        while v >= 0x80 {
            lie.push((v as u8) | 0x80);
            v >>= 7;
        }
        lie.push(v as u8);
        lie.extend([0x00, 0x02]);
        assert!(matches!(
            count_records(2, &lie, 1),
            Err(CountError::Codec(_))
        ));
        // The same lie inside the xerial framing.
        let mut framed = XERIAL_HEADER.to_vec();
        framed.extend((lie.len() as u32).to_be_bytes());
        framed.extend(&lie);
        assert!(matches!(
            count_records(2, &framed, 1),
            Err(CountError::Codec(_))
        ));
        // A block length past the end.
        let mut past = XERIAL_HEADER.to_vec();
        past.extend(1000u32.to_be_bytes());
        past.extend([0u8; 10]);
        assert!(matches!(
            count_records(2, &past, 1),
            Err(CountError::Codec(_))
        ));
    }

    #[test]
    fn zstd_windows_past_the_cap_are_refused() {
        let body = records(1, 100);
        // Without a pledged size the frame declares the whole window.
        let mut e = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        e.set_parameter(zstd::zstd_safe::CParameter::WindowLog(
            ZSTD_WINDOW_LOG_MAX + 2,
        ))
        .unwrap();
        e.include_contentsize(false).unwrap();
        e.write_all(&body).unwrap();
        let big_window = e.finish().unwrap();
        assert!(matches!(
            count_records(4, &big_window, 1),
            Err(CountError::Codec(_))
        ));
        // The same data with the default window is fine.
        assert_eq!(
            count_records(4, &zstd::encode_all(&body[..], 3).unwrap(), 1),
            Ok(1)
        );
    }
}

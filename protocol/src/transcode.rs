//! A topic's `compression.type`: re-compressing a client's batch into the
//! codec the topic names, as Kafka's log validator does on the leader.
//!
//! A v2 batch's records are the same bytes whatever the codec (compression
//! wraps the concatenated records, nothing inside them), so a transcode is
//! decompress-then-compress of the body, streamed: the body goes through
//! [`record_count::decompress_into`] (the codecs' allocation caps) straight
//! into the target encoder, and the output stops at a size limit. Memory is
//! bounded by the codecs and the limit, never by what the batch claims or
//! decompresses to. The header keeps every field (producer, sequence,
//! timestamps, transactional flag) but its codec bits, length and CRC.

use std::io::Write;

use crate::batch::{BatchHeader, BATCH_HEADER_LEN, LOG_OVERHEAD};
use crate::record_count::{self, CountError};

/// A record batch codec (the attributes' low three bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    pub fn attribute(self) -> i16 {
        match self {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }

    /// The `compression.type` value naming the codec.
    pub fn config_name(self) -> &'static str {
        match self {
            Codec::None => "uncompressed",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }

    /// The codec a topic's `compression.type` stores batches with; `None`
    /// for `producer` (each batch keeps its producer's codec) and for a
    /// value that names no codec (the config's validation refuses those).
    pub fn from_topic_config(value: &str) -> Option<Codec> {
        match value {
            "uncompressed" => Some(Codec::None),
            "gzip" => Some(Codec::Gzip),
            "snappy" => Some(Codec::Snappy),
            "lz4" => Some(Codec::Lz4),
            "zstd" => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// What a topic stores client batches as: its `compression.type` codec and
/// that codec's `compression.*.level` (KIP-390; ignored for none and
/// snappy, -1 for gzip is zlib's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicCompression {
    pub codec: Codec,
    pub level: i32,
}

impl TopicCompression {
    /// `codec` at its default level.
    pub fn at_default(codec: Codec) -> TopicCompression {
        TopicCompression::from_topic_configs(codec.config_name(), |_| None)
            .expect("every codec is a topic compression type")
    }

    /// From the topic's `compression.type` and the level config of the
    /// codec it names; `None` for `producer`.
    pub fn from_topic_configs(
        compression_type: &str,
        level_of: impl Fn(&str) -> Option<i32>,
    ) -> Option<TopicCompression> {
        let codec = Codec::from_topic_config(compression_type)?;
        let (name, default) = match codec {
            Codec::Gzip => ("compression.gzip.level", -1),
            Codec::Lz4 => ("compression.lz4.level", 9),
            Codec::Zstd => ("compression.zstd.level", 3),
            Codec::None | Codec::Snappy => ("", 0),
        };
        let level = if name.is_empty() {
            default
        } else {
            level_of(name).unwrap_or(default)
        };
        Some(TopicCompression { codec, level })
    }
}

/// Why a batch could not be transcoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscodeError {
    #[error("the batch does not decompress: {0}")]
    Decompress(String),
    #[error("the batch is larger than {limit} bytes once compressed with {codec:?}")]
    TooLarge { codec: Codec, limit: usize },
    #[error("the batch cannot be compressed with {codec:?}: {reason}")]
    Compress { codec: Codec, reason: String },
    #[error("malformed batch: {0}")]
    Malformed(String),
}

/// Whether a batch compressed with `codec_attribute` must be transcoded for
/// a topic whose `compression.type` is `target` (`None`: the producer's).
pub fn needs_transcode(codec_attribute: i16, target: Option<Codec>) -> bool {
    target.is_some_and(|t| t.attribute() != codec_attribute)
}

/// A `Vec` that refuses to grow past `limit` bytes.
struct Bounded {
    out: Vec<u8>,
    limit: usize,
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > self.limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                "past the limit",
            ));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// snappy-java's stream framing, as Kafka writes snappy: a header, then
/// blocks of at most 32 KiB, each compressed alone behind its length.
struct XerialWriter<W: Write> {
    inner: W,
    pending: Vec<u8>,
    encoder: snap::raw::Encoder,
    block: Vec<u8>,
}

/// The zstd window a transcode compresses with (4 MiB), whatever the level.
const ZSTD_WINDOW_LOG: u32 = 22;

const XERIAL_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
const XERIAL_BLOCK: usize = 32 * 1024;

impl<W: Write> XerialWriter<W> {
    fn new(mut inner: W) -> std::io::Result<Self> {
        debug_assert!(XERIAL_HEADER.starts_with(record_count::XERIAL_MAGIC));
        inner.write_all(XERIAL_HEADER)?;
        Ok(XerialWriter {
            inner,
            pending: Vec::with_capacity(XERIAL_BLOCK),
            encoder: snap::raw::Encoder::new(),
            block: vec![0; snap::raw::max_compress_len(XERIAL_BLOCK)],
        })
    }

    fn write_block(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let n = self
            .encoder
            .compress(&self.pending, &mut self.block)
            .map_err(std::io::Error::other)?;
        self.inner.write_all(&(n as u32).to_be_bytes())?;
        self.inner.write_all(&self.block[..n])?;
        self.pending.clear();
        Ok(())
    }

    fn finish(mut self) -> std::io::Result<W> {
        self.write_block()?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for XerialWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = (XERIAL_BLOCK - self.pending.len()).min(buf.len());
        self.pending.extend_from_slice(&buf[..n]);
        if self.pending.len() == XERIAL_BLOCK {
            self.write_block()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A target codec's streaming encoder over the bounded output.
enum Encoder {
    None(Bounded),
    Gzip(flate2::write::GzEncoder<Bounded>),
    Snappy(Box<XerialWriter<Bounded>>),
    Lz4(lz4::Encoder<Bounded>),
    Zstd(zstd::stream::write::Encoder<'static, Bounded>),
}

impl Encoder {
    fn new(target: TopicCompression, out: Bounded) -> std::io::Result<Encoder> {
        let level = target.level;
        Ok(match target.codec {
            Codec::None => Encoder::None(out),
            Codec::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                out,
                match u32::try_from(level) {
                    Ok(l) => flate2::Compression::new(l.min(9)),
                    Err(_) => flate2::Compression::default(),
                },
            )),
            Codec::Snappy => Encoder::Snappy(Box::new(XerialWriter::new(out)?)),
            Codec::Lz4 => Encoder::Lz4(
                lz4::EncoderBuilder::new()
                    .block_size(lz4::BlockSize::Max64KB)
                    .block_mode(lz4::BlockMode::Independent)
                    .checksum(lz4::ContentChecksum::NoChecksum)
                    .level(u32::try_from(level).unwrap_or(0))
                    .build(out)?,
            ),
            Codec::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(out, level)?;
                // The high levels' 128 MiB windows (and the tables sized
                // by them) for batches of a few MiB: capped, so a topic's
                // level cannot make each transcode allocate hundreds.
                e.window_log(ZSTD_WINDOW_LOG)?;
                Encoder::Zstd(e)
            }
        })
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Encoder::None(w) => w,
            Encoder::Gzip(w) => w,
            Encoder::Snappy(w) => w.as_mut(),
            Encoder::Lz4(w) => w,
            Encoder::Zstd(w) => w,
        }
    }

    fn finish(self) -> std::io::Result<Bounded> {
        match self {
            Encoder::None(w) => Ok(w),
            Encoder::Gzip(w) => w.finish(),
            Encoder::Snappy(w) => w.finish(),
            Encoder::Lz4(w) => {
                let (w, r) = w.finish();
                r.map(|()| w)
            }
            Encoder::Zstd(w) => w.finish(),
        }
    }
}

/// `data` (records, uncompressed) compressed with `codec` at the codec's
/// default level, as a batch body.
pub fn compress(codec: Codec, data: &[u8]) -> Result<Vec<u8>, TranscodeError> {
    let topic = TopicCompression::at_default(codec);
    let io_error = |e: std::io::Error| TranscodeError::Compress {
        codec,
        reason: e.to_string(),
    };
    let bounded = Bounded {
        out: Vec::with_capacity(data.len() / 2),
        limit: usize::MAX,
    };
    let mut encoder = Encoder::new(topic, bounded).map_err(io_error)?;
    encoder.writer().write_all(data).map_err(io_error)?;
    Ok(encoder.finish().map_err(io_error)?.out)
}

/// The batch at the start of `batch` (whole, validated) with its records
/// compressed by `target`; the result is at most `max_batch_size` bytes or
/// the transcode fails with [`TranscodeError::TooLarge`].
pub fn transcode_batch(
    batch: &[u8],
    topic: TopicCompression,
    max_batch_size: usize,
) -> Result<Vec<u8>, TranscodeError> {
    let target = topic.codec;
    let h = BatchHeader::parse(batch).map_err(|e| TranscodeError::Malformed(e.to_string()))?;
    let body = batch
        .get(BATCH_HEADER_LEN..h.total_size())
        .ok_or_else(|| TranscodeError::Malformed("truncated batch".into()))?;
    let too_large = TranscodeError::TooLarge {
        codec: target,
        limit: max_batch_size,
    };
    let mut out = Vec::with_capacity(batch.len().min(max_batch_size));
    out.extend_from_slice(&batch[..BATCH_HEADER_LEN]);
    let bounded = Bounded {
        out,
        limit: max_batch_size,
    };
    let io_error = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            too_large.clone()
        } else {
            TranscodeError::Compress {
                codec: target,
                reason: e.to_string(),
            }
        }
    };
    let mut encoder = Encoder::new(topic, bounded).map_err(io_error)?;
    // The sink's own failure, kept to tell it from the decompressor's.
    let mut failed: Option<std::io::Error> = None;
    let decompressed = record_count::decompress_into(h.compression(), body, &mut |chunk| {
        encoder.writer().write_all(chunk).map_err(|e| {
            failed = Some(e);
            CountError::Stopped
        })
    });
    match (decompressed, failed) {
        (_, Some(e)) => return Err(io_error(e)),
        (Err(e), None) => return Err(TranscodeError::Decompress(format!("{e:?}"))),
        (Ok(()), None) => {}
    }
    let mut out = encoder.finish().map_err(io_error)?.out;
    // Length (what follows the length field), codec bits, CRC.
    let batch_length = i32::try_from(out.len() - LOG_OVERHEAD).map_err(|_| too_large.clone())?;
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let attributes = (h.attributes & !0x07) | target.attribute();
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::validate_record_set;
    use crate::testing::{encode_records, TestRecord};
    use kafka_protocol::records::{Compression, RecordBatchDecoder};

    const ALL: [(Codec, Compression); 5] = [
        (Codec::None, Compression::None),
        (Codec::Gzip, Compression::Gzip),
        (Codec::Snappy, Compression::Snappy),
        (Codec::Lz4, Compression::Lz4),
        (Codec::Zstd, Compression::Zstd),
    ];

    fn at_default(codec: Codec) -> TopicCompression {
        TopicCompression::at_default(codec)
    }

    /// Each codec's levels, Kafka's range ends included, give the same
    /// records; a higher level is no larger on compressible data.
    #[test]
    fn levels_are_honoured() {
        let batch = encode_records(&records(300, 400), -1, -1, -1, Compression::None);
        for (codec, levels) in [
            ("gzip", vec![-1, 1, 9]),
            ("lz4", vec![1, 9, 17]),
            ("zstd", vec![-5, 1, 3, 22]),
        ] {
            let mut sizes = Vec::new();
            for level in levels {
                let t =
                    TopicCompression::from_topic_configs(codec, |_| Some(level)).expect("a codec");
                assert_eq!(t.level, level);
                let out = transcode_batch(&batch, t, 1 << 20).expect("transcodes");
                let got = RecordBatchDecoder::decode(&mut bytes::Bytes::from(out.clone()))
                    .expect("decodes")
                    .records;
                assert_eq!(got.len(), 300, "{codec} level {level}");
                sizes.push(out.len());
            }
            assert!(sizes.last() <= sizes.get(1), "{codec}: {sizes:?}");
        }
    }

    fn records(n: usize, size: usize) -> Vec<TestRecord> {
        (0..n)
            .map(|i| {
                (
                    (i % 3 != 0).then(|| bytes::Bytes::from(format!("key-{i}"))),
                    Some(bytes::Bytes::from(format!("{i}:{}", "v".repeat(size)))),
                    1_000 + i as i64,
                )
            })
            .collect()
    }

    /// Every codec into every codec: the same records, offsets, timestamps
    /// and producer fields, read back by kafka-protocol's decoder, with the
    /// header's codec, length and CRC right.
    #[test]
    fn every_codec_into_every_codec_keeps_the_records() {
        let recs = records(500, 300);
        for (from, from_c) in ALL {
            let batch = encode_records(&recs, 42, 3, 100, from_c);
            let expected = RecordBatchDecoder::decode(&mut bytes::Bytes::from(batch.clone()))
                .expect("decodes")
                .records;
            for (to, _) in ALL {
                let out = transcode_batch(&batch, at_default(to), 1 << 20)
                    .unwrap_or_else(|e| panic!("{from:?} -> {to:?}: {e}"));
                let h = validate_record_set(&out).expect("valid")[0];
                assert_eq!(h.compression(), to.attribute(), "{from:?} -> {to:?}");
                assert_eq!(
                    (
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.records_count
                    ),
                    (42, 3, 100, 500)
                );
                let got = RecordBatchDecoder::decode(&mut bytes::Bytes::from(out))
                    .expect("decodes")
                    .records;
                assert_eq!(got, expected, "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn a_batch_past_the_limit_is_refused() {
        // 2 MiB of records that compress well: fine as zstd under 1 MiB,
        // too large uncompressed.
        let batch = encode_records(&records(2_000, 1_000), -1, -1, -1, Compression::Zstd);
        assert!(batch.len() < 1 << 20);
        assert!(transcode_batch(&batch, at_default(Codec::Gzip), 1 << 20).is_ok());
        assert_eq!(
            transcode_batch(&batch, at_default(Codec::None), 1 << 20),
            Err(TranscodeError::TooLarge {
                codec: Codec::None,
                limit: 1 << 20
            })
        );
    }

    #[test]
    fn a_body_that_does_not_decompress_is_refused() {
        let mut batch = encode_records(&records(10, 100), -1, -1, -1, Compression::Lz4);
        let end = batch.len();
        batch[BATCH_HEADER_LEN + 4..end].fill(0xAB);
        assert!(matches!(
            transcode_batch(&batch, at_default(Codec::Zstd), 1 << 20),
            Err(TranscodeError::Decompress(_))
        ));
    }

    #[test]
    fn only_a_named_codec_that_differs_needs_a_transcode() {
        assert!(!needs_transcode(1, None));
        assert!(!needs_transcode(4, Codec::from_topic_config("zstd")));
        assert!(needs_transcode(4, Codec::from_topic_config("uncompressed")));
        assert!(needs_transcode(0, Codec::from_topic_config("lz4")));
        assert_eq!(Codec::from_topic_config("producer"), None);
    }
}

//! The bodies of the fuzz targets, shared by the libFuzzer binaries
//! (fuzz/fuzz_targets) and the stable corpus replay (tests/fuzz_corpus.rs).
//! Each feeds arbitrary bytes to code that reads what clients or disks give
//! the broker; the property is that it returns (an error or a value) without
//! panicking, and never allocates what the input merely claims (libFuzzer's
//! malloc limit turns such an allocation into a crash).

use bytes::Bytes;
use std::path::Path;
use strand_protocol::batch::{self, BatchIter};
use strand_types::{LeaderEpoch, Offset};

/// A request frame as the server reads it: the size prefix, then the
/// header and body decoded for every API and version Strand serves.
pub fn request(data: &[u8]) {
    if data.len() >= 4 {
        let _ = strand_protocol::frame::check_frame_len(
            [data[0], data[1], data[2], data[3]],
            100 << 20,
        );
    }
    let _ = strand_protocol::request::decode_request(Bytes::copy_from_slice(data));
}

/// Size of a v2 record batch header.
const HEADER: usize = 61;

/// A v2 batch around `records` (the records section, possibly compressed)
/// with a correct CRC, so that the checks behind the CRC are reached.
fn batch_around(records: &[u8], attributes: i16, count: i32, last_delta: i32) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER + records.len());
    b.extend_from_slice(&0i64.to_be_bytes()); // base offset
    b.extend_from_slice(&((HEADER - 12 + records.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
    b.push(2); // magic
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, below
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&last_delta.to_be_bytes());
    b.extend_from_slice(&0i64.to_be_bytes()); // base timestamp
    b.extend_from_slice(&0i64.to_be_bytes()); // max timestamp
    b.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    b.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    b.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(records);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Record sets as Produce carries them. The first byte picks the mode:
/// even, the bytes are a record set as sent (framing and CRC checks first);
/// odd, they are the records section of one well-formed batch whose codec,
/// record count and flags come from the next bytes, so the decompressors
/// and the record walk see arbitrary input behind a valid CRC.
pub fn record_batch(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let set = if mode % 2 == 0 || rest.len() < 6 {
        rest.to_vec()
    } else {
        // attributes: codec (0-4), timestamp type, transactional, control.
        let attributes = i16::from(rest[0] % 5) | (i16::from(rest[1] & 0b111) << 3);
        let count = i32::from_be_bytes([0, 0, rest[2], rest[3]]);
        let last_delta = i32::from(rest[4]);
        batch_around(&rest[6..], attributes, count, last_delta)
    };
    let validated = batch::validate_record_set(&set);
    // A topic's compression.type: whatever a validated batch holds, its
    // transcode into any codec is refused or is a valid batch of as many
    // records (the output bounded by the limit).
    if let Ok(headers) = &validated {
        use strand_protocol::transcode::{transcode_batch, TopicCompression};
        let codec = ["uncompressed", "gzip", "snappy", "lz4", "zstd"][usize::from(mode / 2) % 5];
        let topic = TopicCompression::from_topic_configs(codec, |_| None).expect("a codec");
        let h = headers[0];
        if let Ok(out) = transcode_batch(&set[..h.total_size()], topic, 1 << 20) {
            assert!(out.len() <= 1 << 20);
            let again = batch::validate_record_set(&out).expect("a transcoded batch is valid");
            assert_eq!(again[0].records_count, h.records_count);
            assert_eq!(again[0].compression(), topic.codec.attribute());
        }
    }
    let _ = batch::validate_batch_framing(&set);
    let _ = batch::has_compressed_batch(&set);
    let _ = batch::has_transactional_batch(&set);
    let valid = batch::valid_prefix_len(&set);
    assert!(valid <= set.len());
    for (at, h) in BatchIter::new(&set[..valid]) {
        let b = &set[at..at + h.total_size()];
        let _ = batch::keyless_record_indexes(b);
        let _ = batch::end_txn_marker(b);
        let _ = batch::control_record_type(b);
    }
    if set.len() > HEADER {
        let codec = i16::from(set[22] & 0b111);
        let _ = strand_protocol::record_count::count_records(codec, &set[HEADER..], 1 << 20);
    }
}

/// The files a partition directory holds, each cut from the input.
const LOG_FILES: [&str; 10] = [
    "00000000000000000000.log",
    "00000000000000000000.index",
    "00000000000000000000.timeindex",
    "00000000000000000000.txnindex",
    "00000000000000000000.snapshot",
    "leader-epoch-checkpoint",
    "recovery-point",
    "log-start-offset",
    "high-watermark",
    ".kafka_cleanshutdown",
];

/// A partition directory as a crash or a bad disk may leave it: each file's
/// length is one input byte (times 16 for the segment), its contents the
/// bytes that follow. The log opens (recovering) or says why not; once
/// open, reading, appending and truncating work on what it recovered.
pub fn log_open(data: &[u8]) {
    let dir = match tempfile::Builder::new()
        .prefix("fuzz-log-")
        .tempdir_in(scratch())
    {
        Ok(d) => d,
        Err(_) => return,
    };
    let mut rest = data;
    for (i, name) in LOG_FILES.iter().enumerate() {
        let Some((&len, tail)) = rest.split_first() else {
            break;
        };
        let len = if i == 0 {
            usize::from(len) * 16
        } else {
            usize::from(len)
        };
        let len = len.min(tail.len());
        if len > 0 || i == LOG_FILES.len() - 1 {
            let _ = std::fs::write(dir.path().join(name), &tail[..len]);
        }
        rest = &tail[len..];
    }
    open_and_use(dir.path());
}

fn scratch() -> &'static Path {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        Path::new("/tmp")
    }
}

fn open_and_use(dir: &Path) {
    let config = strand_log::LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 64,
        ..strand_log::LogConfig::default()
    };
    let Ok(mut log) = strand_log::PartitionLog::open(dir, config) else {
        return;
    };
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    assert!(start <= end, "log start {start} past the LEO {end}");
    if let Ok(r) = log.read(start, 1 << 20, Offset::new(i64::MAX), true) {
        assert_eq!(batch::valid_prefix_len(&r.records), r.records.len());
    }
    let _ = log.offset_for_timestamp(0);
    let _ = log.aborted_txns();
    let _ = log.epoch_entries();
    if let Ok(Some((_, snapshot))) = log.latest_producer_snapshot() {
        let _ = strand_txn::ProducerStateManager::from_snapshot(&snapshot);
    }
    let b = batch_around(&one_record(), 0, 1, 0);
    if let Ok(headers) = batch::validate_record_set(&b) {
        if log
            .append_as_leader(&b, &headers, LeaderEpoch::ZERO, None)
            .is_ok()
        {
            assert_eq!(log.log_end_offset(), end.next());
        }
    }
    let _ = log.truncate_to(start);
    let _ = log.flush();
}

/// One record with no key and a 1-byte value, as the records section of a
/// batch: length, attributes, timestamp delta, offset delta, key, value,
/// headers (varints).
fn one_record() -> Vec<u8> {
    vec![14, 0, 0, 0, 1, 2, b'v', 0]
}

/// The coordinators' records read back from `__transaction_state` on load
/// (key, then value: the first byte splits them).
pub fn coordinator_state(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let split = usize::from(split).min(rest.len());
    let (key, value) = rest.split_at(split);
    let _ = strand_txn::txn_log::decode_key(key);
    let _ = strand_txn::txn_log::decode_value(value);
    let _ = strand_txn::ProducerStateManager::from_snapshot(data);
}

//! Crash test: under a produce load (acks=all) the broker is killed with
//! SIGKILL at random moments; between rounds the tail of the last segment is
//! damaged the way a torn write leaves it (cut inside unacknowledged batches,
//! flipped bytes there, a half-written batch, garbage). After each restart
//! every acknowledged batch must read back identical at its offset, and the log
//! must end on a valid batch.

mod common;

use bytes::Bytes;
use common::Client;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use rand::Rng;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use strand_compat_tests::Broker;
use strand_protocol::batch::{valid_prefix_len, BatchHeader, BatchIter};
use strand_protocol::testing::{encode_records, TestRecord};

const TOPIC: &str = "crash";

fn batch(values: &[String]) -> Bytes {
    let records: Vec<TestRecord> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                Some(Bytes::from(format!("key-{v}"))),
                Some(Bytes::from(v.clone())),
                1_700_000_000_000 + i as i64,
            )
        })
        .collect();
    let compression = if values.len().is_multiple_of(2) {
        Compression::Lz4
    } else {
        Compression::None
    };
    Bytes::from(encode_records(&records, -1, -1, -1, compression))
}

fn produce(c: &mut Client, records: Bytes) -> std::io::Result<(i16, i64)> {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &req)?;
    let p = &resp.responses[0].partition_responses[0];
    Ok((p.error_code, p.base_offset))
}

/// Produces until the connection fails; sends (base offset, values) of each acknowledged batch.
fn producer(addr: String, round: usize, acked: mpsc::Sender<(i64, Vec<String>)>) {
    let Ok(mut c) = Client::connect(&addr) else {
        return;
    };
    let mut rng = rand::thread_rng();
    for i in 0.. {
        let n = rng.gen_range(1..20);
        let values: Vec<String> = (0..n)
            .map(|j| format!("r{round}-b{i}-m{j}-{}", "p".repeat(rng.gen_range(0..200))))
            .collect();
        match produce(&mut c, batch(&values)) {
            Ok((0, base)) => {
                if acked.send((base, values)).is_err() {
                    return;
                }
            }
            Ok((code, _)) => panic!("produce failed with error code {code}"),
            Err(_) => return, // the broker was killed
        }
    }
}

fn last_segment(dir: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment file")
}

/// Damages bytes after the last acknowledged batch only: what a torn write can leave.
fn damage_tail(segment: &Path, max_acked_offset: i64, rng: &mut impl Rng) -> &'static str {
    let mut bytes = std::fs::read(segment).unwrap();
    let acked_end = BatchIter::new(&bytes)
        .find(|(_, h)| h.last_offset() >= max_acked_offset)
        .map(|(pos, h)| pos + h.total_size())
        .unwrap_or(0);
    let mode = rng.gen_range(0..4);
    if mode < 2 && bytes.len() == acked_end {
        // Nothing unacknowledged was written before the kill: add a whole
        // batch as if its write had reached the file, then tear it.
        let mut extra = batch(&["unacked".to_string(), "y".repeat(200)]).to_vec();
        let next = BatchIter::new(&bytes)
            .last()
            .map(|(_, h)| h.next_offset())
            .unwrap_or(0);
        strand_protocol::batch::assign_offset_and_epoch(&mut extra, next, 0);
        bytes.extend_from_slice(&extra);
    }
    let unacked = bytes.len() - acked_end;
    let what = match mode {
        0 if unacked > 0 => {
            bytes.truncate(acked_end + rng.gen_range(0..unacked));
            "cut inside unacknowledged batches"
        }
        1 if unacked > 0 => {
            for _ in 0..rng.gen_range(1..8) {
                let i = acked_end + rng.gen_range(0..unacked);
                bytes[i] ^= rng.gen_range(1..=255u8);
            }
            "flipped bytes in unacknowledged batches"
        }
        2 => {
            let b = batch(&["torn".to_string(), "write".to_string(), "x".repeat(300)]);
            let cut = rng.gen_range(1..b.len());
            bytes.extend_from_slice(&b[..cut]);
            "appended a half-written batch"
        }
        _ => {
            let n = rng.gen_range(1..512);
            bytes.extend((0..n).map(|_| rng.gen::<u8>()));
            "appended garbage"
        }
    };
    std::fs::write(segment, &bytes).unwrap();
    what
}

/// Reads the whole partition back: base offset -> values of each batch.
fn read_all(addr: &str) -> (BTreeMap<i64, Vec<String>>, i64) {
    let mut c = Client::connect(addr).unwrap();
    let mut out = BTreeMap::new();
    let mut offset = 0;
    loop {
        let req = common::consumer_fetch(TOPIC, 0, offset, 0, 0);
        let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &req).unwrap();
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch at {offset}");
        let records = p.records.clone().unwrap_or_default();
        if records.is_empty() {
            assert_eq!(offset, p.high_watermark, "read stops only at the HW");
            return (out, p.high_watermark);
        }
        let headers = strand_protocol::batch::validate_record_set(&records)
            .expect("fetched batches are whole and valid");
        let mut buf = records.clone();
        for h in headers {
            let set = RecordBatchDecoder::decode(&mut buf).expect("batch decodes");
            assert_eq!(set.records.len() as i32, h.records_count);
            if h.last_offset() >= offset {
                out.insert(
                    h.base_offset,
                    set.records
                        .iter()
                        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
                        .collect(),
                );
            }
            offset = h.next_offset();
        }
    }
}

#[test]
fn acknowledged_batches_survive_sigkill_and_torn_tails() {
    let mut broker = Broker::start(
        &common::strand_bin(),
        &[("log.segment.bytes", "65536"), ("num.partitions", "1")],
    )
    .unwrap();
    let partition_dir = broker.data_dir().join("data").join(format!("{TOPIC}-0"));
    // Auto-create the topic through Metadata, as a client would.
    common::auto_create(&mut Client::connect(&broker.addr()).unwrap(), TOPIC);
    let mut rng = rand::thread_rng();
    let mut acked: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let rounds = 6;
    for round in 0..rounds {
        let (tx, rx) = mpsc::channel();
        let addr = broker.addr();
        let producer = std::thread::spawn(move || producer(addr, round, tx));
        // Kill at a random moment: after a random number of acknowledgements.
        let kill_after = rng.gen_range(20..400);
        for _ in 0..kill_after {
            let (base, values) = rx.recv().expect("producer is running");
            acked.insert(base, values);
        }
        broker.kill9().unwrap();
        producer.join().unwrap();
        acked.extend(rx.try_iter());
        let max_acked = acked
            .iter()
            .map(|(b, v)| b + v.len() as i64 - 1)
            .max()
            .unwrap();
        let dir = if partition_dir.exists() {
            partition_dir.clone()
        } else {
            find_partition_dir(broker.data_dir())
        };
        let what = damage_tail(&last_segment(&dir), max_acked, &mut rng);
        eprintln!(
            "round {round}: {} acknowledged batches so far; {what}",
            acked.len()
        );
        broker.restart().unwrap();

        let (log, hw) = read_all(&broker.addr());
        for (base, values) in &acked {
            assert_eq!(
                log.get(base),
                Some(values),
                "round {round}: acknowledged batch at offset {base} is readable and identical"
            );
        }
        let last = log
            .iter()
            .next_back()
            .map(|(b, v)| b + v.len() as i64)
            .unwrap_or(0);
        assert_eq!(last, hw, "the log ends on its last valid batch");
        let seg = std::fs::read(last_segment(&dir)).unwrap();
        assert_eq!(
            valid_prefix_len(&seg),
            seg.len(),
            "the segment ends on a valid batch"
        );
        if let Some((_, h)) = BatchIter::new(&seg).last() {
            assert_eq!(
                BatchHeader::parse(&seg[seg.len() - h.total_size()..])
                    .unwrap()
                    .next_offset(),
                hw
            );
        }
    }
}

fn find_partition_dir(root: &Path) -> PathBuf {
    for entry in walk(root) {
        if entry
            .file_name()
            .is_some_and(|n| n.to_string_lossy() == format!("{TOPIC}-0"))
        {
            return entry;
        }
    }
    panic!(
        "partition directory for {TOPIC}-0 not found under {}",
        root.display()
    );
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.push(p.clone());
                out.extend(walk(&p));
            }
        }
    }
    out
}

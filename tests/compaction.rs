//! Compaction end to end (issue 34), through a real broker:
//!
//! * kill -9 at random moments while keyed writes and the cleaner run on a
//!   compacted topic with small segments: after each restart every record
//!   still in the log is the one acknowledged at its offset, and each key
//!   reads as its latest acknowledged write (or a later one in flight), a
//!   deleted key never as an older value;
//! * the internal topics stay bounded: a few groups commit many offsets and
//!   one transactional id runs many transactions; `__consumer_offsets` and
//!   `__transaction_state` end within a small multiple of their live state
//!   on disk, and after a restart both coordinators load them in well under
//!   a second and answer from the latest state. `STRAND_COMPACTION_OFFSETS`
//!   and `STRAND_COMPACTION_TXNS` scale it (the figures in BENCHMARKS.md are
//!   1,000,000 and 100,000, in a release build).

mod common;

use bytes::Bytes;
use common::{
    add_partition, create_topic_with, end_txn, eventually, find_coordinator,
    init_producer_id_with_timeout, offset_fetch, Client,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use rand::Rng;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use strand_compat_tests::Broker;
use strand_protocol::testing::{encode_records, TestRecord};

const TOPIC: &str = "compacted";
const KEYS: u32 = 40;

/// One write: its key and value (`None`: a tombstone).
type Write = (u32, Option<String>);

fn produce(c: &mut Client, writes: &[Write]) -> std::io::Result<(i16, i64)> {
    let records: Vec<TestRecord> = writes
        .iter()
        .map(|(k, v)| {
            (
                Some(Bytes::from(format!("k{k}"))),
                v.clone().map(Bytes::from),
                1_700_000_000_000,
            )
        })
        .collect();
    let compression = if writes.len().is_multiple_of(2) {
        Compression::Zstd
    } else {
        Compression::None
    };
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(encode_records(
                    &records,
                    -1,
                    -1,
                    -1,
                    compression,
                ))))])]);
    let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &req)?;
    let p = &resp.responses[0].partition_responses[0];
    Ok((p.error_code, p.base_offset))
}

/// Writes keyed batches until the connection fails; sends each
/// acknowledged batch's base offset and writes.
fn producer(addr: String, round: usize, acked: mpsc::Sender<(i64, Vec<Write>)>) {
    let Ok(mut c) = Client::connect(&addr) else {
        return;
    };
    let mut rng = rand::thread_rng();
    for i in 0.. {
        let writes: Vec<Write> = (0..rng.gen_range(1..5))
            .map(|j| {
                let k = rng.gen_range(0..KEYS);
                let value = (!rng.gen_ratio(1, 8)).then(|| format!("r{round}-b{i}-{j}"));
                (k, value)
            })
            .collect();
        match produce(&mut c, &writes) {
            Ok((0, base)) => {
                if acked.send((base, writes)).is_err() {
                    return;
                }
            }
            _ => return,
        }
    }
}

/// Every record from offset 0 to the HW: offset -> (key, value).
fn read_log(addr: &str) -> BTreeMap<i64, (u32, Option<String>)> {
    let mut c = Client::connect(addr).unwrap();
    let mut out = BTreeMap::new();
    let mut offset = 0;
    loop {
        let req = common::consumer_fetch(TOPIC, 0, offset, 0, 0);
        let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &req).unwrap();
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch at {offset}");
        let records = p.records.clone().unwrap_or_default();
        let start = offset;
        for (at, h) in strand_protocol::batch::BatchIter::new(&records) {
            let mut one = records.slice(at..at + h.total_size());
            let set = RecordBatchDecoder::decode(&mut one).expect("batch decodes");
            for r in set.records.iter().filter(|r| r.offset >= start) {
                let key = String::from_utf8_lossy(r.key.as_ref().expect("keyed"));
                let key: u32 = key[1..].parse().expect("k<n>");
                let value = r
                    .value
                    .as_ref()
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                out.insert(r.offset, (key, value));
            }
            offset = offset.max(h.next_offset());
        }
        if offset == start || offset >= p.high_watermark {
            return out;
        }
    }
}

#[test]
fn a_kill_during_cleaning_keeps_every_latest_value() {
    let mut broker = Broker::start(
        &common::strand_bin(),
        &[
            ("num.partitions", "1"),
            ("log.cleanup.policy", "compact"),
            ("log.segment.bytes", "4096"),
            ("log.cleaner.backoff.ms", "10"),
            ("log.cleaner.min.cleanable.ratio", "0.01"),
            ("log.cleaner.delete.retention.ms", "0"),
        ],
    )
    .unwrap();
    common::auto_create(&mut Client::connect(&broker.addr()).unwrap(), TOPIC);
    let mut rng = rand::thread_rng();
    // offset -> the acknowledged write there.
    let mut acked: BTreeMap<i64, Write> = BTreeMap::new();
    let rounds = 20;
    for round in 0..rounds {
        let (tx, rx) = mpsc::channel();
        let addr = broker.addr();
        let producer = std::thread::spawn(move || producer(addr, round, tx));
        let kill_after = rng.gen_range(50..400);
        for _ in 0..kill_after {
            let (base, writes) = rx.recv().expect("the producer runs");
            for (i, w) in writes.into_iter().enumerate() {
                acked.insert(base + i as i64, w);
            }
        }
        broker.kill9().unwrap();
        producer.join().unwrap();
        for (base, writes) in rx.try_iter() {
            for (i, w) in writes.into_iter().enumerate() {
                acked.insert(base + i as i64, w);
            }
        }
        broker.restart().unwrap();
        let log = read_log(&broker.addr());
        // Offsets keep what was acknowledged there.
        for (offset, (key, value)) in &log {
            if let Some(w) = acked.get(offset) {
                assert_eq!(
                    (&w.0, &w.1),
                    (key, value),
                    "round {round}: offset {offset} changed"
                );
            }
        }
        // Each key reads as its latest acknowledged write or a later one.
        let mut latest_acked: BTreeMap<u32, i64> = BTreeMap::new();
        for (o, (k, _)) in &acked {
            latest_acked.insert(*k, *o);
        }
        let mut latest_read: BTreeMap<u32, i64> = BTreeMap::new();
        for (o, (k, _)) in &log {
            latest_read.insert(*k, *o);
        }
        for (k, l) in &latest_acked {
            match latest_read.get(k) {
                Some(o) => assert!(
                    o >= l,
                    "round {round}: key {k} reads offset {o}, older than its acknowledged {l}"
                ),
                None => assert!(
                    acked[l].1.is_none(),
                    "round {round}: key {k} is gone, its last acknowledged write {l} is a value"
                ),
            }
        }
        eprintln!(
            "round {round}: {} records acknowledged, {} in the log",
            acked.len(),
            log.len()
        );
    }
    // The cleaner did its work: far fewer records than were written.
    let log = read_log(&broker.addr());
    assert!(
        log.len() < acked.len() / 2,
        "{} records left of {}",
        log.len(),
        acked.len()
    );
}

fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Bytes of the `.log` files of a partition directory.
fn segments_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The `elapsed_ms` of the last log line containing `what`, after byte
/// `from` of the broker's log.
fn load_ms(broker: &Broker, from: usize, what: &str) -> Option<u64> {
    let log = std::fs::read(broker.log_path()).ok()?;
    let log = strip_ansi(log.get(from..)?);
    let line = log.lines().rev().find(|l| l.contains(what))?;
    let at = line.find("elapsed_ms=")? + "elapsed_ms=".len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The log's text without its colour escapes (`ESC [ ... m`).
fn strip_ansi(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `call` again while it answers CONCURRENT_TRANSACTIONS (51), after a
/// short pause, as clients retry it.
fn settled(mut call: impl FnMut() -> i16) -> i16 {
    for _ in 0..5_000 {
        let code = call();
        if code != 51 {
            return code;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    51
}

fn commit_all(c: &mut Client, group: &str, partitions: i32, offset: i64) -> i16 {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("offsets-source")))
            .with_partitions(
                (0..partitions)
                    .map(|p| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(-1)
                    })
                    .collect(),
            )]);
    let resp: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &req).expect("commit");
    resp.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .find(|e| *e != 0)
        .unwrap_or(0)
}

#[test]
fn internal_topics_stay_bounded_and_load_their_live_state() {
    const SEGMENT: u64 = 1 << 20;
    const TXN_SEGMENT: u64 = 64 << 10;
    const GROUPS: usize = 4;
    const PARTITIONS: i32 = 100;
    let offsets = env_count("STRAND_COMPACTION_OFFSETS", 100_000);
    let txns = env_count("STRAND_COMPACTION_TXNS", 3_000);
    let segment = SEGMENT.to_string();
    let txn_segment = TXN_SEGMENT.to_string();
    let mut broker = Broker::start(
        &common::strand_bin(),
        &[
            ("offsets.topic.num.partitions", "1"),
            ("offsets.topic.replication.factor", "1"),
            ("offsets.topic.segment.bytes", &segment),
            ("transaction.state.log.num.partitions", "1"),
            ("transaction.state.log.replication.factor", "1"),
            ("transaction.state.log.min.isr", "1"),
            ("transaction.state.log.segment.bytes", &txn_segment),
            ("log.cleaner.backoff.ms", "100"),
        ],
    )
    .unwrap();
    let addr = broker.addr();
    let mut c = Client::connect(&addr).unwrap();
    assert_eq!(
        create_topic_with(&mut c, "offsets-source", PARTITIONS, 1, &[]).unwrap(),
        0
    );
    assert_eq!(
        create_topic_with(&mut c, "txn-target", 1, 1, &[]).unwrap(),
        0
    );
    let wait = Duration::from_secs(30);
    eventually("the group coordinator", wait, || {
        let (e, _) = find_coordinator(&addr, "g0", 0, wait)?;
        (e == 0).then_some(())
    });
    let started = std::time::Instant::now();
    // Offsets: every group commits every partition, round after round.
    let rounds = (offsets / (GROUPS as u64 * PARTITIONS as u64)).max(1) as i64;
    for round in 0..rounds {
        for g in 0..GROUPS {
            assert_eq!(commit_all(&mut c, &format!("g{g}"), PARTITIONS, round), 0);
        }
    }
    // Transactions: one transactional id, one partition, committed each time.
    let txn = "bounded-txn";
    eventually("the transaction coordinator", wait, || {
        let (e, _) = find_coordinator(&addr, txn, 1, wait)?;
        (e == 0).then_some(())
    });
    let (e, pid, epoch) = eventually("InitProducerId", wait, || {
        let r = init_producer_id_with_timeout(&mut c, Some(txn), None, 60_000);
        (r.0 == 0).then_some(r)
    });
    assert_eq!(e, 0);
    for _ in 0..txns {
        // CONCURRENT_TRANSACTIONS while the last one's markers are written.
        let code = settled(|| add_partition(&mut c, txn, (pid, epoch), "txn-target"));
        assert_eq!(code, 0);
        assert_eq!(settled(|| end_txn(&mut c, txn, (pid, epoch), true)), 0);
    }
    eprintln!("written in {:?}", started.elapsed());
    let data = broker.data_dir().join("data");
    let offsets_dir = data.join("__consumer_offsets-0");
    let txn_dir = data.join("__transaction_state-0");
    // Cleaned down to the live state, a segment being written and one
    // waiting for the cleaner.
    let sizes = eventually(
        "the internal topics cleaned",
        Duration::from_secs(120),
        || {
            let sizes = (segments_size(&offsets_dir), segments_size(&txn_dir));
            (sizes.0 <= 3 * SEGMENT && sizes.1 <= 3 * TXN_SEGMENT).then_some(sizes)
        },
    );
    eprintln!(
        "{offsets} offsets committed, __consumer_offsets {} bytes; {txns} transactions, __transaction_state {} bytes",
        sizes.0, sizes.1
    );
    // A restart loads what is left, fast, and answers from the latest state.
    let from = std::fs::metadata(broker.log_path()).map_or(0, |m| m.len() as usize);
    broker.terminate().unwrap();
    broker.restart().unwrap();
    let addr = broker.addr();
    let all: Vec<i32> = (0..PARTITIONS).collect();
    for g in 0..GROUPS {
        let fetched = eventually("OffsetFetch after the restart", wait, || {
            let f = offset_fetch(&addr, &format!("g{g}"), "offsets-source", &all, wait)?;
            (f.error_code == 0).then_some(f)
        });
        for (p, (offset, error)) in &fetched.partitions {
            assert_eq!(
                (*offset, *error),
                (rounds - 1, 0),
                "group g{g} partition {p}"
            );
        }
    }
    let mut c = Client::connect(&addr).unwrap();
    let (e, pid2, epoch2) = eventually("InitProducerId after the restart", wait, || {
        let r = init_producer_id_with_timeout(&mut c, Some(txn), None, 60_000);
        (r.0 == 0).then_some(r)
    });
    assert_eq!(
        (e, pid2, epoch2),
        (0, pid, epoch + 1),
        "the transactional id's state survived"
    );
    let groups_ms = eventually("the offsets load logged", wait, || {
        load_ms(&broker, from, "offsets partition loaded")
    });
    let txns_ms = eventually("the transaction state load logged", wait, || {
        load_ms(&broker, from, "transaction state loaded")
    });
    eprintln!("loads after the restart: offsets {groups_ms} ms, transactions {txns_ms} ms");
    assert!(
        groups_ms < 1_000 && txns_ms < 1_000,
        "loads {groups_ms} ms, {txns_ms} ms"
    );
}

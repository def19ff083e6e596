//! The partition side of transactions on one broker, driven with raw
//! requests (no transaction coordinator needed): transactional produce opens
//! transactions and holds the LSO at the first one, WriteTxnMarkers commits
//! one and aborts the other, read_committed Fetch and ListOffsets follow the
//! LSO and list the aborted transaction, a librdkafka read_committed consumer
//! sees only committed and plain records, and all of it holds after kill -9.
//! Stale markers are fenced by coordinator and producer epoch.

mod common;

use bytes::Bytes;
use common::Client;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};
use strand_compat_tests::Broker;
use strand_protocol::batch::BatchIter;
use strand_protocol::testing::{encode_records_txn, TestRecord};
use strand_protocol::ErrorCode;

const TOPIC: &str = "txnp";
const COORDINATOR_EPOCH: i32 = 5;

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

fn init_producer_id(c: &mut Client) -> i64 {
    let resp: InitProducerIdResponse = c
        .call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .unwrap();
    assert_eq!(resp.error_code, 0);
    resp.producer_id.0
}

/// Produces one batch of `values` (acks=all); a producer id makes it
/// idempotent, `transactional_id` makes the request (and the batch) transactional.
/// Returns (error code, base offset).
fn produce(
    c: &mut Client,
    pid: i64,
    seq: i32,
    transactional_id: Option<&str>,
    values: &[&str],
) -> (i16, i64) {
    produce_raw(
        c,
        pid,
        seq,
        transactional_id,
        transactional_id.is_some(),
        values,
    )
}

fn produce_raw(
    c: &mut Client,
    pid: i64,
    seq: i32,
    transactional_id: Option<&str>,
    transactional_batch: bool,
    values: &[&str],
) -> (i16, i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<TestRecord> = values
        .iter()
        .map(|v| (None, Some(Bytes::from(v.to_string())), now))
        .collect();
    let epoch = if pid >= 0 { 0 } else { -1 };
    let seq = if pid >= 0 { seq } else { -1 };
    let records = Bytes::from(encode_records_txn(
        &recs,
        pid,
        epoch,
        seq,
        Compression::None,
        transactional_batch,
    ));
    let req = ProduceRequest::default()
        .with_transactional_id(
            transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.into()))),
        )
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name())
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &req).unwrap();
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn list_latest(c: &mut Client, isolation_level: i8) -> i64 {
    list_offset_at(c, isolation_level, 5, -1)
}

/// ListOffsets of `timestamp` (-1 latest, -2 earliest) at `version` (v2 is
/// what older librdkafka/kcat send; v1-v3 responses carry no leader epoch).
fn list_offset_at(c: &mut Client, isolation_level: i8, version: i16, timestamp: i64) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation_level)
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic_name())
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp),
            ])]);
    let resp: ListOffsetsResponse = c.call(ApiKey::ListOffsets, version, &req).unwrap();
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

/// What a consumer fetch of partition 0 returned.
#[derive(Debug)]
struct Fetched {
    high_watermark: i64,
    last_stable_offset: i64,
    /// Base offsets of the returned batches.
    batches: Vec<i64>,
    aborted: Option<Vec<(i64, i64)>>,
}

fn fetch_request(
    offset: i64,
    isolation_level: i8,
    min_bytes: i32,
    max_wait_ms: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation_level)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name())
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)
                .with_current_leader_epoch(-1)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)])])
}

fn decode_fetch(resp: &FetchResponse) -> Fetched {
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let records = p.records.clone().unwrap_or_default();
    Fetched {
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        batches: BatchIter::new(&records)
            .map(|(_, h)| h.base_offset)
            .collect(),
        aborted: p.aborted_transactions.as_ref().map(|v| {
            v.iter()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect()
        }),
    }
}

fn fetch(c: &mut Client, offset: i64, isolation_level: i8) -> Fetched {
    let resp: FetchResponse = c
        .call(
            ApiKey::Fetch,
            11,
            &fetch_request(offset, isolation_level, 0, 0),
        )
        .unwrap();
    decode_fetch(&resp)
}

/// One marker per (producer id, producer epoch, coordinator epoch, commit);
/// returns each marker's error code for partition 0 of the topic.
fn write_markers(c: &mut Client, markers: &[(i64, i16, i32, bool)]) -> Vec<i16> {
    write_markers_to(c, TOPIC, markers)
}

fn write_markers_to(c: &mut Client, topic: &str, markers: &[(i64, i16, i32, bool)]) -> Vec<i16> {
    let req = WriteTxnMarkersRequest::default().with_markers(
        markers
            .iter()
            .map(|&(pid, epoch, coordinator_epoch, commit)| {
                WritableTxnMarker::default()
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_transaction_result(commit)
                    .with_coordinator_epoch(coordinator_epoch)
                    .with_topics(vec![WritableTxnMarkerTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partition_indexes(vec![0])])
            })
            .collect(),
    );
    let resp: WriteTxnMarkersResponse = c.call(ApiKey::WriteTxnMarkers, 1, &req).unwrap();
    assert_eq!(resp.markers.len(), markers.len());
    resp.markers
        .iter()
        .zip(markers)
        .map(|(m, (pid, ..))| {
            assert_eq!(m.producer_id.0, *pid);
            m.topics[0].partitions[0].error_code
        })
        .collect()
}

/// (producer id, current txn start offset, coordinator epoch) per producer.
fn describe_producers(c: &mut Client) -> Vec<(i64, i64, i32)> {
    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(topic_name())
        .with_partition_indexes(vec![0])]);
    let resp: DescribeProducersResponse = c.call(ApiKey::DescribeProducers, 0, &req).unwrap();
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.active_producers
        .iter()
        .map(|s| {
            (
                s.producer_id.0,
                s.current_txn_start_offset,
                s.coordinator_epoch,
            )
        })
        .collect()
}

/// Everything a read_committed librdkafka consumer delivers from the start
/// of the partition to its end (offset, value).
fn consume_read_committed(bootstrap: &str, expected: usize) -> Vec<(i64, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "txn-partition-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).expect("assign");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => got.push((
                m.offset(),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            )),
            Some(Err(KafkaError::PartitionEOF(_))) if got.len() >= expected => break,
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => panic!("consumer error: {e}"),
        }
    }
    got
}

/// LSO, HW and the aborted list as a read_committed reader sees them once
/// both transactions ended (markers at 8 and 9).
fn check_after_markers(c: &mut Client, pid_b: i64) {
    assert_eq!(
        list_latest(c, 1),
        10,
        "LSO = HW once the markers are replicated"
    );
    assert_eq!(list_latest(c, 0), 10);
    let f = fetch(c, 0, 1);
    assert_eq!((f.high_watermark, f.last_stable_offset), (10, 10));
    assert_eq!(f.batches, vec![0, 1, 3, 4, 6, 7, 8, 9]);
    assert_eq!(f.aborted, Some(vec![(pid_b, 4)]), "exactly B's transaction");
    // From inside the range: B's marker is past the fetch offset.
    assert_eq!(fetch(c, 6, 1).aborted, Some(vec![(pid_b, 4)]));
    // Past B's marker: nothing aborted overlaps.
    assert_eq!(fetch(c, 10, 1).aborted, Some(vec![]));
    // read_uncommitted: no aborted list, but the LSO is reported.
    let f = fetch(c, 0, 0);
    assert_eq!((f.last_stable_offset, f.aborted), (10, None));
}

#[test]
fn transactions_on_a_partition_survive_kill9() {
    // This test plays the coordinator itself (raw WriteTxnMarkers), so no
    // coordinator could verify its transactional produces (KIP-890 part 1).
    let mut broker = Broker::start(
        &common::strand_bin(),
        &[
            ("num.partitions", "1"),
            ("transaction.partition.verification.enable", "false"),
        ],
    )
    .unwrap();
    let mut c = Client::connect(&broker.addr()).unwrap();
    common::auto_create(&mut c, TOPIC);
    let pid_a = init_producer_id(&mut c);
    let pid_b = init_producer_id(&mut c);

    // 0 plain | 1-2 A | 3 plain | 4-5 B | 6 A | 7 plain
    assert_eq!(produce(&mut c, -1, 0, None, &["p0"]), (0, 0));
    assert_eq!(
        produce(&mut c, pid_a, 0, Some("txn-a"), &["a1", "a2"]),
        (0, 1)
    );
    assert_eq!(produce(&mut c, -1, 0, None, &["p3"]), (0, 3));
    assert_eq!(
        produce(&mut c, pid_b, 0, Some("txn-b"), &["b4", "b5"]),
        (0, 4)
    );
    assert_eq!(produce(&mut c, pid_a, 2, Some("txn-a"), &["a6"]), (0, 6));
    assert_eq!(produce(&mut c, -1, 0, None, &["p7"]), (0, 7));
    // A transactional batch without a transactional id: refused, not appended.
    assert_eq!(
        produce_raw(&mut c, pid_a, 3, None, true, &["x"]).0,
        ErrorCode::TransactionalIdAuthorizationFailed.code()
    );

    // The LSO is A's first offset: 3 and 7 are hidden from read_committed.
    assert_eq!(list_latest(&mut c, 1), 1);
    assert_eq!(list_latest(&mut c, 0), 8);
    assert_eq!(
        list_offset_at(&mut c, 1, 2, -1),
        1,
        "ListOffsets v2 latest read_committed"
    );
    assert_eq!(list_offset_at(&mut c, 0, 2, -1), 8, "ListOffsets v2 latest");
    assert_eq!(
        list_offset_at(&mut c, 0, 2, -2),
        0,
        "ListOffsets v2 earliest"
    );
    let f = fetch(&mut c, 0, 1);
    assert_eq!((f.high_watermark, f.last_stable_offset), (8, 1));
    assert_eq!(f.batches, vec![0]);
    assert_eq!(f.aborted, Some(vec![]));
    let f = fetch(&mut c, 0, 0);
    assert_eq!((f.last_stable_offset, f.aborted), (1, None));
    assert_eq!(f.batches, vec![0, 1, 3, 4, 6, 7]);
    let mut producers = describe_producers(&mut c);
    producers.sort();
    assert_eq!(producers, vec![(pid_a, 1, -1), (pid_b, 4, -1)]);

    // Commit A, abort B.
    assert_eq!(
        write_markers(
            &mut c,
            &[
                (pid_a, 0, COORDINATOR_EPOCH, true),
                (pid_b, 0, COORDINATOR_EPOCH, false)
            ]
        ),
        vec![0, 0]
    );
    check_after_markers(&mut c, pid_b);
    let mut producers = describe_producers(&mut c);
    producers.sort();
    assert_eq!(
        producers,
        vec![
            (pid_a, -1, COORDINATOR_EPOCH),
            (pid_b, -1, COORDINATOR_EPOCH)
        ]
    );

    let committed: Vec<(i64, String)> = [
        (0, "p0"),
        (1, "a1"),
        (2, "a2"),
        (3, "p3"),
        (6, "a6"),
        (7, "p7"),
    ]
    .iter()
    .map(|(o, v)| (*o, v.to_string()))
    .collect();
    assert_eq!(
        consume_read_committed(&broker.addr(), committed.len()),
        committed
    );

    broker.kill9().unwrap();
    // As if neither the index nor a producer snapshot had reached the disk:
    // the start-up replay (from the log start) must re-derive B's entry.
    let dir = broker.data_dir().join("data").join(format!("{TOPIC}-0"));
    let mut removed = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".txnindex") || name.ends_with(".snapshot") {
            std::fs::remove_file(&path).unwrap();
            removed += name.ends_with(".txnindex") as usize;
        }
    }
    assert_eq!(removed, 1, "B's abort was indexed in the one segment");
    broker.restart().unwrap();
    let mut c = Client::connect(&broker.addr()).unwrap();
    common::eventually(
        "partition led after restart",
        Duration::from_secs(30),
        || {
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic_name())
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-1),
                    ])]);
            let resp: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &req).ok()?;
            (resp.topics[0].partitions[0].error_code == 0).then_some(())
        },
    );
    check_after_markers(&mut c, pid_b);
    assert_eq!(
        consume_read_committed(&broker.addr(), committed.len()),
        committed
    );

    // Fencing survives the restart (coordinator epoch read back from the markers).
    assert_eq!(
        write_markers(&mut c, &[(pid_a, 0, COORDINATOR_EPOCH - 1, true)]),
        vec![ErrorCode::TransactionCoordinatorFenced.code()]
    );
    // A marker from a bumped producer epoch is written (no open transaction:
    // no index entry); after it the old epoch is fenced.
    assert_eq!(
        write_markers(&mut c, &[(pid_a, 1, COORDINATOR_EPOCH, false)]),
        vec![0]
    );
    assert_eq!(
        write_markers(&mut c, &[(pid_a, 0, COORDINATOR_EPOCH, true)]),
        vec![ErrorCode::InvalidProducerEpoch.code()]
    );
    assert_eq!(
        write_markers_to(
            &mut c,
            "no-such-topic",
            &[(pid_a, 1, COORDINATOR_EPOCH, true)]
        ),
        vec![ErrorCode::UnknownTopicOrPartition.code()]
    );
    // After the restart the leader epoch is above 0: a v2 answer must still
    // leave it out (it exists from v4; the encoder refuses it below).
    assert_eq!(
        list_offset_at(&mut c, 1, 2, -1),
        11,
        "ListOffsets v2 after restart"
    );
    assert_eq!(
        list_offset_at(&mut c, 0, 2, -2),
        0,
        "ListOffsets v2 earliest after restart"
    );
    assert_eq!(list_latest(&mut c, 1), 11);
    assert_eq!(fetch(&mut c, 0, 1).aborted, Some(vec![(pid_b, 4)]));

    // A read_committed fetch waiting at the LSO completes when the marker
    // that moves it is written (not at max_wait).
    assert_eq!(produce(&mut c, pid_b, 2, Some("txn-b"), &["c11"]), (0, 11));
    assert_eq!(list_latest(&mut c, 1), 11);
    let addr = broker.addr();
    let waiter = std::thread::spawn(move || {
        let mut c = Client::connect(&addr).unwrap();
        let started = Instant::now();
        let resp: FetchResponse = c
            .call(ApiKey::Fetch, 11, &fetch_request(11, 1, 1, 25_000))
            .unwrap();
        (decode_fetch(&resp), started.elapsed())
    });
    assert_eq!(
        write_markers(&mut c, &[(pid_b, 0, COORDINATOR_EPOCH, true)]),
        vec![0]
    );
    let (f, waited) = waiter.join().unwrap();
    assert!(
        waited < Duration::from_secs(20),
        "woken by the LSO move, took {waited:?}"
    );
    assert_eq!(f.last_stable_offset, 13);
    assert_eq!(f.batches, vec![11, 12]);
    assert_eq!(f.aborted, Some(vec![]));
    broker.terminate().unwrap();
}

/// A transactional batch of `pid` at `epoch` (sequence 0, one value).
fn produce_at_epoch(c: &mut Client, pid: i64, epoch: i16, value: &str) -> (i16, i64) {
    let records = Bytes::from(encode_records_txn(
        &[(
            None,
            Some(Bytes::from(value.to_string())),
            1_700_000_000_000,
        )],
        pid,
        epoch,
        0,
        Compression::None,
        true,
    ));
    let req = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("late"))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name())
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &req).unwrap();
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// WriteTxnMarkers v2 of one transaction.version 2 marker for partition 0.
fn write_tv2_marker(c: &mut Client, pid: i64, epoch: i16, commit: bool) -> i16 {
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_transaction_result(commit)
        .with_coordinator_epoch(COORDINATOR_EPOCH)
        .with_transaction_version(2)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(topic_name())
            .with_partition_indexes(vec![0])])]);
    let resp: WriteTxnMarkersResponse = c.call(ApiKey::WriteTxnMarkers, 2, &req).unwrap();
    resp.markers[0].topics[0].partitions[0].error_code
}

/// A late (retried, delayed) commit marker of one transaction must never
/// end the producer's next transaction. With transaction.version 2 the
/// coordinator bumps the epoch before writing a transaction's markers and
/// the next transaction writes at that bumped epoch, so the late marker
/// carries the next transaction's epoch: the partition refuses it while
/// that transaction is open (the simulation's seed 10268 committed a
/// transaction the coordinator had aborted this way), and takes a repeat
/// of the last marker when none is open.
#[test]
fn a_late_marker_never_ends_the_next_transaction() {
    let broker = Broker::start(
        &common::strand_bin(),
        &[
            ("num.partitions", "1"),
            ("transaction.partition.verification.enable", "false"),
        ],
    )
    .unwrap();
    let mut c = Client::connect(&broker.addr()).unwrap();
    common::auto_create(&mut c, TOPIC);
    let pid = init_producer_id(&mut c);
    // The first transaction, at epoch 0, committed with the epoch bumped to 1.
    assert_eq!(produce_at_epoch(&mut c, pid, 0, "first"), (0, 0));
    assert_eq!(write_tv2_marker(&mut c, pid, 1, true), 0);
    // The next transaction writes at epoch 1.
    assert_eq!(produce_at_epoch(&mut c, pid, 1, "second"), (0, 2));
    // The first transaction's marker again, late: refused.
    assert_eq!(
        write_tv2_marker(&mut c, pid, 1, true),
        ErrorCode::InvalidProducerEpoch.code()
    );
    let f = fetch(&mut c, 0, 1);
    assert_eq!(
        f.last_stable_offset, 2,
        "the second transaction is still open"
    );
    assert_eq!(f.batches, vec![0, 1], "read_committed sees only the first");
    // The coordinator aborts the second transaction (epoch bumped to 2).
    assert_eq!(write_tv2_marker(&mut c, pid, 2, false), 0);
    let f = fetch(&mut c, 0, 1);
    assert_eq!(f.last_stable_offset, 4);
    assert_eq!(f.aborted, Some(vec![(pid, 2)]), "the second one aborted");
    // A repeat of that marker with nothing open is written and ends nothing.
    assert_eq!(write_tv2_marker(&mut c, pid, 2, false), 0);
    let f = fetch(&mut c, 0, 1);
    assert_eq!((f.last_stable_offset, f.high_watermark), (5, 5));
}

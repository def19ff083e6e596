//! Strand held side by side with the reference Apache Kafka (issue 16).
//!
//! One node of each runs with the same settings; every scenario asks both
//! the same questions over the wire and writes down what a client can
//! observe (error codes, offsets, high watermark, records read back,
//! configurations and their sources) as labelled facts. The test fails on
//! any fact that differs, unless KNOWN lists it with its reason (and
//! COMPATIBILITY.md explains it); a listed difference that no longer shows
//! fails too, so the list stays true.
//!
//! Needs the reference Kafka: `compat-tests/scripts/fetch-kafka.sh`
//! (`scripts/test.sh` runs it).

mod common;

use common::facts::{compare, note, Facts};
use common::{
    add_partition, batch_around, consumer_fetch, creatable_topic, create_topics, end_txn,
    eventually, fetch_values, init_producer_id_with_timeout, produce_values, strand_bin, Client,
};
use kafka_protocol::messages::{
    describe_configs_request::DescribeConfigsResource, list_offsets_request, ApiKey, BrokerId,
    DescribeConfigsRequest, DescribeConfigsResponse, ListOffsetsRequest, ListOffsetsResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use std::collections::BTreeMap;
use strand_compat_tests::cluster::{Cluster, ClusterSpec, KafkaDist, Server};
use strand_protocol::testing::{encode_batch, put_varint};

/// Facts that differ on purpose: (fact, why). Each one is in COMPATIBILITY.md.
const KNOWN: &[(&str, &str)] = &[
    (
        "config min.insync.replicas (value, source, read-only)",
        "Kafka 4.4 formats with eligible.leader.replicas.version=1, which writes a \
         cluster-wide min.insync.replicas (source DYNAMIC_DEFAULT_BROKER_CONFIG); Strand \
         has no such record, the same value comes from its default",
    ),
    (
        "broker 1's configs after the changes",
        "Kafka's answer for one broker leaves out a replication throttle rate set only \
         cluster-wide (it lists the throttle rates it holds per broker); Strand lists the \
         rate the broker applies, from the cluster-wide setting",
    ),
    (
        "broker config no log cleaner thread",
        "Kafka divides by the thread count while validating and answers Java's \
         ArithmeticException text (\"/ by zero\"); Strand names the setting and its minimum",
    ),
    (
        "produce compression codec 7: error",
        "Kafka fails with UNKNOWN_SERVER_ERROR; Strand names it CORRUPT_MESSAGE",
    ),
    (
        "produce lz4 payload that does not decompress: error",
        "Kafka fails with UNKNOWN_SERVER_ERROR; Strand names it CORRUPT_MESSAGE",
    ),
];

/// Both servers get these, so that what differs is the implementation.
const SETTINGS: &[(&str, &str)] = &[
    ("auto.create.topics.enable", "false"),
    ("num.partitions", "1"),
    ("default.replication.factor", "1"),
    // One node: the internal topics as Kafka's quickstart sets them.
    ("offsets.topic.replication.factor", "1"),
    ("transaction.state.log.replication.factor", "1"),
    ("transaction.state.log.min.isr", "1"),
    // A first join is answered at once, not after Kafka's 3 s default.
    ("group.initial.rebalance.delay.ms", "0"),
    // Timed-out transactions are looked for every half second, not 10 s.
    (
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "500",
    ),
];

fn start(server: Server) -> Cluster {
    let name = server.name();
    // Two log directories (JBOD): DescribeLogDirs and AlterReplicaLogDirs
    // compared with the reference's.
    let mut spec = ClusterSpec::combined(1).with_extra_log_dirs(1);
    for (k, v) in SETTINGS {
        spec = spec.with_override(*k, *v);
    }
    Cluster::start_server(server, spec).unwrap_or_else(|e| panic!("starting {name}: {e}"))
}

/// (label, topic, partitions, replication factor, configs)
type CreateCase<'a> = (&'a str, &'a str, i32, i16, &'a [(&'a str, &'a str)]);

/// CreateTopics: what each malformed or refused request answers.
fn create_topic_errors(c: &mut Client, facts: &mut Facts) {
    let long = "x".repeat(250);
    #[rustfmt::skip]
    let cases: &[CreateCase] = &[
        ("ok", "d-create", 3, 1, &[]),
        ("exists", "d-create", 3, 1, &[]),
        ("space in name", "d bad", 1, 1, &[]),
        ("name '.'", ".", 1, 1, &[]),
        ("name '..'", "..", 1, 1, &[]),
        ("name of 250 chars", &long, 1, 1, &[]),
        ("zero partitions", "d-zero", 0, 1, &[]),
        ("negative partitions", "d-neg", -5, 1, &[]),
        ("replication factor above brokers", "d-rf", 1, 4, &[]),
        ("replication factor 0", "d-rf0", 1, 0, &[]),
        ("unknown config", "d-cfg1", 1, 1, &[("no.such.config", "1")]),
        ("bad cleanup.policy", "d-cfg2", 1, 1, &[("cleanup.policy", "sometimes")]),
        ("bad retention.ms", "d-cfg3", 1, 1, &[("retention.ms", "soon")]),
        ("min.insync.replicas 0", "d-cfg4", 1, 1, &[("min.insync.replicas", "0")]),
        ("broker-only config", "d-cfg5", 1, 1, &[("log.retention.hours", "1")]),
    ];
    for (label, name, partitions, rf, configs) in cases {
        let t = creatable_topic(name, *partitions, *rf, configs);
        let r = create_topics(c, vec![t]).expect("CreateTopics");
        let t = &r.topics[0];
        note(facts, format!("create {label}: error"), t.error_code);
        if t.error_code == 0 {
            note(
                facts,
                format!("create {label}: partitions"),
                t.num_partitions,
            );
        }
    }
}

fn list_offset(c: &mut Client, topic: &str, partition: i32, timestamp: i64) -> (i16, i64) {
    list_offset_with(c, topic, partition, timestamp, 0)
}

/// ListOffsets (v7) of `topic`/`partition` at `timestamp` under `isolation`.
fn list_offset_with(
    c: &mut Client,
    topic: &str,
    partition: i32,
    timestamp: i64,
    isolation: i8,
) -> (i16, i64) {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation)
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(timestamp),
            ])]);
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 7, &req).expect("ListOffsets");
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

fn values(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Creates `topic` (one partition, one replica) and waits until its leader
/// takes writes: Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a moment after
/// CreateTopics, until its metadata reaches the broker (a client retries).
fn create_ready(c: &mut Client, topic: &str) {
    create_ready_with(c, topic, &[]);
}

/// Produce with each acks setting, to partitions and topics that do not
/// exist, then read everything back.
fn produce_and_fetch(c: &mut Client, facts: &mut Facts) {
    create_ready(c, "d-log");
    note(
        facts,
        "produce acks=1",
        produce_values(c, "d-log", 0, 1, 5000, &values(&["a", "b"])).expect("produce"),
    );
    note(
        facts,
        "produce acks=all",
        produce_values(c, "d-log", 0, -1, 5000, &values(&["c"])).expect("produce"),
    );
    note(
        facts,
        "produce acks=2",
        produce_values(c, "d-log", 0, 2, 5000, &values(&["x"])).expect("produce"),
    );
    note(
        facts,
        "produce acks=-2",
        produce_values(c, "d-log", 0, -2, 5000, &values(&["x"])).expect("produce"),
    );
    note(
        facts,
        "produce to partition 7 of 1",
        produce_values(c, "d-log", 7, 1, 5000, &values(&["x"])).expect("produce"),
    );
    note(
        facts,
        "produce to a missing topic",
        produce_values(c, "d-missing", 0, 1, 5000, &values(&["x"])).expect("produce"),
    );
    note(
        facts,
        "produce empty batch",
        produce_values(c, "d-log", 0, 1, 5000, &[]).expect("produce"),
    );
    note(
        facts,
        "produce after them",
        produce_values(c, "d-log", 0, 1, 5000, &values(&["d"])).expect("produce"),
    );

    let f = fetch_values(c, "d-log", 0, 0, 100).expect("fetch");
    note(facts, "fetch 0: error", f.error_code);
    note(facts, "fetch 0: high watermark", f.high_watermark);
    note(facts, "fetch 0: next offset", f.next_offset);
    let read: Vec<(i64, String)> = f
        .records
        .iter()
        .map(|(o, v)| (*o, String::from_utf8_lossy(v).into_owned()))
        .collect();
    note(facts, "fetch 0: records", read);
    note(
        facts,
        "fetch 2 (mid-log): first offset",
        fetch_values(c, "d-log", 0, 2, 100)
            .expect("fetch")
            .records
            .first()
            .map(|r| r.0),
    );
    note(
        facts,
        "fetch at the end: error",
        fetch_values(c, "d-log", 0, 4, 100)
            .expect("fetch")
            .error_code,
    );
    note(
        facts,
        "fetch past the end: error",
        fetch_values(c, "d-log", 0, 100, 100)
            .expect("fetch")
            .error_code,
    );
    note(
        facts,
        "fetch -1: error",
        fetch_values(c, "d-log", 0, -1, 100)
            .expect("fetch")
            .error_code,
    );
    note(
        facts,
        "fetch a missing topic: error",
        fetch_values(c, "d-missing", 0, 0, 100)
            .expect("fetch")
            .error_code,
    );
    note(
        facts,
        "list offsets earliest",
        list_offset(c, "d-log", 0, -2),
    );
    note(facts, "list offsets latest", list_offset(c, "d-log", 0, -1));
    note(
        facts,
        "list offsets of partition 7",
        list_offset(c, "d-log", 7, -1).0,
    );
    note(
        facts,
        "list offsets of a timestamp in the future",
        list_offset(c, "d-log", 0, i64::MAX / 2),
    );
}

/// DescribeConfigs of a topic with one config set: value and source of the
/// configs users read most.
fn describe_topic_configs(c: &mut Client, facts: &mut Facts) {
    // Asked once the topic is served: under load Kafka answers
    // UNKNOWN_TOPIC_OR_PARTITION until its metadata reaches the broker.
    create_ready_with(
        c,
        "d-configs",
        &[("retention.ms", "123456"), ("cleanup.policy", "compact")],
    );
    let keys = [
        "cleanup.policy",
        "retention.ms",
        "retention.bytes",
        "segment.bytes",
        "segment.ms",
        "min.insync.replicas",
        "max.message.bytes",
        "message.timestamp.type",
        "compression.type",
        "unclean.leader.election.enable",
        "min.compaction.lag.ms",
        "delete.retention.ms",
        "local.retention.ms",
    ];
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("d-configs"))
            .with_configuration_keys(Some(
                keys.iter().map(|k| StrBytes::from_static_str(k)).collect(),
            ))]);
    let r: DescribeConfigsResponse = c
        .call(ApiKey::DescribeConfigs, 4, &req)
        .expect("DescribeConfigs");
    let res = &r.results[0];
    note(facts, "describe topic configs: error", res.error_code);
    let mut named: BTreeMap<String, (Option<String>, i8, bool)> = BTreeMap::new();
    for cfg in &res.configs {
        named.insert(
            cfg.name.to_string(),
            (
                cfg.value.as_ref().map(|v| v.to_string()),
                cfg.config_source,
                cfg.read_only,
            ),
        );
    }
    for k in keys {
        note(
            facts,
            format!("config {k} (value, source, read-only)"),
            named.get(k),
        );
    }
    let missing =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("d-missing"))
            .with_configuration_keys(None)]);
    let r: DescribeConfigsResponse = c
        .call(ApiKey::DescribeConfigs, 4, &missing)
        .expect("DescribeConfigs");
    note(
        facts,
        "describe configs of a missing topic: error",
        r.results[0].error_code,
    );
}

/// Produce of a raw record set (None: a null one) to `topic`/0, acks=all: the error.
fn produce_raw(c: &mut Client, topic: &str, records: Option<Vec<u8>>) -> i16 {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(records.map(bytes::Bytes::from))])]);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).expect("produce");
    r.responses[0].partition_responses[0].error_code
}

/// A batch of `n` uncompressed records with its header fields changed by
/// `edit` and its CRC made right again, so only the edit is wrong.
fn edited_batch(n: usize, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = encode_batch(n, -1, -1, -1, Compression::None);
    edit(&mut b);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Malformed record sets: what each is refused with, and that none of them
/// appended anything.
fn malformed_batches(c: &mut Client, facts: &mut Facts) {
    create_ready(c, "d-bad");
    let mut bad_crc = encode_batch(2, -1, -1, -1, Compression::None);
    let n = bad_crc.len();
    bad_crc[n - 1] ^= 0xff;
    let whole = encode_batch(2, -1, -1, -1, Compression::None);
    let cases: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("zero bytes", Some(Vec::new())),
        ("bad CRC", Some(bad_crc)),
        ("truncated", Some(whole[..whole.len() - 5].to_vec())),
        ("a partial header", Some(whole[..30].to_vec())),
        (
            "count 7, last offset delta 1",
            Some(edited_batch(2, |b| {
                b[57..61].copy_from_slice(&7i32.to_be_bytes())
            })),
        ),
        (
            "count 2, last offset delta 5",
            Some(edited_batch(2, |b| {
                b[23..27].copy_from_slice(&5i32.to_be_bytes())
            })),
        ),
        (
            "3 records in a batch that says 2",
            Some(edited_batch(3, |b| {
                b[57..61].copy_from_slice(&2i32.to_be_bytes());
                b[23..27].copy_from_slice(&1i32.to_be_bytes());
            })),
        ),
        (
            "2 records in a batch that says 3",
            Some(edited_batch(2, |b| {
                b[57..61].copy_from_slice(&3i32.to_be_bytes());
                b[23..27].copy_from_slice(&2i32.to_be_bytes());
            })),
        ),
        ("magic 1", Some(edited_batch(2, |b| b[16] = 1))),
        ("magic 3", Some(edited_batch(2, |b| b[16] = 3))),
        (
            "control batch from a client",
            Some(edited_batch(1, |b| b[22] |= 0x20)),
        ),
        (
            "producer id without a sequence",
            Some(edited_batch(1, |b| {
                b[43..51].copy_from_slice(&7i64.to_be_bytes())
            })),
        ),
        (
            "two good batches",
            Some([whole.clone(), whole.clone()].concat()),
        ),
        ("compression codec 7", Some(edited_batch(2, |b| b[22] |= 7))),
        (
            "lz4 payload that does not decompress",
            Some({
                let mut b = encode_batch(20, -1, -1, -1, Compression::Lz4);
                let n = b.len();
                for x in &mut b[70..n - 4] {
                    *x = 0x5a;
                }
                let crc = crc32c::crc32c(&b[21..]);
                b[17..21].copy_from_slice(&crc.to_be_bytes());
                b
            }),
        ),
        (
            "zstd: a record length past 2^31-1",
            Some({
                let mut body = Vec::new();
                put_varint(4i64 << 30, &mut body);
                body.extend([0u8; 64]);
                batch_around(&zstd::encode_all(&body[..], 1).expect("zstd"), 4, 1)
            }),
        ),
        (
            "zstd: 3 records in a batch that says 2",
            Some({
                let whole = encode_batch(3, -1, -1, -1, Compression::None);
                batch_around(&zstd::encode_all(&whole[61..], 1).expect("zstd"), 4, 2)
            }),
        ),
        (
            "over message.max.bytes",
            Some(encode_batch(1500, -1, -1, -1, Compression::None)),
        ),
        (
            "a good batch after a bad one",
            Some({
                let mut v = encode_batch(1, -1, -1, -1, Compression::None);
                let mut bad = encode_batch(1, -1, -1, -1, Compression::None);
                let n = bad.len();
                bad[n - 1] ^= 0xff;
                bad.extend_from_slice(&v);
                v = bad;
                v
            }),
        ),
    ];
    for (label, records) in cases {
        note(
            facts,
            format!("produce {label}: error"),
            produce_raw(c, "d-bad", records),
        );
    }
    note(
        facts,
        "after the malformed batches: latest offset",
        list_offset(c, "d-bad", 0, -1),
    );
}

/// Produce of `values` as one batch of producer `pid` at `epoch` and
/// sequence `seq` (transactional when `txn` names the transaction), acks=all,
/// to `topic`/0: (error, base offset).
fn produce_as(
    c: &mut Client,
    topic: &str,
    producer: (i64, i16, i32),
    txn: Option<&str>,
    values: &[&str],
) -> (i16, i64) {
    produce_as_with(c, topic, producer, txn, values, Compression::None)
}

/// [`produce_as`] with the batch compressed by `codec`.
fn produce_as_with(
    c: &mut Client,
    topic: &str,
    (pid, epoch, seq): (i64, i16, i32),
    txn: Option<&str>,
    values: &[&str],
    codec: Compression,
) -> (i16, i64) {
    let now = now_ms();
    let recs: Vec<strand_protocol::testing::TestRecord> = values
        .iter()
        .map(|v| (None, Some(bytes::Bytes::from(v.to_string())), now))
        .collect();
    let records =
        strand_protocol::testing::encode_records_txn(&recs, pid, epoch, seq, codec, txn.is_some());
    send_produce(c, topic, txn, records)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

/// Produce (v9, acks=all) of `records` to `topic`/0: (error, base offset).
fn send_produce(c: &mut Client, topic: &str, txn: Option<&str>, records: Vec<u8>) -> (i16, i64) {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TransactionalId};
    let req = ProduceRequest::default()
        .with_transactional_id(txn.map(|t| TransactionalId(StrBytes::from_string(t.into()))))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(bytes::Bytes::from(records)))])]);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).expect("produce");
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// InitProducerId (v4): (error, producer id, epoch).
fn init_producer_id(
    c: &mut Client,
    txn: Option<&str>,
    current: Option<(i64, i16)>,
) -> (i16, i64, i16) {
    init_producer_id_with_timeout(c, txn, current, 60_000)
}

/// The idempotent producer's sequence rules.
fn idempotence(c: &mut Client, facts: &mut Facts) {
    create_ready(c, "d-idem");
    // Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first block of
    // producer ids arrives from the controller.
    let wait = std::time::Duration::from_secs(30);
    let (err, pid, epoch) = eventually("InitProducerId", wait, || {
        let r = init_producer_id(c, None, None);
        (r.0 != 14).then_some(r)
    });
    note(
        facts,
        "idempotent: InitProducerId (error, epoch)",
        (err, epoch),
    );
    let at = |seq| (pid, epoch, seq);
    let topic = "d-idem";
    note(
        facts,
        "idempotent: seq 0, 3 records",
        produce_as(c, topic, at(0), None, &["a", "b", "c"]),
    );
    note(
        facts,
        "idempotent: seq 0 again (a retry)",
        produce_as(c, topic, at(0), None, &["a", "b", "c"]),
    );
    note(
        facts,
        "idempotent: seq 5 (a gap)",
        produce_as(c, topic, at(5), None, &["x"]),
    );
    note(
        facts,
        "idempotent: seq 1 (inside the last batch)",
        produce_as(c, topic, at(1), None, &["x"]),
    );
    note(
        facts,
        "idempotent: seq 3, 2 records",
        produce_as(c, topic, at(3), None, &["d", "e"]),
    );
    note(
        facts,
        "idempotent: next epoch at seq 0",
        produce_as(c, topic, (pid, epoch + 1, 0), None, &["f"]),
    );
    note(
        facts,
        "idempotent: the old epoch again",
        produce_as(c, topic, (pid, epoch, 5), None, &["x"]),
    );
    note(
        facts,
        "idempotent: the new epoch at seq 2 (a gap)",
        produce_as(c, topic, (pid, epoch + 1, 2), None, &["x"]),
    );
    note(
        facts,
        "idempotent: an unknown producer at seq 0",
        produce_as(c, topic, (pid + 1000, 0, 0), None, &["g"]),
    );
    note(
        facts,
        "idempotent: an unknown producer at seq 7",
        produce_as(c, topic, (pid + 2000, 0, 7), None, &["x"]),
    );
    note(
        facts,
        "idempotent: latest offset",
        list_offset(c, topic, 0, -1),
    );
    let values: Vec<String> = fetch_values(c, topic, 0, 0, 100)
        .expect("fetch")
        .records
        .iter()
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect();
    note(facts, "idempotent: the log", values);
    note(
        facts,
        "idempotent: DescribeProducers",
        describe_producers(c, topic),
    );
    note(
        facts,
        "DescribeProducers of a missing topic",
        describe_producers(c, "d-no-such-topic").0,
    );
}

fn list_offset_isolated(c: &mut Client, topic: &str, isolation: i8) -> (i16, i64) {
    list_offset_with(c, topic, 0, -1, isolation)
}

/// AddPartitionsToTxn (v3, a client's) of `topic`/0: the partition's error.
/// EndTxn retried while it answers CONCURRENT_TRANSACTIONS (the previous
/// end's markers still being written), as a client retries it: the answer
/// once the coordinator has settled.
fn end_txn_settled(c: &mut Client, txn: &str, producer: (i64, i16), commit: bool) -> i16 {
    eventually(
        "EndTxn past CONCURRENT_TRANSACTIONS",
        std::time::Duration::from_secs(10),
        || {
            let code = end_txn(c, txn, producer, commit);
            (code != 51).then_some(code)
        },
    )
}

/// A transaction's life as a client drives it by hand: what each step
/// answers, the LSO and what read_committed sees, and the fencing of the
/// old epoch.
fn transactions(c: &mut Client, addr: &str, facts: &mut Facts) {
    let topic = "d-txn";
    create_ready(c, topic);
    let txn = "d-txn-id";
    let (err, pid, epoch) = eventually_init(c, addr, txn);
    note(facts, "txn: InitProducerId (error, epoch)", (err, epoch));
    let me = (pid, epoch);
    note(
        facts,
        "txn: produce before AddPartitionsToTxn",
        produce_as(c, topic, (pid, epoch, 0), Some(txn), &["early"]),
    );
    note(
        facts,
        "txn: EndTxn with nothing added",
        end_txn(c, txn, me, true),
    );
    note(
        facts,
        "txn: AddPartitionsToTxn",
        add_partition(c, txn, me, topic),
    );
    note(
        facts,
        "txn: produce",
        produce_as(c, topic, (pid, epoch, 0), Some(txn), &["t1", "t2"]),
    );
    note(
        facts,
        "txn: DescribeProducers while it is open",
        describe_producers(c, topic),
    );
    note(
        facts,
        "txn: non-transactional produce after it",
        produce_values(c, topic, 0, -1, 5000, &values(&["plain"])).expect("produce"),
    );
    note(
        facts,
        "txn: latest, read_uncommitted",
        list_offset_isolated(c, topic, 0),
    );
    note(
        facts,
        "txn: latest, read_committed (the LSO)",
        list_offset_isolated(c, topic, 1),
    );
    note(
        facts,
        "txn: EndTxn at a wrong epoch",
        end_txn(c, txn, (pid, epoch + 5), true),
    );
    note(facts, "txn: EndTxn commit", end_txn(c, txn, me, true));
    let lso = eventually(
        "the LSO passes the commit",
        std::time::Duration::from_secs(10),
        || {
            let (e, o) = list_offset_isolated(c, topic, 1);
            (e == 0 && o >= 4).then_some((e, o))
        },
    );
    note(facts, "txn: after the commit, read_committed latest", lso);
    // Once the markers are written: a retry while they are pending is
    // CONCURRENT_TRANSACTIONS, but when it lands is a race.
    let again = end_txn_settled(c, txn, me, true);
    note(facts, "txn: EndTxn commit again, once complete", again);
    let abort = end_txn_settled(c, txn, me, false);
    note(
        facts,
        "txn: EndTxn abort after the commit, once complete",
        abort,
    );
    note(
        facts,
        "txn: after the commit, read_uncommitted latest",
        list_offset_isolated(c, topic, 0),
    );
    // A second transaction, aborted.
    let (_, _, epoch2) = init_producer_id(c, Some(txn), Some(me));
    note(
        facts,
        "txn: InitProducerId again: epoch step",
        epoch2 - epoch,
    );
    let me2 = (pid, epoch2);
    note(
        facts,
        "txn: the old epoch adds a partition",
        add_partition(c, txn, me, topic),
    );
    note(
        facts,
        "txn: AddPartitionsToTxn at the new epoch",
        add_partition(c, txn, me2, topic),
    );
    note(
        facts,
        "txn: produce at the new epoch",
        produce_as(c, topic, (pid, epoch2, 0), Some(txn), &["t3"]),
    );
    note(
        facts,
        "txn: produce at the old epoch",
        produce_as(c, topic, (pid, epoch, 2), Some(txn), &["zombie"]),
    );
    note(
        facts,
        "txn: EndTxn abort",
        end_txn_settled(c, txn, me2, false),
    );
    let end = eventually(
        "the LSO passes the abort",
        std::time::Duration::from_secs(10),
        || {
            let (e, o) = list_offset_isolated(c, topic, 1);
            let (_, hw) = list_offset_isolated(c, topic, 0);
            (e == 0 && o == hw).then_some(o)
        },
    );
    note(facts, "txn: after the abort, read_committed latest", end);
    let committed = fetch_committed(c, topic);
    note(facts, "txn: read_committed reads", committed);
    note(
        facts,
        "txn: DescribeProducers at the end",
        describe_producers(c, topic),
    );
}

/// DescribeProducers (v0) of `topic`/0: (error, each active producer's
/// (epoch, last sequence, coordinator epoch, open transaction's first
/// offset), sorted; producer ids and times differ between the servers).
fn describe_producers(c: &mut Client, topic: &str) -> (i16, Vec<(i32, i32, i32, i64)>) {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse};
    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partition_indexes(vec![0])]);
    let r: DescribeProducersResponse = c
        .call(ApiKey::DescribeProducers, 0, &req)
        .expect("DescribeProducers");
    let p = &r.topics[0].partitions[0];
    let mut producers: Vec<(i32, i32, i32, i64)> = p
        .active_producers
        .iter()
        .map(|s| {
            (
                s.producer_epoch,
                s.last_sequence,
                s.coordinator_epoch,
                s.current_txn_start_offset,
            )
        })
        .collect();
    producers.sort_unstable();
    (p.error_code, producers)
}

/// FindCoordinator of a transactional id (which creates the transaction
/// state topic on first use, as a client's first call does), then
/// InitProducerId, each retried while the coordinator loads
/// (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR:
/// both servers are allowed a moment after start).
fn eventually_init(c: &mut Client, addr: &str, txn: &str) -> (i16, i64, i16) {
    let loading = |e: i16| e == 14 || e == 15 || e == 16;
    let wait = std::time::Duration::from_secs(30);
    eventually("the transaction coordinator", wait, || {
        let (e, _) = common::find_coordinator(addr, txn, 1, wait)?;
        (e == 0).then_some(())
    });
    eventually("InitProducerId", wait, || {
        let r = init_producer_id(c, Some(txn), None);
        (!loading(r.0)).then_some(r)
    })
}

/// Every value read_committed reads from the start, and the aborted
/// transactions the fetch names.
fn fetch_committed(c: &mut Client, topic: &str) -> (Vec<String>, Vec<(i64, i64)>) {
    use kafka_protocol::messages::FetchResponse;
    let req = consumer_fetch(topic, 0, 0, 1, 100);
    let r: FetchResponse = c.call(ApiKey::Fetch, 11, &req).expect("fetch");
    let p = &r.responses[0].partitions[0];
    let aborted: Vec<(i64, i64)> = p
        .aborted_transactions
        .as_ref()
        .map(|a| {
            a.iter()
                .map(|t| (t.producer_id.0, t.first_offset))
                .collect()
        })
        .unwrap_or_default();
    let mut values = Vec::new();
    let mut data = p.records.clone().unwrap_or_default();
    while !data.is_empty() {
        let Ok(set) = kafka_protocol::records::RecordBatchDecoder::decode(&mut data) else {
            break;
        };
        for r in set.records {
            let aborted_here = aborted
                .iter()
                .any(|(pid, first)| r.producer_id == *pid && r.offset >= *first);
            if !r.control && !aborted_here {
                values.push(String::from_utf8_lossy(&r.value.unwrap_or_default()).into_owned());
            }
        }
    }
    // Producer ids differ between the servers: name the aborted ones by offset.
    (
        values,
        aborted.iter().map(|(_, first)| (0, *first)).collect(),
    )
}

/// JoinGroup (v7) as a consumer with one protocol ("range"): the response.
fn join_group(
    c: &mut Client,
    group: &str,
    member: &str,
    instance: Option<&str>,
    protocol_type: &str,
    session_timeout_ms: i32,
) -> kafka_protocol::messages::JoinGroupResponse {
    send_join(
        c,
        group,
        member,
        instance,
        protocol_type,
        session_timeout_ms,
    );
    c.receive(ApiKey::JoinGroup, 7).expect("JoinGroup")
}

/// The request half of `join_group`: a join that waits for a rebalance is
/// sent, then answered once the other members have rejoined.
fn send_join(
    c: &mut Client,
    group: &str,
    member: &str,
    instance: Option<&str>,
    protocol_type: &str,
    session_timeout_ms: i32,
) {
    let member = Member {
        group,
        member,
        instance,
        protocol_type,
        protocols: &["range"],
    };
    send_join_as(c, &member, session_timeout_ms);
}

/// Who joins: group, member id, instance id, protocol type, and the
/// assignors it offers in order of preference.
struct Member<'a> {
    group: &'a str,
    member: &'a str,
    instance: Option<&'a str>,
    protocol_type: &'a str,
    protocols: &'a [&'a str],
}

/// JoinGroup (v7) sent as `m`.
fn send_join_as(c: &mut Client, m: &Member<'_>, session_timeout_ms: i32) {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::{GroupId, JoinGroupRequest};
    let Member {
        group,
        member,
        instance,
        protocol_type,
        protocols,
    } = *m;
    c.send(
        ApiKey::JoinGroup,
        7,
        &JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.into())))
            .with_session_timeout_ms(session_timeout_ms)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(StrBytes::from_string(member.into()))
            .with_group_instance_id(instance.map(|i| StrBytes::from_string(i.into())))
            .with_protocol_type(StrBytes::from_string(protocol_type.into()))
            .with_protocols(
                protocols
                    .iter()
                    .map(|p| {
                        JoinGroupRequestProtocol::default()
                            .with_name(StrBytes::from_string(p.to_string()))
                            .with_metadata(bytes::Bytes::from_static(b"subscription"))
                    })
                    .collect(),
            ),
    )
    .expect("JoinGroup sent");
}

/// The protocol a group picks: the one every member offers, by the
/// members' preferences (cooperative-sticky ahead of range, as the Java
/// consumer offers them by default), and a member offering none of the
/// group's.
fn protocol_selection(c: &mut Client, facts: &mut Facts) {
    let group = "d-proto";
    let join = |c: &mut Client, member: &str, protocols: &[&str]| {
        let m = Member {
            group,
            member,
            instance: None,
            protocol_type: "consumer",
            protocols,
        };
        send_join_as(c, &m, 10_000);
        let r: kafka_protocol::messages::JoinGroupResponse =
            c.receive(ApiKey::JoinGroup, 7).expect("JoinGroup");
        r
    };
    let offered = ["cooperative-sticky", "range"];
    let first = join(c, "", &offered);
    note(
        facts,
        "protocols: a first join without a member id",
        first.error_code,
    );
    let joined = join(c, &first.member_id.to_string(), &offered);
    note(
        facts,
        "protocols: the join (error, protocol chosen)",
        (
            joined.error_code,
            joined.protocol_name.as_ref().map(|p| p.to_string()),
        ),
    );
    let other = join(c, "", &["roundrobin"]);
    note(
        facts,
        "protocols: a member offering none of the group's",
        other.error_code,
    );
    note(
        facts,
        "protocols: the group described",
        describe_group(c, group),
    );
}

/// SyncGroup (v5): (error, the assignment this member got).
fn sync_group(
    c: &mut Client,
    group: &str,
    generation: i32,
    member: &str,
    assignments: &[(&str, &'static [u8])],
) -> (i16, Vec<u8>) {
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::{GroupId, SyncGroupRequest, SyncGroupResponse};
    let r: SyncGroupResponse = c
        .call(
            ApiKey::SyncGroup,
            5,
            &SyncGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.into())))
                .with_generation_id(generation)
                .with_member_id(StrBytes::from_string(member.into()))
                .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
                .with_protocol_name(Some(StrBytes::from_static_str("range")))
                .with_assignments(
                    assignments
                        .iter()
                        .map(|(m, a)| {
                            SyncGroupRequestAssignment::default()
                                .with_member_id(StrBytes::from_string((*m).into()))
                                .with_assignment(bytes::Bytes::from_static(a))
                        })
                        .collect(),
                ),
        )
        .expect("SyncGroup");
    (r.error_code, r.assignment.to_vec())
}

/// Heartbeat (v4): the error.
fn heartbeat(
    c: &mut Client,
    group: &str,
    generation: i32,
    member: &str,
    instance: Option<&str>,
) -> i16 {
    use kafka_protocol::messages::{GroupId, HeartbeatRequest, HeartbeatResponse};
    let r: HeartbeatResponse = c
        .call(
            ApiKey::Heartbeat,
            4,
            &HeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.into())))
                .with_generation_id(generation)
                .with_member_id(StrBytes::from_string(member.into()))
                .with_group_instance_id(instance.map(|i| StrBytes::from_string(i.into()))),
        )
        .expect("Heartbeat");
    r.error_code
}

/// DescribeGroups (v5): (error, state, protocol type, protocol, members).
fn describe_group(c: &mut Client, group: &str) -> (i16, String, String, String, usize) {
    use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, GroupId};
    let r: DescribeGroupsResponse = c
        .call(
            ApiKey::DescribeGroups,
            5,
            &DescribeGroupsRequest::default()
                .with_groups(vec![GroupId(StrBytes::from_string(group.into()))]),
        )
        .expect("DescribeGroups");
    let g = &r.groups[0];
    (
        g.error_code,
        g.group_state.to_string(),
        g.protocol_type.to_string(),
        g.protocol_data.to_string(),
        g.members.len(),
    )
}

/// A group coordinator for `group` answers (retried while the offsets
/// topic is created and loaded: both servers are allowed a moment).
fn find_group_coordinator(c: &mut Client, group: &str) -> i16 {
    use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    eventually(
        "a group coordinator",
        std::time::Duration::from_secs(60),
        || {
            let r: FindCoordinatorResponse = c
                .call(
                    ApiKey::FindCoordinator,
                    3,
                    &FindCoordinatorRequest::default()
                        .with_key(StrBytes::from_string(group.into()))
                        .with_key_type(0),
                )
                .ok()?;
            (r.error_code == 0).then_some(r.error_code)
        },
    )
}

/// The classic group protocol as a client drives it by hand: joining (a
/// member id first required), syncing, heartbeats with every kind of wrong
/// identity, a second member and the rebalance it causes, leaving, and a
/// static member restarted under its instance id. Member ids differ between
/// the servers: only whether they are given, kept or changed is noted.
fn groups(c: &mut Client, addr: &str, facts: &mut Facts) {
    let g = "dg";
    note(
        facts,
        "group: FindCoordinator",
        find_group_coordinator(c, g),
    );
    // Retried while the coordinator loads (NOT_COORDINATOR,
    // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE), as clients do.
    let first = eventually(
        "a loaded group coordinator",
        std::time::Duration::from_secs(60),
        || {
            let r = join_group(c, g, "", None, "consumer", 10_000);
            (![14, 15, 16].contains(&r.error_code)).then_some(r)
        },
    );
    note(
        facts,
        "group join without a member id: error",
        first.error_code,
    );
    note(
        facts,
        "group join without a member id: one given",
        !first.member_id.is_empty(),
    );
    let a = first.member_id.to_string();
    let joined = join_group(c, g, &a, None, "consumer", 10_000);
    note(
        facts,
        "group join: error, generation, protocol, leader is the member, members",
        (
            joined.error_code,
            joined.generation_id,
            joined.protocol_name.as_ref().map(|p| p.to_string()),
            joined.leader == joined.member_id,
            joined.members.len(),
        ),
    );
    let generation = joined.generation_id;
    note(
        facts,
        "group sync by the leader",
        sync_group(c, g, generation, &a, &[(&a, b"for-a")]),
    );
    note(
        facts,
        "group heartbeat",
        heartbeat(c, g, generation, &a, None),
    );
    note(
        facts,
        "group heartbeat, wrong generation",
        heartbeat(c, g, generation + 1, &a, None),
    );
    note(
        facts,
        "group heartbeat, unknown member",
        heartbeat(c, g, generation, "nobody", None),
    );
    note(
        facts,
        "group heartbeat, unknown group",
        heartbeat(c, "no-such-group", 1, &a, None),
    );
    note(
        facts,
        "group join with another protocol type",
        join_group(c, g, "", None, "connect", 10_000).error_code,
    );
    note(
        facts,
        "group join with a 1 ms session timeout",
        join_group(c, g, &a, None, "consumer", 1).error_code,
    );
    note(facts, "group described while stable", describe_group(c, g));

    // A second member: its join waits until the first rejoins.
    let mut other = Client::connect(addr).expect("a second connection");
    let b = join_group(&mut other, g, "", None, "consumer", 10_000)
        .member_id
        .to_string();
    send_join(&mut other, g, &b, None, "consumer", 10_000);
    let rebalancing = eventually(
        "the rebalance begins",
        std::time::Duration::from_secs(30),
        || {
            let e = heartbeat(c, g, generation, &a, None);
            (e != 0).then_some(e)
        },
    );
    note(
        facts,
        "group heartbeat once another member joins",
        rebalancing,
    );
    let rejoined = join_group(c, g, &a, None, "consumer", 10_000);
    let b_joined: kafka_protocol::messages::JoinGroupResponse = other
        .receive(ApiKey::JoinGroup, 7)
        .expect("the second join's answer");
    note(
        facts,
        "group rejoin: errors, generation moved on, members seen by the leader, by the other",
        (
            rejoined.error_code,
            b_joined.error_code,
            rejoined.generation_id == generation + 1,
            rejoined.members.len(),
            b_joined.members.len(),
        ),
    );
    let gen2 = rejoined.generation_id;
    note(
        facts,
        "group sync of two: the leader's, the other's",
        (
            sync_group(c, g, gen2, &a, &[(&a, b"a2"), (&b, b"b2")]),
            sync_group(&mut other, g, gen2, &b, &[]),
        ),
    );
    note(facts, "group described with two", describe_group(c, g));
    note(
        facts,
        "group sync with the old generation",
        sync_group(c, g, generation, &a, &[]).0,
    );
    {
        use kafka_protocol::messages::leave_group_request::MemberIdentity;
        use kafka_protocol::messages::{GroupId, LeaveGroupRequest, LeaveGroupResponse};
        let r: LeaveGroupResponse = other
            .call(
                ApiKey::LeaveGroup,
                4,
                &LeaveGroupRequest::default()
                    .with_group_id(GroupId(StrBytes::from_static_str("dg")))
                    .with_members(vec![
                        MemberIdentity::default().with_member_id(StrBytes::from_string(b.clone()))
                    ]),
            )
            .expect("LeaveGroup");
        note(
            facts,
            "group leave: error, member error",
            (r.error_code, r.members.first().map(|m| m.error_code)),
        );
    }
    note(
        facts,
        "group heartbeat after the other left",
        heartbeat(c, g, gen2, &a, None),
    );

    // A static member: no member id required; restarted under its instance
    // id it replaces its old member id without a rebalance.
    let sg = "static-dg";
    find_group_coordinator(c, sg);
    let s1 = eventually(
        "a loaded group coordinator",
        std::time::Duration::from_secs(60),
        || {
            let r = join_group(c, sg, "", Some("i1"), "consumer", 10_000);
            (![14, 15, 16].contains(&r.error_code)).then_some(r)
        },
    );
    note(
        facts,
        "static join: error, generation, member id given",
        (s1.error_code, s1.generation_id, !s1.member_id.is_empty()),
    );
    let old = s1.member_id.to_string();
    note(
        facts,
        "static sync",
        sync_group(c, sg, s1.generation_id, &old, &[(&old, b"s")]),
    );
    let s2 = join_group(c, sg, "", Some("i1"), "consumer", 10_000);
    note(
        facts,
        "static rejoin: error, same generation, new member id",
        (
            s2.error_code,
            s2.generation_id == s1.generation_id,
            s2.member_id.to_string() != old,
        ),
    );
    note(
        facts,
        "static: the old member id's heartbeat",
        heartbeat(c, sg, s1.generation_id, &old, Some("i1")),
    );
    note(facts, "static group described", describe_group(c, sg));
}

/// Creates `topic` with `configs` (one partition, one replica) and waits
/// until its leader takes writes (see [`create_ready`]).
fn create_ready_with(c: &mut Client, topic: &str, configs: &[(&str, &str)]) {
    let t = creatable_topic(topic, 1, 1, configs);
    let code = create_topics(c, vec![t]).expect("CreateTopics").topics[0].error_code;
    assert_eq!(code, 0, "CreateTopics {topic} {configs:?}");
    let addr = c
        .stream
        .peer_addr()
        .expect("the broker's address")
        .to_string();
    eventually(
        "the new topic's leader",
        std::time::Duration::from_secs(30),
        || {
            let v = common::partition_view(&addr, topic, 0, std::time::Duration::from_secs(5))?;
            (v.error_code == 0 && v.leader >= 0).then_some(())
        },
    );
    // Named in the metadata is not yet serving: Kafka's broker may answer
    // NOT_LEADER_OR_FOLLOWER for a moment after (a run of 2026-12-07 got it
    // for every produce to a new topic). The partition answers ListOffsets
    // once its leader has taken it up.
    eventually(
        "the new topic's leader serving",
        std::time::Duration::from_secs(30),
        || (list_offset(c, topic, 0, -1).0 == 0).then_some(()),
    );
}

/// One Fetch (v11) of `topic`/0 from `offset` under `isolation`: the
/// (base offset, codec, record count) of every batch returned, and every
/// record's (offset, key, value).
type ReadBatches = (Vec<(i64, i16, i32)>, Vec<(i64, String, String)>);
fn fetch_batches(c: &mut Client, topic: &str, offset: i64, isolation: i8) -> ReadBatches {
    use kafka_protocol::messages::FetchResponse;
    let req = consumer_fetch(topic, 0, offset, isolation, 100);
    let r: FetchResponse = c.call(ApiKey::Fetch, 11, &req).expect("fetch");
    let data = r.responses[0].partitions[0]
        .records
        .clone()
        .unwrap_or_default();
    let (mut batches, mut records) = (Vec::new(), Vec::new());
    let mut pos = 0;
    while let Ok(h) = strand_protocol::batch::BatchHeader::parse(&data[pos..]) {
        let end = pos + h.total_size();
        if end > data.len() {
            break;
        }
        batches.push((h.base_offset, h.compression(), h.records_count));
        let mut buf = data.slice(pos..end);
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).expect("decodes");
        let text =
            |b: Option<bytes::Bytes>| String::from_utf8_lossy(&b.unwrap_or_default()).into_owned();
        for r in set.records {
            records.push((r.offset, text(r.key), text(r.value)));
        }
        pos = end;
    }
    (batches, records)
}

/// Produce (v9) of keyed `values` as one batch compressed with `codec`
/// (acks=all): (error, base offset).
fn produce_compressed(
    c: &mut Client,
    topic: &str,
    codec: Compression,
    values: &[&str],
) -> (i16, i64) {
    let now = now_ms();
    let recs: Vec<strand_protocol::testing::TestRecord> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let key = bytes::Bytes::from(format!("k{i}"));
            // Long enough that every codec has something to compress.
            let value = bytes::Bytes::from(format!("{v}:{}", "abc".repeat(40)));
            (Some(key), Some(value), now)
        })
        .collect();
    let records = strand_protocol::testing::encode_records(&recs, -1, -1, -1, codec);
    send_produce(c, topic, None, records)
}

const CODECS: [(&str, Compression); 5] = [
    ("none", Compression::None),
    ("gzip", Compression::Gzip),
    ("snappy", Compression::Snappy),
    ("lz4", Compression::Lz4),
    ("zstd", Compression::Zstd),
];

/// Compressed produce: each codec into a topic that keeps the producer's
/// (`compression.type=producer`, the default), and into topics whose
/// `compression.type` names a codec, or `uncompressed`: what each answers,
/// the codec and records each batch is read back with under both isolation
/// levels, and an idempotent producer's compressed batch retried into a
/// topic that recompresses.
fn compression(c: &mut Client, facts: &mut Facts) {
    let mut topics = vec![("producer", "d-comp-producer")];
    topics.extend([
        ("uncompressed", "d-comp-uncompressed"),
        ("gzip", "d-comp-gzip"),
        ("lz4", "d-comp-lz4"),
        ("zstd", "d-comp-zstd"),
    ]);
    for (config, topic) in &topics {
        create_ready_with(c, topic, &[("compression.type", config)]);
        for (name, codec) in CODECS {
            note(
                facts,
                format!("compression.type={config}: produce {name}"),
                produce_compressed(c, topic, codec, &[name, "two", "three"]),
            );
        }
        for isolation in [0, 1] {
            let (batches, records) = fetch_batches(c, topic, 0, isolation);
            note(
                facts,
                format!("compression.type={config}: batches read (isolation {isolation})"),
                batches,
            );
            note(
                facts,
                format!("compression.type={config}: records read (isolation {isolation})"),
                records,
            );
        }
    }

    // An idempotent producer's gzip batch into a zstd topic, then its retry:
    // the duplicate is recognised after the batch was recompressed.
    let wait = std::time::Duration::from_secs(30);
    let (_, pid, epoch) = eventually("InitProducerId", wait, || {
        let r = init_producer_id(c, None, None);
        (r.0 != 14).then_some(r)
    });
    let topic = "d-comp-zstd";
    let at = |seq| (pid, epoch, seq);
    let batch = ["i1", "i2", "i3"];
    note(
        facts,
        "compression.type=zstd: idempotent gzip seq 0",
        produce_as_with(c, topic, at(0), None, &batch, Compression::Gzip),
    );
    note(
        facts,
        "compression.type=zstd: idempotent gzip seq 0 retried",
        produce_as_with(c, topic, at(0), None, &batch, Compression::Gzip),
    );
    note(
        facts,
        "compression.type=zstd: idempotent lz4 seq 3",
        produce_as_with(c, topic, at(3), None, &["i4"], Compression::Lz4),
    );
    note(
        facts,
        "compression.type=zstd: idempotent seq 3 again, uncompressed",
        produce_as_with(c, topic, at(3), None, &["i4"], Compression::None),
    );
    let (batches, records) = fetch_batches(c, topic, 15, 0);
    note(
        facts,
        "compression.type=zstd: idempotent batches read",
        batches,
    );
    note(
        facts,
        "compression.type=zstd: idempotent records read",
        records,
    );
}

/// Produce (v9) of one batch of `values` with `acks` to `topic`/0, without
/// reading an answer (acks=0 has none).
fn produce_no_answer(c: &mut Client, topic: &str, values: &[&str]) {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::ProduceRequest;
    let recs: Vec<strand_protocol::testing::TestRecord> = values
        .iter()
        .map(|v| (None, Some(bytes::Bytes::from(v.to_string())), now_ms()))
        .collect();
    let records = strand_protocol::testing::encode_records(&recs, -1, -1, -1, Compression::None);
    let req = ProduceRequest::default()
        .with_acks(0)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(bytes::Bytes::from(records)))])]);
    c.send(ApiKey::Produce, 9, &req).expect("produce acks=0");
}

/// acks=0 (no answer; what lands shows in the next answer and the log),
/// batches at and past `max.message.bytes` (a topic's and the default),
/// and a transaction left open past its timeout.
fn acks_zero_sizes_and_timeouts(c: &mut Client, addr: &str, facts: &mut Facts) {
    create_ready(c, "d-acks0");
    produce_no_answer(c, "d-acks0", &["zero-1", "zero-2"]);
    note(
        facts,
        "acks=0 then acks=1: the second's answer",
        produce_values(c, "d-acks0", 0, 1, 5000, &values(&["one"])).expect("produce"),
    );
    let read: Vec<(i64, String)> = fetch_values(c, "d-acks0", 0, 0, 100)
        .expect("fetch")
        .records
        .iter()
        .map(|(o, v)| (*o, String::from_utf8_lossy(v).into_owned()))
        .collect();
    note(facts, "acks=0 then acks=1: the log", read);

    create_ready_with(c, "d-small", &[("max.message.bytes", "2000")]);
    create_ready(c, "d-large");
    for (topic, size) in [
        ("d-small", 1_500),
        ("d-small", 3_000),
        ("d-large", 1_000_000),
        ("d-large", 1_100_000),
    ] {
        note(
            facts,
            format!("max.message.bytes: {size}-byte value into {topic}"),
            produce_values(c, topic, 0, -1, 5000, &["x".repeat(size)]).expect("produce"),
        );
    }
    note(
        facts,
        "max.message.bytes: latest offsets after",
        (
            list_offset(c, "d-small", 0, -1),
            list_offset(c, "d-large", 0, -1),
        ),
    );

    // A transaction whose producer goes quiet: the coordinator aborts it
    // once transaction.timeout.ms (1 s) has passed.
    txn_timeout(c, addr, facts, "txn timeout", "d-txn-timeout");
}

/// A transaction whose producer goes quiet after writing two records to
/// `topic`: how the coordinator's own abort ends it (facts named `label`).
fn txn_timeout(c: &mut Client, addr: &str, facts: &mut Facts, label: &str, topic: &str) {
    create_ready(c, topic);
    let txn = &format!("{topic}-id");
    eventually_init(c, addr, txn);
    let (err, pid, epoch) = init_producer_id_with_timeout(c, Some(txn), None, 1_000);
    note(facts, format!("{label}: InitProducerId (1 s)"), err);
    let me = (pid, epoch);
    note(
        facts,
        format!("{label}: AddPartitionsToTxn"),
        add_partition(c, txn, me, topic),
    );
    note(
        facts,
        format!("{label}: produce"),
        produce_as(c, topic, (pid, epoch, 0), Some(txn), &["left", "open"]),
    );
    let settled = eventually(
        "the timed-out transaction's abort",
        std::time::Duration::from_secs(60),
        || {
            let (e, lso) = list_offset_isolated(c, topic, 1);
            let (_, hw) = list_offset_isolated(c, topic, 0);
            (e == 0 && lso == hw && hw > 2).then_some(hw)
        },
    );
    note(
        facts,
        format!("{label}: high watermark once it ended (data and marker)"),
        settled,
    );
    note(
        facts,
        format!("{label}: read_committed reads"),
        fetch_committed(c, topic),
    );
    note(
        facts,
        format!("{label}: DescribeProducers"),
        describe_producers(c, topic),
    );
    note(
        facts,
        format!("{label}: EndTxn commit at the old epoch"),
        end_txn(c, txn, me, true),
    );
    note(
        facts,
        format!("{label}: produce at the old epoch"),
        produce_as(c, topic, (pid, epoch, 2), Some(txn), &["late"]),
    );
    let (err, _, epoch2) = init_producer_id_with_timeout(c, Some(txn), Some(me), 60_000);
    note(
        facts,
        format!("{label}: InitProducerId again (error, epoch step)"),
        (err, epoch2 - epoch),
    );
}

/// Cluster operations on one node (issue 35): the features ApiVersions
/// reports, UpdateFeatures' answers, AlterPartitionReassignments' refusals
/// and ListPartitionReassignments, DescribeLogDirs' shape, broker configs
/// through DescribeConfigs and IncrementalAlterConfigs.
fn cluster_operations(c: &mut Client, facts: &mut Facts) {
    use kafka_protocol::messages::*;
    let s = |v: &str| StrBytes::from_string(v.to_string());
    // ApiVersions v3: supported and finalized features (epochs differ:
    // each is its server's metadata offset).
    let av: ApiVersionsResponse = c
        .call(
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default()
                .with_client_software_name(s("strand-differential"))
                .with_client_software_version(s("1")),
        )
        .expect("ApiVersions");
    let mut supported: Vec<(String, i16, i16)> = av
        .supported_features
        .iter()
        .map(|f| (f.name.to_string(), f.min_version, f.max_version))
        .collect();
    supported.sort();
    note(facts, "ApiVersions v3 supported features", supported);
    let finalized: BTreeMap<String, (i16, i16)> = av
        .finalized_features
        .iter()
        .map(|f| {
            (
                f.name.to_string(),
                (f.min_version_level, f.max_version_level),
            )
        })
        .filter(|(n, _)| n == "metadata.version" || n == "transaction.version")
        .collect();
    note(
        facts,
        "ApiVersions v3 finalized metadata.version and transaction.version",
        finalized,
    );
    // UpdateFeatures v1: validate-only answers, nothing changed.
    let update = |c: &mut Client, name: &str, level: i16, kind: i8| {
        use update_features_request::FeatureUpdateKey;
        let r: UpdateFeaturesResponse = c
            .call(
                ApiKey::UpdateFeatures,
                1,
                &UpdateFeaturesRequest::default()
                    .with_timeout_ms(10_000)
                    .with_validate_only(true)
                    .with_feature_updates(vec![FeatureUpdateKey::default()
                        .with_feature(s(name))
                        .with_max_version_level(level)
                        .with_upgrade_type(kind)]),
            )
            .expect("UpdateFeatures");
        (
            r.error_code,
            r.error_message.map(|m| m.to_string()),
            r.results
                .iter()
                .map(|x| (x.feature.to_string(), x.error_code))
                .collect::<Vec<_>>(),
        )
    };
    for (label, name, level, kind) in [
        ("the current level", "transaction.version", 2, 1),
        ("a safe downgrade", "transaction.version", 1, 2),
        ("past the supported level", "transaction.version", 3, 1),
        ("an upgrade to a lower level", "transaction.version", 1, 1),
        ("a metadata.version downgrade", "metadata.version", 21, 2),
        (
            "an unsafe metadata.version downgrade",
            "metadata.version",
            21,
            3,
        ),
        (
            "a metadata.version past the supported",
            "metadata.version",
            34,
            1,
        ),
        ("an unknown feature", "foo.version", 1, 1),
        ("disabling an unknown feature", "foo.version", 0, 2),
    ] {
        note(
            facts,
            format!("UpdateFeatures {label}"),
            update(c, name, level, kind),
        );
    }
    // Reassignment on one node: refusals, and nothing in flight.
    create_ready(c, "moved");
    let reassign = |c: &mut Client, topic: &str, partition: i32, target: Option<Vec<i32>>| {
        use alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
        let r: AlterPartitionReassignmentsResponse = c
            .call(
                ApiKey::AlterPartitionReassignments,
                0,
                &AlterPartitionReassignmentsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topics(vec![ReassignableTopic::default()
                        .with_name(TopicName(s(topic)))
                        .with_partitions(vec![ReassignablePartition::default()
                            .with_partition_index(partition)
                            .with_replicas(
                                target.map(|t| t.into_iter().map(BrokerId).collect()),
                            )])]),
            )
            .expect("AlterPartitionReassignments");
        let p = &r.responses[0].partitions[0];
        (
            r.error_code,
            p.error_code,
            p.error_message.as_ref().map(|m| m.to_string()),
        )
    };
    for (label, topic, partition, target) in [
        ("an unknown topic", "nope", 0, Some(vec![1])),
        ("an unknown partition", "moved", 5, Some(vec![1])),
        ("an empty target", "moved", 0, Some(vec![])),
        ("a broker twice", "moved", 0, Some(vec![1, 1])),
        ("an unknown broker", "moved", 0, Some(vec![1, 7])),
        ("the same replicas", "moved", 0, Some(vec![1])),
        ("a cancel with nothing in flight", "moved", 0, None),
    ] {
        note(
            facts,
            format!("reassign {label}"),
            reassign(c, topic, partition, target),
        );
    }
    let listed: ListPartitionReassignmentsResponse = c
        .call(
            ApiKey::ListPartitionReassignments,
            0,
            &ListPartitionReassignmentsRequest::default()
                .with_timeout_ms(10_000)
                .with_topics(None),
        )
        .expect("ListPartitionReassignments");
    note(
        facts,
        "ListPartitionReassignments with nothing in flight",
        (listed.error_code, listed.topics.len()),
    );
    // DescribeLogDirs: one directory holding the topic's partition.
    let dirs: DescribeLogDirsResponse = c
        .call(
            ApiKey::DescribeLogDirs,
            4,
            &DescribeLogDirsRequest::default().with_topics(Some(vec![
                describe_log_dirs_request::DescribableLogDirTopic::default()
                    .with_topic(TopicName(s("moved")))
                    .with_partitions(vec![0]),
            ])),
        )
        .expect("DescribeLogDirs");
    note(
        facts,
        "DescribeLogDirs: directories, their errors, the topic's partitions",
        (
            dirs.error_code,
            dirs.results.len(),
            dirs.results
                .iter()
                .map(|d| {
                    (
                        d.error_code,
                        d.topics
                            .iter()
                            .map(|t| {
                                (
                                    t.name.to_string(),
                                    t.partitions
                                        .iter()
                                        .map(|p| (p.partition_index, p.is_future_key))
                                        .collect::<Vec<_>>(),
                                )
                            })
                            .collect::<Vec<_>>(),
                    )
                })
                .collect::<Vec<_>>(),
        ),
    );
    // Broker configs: a dynamic one set for the cluster and for the broker.
    let alter = |c: &mut Client, name: &str, key: &str, value: Option<&str>| {
        use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
        let r: IncrementalAlterConfigsResponse = c
            .call(
                ApiKey::IncrementalAlterConfigs,
                1,
                &IncrementalAlterConfigsRequest::default().with_resources(vec![
                    AlterConfigsResource::default()
                        .with_resource_type(4)
                        .with_resource_name(s(name))
                        .with_configs(vec![AlterableConfig::default()
                            .with_name(s(key))
                            .with_config_operation(if value.is_some() { 0 } else { 1 })
                            .with_value(value.map(s))]),
                ]),
            )
            .expect("IncrementalAlterConfigs");
        (
            r.responses[0].error_code,
            r.responses[0].error_message.as_ref().map(|m| m.to_string()),
        )
    };
    for (label, name, key, value) in [
        (
            "cluster-wide log.retention.ms",
            "",
            "log.retention.ms",
            Some("1000000"),
        ),
        (
            "broker 1's log.retention.ms",
            "1",
            "log.retention.ms",
            Some("2000000"),
        ),
        (
            "cluster-wide leader.replication.throttled.rate",
            "",
            "leader.replication.throttled.rate",
            Some("1000"),
        ),
        (
            "a static config",
            "1",
            "auto.create.topics.enable",
            Some("false"),
        ),
        ("a bad value", "", "log.retention.ms", Some("soon")),
        (
            "a negative throttle",
            "",
            "follower.replication.throttled.rate",
            Some("-1"),
        ),
        (
            "a broker name that is no number",
            "b1",
            "log.retention.ms",
            Some("1"),
        ),
        (
            "log cleaner threads raised",
            "1",
            "log.cleaner.threads",
            Some("2"),
        ),
        (
            "no log cleaner thread",
            "1",
            "log.cleaner.threads",
            Some("0"),
        ),
        (
            "a log cleaner backoff that is no number",
            "1",
            "log.cleaner.backoff.ms",
            Some("often"),
        ),
        (
            "a listener's key store cluster-wide",
            "",
            "listener.name.plaintext.ssl.keystore.location",
            Some("/x.pem"),
        ),
        (
            "log cleaner threads back to one",
            "1",
            "log.cleaner.threads",
            None,
        ),
    ] {
        note(
            facts,
            format!("broker config {label}"),
            alter(c, name, key, value),
        );
    }
    let describe = |c: &mut Client, name: &str, keys: &[&str]| {
        let r: DescribeConfigsResponse = c
            .call(
                ApiKey::DescribeConfigs,
                4,
                &DescribeConfigsRequest::default()
                    .with_include_synonyms(true)
                    .with_resources(vec![DescribeConfigsResource::default()
                        .with_resource_type(4)
                        .with_resource_name(s(name))
                        .with_configuration_keys(Some(keys.iter().map(|k| s(k)).collect()))]),
            )
            .expect("DescribeConfigs");
        let mut entries: Vec<_> = r.results[0]
            .configs
            .iter()
            .map(|c| {
                (
                    c.name.to_string(),
                    c.value.as_ref().map(|v| v.to_string()),
                    c.config_source,
                    c.read_only,
                    c.synonyms
                        .iter()
                        .map(|s| (s.name.to_string(), s.source))
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        // By name: the order of an answer's entries is no promise.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    };
    let keys = ["log.retention.ms", "leader.replication.throttled.rate"];
    note(
        facts,
        "broker 1's configs after the changes",
        describe(c, "1", &keys),
    );
    note(
        facts,
        "the cluster-wide broker configs after the changes",
        describe(c, "", &keys),
    );
    for (name, key) in [
        ("", "log.retention.ms"),
        ("1", "log.retention.ms"),
        ("", "leader.replication.throttled.rate"),
    ] {
        alter(c, name, key, None);
    }
    // Kafka's broker takes up the deletes from its metadata a moment later
    // (its answer may still show the cluster-wide rate it had): what both
    // answer once it has.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let settled = loop {
        let now = describe(c, "1", &keys);
        let stale = now
            .iter()
            .any(|e| e.0 == "leader.replication.throttled.rate");
        if !stale || std::time::Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    note(facts, "broker 1's configs after deleting them", settled);
}

/// A log directory as DescribeLogDirs answers: its index in `log.dirs`,
/// its error, and (topic, partition, future) of what it holds.
type DirFacts = (Option<usize>, i16, Vec<(String, i32, bool)>);

/// Several log directories (KIP-858, after `cluster_operations` made topic
/// `moved`): DescribeLogDirs' directories (as their index in `log.dirs`),
/// AlterReplicaLogDirs' refusals, and a replica moved to the other
/// directory ending there.
fn log_dirs(c: &mut Client, cluster: &Cluster, facts: &mut Facts) {
    use kafka_protocol::messages::*;
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let paths: Vec<std::path::PathBuf> = cluster
        .log_dirs(1)
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap())
        .collect();
    // (directory index, error, [(topic, partition, future)]) of each.
    let describe = |c: &mut Client| {
        let r: DescribeLogDirsResponse = c
            .call(
                ApiKey::DescribeLogDirs,
                4,
                &DescribeLogDirsRequest::default().with_topics(None),
            )
            .expect("DescribeLogDirs");
        let mut dirs: Vec<DirFacts> = r
            .results
            .iter()
            .map(|d| {
                let path = std::fs::canonicalize(d.log_dir.as_str()).ok();
                let mut parts: Vec<(String, i32, bool)> = d
                    .topics
                    .iter()
                    .filter(|t| t.name.0.as_str() == "moved")
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(|p| (t.name.to_string(), p.partition_index, p.is_future_key))
                    })
                    .collect();
                parts.sort();
                (
                    paths.iter().position(|p| Some(p) == path.as_ref()),
                    d.error_code,
                    parts,
                )
            })
            .collect();
        dirs.sort();
        dirs
    };
    let before = describe(c);
    note(
        facts,
        "DescribeLogDirs with two directories: each, its error, topic moved's partitions",
        {
            // Which directory a replica lands in is a placement tie-break
            // (COMPATIBILITY.md): the directories as a set.
            let mut dirs: Vec<_> = before
                .iter()
                .map(|(i, e, parts)| (i.is_some(), *e, parts.len()))
                .collect();
            dirs.sort();
            dirs
        },
    );
    let holder = |dirs: &[DirFacts]| {
        dirs.iter()
            .find(|(_, _, parts)| parts.iter().any(|(_, p, future)| *p == 0 && !future))
            .and_then(|(i, _, _)| *i)
    };
    let from = holder(&before).expect("moved-0 in a directory");
    let to = 1 - from;
    let alter =
        |c: &mut Client, path: &str, topic: &str, partition: i32| -> Vec<(String, i32, i16)> {
            use alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
            let r: AlterReplicaLogDirsResponse = c
                .call(
                    ApiKey::AlterReplicaLogDirs,
                    2,
                    &AlterReplicaLogDirsRequest::default().with_dirs(vec![
                        AlterReplicaLogDir::default()
                            .with_path(s(path))
                            .with_topics(vec![AlterReplicaLogDirTopic::default()
                                .with_name(TopicName(s(topic)))
                                .with_partitions(vec![partition])]),
                    ]),
                )
                .expect("AlterReplicaLogDirs");
            r.results
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| (t.topic_name.to_string(), p.partition_index, p.error_code))
                })
                .collect()
        };
    let target = paths[to].display().to_string();
    note(
        facts,
        "AlterReplicaLogDirs to a path that is not a log directory",
        alter(c, "/no/such/log/dir", "moved", 0),
    );
    note(
        facts,
        "AlterReplicaLogDirs of a partition that does not exist",
        alter(c, &target, "moved", 9),
    );
    note(
        facts,
        "AlterReplicaLogDirs of a topic that does not exist",
        alter(c, &target, "no-such-topic", 0),
    );
    note(
        facts,
        "AlterReplicaLogDirs to the directory the replica is in",
        alter(c, &paths[from].display().to_string(), "moved", 0),
    );
    note(
        facts,
        "AlterReplicaLogDirs to the other directory",
        alter(c, &target, "moved", 0),
    );
    let moved = common::eventually(
        "moved-0 in the other directory",
        std::time::Duration::from_secs(30),
        || {
            let dirs = describe(c);
            (holder(&dirs) == Some(to)).then_some(dirs)
        },
    );
    note(
        facts,
        "DescribeLogDirs once moved: each, its error, topic moved's partitions",
        {
            let mut dirs: Vec<_> = moved
                .iter()
                .map(|(i, e, parts)| (*i == Some(to), *e, parts.clone()))
                .collect();
            dirs.sort();
            dirs
        },
    );
}

/// What a lower `transaction.version` changes for clients: ApiVersions'
/// ranges of the transactional APIs (and Produce) at level 1, then back at
/// level 2.
fn transaction_version_ranges(c: &mut Client, addr: &str, facts: &mut Facts) {
    use kafka_protocol::messages::*;
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let set = |c: &mut Client, level: i16| {
        use update_features_request::FeatureUpdateKey;
        let r: UpdateFeaturesResponse = c
            .call(
                ApiKey::UpdateFeatures,
                1,
                &UpdateFeaturesRequest::default()
                    .with_timeout_ms(10_000)
                    .with_feature_updates(vec![FeatureUpdateKey::default()
                        .with_feature(s("transaction.version"))
                        .with_max_version_level(level)
                        .with_upgrade_type(if level < 2 { 2 } else { 1 })]),
            )
            .expect("UpdateFeatures");
        r.error_code
    };
    let ranges = |c: &mut Client| {
        let av: ApiVersionsResponse = c
            .call(
                ApiKey::ApiVersions,
                3,
                &ApiVersionsRequest::default()
                    .with_client_software_name(s("strand-differential"))
                    .with_client_software_version(s("1")),
            )
            .expect("ApiVersions");
        let tv = av
            .finalized_features
            .iter()
            .find(|f| f.name.as_str() == "transaction.version")
            .map(|f| f.max_version_level);
        let keys = [0i16, 24, 25, 26, 28];
        let apis: Vec<(i16, i16, i16)> = av
            .api_keys
            .iter()
            .filter(|k| keys.contains(&k.api_key))
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        (tv, apis)
    };
    // Waits until the broker reports `level` (it takes up the record a
    // moment after the controller commits it).
    let ranges_at = |c: &mut Client, level: i16| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let r = ranges(c);
            if r.0 == Some(level) || std::time::Instant::now() > deadline {
                break r;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    note(facts, "transaction.version lowered to 1", set(c, 1));
    let at_one = ranges_at(c, 1);
    // The coordinator's own abort follows the finalized level in Kafka
    // (not a client's request version).
    txn_timeout(
        c,
        addr,
        facts,
        "txn timeout at transaction.version 1",
        "d-txn-timeout-tv1",
    );
    note(facts, "transaction.version back to 2", set(c, 2));
    let at_two = ranges_at(c, 2);
    // The ranges themselves differ (Kafka 4.4 serves later versions of
    // Produce and TxnOffsetCommit than kafka-protocol decodes): what is
    // compared is whether the level changes them.
    note(
        facts,
        "ApiVersions: the levels seen, and the transactional APIs' ranges the same at transaction.version 1 and 2",
        (at_one.0, at_two.0, at_one.1 == at_two.1),
    );
}

/// Log levels at runtime (BROKER_LOGGER, resource type 8): the root
/// logger described, set, refused and reset through DescribeConfigs and
/// IncrementalAlterConfigs. Logger names are each server's own (Java
/// classes, Rust modules): only `root` is common to both.
fn broker_loggers(c: &mut Client, facts: &mut Facts) {
    use kafka_protocol::messages::*;
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let describe = |c: &mut Client, name: &str, keys: Option<&[&str]>| {
        use describe_configs_request::DescribeConfigsResource;
        let r: DescribeConfigsResponse = c
            .call(
                ApiKey::DescribeConfigs,
                4,
                &DescribeConfigsRequest::default().with_resources(vec![
                    DescribeConfigsResource::default()
                        .with_resource_type(8)
                        .with_resource_name(s(name))
                        .with_configuration_keys(keys.map(|k| k.iter().map(|x| s(x)).collect())),
                ]),
            )
            .expect("DescribeConfigs");
        let res = &r.results[0];
        (
            res.error_code,
            res.error_message.as_ref().map(|m| m.to_string()),
            res.configs
                .iter()
                .filter(|c| c.name.as_str() == "root")
                .map(|c| {
                    (
                        c.name.to_string(),
                        c.value.as_ref().map(|v| v.to_string()),
                        c.config_source,
                        c.read_only,
                        c.config_type,
                    )
                })
                .collect::<Vec<_>>(),
        )
    };
    let alter = |c: &mut Client, name: &str, logger: &str, op: i8, value: Option<&str>| {
        use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
        let r: IncrementalAlterConfigsResponse = c
            .call(
                ApiKey::IncrementalAlterConfigs,
                1,
                &IncrementalAlterConfigsRequest::default().with_resources(vec![
                    AlterConfigsResource::default()
                        .with_resource_type(8)
                        .with_resource_name(s(name))
                        .with_configs(vec![AlterableConfig::default()
                            .with_name(s(logger))
                            .with_config_operation(op)
                            .with_value(value.map(s))]),
                ]),
            )
            .expect("IncrementalAlterConfigs");
        (
            r.responses[0].error_code,
            r.responses[0].error_message.as_ref().map(|m| m.to_string()),
        )
    };
    note(
        facts,
        "BROKER_LOGGER: root described",
        describe(c, "1", Some(&["root"])),
    );
    note(
        facts,
        "BROKER_LOGGER: every logger described (root among them)",
        describe(c, "1", None),
    );
    note(
        facts,
        "BROKER_LOGGER: another broker's loggers",
        describe(c, "2", None),
    );
    note(
        facts,
        "BROKER_LOGGER: a name that is no broker id",
        describe(c, "x", None),
    );
    note(
        facts,
        "BROKER_LOGGER: root set to DEBUG",
        alter(c, "1", "root", 0, Some("DEBUG")),
    );
    note(
        facts,
        "BROKER_LOGGER: root after the set",
        describe(c, "1", Some(&["root"])),
    );
    note(
        facts,
        "BROKER_LOGGER: root set to a level that is none",
        alter(c, "1", "root", 0, Some("LOUD")),
    );
    note(
        facts,
        "BROKER_LOGGER: root set to lower-case warn",
        alter(c, "1", "root", 0, Some("warn")),
    );
    note(
        facts,
        "BROKER_LOGGER: APPEND to root",
        alter(c, "1", "root", 2, Some("INFO")),
    );
    note(
        facts,
        "BROKER_LOGGER: a logger that does not exist set",
        alter(c, "1", "no.such.logger", 0, Some("INFO")),
    );
    note(
        facts,
        "BROKER_LOGGER: another broker's logger set",
        alter(c, "2", "root", 0, Some("INFO")),
    );
    note(
        facts,
        "BROKER_LOGGER: root deleted",
        alter(c, "1", "root", 1, None),
    );
    note(
        facts,
        "BROKER_LOGGER: root after the delete",
        describe(c, "1", Some(&["root"])),
    );
    note(
        facts,
        "BROKER_LOGGER: root set back to INFO",
        alter(c, "1", "root", 0, Some("INFO")),
    );
    note(
        facts,
        "BROKER_LOGGER: a name that is no broker id set",
        alter(c, "x", "root", 0, Some("INFO")),
    );
    // The legacy AlterConfigs on a BROKER_LOGGER resource.
    let legacy: AlterConfigsResponse = c
        .call(
            ApiKey::AlterConfigs,
            2,
            &AlterConfigsRequest::default().with_resources(vec![
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(8)
                    .with_resource_name(s("1"))
                    .with_configs(vec![alter_configs_request::AlterableConfig::default()
                        .with_name(s("root"))
                        .with_value(Some(s("INFO")))]),
            ]),
        )
        .expect("AlterConfigs");
    note(
        facts,
        "BROKER_LOGGER: AlterConfigs (not incremental)",
        (
            legacy.responses[0].error_code,
            legacy.responses[0]
                .error_message
                .as_ref()
                .map(|m| m.to_string()),
        ),
    );
}

fn observe(cluster: &Cluster) -> Facts {
    let mut facts = Facts::new();
    let mut c = Client::connect(&cluster.bootstrap()).expect("connect");
    cluster_operations(&mut c, &mut facts);
    log_dirs(&mut c, cluster, &mut facts);
    broker_loggers(&mut c, &mut facts);
    transaction_version_ranges(&mut c, &cluster.bootstrap(), &mut facts);
    create_topic_errors(&mut c, &mut facts);
    produce_and_fetch(&mut c, &mut facts);
    malformed_batches(&mut c, &mut facts);
    idempotence(&mut c, &mut facts);
    transactions(&mut c, &cluster.bootstrap(), &mut facts);
    describe_topic_configs(&mut c, &mut facts);
    groups(&mut c, &cluster.bootstrap(), &mut facts);
    compression(&mut c, &mut facts);
    acks_zero_sizes_and_timeouts(&mut c, &cluster.bootstrap(), &mut facts);
    protocol_selection(&mut c, &mut facts);
    facts
}

/// Three brokers (and one controller, so that brokers can die without
/// taking the metadata quorum with them): replication as a client sees it.
/// Node ids differ in which one leads: leaders and followers are named by
/// role, never by id.
fn start_three(server: Server) -> Cluster {
    let name = server.name();
    let mut spec = ClusterSpec::split(1, 3);
    for (k, v) in THREE_NODE_SETTINGS {
        spec = spec.with_override(*k, *v);
    }
    Cluster::start_server(server, spec).unwrap_or_else(|e| panic!("starting {name}: {e}"))
}

const THREE_NODE_SETTINGS: &[(&str, &str)] = &[
    ("auto.create.topics.enable", "false"),
    ("num.partitions", "1"),
    ("default.replication.factor", "3"),
    ("offsets.topic.replication.factor", "3"),
    ("transaction.state.log.replication.factor", "3"),
    ("transaction.state.log.min.isr", "2"),
    ("group.initial.rebalance.delay.ms", "0"),
];

/// The partition as the live broker at `addr` describes it, once `ready`
/// holds for that view.
fn await_view(
    addr: &str,
    topic: &str,
    what: &str,
    ready: impl Fn(&common::PartitionView) -> bool,
) -> common::PartitionView {
    eventually(what, std::time::Duration::from_secs(90), || {
        let v = common::partition_view(addr, topic, 0, std::time::Duration::from_secs(5))?;
        (v.error_code == 0 && ready(&v)).then_some(v)
    })
}

const PROBE: &str = "probe";

/// The high watermark and the values of the log below it, probes left out
/// (how many got in before the leader refused is a race).
fn read_values(c: &mut Client, topic: &str) -> (i64, Vec<String>) {
    let f = fetch_values(c, topic, 0, 0, 100).expect("fetch");
    let v: Vec<String> = f
        .records
        .iter()
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect();
    let probes = v.iter().filter(|v| *v == PROBE).count() as i64;
    (
        f.high_watermark - probes,
        v.into_iter().filter(|v| v != PROBE).collect(),
    )
}

fn observe_three(cluster: &mut Cluster) -> Facts {
    let mut facts = Facts::new();
    let brokers = cluster.broker_ids();
    let addr = |cluster: &Cluster, id: i32| cluster.broker_addr(id).expect("a broker's address");
    let first = addr(cluster, brokers[0]);
    let mut c = Client::connect(&first).expect("connect");
    let t = "r-log";
    note(
        &mut facts,
        "create with replication factor 4 on 3 brokers",
        create_topics(&mut c, vec![creatable_topic("r-four", 1, 4, &[])])
            .expect("CreateTopics")
            .topics[0]
            .error_code,
    );
    note(
        &mut facts,
        "create with replication factor 3, min.insync.replicas=2",
        create_topics(
            &mut c,
            vec![creatable_topic(t, 1, 3, &[("min.insync.replicas", "2")])],
        )
        .expect("CreateTopics")
        .topics[0]
            .error_code,
    );
    let v0 = await_view(&first, t, "three replicas in sync", |v| {
        v.leader >= 0 && v.isr.len() == 3
    });
    note(
        &mut facts,
        "replicas, in-sync replicas",
        (v0.replicas.len(), v0.isr.len()),
    );
    let leader = v0.leader;
    let followers: Vec<i32> = brokers.iter().copied().filter(|b| *b != leader).collect();
    let mut lc = Client::connect(&addr(cluster, leader)).expect("connect to the leader");
    let mut fc = Client::connect(&addr(cluster, followers[0])).expect("connect to a follower");
    note(
        &mut facts,
        "acks=all at the leader",
        produce_values(&mut lc, t, 0, -1, 10_000, &values(&["a", "b"])).expect("produce"),
    );
    note(
        &mut facts,
        "produce at a follower",
        produce_values(&mut fc, t, 0, -1, 10_000, &values(&["x"]))
            .expect("produce")
            .0,
    );
    note(
        &mut facts,
        "list offsets latest at a follower",
        list_offset(&mut fc, t, 0, -1).0,
    );
    note(
        &mut facts,
        "list offsets latest at the leader",
        list_offset(&mut lc, t, 0, -1),
    );
    // A consumer's Fetch at a follower (no rack given): what it answers
    // once the follower knows the high watermark (or at once, if it refuses).
    let at_follower = eventually(
        "a follower's answer",
        std::time::Duration::from_secs(30),
        || {
            let f = fetch_values(&mut fc, t, 0, 0, 100).ok()?;
            (f.error_code != 0 || f.high_watermark == 2).then_some((f.error_code, f.records.len()))
        },
    );
    note(
        &mut facts,
        "consumer fetch v11 at a follower (error, records)",
        at_follower,
    );
    let coordinators: std::collections::BTreeSet<i32> = brokers
        .iter()
        .map(|b| {
            let a = addr(cluster, *b);
            eventually(
                "a group coordinator",
                std::time::Duration::from_secs(60),
                || {
                    common::find_coordinator(&a, "r-group", 0, std::time::Duration::from_secs(5))
                        .filter(|(e, _)| *e == 0)
                        .map(|(_, node)| node)
                },
            )
        })
        .collect();
    note(
        &mut facts,
        "brokers naming the same group coordinator",
        coordinators.len() == 1,
    );

    // Followers die one by one: the in-sync set shrinks, then acks=all is
    // refused below min.insync.replicas while acks=1 still lands.
    cluster.kill9(followers[0]).expect("kill a follower");
    let leader_addr = addr(cluster, leader);
    await_view(
        &leader_addr,
        t,
        "the in-sync set without the dead follower",
        |v| v.isr.len() == 2,
    );
    note(
        &mut facts,
        "acks=all with one follower dead",
        produce_values(&mut lc, t, 0, -1, 10_000, &values(&["c"])).expect("produce"),
    );
    cluster
        .kill9(followers[1])
        .expect("kill the other follower");
    let v1 = await_view(&leader_addr, t, "the leader alone in sync", |v| {
        v.isr.len() == 1
    });
    note(
        &mut facts,
        "in-sync set with both followers dead: the leader",
        v1.isr == vec![leader],
    );
    note(
        &mut facts,
        "leader epoch moved while followers died",
        v1.leader_epoch - v0.leader_epoch,
    );
    // The metadata answers from the image, the leader's own partition state
    // applies it a moment later (in Kafka too): until then an acks=all write
    // still passes the check before the append. Probe until the leader
    // refuses; probes that got in are left out of the log facts below.
    let refused = eventually(
        "acks=all refused",
        std::time::Duration::from_secs(30),
        || {
            let r = produce_values(&mut lc, t, 0, -1, 1_000, &values(&[PROBE])).ok()?;
            (r.0 == 19).then_some(r.0)
        },
    );
    note(&mut facts, "acks=all with both followers dead", refused);
    // (Its offset depends on how many probes got in.)
    note(
        &mut facts,
        "acks=1 with both followers dead",
        produce_values(&mut lc, t, 0, 1, 10_000, &values(&["d"]))
            .expect("produce")
            .0,
    );
    note(
        &mut facts,
        "high watermark and log with both followers dead",
        read_values(&mut lc, t),
    );

    cluster.restart(followers[0]).expect("restart a follower");
    cluster.restart(followers[1]).expect("restart the other");
    let v2 = await_view(&leader_addr, t, "all three in sync again", |v| {
        v.isr.len() == 3
    });
    note(
        &mut facts,
        "leader after the followers came back is the same",
        v2.leader == leader,
    );
    note(
        &mut facts,
        "high watermark and log after the followers came back",
        read_values(&mut lc, t),
    );
    let hw_before = fetch_values(&mut lc, t, 0, 0, 100)
        .expect("fetch")
        .high_watermark;

    // The leader dies: one of the in-sync followers takes over and loses
    // nothing acknowledged.
    drop(lc);
    cluster.kill9(leader).expect("kill the leader");
    let other = addr(cluster, followers[0]);
    let v3 = await_view(&other, t, "a new leader", |v| {
        v.leader >= 0 && v.leader != leader
    });
    note(
        &mut facts,
        "leader epoch moved when the leader died",
        v3.leader_epoch - v2.leader_epoch,
    );
    note(
        &mut facts,
        "the new leader was in sync",
        v2.isr.contains(&v3.leader),
    );
    let mut nc = Client::connect(&addr(cluster, v3.leader)).expect("connect to the new leader");
    // Its high watermark moves up to its log end with its first follower fetch.
    let after = eventually(
        "the new leader's high watermark",
        std::time::Duration::from_secs(30),
        || {
            let f = fetch_values(&mut nc, t, 0, 0, 100).ok()?;
            (f.high_watermark >= hw_before).then(|| read_values(&mut nc, t))
        },
    );
    note(
        &mut facts,
        "high watermark and log at the new leader",
        after,
    );
    // Named leader in one broker's metadata, the new leader may not have
    // taken over its partition yet: a client retries NOT_LEADER_OR_FOLLOWER.
    let produced = eventually(
        "the new leader takes writes",
        std::time::Duration::from_secs(30),
        || {
            let r = produce_values(&mut nc, t, 0, -1, 10_000, &values(&["e"])).ok()?;
            (r.0 != 6).then_some(r.0)
        },
    );
    // (Its offset depends on how many probes got in; the log facts show where.)
    note(&mut facts, "acks=all at the new leader", produced);
    cluster.restart(leader).expect("restart the old leader");
    let v4 = await_view(&other, t, "the old leader back in sync", |v| {
        v.isr.len() == 3
    });
    note(
        &mut facts,
        "leader after the old one came back is the new one",
        v4.leader == v3.leader,
    );
    let mut oc = Client::connect(&addr(cluster, leader)).expect("connect to the old leader");
    note(
        &mut facts,
        "produce at the old leader, now a follower",
        produce_values(&mut oc, t, 0, -1, 10_000, &values(&["x"]))
            .expect("produce")
            .0,
    );
    note(
        &mut facts,
        "high watermark and log at the end",
        read_values(&mut nc, t),
    );
    facts
}

/// Fails on any fact that differs and is not in `known`, and on a known
/// difference that no longer shows; prints the table either way.
#[test]
fn one_node_answers_as_kafka_does() {
    let kafka = KafkaDist::locate().expect("the reference Kafka");
    let strand_facts = observe(&start(Server::Strand(strand_bin())));
    let kafka_facts = observe(&start(Server::Kafka(kafka)));
    compare(&strand_facts, &kafka_facts, KNOWN);
}

#[test]
fn three_brokers_answer_as_kafka_does() {
    let kafka = KafkaDist::locate().expect("the reference Kafka");
    let strand_facts = observe_three(&mut start_three(Server::Strand(strand_bin())));
    let kafka_facts = observe_three(&mut start_three(Server::Kafka(kafka)));
    compare(&strand_facts, &kafka_facts, &[]);
}

/// The topic configs of the compaction scenario: segments rolled every
/// `COMPACT_SEGMENT_MS`, cleaned at any dirtiness, tombstones and markers
/// removable at the pass after the one that first keeps them.
const COMPACT_SEGMENT_MS: u64 = 100;

/// Keyed records (`None`: a tombstone) as one batch from `producer`
/// (pid, epoch, first sequence; pid -1 for a plain producer), in `txn`.
fn produce_keyed(
    c: &mut Client,
    topic: &str,
    (pid, epoch, seq): (i64, i16, i32),
    txn: Option<&str>,
    records: &[(String, Option<String>)],
) -> (i16, i64) {
    let now = now_ms();
    let recs: Vec<strand_protocol::testing::TestRecord> = records
        .iter()
        .map(|(k, v)| {
            (
                Some(bytes::Bytes::from(k.clone())),
                v.clone().map(bytes::Bytes::from),
                now,
            )
        })
        .collect();
    let batch = strand_protocol::testing::encode_records_txn(
        &recs,
        pid,
        epoch,
        seq,
        Compression::None,
        txn.is_some(),
    );
    send_produce(c, topic, txn, batch)
}

/// Every record of `topic`/0 from offset 0 to the HW, read_uncommitted:
/// (offset, key, value; `None` for a tombstone).
fn read_log(c: &mut Client, topic: &str) -> Vec<(i64, String, Option<String>)> {
    use kafka_protocol::messages::FetchResponse;
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let req = consumer_fetch(topic, 0, offset, 0, 0);
        let r: FetchResponse = c.call(ApiKey::Fetch, 11, &req).expect("fetch");
        let p = &r.responses[0].partitions[0];
        let data = p.records.clone().unwrap_or_default();
        let mut pos = 0;
        let start = offset;
        while let Ok(h) = strand_protocol::batch::BatchHeader::parse(&data[pos..]) {
            let end = pos + h.total_size();
            if end > data.len() {
                break;
            }
            let mut buf = data.slice(pos..end);
            let set =
                kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).expect("decodes");
            if !h.is_control() {
                for r in set.records.into_iter().filter(|r| r.offset >= start) {
                    let text = |b: bytes::Bytes| String::from_utf8_lossy(&b).into_owned();
                    out.push((
                        r.offset,
                        r.key.map(text).unwrap_or_default(),
                        r.value.map(text),
                    ));
                }
            }
            offset = offset.max(h.last_offset() + 1);
            pos = end;
        }
        if offset == start || offset >= p.high_watermark {
            return out;
        }
    }
}

/// A compacted topic (issue 34): keys rewritten over several segments,
/// tombstones, an idempotent producer, a committed and an aborted
/// transaction. Once the cleaner has been over it, a read from the start
/// must give each key's latest committed record at its offset, the deleted
/// keys gone, the aborted records gone: the same (offset, key, value)
/// sequence on both. The sequence observed is the fact (the last one seen,
/// if it never settles within a minute).
fn compaction(c: &mut Client, addr: &str, facts: &mut Facts) {
    let topic = "d-compacted";
    let segment_ms = COMPACT_SEGMENT_MS.to_string();
    create_ready_with(
        c,
        topic,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", &segment_ms),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "0"),
        ],
    );
    let txn = "d-compact-txn";
    let (e, tpid, tepoch) = eventually_init(c, addr, txn);
    assert_eq!(e, 0, "transactional InitProducerId");
    let (pid, epoch) = eventually(
        "an idempotent producer id",
        std::time::Duration::from_secs(30),
        || {
            let (e, pid, epoch) = init_producer_id(c, None, None);
            (e == 0).then_some((pid, epoch))
        },
    );
    // (offset, key, value, committed) of every record written.
    let mut written: Vec<(i64, String, Option<String>, bool)> = Vec::new();
    let mut note_batch = |base: i64, recs: &[(String, Option<String>)], committed: bool| {
        for (i, (k, v)) in recs.iter().enumerate() {
            written.push((base + i as i64, k.clone(), v.clone(), committed));
        }
    };
    let mut seq = 0;
    for round in 0..6 {
        let recs: Vec<(String, Option<String>)> = (0..12)
            .map(|k| (format!("k{k:02}"), Some(format!("r{round}-k{k}"))))
            .collect();
        let (e, base) = produce_keyed(c, topic, (-1, -1, -1), None, &recs[..6]);
        assert_eq!(e, 0);
        note_batch(base, &recs[..6], true);
        let (e, base) = produce_keyed(c, topic, (pid, epoch, seq), None, &recs[6..]);
        assert_eq!(e, 0);
        note_batch(base, &recs[6..], true);
        seq += 6;
        if round % 2 == 1 {
            // A transaction rewriting three keys, committed on round 1 and
            // aborted on round 3 and 5.
            let commit = round == 1;
            assert_eq!(add_partition(c, txn, (tpid, tepoch), topic), 0);
            let recs: Vec<(String, Option<String>)> = (0..3)
                .map(|k| (format!("k{k:02}"), Some(format!("t{round}-k{k}"))))
                .collect();
            let (e, base) =
                produce_keyed(c, topic, (tpid, tepoch, (round / 2) * 3), Some(txn), &recs);
            assert_eq!(e, 0);
            note_batch(base, &recs, commit);
            assert_eq!(end_txn_settled(c, txn, (tpid, tepoch), commit), 0);
        }
        // Segments roll on the first append after segment.ms.
        std::thread::sleep(std::time::Duration::from_millis(COMPACT_SEGMENT_MS + 50));
    }
    let tombstones: Vec<(String, Option<String>)> =
        (8..11).map(|k| (format!("k{k:02}"), None)).collect();
    let (e, base) = produce_keyed(c, topic, (-1, -1, -1), None, &tombstones);
    assert_eq!(e, 0);
    note_batch(base, &tombstones, true);
    // Two more records, a segment each: the first pass past the
    // tombstones' horizon needs new records to read (Kafka rolls a segment
    // only on an append, so the second one makes the first readable).
    for sentinel in ["last", "final"] {
        std::thread::sleep(std::time::Duration::from_millis(COMPACT_SEGMENT_MS + 50));
        let rec = vec![(sentinel.to_string(), Some(sentinel.to_string()))];
        let (e, base) = produce_keyed(c, topic, (-1, -1, -1), None, &rec);
        assert_eq!(e, 0);
        note_batch(base, &rec, true);
    }
    // What compaction promises: each key's latest committed record, and
    // no tombstone once its horizon (delete.retention.ms = 0) has passed.
    let mut latest: BTreeMap<String, (i64, Option<String>)> = BTreeMap::new();
    for (o, k, v, committed) in &written {
        if *committed {
            latest.insert(k.clone(), (*o, v.clone()));
        }
    }
    let mut expected: Vec<(i64, String, Option<String>)> = latest
        .into_iter()
        .filter(|(_, (_, v))| v.is_some())
        .map(|(k, (o, v))| (o, k, v))
        .collect();
    expected.sort();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = read_log(c, topic);
    while seen != expected && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        seen = read_log(c, topic);
    }
    note(facts, "compacted topic read from the start", &seen);
    note(
        facts,
        "compacted topic settled as compaction promises",
        seen == expected,
    );
}

/// Compacted topics (issue 34), Strand and Kafka each on one node with the
/// cleaner looking for work every 100 ms.
#[test]
fn compacted_topics_read_as_kafka_does() {
    let kafka = KafkaDist::locate().expect("the reference Kafka");
    let run = |server: Server| {
        let name = server.name();
        let mut spec = ClusterSpec::combined(1);
        for (k, v) in SETTINGS {
            spec = spec.with_override(*k, *v);
        }
        let spec = spec.with_override("log.cleaner.backoff.ms", "100");
        let cluster =
            Cluster::start_server(server, spec).unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let mut facts = Facts::new();
        let mut c = Client::connect(&cluster.bootstrap()).expect("connect");
        compaction(&mut c, &cluster.bootstrap(), &mut facts);
        facts
    };
    let strand_facts = run(Server::Strand(strand_bin()));
    let kafka_facts = run(Server::Kafka(kafka));
    compare(&strand_facts, &kafka_facts, &[]);
}

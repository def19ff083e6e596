//! Client quotas (issue 18), each test run against the reference Kafka and
//! against Strand with the same steps.
//!
//! What a user relies on: quotas are managed with Kafka's APIs and tools
//! and answered as Kafka answers (every check, message and filter); a
//! client over its byte rate gets Kafka's throttle time and is then not
//! served until that time has passed (the broker stops reading its
//! connection), a throttled produce is still written, a throttled fetch is
//! answered empty and its data comes later, in order, none lost.

mod common;

use bytes::Bytes;
use common::Client;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::time::{Duration, Instant};
use strand_compat_tests::{Cluster, ClusterSpec, KafkaDist, Server};

fn sb(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// One node of `server` (the reference Kafka or Strand).
fn node(server: Server) -> Cluster {
    Cluster::start_server(server, ClusterSpec::combined(1)).expect("a node starts")
}

fn both() -> [(&'static str, Server); 2] {
    let dist = KafkaDist::locate().expect("the reference Kafka");
    [
        ("Kafka", Server::Kafka(dist)),
        ("Strand", Server::Strand(common::strand_bin())),
    ]
}

type Entity<'a> = &'a [(&'a str, Option<&'a str>)];
/// A quota key, its value, and whether the op removes it.
type Op<'a> = (&'a str, f64, bool);
/// A filter component: entity type, match type, match string.
type Component<'a> = (&'a str, i8, Option<&'a str>);

/// AlterClientQuotas of one entry: (error code, message).
fn alter(c: &mut Client, entity: Entity, ops: &[(&str, f64, bool)], validate_only: bool) -> String {
    use alter_client_quotas_request::{EntityData, EntryData, OpData};
    let entry = EntryData::default()
        .with_entity(
            entity
                .iter()
                .map(|(t, n)| {
                    EntityData::default()
                        .with_entity_type(sb(t))
                        .with_entity_name(n.map(sb))
                })
                .collect(),
        )
        .with_ops(
            ops.iter()
                .map(|(k, v, remove)| {
                    OpData::default()
                        .with_key(sb(k))
                        .with_value(*v)
                        .with_remove(*remove)
                })
                .collect(),
        );
    let req = AlterClientQuotasRequest::default()
        .with_entries(vec![entry])
        .with_validate_only(validate_only);
    let resp: AlterClientQuotasResponse = c.call(ApiKey::AlterClientQuotas, 1, &req).unwrap();
    let e = &resp.entries[0];
    format!(
        "{} {}",
        e.error_code,
        e.error_message.as_deref().unwrap_or("-")
    )
}

/// DescribeClientQuotas: error code and message, then every entry as
/// `type=name,...: key=value,...`, sorted (Kafka's order is a hash map's).
fn describe(c: &mut Client, filter: &[Component], strict: bool) -> String {
    use describe_client_quotas_request::ComponentData;
    let req = DescribeClientQuotasRequest::default()
        .with_components(
            filter
                .iter()
                .map(|(t, m, n)| {
                    ComponentData::default()
                        .with_entity_type(sb(t))
                        .with_match_type(*m)
                        .with_match(n.map(sb))
                })
                .collect(),
        )
        .with_strict(strict);
    let resp: DescribeClientQuotasResponse = c.call(ApiKey::DescribeClientQuotas, 1, &req).unwrap();
    let mut entries: Vec<String> = resp
        .entries
        .iter()
        .flatten()
        .map(|e| {
            let mut entity: Vec<String> = e
                .entity
                .iter()
                .map(|x| {
                    format!(
                        "{}={}",
                        x.entity_type,
                        x.entity_name.as_deref().unwrap_or("<default>")
                    )
                })
                .collect();
            entity.sort();
            let mut values: Vec<String> = e
                .values
                .iter()
                .map(|v| format!("{}={}", v.key, v.value))
                .collect();
            values.sort();
            format!("{}: {}", entity.join(","), values.join(","))
        })
        .collect();
    entries.sort();
    format!(
        "{} {} [{}] null={}",
        resp.error_code,
        resp.error_message.as_deref().unwrap_or("-"),
        entries.join(" | "),
        resp.entries.is_none()
    )
}

const P: &str = "producer_byte_rate";
const C: &str = "consumer_byte_rate";
const R: &str = "request_percentage";
const IP_RATE: &str = "connection_creation_rate";

/// The steps, each answer a fact.
fn quota_api_facts(addr: &str) -> Vec<(String, String)> {
    let mut c = Client::connect(addr).unwrap();
    let mut facts = Vec::new();
    // One row per step: name, entity, ops, validate_only.
    #[rustfmt::skip]
    let alters: Vec<(&str, Entity, Vec<Op>, bool)> = vec![
        ("alice rates", &[("user", Some("alice"))], vec![(P, 1024.0, false), (C, 2048.0, false)], false),
        ("default user", &[("user", None)], vec![(R, 50.0, false)], false),
        ("alice+app", &[("user", Some("alice")), ("client-id", Some("app"))], vec![(P, 100.0, false)], false),
        ("default client", &[("client-id", None)], vec![(C, 4096.0, false)], false),
        ("app fraction", &[("client-id", Some("app"))], vec![(R, 12.5, false)], false),
        ("default ip", &[("ip", None)], vec![(IP_RATE, 10.0, false)], false),
        ("ip literal", &[("ip", Some("10.1.2.3"))], vec![(IP_RATE, 3.0, false)], false),
        ("fractional", &[("user", Some("bob"))], vec![(P, 10.5, false)], false),
        ("zero", &[("user", Some("bob"))], vec![(P, 0.0, false)], false),
        ("negative", &[("user", Some("bob"))], vec![(C, -1.0, false)], false),
        ("not finite", &[("user", Some("bob"))], vec![(R, f64::INFINITY, false)], false),
        ("too large", &[("user", Some("bob"))], vec![(P, 1e19, false)], false),
        ("ip key on a user", &[("user", Some("bob"))], vec![(IP_RATE, 5.0, false)], false),
        ("user key on an ip", &[("ip", None)], vec![(P, 5.0, false)], false),
        ("int too large", &[("ip", None)], vec![(IP_RATE, 3e9, false)], false),
        ("unknown key", &[("user", Some("bob"))], vec![("made_up_rate", 5.0, false)], false),
        ("ip with user", &[("ip", Some("10.1.2.3")), ("user", Some("bob"))], vec![(P, 5.0, false)], false),
        ("empty entity", &[], vec![(P, 5.0, false)], false),
        ("unknown type", &[("group", Some("g"))], vec![(P, 5.0, false)], false),
        ("empty name", &[("user", Some(""))], vec![(P, 5.0, false)], false),
        ("duplicate key", &[("user", Some("carol"))], vec![(P, 5.0, false), (P, 6.0, false)], false),
        ("remove missing", &[("user", Some("carol"))], vec![("bogus", 0.0, true)], false),
        ("validate only", &[("user", Some("dave"))], vec![(P, 1.0, false)], true),
        ("no ops", &[("user", Some("erin"))], vec![], false),
        ("set then remove", &[("user", Some("frank"))], vec![(P, 7.0, false)], false),
        ("removed", &[("user", Some("frank"))], vec![(P, 0.0, true)], false),
    ];
    for (name, entity, ops, validate_only) in alters {
        facts.push((
            format!("alter {name}"),
            alter(&mut c, entity, &ops, validate_only),
        ));
    }
    // A broker describes from its own metadata, which follows the
    // controller's commits (Kafka's too): wait for the last change.
    common::eventually(
        "the last change is visible",
        Duration::from_secs(10),
        || {
            describe(&mut c, &[("user", 0, Some("frank"))], true)
                .contains("[]")
                .then_some(())
        },
    );
    // One row per filter: name, components, strict.
    #[rustfmt::skip]
    let describes: Vec<(&str, Vec<Component>, bool)> = vec![
        ("everything", vec![], false),
        ("nothing strict", vec![], true),
        ("any user", vec![("user", 2, None)], false),
        ("any user strict", vec![("user", 2, None)], true),
        ("alice", vec![("user", 0, Some("alice"))], false),
        ("alice strict", vec![("user", 0, Some("alice"))], true),
        ("default user", vec![("user", 1, None)], true),
        ("alice and any client", vec![("user", 0, Some("alice")), ("client-id", 2, None)], false),
        ("any ip", vec![("ip", 2, None)], false),
        ("nobody", vec![("user", 0, Some("nobody"))], false),
        ("exact without name", vec![("user", 0, None)], false),
        ("default with name", vec![("user", 1, Some("x"))], false),
        ("any with name", vec![("user", 2, Some("x"))], false),
        ("unknown match", vec![("user", 7, None)], false),
        ("unknown type", vec![("group", 2, None)], false),
        ("empty type", vec![("", 2, None)], false),
        ("twice", vec![("user", 2, None), ("user", 1, None)], false),
        ("ip with user", vec![("ip", 2, None), ("user", 2, None)], false),
    ];
    for (name, filter, strict) in describes {
        facts.push((
            format!("describe {name}"),
            describe(&mut c, &filter, strict),
        ));
    }
    facts
}

/// Every quota API answer, valid and refused, equals the reference Kafka's.
#[test]
fn quota_apis_answer_as_kafka() {
    let mut runs = Vec::new();
    for (name, server) in both() {
        let cluster = node(server);
        let facts = quota_api_facts(&cluster.broker_addr(1).unwrap());
        runs.push((name, facts, cluster));
    }
    let (kafka, strand) = (&runs[0].1, &runs[1].1);
    assert_eq!(kafka.len(), strand.len());
    let differ: Vec<String> = kafka
        .iter()
        .zip(strand)
        .filter(|(k, s)| k != s)
        .map(|(k, s)| format!("{}:\n  Kafka  {}\n  Strand {}", k.0, k.1, s.1))
        .collect();
    assert!(
        differ.is_empty(),
        "answers that differ:\n{}",
        differ.join("\n")
    );
    // The steps did something: quotas were set and refused.
    let everything = &kafka
        .iter()
        .find(|f| f.0 == "describe everything")
        .unwrap()
        .1;
    assert!(
        everything.contains("user=alice: consumer_byte_rate=2048,producer_byte_rate=1024"),
        "{everything}"
    );

    // Kafka's own tool manages them on Strand.
    let dist = KafkaDist::locate().expect("the reference Kafka's tools");
    let strand_addr = runs[1].2.broker_addr(1).unwrap();
    let configs = |args: &str| {
        let args: Vec<&str> = args.split(' ').collect();
        common::kafka_tool(&dist.dir, "kafka-configs", &strand_addr, &args)
    };
    configs("--alter --add-config producer_byte_rate=4096 --entity-type users --entity-name grace --entity-type clients --entity-name etl");
    let users = configs("--describe --entity-type users");
    assert!(
        users.contains("Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0"),
        "{users}"
    );
    let grace = configs("--describe --entity-type users --entity-name grace --entity-type clients");
    assert!(
        grace.contains("Quota configs for user-principal 'grace', client-id 'etl' are producer_byte_rate=4096.0"),
        "{grace}"
    );
}

fn produce(c: &mut Client, topic: &str, value: &[u8]) -> (i16, i64, i32) {
    let resp = common::produce_batch(c, topic, 0, 1, 30_000, &[value]).unwrap();
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset, resp.throttle_time_ms)
}

/// One consumer fetch (v11) from `offset`, up to `max` bytes of the
/// partition: (records' offsets and values, throttle time).
fn fetch(c: &mut Client, topic: &str, offset: i64, max: i32) -> (Vec<(i64, Bytes)>, i32) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(i32::MAX)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(sb(topic)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(max)])]);
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &req).unwrap();
    let mut out = Vec::new();
    for t in &resp.responses {
        for p in &t.partitions {
            assert_eq!(p.error_code, 0);
            let mut records = p.records.clone().unwrap_or_default();
            // Whole batches; a partial one at the end is left for later.
            while let Ok(set) = kafka_protocol::records::RecordBatchDecoder::decode(&mut records) {
                for r in set.records {
                    out.push((r.offset, r.value.unwrap_or_default()));
                }
            }
        }
    }
    (out, resp.throttle_time_ms)
}

/// A producer and then a consumer over their byte rates (the test client's
/// id, `strand-test`, at 20,000 bytes a second each): the first ten
/// seconds' worth passes unthrottled (Kafka measures a first burst over ten
/// windows), then each answer carries a throttle time and the next request
/// is not answered before it has passed. Every produce is written; every
/// throttled fetch is empty, and all 25 values come back once, in order.
/// The same steps hold against the reference Kafka.
#[test]
fn byte_rates_hold_clients_back_as_kafka_does() {
    for (name, server) in both() {
        let cluster = node(server);
        let addr = cluster.broker_addr(1).unwrap();
        let mut c = Client::connect(&addr).unwrap();
        assert_eq!(
            common::create_topic_with(&mut c, "metered", 1, 1, &[]).unwrap(),
            0
        );
        let client_id: Entity = &[("client-id", Some("strand-test"))];
        assert_eq!(
            alter(
                &mut c,
                client_id,
                &[(P, 20_000.0, false), (C, 20_000.0, false)],
                false
            ),
            "0 -"
        );
        // Quotas reach the broker through its metadata: wait for the
        // describe to show them.
        common::eventually("the quotas are in force", Duration::from_secs(10), || {
            describe(&mut c, &[("client-id", 0, Some("strand-test"))], true)
                .contains("producer_byte_rate=20000")
                .then_some(())
        });
        // 25 values of 10,000 bytes: 250,000 bytes against 200,000 a first
        // burst may take.
        let value = |i: usize| format!("{i:05}-{}", "x".repeat(9_994)).into_bytes();
        let mut throttled = 0;
        let mut last: Option<(Instant, i32)> = None;
        let started = Instant::now();
        // A throttle begins once the broker has the request, so the next
        // answer comes no sooner than the throttle after that request was
        // sent.
        for i in 0..25 {
            let sent = Instant::now();
            let (err, offset, throttle) = produce(&mut c, "metered", &value(i));
            let now = Instant::now();
            assert_eq!(
                (err, offset),
                (0, i as i64),
                "{name}: produce {i} is written"
            );
            if let Some((at, ms)) = last {
                let waited = now - at;
                assert!(
                    waited >= Duration::from_millis(ms as u64),
                    "{name}: produce {i} answered {waited:?} after a {ms} ms throttle"
                );
            }
            if i < 15 {
                assert_eq!(throttle, 0, "{name}: produce {i} is within the first burst");
            }
            throttled += (throttle > 0) as usize;
            last = Some((sent, throttle));
        }
        assert!(throttled >= 3, "{name}: {throttled} produces throttled");
        eprintln!("{name}: produced in {:?}", started.elapsed());
        let started = Instant::now();

        // The consumer: 10,000 bytes a fetch.
        let mut got: Vec<(i64, Bytes)> = Vec::new();
        let (mut empty_throttled, mut last) = (0, None::<(Instant, i32)>);
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < 25 {
            assert!(
                Instant::now() < deadline,
                "{name}: fetched {} of 25",
                got.len()
            );
            let next = got.last().map_or(0, |(o, _)| o + 1);
            let sent = Instant::now();
            let (records, throttle) = fetch(&mut c, "metered", next, 10_000);
            let now = Instant::now();
            if let Some((at, ms)) = last {
                assert!(
                    now - at >= Duration::from_millis(ms as u64),
                    "{name}: a fetch answered before the last one's {ms} ms throttle passed"
                );
            }
            if throttle > 0 {
                assert!(
                    records.is_empty(),
                    "{name}: a throttled fetch carries no records"
                );
                empty_throttled += 1;
            }
            got.extend(records.into_iter().filter(|(o, _)| *o >= next));
            last = Some((sent, throttle));
        }
        assert!(empty_throttled >= 1, "{name}: no fetch was throttled");
        eprintln!(
            "{name}: consumed in {:?}, {empty_throttled} fetches throttled",
            started.elapsed()
        );
        for (i, (offset, v)) in got.iter().enumerate() {
            assert_eq!(
                (*offset, v.as_ref()),
                (i as i64, value(i).as_slice()),
                "{name}"
            );
        }
    }
}

/// A request-time quota (`request_percentage`, here a ten-thousandth of a
/// percent of one thread): a client sending Metadata requests is soon
/// answered with a throttle time, never more than one quota window (Kafka
/// caps request throttles at `quota.window.size.seconds`), and its next
/// request is not answered before that time has passed. The same steps hold
/// against the reference Kafka.
#[test]
fn request_time_quota_holds_a_busy_client_back() {
    for (name, server) in both() {
        let cluster = node(server);
        let addr = cluster.broker_addr(1).unwrap();
        let mut c = Client::connect(&addr).unwrap();
        let client_id: Entity = &[("client-id", Some("strand-test"))];
        assert_eq!(
            alter(&mut c, client_id, &[(R, 0.0001, false)], false),
            "0 -"
        );
        let metadata = |c: &mut Client| -> i32 {
            let req = MetadataRequest::default().with_topics(None);
            let resp: MetadataResponse = c.call(ApiKey::Metadata, 12, &req).unwrap();
            resp.throttle_time_ms
        };
        // Requests until one is throttled (the quota reaches the broker
        // through its metadata first).
        let deadline = Instant::now() + Duration::from_secs(30);
        let (sent, throttle) = loop {
            assert!(Instant::now() < deadline, "{name}: no request throttled");
            let sent = Instant::now();
            let ms = metadata(&mut c);
            if ms > 0 {
                break (sent, ms);
            }
        };
        assert!(
            throttle <= 1000,
            "{name}: a request throttle of {throttle} ms"
        );
        metadata(&mut c);
        let waited = sent.elapsed();
        assert!(
            waited >= Duration::from_millis(throttle as u64),
            "{name}: answered {waited:?} after a {throttle} ms throttle"
        );
    }
}

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
/// One AlterClientQuotas entry: its entity and ops.
type Entry<'a> = (Entity<'a>, &'a [Op<'a>]);
/// A filter component: entity type, match type, match string.
type Component<'a> = (&'a str, i8, Option<&'a str>);

/// AlterClientQuotas of one entry: (error code, message).
fn alter(c: &mut Client, entity: Entity, ops: &[(&str, f64, bool)], validate_only: bool) -> String {
    alter_entries(c, &[(entity, ops)], validate_only)
}

/// AlterClientQuotas of several entries: each answered entity with its
/// error code and message, sorted (Kafka answers in a hash map's order),
/// joined by " | ".
fn alter_entries(c: &mut Client, entries: &[Entry], validate_only: bool) -> String {
    let entries = entries
        .iter()
        .map(|(entity, ops)| entry(entity, ops))
        .collect();
    let req = AlterClientQuotasRequest::default()
        .with_entries(entries)
        .with_validate_only(validate_only);
    let resp: AlterClientQuotasResponse = c.call(ApiKey::AlterClientQuotas, 1, &req).unwrap();
    if resp.entries.len() == 1 {
        let e = &resp.entries[0];
        return format!(
            "{} {}",
            e.error_code,
            e.error_message.as_deref().unwrap_or("-")
        );
    }
    let mut answers: Vec<String> = resp
        .entries
        .iter()
        .map(|e| {
            let mut entity: Vec<String> = e
                .entity
                .iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c.entity_type,
                        c.entity_name.as_deref().unwrap_or("<default>")
                    )
                })
                .collect();
            entity.sort();
            format!(
                "{}: {} {}",
                entity.join(","),
                e.error_code,
                e.error_message.as_deref().unwrap_or("-")
            )
        })
        .collect();
    answers.sort();
    answers.join(" | ")
}

fn entry(entity: Entity, ops: &[Op]) -> alter_client_quotas_request::EntryData {
    use alter_client_quotas_request::{EntityData, EntryData, OpData};
    EntryData::default()
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
    // Several entries in one request: each answered; an entity named again
    // (in any component order, valid or not) is answered once, refused as
    // a duplicate, while its first entry's changes are made.
    #[rustfmt::skip]
    let multi: Vec<(&str, Vec<Entry>)> = vec![
        ("two entries", vec![
            (&[("user", Some("henry"))], &[(P, 11.0, false)]),
            (&[("user", Some("henry")), ("client-id", Some("x"))], &[(P, 12.0, false)]),
        ]),
        ("one good one bad", vec![
            (&[("user", Some("ivan"))], &[(P, 13.0, false)]),
            (&[("user", Some("ivan"))], &[(P, -1.0, false)]),
        ]),
        ("entity twice", vec![
            (&[("user", Some("judy")), ("client-id", Some("y"))], &[(P, 14.0, false)]),
            (&[("client-id", Some("y")), ("user", Some("judy"))], &[(C, 15.0, false)]),
        ]),
        ("a refused entity twice", vec![
            (&[("user", Some("kim")), ("ip", None)], &[(P, 16.0, false)]),
            (&[("ip", None), ("user", Some("kim"))], &[(P, 17.0, false)]),
            (&[("user", Some("kim"))], &[(P, 18.0, false)]),
        ]),
    ];
    for (name, entries) in multi {
        facts.push((
            format!("alter {name}"),
            alter_entries(&mut c, &entries, false),
        ));
    }
    // A broker describes from its own metadata, which follows the
    // controller's commits (Kafka's too): wait for the last change.
    common::eventually(
        "the last change is visible",
        Duration::from_secs(10),
        || {
            describe(&mut c, &[("user", 0, Some("kim"))], true)
                .contains("producer_byte_rate=18")
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
    // And on a broker that forwards each request to a controller of its
    // own (another process): the values travel to it and back.
    let split = Cluster::start_server(
        Server::Strand(common::strand_bin()),
        ClusterSpec::split(1, 1),
    )
    .expect("a controller and a broker start");
    let broker = split.broker_ids()[0];
    let forwarded = quota_api_facts(&split.broker_addr(broker).unwrap());
    runs.push(("Strand, forwarded", forwarded, split));
    let kafka = &runs[0].1;
    for (name, strand, _) in &runs[1..] {
        assert_eq!(kafka.len(), strand.len());
        let differ: Vec<String> = kafka
            .iter()
            .zip(strand)
            .filter(|(k, s)| k != s)
            .map(|(k, s)| format!("{}:\n  Kafka  {}\n  {name} {}", k.0, k.1, s.1))
            .collect();
        assert!(
            differ.is_empty(),
            "{name}: answers that differ:\n{}",
            differ.join("\n")
        );
    }
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
        // An ApiVersions outside a SASL exchange counts too (Kafka's
        // handler throttles it like any other request).
        let req = ApiVersionsRequest::default()
            .with_client_software_name(sb("strand-test"))
            .with_client_software_version(sb("1"));
        let resp: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &req).unwrap();
        assert!(
            resp.throttle_time_ms > 0,
            "{name}: an ApiVersions over the request quota is not throttled"
        );
    }
}

/// A client that leaves while throttled gives its connection back at once:
/// a tiny quota (the longest throttle Kafka gives, some 24 days) must not
/// hold a `max.connections.per.ip` slot for that long. (Strand only: the
/// reference Kafka does not read a throttled connection, so it notices the
/// close only when the throttle ends.)
#[test]
fn a_throttled_client_that_leaves_frees_its_connection() {
    let spec = ClusterSpec::combined(1).with_override("max.connections.per.ip", "2");
    let cluster =
        Cluster::start_server(Server::Strand(common::strand_bin()), spec).expect("a node starts");
    let addr = cluster.broker_addr(1).unwrap();
    let mut admin = Client::connect(&addr).unwrap();
    assert_eq!(
        common::create_topic_with(
            &mut admin,
            "metered",
            1,
            1,
            &[("max.message.bytes", "4000000")]
        )
        .unwrap(),
        0
    );
    let client_id: Entity = &[("client-id", Some("strand-test"))];
    assert_eq!(
        alter(&mut admin, client_id, &[(P, 1.0, false)], false),
        "0 -"
    );
    let mut hog = Client::connect(&addr).unwrap();
    // 3 MB over one byte a second: a throttle past Kafka's cap.
    let throttle = common::eventually("a produce is throttled", Duration::from_secs(10), || {
        let (err, _, ms) = produce(&mut hog, "metered", &vec![7u8; 3_000_000]);
        assert_eq!(err, 0);
        (ms > 0).then_some(ms)
    });
    assert_eq!(throttle, i32::MAX, "Kafka's cap on a byte-rate throttle");
    drop(hog);
    // The second slot is free again: a new connection is served.
    common::eventually(
        "the throttled connection's slot comes back",
        Duration::from_secs(10),
        || {
            let mut c = Client::connect(&addr).ok()?;
            let req = MetadataRequest::default().with_topics(None);
            c.call::<_, MetadataResponse>(ApiKey::Metadata, 12, &req)
                .ok()
        },
    );
    // And the admin connection is still the one it was.
    assert!(
        describe(&mut admin, &[("client-id", 0, Some("strand-test"))], true)
            .contains("producer_byte_rate=")
    );
}

/// Strand's quota rate is Kafka's: the same traces of records (steady,
/// bursty, with idle gaps around the 11 s expiry, with unrecorded values)
/// go through Kafka's own `Rate` (run from the reference Kafka's
/// kafka-clients jar) and through `strand_broker::client_quotas::Rate`;
/// after every step the rate and the window it is measured over must be
/// equal. The throttle time is a function of these two.
#[test]
fn the_quota_rate_is_kafkas_rate() {
    use strand_broker::client_quotas::{QuotaWindow, Rate};
    let dist = KafkaDist::locate().expect("the reference Kafka");
    let libs = dist.dir.join("libs");
    let class_path: Vec<String> = std::fs::read_dir(&libs)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            (name.starts_with("kafka-clients-") || name.starts_with("slf4j-api"))
                && name.ends_with(".jar")
        })
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(
        class_path.len(),
        2,
        "kafka-clients and slf4j-api in {libs:?}"
    );
    let oracle = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/compat-tests/reference-kafka/RateOracle.java"
    );

    // Deterministic traces: (ms since the first record, value; 0 = measure only).
    let mut seed: u64 = 0x5eed_1234;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let steady: Vec<(i64, f64)> = (0..600).map(|i| (i * 100, 200.0)).collect();
    let mut bursty = Vec::new();
    let mut sparse = Vec::new();
    let (mut t, mut u) = (0i64, 0i64);
    for _ in 0..3000 {
        let value = match next(10) {
            0 => 0.0,
            _ => (1 + next(10_000)) as f64,
        };
        bursty.push((t, value));
        if value > 0.0 && next(8) == 0 {
            bursty.push((t, -value)); // a throttled fetch taken back
        }
        t += match next(20) {
            0 => 0,
            1..=14 => next(300) as i64,
            15..=17 => 900 + next(300) as i64,
            _ => 2000 + next(13_000) as i64,
        };
        sparse.push((u, (1 + next(1000)) as f64));
        // Gaps around the expiry (11 s) and the window (1 s) edges.
        u += [999, 1000, 1001, 10_999, 11_000, 11_001, 12_000, 5][next(8) as usize];
    }
    for (name, trace) in [("steady", steady), ("bursty", bursty), ("sparse", sparse)] {
        let input: String = trace.iter().map(|(t, v)| format!("{t} {v}\n")).collect();
        let mut java = std::process::Command::new(&dist.java)
            .arg("-cp")
            .arg(class_path.join(":"))
            .arg(oracle)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("java runs");
        use std::io::Write;
        java.stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = java.wait_with_output().unwrap();
        assert!(out.status.success(), "{name}: the oracle failed");
        let kafka: Vec<(i64, f64, i64)> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (
                    f[0].parse().unwrap(),
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                )
            })
            .collect();
        assert_eq!(kafka.len(), trace.len(), "{name}: one line per step");
        let w = QuotaWindow::default();
        let mut rate = Rate::default();
        for (i, ((t, v), (kt, krate, kwindow))) in trace.iter().zip(&kafka).enumerate() {
            assert_eq!(t, kt);
            if *v != 0.0 {
                rate.record(w, *v, *t);
            }
            let strand_rate = rate.measure(w, *t);
            let strand_window = rate.window_size_ms(w, *t);
            assert!(
                strand_window == *kwindow
                    && (strand_rate - krate).abs() <= 1e-9 * krate.abs().max(1.0),
                "{name}, step {i} at {t} ms: Kafka measures {krate} over {kwindow} ms, Strand {strand_rate} over {strand_window} ms"
            );
        }
    }
}

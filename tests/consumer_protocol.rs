//! KIP-848 consumers (`group.protocol=consumer`, confluent-kafka's
//! librdkafka) against Strand (the consumer protocol is served by default,
//! as Kafka 4.x serves it): two consumers
//! split a 6-partition topic and read every record once between them; when
//! one leaves, the other is given all six; their commits hold, and after
//! the broker restarts (the group reloaded from `__consumer_offsets`) a
//! consumer of the same group reads only what came after them.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

fn run(bootstrap: &str, mode: &str) -> Vec<serde_json::Value> {
    run_in(bootstrap, "kip848", "g-kip848", mode)
}

fn run_in(bootstrap: &str, topic: &str, group: &str, mode: &str) -> Vec<serde_json::Value> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("compat-tests/clients/kip848_group.py");
    let out = Command::new(common::python())
        .arg(script)
        .args([bootstrap, topic, group, mode])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn ints(v: &serde_json::Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

#[test]
fn consumers_split_hand_over_and_resume_after_a_restart() {
    let mut broker = strand_compat_tests::harness::Broker::start(
        &common::strand_bin(),
        &[("offsets.topic.num.partitions", "3")],
    )
    .expect("broker starts");
    let addr = broker.addr();
    let events = run(&addr, "split");
    let split = &events[0];
    let (c1, c2) = (ints(&split["c1"]), ints(&split["c2"]));
    assert_eq!((c1.len(), c2.len()), (3, 3), "{split}");
    let all: BTreeSet<i64> = c1.iter().chain(&c2).copied().collect();
    assert_eq!(all, (0..6).collect(), "disjoint and complete: {split}");
    // Nothing is committed while they split, so a partition the first
    // consumer gives up is read again from the start by the second, as
    // Kafka does: every record is read, and each partition's owner has
    // read its records once, in order.
    let mut all_read = Vec::new();
    for (name, owned) in [("c1", &c1), ("c2", &c2)] {
        let read = ints(&split["read"][name]);
        for p in owned {
            let mine: Vec<i64> = read.iter().copied().filter(|v| v % 6 == *p).collect();
            let want: Vec<i64> = (0..60).filter(|v| v % 6 == *p).collect();
            assert_eq!(mine, want, "{name} read partition {p} once, in order");
        }
        all_read.extend(read);
    }
    let all_read: BTreeSet<i64> = all_read.into_iter().collect();
    assert_eq!(all_read, (0..60).collect(), "every record read");
    assert_eq!(
        ints(&events[1]["c2"]),
        (0..6).collect::<Vec<_>>(),
        "handed over"
    );

    broker.restart().expect("broker restarts");
    let events = run(&addr, "resume");
    let mut read = ints(&events[0]["read"]);
    read.sort();
    assert_eq!(
        read,
        (60..120).collect::<Vec<_>>(),
        "after the restart, only the records after the commits"
    );
}

/// A rolling change of client, as a user upgrading from the classic
/// protocol does (Kafka's online migration, the default policy
/// `bidirectional`): a classic consumer holds a topic; a consumer-protocol
/// consumer joins the same group, which becomes a consumer-protocol group,
/// and they split the partitions without one ever being assigned to both;
/// when it leaves, the group is a classic group again and the classic
/// consumer holds everything.
#[test]
fn a_group_moves_between_the_protocols_with_its_members() {
    let broker = strand_compat_tests::harness::Broker::start(
        &common::strand_bin(),
        &[("offsets.topic.num.partitions", "3")],
    )
    .expect("broker starts");
    let events = run_in(&broker.addr(), "migrate", "g-migrate", "migrate");
    let [classic, mixed, downgraded] = &events[..] else {
        panic!("three steps: {events:?}");
    };
    let six: Vec<i64> = (0..6).collect();
    assert_eq!(ints(&classic["k"]), six, "{classic}");
    assert_eq!(classic["type"], "CLASSIC", "{classic}");
    let (k, c) = (ints(&mixed["k"]), ints(&mixed["c"]));
    assert!(
        !k.is_empty() && !c.is_empty(),
        "both hold partitions: {mixed}"
    );
    let all: BTreeSet<i64> = k.iter().chain(&c).copied().collect();
    assert_eq!(all.len(), 6, "disjoint and complete: {mixed}");
    assert_eq!(mixed["type"], "CONSUMER", "{mixed}");
    assert_eq!(
        mixed["overlap"],
        serde_json::json!([]),
        "never assigned to both: {mixed}"
    );
    assert_eq!(ints(&downgraded["k"]), six, "{downgraded}");
    assert_eq!(downgraded["type"], "CLASSIC", "{downgraded}");
}

/// Without `consumer` in `group.coordinator.rebalance.protocols`, the
/// consumer protocol's APIs are neither advertised nor served, as Kafka
/// gates them; with the default they are.
#[test]
fn the_consumer_protocol_is_served_only_when_named() {
    use kafka_protocol::messages::{
        ApiKey, ApiVersionsRequest, ApiVersionsResponse, ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse, GroupId,
    };
    use kafka_protocol::protocol::StrBytes;
    for (protocols, served) in [(None, true), (Some("classic"), false)] {
        let overrides: Vec<(&str, &str)> = protocols
            .map(|p| ("group.coordinator.rebalance.protocols", p))
            .into_iter()
            .collect();
        let broker = strand_compat_tests::harness::Broker::start(&common::strand_bin(), &overrides)
            .expect("broker starts");
        let mut c = common::Client::connect(&broker.addr()).expect("connect");
        let av: ApiVersionsResponse = c
            .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
            .expect("ApiVersions");
        let advertised = |key: ApiKey| av.api_keys.iter().any(|k| k.api_key == key as i16);
        assert_eq!(
            advertised(ApiKey::ConsumerGroupHeartbeat),
            served,
            "{protocols:?}"
        );
        assert_eq!(
            advertised(ApiKey::ConsumerGroupDescribe),
            served,
            "{protocols:?}"
        );
        let r: ConsumerGroupHeartbeatResponse = c
            .call(
                ApiKey::ConsumerGroupHeartbeat,
                0,
                &ConsumerGroupHeartbeatRequest::default()
                    .with_group_id(GroupId(StrBytes::from_static_str("g")))
                    .with_rebalance_timeout_ms(30_000)
                    .with_subscribed_topic_names(Some(Vec::new()))
                    .with_topic_partitions(Some(Vec::new())),
            )
            .expect("ConsumerGroupHeartbeat");
        if served {
            assert_ne!(r.error_code, 35, "{protocols:?}");
        } else {
            assert_eq!(r.error_code, 35, "UNSUPPORTED_VERSION with {protocols:?}");
        }
    }
}

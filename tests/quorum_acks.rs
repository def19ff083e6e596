//! Acknowledgement policies beyond Kafka's (issue 15, `strand.acks.*`), on
//! a 3-node cluster whose sessions (30 s) and lag limit (60 s) are long, so
//! neither fencing nor Kafka's lag rule moves an ISR during a test: what
//! moves it is the policy.
//!
//! * replica-count 2 of 3: with one follower stopped (SIGSTOP), acks=all
//!   writes go on being acknowledged, the stopped follower leaves the ISR,
//!   and every acknowledged write survives the loss of the leader (the
//!   election can only pick the follower that holds it), while the same
//!   write to an all-in-sync topic times out; the follower rejoins once
//!   continued;
//! * the downgrade (seed 002): replica-count 2 with downgrade on and
//!   min.insync.replicas=1 goes on with one replica in sync, and without the
//!   downgrade it is refused NOT_ENOUGH_REPLICAS.

mod common;

use common::{create_topic_with, eventually, fetch_values, partition_view, produce_values, Client};
use std::collections::BTreeSet;
use std::time::Duration;
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

const PROBE: Duration = Duration::from_secs(2);
const NOT_ENOUGH_REPLICAS: i16 = 19;
const REQUEST_TIMED_OUT: i16 = 7;

fn cluster() -> Cluster {
    let spec = ClusterSpec::combined(3)
        .with_override("broker.session.timeout.ms", "30000")
        .with_override("broker.heartbeat.interval.ms", "500")
        .with_override("replica.lag.time.max.ms", "60000");
    Cluster::start(&common::strand_bin(), spec).expect("cluster starts")
}

fn addr(cluster: &Cluster, id: i32) -> String {
    cluster.broker_addr(id).expect("broker address")
}

/// Creates `topic` (one partition, RF 3) and waits until every node sees a
/// leader and a full ISR; returns the leader.
fn create(cluster: &Cluster, topic: &str, configs: &[(&str, &str)]) -> i32 {
    let ids = cluster.node_ids();
    let mut admin = Client::connect(&addr(cluster, ids[0])).expect("connect");
    assert_eq!(
        create_topic_with(&mut admin, topic, 1, 3, configs).unwrap(),
        0
    );
    let mut leader = -1;
    for id in ids {
        leader = eventually(
            &format!("{topic}-0 led with a full ISR, as node {id} sees it"),
            Duration::from_secs(30),
            || {
                partition_view(&addr(cluster, id), topic, 0, PROBE)
                    .filter(|v| v.leader >= 0 && v.isr.len() == 3)
                    .map(|v| v.leader)
            },
        );
    }
    leader
}

/// Every value of `topic`-0 up to its HW, read from the broker at `at`.
fn read_all(at: &str, topic: &str) -> BTreeSet<String> {
    let mut c = Client::connect(at).expect("connect");
    let mut out = BTreeSet::new();
    let mut offset = 0;
    loop {
        let f = fetch_values(&mut c, topic, 0, offset, 500).expect("fetch");
        assert_eq!(f.error_code, 0, "fetch of {topic} at {offset}");
        for (o, v) in &f.records {
            if *o >= offset {
                out.insert(String::from_utf8_lossy(v).into_owned());
            }
        }
        if f.next_offset >= f.high_watermark {
            return out;
        }
        offset = f.next_offset;
    }
}

#[test]
fn replica_count_writes_go_on_past_a_stopped_follower_and_survive_the_leader() {
    let mut cluster = cluster();
    let quorum = "quorum-acks";
    let all = "all-in-sync-acks";
    let leader = create(
        &cluster,
        quorum,
        &[
            ("min.insync.replicas", "2"),
            ("strand.acks.policy", "replica-count"),
            ("strand.acks.replicas", "2"),
            ("strand.acks.eviction.ms", "200"),
        ],
    );
    let all_leader = create(&cluster, all, &[("min.insync.replicas", "2")]);
    // A follower of both partitions (every node replicates both), and if
    // possible not the other topic's leader.
    let stopped = cluster
        .node_ids()
        .into_iter()
        .filter(|id| *id != leader)
        .min_by_key(|id| *id == all_leader)
        .expect("a follower");
    let kept = cluster
        .node_ids()
        .into_iter()
        .find(|id| *id != leader && *id != stopped)
        .expect("the other follower");
    let mut c = Client::connect(&addr(&cluster, leader)).expect("connect");
    let mut acknowledged = Vec::new();
    for i in 0..20 {
        let v = format!("before-{i}");
        assert_eq!(
            produce_values(&mut c, quorum, 0, -1, 10_000, std::slice::from_ref(&v))
                .unwrap()
                .0,
            0
        );
        acknowledged.push(v);
    }

    cluster.stop(stopped).expect("SIGSTOP a follower");
    // Writes go on: each is acknowledged once the leader and the other
    // follower hold it and the stopped one is out of the ISR.
    for i in 0..200 {
        let v = format!("during-{i}");
        let (code, _) =
            produce_values(&mut c, quorum, 0, -1, 15_000, std::slice::from_ref(&v)).unwrap();
        assert_eq!(code, 0, "write {i} with follower {stopped} stopped");
        acknowledged.push(v);
    }
    let view = partition_view(&addr(&cluster, leader), quorum, 0, PROBE).expect("metadata");
    let mut want = vec![leader, kept];
    want.sort_unstable();
    assert_eq!(view.isr, want, "the stopped follower left the ISR");
    // Kafka's rule waits for every ISR member: the stopped follower is
    // still in the all-in-sync topic's ISR (no session has ended, no lag
    // limit passed), and the same write times out.
    let mut a = Client::connect(&addr(&cluster, all_leader)).expect("connect");
    let (code, _) = produce_values(&mut a, all, 0, -1, 3_000, &["waits".to_string()]).unwrap();
    assert_eq!(
        code, REQUEST_TIMED_OUT,
        "all-in-sync waits for the stopped follower"
    );
    let view = partition_view(&addr(&cluster, all_leader), all, 0, PROBE).expect("metadata");
    assert!(view.isr.contains(&stopped), "{view:?}");

    // The leader dies (and restarts, so the controllers have a quorum with
    // the follower still stopped): only the follower that holds every
    // acknowledged write is in the ISR, so only it can lead.
    cluster.kill9(leader).expect("kill -9 the leader");
    cluster.restart(leader).expect("restart it");
    eventually(
        &format!("{quorum}-0 led by {kept}"),
        Duration::from_secs(60),
        || partition_view(&addr(&cluster, kept), quorum, 0, PROBE).filter(|v| v.leader == kept),
    );
    let held = eventually(
        "a read from the new leader",
        Duration::from_secs(30),
        || {
            let held = read_all(&addr(&cluster, kept), quorum);
            acknowledged
                .iter()
                .all(|v| held.contains(v))
                .then_some(held)
        },
    );
    assert!(held.len() >= acknowledged.len());

    // Continued, the follower catches up and rejoins.
    cluster.cont(stopped).expect("SIGCONT");
    eventually(
        &format!("{quorum}-0 whole again"),
        Duration::from_secs(60),
        || partition_view(&addr(&cluster, kept), quorum, 0, PROBE).filter(|v| v.isr.len() == 3),
    );
}

/// Creates `topic` with one partition on `replicas` (the first leads) and
/// waits until all of them are in its ISR.
fn create_on(cluster: &Cluster, topic: &str, replicas: &[i32], configs: &[(&str, &str)]) {
    use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
    use kafka_protocol::messages::BrokerId;
    let mut c = Client::connect(&addr(cluster, replicas[0])).expect("connect");
    let t = common::creatable_topic(topic, -1, -1, configs).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(replicas.iter().map(|r| BrokerId(*r)).collect()),
    ]);
    let resp = common::create_topics(&mut c, vec![t]).expect("create");
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0]);
    eventually(&format!("{topic}-0 whole"), Duration::from_secs(30), || {
        partition_view(&addr(cluster, replicas[0]), topic, 0, PROBE)
            .filter(|v| v.leader == replicas[0] && v.isr.len() == replicas.len())
    });
}

/// Seed 002's two-replica case: replica-count 2 on two replicas with
/// min.insync.replicas=1. With the downgrade on, the leader alone takes
/// acks=all writes once its follower is gone (fenced when its session
/// ends); without it, they are refused NOT_ENOUGH_REPLICAS.
#[test]
fn the_downgrade_goes_on_with_the_leader_alone_and_without_it_writes_are_refused() {
    let spec = ClusterSpec::combined(3)
        .with_override("broker.session.timeout.ms", "3000")
        .with_override("broker.heartbeat.interval.ms", "500")
        .with_override("replica.lag.time.max.ms", "60000");
    let mut cluster = Cluster::start(&common::strand_bin(), spec).expect("cluster starts");
    let ids = cluster.node_ids();
    let (leader, follower) = (ids[0], ids[1]);
    let quorum = [
        ("min.insync.replicas", "1"),
        ("strand.acks.policy", "replica-count"),
        ("strand.acks.replicas", "2"),
    ];
    let mut with_downgrade = quorum.to_vec();
    with_downgrade.push(("strand.acks.downgrade.enable", "true"));
    create_on(
        &cluster,
        "downgrade-on",
        &[leader, follower],
        &with_downgrade,
    );
    create_on(&cluster, "downgrade-off", &[leader, follower], &quorum);
    let mut c = Client::connect(&addr(&cluster, leader)).expect("connect");
    for topic in ["downgrade-on", "downgrade-off"] {
        let (code, _) = produce_values(&mut c, topic, 0, -1, 10_000, &["both".into()]).unwrap();
        assert_eq!(code, 0, "{topic} with both replicas in sync");
    }
    // The follower goes (its node's controller too: the other two keep a
    // quorum), is fenced when its session ends and leaves both ISRs.
    cluster.stop(follower).expect("SIGSTOP the follower");
    for topic in ["downgrade-on", "downgrade-off"] {
        eventually(
            &format!("{topic}-0 with the leader alone in sync"),
            Duration::from_secs(30),
            || {
                partition_view(&addr(&cluster, leader), topic, 0, PROBE)
                    .filter(|v| v.isr == vec![leader])
            },
        );
    }
    let (code, _) =
        produce_values(&mut c, "downgrade-on", 0, -1, 10_000, &["alone".into()]).unwrap();
    assert_eq!(code, 0, "downgraded to the leader alone");
    let (code, _) =
        produce_values(&mut c, "downgrade-off", 0, -1, 10_000, &["alone".into()]).unwrap();
    assert_eq!(
        code, NOT_ENOUGH_REPLICAS,
        "no downgrade: two replicas or nothing"
    );
    let held = read_all(&addr(&cluster, leader), "downgrade-on");
    assert!(held.contains("both") && held.contains("alone"), "{held:?}");
    let held = read_all(&addr(&cluster, leader), "downgrade-off");
    assert!(held.contains("both") && !held.contains("alone"), "{held:?}");
    cluster.cont(follower).expect("SIGCONT");
}

/// strand.acks.durable on three replicas: acks=all writes are acknowledged
/// (followers report what they have fsynced in their fetches, the leader
/// fsyncs before it acknowledges) and acks=1 writes become readable (the HW
/// counts fsynced offsets, and the leader syncs every append). Without
/// the reports the acks=all writes would time out, and without the
/// leader's syncs the acks=1 writes would never become readable.
#[test]
fn durable_acknowledgements_count_fsynced_copies() {
    let cluster = cluster();
    let topic = "durable-acks";
    let leader = create(
        &cluster,
        topic,
        &[
            ("min.insync.replicas", "2"),
            ("strand.acks.durable", "true"),
        ],
    );
    let mut c = Client::connect(&addr(&cluster, leader)).expect("connect");
    let mut written = BTreeSet::new();
    for i in 0..50 {
        let all = format!("all-{i}");
        let (code, _) =
            produce_values(&mut c, topic, 0, -1, 10_000, std::slice::from_ref(&all)).unwrap();
        assert_eq!(code, 0, "acks=all {all}");
        let one = format!("one-{i}");
        let (code, _) =
            produce_values(&mut c, topic, 0, 1, 10_000, std::slice::from_ref(&one)).unwrap();
        assert_eq!(code, 0, "acks=1 {one}");
        written.insert(all);
        written.insert(one);
    }
    let held = eventually("every write readable", Duration::from_secs(30), || {
        let held = read_all(&addr(&cluster, leader), topic);
        written.iter().all(|v| held.contains(v)).then_some(held)
    });
    assert_eq!(held, written);
}

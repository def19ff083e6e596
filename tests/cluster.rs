//! A 3-node cluster (combined broker+controller nodes on the metadata
//! quorum): metadata reaches every broker, survives the active controller's
//! SIGKILL, a SIGSTOPped old leader, and a full restart; a killed broker is
//! fenced, its single-replica partitions re-elected when it returns, and a
//! replicated partition it led moves to another replica at a higher epoch.

mod common;

use common::Client;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::time::{Duration, Instant};
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create_topic(addr: &str, name: &str, partitions: i32) -> i16 {
    create_topic_rf(addr, name, partitions, 1)
}

fn create_topic_rf(addr: &str, name: &str, partitions: i32, replication_factor: i16) -> i16 {
    let mut c = Client::connect(addr).unwrap();
    common::create_topic_with(&mut c, name, partitions, replication_factor, &[]).unwrap()
}

fn metadata(addr: &str) -> MetadataResponse {
    let mut c = Client::connect(addr).unwrap();
    c.call(
        ApiKey::Metadata,
        9,
        &MetadataRequest::default().with_topics(None),
    )
    .unwrap()
}

fn topic_names(addr: &str) -> Vec<String> {
    let mut names: Vec<String> = metadata(addr)
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect();
    names.sort();
    names
}

/// (leader, leader epoch) of partition 0 of `topic` as `addr` reports it.
fn leader(addr: &str, topic: &str) -> Option<(i32, i32)> {
    let md = metadata(addr);
    let t = md
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic))?;
    let p = t.partitions.iter().find(|p| p.partition_index == 0)?;
    Some((p.leader_id.0, p.leader_epoch))
}

fn active_controller(addr: &str) -> Option<i32> {
    let mut c = Client::connect(addr).ok()?;
    let req = DescribeQuorumRequest::default().with_topics(vec![
        describe_quorum_request::TopicData::default()
            .with_topic_name(topic_name("__cluster_metadata"))
            .with_partitions(vec![
                describe_quorum_request::PartitionData::default().with_partition_index(0)
            ]),
    ]);
    let resp: DescribeQuorumResponse = c.call(ApiKey::DescribeQuorum, 0, &req).ok()?;
    let p = &resp.topics[0].partitions[0];
    (p.error_code == 0).then_some(p.leader_id.0)
}

/// Polls `check` until it holds (metadata propagates asynchronously).
fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn three_node_metadata_quorum() {
    let spec = ClusterSpec::combined(3)
        .with_override("broker.session.timeout.ms", "3000")
        .with_override("broker.heartbeat.interval.ms", "500");
    let mut cluster = Cluster::start(&common::strand_bin(), spec).expect("cluster starts");
    let ids = cluster.broker_ids();
    let addr = |c: &Cluster, id: i32| c.broker_addr(id).unwrap();

    // A topic created through any broker appears in every broker's Metadata.
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            create_topic(&addr(&cluster, *id), &format!("via-{id}"), 2),
            0,
            "create via broker {id}"
        );
        let want = format!("via-{id}");
        for other in &ids {
            let a = addr(&cluster, *other);
            eventually(
                &format!("{want} on broker {other}"),
                Duration::from_secs(10),
                || topic_names(&a).contains(&want).then_some(()),
            );
        }
        assert_eq!(
            topic_names(&addr(&cluster, ids[(i + 1) % ids.len()])).len(),
            i + 1
        );
    }

    // kill -9 of the active controller: a new one takes over, later
    // CreateTopics succeed, and nothing committed is lost.
    let first = eventually("an active controller", Duration::from_secs(10), || {
        active_controller(&addr(&cluster, ids[0]))
    });
    cluster.kill9(first).unwrap();
    let survivor = *ids.iter().find(|id| **id != first).unwrap();
    let second = eventually("a new active controller", Duration::from_secs(20), || {
        active_controller(&addr(&cluster, survivor)).filter(|l| *l != first)
    });
    assert_eq!(
        create_topic(&addr(&cluster, survivor), "after-failover", 1),
        0
    );
    let names = topic_names(&addr(&cluster, survivor));
    for id in &ids {
        assert!(
            names.contains(&format!("via-{id}")),
            "committed topic via-{id} survives failover: {names:?}"
        );
    }
    cluster.restart(first).unwrap();

    // A SIGSTOPped active controller commits nothing; after SIGCONT it follows.
    cluster.stop(second).unwrap();
    let other = *ids.iter().find(|id| **id != second).unwrap();
    let third = eventually(
        "a leader while the old one is stopped",
        Duration::from_secs(20),
        || active_controller(&addr(&cluster, other)).filter(|l| *l != second),
    );
    assert_eq!(create_topic(&addr(&cluster, other), "while-stopped", 1), 0);
    cluster.cont(second).unwrap();
    let a = addr(&cluster, second);
    eventually(
        "the resumed node follows the new leader",
        Duration::from_secs(20),
        || {
            (active_controller(&a) == Some(third)
                && topic_names(&a).contains(&"while-stopped".to_string()))
            .then_some(())
        },
    );
    let reference = topic_names(&addr(&cluster, third));
    eventually(
        "every broker has the same topics",
        Duration::from_secs(20),
        || {
            ids.iter()
                .all(|id| topic_names(&addr(&cluster, *id)) == reference)
                .then_some(())
        },
    );

    // kill -9 of a broker: fenced after its session; its partition goes
    // offline (one replica) with a higher leader epoch, and when it returns it
    // is unfenced and leads again, at a higher epoch still.
    // (The SIGSTOPped node above may have been fenced meanwhile: wait until
    // every broker is back and the partition has a leader again.)
    cluster.wait_ready(Duration::from_secs(30)).unwrap();
    let topic = format!("via-{}", ids[0]);
    let a0 = addr(&cluster, ids[0]);
    let (victim, epoch0) = eventually(
        "a leader for the partition",
        Duration::from_secs(20),
        || leader(&a0, &topic).filter(|(l, _)| *l >= 0),
    );
    let watcher = addr(&cluster, *ids.iter().find(|id| **id != victim).unwrap());
    cluster.kill9(victim).unwrap();
    let epoch1 = eventually(
        "the killed broker's partition loses its leader",
        Duration::from_secs(20),
        || {
            leader(&watcher, &topic)
                .filter(|(l, _)| *l == -1)
                .map(|(_, e)| e)
        },
    );
    assert!(
        epoch1 > epoch0,
        "leader epoch rises when the leader is fenced ({epoch0} -> {epoch1})"
    );
    assert!(
        !metadata(&watcher)
            .brokers
            .iter()
            .any(|b| b.node_id.0 == victim),
        "a fenced broker is not listed"
    );
    cluster.restart(victim).unwrap();
    let epoch2 = eventually(
        "the returning broker leads again",
        Duration::from_secs(20),
        || {
            leader(&watcher, &topic)
                .filter(|(l, _)| *l == victim)
                .map(|(_, e)| e)
        },
    );
    assert!(epoch2 > epoch1);

    // With three replicas, a killed leader's partition moves at once (after
    // its session) to the next in-sync replica, at a higher leader epoch.
    cluster.wait_ready(Duration::from_secs(30)).unwrap();
    assert_eq!(create_topic_rf(&a0, "replicated", 1, 3), 0);
    let (old_leader, repoch0) = eventually(
        "a leader for the replicated partition",
        Duration::from_secs(20),
        || leader(&a0, "replicated").filter(|(l, _)| *l >= 0),
    );
    let watcher = addr(&cluster, *ids.iter().find(|id| **id != old_leader).unwrap());
    cluster.kill9(old_leader).unwrap();
    let (new_leader, repoch1) = eventually(
        "another replica leads the killed broker's partition",
        Duration::from_secs(30),
        || leader(&watcher, "replicated").filter(|(l, _)| *l >= 0 && *l != old_leader),
    );
    assert!(
        repoch1 > repoch0,
        "leader epoch rises with the move from {old_leader} to {new_leader} ({repoch0} -> {repoch1})"
    );
    cluster.restart(old_leader).unwrap();

    // Restarting every node keeps all metadata.
    let before = topic_names(&addr(&cluster, ids[0]));
    for id in &ids {
        cluster.terminate(*id).unwrap();
    }
    for id in &ids {
        cluster.respawn(*id).unwrap();
    }
    cluster.wait_ready(Duration::from_secs(60)).unwrap();
    for id in &ids {
        assert_eq!(
            topic_names(&addr(&cluster, *id)),
            before,
            "metadata after a full restart on broker {id}"
        );
    }
    assert_eq!(
        create_topic(&addr(&cluster, ids[1]), "after-full-restart", 1),
        0
    );
}

/// The single-node kcat round trip on a 3-node cluster: 10,000 messages with
/// acks=all come back identical and in order, also after the partition
/// leader is killed with SIGKILL and restarted.
#[test]
fn kcat_round_trip_on_three_nodes() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut cluster =
        Cluster::start(&common::strand_bin(), ClusterSpec::combined(3)).expect("cluster starts");
    let bootstrap = cluster.bootstrap();
    let lines: Vec<String> = (0..10_000).map(|i| format!("m{i:05}")).collect();
    let mut child = Command::new("kcat")
        .args(["-b", &bootstrap, "-P", "-t", "kcat3", "-X", "acks=all"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let stdin = child.stdin.as_mut().unwrap();
        for l in &lines {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    assert!(child.wait().unwrap().success());
    let consume = |b: &str| -> Vec<String> {
        let out = Command::new("kcat")
            .args(["-b", b, "-C", "-t", "kcat3", "-o", "beginning", "-e", "-q"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    };
    assert_eq!(consume(&bootstrap), lines);
    let (lead, _) = leader(
        &cluster.broker_addr(cluster.broker_ids()[0]).unwrap(),
        "kcat3",
    )
    .unwrap();
    cluster.kill9(lead).unwrap();
    cluster.restart(lead).unwrap();
    let watcher = cluster.broker_addr(lead).unwrap();
    eventually(
        "the restarted leader serves again",
        Duration::from_secs(30),
        || leader(&watcher, "kcat3").filter(|(l, _)| *l == lead),
    );
    assert_eq!(
        consume(&bootstrap),
        lines,
        "identical after kill -9 of the leader and a restart"
    );
}

/// 3 controllers + 3 brokers: brokers that are not controllers follow the
/// committed metadata and forward changes; losing the active controller does
/// not stop topic creation.
#[test]
fn split_roles_cluster() {
    let mut cluster =
        Cluster::start(&common::strand_bin(), ClusterSpec::split(3, 3)).expect("cluster starts");
    let brokers = cluster.broker_ids();
    let controllers = cluster.controller_ids();
    assert_eq!(brokers.len(), 3);
    assert!(brokers.iter().all(|b| !controllers.contains(b)));
    let a0 = cluster.broker_addr(brokers[0]).unwrap();
    assert_eq!(create_topic(&a0, "split-one", 3), 0);
    for b in &brokers {
        let a = cluster.broker_addr(*b).unwrap();
        eventually(
            &format!("split-one on broker {b}"),
            Duration::from_secs(10),
            || {
                topic_names(&a)
                    .contains(&"split-one".to_string())
                    .then_some(())
            },
        );
    }
    let active = eventually("an active controller", Duration::from_secs(10), || {
        active_controller(&a0)
    });
    assert!(controllers.contains(&active));
    cluster.kill9(active).unwrap();
    eventually("a new active controller", Duration::from_secs(20), || {
        active_controller(&a0).filter(|l| *l != active)
    });
    let a2 = cluster.broker_addr(brokers[2]).unwrap();
    assert_eq!(create_topic(&a2, "split-two", 1), 0);
    eventually(
        "split-two reaches broker 1",
        Duration::from_secs(10),
        || {
            topic_names(&a0)
                .contains(&"split-two".to_string())
                .then_some(())
        },
    );
}

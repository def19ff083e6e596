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

/// A fetch that waits at the leader (DelayedFetch) is answered only within
/// the leader term it named: when the leader is fenced while the fetch
/// waits and then leads again at a later epoch, the fetch gets
/// FENCED_LEADER_EPOCH or NOT_LEADER_OR_FOLLOWER, never records of the later
/// term, as Kafka's DelayedFetch answers. (Chaos seed 212: a read_committed
/// consumer whose fetch named epoch 4 was answered with epoch 6 records,
/// and librdkafka's offset validation then skipped a record.)
#[test]
fn a_waiting_fetch_is_never_answered_from_a_later_leader_term() {
    use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
    use strand_protocol::batch::BatchIter;
    const TOPIC: &str = "term";
    let spec = ClusterSpec::combined(3)
        .with_override("broker.session.timeout.ms", "3000")
        .with_override("broker.heartbeat.interval.ms", "500");
    let mut cluster = Cluster::start(&common::strand_bin(), spec).expect("cluster starts");
    let ids = cluster.broker_ids();
    let addr = |c: &Cluster, id: i32| c.broker_addr(id).unwrap();
    let controller = eventually("an active controller", Duration::from_secs(10), || {
        active_controller(&addr(&cluster, ids[0]))
    });
    // The leader is not the active controller, so it can be paused and
    // fenced while the quorum carries on.
    let victim = *ids.iter().find(|id| **id != controller).unwrap();
    let watcher = addr(&cluster, controller);
    let victim_addr = addr(&cluster, victim);
    let topic = common::creatable_topic(TOPIC, -1, -1, &[]).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(victim)]),
    ]);
    let mut admin = Client::connect(&watcher).unwrap();
    assert_eq!(
        common::create_topics(&mut admin, vec![topic])
            .unwrap()
            .topics[0]
            .error_code,
        0
    );
    let mut producer = Client::connect(&victim_addr).unwrap();
    let produce = |c: &mut Client, value: &str| {
        eventually(
            "the leader takes the write",
            Duration::from_secs(20),
            || {
                match common::produce_values(c, TOPIC, 0, 1, 5_000, &[value.to_string()]).unwrap() {
                    (0, base) => Some(base),
                    (3 | 6, _) => None, // the leader has not applied its leadership yet
                    (code, _) => panic!("produce answered {code}"),
                }
            },
        )
    };
    assert_eq!(produce(&mut producer, "before"), 0);
    let (_, epoch) = leader(&victim_addr, TOPIC).unwrap();

    // A consumer's fetch at the end of the log, naming the current epoch,
    // waits at the leader for data.
    let mut consumer = Client::connect_timeout(&victim_addr, Duration::from_secs(90)).unwrap();
    let fetch = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(60_000)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(topic_name(TOPIC))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(epoch)
                .with_fetch_offset(1)
                .with_partition_max_bytes(1 << 20)])]);
    consumer.send(ApiKey::Fetch, 12, &fetch).unwrap();

    // The leader is paused past its session: fenced, the partition goes
    // leaderless; resumed, it leads again at a later epoch and takes a write.
    cluster.stop(victim).unwrap();
    eventually(
        "the paused leader is fenced",
        Duration::from_secs(20),
        || leader(&watcher, TOPIC).filter(|(l, _)| *l == -1),
    );
    cluster.cont(victim).unwrap();
    let later = eventually(
        "the resumed broker leads again",
        Duration::from_secs(30),
        || {
            leader(&victim_addr, TOPIC)
                .filter(|(l, e)| *l == victim && *e > epoch)
                .map(|(_, e)| e)
        },
    );
    let mut producer = Client::connect(&victim_addr).unwrap();
    assert_eq!(produce(&mut producer, "after"), 1);

    let resp: FetchResponse = consumer.receive(ApiKey::Fetch, 12).unwrap();
    let p = &resp.responses[0].partitions[0];
    let epochs: Vec<i32> = BatchIter::new(p.records.as_deref().unwrap_or(&[]))
        .map(|(_, h)| h.partition_leader_epoch)
        .collect();
    assert!(
        epochs.iter().all(|e| *e <= epoch),
        "a fetch naming epoch {epoch} was answered with batches of epochs {epochs:?} (error {})",
        p.error_code
    );
    assert!(
        [0, 6, 74].contains(&p.error_code),
        "answered with error {}",
        p.error_code
    );
    // The later term's record is there for a fetch that names that term.
    let mut c = Client::connect(&victim_addr).unwrap();
    let resp: FetchResponse = c
        .call(
            ApiKey::Fetch,
            12,
            &fetch.clone().with_max_wait_ms(0).with_topics(vec![
                fetch_request::FetchTopic::default()
                    .with_topic(topic_name(TOPIC))
                    .with_partitions(vec![fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(later)
                        .with_fetch_offset(1)
                        .with_partition_max_bytes(1 << 20)]),
            ]),
        )
        .unwrap();
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let epochs: Vec<i32> = BatchIter::new(p.records.as_deref().unwrap_or(&[]))
        .map(|(_, h)| h.partition_leader_epoch)
        .collect();
    assert_eq!(epochs, vec![later], "the record written after the pause");
    cluster.shutdown().unwrap();
}

/// A node paused longer than a broker session (SIGSTOP, as a stalled
/// machine) does not fence its own broker when it resumes: its controller
/// was not listening either, and credits the stall to every session before
/// it checks them, so the partition keeps its leader and epoch. (Chaos seed
/// 212: a leader and active controller paused 2.8 s fenced every broker,
/// 57 records, and every partition it led went through a leaderless epoch.)
#[test]
fn a_paused_node_does_not_fence_its_broker_when_it_resumes() {
    const TOPIC: &str = "paused";
    let spec = ClusterSpec::combined(1)
        .with_override("broker.session.timeout.ms", "3000")
        .with_override("broker.heartbeat.interval.ms", "500");
    let mut cluster = Cluster::start(&common::strand_bin(), spec).expect("node starts");
    let id = cluster.broker_ids()[0];
    let addr = cluster.broker_addr(id).unwrap();
    assert_eq!(create_topic(&addr, TOPIC, 1), 0);
    let before = eventually("a leader", Duration::from_secs(10), || {
        leader(&addr, TOPIC).filter(|(l, _)| *l == id)
    });
    cluster.stop(id).unwrap();
    std::thread::sleep(Duration::from_millis(5_000));
    cluster.cont(id).unwrap();
    // Two sessions after the resume: a fencing would have happened by now.
    // The pause outlasted the node's write lease: until a heartbeat renews
    // it (at once on resuming), a write may be answered
    // NOT_LEADER_OR_FOLLOWER, which clients retry; nothing else is.
    let mut c = Client::connect(&addr).unwrap();
    for i in 0..12 {
        let (code, base) = eventually("a write after the pause", Duration::from_secs(5), || {
            let r =
                common::produce_values(&mut c, TOPIC, 0, -1, 5_000, &[format!("v{i}")]).unwrap();
            (i > 0 || r.0 != 6).then_some(r)
        });
        assert_eq!((code, base), (0, i), "write {i} after the pause");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(leader(&addr, TOPIC), Some(before), "leader and epoch kept");
    assert!(
        !std::fs::read_to_string(cluster.log_path(id))
            .unwrap()
            .contains("fencing brokers whose sessions expired"),
        "the node fenced a broker after its own pause"
    );
    cluster.shutdown().unwrap();
}

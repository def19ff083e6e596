//! Partition reassignment (KIP-455) on a 4-node cluster: a 3-replica
//! partition moved from brokers {1,2,3} to {2,3,4} keeps every record
//! acknowledged before and while it moves; the reassignment is listed
//! while in flight and not after; the new replica holds the whole log and
//! the removed one's copy is deleted; a cancelled move reverts; bad
//! targets are refused with Kafka's codes; a drained broker is
//! unregistered and leaves DescribeCluster.

mod common;

use common::{creatable_topic, create_topics, eventually, partition_view, reassign, Client};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::time::Duration;
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn cluster(n: usize) -> Cluster {
    Cluster::start(
        &common::strand_bin(),
        ClusterSpec::combined(n)
            .with_override("min.insync.replicas", "2")
            .with_override("broker.session.timeout.ms", "4000")
            .with_override("broker.heartbeat.interval.ms", "500")
            .with_override("auto.create.topics.enable", "false"),
    )
    .expect("the cluster starts")
}

/// Creates `topic` with one partition per assignment.
fn create_assigned(c: &mut Client, topic: &str, assignments: &[&[i32]]) {
    use create_topics_request::CreatableReplicaAssignment;
    let t = creatable_topic(topic, -1, -1, &[("min.insync.replicas", "2")]).with_assignments(
        assignments
            .iter()
            .enumerate()
            .map(|(i, r)| {
                CreatableReplicaAssignment::default()
                    .with_partition_index(i as i32)
                    .with_broker_ids(r.iter().map(|b| BrokerId(*b)).collect())
            })
            .collect(),
    );
    let resp = create_topics(c, vec![t]).expect("CreateTopics answers");
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0]);
}

/// A reassignment listed: (topic, partition, replicas, adding, removing).
type Ongoing = (String, i32, Vec<i32>, Vec<i32>, Vec<i32>);

/// ListPartitionReassignments of every partition.
fn list(c: &mut Client) -> Vec<Ongoing> {
    let resp: ListPartitionReassignmentsResponse = c
        .call(
            ApiKey::ListPartitionReassignments,
            0,
            &ListPartitionReassignmentsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(None),
        )
        .expect("ListPartitionReassignments answers");
    assert_eq!(resp.error_code, 0);
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    ids(&p.replicas),
                    ids(&p.adding_replicas),
                    ids(&p.removing_replicas),
                )
            })
        })
        .collect()
}

/// Produces `n` values `prefix-i` one batch each with acks=all, asserting
/// each is acknowledged.
/// Writes `prefix-0..n` one at a time (acks=all, not idempotent), each
/// retried until acknowledged; the values in order.
fn produce_all(cluster: &Cluster, topic: &str, prefix: &str, n: usize) -> Vec<String> {
    let mut sent = Vec::new();
    for i in 0..n {
        let v = format!("{prefix}-{i}");
        eventually(
            &format!("{v} acknowledged"),
            Duration::from_secs(30),
            || {
                let leader = leader_of(cluster, topic)?;
                let mut c = Client::connect(&cluster.broker_addr(leader)?).ok()?;
                let answer =
                    common::produce_values(&mut c, topic, 0, -1, 10_000, std::slice::from_ref(&v));
                match answer {
                    Ok((0, _)) => Some(()),
                    // Refused before it was written: a retry cannot
                    // duplicate it.
                    Ok((code, _)) if REFUSED_UNWRITTEN.contains(&code) => None,
                    _ => {
                        // Maybe written (NOT_ENOUGH_REPLICAS_AFTER_APPEND, a
                        // timeout, no answer): the retry may be a second
                        // copy, which Kafka allows a producer without
                        // idempotence.
                        MAYBE_WRITTEN.lock().unwrap().insert(v.clone());
                        None
                    }
                }
            },
        );
        sent.push(v);
    }
    sent
}

/// Produce errors of a write that was not appended (no such partition,
/// not enough replicas before the append). Not NOT_LEADER_OR_FOLLOWER: a
/// leader that resigns while an acks=all write waits answers it so, after
/// the write reached the other replicas (as Kafka's purgatory does).
const REFUSED_UNWRITTEN: [i16; 2] = [3, 19];

/// Values a failed attempt may have written before their retry.
static MAYBE_WRITTEN: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Whether `read` is `acked`, in order, each once, but for second copies
/// of values whose earlier attempt may have been written.
fn holds_every_acked_once(read: &[String], acked: &[String]) -> bool {
    let maybe = MAYBE_WRITTEN.lock().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut firsts = Vec::new();
    for v in read {
        if seen.insert(v.clone()) {
            firsts.push(v.clone());
        } else if !maybe.contains(v) {
            return false;
        }
    }
    firsts == acked
}

fn leader_of(cluster: &Cluster, topic: &str) -> Option<i32> {
    cluster.broker_ids().into_iter().find_map(|id| {
        let v = partition_view(&cluster.broker_addr(id)?, topic, 0, Duration::from_secs(2))?;
        (v.leader >= 0).then_some(v.leader)
    })
}

/// Every value of partition 0 read from `broker` (a follower's copy too:
/// a consumer fetch with no leader epoch), up to its high watermark.
fn read_all(cluster: &Cluster, broker: i32, topic: &str) -> Vec<String> {
    let mut c = Client::connect(&cluster.broker_addr(broker).unwrap()).unwrap();
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let f = common::fetch_values(&mut c, topic, 0, offset, 100).unwrap();
        assert_eq!(f.error_code, 0, "fetch from {broker}");
        for (o, v) in &f.records {
            if *o >= offset {
                out.push(String::from_utf8_lossy(v).into_owned());
            }
        }
        if f.next_offset == offset || f.next_offset >= f.high_watermark {
            return out;
        }
        offset = f.next_offset;
    }
}

fn partition_dir(cluster: &Cluster, broker: i32, topic: &str) -> std::path::PathBuf {
    cluster.data_dir(broker).join(format!("{topic}-0"))
}

#[test]
fn a_partition_moves_to_new_brokers_with_every_acknowledged_record() {
    let cluster = cluster(4);
    let addr = cluster.broker_addr(1).unwrap();
    let mut c = Client::connect(&addr).unwrap();
    create_assigned(&mut c, "moved", &[&[1, 2, 3]]);
    eventually("a full ISR", Duration::from_secs(30), || {
        partition_view(&addr, "moved", 0, Duration::from_secs(2)).filter(|v| v.isr.len() == 3)
    });
    let mut acked = produce_all(&cluster, "moved", "before", 300);

    // Bad targets, refused per partition with Kafka's codes.
    let refused = reassign(
        &mut c,
        "moved",
        &[(0, Some(&[2, 2, 4])), (1, Some(&[2, 3, 4]))],
    );
    assert_eq!(refused[0].1, 39, "a duplicate: INVALID_REPLICA_ASSIGNMENT");
    assert_eq!(
        refused[1].1, 3,
        "no such partition: UNKNOWN_TOPIC_OR_PARTITION"
    );
    let refused = reassign(&mut c, "moved", &[(0, Some(&[2, 3, 9]))]);
    assert_eq!(refused[0].1, 39, "an unknown broker: {refused:?}");
    let refused = reassign(&mut c, "moved", &[(0, Some(&[]))]);
    assert_eq!(refused[0].1, 39, "an empty target: {refused:?}");
    let refused = reassign(&mut c, "moved", &[(0, None)]);
    assert_eq!(
        (refused[0].1, refused[0].2.as_deref()),
        (85, None),
        "nothing to cancel: NO_REASSIGNMENT_IN_PROGRESS, no message (as Kafka)"
    );
    assert!(list(&mut c).is_empty());

    // The move, with writes going on while the new replica catches up.
    let done = reassign(&mut c, "moved", &[(0, Some(&[2, 3, 4]))]);
    assert_eq!(done, vec![(0, 0, None)]);
    let writer = {
        let topic = "moved";
        acked.extend(produce_all(&cluster, topic, "during", 300));
        eventually("the move completes", Duration::from_secs(60), || {
            let v = partition_view(&addr, topic, 0, Duration::from_secs(2))?;
            (v.replicas == vec![2, 3, 4] && v.isr == vec![2, 3, 4] && v.leader >= 0).then_some(v)
        })
    };
    assert_ne!(writer.leader, 1, "the removed replica leads no more");
    assert!(list(&mut c).is_empty(), "nothing listed once complete");
    acked.extend(produce_all(&cluster, "moved", "after", 100));

    // Every replica of the target holds every acknowledged record once, in
    // order; the removed broker's copy is deleted.
    for b in [2, 3, 4] {
        let mut last = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !holds_every_acked_once(&last, &acked) {
            assert!(
                std::time::Instant::now() < deadline,
                "broker {b} does not hold every acknowledged record once: it has {} values, {} acknowledged; first difference at {:?}: {:?} vs {:?}",
                last.len(),
                acked.len(),
                last.iter().zip(&acked).position(|(x, y)| x != y),
                last.iter().zip(&acked).find(|(x, y)| x != y),
                last.get(acked.len()..),
            );
            std::thread::sleep(Duration::from_millis(100));
            last = read_all(&cluster, b, "moved");
        }
    }
    eventually("broker 1's copy deleted", Duration::from_secs(30), || {
        (!partition_dir(&cluster, 1, "moved").exists()).then_some(())
    });
    assert!(partition_dir(&cluster, 4, "moved").exists());
    // The active controller logged the move's progress.
    let logs: String = cluster
        .node_ids()
        .into_iter()
        .filter_map(|id| std::fs::read_to_string(cluster.log_path(id)).ok())
        .collect();
    for line in [
        "reassignment of moved-0 started: adding [4], removing [1]",
        "reassignment of moved-0 ended: replicas [2, 3, 4], ISR [2, 3, 4]",
    ] {
        assert!(logs.contains(line), "no line {line:?} in the nodes' logs");
    }
}

/// A move to a broker that is down stays in flight (its replica cannot
/// catch up) and is listed; cancelling it reverts the partition to its
/// replicas and leaves nothing listed.
#[test]
fn a_stuck_move_is_listed_and_cancelled() {
    let mut cluster = cluster(4);
    let addr = cluster.broker_addr(1).unwrap();
    let mut c = Client::connect(&addr).unwrap();
    create_assigned(&mut c, "stuck", &[&[1, 2, 3]]);
    eventually("a full ISR", Duration::from_secs(30), || {
        partition_view(&addr, "stuck", 0, Duration::from_secs(2)).filter(|v| v.isr.len() == 3)
    });
    let acked = produce_all(&cluster, "stuck", "v", 50);
    cluster.kill9(4).expect("kill broker 4");
    assert_eq!(
        reassign(&mut c, "stuck", &[(0, Some(&[4, 2, 3]))]),
        vec![(0, 0, None)]
    );
    let listed = list(&mut c);
    assert_eq!(
        listed,
        vec![("stuck".to_string(), 0, vec![4, 2, 3, 1], vec![4], vec![1])]
    );
    let v = eventually("the union assigned", Duration::from_secs(10), || {
        partition_view(&addr, "stuck", 0, Duration::from_secs(2))
            .filter(|v| v.replicas == vec![4, 2, 3, 1])
    });
    assert_eq!(v.isr, vec![1, 2, 3], "4 is not in sync");
    // A second reassignment of the same partition replaces the first.
    assert_eq!(
        reassign(&mut c, "stuck", &[(0, Some(&[3, 2, 4]))]),
        vec![(0, 0, None)]
    );
    assert_eq!(
        list(&mut c),
        vec![("stuck".to_string(), 0, vec![3, 2, 4, 1], vec![4], vec![1])],
        "a new target that adds nothing new keeps the lists in flight (as Kafka)"
    );
    assert_eq!(reassign(&mut c, "stuck", &[(0, None)]), vec![(0, 0, None)]);
    assert!(list(&mut c).is_empty());
    let v = eventually("the original replicas", Duration::from_secs(10), || {
        partition_view(&addr, "stuck", 0, Duration::from_secs(2)).filter(|v| v.replicas.len() == 3)
    });
    let mut replicas = v.replicas.clone();
    replicas.sort_unstable();
    assert_eq!(replicas, vec![1, 2, 3]);
    assert_eq!(v.isr, vec![1, 2, 3]);
    let read = read_all(&cluster, v.leader, "stuck");
    assert!(holds_every_acked_once(&read, &acked), "{read:?}");
}

/// Draining and retiring a broker: every partition moved off broker 3,
/// which is then stopped (listed fenced) and unregistered. It leaves
/// DescribeCluster on every broker, and no partition names it.
#[test]
fn a_drained_broker_is_retired() {
    let mut cluster = cluster(3);
    let addr = cluster.broker_addr(1).unwrap();
    let mut c = Client::connect(&addr).unwrap();
    create_assigned(&mut c, "drain", &[&[1, 3], &[3, 2], &[2, 1]]);
    let targets: Vec<(i32, Option<&[i32]>)> =
        vec![(0, Some(&[1, 2])), (1, Some(&[2, 1])), (2, Some(&[2, 1]))];
    let answers = reassign(&mut c, "drain", &targets);
    assert!(answers.iter().all(|a| a.1 == 0), "{answers:?}");
    for p in 0..3 {
        eventually(
            &format!("drain-{p} off broker 3"),
            Duration::from_secs(60),
            || {
                partition_view(&addr, "drain", p, Duration::from_secs(2))
                    .filter(|v| !v.replicas.contains(&3) && v.isr.len() == 2)
            },
        );
    }
    let unregister = |c: &mut Client, id: i32| -> i16 {
        let r: UnregisterBrokerResponse = c
            .call(
                ApiKey::UnregisterBroker,
                0,
                &UnregisterBrokerRequest::default().with_broker_id(BrokerId(id)),
            )
            .expect("UnregisterBroker answers");
        r.error_code
    };
    // DescribeCluster v2 with the fenced brokers (KIP-1073): a stopped
    // broker is listed fenced until it is unregistered.
    let brokers = |c: &mut Client| -> Vec<(i32, bool)> {
        let r: DescribeClusterResponse = c
            .call(
                ApiKey::DescribeCluster,
                2,
                &DescribeClusterRequest::default().with_include_fenced_brokers(true),
            )
            .expect("DescribeCluster answers");
        let mut ids: Vec<(i32, bool)> = r
            .brokers
            .iter()
            .map(|b| (b.broker_id.0, b.is_fenced))
            .collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(unregister(&mut c, 9), 102, "BROKER_ID_NOT_REGISTERED");
    cluster.terminate(3).expect("broker 3 stops");
    eventually("broker 3 listed fenced", Duration::from_secs(30), || {
        (brokers(&mut c) == vec![(1, false), (2, false), (3, true)]).then_some(())
    });
    // Kafka's own tool, as an operator retires it.
    let dist = strand_compat_tests::cluster::KafkaDist::locate()
        .expect("the reference Kafka (compat-tests/scripts/fetch-kafka.sh)");
    let out = std::process::Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-tests/scripts/kafka-tool.sh"),
    )
    .args(["kafka-cluster", "unregister", "--bootstrap-server"])
    .arg(cluster.broker_addr(1).unwrap())
    .args(["--id", "3"])
    .env("STRAND_KAFKA_DIR", &dist.dir)
    .output()
    .expect("kafka-cluster runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("Broker 3 is no longer registered."),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually(
        "DescribeCluster without broker 3",
        Duration::from_secs(10),
        || (brokers(&mut c) == vec![(1, false), (2, false)]).then_some(()),
    );
    let addr2 = cluster.broker_addr(2).unwrap();
    let mut c2 = Client::connect(&addr2).unwrap();
    eventually("broker 2 agrees", Duration::from_secs(10), || {
        (brokers(&mut c2) == vec![(1, false), (2, false)]).then_some(())
    });
    assert_eq!(unregister(&mut c, 3), 102, "already gone");
}

/// The bytes of `topic`-`partition`'s segment files in `broker`'s data
/// directory (what that replica has copied).
fn log_bytes(cluster: &Cluster, broker: i32, topic: &str, partition: i32) -> u64 {
    log_bytes_in(
        &cluster
            .data_dir(broker)
            .join(format!("{topic}-{partition}")),
    )
}

/// The bytes of the segment files in a partition directory.
fn log_bytes_in(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The Python interpreter with kafka-python: `STRAND_PYTHON` (scripts/test.sh
/// sets it to its virtualenv) or `python3`.
fn python() -> String {
    let python = std::env::var("STRAND_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let probe = std::process::Command::new(&python)
        .args(["-c", "import kafka.admin"])
        .output()
        .expect("python runs");
    assert!(
        probe.status.success(),
        "{python} cannot import kafka-python (scripts/test.sh installs it; or set STRAND_PYTHON): {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    python
}

/// The acceptance run of issue 35: with Kafka's idempotent acks=all
/// verifiable producer and a read_committed verifiable consumer running,
/// partition 0 of a 3-replica topic moves from brokers {1,2,3} to {2,3,4}
/// with `kafka-reassign-partitions` (execute with a throttle, list,
/// verify), and partition 1 the same way with kafka-python's admin client.
/// The throttle holds the copy's rate within 20% of its setting; verify
/// clears the throttles; the old replicas' copies are deleted; every
/// acknowledged record is consumed once and nothing else is.
#[test]
fn reassignment_under_load_with_kafkas_tool_and_kafka_python() {
    use common::tool::Tool;
    use strand_compat_tests::cluster::KafkaDist;
    const THROTTLE: u64 = 4_000_000;
    const PRELOAD_BATCHES: usize = 40;
    let dist =
        KafkaDist::locate().expect("the reference Kafka (compat-tests/scripts/fetch-kafka.sh)");
    let python = python();
    let cluster = Cluster::start(
        &common::strand_bin(),
        ClusterSpec::combined(4)
            // The throttle's rate over two 1 s windows: a move of a few
            // seconds is held to it (Kafka's default, 11 windows, lets a
            // move start with 10 s worth of the rate at once).
            .with_override("replication.quota.window.num", "2")
            .with_override("min.insync.replicas", "2")
            .with_override("offsets.topic.replication.factor", "3")
            .with_override("group.initial.rebalance.delay.ms", "0")
            .with_override("broker.session.timeout.ms", "4000")
            .with_override("broker.heartbeat.interval.ms", "500")
            .with_override("auto.create.topics.enable", "false"),
    )
    .expect("a 4-node cluster");
    let addr = cluster.broker_addr(1).unwrap();
    let mut c = Client::connect(&addr).unwrap();
    create_assigned(&mut c, "moved", &[&[1, 2, 3], &[1, 2, 3]]);
    for p in 0..2 {
        eventually("a full ISR", Duration::from_secs(30), || {
            partition_view(&addr, "moved", p, Duration::from_secs(2)).filter(|v| v.isr.len() == 3)
        });
    }
    // ~36 MB in partition 0 so the throttled copy takes seconds.
    let value = "x".repeat(9_000);
    for b in 0..PRELOAD_BATCHES {
        let values: Vec<String> = (0..100)
            .map(|i| format!("preload-{b}-{i}-{value}"))
            .collect();
        let leader = leader_of(&cluster, "moved").unwrap();
        let mut lc = Client::connect(&cluster.broker_addr(leader).unwrap()).unwrap();
        let (code, _) = common::produce_values(&mut lc, "moved", 0, -1, 30_000, &values).unwrap();
        assert_eq!(code, 0, "preload batch {b}");
    }
    let preloaded = log_bytes(&cluster, 1, "moved", 0);

    let dir = tempfile::tempdir().unwrap();
    let bootstrap = cluster.bootstrap();
    let mut producer = Tool::verifiable_producer(&dist, &bootstrap, "moved", dir.path());
    let consumer =
        Tool::verifiable_consumer(&dist, &bootstrap, "moved", "moved-group", true, dir.path());
    let acked_at_least = |n: usize, what: &str| {
        eventually(what, Duration::from_secs(120), || {
            assert_eq!(
                producer.count("shutdown_complete"),
                0,
                "{}",
                producer.tail()
            );
            (producer.count("producer_send_success") >= n).then_some(())
        })
    };
    acked_at_least(500, "500 acknowledged writes before the moves");

    // Partition 0 with Kafka's tool, throttled.
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &plan,
        r#"{"version":1,"partitions":[{"topic":"moved","partition":0,"replicas":[2,3,4]}]}"#,
    )
    .unwrap();
    let plan_arg = plan.display().to_string();
    let throttle = THROTTLE.to_string();
    // Broker 4's copy of moved-0 as it grows: (when, bytes), from its
    // first byte until the move completes.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let dir = cluster.data_dir(4);
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut samples: Vec<(std::time::Instant, u64)> = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let bytes = log_bytes_in(&dir.join("moved-0"));
                if bytes > 0 {
                    samples.push((std::time::Instant::now(), bytes));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            samples
        })
    };
    let out = common::kafka_tool(
        &dist.dir,
        "kafka-reassign-partitions",
        &bootstrap,
        &[
            "--reassignment-json-file",
            &plan_arg,
            "--execute",
            "--throttle",
            &throttle,
        ],
    );
    assert!(
        out.contains("Successfully started partition reassignment for moved-0"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "The inter-broker throttle limit was set to {THROTTLE} B/s"
        )),
        "{out}"
    );
    let listed = common::kafka_tool(
        &dist.dir,
        "kafka-reassign-partitions",
        &bootstrap,
        &["--list"],
    );
    assert!(
        listed.contains("moved-0: replicas: 2,3,4,1. adding: 4. removing: 1.")
            || !listed.contains("moved-0"),
        "{listed}"
    );
    eventually("moved-0 on {2,3,4}", Duration::from_secs(120), || {
        let v = partition_view(&addr, "moved", 0, Duration::from_secs(2))?;
        (v.replicas == vec![2, 3, 4] && v.isr == vec![2, 3, 4]).then_some(())
    });
    stop.store(true, std::sync::atomic::Ordering::Release);
    let samples = sampler.join().expect("the sampler");
    let copied = log_bytes(&cluster, 4, "moved", 0);
    // The copy's rate from its first bytes until it had the preloaded
    // log (the producer's writes after that flow unthrottled, in sync).
    let (first, last) = (
        samples.first().expect("broker 4 copied something"),
        samples
            .iter()
            .find(|(_, b)| *b >= preloaded)
            .expect("broker 4 copied the preloaded log"),
    );
    let secs = (last.0 - first.0).as_secs_f64();
    let rate = (last.1 - first.1) as f64 / secs;
    println!(
        "moved-0: {preloaded} bytes preloaded, {copied} copied to broker 4, the log in {secs:.1} s: {rate:.0} B/s under a {THROTTLE} B/s throttle"
    );
    assert!(copied >= preloaded, "broker 4 holds the whole log");
    assert!(
        (rate - THROTTLE as f64).abs() <= 0.2 * THROTTLE as f64,
        "the copy ran at {rate:.0} B/s, not within 20% of {THROTTLE}"
    );
    let verify = common::kafka_tool(
        &dist.dir,
        "kafka-reassign-partitions",
        &bootstrap,
        &["--reassignment-json-file", &plan_arg, "--verify"],
    );
    assert!(
        verify.contains("Reassignment of partition moved-0 is completed."),
        "{verify}"
    );
    assert!(
        verify.contains("Clearing broker-level throttles on brokers"),
        "{verify}"
    );
    assert!(
        verify.contains("Clearing topic-level throttles on topic moved"),
        "{verify}"
    );

    // Partition 1 with kafka-python's admin client.
    let out = std::process::Command::new(&python)
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("compat-tests/clients/reassign.py"),
        )
        .args([&bootstrap, "moved", "1", "2,3,4"])
        .output()
        .expect("reassign.py runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        lines.first().map(|l| l["error"].clone()),
        Some(serde_json::Value::Null),
        "{text}"
    );
    assert_eq!(
        lines.last().map(|l| l["done"].clone()),
        Some(serde_json::Value::Bool(true)),
        "{text}"
    );
    eventually("moved-1 on {2,3,4}", Duration::from_secs(60), || {
        partition_view(&addr, "moved", 1, Duration::from_secs(2))
            .filter(|v| v.replicas == vec![2, 3, 4] && v.isr == vec![2, 3, 4])
    });

    let more = producer.count("producer_send_success") + 500;
    acked_at_least(more, "500 more acknowledged writes after the moves");
    // The preloaded records are the test's own; the rest must be the
    // producer's, each acknowledged one consumed once.
    let delivery =
        common::tool::finish_delivery(&mut producer, &consumer, Duration::from_secs(120), &|v| {
            v.starts_with("preload-")
        });
    assert_eq!(
        delivery.others,
        PRELOAD_BATCHES * 100,
        "every preloaded record consumed once"
    );

    // The old replica's copies are gone; the throttles are cleared.
    for p in 0..2 {
        eventually(
            &format!("broker 1's moved-{p} deleted"),
            Duration::from_secs(30),
            || (!cluster.data_dir(1).join(format!("moved-{p}")).exists()).then_some(()),
        );
    }
    let describe = |entity: &str, name: &str| {
        common::kafka_tool(
            &dist.dir,
            "kafka-configs",
            &bootstrap,
            &["--describe", "--entity-type", entity, "--entity-name", name],
        )
    };
    let configs = describe("topics", "moved");
    assert!(!configs.contains("throttled.replicas"), "{configs}");
    let configs = describe("brokers", "2");
    assert!(!configs.contains("throttled.rate"), "{configs}");
}

/// Every partition of `topic` as the broker at `addr` describes it:
/// (leader, replicas, ISR size), by partition.
fn partitions_of(addr: &str, topic: &str) -> Option<Vec<(i32, Vec<i32>, usize)>> {
    let mut c = Client::connect(addr).ok()?;
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
        )
        .with_name(Some(TopicName(s(topic))))]));
    let md: MetadataResponse = c.call(ApiKey::Metadata, 9, &req).ok()?;
    let t = md.topics.first().filter(|t| t.error_code == 0)?;
    let mut parts: Vec<_> = t
        .partitions
        .iter()
        .map(|p| {
            (
                p.partition_index,
                (
                    p.leader_id.0,
                    p.replica_nodes.iter().map(|b| b.0).collect::<Vec<_>>(),
                    p.isr_nodes.len(),
                ),
            )
        })
        .collect();
    parts.sort_by_key(|(i, _)| *i);
    Some(parts.into_iter().map(|(_, v)| v).collect())
}

/// Leader balance (`auto.leader.rebalance.enable`): after a rolling
/// restart of 3 brokers leaves leaderships wherever they fell, within one
/// `leader.imbalance.check.interval.seconds` every partition is led by
/// its preferred (first) replica, so each broker leads its share.
#[test]
fn leaders_return_to_preferred_replicas_after_a_rolling_restart() {
    const PARTITIONS: usize = 30;
    const INTERVAL_S: u64 = 3;
    let mut cluster = Cluster::start(
        &common::strand_bin(),
        ClusterSpec::combined(3)
            .with_override(
                "leader.imbalance.check.interval.seconds",
                INTERVAL_S.to_string(),
            )
            .with_override("broker.session.timeout.ms", "4000")
            .with_override("broker.heartbeat.interval.ms", "500")
            .with_override("auto.create.topics.enable", "false"),
    )
    .expect("a 3-node cluster");
    let mut c = Client::connect(&cluster.broker_addr(1).unwrap()).unwrap();
    common::create_topic_with(&mut c, "balanced", PARTITIONS as i32, 3, &[]).unwrap();
    let in_sync = |cluster: &Cluster| {
        cluster.broker_ids().into_iter().find_map(|id| {
            let parts = partitions_of(&cluster.broker_addr(id)?, "balanced")?;
            (parts.len() == PARTITIONS && parts.iter().all(|(l, _, isr)| *l >= 0 && *isr == 3))
                .then_some(parts)
        })
    };
    eventually("every partition in sync", Duration::from_secs(60), || {
        in_sync(&cluster)
    });
    for id in cluster.broker_ids() {
        cluster.terminate(id).expect("stops");
        cluster.restart(id).expect("restarts");
        eventually(
            &format!("in sync after restarting {id}"),
            Duration::from_secs(60),
            || in_sync(&cluster),
        );
    }
    let after_restarts = in_sync(&cluster).unwrap();
    let off_preferred = after_restarts.iter().filter(|(l, r, _)| r[0] != *l).count();
    println!("after the rolling restart, {off_preferred} of {PARTITIONS} partitions led off their preferred replica");
    assert!(
        off_preferred > 0,
        "the restarts moved leaderships (else this proves nothing)"
    );
    // Within one check interval (and the metadata's way to the brokers).
    let balanced = eventually(
        "every partition led by its preferred replica",
        Duration::from_secs(INTERVAL_S + 5),
        || in_sync(&cluster).filter(|parts| parts.iter().all(|(l, r, _)| r[0] == *l)),
    );
    let mut led: std::collections::BTreeMap<i32, usize> = Default::default();
    for (l, _, _) in &balanced {
        *led.entry(*l).or_default() += 1;
    }
    assert_eq!(
        led.into_values().collect::<Vec<_>>(),
        vec![10, 10, 10],
        "each leads its share"
    );
}

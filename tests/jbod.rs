//! Several log directories per broker (JBOD, KIP-858) on a 3-node
//! cluster whose nodes each have two: new partitions are spread across
//! them (the one with the fewest first); DescribeLogDirs reports each with
//! its partitions; a directory whose fsyncs fail (a fault-injecting file
//! layer, `compat-tests/faultfs`) goes offline alone: the broker keeps
//! running and leading the partitions of its other directory, the
//! leaderships and ISR places of the failed one's move to the other
//! replicas, no acknowledged record is lost, and once the fault is gone
//! and the broker restarts, its replicas there rejoin their ISRs. Moves
//! between directories: under load, throttled, interrupted by a restart,
//! and named before the replica exists.

mod common;

use common::Client;
use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
use kafka_protocol::messages::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use strand_compat_tests::cluster::{Cluster, ClusterSpec, NodeState};

const TOPIC: &str = "jbod";
const PARTITIONS: i32 = 8;
const KAFKA_STORAGE_ERROR: i16 = 56;

fn addr(cluster: &Cluster, id: i32) -> String {
    cluster.broker_addr(id).expect("broker address")
}

/// One log directory as DescribeLogDirs reports it: (error code, the
/// partitions of `TOPIC` in it).
#[derive(Debug)]
struct DirView {
    error_code: i16,
    partitions: Vec<i32>,
    total_bytes: i64,
}

/// DescribeLogDirs (v4, every topic) of the broker at `addr`.
fn describe_all(addr: &str) -> DescribeLogDirsResponse {
    let mut c = Client::connect(addr).unwrap();
    let resp: DescribeLogDirsResponse = c
        .call(
            ApiKey::DescribeLogDirs,
            4,
            &DescribeLogDirsRequest::default().with_topics(None),
        )
        .expect("DescribeLogDirs answers");
    assert_eq!(resp.error_code, 0);
    resp
}

/// [`describe_all`]: each directory by its path.
fn describe_log_dirs(addr: &str) -> BTreeMap<PathBuf, DirView> {
    describe_all(addr)
        .results
        .iter()
        .map(|r| {
            let mut partitions: Vec<i32> = r
                .topics
                .iter()
                .filter(|t| t.name.0.as_str() == TOPIC)
                .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
                .collect();
            partitions.sort_unstable();
            (
                PathBuf::from(r.log_dir.as_str()),
                DirView {
                    error_code: r.error_code,
                    partitions,
                    total_bytes: r.total_bytes,
                },
            )
        })
        .collect()
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap()
}

/// The partition's leader and ISR as some running broker sees them.
fn view(cluster: &mut Cluster, partition: i32) -> Option<common::PartitionView> {
    for id in cluster.broker_ids() {
        if !matches!(cluster.state(id), Ok(NodeState::Running)) {
            continue;
        }
        if let Some(v) =
            common::partition_view(&addr(cluster, id), TOPIC, partition, Duration::from_secs(2))
        {
            if v.leader >= 0 {
                return Some(v);
            }
        }
    }
    None
}

/// One acks=all write to whoever leads `partition` now: the leader that
/// acknowledged it, or the error code (-1: no answer).
fn write_once(cluster: &mut Cluster, partition: i32, value: &str) -> Result<i32, i16> {
    let leader = view(cluster, partition).ok_or(-1i16)?.leader;
    let mut c = Client::connect_timeout(&addr(cluster, leader), Duration::from_secs(10))
        .map_err(|_| -1i16)?;
    match common::produce_values(&mut c, TOPIC, partition, -1, 10_000, &[value.to_string()]) {
        Ok((0, _)) => Ok(leader),
        Ok((code, _)) => Err(code),
        Err(_) => Err(-1),
    }
}

/// Writes `value` until acknowledged (through leadership moves); the
/// leader that acknowledged it.
fn write_acked(cluster: &mut Cluster, partition: i32, value: &str) -> i32 {
    common::eventually(
        &format!("'{value}' acknowledged"),
        Duration::from_secs(60),
        || write_once(cluster, partition, value).ok(),
    )
}

/// Every record value of `partition` from the log start to its leader's HW.
fn read_all(cluster: &mut Cluster, partition: i32) -> Vec<String> {
    let leader = view(cluster, partition).expect("a leader").leader;
    common::read_values(&addr(cluster, leader), TOPIC, partition)
}

/// Three combined nodes with two log directories each.
fn spec() -> ClusterSpec {
    ClusterSpec::combined(3)
        .with_extra_log_dirs(1)
        .with_http_listener()
        .with_override("broker.session.timeout.ms", "6000")
        .with_override("broker.heartbeat.interval.ms", "500")
        .with_override("auto.create.topics.enable", "false")
}

#[test]
fn a_failed_log_directory_goes_offline_alone_and_nothing_acknowledged_is_lost() {
    let control_dir = tempfile::tempdir().unwrap();
    let control = control_dir.path().join("faults");
    std::fs::write(&control, "").unwrap();
    let mut cluster = Cluster::start(
        &common::strand_bin(),
        spec()
            .with_env(
                "LD_PRELOAD",
                common::faultfs_library().display().to_string(),
            )
            .with_env("STRAND_FAULTFS_CONTROL", control.display().to_string()),
    )
    .expect("the cluster starts");

    // Every partition on all three brokers, led by broker 1; each append
    // synced (flush.messages=1), so a failing fsync shows at once.
    let mut c = Client::connect(&addr(&cluster, 2)).unwrap();
    let t = common::creatable_topic(
        TOPIC,
        -1,
        -1,
        &[("min.insync.replicas", "2"), ("flush.messages", "1")],
    )
    .with_assignments(
        (0..PARTITIONS)
            .map(|i| {
                CreatableReplicaAssignment::default()
                    .with_partition_index(i)
                    .with_broker_ids(vec![BrokerId(1), BrokerId(2), BrokerId(3)])
            })
            .collect(),
    );
    let resp = common::create_topics(&mut c, vec![t]).unwrap();
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0]);
    for p in 0..PARTITIONS {
        common::eventually("every replica in sync", Duration::from_secs(30), || {
            let v = view(&mut cluster, p)?;
            (v.leader == 1 && v.isr.len() == 3).then_some(())
        });
    }

    // Spread: each broker's two directories hold half the partitions each.
    let mut first_dir = Vec::new();
    let mut second_dir = Vec::new();
    for id in cluster.broker_ids() {
        // The image names the replicas before each broker opens them.
        let dirs = common::eventually(
            &format!("broker {id} holds every partition"),
            Duration::from_secs(30),
            || {
                let dirs = describe_log_dirs(&addr(&cluster, id));
                let held: usize = dirs.values().map(|d| d.partitions.len()).sum();
                (held == PARTITIONS as usize).then_some(dirs)
            },
        );
        let paths = cluster.log_dirs(id);
        assert_eq!(
            dirs.keys().cloned().collect::<Vec<_>>(),
            {
                let mut want: Vec<PathBuf> = paths.iter().map(|p| canonical(p)).collect();
                want.sort();
                want
            },
            "broker {id} reports each of its log directories"
        );
        let (a, b) = (&dirs[&canonical(&paths[0])], &dirs[&canonical(&paths[1])]);
        assert!(a.error_code == 0 && b.error_code == 0 && a.total_bytes > 0);
        assert_eq!(
            (a.partitions.len(), b.partitions.len()),
            (4, 4),
            "broker {id}: {dirs:?}"
        );
        if id == 1 {
            first_dir = a.partitions.clone();
            second_dir = b.partitions.clone();
        }
    }

    let mut acked: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for p in 0..PARTITIONS {
        for i in 0..10 {
            let v = format!("before-{p}-{i}");
            write_acked(&mut cluster, p, &v);
            acked.entry(p).or_default().push(v);
        }
    }

    // Broker 1's second directory fails its fsyncs from here on.
    let failing = canonical(&cluster.log_dirs(1)[1]);
    std::fs::write(&control, format!("fsync {}/\n", failing.display())).unwrap();
    let armed = Instant::now();
    for i in 0..20 {
        for p in 0..PARTITIONS {
            let v = format!("after-{p}-{i}");
            let by = write_acked(&mut cluster, p, &v);
            acked.entry(p).or_default().push(v);
            if first_dir.contains(&p) {
                // Its directory is healthy: broker 1 serves it throughout.
                assert_eq!(by, 1, "partition {p} in the healthy directory moved");
            }
        }
    }
    eprintln!("writes after the fault done in {:?}", armed.elapsed());

    // Broker 1 runs on, leading what its healthy directory holds; the
    // failed directory's partitions are led elsewhere, without it in sync.
    assert!(
        matches!(cluster.state(1), Ok(NodeState::Running)),
        "{}",
        cluster.log_tail(1)
    );
    for p in 0..PARTITIONS {
        let v = view(&mut cluster, p).unwrap();
        if first_dir.contains(&p) {
            assert_eq!(
                (v.leader, v.isr.clone()),
                (1, vec![1, 2, 3]),
                "partition {p}"
            );
        } else {
            assert!(v.leader != 1 && !v.isr.contains(&1), "partition {p}: {v:?}");
        }
    }
    let dirs = describe_log_dirs(&addr(&cluster, 1));
    assert_eq!(dirs[&failing].error_code, KAFKA_STORAGE_ERROR, "{dirs:?}");
    let healthy = &dirs[&canonical(&cluster.log_dirs(1)[0])];
    assert_eq!((healthy.error_code, &healthy.partitions), (0, &first_dir));
    let log = String::from_utf8_lossy(&std::fs::read(cluster.log_path(1)).unwrap()).into_owned();
    assert!(!log.contains("panicked"), "{}", cluster.log_tail(1));
    // A load balancer takes broker 1 out (a directory is offline), not the others.
    let health: Vec<String> = (1..=3).map(|id| cluster.http_addr(id).unwrap()).collect();
    let ready = |id: i32| common::http_get(&health[id as usize - 1], "/health/ready");
    let (code, body) = ready(1).expect("broker 1's health listener answers");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("\"log_dirs_online\":false"), "{body}");
    assert_eq!(ready(2).map(|(c, _)| c), Some(200));

    // Nothing acknowledged is lost, nothing is duplicated.
    for (p, values) in &acked {
        assert_eq!(&read_all(&mut cluster, *p), values, "partition {p}");
    }

    // The fault gone and broker 1 restarted: its replicas in the second
    // directory recover and rejoin every ISR.
    std::fs::write(&control, "").unwrap();
    cluster.restart(1).expect("broker 1 restarts");
    for p in second_dir {
        common::eventually(
            &format!("broker 1 back in the ISR of partition {p}"),
            Duration::from_secs(60),
            || (view(&mut cluster, p)?.isr.len() == 3).then_some(()),
        );
    }
    let dirs = describe_log_dirs(&addr(&cluster, 1));
    assert!(dirs.values().all(|d| d.error_code == 0), "{dirs:?}");
    assert_eq!(ready(1).map(|(c, _)| c), Some(200));
    for (p, values) in &acked {
        assert_eq!(&read_all(&mut cluster, *p), values, "partition {p}");
    }
}

/// Which of `dirs` holds `topic`-0 on the broker at `addr`, once it does.
fn home_dir(addr: &str, dirs: &[PathBuf], topic: &str) -> usize {
    common::eventually(
        "the broker holds the replica",
        Duration::from_secs(30),
        || replica_dirs(addr, dirs, topic).0,
    )
}

/// Nothing of `topic`-0 is left in `dir` (a move's old directory).
fn assert_moved_out(dir: &Path, topic: &str) {
    let name = format!("{topic}-0");
    let leftovers: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&name))
        .collect();
    assert!(
        leftovers.is_empty(),
        "left in the old directory: {leftovers:?}"
    );
}

/// AlterReplicaLogDirs (v2) of `topic`-0 on the broker at `addr` to `path`:
/// the partition's error code.
fn alter_replica_log_dir(addr: &str, path: &Path, topic: &str) -> i16 {
    alter_replica_log_dir_of(addr, path, topic, 0)
}

/// [`alter_replica_log_dir`] of `topic`-`partition`.
fn alter_replica_log_dir_of(addr: &str, path: &Path, topic: &str, partition: i32) -> i16 {
    use alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
    let s = |v: &str| kafka_protocol::protocol::StrBytes::from_string(v.to_string());
    let mut c = Client::connect(addr).unwrap();
    let r: AlterReplicaLogDirsResponse = c
        .call(
            ApiKey::AlterReplicaLogDirs,
            2,
            &AlterReplicaLogDirsRequest::default().with_dirs(vec![AlterReplicaLogDir::default()
                .with_path(s(&path.display().to_string()))
                .with_topics(vec![AlterReplicaLogDirTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![partition])])]),
        )
        .expect("AlterReplicaLogDirs answers");
    r.results[0].partitions[0].error_code
}

/// Which of `dirs` (by index) holds `topic`-0 as a current replica, and
/// whether any holds a future one, from DescribeLogDirs.
fn replica_dirs(addr: &str, dirs: &[PathBuf], topic: &str) -> (Option<usize>, bool) {
    let (current, future) = replica_dirs_of(addr, dirs, topic, 0);
    (current, future.is_some())
}

/// [`replica_dirs`] of `topic`-`partition`, with the future replica's size.
fn replica_dirs_of(
    addr: &str,
    dirs: &[PathBuf],
    topic: &str,
    partition: i32,
) -> (Option<usize>, Option<i64>) {
    let resp = describe_all(addr);
    let mut current = None;
    let mut future = None;
    for r in &resp.results {
        let path = canonical(Path::new(r.log_dir.as_str()));
        for t in r.topics.iter().filter(|t| t.name.0.as_str() == topic) {
            for p in t
                .partitions
                .iter()
                .filter(|p| p.partition_index == partition)
            {
                if p.is_future_key {
                    future = Some(p.partition_size);
                } else {
                    current = dirs.iter().position(|d| canonical(d) == path);
                }
            }
        }
    }
    (current, future)
}

#[test]
fn a_replica_moved_between_directories_under_load_reads_back_whole() {
    const MOVING: &str = "moving";
    let mut cluster = Cluster::start(&common::strand_bin(), spec()).expect("the cluster starts");
    let leader = addr(&cluster, 1);
    let mut c = Client::connect(&leader).unwrap();
    let t = common::creatable_topic(MOVING, -1, -1, &[("min.insync.replicas", "2")])
        .with_assignments(vec![CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2), BrokerId(3)])]);
    let resp = common::create_topics(&mut c, vec![t]).unwrap();
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0]);
    let dirs = cluster.log_dirs(1);
    let from = home_dir(&leader, &dirs, MOVING);
    let to = 1 - from;

    // An acks=all writer on broker 1, the leader, all along.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, leader) = (stop.clone(), leader.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&leader).unwrap();
            let mut acked = Vec::new();
            let mut refused = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                // 1 KiB each: the copy takes several rounds while the
                // writes go on.
                let v = format!("w-{i}-{}", "x".repeat(1024));
                match common::produce_values(
                    &mut c,
                    MOVING,
                    0,
                    -1,
                    10_000,
                    std::slice::from_ref(&v),
                ) {
                    Ok((0, _)) => {
                        acked.push(v);
                        i += 1;
                    }
                    other => {
                        refused.push(format!("w-{i}: {other:?}"));
                        c = Client::connect(&leader).unwrap();
                    }
                }
            }
            (acked, refused)
        })
    };
    let written = |n: usize| {
        common::eventually(
            &format!("{n} records written"),
            Duration::from_secs(60),
            || {
                let mut c = Client::connect(&leader).ok()?;
                let f = common::fetch_values(&mut c, MOVING, 0, 0, 0).ok()?;
                (f.high_watermark >= n as i64).then_some(())
            },
        )
    };
    written(3000);
    assert_eq!(alter_replica_log_dir(&leader, &dirs[to], MOVING), 0);
    common::eventually(
        "the replica in its new directory",
        Duration::from_secs(60),
        || {
            let (current, future) = replica_dirs(&leader, &dirs, MOVING);
            (current == Some(to) && !future).then_some(())
        },
    );
    let moved_at = {
        let mut c = Client::connect(&leader).unwrap();
        common::fetch_values(&mut c, MOVING, 0, 0, 0)
            .unwrap()
            .high_watermark
    };
    written(moved_at as usize + 300);
    stop.store(true, std::sync::atomic::Ordering::Release);
    let (acked, refused) = writer.join().unwrap();
    // Appends waited for the swap; none was refused.
    assert!(refused.is_empty(), "refused during the move: {refused:?}");
    assert!(acked.len() >= moved_at as usize + 300);

    // The old directory holds nothing of it, the new one the partition.
    assert_moved_out(&dirs[from], MOVING);
    let name = format!("{MOVING}-0");
    assert!(dirs[to].join(&name).is_dir());

    // Every acknowledged record reads back from the moved replica, in
    // order, once; and again from its files after a restart.
    let read_from = |cluster: &Cluster, id: i32| common::read_values(&addr(cluster, id), MOVING, 0);

    assert_eq!(read_from(&cluster, 1), acked);
    cluster.restart(1).expect("broker 1 restarts");
    common::eventually("broker 1 back in the ISR", Duration::from_secs(60), || {
        let v = common::partition_view(&addr(&cluster, 2), MOVING, 0, Duration::from_secs(2))?;
        (v.isr.len() == 3).then_some(())
    });
    assert_eq!(
        replica_dirs(&addr(&cluster, 1), &dirs, MOVING),
        (Some(to), false)
    );
    common::eventually(
        "broker 1's copy read whole",
        Duration::from_secs(30),
        || (read_from(&cluster, 1) == acked).then_some(()),
    );
}

/// As Kafka: the copy between directories is held to
/// `replica.alter.log.dirs.io.max.bytes.per.second` (changed at runtime);
/// a move a restart interrupts goes on after it, and reads back whole;
/// a directory named for a replica the broker does not host yet
/// (NOT_LEADER_OR_FOLLOWER) is where the replica is created when a
/// reassignment brings it.
#[test]
fn moves_are_throttled_resumed_after_a_restart_and_remembered_before_the_replica_exists() {
    const MOVING: &str = "throttled";
    const LATER: &str = "later";
    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    const RATE: f64 = 100_000.0;
    // Kafka's rate is over at least (samples - 1) windows: two samples of
    // a second let through a burst of one second's worth at the start.
    let spec = spec().with_override("replication.quota.window.num", "2");
    let mut cluster = Cluster::start(&common::strand_bin(), spec).expect("the cluster starts");
    let leader = addr(&cluster, 1);
    let mut c = Client::connect(&leader).unwrap();
    let assigned = |name: &str, partitions: i32, brokers: &[i32]| {
        common::creatable_topic(name, -1, -1, &[]).with_assignments(
            (0..partitions)
                .map(|p| {
                    CreatableReplicaAssignment::default()
                        .with_partition_index(p)
                        .with_broker_ids(brokers.iter().map(|b| BrokerId(*b)).collect())
                })
                .collect(),
        )
    };
    let resp = common::create_topics(
        &mut c,
        vec![assigned(MOVING, 1, &[1, 2, 3]), assigned(LATER, 2, &[2])],
    )
    .unwrap();
    for t in &resp.topics {
        assert_eq!(t.error_code, 0, "{t:?}");
    }
    let dirs = cluster.log_dirs(1);
    let from = home_dir(&leader, &dirs, MOVING);
    let to = 1 - from;
    // 3 MiB in batches of 10 KiB (a round of the copy is whole
    // batches), acknowledged by all three replicas.
    let mut acked = Vec::new();
    for i in 0..300 {
        let values: Vec<String> = (0..10)
            .map(|j| format!("m-{i}-{j}-{}", "x".repeat(1024)))
            .collect();
        let (code, _) = common::produce_values(&mut c, MOVING, 0, -1, 10_000, &values).unwrap();
        assert_eq!(code, 0);
        acked.extend(values);
    }

    let (code, msg) = common::alter_config(
        &mut c,
        4,
        "1",
        "replica.alter.log.dirs.io.max.bytes.per.second",
        Some(&(RATE as u64).to_string()),
    );
    assert_eq!(code, 0, "{msg}");
    assert_eq!(alter_replica_log_dir(&leader, &dirs[to], MOVING), 0);
    // The copy's rate past its first burst, over four seconds.
    let future_size = || {
        common::eventually("the copy under way", Duration::from_secs(30), || {
            replica_dirs_of(&leader, &dirs, MOVING, 0).1
        })
    };
    future_size();
    std::thread::sleep(Duration::from_secs(2));
    let (t1, s1) = (Instant::now(), future_size());
    std::thread::sleep(Duration::from_secs(4));
    let (t2, s2) = (Instant::now(), future_size());
    let rate = (s2 - s1) as f64 / (t2 - t1).as_secs_f64();
    assert!(
        (RATE * 0.5..=RATE * 1.2).contains(&rate),
        "copied at {rate:.0} B/s under a bound of {RATE} B/s"
    );

    // A restart halfway: the move goes on, still throttled, then at full
    // speed once the bound is removed.
    cluster.restart(1).expect("broker 1 restarts");
    common::eventually(
        "the move under way again after the restart",
        Duration::from_secs(60),
        || {
            let (current, future) = replica_dirs_of(&addr(&cluster, 1), &dirs, MOVING, 0);
            (current == Some(from) && future.is_some()).then_some(())
        },
    );
    let mut c = Client::connect(&addr(&cluster, 1)).unwrap();
    let (code, msg) = common::alter_config(
        &mut c,
        4,
        "1",
        "replica.alter.log.dirs.io.max.bytes.per.second",
        None,
    );
    assert_eq!(code, 0, "{msg}");
    common::eventually(
        "the replica in its new directory",
        Duration::from_secs(60),
        || {
            let (current, future) = replica_dirs(&addr(&cluster, 1), &dirs, MOVING);
            (current == Some(to) && !future).then_some(())
        },
    );
    assert_moved_out(&dirs[from], MOVING);
    assert_eq!(common::read_values(&addr(&cluster, 1), MOVING, 0), acked);

    // Directories named before broker 1 hosts `later`: one partition each.
    let b1 = addr(&cluster, 1);
    for p in 0..2 {
        assert_eq!(
            alter_replica_log_dir_of(&b1, &dirs[p as usize], LATER, p),
            NOT_LEADER_OR_FOLLOWER
        );
        let mut c = Client::connect(&b1).unwrap();
        let answer = common::reassign(&mut c, LATER, &[(p, Some(&[2, 1]))]);
        assert_eq!(answer[0].1, 0, "{answer:?}");
    }
    for p in 0..2 {
        common::eventually(
            &format!("{LATER}-{p} created in the directory named"),
            Duration::from_secs(60),
            || {
                let (current, future) = replica_dirs_of(&b1, &dirs, LATER, p);
                (current == Some(p as usize) && future.is_none()).then_some(())
            },
        );
    }
}

//! Disk faults under a partition leader (issue 12): a failing fsync (a
//! fault-injecting file layer, `compat-tests/faultfs`, loaded with
//! LD_PRELOAD) and a full disk (a small tmpfs mounted as the leader's
//! partition directory; needs root, as CI runs). Either way the leader's log
//! directory goes offline: the failed write is never acknowledged, the
//! leadership moves to an in-sync replica within the session timeout, the
//! broker stops without its clean-shutdown path, and once the fault is gone
//! and it restarts it recovers its log without corruption and rejoins the
//! ISR. No acknowledged record is lost.

mod common;

use common::Client;
use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
use kafka_protocol::messages::BrokerId;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use strand_compat_tests::cluster::{describe_cluster, Cluster, ClusterSpec, NodeState};

/// Kept short so the test is quick; the bound on the leadership move is this.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

fn spec() -> ClusterSpec {
    ClusterSpec::combined(3)
        .with_override(
            "broker.session.timeout.ms",
            SESSION_TIMEOUT.as_millis().to_string(),
        )
        .with_override("broker.heartbeat.interval.ms", "500")
}

fn addr(cluster: &Cluster, id: i32) -> String {
    cluster.broker_addr(id).expect("broker address")
}

/// A 3-node cluster (`spec()`) with faultfs preloaded, and its control
/// file, empty (the directory holding it lives as long as the first value).
fn faultfs_cluster() -> (tempfile::TempDir, PathBuf, Cluster) {
    let control_dir = tempfile::tempdir().unwrap();
    let control = control_dir.path().join("faults");
    std::fs::write(&control, "").unwrap();
    let cluster = Cluster::start(
        &common::strand_bin(),
        spec()
            .with_env(
                "LD_PRELOAD",
                common::faultfs_library().display().to_string(),
            )
            .with_env("STRAND_FAULTFS_CONTROL", control.display().to_string()),
    )
    .expect("cluster starts");
    (control_dir, control, cluster)
}

/// Creates `topic` (one partition, replicas in `replicas` order, so the
/// first leads) and waits until all of them are in its ISR.
fn create_topic(cluster: &Cluster, topic: &str, replicas: &[i32], configs: &[(&str, &str)]) {
    let mut c = Client::connect(&addr(cluster, replicas[1])).unwrap();
    let t = common::creatable_topic(topic, -1, -1, configs).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(replicas.iter().map(|r| BrokerId(*r)).collect()),
    ]);
    let resp = common::create_topics(&mut c, vec![t]).unwrap();
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0]);
    common::eventually("every replica in sync", Duration::from_secs(30), || {
        let v = common::partition_view(
            &addr(cluster, replicas[1]),
            topic,
            0,
            Duration::from_secs(2),
        )?;
        (v.leader == replicas[0] && v.isr.len() == replicas.len()).then_some(())
    });
}

/// The partition's leader as the live brokers other than `except` see it.
fn leader_seen_without(cluster: &mut Cluster, topic: &str, except: i32) -> Option<i32> {
    for id in cluster.broker_ids() {
        if id == except || !matches!(cluster.state(id), Ok(NodeState::Running)) {
            continue;
        }
        if let Some(v) =
            common::partition_view(&addr(cluster, id), topic, 0, Duration::from_secs(2))
        {
            if v.leader >= 0 {
                return Some(v.leader);
            }
        }
    }
    None
}

/// One acks=all write to whoever leads now: `Ok` once acknowledged, the
/// error code (or -1 for no answer) otherwise.
fn write_once(cluster: &mut Cluster, topic: &str, value: &str) -> Result<(), i16> {
    let leader = leader_seen_without(cluster, topic, -1).ok_or(-1i16)?;
    let mut c = Client::connect_timeout(&addr(cluster, leader), Duration::from_secs(10))
        .map_err(|_| -1i16)?;
    match common::produce_values(&mut c, topic, 0, -1, 10_000, &[value.to_string()]) {
        Ok((0, _)) => Ok(()),
        Ok((code, _)) => Err(code),
        Err(_) => Err(-1),
    }
}

/// Writes `value` until acknowledged (retrying through leadership moves).
fn write_acked(cluster: &mut Cluster, topic: &str, value: &str) {
    common::eventually(
        &format!("'{value}' acknowledged"),
        Duration::from_secs(60),
        || write_once(cluster, topic, value).ok(),
    );
}

/// Every record value from the log start to the HW of the current leader.
fn read_all(cluster: &mut Cluster, topic: &str) -> Vec<String> {
    let leader = leader_seen_without(cluster, topic, -1).expect("a leader");
    common::read_values(&addr(cluster, leader), topic, 0)
}

/// The values in a partition directory's segment files, checking that every
/// byte of them is whole, CRC-valid batches (nothing corrupt, nothing torn).
fn values_on_disk(dir: &Path) -> Vec<String> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    let mut values = Vec::new();
    for seg in segments {
        let data = std::fs::read(&seg).unwrap();
        let valid = strand_protocol::batch::valid_prefix_len(&data);
        assert_eq!(
            valid,
            data.len(),
            "{} has a torn or corrupt tail",
            seg.display()
        );
        let mut buf = bytes::Bytes::from(data);
        while !buf.is_empty() {
            let set =
                kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).expect("decodes");
            for r in set.records {
                values.push(String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap());
            }
        }
    }
    values
}

/// The common part: writes before the fault, arming it, the move, writes
/// after it, and the checks once the fault is gone and the old leader is
/// back. `arm` starts the fault; `clear` ends it before the restart.
/// What the fault's story must show beyond losing nothing.
struct Expect {
    /// The bound on the leadership's move.
    moves_within: Duration,
    /// Whether the node ends in Strand's halt (exit status 1).
    halts: bool,
}

fn leadership_moves_and_nothing_acknowledged_is_lost(
    cluster: &mut Cluster,
    topic: &str,
    leader: i32,
    value_len: usize,
    expect: Expect,
    arm: impl FnOnce(&mut Cluster),
    clear: impl FnOnce(&mut Cluster),
) {
    let pad = "x".repeat(value_len);
    let mut acked = Vec::new();
    for i in 0..20 {
        let v = format!("before-{i}-{pad}");
        write_acked(cluster, topic, &v);
        acked.push(v);
    }
    arm(cluster);
    let armed = Instant::now();
    // The faulty leader refuses (or never answers) the writes it cannot
    // make durable; none is acknowledged.
    let mut refused = Vec::new();
    let moved_after = loop {
        if let Some(l) = leader_seen_without(cluster, topic, leader) {
            if l != leader {
                break armed.elapsed();
            }
        }
        assert!(
            armed.elapsed() < Duration::from_secs(60),
            "leadership never moved"
        );
        let v = format!("during-{}-{pad}", refused.len());
        match write_once(cluster, topic, &v) {
            Ok(()) => acked.push(v),
            Err(code) => refused.push(code),
        }
    };
    eprintln!("leadership moved {moved_after:?} after the fault; refused: {refused:?}");
    assert!(!refused.is_empty(), "the fault refused no write");
    assert!(
        refused.iter().all(|c| [56, 6, -1].contains(c)),
        "writes refused with {refused:?} (KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER or no answer expected)"
    );
    assert!(
        moved_after < expect.moves_within,
        "leadership moved after {moved_after:?}, beyond {:?}; {}",
        expect.moves_within,
        cluster
            .broker_ids()
            .iter()
            .map(|id| format!("node {id}: {}", cluster.log_tail(*id)))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for i in 0..20 {
        let v = format!("after-{i}-{pad}");
        write_acked(cluster, topic, &v);
        acked.push(v);
    }
    // The faulty broker stopped by itself, saying why.
    common::eventually("the faulty broker stopped", Duration::from_secs(30), || {
        matches!(cluster.state(leader), Ok(NodeState::Down)).then_some(())
    });
    // It said why, and nothing panicked on the way out.
    let log =
        String::from_utf8_lossy(&std::fs::read(cluster.log_path(leader)).unwrap()).into_owned();
    assert!(
        log.contains("log directory failed") && !log.contains("panicked"),
        "{}",
        cluster.log_tail(leader)
    );
    if expect.halts {
        // Strand's halt: its last words, and exit status 1 (not a signal).
        let status = cluster.exit_status(leader).unwrap();
        assert!(
            log.contains("strand: log directory failed")
                && status.and_then(|s| s.code()) == Some(1),
            "exit {status:?}; {}",
            cluster.log_tail(leader)
        );
    }
    // Fault gone: it restarts, recovers, and catches up into the ISR.
    clear(cluster);
    cluster.restart(leader).expect("restarts");
    common::eventually(
        "the old leader back in the ISR",
        Duration::from_secs(60),
        || {
            let other = cluster.broker_ids().into_iter().find(|&id| id != leader)?;
            let v =
                common::partition_view(&addr(cluster, other), topic, 0, Duration::from_secs(2))?;
            (v.isr.len() == 3).then_some(())
        },
    );
    let read = read_all(cluster, topic);
    let read_set: BTreeSet<&String> = read.iter().collect();
    let lost: Vec<&String> = acked.iter().filter(|v| !read_set.contains(v)).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost: {lost:?}",
        lost.len()
    );
    // Its own copy, recovered from the faulty disk, is whole and the
    // leader's (it rejoined the ISR, so it holds everything up to the HW).
    let on_disk = values_on_disk(&cluster.data_dir(leader).join(format!("{topic}-0")));
    assert!(
        on_disk.len() >= read.len() && on_disk[..read.len()] == read[..],
        "the recovered replica differs from the leader's log"
    );
}

/// A failing fsync under the leader's partition (flush.messages=1: every
/// append is fsynced before it counts).
#[test]
fn failing_fsync_takes_the_leader_offline_and_loses_nothing() {
    let (_control_dir, control, mut cluster) = faultfs_cluster();
    let ids = cluster.broker_ids();
    let topic = "fsync-fault";
    create_topic(
        &cluster,
        topic,
        &ids,
        &[("min.insync.replicas", "2"), ("flush.messages", "1")],
    );
    let leader = ids[0];
    let partition_dir = cluster.data_dir(leader).join(format!("{topic}-0"));
    leadership_moves_and_nothing_acknowledged_is_lost(
        &mut cluster,
        topic,
        leader,
        100,
        Expect {
            moves_within: SESSION_TIMEOUT,
            halts: true,
        },
        |_| std::fs::write(&control, format!("fsync {}\n", partition_dir.display())).unwrap(),
        |_| std::fs::write(&control, "").unwrap(),
    );
}

/// A full disk under the whole data directory, the controller's RocksDB
/// store included (faultfs: writes there fail with ENOSPC, the first
/// part-way), on the node that leads the partition and the metadata
/// quorum. Nothing can commit on that node, so leadership moves once
/// another controller is elected and the failed node's session, started
/// afresh by the new controller (as Kafka's is), expires. Debian's RocksDB
/// build aborts the process at the first failed write of its log (an
/// assertion in its WAL writer), so this node's exit is an abort, not
/// Strand's halt: what it acknowledged was synced before, and it recovers.
#[test]
fn a_full_disk_under_the_whole_data_directory_halts_the_broker_and_loses_nothing() {
    let (_control_dir, control, mut cluster) = faultfs_cluster();
    // The partition's leader is the active controller: the hardest case,
    // its metadata store fills with its log.
    let ids = cluster.broker_ids();
    let controller = common::eventually("a controller", Duration::from_secs(30), || {
        let a = addr(&cluster, ids[0]).parse().ok()?;
        let id = describe_cluster(a, 1, Duration::from_secs(2))
            .ok()?
            .controller_id;
        (id >= 0).then_some(id)
    });
    let mut replicas = vec![controller];
    replicas.extend(ids.iter().copied().filter(|&id| id != controller));
    let topic = "full-data-dir";
    create_topic(&cluster, topic, &replicas, &[("min.insync.replicas", "2")]);
    let leader = controller;
    let data_dir = cluster.data_dir(leader);
    leadership_moves_and_nothing_acknowledged_is_lost(
        &mut cluster,
        topic,
        leader,
        100,
        Expect {
            // Election (a few timeouts of 1 s) plus a fresh session.
            moves_within: SESSION_TIMEOUT + Duration::from_secs(6),
            // Debian's RocksDB aborts first (see above).
            halts: false,
        },
        |_| std::fs::write(&control, format!("enospc {}/\n", data_dir.display())).unwrap(),
        |_| std::fs::write(&control, "").unwrap(),
    );
}

/// A failing fsync under the metadata store alone, on the active
/// controller (strand-chaos seed 112: the node's Raft stopped for good on
/// the failed fsync while its broker went on serving a frozen image, and
/// the cluster never got its ISRs whole again). The node must stop by
/// itself, saying why; the others elect a controller and go on; restarted
/// once the disk is healthy it recovers and rejoins, and nothing
/// acknowledged is lost.
#[test]
fn a_failing_fsync_of_the_metadata_store_stops_the_node() {
    let (_control_dir, control, mut cluster) = faultfs_cluster();
    let ids = cluster.broker_ids();
    let victim = common::eventually("a controller", Duration::from_secs(30), || {
        let a = addr(&cluster, ids[0]).parse().ok()?;
        let id = describe_cluster(a, 1, Duration::from_secs(2))
            .ok()?
            .controller_id;
        (id >= 0).then_some(id)
    });
    let others: Vec<i32> = ids.iter().copied().filter(|&id| id != victim).collect();
    let topic = "metadata-fsync";
    create_topic(&cluster, topic, &ids, &[("min.insync.replicas", "2")]);
    let mut acked = Vec::new();
    for i in 0..10 {
        let v = format!("before-{i}");
        write_acked(&mut cluster, topic, &v);
        acked.push(v);
    }
    let store = cluster.data_dir(victim).join("__cluster_metadata-0");
    std::fs::write(&control, format!("fsync {}/\n", store.display())).unwrap();
    // Any metadata change makes every voter append and fsync: a new topic.
    let mut c = Client::connect(&addr(&cluster, others[0])).unwrap();
    let _ = common::create_topics(&mut c, vec![common::creatable_topic("trigger", 1, 3, &[])]);
    common::eventually(
        "the node with the failed store stopped",
        Duration::from_secs(30),
        || matches!(cluster.state(victim), Ok(NodeState::Down)).then_some(()),
    );
    let log =
        String::from_utf8_lossy(&std::fs::read(cluster.log_path(victim)).unwrap()).into_owned();
    let status = cluster.exit_status(victim).unwrap();
    assert!(
        log.contains("strand: metadata store failed")
            && !log.contains("panicked")
            && status.and_then(|s| s.code()) == Some(1),
        "exit {status:?}; {}",
        cluster.log_tail(victim)
    );
    // The others go on without it.
    for i in 0..10 {
        let v = format!("without-{i}");
        write_acked(&mut cluster, topic, &v);
        acked.push(v);
    }
    std::fs::write(&control, "").unwrap();
    cluster.restart(victim).expect("restarts");
    common::eventually(
        "every replica in the ISR again",
        Duration::from_secs(60),
        || {
            let v = common::partition_view(
                &addr(&cluster, others[0]),
                topic,
                0,
                Duration::from_secs(2),
            )?;
            (v.isr.len() == 3).then_some(())
        },
    );
    let read = read_all(&mut cluster, topic);
    let lost: Vec<&String> = acked.iter().filter(|v| !read.contains(v)).collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
}

/// A tmpfs mount, unmounted on drop.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(at: &Path, size: &str) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .expect("mount runs");
        assert!(st.success(), "mounting a tmpfs needs root (as CI runs)");
        Mount(at.to_path_buf())
    }

    fn resize(&self, size: &str) {
        let st = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .expect("mount runs");
        assert!(st.success());
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A full disk under the leader's partition: appends hit ENOSPC part-way.
#[test]
fn full_disk_takes_the_leader_offline_and_loses_nothing() {
    let mut cluster = Cluster::start(&common::strand_bin(), spec()).expect("cluster starts");
    let ids = cluster.broker_ids();
    let topic = "full-disk";
    let leader = ids[0];
    // 1 MiB: the writes before the fault fit, the later ones do not.
    let mount = Mount::tmpfs(&cluster.data_dir(leader).join(format!("{topic}-0")), "1m");
    create_topic(&cluster, topic, &ids, &[("min.insync.replicas", "2")]);
    let mount_ref = &mount;
    leadership_moves_and_nothing_acknowledged_is_lost(
        &mut cluster,
        topic,
        leader,
        // 20 writes of 40 KiB fit in 1 MiB; the next ones fill it.
        40 << 10,
        Expect {
            moves_within: SESSION_TIMEOUT,
            halts: true,
        },
        |_| {},
        |_| mount_ref.resize("64m"),
    );
    drop(cluster);
}

/// A disk that stops answering holds up only the writes that wait on it:
/// with every async worker's worth of partitions (and more) stalled in
/// `fsync`, the broker still answers Metadata, takes and serves writes to
/// a partition on a healthy path, and the stalled writes complete, in full,
/// once the disk answers again. (Disk work on the async workers would
/// freeze the whole broker behind two stalled writes on two cores.)
#[test]
fn a_stalled_disk_holds_up_only_its_own_writes() {
    const STALLED: i32 = 4;
    let control_dir = tempfile::tempdir().unwrap();
    let control = control_dir.path().join("faults");
    let stalled_log = control_dir.path().join("faults.stalled");
    std::fs::write(&control, "").unwrap();
    let cluster = Cluster::start(
        &common::strand_bin(),
        ClusterSpec::combined(1)
            .with_env(
                "LD_PRELOAD",
                common::faultfs_library().display().to_string(),
            )
            .with_env("STRAND_FAULTFS_CONTROL", control.display().to_string()),
    )
    .expect("cluster starts");
    let id = cluster.broker_ids()[0];
    let broker = addr(&cluster, id);
    let mut c = Client::connect(&broker).unwrap();
    // Every append to "stalled" fsyncs; "served" never does.
    let created =
        common::create_topic_with(&mut c, "stalled", STALLED, 1, &[("flush.messages", "1")])
            .unwrap();
    assert_eq!(created, 0);
    assert_eq!(
        common::create_topic_with(&mut c, "served", 1, 1, &[]).unwrap(),
        0
    );
    for (topic, partitions) in [("stalled", STALLED), ("served", 1)] {
        for p in 0..partitions {
            common::eventually("a leader", Duration::from_secs(30), || {
                common::partition_view(&broker, topic, p, Duration::from_secs(2))
                    .filter(|v| v.leader == id)
            });
        }
    }
    // The first acks=1 write on each partition gets its offset 0 and, with
    // the stall on, waits in fsync.
    let prefix = cluster.data_dir(id).join("stalled-");
    std::fs::write(&control, format!("stall {}\n", prefix.display())).unwrap();
    let (done_tx, done) = std::sync::mpsc::channel();
    let writers: Vec<_> = (0..STALLED)
        .map(|p| {
            let (broker, done_tx) = (broker.clone(), done_tx.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&broker).unwrap();
                let value = format!("stalled-{p}");
                let r = common::produce_values(&mut c, "stalled", p, 1, 30_000, &[value]);
                done_tx.send(p).unwrap();
                r.unwrap()
            })
        })
        .collect();
    common::eventually(
        "every write stalled in fsync",
        Duration::from_secs(30),
        || {
            let stalls = std::fs::read_to_string(&stalled_log).unwrap_or_default();
            (stalls.lines().count() >= STALLED as usize).then_some(())
        },
    );

    // Meanwhile the broker answers, and a healthy partition is written and read.
    let mut c = Client::connect(&broker).unwrap();
    let view = common::partition_view(&broker, "served", 0, Duration::from_secs(10))
        .expect("Metadata answered while the disk stalls");
    assert_eq!(view.leader, id);
    let (code, offset) =
        common::produce_values(&mut c, "served", 0, -1, 10_000, &["served".to_string()])
            .expect("a write to a healthy path is answered while the disk stalls");
    assert_eq!((code, offset), (0, 0));
    let fetched = common::fetch_values(&mut c, "served", 0, 0, 0).unwrap();
    assert_eq!(fetched.error_code, 0);
    assert_eq!(fetched.records.len(), 1);
    assert!(
        done.try_recv().is_err(),
        "the stalled writes were still waiting while the healthy path was served"
    );

    // The disk answers again: every stalled write completes, and is there.
    std::fs::write(&control, "").unwrap();
    for (p, w) in writers.into_iter().enumerate() {
        assert_eq!(w.join().unwrap(), (0, 0), "stalled write on partition {p}");
    }
    for p in 0..STALLED {
        let f = common::fetch_values(&mut c, "stalled", p, 0, 0).unwrap();
        assert_eq!(f.error_code, 0);
        let values: Vec<_> = f.records.iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(values, vec![bytes::Bytes::from(format!("stalled-{p}"))]);
    }
}

/// Opening new partitions is disk work too (files created and fsynced):
/// with more concurrent CreateTopics than the broker has async workers,
/// each waiting on a disk that does not answer, the broker still answers
/// Metadata and serves a healthy partition, and once the disk answers the
/// topics are created and led here. (Reconciling with the image inline on
/// the workers froze a 3-node cluster's broker long enough to be fenced
/// when a client created 100 topics: librdkafka's 0045 in CI.)
#[test]
fn creating_partitions_on_a_stalled_disk_holds_up_nothing_else() {
    let creators = std::thread::available_parallelism().map_or(2, |n| n.get()) + 2;
    let control_dir = tempfile::tempdir().unwrap();
    let control = control_dir.path().join("faults");
    let stalled_log = control_dir.path().join("faults.stalled");
    std::fs::write(&control, "").unwrap();
    let cluster = Cluster::start(
        &common::strand_bin(),
        ClusterSpec::combined(1)
            .with_env(
                "LD_PRELOAD",
                common::faultfs_library().display().to_string(),
            )
            .with_env("STRAND_FAULTFS_CONTROL", control.display().to_string()),
    )
    .expect("cluster starts");
    let id = cluster.broker_ids()[0];
    let broker = addr(&cluster, id);
    let mut c = Client::connect(&broker).unwrap();
    assert_eq!(
        common::create_topic_with(&mut c, "served", 1, 1, &[]).unwrap(),
        0
    );
    common::eventually("a leader", Duration::from_secs(30), || {
        common::partition_view(&broker, "served", 0, Duration::from_secs(2))
            .filter(|v| v.leader == id)
    });

    let prefix = cluster.data_dir(id).join("slow");
    std::fs::write(&control, format!("stall {}\n", prefix.display())).unwrap();
    let (done_tx, done) = std::sync::mpsc::channel();
    let created: Vec<_> = (0..creators)
        .map(|i| {
            let (broker, done_tx) = (broker.clone(), done_tx.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&broker).unwrap();
                let r = common::create_topic_with(&mut c, &format!("slow{i}"), 2, 1, &[]);
                done_tx.send(i).unwrap();
                r.unwrap()
            })
        })
        .collect();
    common::eventually(
        "a partition's creation stalled in fsync",
        Duration::from_secs(30),
        || {
            let stalls = std::fs::read_to_string(&stalled_log).unwrap_or_default();
            (!stalls.is_empty()).then_some(())
        },
    );

    let view = common::partition_view(&broker, "served", 0, Duration::from_secs(10))
        .expect("Metadata answered while partitions are being created");
    assert_eq!(view.leader, id);
    let (code, offset) =
        common::produce_values(&mut c, "served", 0, 1, 10_000, &["served".to_string()])
            .expect("a write to a healthy partition is answered while the disk stalls");
    assert_eq!((code, offset), (0, 0));
    assert_eq!(
        common::fetch_values(&mut c, "served", 0, 0, 0)
            .unwrap()
            .records
            .len(),
        1
    );
    assert!(
        done.try_recv().is_err(),
        "the creations were still waiting while the healthy partition was served"
    );

    std::fs::write(&control, "").unwrap();
    for (i, t) in created.into_iter().enumerate() {
        assert_eq!(t.join().unwrap(), 0, "CreateTopics slow{i}");
        for p in 0..2 {
            let (code, offset) = common::produce_values(
                &mut c,
                &format!("slow{i}"),
                p,
                1,
                10_000,
                &["v".to_string()],
            )
            .unwrap();
            assert_eq!((code, offset), (0, 0), "slow{i}-{p} takes a write");
        }
    }
}

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
use strand_compat_tests::cluster::{Cluster, ClusterSpec, NodeState};

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

/// The fault-injecting library, built beside this test (a dev-dependency).
fn faultfs_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let lib = exe.with_file_name("libstrand_faultfs.so");
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
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
    let mut c = Client::connect(&addr(cluster, leader)).unwrap();
    let mut values = Vec::new();
    let mut offset = 0;
    loop {
        let f = common::fetch_values(&mut c, topic, 0, offset, 0).unwrap();
        assert_eq!(f.error_code, 0);
        for (o, v) in &f.records {
            if *o >= offset {
                values.push(String::from_utf8(v.to_vec()).expect("a value we wrote"));
            }
        }
        if f.next_offset >= f.high_watermark || f.next_offset == offset {
            return values;
        }
        offset = f.next_offset;
    }
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
fn leadership_moves_and_nothing_acknowledged_is_lost(
    cluster: &mut Cluster,
    topic: &str,
    leader: i32,
    value_len: usize,
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
        moved_after < SESSION_TIMEOUT,
        "leadership moved after {moved_after:?}, beyond the session timeout"
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
    let log = std::fs::read_to_string(cluster.log_path(leader)).unwrap();
    assert!(
        log.contains("log directory failed"),
        "{}",
        cluster.log_tail(leader)
    );
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
    let control_dir = tempfile::tempdir().unwrap();
    let control = control_dir.path().join("faults");
    std::fs::write(&control, "").unwrap();
    let mut cluster = Cluster::start(
        &common::strand_bin(),
        spec()
            .with_env("LD_PRELOAD", faultfs_library().display().to_string())
            .with_env("STRAND_FAULTFS_CONTROL", control.display().to_string()),
    )
    .expect("cluster starts");
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
        |_| std::fs::write(&control, format!("fsync {}\n", partition_dir.display())).unwrap(),
        |_| std::fs::write(&control, "").unwrap(),
    );
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
        |_| {},
        |_| mount_ref.resize("64m"),
    );
    drop(cluster);
}

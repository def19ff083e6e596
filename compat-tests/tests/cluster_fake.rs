//! Cluster harness and `strand-cluster` against `testdata/fake-strand-cluster.py`, a
//! stand-in that formats, listens on its listeners, registers itself and answers
//! ApiVersions v0 and DescribeCluster v0-v2. Skipped when python3 is not installed.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use strand_compat_tests::cluster::{Cluster, ClusterSpec, NodeState, Role};

fn fake() -> Option<PathBuf> {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("python3 not available; skipping");
        return None;
    }
    Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/fake-strand-cluster.py"))
}

fn gone(pid: u32) -> bool {
    // reaped and gone: kill(pid, 0) fails with ESRCH
    unsafe { libc::kill(pid as libc::pid_t, 0) == -1 }
}

#[test]
fn combined_lifecycle() {
    let Some(bin) = fake() else { return };
    let mut c = Cluster::start(
        &bin,
        ClusterSpec::combined(3).with_override("num.partitions", "3"),
    )
    .unwrap();
    assert_eq!(c.node_ids(), vec![1, 2, 3]);
    assert_eq!(c.broker_ids(), vec![1, 2, 3]);
    assert_eq!(c.controller_ids(), vec![1, 2, 3]);
    assert_eq!(c.role(1), Some(Role::Combined));
    assert_eq!(c.cluster_id().len(), 22);
    let bootstrap = c.bootstrap();
    let addrs: Vec<String> = (1..=3).map(|id| c.broker_addr(id).unwrap()).collect();
    assert_eq!(bootstrap, addrs.join(","));
    let props = std::fs::read_to_string(c.properties_path(2)).unwrap();
    for want in [
        "node.id=2\n",
        "process.roles=broker,controller\n",
        &format!(
            "listeners=PLAINTEXT://{},CONTROLLER://{}\n",
            addrs[1],
            c.controller_addr(2).unwrap()
        ),
        &format!("advertised.listeners=PLAINTEXT://{}\n", addrs[1]),
        "controller.listener.names=CONTROLLER\n",
        &format!("controller.quorum.voters={}\n", c.quorum_voters()),
        &format!("log.dirs={}\n", c.data_dir(2).display()),
    ] {
        assert!(props.contains(want), "{want:?} not in\n{props}");
    }
    assert_eq!(c.quorum_voters().split(',').count(), 3);
    let meta = std::fs::read_to_string(c.data_dir(1).join("meta.properties")).unwrap();
    assert!(
        meta.contains(&format!("cluster.id={}", c.cluster_id())),
        "{meta}"
    );
    assert!(
        c.log_tail(1).contains("num.partitions=3"),
        "{}",
        c.log_tail(1)
    );

    let pid1 = c.pid(1).unwrap();
    let pid2 = c.pid(2).unwrap();
    assert_eq!(
        c.status_line(2).unwrap(),
        format!("node 2 pid {pid2} broker {}", addrs[1])
    );

    // kill -9: down, others still ready
    let st = c.kill9(2).unwrap();
    assert!(!st.success());
    assert_eq!(c.state(2).unwrap(), NodeState::Down);
    assert_eq!(c.pid(2), None);
    assert_eq!(
        c.status_line(2).unwrap(),
        format!("node 2 pid - broker {} down", addrs[1])
    );
    assert!(c.kill9(2).is_err());
    assert!(c.stop(2).is_err());
    c.wait_ready(Duration::from_secs(20)).unwrap();

    // restart: same ports and data, new pid, not formatted again
    c.restart(2).unwrap();
    let pid2b = c.pid(2).unwrap();
    assert_ne!(pid2b, pid2);
    assert_eq!(c.broker_addr(2).unwrap(), addrs[1]);
    assert!(!c.log_tail(2).contains("already formatted"));

    // SIGSTOP / SIGCONT
    c.stop(3).unwrap();
    assert_eq!(c.state(3).unwrap(), NodeState::Stopped);
    assert!(c.status_line(3).unwrap().ends_with(" stopped"));
    assert!(c.cont(2).is_err());
    c.wait_ready(Duration::from_secs(20)).unwrap(); // the stopped node is not waited for
    c.cont(3).unwrap();
    assert_eq!(c.state(3).unwrap(), NodeState::Running);
    c.wait_ready(Duration::from_secs(20)).unwrap();

    // restart of a running node goes through SIGTERM
    c.restart(1).unwrap();
    assert_ne!(c.pid(1).unwrap(), pid1);
    assert!(c.log_tail(1).contains("SIGTERM, bye"));

    // terminate a stopped node: SIGCONT + SIGTERM
    c.stop(3).unwrap();
    let st = c.terminate(3).unwrap();
    assert!(st.success(), "{st}");
    assert!(c.restart(99).is_err());

    let pids: Vec<u32> = [1, 2].iter().map(|&id| c.pid(id).unwrap()).collect();
    c.shutdown().unwrap();
    for id in 1..=3 {
        assert_eq!(c.state(id).unwrap(), NodeState::Down);
    }
    let dir = c.dir().to_path_buf();
    drop(c);
    assert!(!dir.exists());
    for pid in pids {
        assert!(gone(pid));
    }
}

#[test]
fn split_layout_with_describe_cluster_v1_and_drop() {
    let Some(bin) = fake() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cdir = dir.path().join("c");
    let mut c = Cluster::start(
        &bin,
        ClusterSpec::split(3, 2)
            .with_dir(&cdir)
            .with_override("fake.describe.cluster.max", "1"),
    )
    .unwrap();
    assert_eq!(c.node_ids(), vec![1, 2, 3, 4, 5]);
    assert_eq!(c.controller_ids(), vec![1, 2, 3]);
    assert_eq!(c.broker_ids(), vec![4, 5]);
    assert_eq!(c.broker_addr(1), None);
    assert_eq!(c.controller_addr(4), None);
    assert_eq!(c.bootstrap().split(',').count(), 2);
    let l1 = c.status_line(1).unwrap();
    assert!(
        l1.starts_with("node 1 pid ") && l1.contains(" controller 127.0.0.1:"),
        "{l1}"
    );
    let p1 = std::fs::read_to_string(c.properties_path(1)).unwrap();
    assert!(p1.contains("process.roles=controller\n"), "{p1}");
    assert!(!p1.contains("PLAINTEXT"), "{p1}");
    let p4 = std::fs::read_to_string(c.properties_path(4)).unwrap();
    assert!(p4.contains("process.roles=broker\n"), "{p4}");
    assert!(!p4.contains("CONTROLLER://"), "{p4}");
    // v1 lists unfenced brokers only: a stopped broker drops out, waiting still works
    c.stop(5).unwrap();
    c.wait_ready(Duration::from_secs(20)).unwrap();
    c.cont(5).unwrap();
    c.restart(4).unwrap();
    let pids: Vec<u32> = c.node_ids().iter().map(|&id| c.pid(id).unwrap()).collect();
    c.stop(2).unwrap();
    drop(c); // SIGKILLs everything, stopped ones too
    for pid in pids {
        assert!(gone(pid), "pid {pid} survived drop");
    }
    assert!(cdir.join("node1.log").exists(), "a given dir is kept");
    // a used directory is refused
    let e = match Cluster::start(&bin, ClusterSpec::combined(1).with_dir(&cdir)) {
        Ok(_) => panic!("reused a cluster dir"),
        Err(e) => e,
    };
    assert!(e.to_string().contains("not empty"), "{e}");
}

#[test]
fn start_reports_a_crashing_node() {
    let Some(bin) = fake() else { return };
    let e = match Cluster::start(
        &bin,
        ClusterSpec::combined(2)
            .with_override("fake.exit.after.ms", "0")
            .with_start_timeout(Duration::from_secs(30)),
    ) {
        Ok(_) => panic!("crashing nodes must not become ready"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("exited (exit status: 7)"), "{e}");
    assert!(e.contains("fake crash"), "{e}");
}

#[test]
fn start_times_out_with_the_reason() {
    let Some(bin) = fake() else { return };
    let t0 = std::time::Instant::now();
    let e = match Cluster::start(
        &bin,
        ClusterSpec::combined(2)
            .with_override("fake.register.delay.ms", "600000")
            .with_start_timeout(Duration::from_secs(2)),
    ) {
        Ok(_) => panic!("unregistered brokers must not be ready"),
        Err(e) => e,
    };
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    let e = e.to_string();
    assert!(e.contains("does not list broker 1 yet"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
}

#[test]
fn format_failure_is_reported() {
    let Some(bin) = fake() else { return };
    // a pre-formatted node dir: refused before format even runs
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("node1")).unwrap();
    std::fs::write(dir.path().join("node1/meta.properties"), "x").unwrap();
    assert!(Cluster::start(&bin, ClusterSpec::combined(1).with_dir(dir.path())).is_err());
    // a binary that does not exist
    let e = match Cluster::start(
        std::path::Path::new("/nonexistent/strand"),
        ClusterSpec::combined(1),
    ) {
        Ok(_) => panic!(),
        Err(e) => e,
    };
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
}

/// The `strand-cluster` command, driven through stdin/stdout.
#[test]
fn strand_cluster_command() {
    let Some(bin) = fake() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_strand-cluster"))
        .args(["--nodes", "3", "--strand"])
        .arg(&bin)
        .arg("--dir")
        .arg(dir.path().join("cl"))
        .args(["--override", "num.partitions=2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = || {
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    };
    let mut addrs = Vec::new();
    let mut pids = Vec::new();
    for id in 1..=3 {
        let l = line();
        let w: Vec<&str> = l.split(' ').collect();
        assert_eq!(w.len(), 6, "{l}");
        assert_eq!(
            (w[0], w[1], w[2], w[4]),
            ("node", &*id.to_string(), "pid", "broker"),
            "{l}"
        );
        pids.push(w[3].parse::<u32>().unwrap());
        addrs.push(w[5].to_string());
    }
    assert_eq!(line(), format!("bootstrap {}", addrs.join(",")));
    assert_eq!(line(), "ready");

    let mut send = |cmd: &str| writeln!(stdin, "{cmd}").unwrap();
    send("status");
    for id in 1..=3 {
        assert_eq!(
            line(),
            format!("node {id} pid {} broker {}", pids[id - 1], addrs[id - 1])
        );
    }
    assert_eq!(line(), "ok");
    send("kill 2");
    assert_eq!(line(), format!("node 2 pid - broker {} down", addrs[1]));
    send("kill 2");
    assert!(line().starts_with("error "));
    send("");
    send("restart 2");
    let l = line();
    assert!(
        l.starts_with("node 2 pid ") && l.ends_with(&format!(" broker {}", addrs[1])),
        "{l}"
    );
    assert!(!l.contains(&format!(" pid {} ", pids[1])), "{l}");
    send("stop 3");
    assert_eq!(
        line(),
        format!("node 3 pid {} broker {} stopped", pids[2], addrs[2])
    );
    send("cont 3");
    assert_eq!(
        line(),
        format!("node 3 pid {} broker {}", pids[2], addrs[2])
    );
    send("wait");
    assert_eq!(line(), "ok");
    send("bogus 1");
    assert_eq!(line(), "error unknown command \"bogus\"");
    send("kill 9");
    assert_eq!(line(), "error no node 9");
    send("quit");
    assert_eq!(line(), "ok");
    let st = child.wait().unwrap();
    assert!(st.success(), "{st}");
    for pid in &pids {
        assert!(gone(*pid));
    }
    let log = std::fs::read_to_string(dir.path().join("cl/node1.log")).unwrap();
    assert!(log.contains("num.partitions=2"), "{log}");
    assert!(log.contains("SIGTERM, bye"), "{log}");
}

/// End of input works like `quit`; a bad argument exits 2 with the usage.
#[test]
fn strand_cluster_eof_and_usage() {
    let Some(bin) = fake() else { return };
    let st = Command::new(env!("CARGO_BIN_EXE_strand-cluster"))
        .args(["--nodes", "0"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_strand-cluster"))
        .args(["--controllers", "1", "--brokers", "1", "--strand"])
        .arg(&bin)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", out);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[0].starts_with("node 1 pid ") && lines[0].contains(" controller "),
        "{text}"
    );
    assert!(
        lines[1].starts_with("node 2 pid ") && lines[1].contains(" broker "),
        "{text}"
    );
    assert!(lines[2].starts_with("bootstrap 127.0.0.1:"), "{text}");
    assert_eq!(&lines[3..], &["ready", "ok"]);
}

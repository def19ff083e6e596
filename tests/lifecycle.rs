//! Process lifecycle: bad configuration stops start-up naming the key;
//! SIGTERM and SIGINT shut down cleanly and the data is there after restart.

mod common;

use std::process::Command;
use strand_compat_tests::Broker;

#[test]
fn bad_configuration_names_the_key() {
    // A key Strand does not know is set aside (Kafka's own files carry
    // several: tests/quickstart.rs); one of Strand's own namespace is a typo.
    let cases = [
        ("strand.no.such.setting=1", "strand.no.such.setting"),
        ("num.partitions=zero", "num.partitions"),
        ("log.segment.bytes=-5", "log.segment.bytes"),
        ("listeners=PLAINTEXT//nowhere", "listeners"),
    ];
    for (arg, key) in cases {
        let out = Command::new(common::strand_bin())
            .args(["--override", arg])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{arg}: exit code");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{arg}: error names the key: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("server.properties");
    std::fs::write(&props, "node.id=1\nstrand.bogus.key=3\n").unwrap();
    let out = Command::new(common::strand_bin())
        .arg(&props)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("strand.bogus.key"));
}

#[test]
fn sigterm_and_sigint_shut_down_cleanly() {
    let mut broker = Broker::start(&common::strand_bin(), &[("num.partitions", "1")]).unwrap();
    let addr = broker.addr();
    let produce = |addr: &str| {
        let mut child = Command::new("kcat")
            .args(["-b", addr, "-P", "-t", "life", "-X", "acks=all"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(b"one\ntwo\n")
            .unwrap();
        assert!(child.wait().unwrap().success());
    };
    produce(&addr);
    let status = broker.terminate().unwrap();
    assert!(status.success(), "SIGTERM: clean exit, got {status}");
    assert!(broker.log_tail().contains("clean shutdown complete"));
    broker.restart().unwrap();
    produce(&broker.addr());
    // SIGINT by PID.
    // SAFETY: plain kill(2) on the child's PID.
    assert_eq!(unsafe { libc::kill(broker.pid() as i32, libc::SIGINT) }, 0);
    let mut tries = 0;
    while broker.is_running() {
        tries += 1;
        assert!(tries < 3000, "broker did not exit on SIGINT");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(broker.try_exit_status().and_then(|s| s.code()), Some(0));
    broker.restart().unwrap();
    let out = Command::new("kcat")
        .args([
            "-b",
            &broker.addr(),
            "-C",
            "-t",
            "life",
            "-o",
            "beginning",
            "-e",
            "-q",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\ntwo\none\ntwo\n");
}

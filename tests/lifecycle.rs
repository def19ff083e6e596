//! Process lifecycle: bad configuration stops start-up naming the key;
//! SIGTERM and SIGINT shut down cleanly and the data is there after restart;
//! the log's format and level.

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

/// Log levels changed at runtime (BROKER_LOGGER): a module's debug lines
/// appear once its level is DEBUG, and the level reads back.
#[test]
fn log_levels_change_at_runtime() {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let broker = Broker::start(&common::strand_bin(), &[("num.partitions", "1")]).unwrap();
    let closed = |broker: &Broker| {
        std::fs::read_to_string(broker.log_path())
            .unwrap()
            .matches("connection closed")
            .count()
    };
    // A connection opened and closed: logged at debug only.
    drop(common::Client::connect(&broker.addr()).unwrap());
    let mut c = common::Client::connect(&broker.addr()).unwrap();
    let set = common::alter_config(&mut c, 8, "1", "strand_broker::server", Some("DEBUG"));
    assert_eq!(set, (0, String::new()));
    assert_eq!(closed(&broker), 0, "debug lines before the change");
    drop(common::Client::connect(&broker.addr()).unwrap());
    common::eventually(
        "the module's debug lines",
        std::time::Duration::from_secs(10),
        || (closed(&broker) > 0).then_some(()),
    );
    let described: DescribeConfigsResponse = c
        .call(
            ApiKey::DescribeConfigs,
            4,
            &DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(8)
                    .with_resource_name(s("1"))
                    .with_configuration_keys(Some(vec![s("strand_broker::server"), s("root")])),
            ]),
        )
        .unwrap();
    let levels: Vec<(String, Option<String>)> = described.results[0]
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
        .collect();
    assert_eq!(
        levels,
        vec![
            ("root".to_string(), Some("INFO".to_string())),
            (
                "strand_broker::server".to_string(),
                Some("DEBUG".to_string())
            ),
        ]
    );
}

/// `strand --version` names the commit it was built from.
#[test]
fn the_version_names_the_commit() {
    let out = Command::new(common::strand_bin())
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    assert!(head.len() == 12, "git: {head}");
    assert_eq!(
        version.trim(),
        format!("strand {} ({head})", env!("CARGO_PKG_VERSION"))
    );
}

/// The log as an operator's pipeline reads it: without a terminal, no
/// colour codes; a Kafka setting Strand accepts but does not act on is
/// named in a warning; with `strand.log.format=json`, one JSON object per
/// line; `strand.log.level` sets the filter (here: a module's debug lines).
#[test]
fn logs_are_plain_or_json_lines_and_their_level_is_a_property() {
    let text = Broker::start(
        &common::strand_bin(),
        &[("num.partitions", "1"), ("num.io.threads", "16")],
    )
    .unwrap();
    drop(common::Client::connect(&text.addr()).unwrap());
    let log = std::fs::read_to_string(text.log_path()).unwrap();
    assert!(log.contains("strand is serving"), "{log}");
    assert!(!log.contains('\u{1b}'), "colour codes in a log file: {log}");
    // A Kafka setting Strand does not act on is named, with why.
    assert!(
        log.contains("num.io.threads is accepted but Strand does not act on it"),
        "{log}"
    );

    let json = Broker::start(
        &common::strand_bin(),
        &[
            ("strand.log.format", "json"),
            ("strand.log.level", "info,strand_broker::server=debug"),
        ],
    )
    .unwrap();
    drop(common::Client::connect(&json.addr()).unwrap());
    common::eventually(
        "the server module's debug line",
        std::time::Duration::from_secs(10),
        || {
            let log = std::fs::read_to_string(json.log_path()).ok()?;
            log.contains("connection closed").then_some(())
        },
    );
    let log = std::fs::read_to_string(json.log_path()).unwrap();
    let mut serving = false;
    // The harness's own banner lines start with "====".
    for line in log
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("===="))
    {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
        serving |= v["fields"]["message"] == "strand is serving";
    }
    assert!(serving, "{log}");
}

/// The log cleaner's settings changed at runtime (Kafka's reconfigurable
/// `log.cleaner.*`): `log.cleaner.threads` raised on the broker's own
/// resource restarts the cleaner with that many threads; with it removed,
/// the cluster-wide setting applies.
#[test]
fn the_log_cleaner_takes_up_new_settings_at_runtime() {
    let broker = Broker::start(&common::strand_bin(), &[("num.partitions", "1")]).unwrap();
    let pid = broker.pid();
    // The cleaner threads running now, by name.
    let cleaners = || -> usize {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("kafka-log-clean"))
            .count()
    };
    assert_eq!(cleaners(), 1, "log.cleaner.threads' default");
    let mut c = common::Client::connect(&broker.addr()).unwrap();
    let mut set = |resource: &str, threads: Option<&str>| {
        common::alter_config(&mut c, 4, resource, "log.cleaner.threads", threads).0
    };
    assert_eq!(set("1", Some("3")), 0);
    common::eventually(
        "three cleaner threads",
        std::time::Duration::from_secs(30),
        || (cleaners() == 3).then_some(()),
    );
    // A value Kafka refuses (fewer than one thread).
    assert_eq!(set("1", Some("0")), 42);
    // The cluster-wide setting applies once the broker's own is gone.
    assert_eq!(set("", Some("2")), 0);
    assert_eq!(set("1", None), 0);
    common::eventually(
        "the cluster-wide two threads",
        std::time::Duration::from_secs(30),
        || (cleaners() == 2).then_some(()),
    );
}

//! Kafka's quickstart, unchanged, starts Strand (issue 16, item 6): the
//! `config/server.properties` Kafka 4.x ships for a combined KRaft node
//! (a dynamic quorum through `controller.quorum.bootstrap.servers`,
//! listeners on every interface, settings Strand has no use for), formatted
//! with `kafka-storage format`'s own arguments (`--standalone -t ID -c
//! FILE`), then started with the file alone: it serves produce and fetch on
//! the advertised address, and logs the keys it does not use.

mod common;

use common::{create_topic_with, eventually, fetch_values, produce_values, strand_bin, Client};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Kafka 4.x's `config/server.properties`, its settings as shipped (the
/// ports are the test's: PLAINTEXT and CONTROLLER).
fn quickstart_properties(broker: u16, controller: u16, log_dirs: &str) -> String {
    format!(
        "process.roles=broker,controller\n\
         node.id=1\n\
         controller.quorum.bootstrap.servers=localhost:{controller}\n\
         listeners=PLAINTEXT://:{broker},CONTROLLER://:{controller}\n\
         inter.broker.listener.name=PLAINTEXT\n\
         advertised.listeners=PLAINTEXT://localhost:{broker},CONTROLLER://localhost:{controller}\n\
         controller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n\
         num.network.threads=3\n\
         num.io.threads=8\n\
         socket.send.buffer.bytes=102400\n\
         socket.receive.buffer.bytes=102400\n\
         socket.request.max.bytes=104857600\n\
         log.dirs={log_dirs}\n\
         num.partitions=1\n\
         num.recovery.threads.per.data.dir=1\n\
         offsets.topic.replication.factor=1\n\
         share.coordinator.state.topic.replication.factor=1\n\
         share.coordinator.state.topic.min.isr=1\n\
         transaction.state.log.replication.factor=1\n\
         transaction.state.log.min.isr=1\n\
         log.retention.hours=168\n\
         log.segment.bytes=1073741824\n\
         log.retention.check.interval.ms=300000\n"
    )
}

/// A directory holding Kafka's quickstart `server.properties` on free
/// ports: (the directory, the broker port, the controller port, the log
/// directory, the properties file).
fn quickstart_dir() -> (
    tempfile::TempDir,
    u16,
    u16,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let dir = tempfile::tempdir().unwrap();
    let broker_port = strand_compat_tests::harness::free_loopback_port().unwrap();
    let controller_port = strand_compat_tests::harness::free_loopback_port().unwrap();
    let logs = dir.path().join("kraft-combined-logs");
    let props = dir.path().join("server.properties");
    std::fs::write(
        &props,
        quickstart_properties(broker_port, controller_port, &logs.display().to_string()),
    )
    .unwrap();
    (dir, broker_port, controller_port, logs, props)
}

fn assert_formatted(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "format: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts the node of `props`, its output in `log`.
fn start_node(props: &std::path::Path, log: &std::path::Path) -> std::process::Child {
    Command::new(strand_bin())
        .arg(props)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(log).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::options().append(true).open(log).unwrap(),
        ))
        .spawn()
        .unwrap()
}

#[test]
fn kafkas_quickstart_configuration_starts_strand_unchanged() {
    let (dir, broker_port, _, _, props) = quickstart_dir();

    // KAFKA_CLUSTER_ID="$(bin/kafka-storage.sh random-uuid)"
    let id = Command::new(strand_bin())
        .arg("random-uuid")
        .output()
        .unwrap();
    let id = String::from_utf8(id.stdout).unwrap().trim().to_string();
    // bin/kafka-storage.sh format --standalone -t $KAFKA_CLUSTER_ID -c config/server.properties
    let format = |extra: &[&str]| {
        Command::new(strand_bin())
            .args(["format", "--standalone", "-t", &id, "-c"])
            .arg(&props)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = format(&[]);
    assert_formatted(&out);
    // A second format refuses, unless told to ignore a matching one.
    assert!(!format(&[]).status.success());
    assert!(format(&["--ignore-formatted"]).status.success());

    // bin/kafka-server-start.sh config/server.properties
    let log = dir.path().join("strand.log");
    let mut child = start_node(&props, &log);
    let addr = format!("localhost:{broker_port}");
    let served = std::panic::catch_unwind(|| {
        let mut c = eventually(
            "the quickstart node answers",
            Duration::from_secs(30),
            || {
                let mut c = Client::connect(&addr).ok()?;
                (create_topic_with(&mut c, "quickstart-events", 1, 1, &[]).ok()? == 0).then_some(c)
            },
        );
        let values: Vec<String> = (0..3).map(|i| format!("event-{i}")).collect();
        assert_eq!(
            produce_values(&mut c, "quickstart-events", 0, -1, 5000, &values).unwrap(),
            (0, 0)
        );
        let read = fetch_values(&mut c, "quickstart-events", 0, 0, 100).unwrap();
        let read: Vec<String> = read
            .records
            .iter()
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect();
        assert_eq!(read, values);
    });
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    if let Err(e) = served {
        panic!("{e:?}\nnode log:\n{text}");
    }
    let unused = text
        .lines()
        .find(|l| l.contains("not used by Strand"))
        .unwrap_or_else(|| panic!("no line naming the unused keys:\n{text}"));
    for key in [
        "socket.send.buffer.bytes",
        "num.recovery.threads.per.data.dir",
        "share.coordinator.state.topic.replication.factor",
    ] {
        assert!(unused.contains(key), "{key} not named in: {unused}");
    }
}

/// Formats and starts a node from `props` (its text) in `dir`, runs
/// `check` against it, and stops it (by PID); the node's log is shown if
/// `check` fails.
fn with_node(dir: &std::path::Path, props: &str, check: impl FnOnce() + std::panic::UnwindSafe) {
    let path = dir.join("server.properties");
    std::fs::write(&path, props).unwrap();
    let out = Command::new(strand_bin())
        .args(["format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert_formatted(&out);
    let log = dir.join("strand.log");
    let mut child = Command::new(strand_bin())
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::options().append(true).open(&log).unwrap(),
        ))
        .spawn()
        .unwrap();
    let checked = std::panic::catch_unwind(check);
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = checked {
        let text = std::fs::read_to_string(&log).unwrap();
        panic!("{e:?}\nnode log:\n{text}");
    }
}

/// Listeners by host name and by IPv6 literal (issue 16, item 6): the
/// client listener on `[::1]` (advertised so), the controller's on
/// `localhost`, named so in the quorum; the node formats, starts, and
/// serves produce and fetch there, and Metadata advertises `::1`.
#[test]
fn host_name_and_ipv6_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let broker_port = strand_compat_tests::harness::free_loopback_port().unwrap();
    let controller_port = strand_compat_tests::harness::free_loopback_port().unwrap();
    let props = format!(
        "process.roles=broker,controller\n\
         node.id=1\n\
         controller.quorum.voters=1@localhost:{controller_port}\n\
         listeners=PLAINTEXT://[::1]:{broker_port},CONTROLLER://localhost:{controller_port}\n\
         advertised.listeners=PLAINTEXT://[::1]:{broker_port}\n\
         controller.listener.names=CONTROLLER\n\
         log.dirs={}\n",
        dir.path().join("data").display()
    );
    let addr = format!("[::1]:{broker_port}");
    with_node(dir.path(), &props, || {
        let mut c = eventually("the node answers on [::1]", Duration::from_secs(30), || {
            let mut c = Client::connect(&addr).ok()?;
            (create_topic_with(&mut c, "v6", 1, 1, &[]).ok()? == 0).then_some(c)
        });
        let values = vec!["over-ipv6".to_string()];
        assert_eq!(
            produce_values(&mut c, "v6", 0, -1, 5000, &values).unwrap(),
            (0, 0)
        );
        let read = fetch_values(&mut c, "v6", 0, 0, 100).unwrap();
        assert_eq!(read.records.len(), 1);
        let md = common::auto_create(&mut c, "v6");
        let hosts: Vec<String> = md.brokers.iter().map(|b| b.host.to_string()).collect();
        assert_eq!(hosts, vec!["::1".to_string()]);
    });
}

/// Several client listeners at once (an internal and an external one, as
/// in a container setup), the inter-broker one named: each serves, and a
/// client is told the broker's and the coordinator's address on the
/// listener it connected on, as Kafka does.
#[test]
fn several_listeners_each_advertise_their_own_address() {
    use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let internal = strand_compat_tests::harness::free_loopback_port().unwrap();
    let external = strand_compat_tests::harness::free_loopback_port().unwrap();
    let controller = strand_compat_tests::harness::free_loopback_port().unwrap();
    let props = format!(
        "process.roles=broker,controller\n\
         node.id=1\n\
         controller.quorum.voters=1@127.0.0.1:{controller}\n\
         listeners=EXTERNAL://0.0.0.0:{external},INTERNAL://127.0.0.1:{internal},CONTROLLER://127.0.0.1:{controller}\n\
         advertised.listeners=EXTERNAL://localhost:{external},INTERNAL://127.0.0.1:{internal}\n\
         listener.security.protocol.map=EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
         inter.broker.listener.name=INTERNAL\n\
         controller.listener.names=CONTROLLER\n\
         offsets.topic.replication.factor=1\n\
         log.dirs={}\n",
        dir.path().join("data").display()
    );
    with_node(dir.path(), &props, || {
        for (port, host) in [(internal, "127.0.0.1"), (external, "localhost")] {
            let addr = format!("127.0.0.1:{port}");
            let mut c = eventually(
                &format!("the node answers on {addr}"),
                Duration::from_secs(30),
                || {
                    let mut c = Client::connect(&addr).ok()?;
                    (create_topic_with(&mut c, &format!("l{port}"), 1, 1, &[]).ok()? == 0)
                        .then_some(c)
                },
            );
            let topic = format!("l{port}");
            let values = vec![format!("via {host}")];
            assert_eq!(
                produce_values(&mut c, &topic, 0, -1, 5000, &values).unwrap(),
                (0, 0)
            );
            assert_eq!(
                fetch_values(&mut c, &topic, 0, 0, 100)
                    .unwrap()
                    .records
                    .len(),
                1
            );
            let md = common::auto_create(&mut c, &topic);
            let brokers: Vec<(String, i32)> = md
                .brokers
                .iter()
                .map(|b| (b.host.to_string(), b.port))
                .collect();
            assert_eq!(
                brokers,
                vec![(host.to_string(), port as i32)],
                "Metadata on {addr}"
            );
            let found = eventually("a group coordinator", Duration::from_secs(30), || {
                let r: FindCoordinatorResponse = c
                    .call(
                        ApiKey::FindCoordinator,
                        3,
                        &FindCoordinatorRequest::default()
                            .with_key(StrBytes::from_static_str("g"))
                            .with_key_type(0),
                    )
                    .ok()?;
                (r.error_code == 0).then(|| (r.host.to_string(), r.port))
            });
            assert_eq!(
                found,
                (host.to_string(), port as i32),
                "FindCoordinator on {addr}"
            );
        }
    });
}

/// Kafka 4.x's multi-node form of the format step: `--initial-controllers
/// id@host:port:directory-id` (here one controller): the node takes the
/// directory id given for it as its metadata directory's, starts, and
/// serves.
#[test]
fn initial_controllers_with_directory_ids_as_kafka_4_writes_them() {
    let (dir, broker_port, controller_port, logs, props) = quickstart_dir();
    let uuid = || {
        let out = Command::new(strand_bin())
            .arg("random-uuid")
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let (id, directory) = (uuid(), uuid());
    let out = Command::new(strand_bin())
        .args(["format", "-t", &id, "-c"])
        .arg(&props)
        .args([
            "--initial-controllers",
            &format!("1@localhost:{controller_port}:{directory}"),
        ])
        .output()
        .unwrap();
    assert_formatted(&out);
    let meta = std::fs::read_to_string(logs.join("meta.properties")).unwrap();
    assert!(
        meta.lines()
            .any(|l| l == format!("directory.id={directory}")),
        "{meta}"
    );
    let log = dir.path().join("strand.log");
    let mut child = start_node(&props, &log);
    let addr = format!("localhost:{broker_port}");
    let served = std::panic::catch_unwind(|| {
        eventually("the node answers", Duration::from_secs(30), || {
            let mut c = Client::connect(&addr).ok()?;
            (create_topic_with(&mut c, "formatted", 1, 1, &[]).ok()? == 0).then_some(())
        })
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = served {
        panic!(
            "{e:?}\nnode log:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
    }
}

//! `kafka-verifiable-producer` and `kafka-verifiable-consumer`, the clients
//! Kafka's own system tests drive, against a 3-node Strand cluster whose
//! partition leader is killed (kill -9) three times while they run (issue
//! 16): the producer is idempotent with acks=all, the consumer a group
//! member committing what it processed; the tools of Kafka 4.4 and of 3.9
//! (older API versions) each run it. What a user of acks=all relies on:
//! every acknowledged message is consumed, none is consumed twice, and
//! nothing is consumed that was not sent.
//!
//! Needs the reference Kafka's jars: `compat-tests/scripts/fetch-kafka.sh`.

mod common;

use common::{create_topic_with, eventually, partition_view, Client};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strand_compat_tests::cluster::{Cluster, ClusterSpec, KafkaDist};

const TOPIC: &str = "verifiable";
const PARTITIONS: i32 = 3;
/// Far more than the run sends: the producer is stopped (SIGTERM, which
/// it answers by flushing what it sent) once the kills are over.
const MAX_MESSAGES: u64 = 10_000_000;
const KILLS: usize = 3;
/// Acknowledged writes between kills, and after the last.
const BETWEEN_KILLS: usize = 2_000;

/// A Kafka tool whose stdout lines are collected as they come.
struct Tool {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl Tool {
    fn start(dist: &KafkaDist, tool: &str, args: &[&str]) -> Tool {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-tests/scripts/kafka-tool.sh");
        let mut child = Command::new(script)
            .arg(tool)
            .args(args)
            .env("STRAND_KAFKA_DIR", &dist.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("a Kafka tool");
        let out = child.stdout.take().expect("piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // The tools print one JSON object per line; anything else
                // is a log line.
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().expect("not poisoned").push(v);
                }
            }
        });
        Tool { child, lines }
    }

    /// The values of this tool's events named `name`.
    fn values(&self, name: &str) -> Vec<String> {
        self.lines
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|v| v["name"] == name)
            .filter_map(|v| v["value"].as_str().map(str::to_string))
            .collect()
    }

    /// The last few events, for a failure's message.
    fn tail(&self) -> String {
        let lines = self.lines.lock().expect("not poisoned");
        let from = lines.len().saturating_sub(5);
        lines[from..]
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn count(&self, name: &str) -> usize {
        self.lines
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|v| v["name"] == name)
            .count()
    }
}

impl Tool {
    /// SIGTERM to the tool's process (kafka-tool.sh execs java), then
    /// waits for it to exit.
    fn terminate(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: a plain kill(2) of our own child, which we have not reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        // By PID: the tool's own process.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every partition of the topic led, with all three replicas in sync, as
/// the first node that answers sees it.
fn full_isr(cluster: &Cluster) -> bool {
    (0..PARTITIONS).all(|p| {
        cluster.broker_ids().iter().any(|id| {
            cluster
                .broker_addr(*id)
                .and_then(|a| partition_view(&a, TOPIC, p, Duration::from_secs(2)))
                .is_some_and(|v| v.leader >= 0 && v.isr.len() == 3)
        })
    })
}

/// The leader of partition 0 as node `from` sees it.
fn leader_seen_by(cluster: &Cluster, from: i32) -> Option<i32> {
    let addr = cluster.broker_addr(from)?;
    partition_view(&addr, TOPIC, 0, Duration::from_secs(2))
        .map(|v| v.leader)
        .filter(|l| *l >= 0)
}

/// Both tools of `clients` (a Kafka version) against a fresh cluster.
fn scenario(dist: &KafkaDist, clients: &str) {
    println!("## Kafka {clients}'s verifiable producer and consumer");
    let mut cluster = Cluster::start(
        &common::strand_bin(),
        ClusterSpec::combined(3)
            .with_override("default.replication.factor", "3")
            .with_override("offsets.topic.replication.factor", "3")
            .with_override("min.insync.replicas", "2")
            .with_override("group.initial.rebalance.delay.ms", "0")
            .with_override("broker.session.timeout.ms", "4000")
            .with_override("broker.heartbeat.interval.ms", "500")
            .with_override("auto.create.topics.enable", "false"),
    )
    .expect("a 3-node cluster");
    let first = cluster
        .broker_addr(cluster.broker_ids()[0])
        .expect("an address");
    let mut c = Client::connect(&first).expect("a connection");
    assert_eq!(
        create_topic_with(
            &mut c,
            TOPIC,
            PARTITIONS,
            3,
            &[("min.insync.replicas", "2")]
        )
        .unwrap(),
        0
    );
    eventually("a full ISR", Duration::from_secs(60), || {
        full_isr(&cluster).then_some(())
    });
    let dir = tempfile::tempdir().expect("a scratch directory");
    let producer_config = dir.path().join("producer.properties");
    std::fs::write(
        &producer_config,
        // The tool sets retries=0 unless told.
        "enable.idempotence=true\nacks=all\nretries=2147483647\ndelivery.timeout.ms=120000\nrequest.timeout.ms=10000\n",
    )
    .expect("producer.properties");
    let bootstrap = cluster.bootstrap();
    let max = MAX_MESSAGES.to_string();
    let mut producer = Tool::start(
        dist,
        "kafka-verifiable-producer",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            TOPIC,
            "--max-messages",
            &max,
            "--throughput",
            "400",
            "--acks",
            "-1",
            "--producer.config",
            &producer_config.display().to_string(),
        ],
    );
    let consumer = Tool::start(
        dist,
        "kafka-verifiable-consumer",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            TOPIC,
            "--group-id",
            "verifiable-group",
            "--reset-policy",
            "earliest",
            "--verbose",
        ],
    );

    // Kill partition 0's leader each time more writes were acknowledged,
    // and bring it back into the ISR before the next.
    for round in 1..=KILLS + 1 {
        let target = producer.count("producer_send_success") + BETWEEN_KILLS;
        eventually(
            &format!(
                "{target} acknowledged writes before kill {round}; the producer's last events:\n{}",
                producer.tail()
            ),
            Duration::from_secs(180),
            || {
                assert!(
                    producer.count("shutdown_complete") == 0,
                    "the producer stopped early: {}",
                    producer.tail()
                );
                (producer.count("producer_send_success") >= target).then_some(())
            },
        );
        if round > KILLS {
            break;
        }
        let victim = cluster
            .broker_ids()
            .into_iter()
            .find_map(|id| leader_seen_by(&cluster, id))
            .expect("a leader of partition 0");
        cluster.kill9(victim).expect("kill -9 the leader");
        let others: Vec<i32> = cluster
            .broker_ids()
            .into_iter()
            .filter(|id| *id != victim)
            .collect();
        eventually(
            &format!("a leader other than {victim}"),
            Duration::from_secs(60),
            || {
                others
                    .iter()
                    .find_map(|id| leader_seen_by(&cluster, *id))
                    .filter(|l| *l != victim)
            },
        );
        cluster.restart(victim).expect("restart the old leader");
        eventually(
            &format!("{victim} back in every ISR"),
            Duration::from_secs(120),
            || full_isr(&cluster).then_some(()),
        );
        println!("kill {round}: node {victim} killed, another leader named, back in sync");
    }

    producer.terminate();
    let sent = producer
        .lines
        .lock()
        .expect("not poisoned")
        .iter()
        .find(|v| v["name"] == "tool_data")
        .and_then(|v| v["sent"].as_u64())
        .expect("the producer's summary");
    let acked: BTreeSet<String> = producer
        .values("producer_send_success")
        .into_iter()
        .collect();
    let failed = producer.values("producer_send_error");
    println!(
        "producer: {sent} sent, {} acknowledged, {} failed",
        acked.len(),
        failed.len()
    );
    assert_eq!(
        acked.len() + failed.len(),
        sent as usize,
        "every send reported once"
    );
    eventually(
        "every acknowledged message consumed",
        Duration::from_secs(120),
        || {
            let consumed: BTreeSet<String> = consumer.values("record_data").into_iter().collect();
            acked.is_subset(&consumed).then_some(())
        },
    );
    let mut times: BTreeMap<String, usize> = BTreeMap::new();
    for v in consumer.values("record_data") {
        *times.entry(v).or_default() += 1;
    }
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    let unsent: Vec<_> = times
        .keys()
        .filter(|v| v.parse::<u64>().map_or(true, |n| n >= sent))
        .collect();
    println!(
        "consumer: {} records, {} distinct",
        times.values().sum::<usize>(),
        times.len()
    );
    assert!(twice.is_empty(), "consumed more than once: {twice:?}");
    assert!(unsent.is_empty(), "consumed but never sent: {unsent:?}");
    assert!(
        failed.len() < sent as usize / 10,
        "most sends acknowledged through the kills: {} failed",
        failed.len()
    );
}

/// Kafka 4.4's tools, then 3.9's (which negotiate older versions of
/// Produce, Fetch, the group APIs and InitProducerId).
#[test]
fn every_acknowledged_message_is_consumed_once_across_leader_kills() {
    let current = KafkaDist::locate().expect("the reference Kafka");
    scenario(&current, KafkaDist::version());
    let older = KafkaDist::locate_clients_3_9().expect("Kafka's 3.9 tools");
    scenario(&older, KafkaDist::clients_3_9_version());
}

//! Kafka's own command-line tools (the Java client of the reference Kafka)
//! against Strand and against the reference Kafka, side by side (issue 16,
//! item 3): the same session of `kafka-topics`, the console producer and
//! consumer, `kafka-consumer-groups`, `kafka-configs`, `kafka-get-offsets`,
//! `kafka-delete-records`, `kafka-transactions`, `kafka-leader-election`,
//! `kafka-log-dirs`, `kafka-metadata-quorum`, `kafka-cluster`,
//! `kafka-features`, `kafka-reassign-partitions` (three nodes), broker
//! configs with `kafka-configs`, and the producer and consumer perf tests
//! runs on both;
//! each step's
//! exit status and output (ids, addresses and timestamps masked) must be the
//! same, except the lines KNOWN lists with their reasons (COMPATIBILITY.md).
//! A listed difference that no longer shows fails too.
//!
//! Needs the reference Kafka: `compat-tests/scripts/fetch-kafka.sh`.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use strand_compat_tests::cluster::{Cluster, ClusterSpec, KafkaDist, Server};

/// Which server printed a line the other did not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Kafka,
    Strand,
}

/// (step, side, line, why): a line of a step's output that only one side
/// prints, on purpose. Each one is in COMPATIBILITY.md.
const ELR: &str = "Kafka 4.4 formats with eligible.leader.replicas.version=1, which writes a cluster-wide min.insync.replicas (DYNAMIC_DEFAULT_BROKER_CONFIG); Strand has no such record";
const REMOVED_IN_KAFKA_4: &str =
    "a topic config Kafka 4.0 removed; Strand still accepts it (clients of 3.x set it)";
const EXTENSION: &str = "Strand's acknowledgement policies (issue 15), its own topic configs";
const FEATURES: &str = "Strand supports metadata.version and transaction.version only; advertising kraft.version 1 (KIP-853), group.version (KIP-848), share.version (KIP-932), streams.version (KIP-1071) or eligible.leader.replicas.version would tell clients to use what it does not have";

type Known = (&'static str, Side, &'static str, &'static str);

const KNOWN: &[Known] = &[
    ("features", Side::Kafka, "Feature: eligible.leader.replicas.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    ("features", Side::Kafka, "Feature: group.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    ("features", Side::Kafka, "Feature: kraft.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    ("features", Side::Kafka, "Feature: share.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    ("features", Side::Kafka, "Feature: streams.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    ("features after a downgrade", Side::Kafka, "Feature: eligible.leader.replicas.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    ("features after a downgrade", Side::Kafka, "Feature: group.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    ("features after a downgrade", Side::Kafka, "Feature: kraft.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    ("features after a downgrade", Side::Kafka, "Feature: share.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    ("features after a downgrade", Side::Kafka, "Feature: streams.version SupportedMinVersion: N SupportedMaxVersion: N FinalizedVersionLevel: N Epoch: N", FEATURES),
    (
        "describe",
        Side::Kafka,
        "Topic: quick\tTopicId: ID\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: min.insync.replicas=1",
        ELR,
    ),
    (
        "describe cluster-wide broker configs",
        Side::Kafka,
        "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}",
        ELR,
    ),
    (
        "describe",
        Side::Strand,
        "Topic: quick\tTopicId: ID\tPartitionCount: 3\tReplicationFactor: 1\tConfigs:",
        ELR,
    ),
    (
        "describe every topic config",
        Side::Kafka,
        "  errors.deadletterqueue.group.enable=false sensitive=false synonyms={}",
        "share groups' dead-letter queue: a Kafka 4.x topic config Strand does not have yet",
    ),
    (
        "describe every topic config",
        Side::Kafka,
        "  max.decompressed.message.bytes=2147483639 sensitive=false synonyms={DEFAULT_CONFIG:max.decompressed.message.bytes=2147483639}",
        "a Kafka 4.x topic config Strand does not have yet (Strand streams decompression in bounded memory, tests/hostile.rs)",
    ),
    (
        "describe every topic config",
        Side::Kafka,
        "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1, DEFAULT_CONFIG:min.insync.replicas=1}",
        ELR,
    ),
    (
        "describe every topic config",
        Side::Strand,
        "  min.insync.replicas=1 sensitive=false synonyms={DEFAULT_CONFIG:min.insync.replicas=1}",
        ELR,
    ),
    (
        "describe every topic config",
        Side::Kafka,
        "  remote.copy.lag.bytes=-1 sensitive=false synonyms={DEFAULT_CONFIG:log.remote.copy.lag.bytes=-1}",
        "tiered storage: a Kafka 4.x topic config Strand does not have yet",
    ),
    (
        "describe every topic config",
        Side::Kafka,
        "  remote.copy.lag.ms=0 sensitive=false synonyms={DEFAULT_CONFIG:log.remote.copy.lag.ms=0}",
        "tiered storage: a Kafka 4.x topic config Strand does not have yet",
    ),
    (
        "describe every topic config",
        Side::Kafka,
        "  remote.log.copy.disable=false sensitive=false synonyms={}",
        "tiered storage: a Kafka 4.x topic config Strand does not have yet",
    ),
    (
        "describe every topic config",
        Side::Kafka,
        "  remote.log.delete.on.disable=false sensitive=false synonyms={}",
        "tiered storage: a Kafka 4.x topic config Strand does not have yet",
    ),
    (
        "describe every topic config",
        Side::Strand,
        "  message.downconversion.enable=true sensitive=false synonyms={DEFAULT_CONFIG:log.message.downconversion.enable=true}",
        REMOVED_IN_KAFKA_4,
    ),
    (
        "describe every topic config",
        Side::Strand,
        "  message.format.version=3.0-IV1 sensitive=false synonyms={DEFAULT_CONFIG:log.message.format.version=3.0-IV1}",
        REMOVED_IN_KAFKA_4,
    ),
    (
        "describe every topic config",
        Side::Strand,
        "  message.timestamp.difference.max.ms=9223372036854775807 sensitive=false synonyms={DEFAULT_CONFIG:log.message.timestamp.difference.max.ms=9223372036854775807}",
        REMOVED_IN_KAFKA_4,
    ),
    (
        "describe every topic config",
        Side::Strand,
        "  strand.acks.downgrade.enable=false sensitive=false synonyms={DEFAULT_CONFIG:strand.acks.downgrade.enable=false}",
        EXTENSION,
    ),
    (
        "describe every topic config",
        Side::Strand,
        "  strand.acks.durable=false sensitive=false synonyms={DEFAULT_CONFIG:strand.acks.durable=false}",
        EXTENSION,
    ),
    (
        "describe every topic config",
        Side::Strand,
        "  strand.acks.eviction.ms=200 sensitive=false synonyms={DEFAULT_CONFIG:strand.acks.eviction.ms=200}",
        EXTENSION,
    ),
    (
        "describe every topic config",
        Side::Strand,
        "  strand.acks.policy=all-in-sync sensitive=false synonyms={DEFAULT_CONFIG:strand.acks.policy=all-in-sync}",
        EXTENSION,
    ),
    (
        "describe every topic config",
        Side::Strand,
        "  strand.acks.replicas=2 sensitive=false synonyms={DEFAULT_CONFIG:strand.acks.replicas=2}",
        EXTENSION,
    ),
];

/// On three nodes: none yet known.
const KNOWN_3_NODES: &[Known] = &[];

/// One step: a tool, its arguments (`{B}` is the bootstrap address, `{DIR}` a
/// scratch directory), its standard input, and whether its output lines are
/// compared as a set (a consumer reads partitions in no fixed order).
struct Step {
    name: &'static str,
    tool: &'static str,
    args: &'static str,
    stdin: &'static str,
    unordered: bool,
    /// Every number masked: offsets of the metadata log and times, which
    /// differ between any two clusters.
    numbers_masked: bool,
    /// Only the lines holding this are compared (a perf test's summary, not
    /// its progress lines, which come as often as the run is slow).
    keep: Option<&'static str>,
}

const fn step(name: &'static str, tool: &'static str, args: &'static str) -> Step {
    Step {
        name,
        tool,
        args,
        stdin: "",
        unordered: false,
        numbers_masked: false,
        keep: None,
    }
}

/// A step whose output's numbers are masked.
const fn step_n(name: &'static str, tool: &'static str, args: &'static str) -> Step {
    Step {
        numbers_masked: true,
        ..step(name, tool, args)
    }
}

/// Both perf tests: 20,000 records of 100 B, acks=all; the producer's
/// summary line only.
const PRODUCER_PERF: Step = Step {
    keep: Some("th."),
    ..step_n("producer perf test", "kafka-producer-perf-test", "--topic perf --num-records 20000 --throughput -1 --record-size 100 --bootstrap-server {B} --command-property acks=all")
};
const CONSUMER_PERF: Step = step_n(
    "consumer perf test",
    "kafka-consumer-perf-test",
    "--bootstrap-server {B} --topic perf --num-records 20000 --timeout 60000",
);

const SESSION: &[Step] = &[
    step("create", "kafka-topics", "--bootstrap-server {B} --create --topic quick --partitions 3 --replication-factor 1"),
    step("create again", "kafka-topics", "--bootstrap-server {B} --create --topic quick --partitions 3 --replication-factor 1"),
    step("create with a bad config", "kafka-topics", "--bootstrap-server {B} --create --topic bad --config retention.ms=soon"),
    step("list", "kafka-topics", "--bootstrap-server {B} --list"),
    step("describe", "kafka-topics", "--bootstrap-server {B} --describe --topic quick"),
    step("add partitions", "kafka-topics", "--bootstrap-server {B} --alter --topic quick --partitions 4"),
    step("fewer partitions", "kafka-topics", "--bootstrap-server {B} --alter --topic quick --partitions 2"),
    Step {
        stdin: "k1:v1\nk2:v2\nk3:v3\nk4:v4\n",
        ..step("produce", "kafka-console-producer", "--bootstrap-server {B} --topic quick --reader-property parse.key=true --reader-property key.separator=: --producer-property partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner")
    },
    Step {
        unordered: true,
        ..step("consume", "kafka-console-consumer", "--bootstrap-server {B} --topic quick --from-beginning --max-messages 4 --formatter-property print.key=true --formatter-property print.partition=true --formatter-property print.offset=true --group g1")
    },
    // The first group lookup when the consume above could not run (Kafka
    // 3.9's consumer has no --formatter-property): Kafka creates
    // __consumer_offsets for it, which on a busy machine outlasts the tool's
    // 5 s default (seen in a run: "Timed out waiting for a node assignment").
    step("group describe", "kafka-consumer-groups", "--bootstrap-server {B} --describe --group g1 --timeout 60000"),
    step("group list", "kafka-consumer-groups", "--bootstrap-server {B} --list"),
    step("group reset dry run", "kafka-consumer-groups", "--bootstrap-server {B} --reset-offsets --group g1 --topic quick --to-earliest --dry-run"),
    step("group reset", "kafka-consumer-groups", "--bootstrap-server {B} --reset-offsets --group g1 --topic quick:0,1 --to-offset 1 --execute"),
    step("group describe after reset", "kafka-consumer-groups", "--bootstrap-server {B} --describe --group g1 --offsets"),
    step("describe a missing group", "kafka-consumer-groups", "--bootstrap-server {B} --describe --group nobody"),
    step("alter topic config", "kafka-configs", "--bootstrap-server {B} --entity-type topics --entity-name quick --alter --add-config retention.ms=1000000,cleanup.policy=compact"),
    step("describe every topic config", "kafka-configs", "--bootstrap-server {B} --entity-type topics --entity-name quick --describe --all"),
    step("describe topic config", "kafka-configs", "--bootstrap-server {B} --entity-type topics --entity-name quick --describe"),
    step("delete topic config", "kafka-configs", "--bootstrap-server {B} --entity-type topics --entity-name quick --alter --delete-config cleanup.policy"),
    step("describe topic config after delete", "kafka-configs", "--bootstrap-server {B} --entity-type topics --entity-name quick --describe"),
    step("bad topic config", "kafka-configs", "--bootstrap-server {B} --entity-type topics --entity-name quick --alter --add-config no.such.config=1"),
    step("alter cluster-wide broker config", "kafka-configs", "--bootstrap-server {B} --entity-type brokers --entity-default --alter --add-config log.retention.ms=1000000,log.cleaner.delete.retention.ms=5000"),
    step("alter broker config", "kafka-configs", "--bootstrap-server {B} --entity-type brokers --entity-name 1 --alter --add-config log.retention.ms=2000000"),
    step("describe cluster-wide broker configs", "kafka-configs", "--bootstrap-server {B} --entity-type brokers --entity-default --describe"),
    step("describe broker configs", "kafka-configs", "--bootstrap-server {B} --entity-type brokers --entity-name 1 --describe"),
    step("topic config from a broker config", "kafka-configs", "--bootstrap-server {B} --entity-type topics --entity-name quick --describe"),
    step("alter a static broker config", "kafka-configs", "--bootstrap-server {B} --entity-type brokers --entity-name 1 --alter --add-config auto.create.topics.enable=false"),
    step("bad broker config value", "kafka-configs", "--bootstrap-server {B} --entity-type brokers --entity-default --alter --add-config log.retention.ms=soon"),
    step("delete broker configs", "kafka-configs", "--bootstrap-server {B} --entity-type brokers --entity-name 1 --alter --delete-config log.retention.ms"),
    step("delete cluster-wide broker configs", "kafka-configs", "--bootstrap-server {B} --entity-type brokers --entity-default --alter --delete-config log.retention.ms,log.cleaner.delete.retention.ms"),
    step("describe broker configs after delete", "kafka-configs", "--bootstrap-server {B} --entity-type brokers --entity-name 1 --describe"),
    step("get offsets", "kafka-get-offsets", "--bootstrap-server {B} --topic quick"),
    step("get earliest offsets", "kafka-get-offsets", "--bootstrap-server {B} --topic quick --time earliest"),
    step("delete records", "kafka-delete-records", "--bootstrap-server {B} --offset-json-file {DIR}/delete.json"),
    step("get offsets after delete", "kafka-get-offsets", "--bootstrap-server {B} --topic quick --time earliest"),
    step("group delete", "kafka-consumer-groups", "--bootstrap-server {B} --delete --group g1"),
    step("transactions", "kafka-transactions", "--bootstrap-server {B} list"),
    step("preferred leader election", "kafka-leader-election", "--bootstrap-server {B} --election-type PREFERRED --topic quick --partition 0"),
    step("log dirs", "kafka-log-dirs", "--bootstrap-server {B} --describe --topic-list quick"),
    step_n("metadata quorum", "kafka-metadata-quorum", "--bootstrap-server {B} describe --status"),
    step_n("metadata quorum replication", "kafka-metadata-quorum", "--bootstrap-server {B} describe --replication"),
    step("cluster id", "kafka-cluster", "cluster-id --bootstrap-server {B}"),
    step_n("features", "kafka-features", "--bootstrap-server {B} describe"),
    step("feature upgrade to the current level", "kafka-features", "--bootstrap-server {B} upgrade --feature transaction.version=2"),
    step("feature downgrade", "kafka-features", "--bootstrap-server {B} downgrade --feature transaction.version=1"),
    step("feature downgrade dry run", "kafka-features", "--bootstrap-server {B} downgrade --feature transaction.version=0 --dry-run"),
    step("feature upgrade past the supported level", "kafka-features", "--bootstrap-server {B} upgrade --feature transaction.version=3"),
    step("feature upgrade to a lower level", "kafka-features", "--bootstrap-server {B} upgrade --feature transaction.version=0"),
    step("metadata.version downgrade", "kafka-features", "--bootstrap-server {B} downgrade --feature metadata.version=21"),
    step("metadata.version unsafe downgrade", "kafka-features", "--bootstrap-server {B} downgrade --unsafe --feature metadata.version=21"),
    step("unknown feature", "kafka-features", "--bootstrap-server {B} upgrade --feature foo.version=1"),
    step_n("features after a downgrade", "kafka-features", "--bootstrap-server {B} describe"),
    step("feature upgrade back", "kafka-features", "--bootstrap-server {B} upgrade --feature transaction.version=2"),
    PRODUCER_PERF,
    CONSUMER_PERF,
    step("delete topic", "kafka-topics", "--bootstrap-server {B} --delete --topic quick"),
    step("describe a missing topic", "kafka-topics", "--bootstrap-server {B} --describe --topic quick"),
];

const DELETE_JSON: &str =
    r#"{"partitions": [{"topic": "quick", "partition": 0, "offset": 1}], "version": 1}"#;

/// A step's exit status and output lines, masked.
fn run_step(dist: &KafkaDist, cluster: &Cluster, dir: &Path, s: &Step) -> Vec<String> {
    let bootstrap = cluster.bootstrap();
    let args = s
        .args
        .replace("{B}", &bootstrap)
        .replace("{DIR}", &dir.display().to_string());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-tests/scripts/kafka-tool.sh");
    let mut child = Command::new(script)
        .arg(s.tool)
        .args(args.split(' '))
        .env("STRAND_KAFKA_DIR", &dist.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a Kafka tool");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(s.stdin.as_bytes())
        .expect("the tool's input");
    let out = child.wait_with_output().expect("the tool's output");
    // A line apart: stdout need not end in a newline (3.9's tools).
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = vec![format!("exit {}", out.status.code().unwrap_or(-1))];
    let kept = |l: &&str| s.keep.is_none_or(|k| l.contains(k));
    lines.extend(
        text.lines()
            .filter(kept)
            // The cluster's directory (the log dirs a reassignment prints).
            .map(|l| l.replace(&cluster.dir().display().to_string(), "DIR"))
            .map(|l| same_dir_for_each_replica(&l))
            .filter_map(|l| mask(&l, &bootstrap))
            .map(|l| {
                if s.numbers_masked {
                    // Column widths follow the numbers' lengths.
                    mask_numbers(&l)
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                } else {
                    l
                }
            }),
    );
    if s.unordered {
        lines.sort();
    }
    lines
}

/// Masks what differs between any two runs (addresses, ids, times); drops
/// log lines and blank ones.
fn mask(line: &str, bootstrap: &str) -> Option<String> {
    let line = line.trim_end();
    // Log lines (`[2026-...] WARN ...`) and the tools' advertisements.
    if line.is_empty() || line.starts_with("[20") || line.contains("KIP-848") {
        return None;
    }
    let mut out = line.replace(bootstrap, "BOOTSTRAP");
    for key in ["TopicId:", "ClusterId:", "Cluster ID:"] {
        if let Some(at) = out.find(key) {
            let after = at + key.len();
            let start = out[after..]
                .find(|c: char| !c.is_whitespace())
                .map_or(out.len(), |e| after + e);
            let end = out[start..]
                .find(|c: char| c.is_whitespace())
                .map_or(out.len(), |e| start + e);
            out.replace_range(start..end, "ID");
        }
    }
    // kafka-log-dirs prints each node's directory.
    let key = "\"logDir\":\"";
    let mut from = 0;
    while let Some(at) = out[from..].find(key) {
        let start = from + at + key.len();
        let Some(len) = out[start..].find('"') else {
            break;
        };
        out.replace_range(start..start + len, "DIR");
        from = start + "DIR".len();
    }
    Some(out)
}

/// Which of a node's log directories holds a replica is a tie-break of
/// placement (Kafka's and Strand's differ): a reassignment's `log_dirs`
/// name the node's directory (`DIR/nodeN-dirK` as `DIR/nodeN`), and
/// kafka-log-dirs' answer becomes each broker's directories (their errors)
/// with the partitions they hold together.
fn same_dir_for_each_replica(line: &str) -> String {
    if line.starts_with("{\"brokers\":") {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            return line.to_string();
        };
        let brokers = v["brokers"].as_array().cloned().unwrap_or_default();
        let summary: Vec<String> = brokers
            .iter()
            .map(|b| {
                let dirs = b["logDirs"].as_array().cloned().unwrap_or_default();
                let mut parts: Vec<String> = dirs
                    .iter()
                    .flat_map(|d| d["partitions"].as_array().cloned().unwrap_or_default())
                    .map(|p| format!("{}:{}", p["partition"], p["isFuture"]))
                    .collect();
                parts.sort();
                let errors: Vec<String> = dirs.iter().map(|d| d["error"].to_string()).collect();
                format!(
                    "broker {}: {} dirs, errors {errors:?}, holding {parts:?}",
                    b["broker"],
                    dirs.len()
                )
            })
            .collect();
        return summary.join("; ");
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("-dir") {
        let digits = rest[at + 4..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - at - 4);
        let after_node = rest[..at]
            .rfind("/node")
            .is_some_and(|n| rest[n + 5..at].chars().all(|c| c.is_ascii_digit()));
        if digits > 0 && after_node {
            out.push_str(&rest[..at]);
        } else {
            out.push_str(&rest[..at + 4]);
            rest = &rest[at + 4..];
            continue;
        }
        rest = &rest[at + 4 + digits..];
    }
    out.push_str(rest);
    out
}

/// Every run of digits as `N`.
fn mask_numbers(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_number = false;
    for c in line.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

/// What a session runs on: how many nodes, and its steps.
#[derive(Clone, Copy)]
struct Layout {
    nodes: usize,
    /// Log directories of each node beyond its first (JBOD).
    extra_log_dirs: usize,
    steps: &'static [Step],
}

/// A group of the consumer protocol (KIP-848), with Kafka 4.4's tools
/// (3.9's consumer has the protocol only as a preview): the console
/// consumer leaves when done, so the group is described empty, with its
/// offsets.
const SESSION_848: &[Step] = &[
    step("create", "kafka-topics", "--bootstrap-server {B} --create --topic quick --partitions 4 --replication-factor 1"),
    Step {
        stdin: "k1:v1\nk2:v2\nk3:v3\nk4:v4\n",
        ..step("produce", "kafka-console-producer", "--bootstrap-server {B} --topic quick --reader-property parse.key=true --reader-property key.separator=: --producer-property partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner")
    },
    Step {
        unordered: true,
        ..step("consume as a consumer-protocol member", "kafka-console-consumer", "--bootstrap-server {B} --topic quick --from-beginning --max-messages 4 --timeout-ms 60000 --group g848 --consumer-property group.protocol=consumer")
    },
    step("describe a consumer-protocol group", "kafka-consumer-groups", "--bootstrap-server {B} --describe --group g848 --timeout 60000"),
    step("state of a consumer-protocol group", "kafka-consumer-groups", "--bootstrap-server {B} --describe --group g848 --state"),
    step("members of a consumer-protocol group", "kafka-consumer-groups", "--bootstrap-server {B} --describe --group g848 --members"),
    step("groups with their types", "kafka-consumer-groups", "--bootstrap-server {B} --list --type"),
    step("consumer-protocol groups", "kafka-consumer-groups", "--bootstrap-server {B} --list --type consumer"),
    step("list classic groups", "kafka-consumer-groups", "--bootstrap-server {B} --list --type classic"),
];

const ONE_NODE_848: Layout = Layout {
    nodes: 1,
    extra_log_dirs: 0,
    steps: SESSION_848,
};

const ONE_NODE: Layout = Layout {
    nodes: 1,
    extra_log_dirs: 0,
    steps: SESSION,
};

/// Three combined nodes, replication factor 3: the steps whose answers a
/// cluster changes (placement, in-sync replicas, leadership, the quorum);
/// node ids are masked where placement picks them, which differs between
/// any two clusters.
const THREE_NODES: Layout = Layout {
    nodes: 3,
    extra_log_dirs: 1,
    steps: SESSION_3,
};

const SESSION_3: &[Step] = &[
    step("create", "kafka-topics", "--bootstrap-server {B} --create --topic quick --partitions 3 --replication-factor 3 --config min.insync.replicas=2"),
    step("create with too many replicas", "kafka-topics", "--bootstrap-server {B} --create --topic four --replication-factor 4"),
    step_n("describe", "kafka-topics", "--bootstrap-server {B} --describe --topic quick"),
    step("under-replicated partitions", "kafka-topics", "--bootstrap-server {B} --describe --under-replicated-partitions"),
    step("under min ISR partitions", "kafka-topics", "--bootstrap-server {B} --describe --under-min-isr-partitions"),
    Step {
        stdin: "k1:v1\nk2:v2\nk3:v3\nk4:v4\nk5:v5\nk6:v6\n",
        ..step("produce", "kafka-console-producer", "--bootstrap-server {B} --topic quick --producer-property acks=all --reader-property parse.key=true --reader-property key.separator=: --producer-property partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner")
    },
    Step {
        unordered: true,
        ..step("consume", "kafka-console-consumer", "--bootstrap-server {B} --topic quick --from-beginning --max-messages 6 --formatter-property print.key=true --formatter-property print.partition=true --formatter-property print.offset=true --group g3")
    },
    step("get offsets", "kafka-get-offsets", "--bootstrap-server {B} --topic quick"),
    step("group describe", "kafka-consumer-groups", "--bootstrap-server {B} --describe --group g3 --offsets"),
    step("preferred leader election", "kafka-leader-election", "--bootstrap-server {B} --election-type PREFERRED --all-topic-partitions"),
    step_n("log dirs", "kafka-log-dirs", "--bootstrap-server {B} --describe --topic-list quick"),
    step_n("metadata quorum", "kafka-metadata-quorum", "--bootstrap-server {B} describe --status"),
    PRODUCER_PERF,
    CONSUMER_PERF,
    step("no reassignments", "kafka-reassign-partitions", "--bootstrap-server {B} --list"),
    step_n("generate a reassignment", "kafka-reassign-partitions", "--bootstrap-server {B} --topics-to-move-json-file {DIR}/move.json --broker-list 1,2,3 --generate"),
    step_n("reassign with a throttle", "kafka-reassign-partitions", "--bootstrap-server {B} --reassignment-json-file {DIR}/reassign.json --execute --throttle 50000000"),
    step_n("verify the reassignment", "kafka-reassign-partitions", "--bootstrap-server {B} --reassignment-json-file {DIR}/reassign.json --verify"),
    step_n("move a replica to another log directory", "kafka-reassign-partitions", "--bootstrap-server {B} --reassignment-json-file {DIR}/reassign-dirs.json --execute"),
    step_n("log dirs after the move", "kafka-log-dirs", "--bootstrap-server {B} --describe --topic-list quick --broker-list 1"),
    step("cancel a finished reassignment", "kafka-reassign-partitions", "--bootstrap-server {B} --reassignment-json-file {DIR}/reassign.json --cancel"),
    step_n("describe after the reassignment", "kafka-topics", "--bootstrap-server {B} --describe --topic quick"),
    step("reassign to an unknown broker", "kafka-reassign-partitions", "--bootstrap-server {B} --reassignment-json-file {DIR}/reassign-unknown.json --execute"),
    step("delete topic", "kafka-topics", "--bootstrap-server {B} --delete --topic quick"),
];

/// Partition 0 of `quick` onto two of the three nodes (every replica in
/// sync, so the move completes at once and the steps read the same on
/// every run).
const REASSIGN_JSON: &str =
    r#"{"version":1,"partitions":[{"topic":"quick","partition":0,"replicas":[2,1]}]}"#;
const MOVE_JSON: &str = r#"{"version":1,"topics":[{"topic":"quick"}]}"#;
const REASSIGN_UNKNOWN_JSON: &str =
    r#"{"version":1,"partitions":[{"topic":"quick","partition":0,"replicas":[1,9]}]}"#;

fn session(server: Server, dist: &KafkaDist, layout: Layout) -> Vec<(&'static str, Vec<String>)> {
    let name = server.name();
    let rf = layout.nodes.to_string();
    let mut spec = ClusterSpec::combined(layout.nodes)
        .with_extra_log_dirs(layout.extra_log_dirs)
        .with_override("num.partitions", "1")
        .with_override("default.replication.factor", &rf)
        .with_override("group.initial.rebalance.delay.ms", "0");
    if layout.nodes > 1 {
        spec = spec
            .with_override("offsets.topic.replication.factor", &rf)
            .with_override("transaction.state.log.replication.factor", &rf);
    }
    let cluster = Cluster::start_server(server, spec).unwrap_or_else(|e| panic!("{name}: {e}"));
    let dir = tempfile::tempdir().expect("a scratch directory");
    std::fs::write(dir.path().join("delete.json"), DELETE_JSON).expect("delete.json");
    std::fs::write(dir.path().join("reassign.json"), REASSIGN_JSON).expect("reassign.json");
    std::fs::write(dir.path().join("move.json"), MOVE_JSON).expect("move.json");
    std::fs::write(
        dir.path().join("reassign-unknown.json"),
        REASSIGN_UNKNOWN_JSON,
    )
    .expect("reassign-unknown.json");
    // Partition 0 of `quick` (on 2 and 1 after `reassign.json`) with broker
    // 1's replica in its last log directory.
    let last_dir = cluster.log_dirs(1).last().cloned().expect("a log dir");
    std::fs::write(
        dir.path().join("reassign-dirs.json"),
        format!(
            r#"{{"version":1,"partitions":[{{"topic":"quick","partition":0,"replicas":[2,1],"log_dirs":["any","{}"]}}]}}"#,
            last_dir.display()
        ),
    )
    .expect("reassign-dirs.json");
    layout
        .steps
        .iter()
        .map(|s| (s.name, run_step(dist, &cluster, dir.path(), s)))
        .collect()
}

#[test]
fn kafkas_tools_see_what_they_see_on_kafka() {
    let dist = KafkaDist::locate().expect("the reference Kafka");
    side_by_side(&dist, &dist, KNOWN, ONE_NODE);
}

/// A consumer-protocol group described and listed by Kafka 4.4's
/// `kafka-consumer-groups`.
#[test]
fn kafkas_tools_see_consumer_protocol_groups_as_on_kafka() {
    let dist = KafkaDist::locate().expect("the reference Kafka");
    side_by_side(&dist, &dist, &[], ONE_NODE_848);
}

/// The steps a cluster changes, on three nodes of each.
#[test]
fn kafkas_tools_on_three_nodes_see_what_they_see_on_kafka() {
    let dist = KafkaDist::locate().expect("the reference Kafka");
    side_by_side(&dist, &dist, KNOWN_3_NODES, THREE_NODES);
}

/// The same session with the tools (and Java client) of the 3.9 line, which
/// negotiate older versions of most APIs, against Strand and against the
/// reference Kafka 4.x broker.
#[test]
fn kafkas_3_9_tools_see_what_they_see_on_kafka() {
    let dist = KafkaDist::locate().expect("the reference Kafka");
    let tools = KafkaDist::locate_clients_3_9().expect("Kafka's 3.9 tools");
    side_by_side(&dist, &tools, KNOWN, ONE_NODE);
}

/// Runs the session with `tools` against Strand and against the reference
/// Kafka of `dist`; fails on a difference `known` does not list, and on a
/// listed one that no longer shows.
fn side_by_side(dist: &KafkaDist, tools: &KafkaDist, known: &[Known], layout: Layout) {
    let strand = session(Server::Strand(common::strand_bin()), tools, layout);
    let kafka = session(Server::Kafka(dist.clone()), tools, layout);
    let mut unexpected = Vec::new();
    let mut seen_known = vec![false; known.len()];
    for ((name, k), (_, s)) in kafka.iter().zip(&strand) {
        println!("### {name}");
        // A line is a difference when only one side printed it (as many
        // times); steps print sorted or keyed lines, so order adds nothing.
        let only = |a: &[String], b: &[String]| -> Vec<String> {
            let mut rest = b.to_vec();
            a.iter()
                .filter(|l| match rest.iter().position(|r| r == *l) {
                    Some(i) => {
                        rest.swap_remove(i);
                        false
                    }
                    None => true,
                })
                .cloned()
                .collect()
        };
        let diffs = only(k, s)
            .into_iter()
            .map(|l| (Side::Kafka, l))
            .chain(only(s, k).into_iter().map(|l| (Side::Strand, l)));
        for l in k {
            println!("    {l}");
        }
        for (side, line) in diffs {
            println!("  {side:?} only: {line}");
            match known
                .iter()
                .position(|(st, sd, l, _)| st == name && *sd == side && *l == line)
            {
                Some(j) => seen_known[j] = true,
                None => unexpected.push(format!("{name}: {side:?} only: {line}")),
            }
        }
    }
    let vanished: Vec<String> = known
        .iter()
        .zip(&seen_known)
        .filter(|(_, seen)| !**seen)
        .map(|((st, side, l, why), _)| format!("{st}: {side:?} only: {l} ({why})"))
        .collect();
    assert!(
        unexpected.is_empty() && vanished.is_empty(),
        "differences from Kafka:\n  {}\nlisted differences that no longer show:\n  {}",
        unexpected.join("\n  "),
        vanished.join("\n  ")
    );
}

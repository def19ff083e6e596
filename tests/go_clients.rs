//! Go clients against Strand, one node and three (issue 16, item 5):
//! `compat-tests/go-clients` drives IBM/sarama (admin, an idempotent
//! acks=all producer, a sticky consumer group that commits, transactions
//! read back under read_committed), segmentio/kafka-go (topic admin, an
//! acks=all writer, a reader group committing each message) and franz-go's
//! kadm (topics, configs, partitions, groups, offsets, DeleteRecords), each
//! asserting what a service relies on: every value read once, commits at
//! the partitions' ends, aborted records never shown, admin answers as
//! Kafka gives them.
//!
//! Needs the binary: `compat-tests/scripts/build-go-clients.sh`
//! (`scripts/test.sh` runs it and sets STRAND_GO_CLIENTS).

mod common;

use std::path::PathBuf;
use std::process::Command;
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

fn binary() -> PathBuf {
    let bin = std::env::var_os("STRAND_GO_CLIENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            strand_compat_tests::harness::strand_cache().join("go-clients/go-clients")
        });
    assert!(
        bin.is_file(),
        "{} is missing: run compat-tests/scripts/build-go-clients.sh (or set STRAND_GO_CLIENTS)",
        bin.display()
    );
    bin
}

fn run_all(nodes: usize) {
    let spec = ClusterSpec::combined(nodes)
        .with_override("default.replication.factor", nodes.to_string())
        .with_override("offsets.topic.replication.factor", nodes.to_string())
        .with_override(
            "transaction.state.log.replication.factor",
            nodes.to_string(),
        )
        .with_override("transaction.state.log.min.isr", nodes.min(2).to_string())
        .with_override("group.initial.rebalance.delay.ms", "0");
    let cluster = Cluster::start(&common::strand_bin(), spec).expect("a cluster");
    for client in ["sarama", "kafka-go", "kadm"] {
        let out = Command::new(binary())
            .args(["-bootstrap", &cluster.bootstrap()])
            .args(["-rf", &nodes.to_string()])
            .args(["-client", client])
            .output()
            .expect("go-clients runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("{nodes} node(s), {client}: {}", text.trim_end());
        assert!(out.status.success(), "{client} on {nodes} node(s):\n{text}");
    }
}

#[test]
fn sarama_kafka_go_and_kadm_on_one_node_and_three() {
    run_all(1);
    run_all(3);
}

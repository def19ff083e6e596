//! franz-go's own kgo tests (its unit tests and the integration tests that
//! run against the brokers `KGO_SEEDS` names) against Strand, one node and
//! three (issue 16, item 5). Every test of
//! `compat-tests/franz-go-must-pass.txt` must pass; the list only grows.
//! What the suite skips or fails here, and against the reference Kafka, is
//! in COMPATIBILITY.md.
//!
//! Needs the test binary: `compat-tests/scripts/build-franz-go.sh`
//! (`scripts/test.sh` runs it and sets STRAND_FRANZ_GO_TEST).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

fn kgo_test_binary() -> PathBuf {
    let bin = std::env::var_os("STRAND_FRANZ_GO_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            strand_compat_tests::harness::strand_cache().join("franz-go-v1.22.3/kgo.test")
        });
    assert!(
        bin.is_file(),
        "{} is missing: run compat-tests/scripts/build-franz-go.sh (or set STRAND_FRANZ_GO_TEST)",
        bin.display()
    );
    bin
}

fn names(file: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("compat-tests")
        .join(file);
    std::fs::read_to_string(path)
        .expect("the must-pass list")
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The must-pass list for a cluster of `nodes`: on three, less the tests
/// that race by their own design there (against the reference Kafka too).
fn must_pass(nodes: usize) -> Vec<String> {
    let except = if nodes > 1 {
        names("franz-go-3node-except.txt")
    } else {
        Vec::new()
    };
    names("franz-go-must-pass.txt")
        .into_iter()
        .filter(|t| !except.contains(t))
        .collect()
}

/// The failing tests' own lines: go's verbose output names whose output
/// follows (`=== RUN`, `=== CONT`, `=== NAME`), parallel tests interleave.
fn failure_lines(text: &str, failed: &[String]) -> String {
    let top = |name: &str| name.split('/').next().unwrap_or("").to_string();
    let mut current = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        for header in [
            "=== RUN",
            "=== CONT",
            "=== NAME",
            "--- FAIL:",
            "--- PASS:",
            "--- SKIP:",
        ] {
            if let Some(rest) = line.trim_start().strip_prefix(header) {
                current = top(rest.split_whitespace().next().unwrap_or(""));
            }
        }
        let failing = failed
            .iter()
            .any(|f| f.split(':').next() == Some(current.as_str()));
        if failing && !line.to_lowercase().contains("deleting") {
            out.push(line);
        }
    }
    out.into_iter().take(200).collect::<Vec<_>>().join("\n")
}

/// Runs the whole kgo suite against `seeds` with topics of `rf` replicas:
/// each top-level test's outcome (PASS, FAIL or SKIP), and the output.
fn run_suite(seeds: &str, rf: usize) -> (BTreeMap<String, String>, String) {
    let bin = kgo_test_binary();
    // Some of its tests read the package's own sources, as `go test` runs
    // them: from the package directory build-franz-go.sh keeps beside it.
    let package = bin
        .parent()
        .expect("the binary's directory")
        .join("src/pkg/kgo");
    let out = Command::new(&bin)
        .current_dir(package)
        .args(["-test.v", "-test.count=1", "-test.timeout=15m"])
        .env("KGO_SEEDS", seeds)
        .env("KGO_TEST_RF", rf.to_string())
        // The suite's own default is 500,000 records per ETL test.
        .env("KGO_TEST_RECORDS", "20000")
        .output()
        .expect("the kgo test binary");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let mut outcomes = BTreeMap::new();
    for line in text.lines() {
        // Top-level results only: subtests are indented.
        let Some(rest) = line.strip_prefix("--- ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        if let (Some(outcome), Some(name)) = (parts.next(), parts.next()) {
            outcomes.insert(name.to_string(), outcome.trim_end_matches(':').to_string());
        }
    }
    (outcomes, text)
}

fn check(nodes: usize) {
    // One suite at a time: it runs its own tests in parallel.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::start(
        &common::strand_bin(),
        ClusterSpec::combined(nodes)
            .with_override("default.replication.factor", nodes.to_string())
            .with_override("group.initial.rebalance.delay.ms", "0"),
    )
    .expect("a Strand cluster");
    let (outcomes, text) = run_suite(&cluster.bootstrap(), nodes);
    let listed = must_pass(nodes);
    let failed: Vec<String> = listed
        .clone()
        .into_iter()
        .filter(|t| outcomes.get(t).map(String::as_str) != Some("PASS"))
        .map(|t| {
            format!(
                "{t}: {}",
                outcomes.get(&t).map_or("not run", String::as_str)
            )
        })
        .collect();
    let unlisted: Vec<&String> = outcomes
        .iter()
        .filter(|(t, o)| o.as_str() == "PASS" && !names("franz-go-must-pass.txt").contains(t))
        .map(|(t, _)| t)
        .collect();
    println!(
        "{nodes} node(s): {} tests, {} passed, unlisted passes: {unlisted:?}",
        outcomes.len(),
        outcomes.values().filter(|o| o.as_str() == "PASS").count()
    );
    assert!(
        failed.is_empty(),
        "must-pass franz-go tests that did not pass on {nodes} node(s):\n  {}\n\n{}",
        failed.join("\n  "),
        failure_lines(&text, &failed)
    );
}

#[test]
fn franz_go_must_pass_on_one_node() {
    check(1);
}

#[test]
fn franz_go_must_pass_on_three_nodes() {
    check(3);
}

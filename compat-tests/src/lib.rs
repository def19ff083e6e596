//! Strand compatibility tests: start `strand` brokers ([`harness::Broker`]) and run
//! upstream client suites against them (librdkafka's own test suite, see
//! [`rdkafka_suite`] and the `librdkafka-suite` / `strand-bench` binaries).
//!
//! [`cluster::Cluster`] starts a multi-node cluster (combined or split controllers and
//! brokers) and kills, stops, resumes and restarts its nodes; the `strand-cluster`
//! binary exposes it as a command (see the README, "A 3-node cluster").
//!
//! Build the suite first: `compat-tests/scripts/build-librdkafka.sh`.
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

// The binaries' command lines (src/bin/).
use clap as _;

pub mod cluster;
pub mod harness;
pub mod rdkafka_security;
pub mod rdkafka_suite;
pub mod wire;

pub use cluster::{Cluster, ClusterSpec, KafkaDist, Server};
pub use harness::Broker;

/// A command line's `KEY=VALUE` (`--override`, `--conf`; the value may
/// hold `=`), for clap's `value_parser`.
pub fn key_value(kv: &str) -> Result<(String, String), String> {
    match kv.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {kv:?}")),
    }
}

/// Default location of the librdkafka tree built by `scripts/build-librdkafka.sh`:
/// `$STRAND_CACHE/librdkafka-2.12.1`.
pub fn default_suite_dir() -> std::path::PathBuf {
    harness::strand_cache().join("librdkafka-2.12.1")
}

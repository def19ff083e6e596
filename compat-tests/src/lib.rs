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

pub mod cluster;
pub mod harness;
pub mod rdkafka_suite;

pub use cluster::{Cluster, ClusterSpec, KafkaDist, Server};
pub use harness::Broker;

/// `$STRAND_CACHE`, defaulting to `$HOME/.cache/strand`: where the scripts build and
/// fetch what the tests need.
pub fn strand_cache() -> std::path::PathBuf {
    std::env::var_os("STRAND_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/strand")
        })
}

/// Default location of the librdkafka tree built by `scripts/build-librdkafka.sh`:
/// `$STRAND_CACHE/librdkafka-2.12.1`.
pub fn default_suite_dir() -> std::path::PathBuf {
    strand_cache().join("librdkafka-2.12.1")
}

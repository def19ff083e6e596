#!/usr/bin/env bash
# Runs every Strand test on a fresh Debian machine: installs what the tests
# need (with the reference Apache Kafka's jars and franz-go's test suite),
# runs clippy and the workspace's unit, property and integration tests (kcat,
# crash, bad input, 3-node cluster, Strand side by side with Kafka, Kafka's
# own tools and verifiable clients, Kafka Streams, franz-go's suite, sarama,
# kafka-go and kadm), the
# chaos profile and the lease probe, builds librdkafka's own test suite and
# runs each must-pass test once: client-side ones against one node, the rest
# against a 3-node cluster. Exits non-zero if anything fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"
source "$here/deps.sh"
strand_apt_install "${STRAND_BUILD_PKGS[@]}" "${STRAND_TEST_PKGS[@]}"
strand_python_env
# The reference Apache Kafka that tests/differential.rs holds Strand against
# (Java 17 and Maven from Debian if missing, jars from Maven Central).
STRAND_KAFKA_DIR="$(compat-tests/scripts/fetch-kafka.sh | tail -n 1)"
export STRAND_KAFKA_DIR
# franz-go's kgo tests, which tests/franz_go.rs runs against Strand (Go from
# Debian if missing, the module through the Go module proxy).
STRAND_FRANZ_GO_TEST="$(compat-tests/scripts/build-franz-go.sh | tail -n 1)"
export STRAND_FRANZ_GO_TEST
# sarama, kafka-go and kadm programs (tests/go_clients.rs).
STRAND_GO_CLIENTS="$(compat-tests/scripts/build-go-clients.sh | tail -n 1)"
export STRAND_GO_CLIENTS

start=$SECONDS
# Each phase's header says when it began, in seconds since the build began.
phase() { echo "== [$((SECONDS - start)) s] $*"; }
phase "cargo build (tests and tools)"
cargo build --workspace --all-targets --quiet

phase "clippy over every target, warnings as errors (the layout's lints: unused crate dependencies, unwrap outside tests)"
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
cargo clippy --workspace --all-targets --quiet -- -D warnings

phase "cargo deny: every dependency's licence allowed, one version of each crate (the known exceptions listed), crates.io only (deny.toml)"
# Advisories need the RustSec database from GitHub: run `cargo deny check
# advisories` where it is reachable.
"$(strand_cargo_deny)" --offline check licenses bans sources

phase "workspace tests, two test binaries at a time (scripts/workspace-tests.sh)"
scripts/workspace-tests.sh

phase "chaos: a 3-node cluster on network namespaces, 120 s of concurrent clients under at least 10 faults of every kind, the history checked (needs root)"
"$CARGO_TARGET_DIR/debug/strand-chaos" \
    --strand "$CARGO_TARGET_DIR/debug/strand" \
    --faultfs "$CARGO_TARGET_DIR/debug/libstrand_faultfs.so" \
    --seed 1 --secs 120 \
    --out "$STRAND_CACHE/chaos"
# A second seed that changes with every commit, so that CI explores
# beyond seed 1; printed, to replay a failure with --seed.
rotating=$(( $(printf '%d' "0x$(git rev-parse --short=7 HEAD 2>/dev/null || echo 0)") % 1000000 + 2 ))
phase "chaos: the same with the commit's rotating seed $rotating"
"$CARGO_TARGET_DIR/debug/strand-chaos" \
    --strand "$CARGO_TARGET_DIR/debug/strand" \
    --faultfs "$CARGO_TARGET_DIR/debug/libstrand_faultfs.so" \
    --seed "$rotating" --secs 120 \
    --out "$STRAND_CACHE/chaos-rotating"

phase "write leases: a partition leader cut off from the cluster takes acks=1 writes for at most one lease, and acks=all loses nothing (needs root)"
# The leader both with the active controller (cutting it off moves the
# controller too) and apart from it.
for acks in 1 all; do
    for leader in controller other; do
        "$CARGO_TARGET_DIR/debug/strand-lease-probe" \
            --strand "$CARGO_TARGET_DIR/debug/strand" \
            --acks "$acks" --leader "$leader" --check \
            --out "$STRAND_CACHE/lease-probe-$acks-$leader"
    done
done

# Every must-pass test runs once, with every listener of every node on
# SASL_SSL (clients as a SCRAM-SHA-512 user, brokers with PLAIN and mutual
# TLS between them, the controller listener on mutual TLS): the client-side
# ones (what a cluster does not change, librdkafka-3node-except.txt) on one
# node, the rest on three; the few upstream runs only without client
# security (librdkafka-plaintext.txt) on one PLAINTEXT node with an
# authorizer and Kafka's kafka-acls. In the SASL_SSL passes four test
# numbers run at once, each against its own fresh node or cluster: the suite
# spends most of its time waiting on its own timeouts and sessions (one at a
# time, the three passes took 27 minutes of CI's 90; so, about 9). The
# PLAINTEXT pass runs one at a time, with the time limits upstream's own CI
# gives (test.c adds 2 to test.timeout.multiplier when CI is set): its tests
# start Kafka's tools, a JVM each, within those limits, and 0119's 20 s at
# 1.0 hold 15 s of consuming and four kafka-acls runs of 1.7 s each here,
# and ran out in a clean run).
suite="$(compat-tests/scripts/build-librdkafka.sh | tail -n 1)"
phase "librdkafka test suite, SASL_SSL: the must-pass tests a cluster does not change, on one node; beside it, the consumer group protocol's (KIP-848, TEST_CONSUMER_GROUP_PROTOCOL=consumer) group tests that pass against Kafka 4.4, on a 3-node SASL_SSL cluster"
# Both passes wait on sessions and timeouts far more than on the CPU.
TEST_CONSUMER_GROUP_PROTOCOL=consumer "$CARGO_TARGET_DIR/debug/librdkafka-suite" \
    --strand "$CARGO_TARGET_DIR/debug/strand" \
    --nodes 3 --jobs 4 \
    --override default.replication.factor=3 \
    --suite "$suite" \
    --security sasl_ssl \
    --must-pass compat-tests/librdkafka-must-pass-consumer.txt \
    --out "$STRAND_CACHE/librdkafka-results-consumer-3node" &
consumer3=$!
"$CARGO_TARGET_DIR/debug/librdkafka-suite" \
    --strand "$CARGO_TARGET_DIR/debug/strand" \
    --suite "$suite" \
    --security sasl_ssl --jobs 4 \
    --list compat-tests/librdkafka-3node-except.txt \
    --except compat-tests/librdkafka-plaintext.txt \
    --except compat-tests/librdkafka-kafka-tools-3.9.txt \
    --must-pass compat-tests/librdkafka-must-pass.txt \
    --out "$STRAND_CACHE/librdkafka-results"
wait "$consumer3"

phase "librdkafka test suite, SASL_SSL: the rest of the must-pass lists (incl. the 3-broker-only one) on a 3-node cluster (default replication factor 3)"
"$CARGO_TARGET_DIR/debug/librdkafka-suite" \
    --strand "$CARGO_TARGET_DIR/debug/strand" \
    --nodes 3 --jobs 4 \
    --override default.replication.factor=3 \
    --suite "$suite" \
    --security sasl_ssl \
    --test-override 0142:connections.max.reauth.ms=10000 \
    --must-pass compat-tests/librdkafka-must-pass.txt \
    --must-pass compat-tests/librdkafka-must-pass-3node.txt \
    --except compat-tests/librdkafka-3node-except.txt \
    --except compat-tests/librdkafka-plaintext.txt \
    --except compat-tests/librdkafka-kafka-tools-3.9.txt \
    --out "$STRAND_CACHE/librdkafka-results-3node"

phase "librdkafka test suite, PLAINTEXT with an authorizer: the tests upstream runs only without client security; beside it, the compaction test with Kafka 3.9's kafka-topics, and the consumer group protocol's tests on one SASL_SSL node"
# The one-node consumer-protocol pass waits on sessions and heartbeats
# like the others: it runs beside the PLAINTEXT pass, which runs one test
# at a time.
TEST_CONSUMER_GROUP_PROTOCOL=consumer "$CARGO_TARGET_DIR/debug/librdkafka-suite" \
    --strand "$CARGO_TARGET_DIR/debug/strand" \
    --suite "$suite" --jobs 3 \
    --security sasl_ssl \
    --must-pass compat-tests/librdkafka-must-pass-consumer.txt \
    --except compat-tests/librdkafka-consumer-1node-except.txt \
    --out "$STRAND_CACHE/librdkafka-results-consumer" &
consumer1=$!
# 0077 waits on segment.ms (10 s) and the cleaner before each of its five
# checks: it runs in the background, on its own node, while the PLAINTEXT
# pass runs (neither is bound by CPU).
STRAND_KAFKA_DIR="$(compat-tests/scripts/fetch-kafka.sh --tools-3.9 | tail -n 1)" \
"$CARGO_TARGET_DIR/debug/librdkafka-suite" \
    --strand "$CARGO_TARGET_DIR/debug/strand" \
    --suite "$suite" \
    --kafka-tool compat-tests/scripts/kafka-tool.sh \
    --test-override 0077:log.cleaner.backoff.ms=1000 \
    --list compat-tests/librdkafka-kafka-tools-3.9.txt \
    --must-pass compat-tests/librdkafka-must-pass.txt \
    --out "$STRAND_CACHE/librdkafka-results-tools-3.9" &
tools39=$!
"$CARGO_TARGET_DIR/debug/librdkafka-suite" \
    --strand "$CARGO_TARGET_DIR/debug/strand" \
    --suite "$suite" \
    --kafka-tool compat-tests/scripts/kafka-tool.sh --timeout-multiplier 3 \
    --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
    --override allow.everyone.if.no.acl.found=true \
    --override super.users=User:admin \
    --list compat-tests/librdkafka-plaintext.txt \
    --must-pass compat-tests/librdkafka-must-pass.txt \
    --out "$STRAND_CACHE/librdkafka-results-plaintext"
wait "$tools39"
wait "$consumer1"

echo "== all tests passed in $((SECONDS - start))s"

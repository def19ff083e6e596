#!/usr/bin/env bash
# Strand against the reference Kafka, every workload of issue 17 in one
# invocation: `strand-vs-kafka` once per configuration (each alternating
# fresh clusters of both systems, REPS repetitions), the tables appended
# to OUT as markdown. A benchmark, not a test: run it as root (the cold
# page-cache run empties the cache) on a quiet machine, after a release
# build:
#
#   cargo build --release -p strand -p strand-chaos-runner
#   sudo scripts/vs-kafka.sh OUT [REPS=3] [NAME...]
#
# NAMEs pick configurations (default: all but the latency-only ones, whose
# rows the headline runs have): one-node three-nodes latency-one-node
# latency-three-nodes small acks1 lz4 zstd partitions12 cold recovery
# coordinator many-partitions.
#
# Needs the reference Kafka (compat-tests/scripts/fetch-kafka.sh) and
# librdkafka's rdkafka_performance (compat-tests/scripts/build-librdkafka.sh).
set -euo pipefail
out="${1:?usage: vs-kafka.sh OUT [REPS] [NAME...]}"; reps="${2:-3}"
shift $(( $# >= 2 ? 2 : $# ))
picked=("$@")
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${STRAND_CACHE:-$HOME/.cache/strand}"
target="${CARGO_TARGET_DIR:-$cache/target}/release"
# Kafka's operations guide asks for at least 100,000 open files: as many
# as the hard limit allows (both hold one per segment).
ulimit -n "$(ulimit -Hn)"
export STRAND_KAFKA_DIR="${STRAND_KAFKA_DIR:-$("$here/compat-tests/scripts/fetch-kafka.sh" | tail -n 1)}"
run() {
    local name="$1"; shift
    if [ "${#picked[@]}" -gt 0 ] && [[ ! " ${picked[*]} " =~ " $name " ]]; then
        return
    fi
    # The latency-only runs repeat what the headline runs measure: only
    # when named.
    if [ "${#picked[@]}" -eq 0 ] && [[ "$name" == latency-* ]]; then
        return
    fi
    echo "== strand-vs-kafka $*" >&2
    {
        echo
        echo "\`strand-vs-kafka --reps $reps $*\`"
        echo
        "$target/strand-vs-kafka" --strand "$target/strand" --reps "$reps" "$@"
    } >>"$out"
}
{
    echo "strand-vs-kafka, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet || echo ' (modified)'),"
    echo "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Kafka $(basename "$STRAND_KAFKA_DIR")"
} >"$out"
# The headline: 1 KiB, acks=all, one node and three (RF 3, min ISR 2).
run one-node --count 1000000
run three-nodes --count 1000000 --nodes 3
# Only the latency runs of the two above (when named).
run latency-one-node --latency-only
run latency-three-nodes --latency-only --nodes 3
# The other workloads, one change each from the headline.
run small --count 2000000 --size 100 --latency-rate 0 --e2e-count 0
run acks1 --count 1000000 --acks 1 --latency-rate 0
run lz4 --count 1000000 --idempotence true --compression lz4 --latency-rate 0 --e2e-count 0
run zstd --count 1000000 --compression zstd --latency-rate 0 --e2e-count 0
run partitions12 --count 1000000 --partitions 12 --latency-rate 0 --e2e-count 0
run cold --count 1000000 --cold --latency-rate 0 --e2e-count 0
# Start-up and recovery with 10 GiB of log, the group coordinator's load,
# and 10,000 partitions at one message each per second.
run recovery --recovery-gib 10
run coordinator --coordinator-commits 2500 --coordinator-groups 20
run many-partitions --many-partitions 10000 --size 100

#!/usr/bin/env bash
# Longer chaos runs (not part of the test command): strand-chaos over seeds
# FIRST..FIRST+COUNT-1 for SECS each, every fault kind and workload, one
# summary line per seed; exits non-zero if any history shows an anomaly.
# Needs root (network namespaces). Results go to $STRAND_CACHE/chaos-runs/.
#
#   scripts/chaos.sh [COUNT] [SECS] [FIRST] [strand-chaos options...]
#   (defaults: 10 120 1)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/deps.sh"
count="${1:-10}"; secs="${2:-120}"; first="${3:-1}"
shift $(( $# < 3 ? $# : 3 ))
cd "$here/.."
cargo build -q -p strand -p strand-chaos-runner -p strand-faultfs
out="$STRAND_CACHE/chaos-runs"
mkdir -p "$out/bin"
# A snapshot of the binaries: a rebuild during a long run must not change
# what a restarted node runs.
cp "$CARGO_TARGET_DIR/debug/strand" "$CARGO_TARGET_DIR/debug/strand-chaos" \
    "$CARGO_TARGET_DIR/debug/libstrand_faultfs.so" "$out/bin/"
bad=0
for seed in $(seq "$first" $((first + count - 1))); do
    status=0
    "$out/bin/strand-chaos" \
        --strand "$out/bin/strand" \
        --faultfs "$out/bin/libstrand_faultfs.so" \
        --seed "$seed" --secs "$secs" --out "$out/seed-$seed" "$@" \
        > "$out/seed-$seed.log" 2>&1 || status=$?
    faults=$(grep -c "fault: " "$out/seed-$seed.log" || true)
    stats=$(grep -o "Stats {.*}" "$out/seed-$seed.log" | tail -1 || true)
    anomalies=$(grep -o "anomalies: {.*}" "$out/seed-$seed.log" | tail -1 || true)
    rate=$(grep -o "acknowledged writes per second: .*" "$out/seed-$seed.log" | tail -1 || true)
    echo "seed $seed: exit $status, $faults faults; $stats; $rate; $anomalies"
    [ "$status" = 0 ] || bad=$((bad + 1))
done
echo "$bad of $count runs failed or showed anomalies"
[ "$bad" = 0 ]

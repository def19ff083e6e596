#!/usr/bin/env bash
# The performance regression guard (issue 17). Counts the instructions a
# release broker executes (valgrind callgrind, user space: repeatable
# whatever else the machine does, unlike wall time) for three fixed runs of
# librdkafka's rdkafka_performance against a single node, and compares the
# median of REPS counts with the figures recorded in
# scripts/bench-guard.baseline. Exit 1 when any run costs more than
# TOLERANCE percent (default 10) above its recorded figure; the table on
# stdout shows every ratio. --record writes the baseline instead (commit it
# with the change that moved the figures, saying why).
#
#   scripts/bench-guard.sh [--record] [BIN]
#
# BIN defaults to the release build ($CARGO_TARGET_DIR/release/strand).
# Needs valgrind, kcat and rdkafka_performance
# (compat-tests/scripts/build-librdkafka.sh). About 5 minutes on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${STRAND_CACHE:-$HOME/.cache/strand}"
baseline="$here/scripts/bench-guard.baseline"
record=false
if [ "${1:-}" = --record ]; then record=true; shift; fi
bin="${1:-${CARGO_TARGET_DIR:-$cache/target}/release/strand}"
count="${BENCH_GUARD_COUNT:-50000}"; reps="${BENCH_GUARD_REPS:-3}"
tolerance="${TOLERANCE:-10}"
# name, acks, mode (scripts/callgrind-produce.sh's arguments)
runs=("produce-acks-1 1 produce" "produce-acks-all all produce" "consume 1 consume")
declare -A now
for r in "${runs[@]}"; do
    read -r name acks mode <<<"$r"
    counts=()
    for _ in $(seq "$reps"); do
        c="$("$here/scripts/callgrind-produce.sh" "$bin" "$acks" "$count" 1024 "$mode" 2>/dev/null | tr -d ,)"
        [[ "$c" =~ ^[0-9]+$ ]] || { echo "bench-guard: $name: no instruction count" >&2; exit 2; }
        counts+=("$c")
    done
    now[$name]="$(printf '%s\n' "${counts[@]}" | sort -n | sed -n "$(( (reps + 1) / 2 ))p")"
    echo "bench-guard: $name: ${counts[*]} -> median ${now[$name]}" >&2
done
if $record; then
    {
        echo "# scripts/bench-guard.sh --record: $(date -u +%Y-%m-%d), commit $(git -C "$here" rev-parse --short HEAD),"
        echo "# $count messages of 1 KiB per run, median of $reps; broker instructions (callgrind)"
        for r in "${runs[@]}"; do
            read -r name _ <<<"$r"
            echo "$name ${now[$name]}"
        done
    } >"$baseline"
    echo "bench-guard: recorded $baseline"
    exit 0
fi
[ -f "$baseline" ] || { echo "bench-guard: no $baseline (run with --record)" >&2; exit 2; }
status=0
echo "| run | recorded | now | now / recorded |"
echo "|---|---:|---:|---:|"
for r in "${runs[@]}"; do
    read -r name _ <<<"$r"
    was="$(awk -v n="$name" '$1 == n {print $2}' "$baseline")"
    [ -n "$was" ] || { echo "bench-guard: $name is not in $baseline" >&2; exit 2; }
    ratio="$(awk -v a="${now[$name]}" -v b="$was" 'BEGIN {printf "%.3f", a / b}')"
    echo "| $name | $was | ${now[$name]} | $ratio |"
    if awk -v a="${now[$name]}" -v b="$was" -v t="$tolerance" 'BEGIN {exit !(a > b * (1 + t / 100))}'; then
        echo "bench-guard: $name costs more than $tolerance% above the recorded figure" >&2
        status=1
    fi
done
exit "$status"

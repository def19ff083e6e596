#!/usr/bin/env bash
# Runs every test binary of the workspace, as `cargo test --workspace
# --no-fail-fast` does, but STRAND_TEST_JOBS of them at a time (default 2),
# the longest first; then the doc-tests. Most of the integration suites
# wait on brokers, sessions and timeouts rather than on the CPU: one at a
# time they took 26 of CI's minutes on 2 cores.
#
# Each binary runs as cargo runs it (from its package's directory, with
# CARGO set); its output is printed whole when it ends, so that suites do
# not interleave. Exits non-zero if any test failed, after running them all.
# (cargo-nextest does this too, but building it from source costs CI more
# minutes than it saves.)
set -euo pipefail
jobs="${STRAND_TEST_JOBS:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
CARGO="$(command -v cargo)"
export CARGO

# The slowest suites first, measured in a clean run (seconds, 2 cores): the
# rest follow in cargo's order.
slow=(java_tools franz_go transactions differential verifiable replication security hostile groups streams seeds quotas cluster)

cargo test --workspace --no-run --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        kind = m["target"]["kind"][0]
        print(m["target"]["name"], kind, m["manifest_path"], m["executable"], sep="\t")
' >"$work/all"

{
    for name in "${slow[@]}"; do
        awk -F'\t' -v n="$name" '$1 == n && $2 == "test"' "$work/all"
    done
    awk -F'\t' 'NR == FNR { if ($0 != "") slow[$0] = 1; next } !($2 == "test" && ($1 in slow))' \
        <(printf '%s\n' "${slow[@]}") "$work/all"
} >"$work/queue"

run_one() {
    local name="$1" kind="$2" manifest="$3" exe="$4" log
    log="$(mktemp "$work/log.XXXXXX")"
    local rc=0
    (cd "$(dirname "$manifest")" && "$exe") >"$log" 2>&1 || rc=$?
    {
        flock 9
        echo "     Running $kind $name ($exe)"
        cat "$log"
        if [ "$rc" != 0 ]; then
            echo "error: test failed: $name ($kind, exit $rc)"
            echo "$name" >>"$work/failed"
        fi
    } 9>"$work/print.lock"
}
export -f run_one
export work

tr '\n' '\0' <"$work/queue" |
    xargs -0 -P "$jobs" -I{} bash -c 'IFS=$'"'"'\t'"'"' read -r a b c d <<<"$1"; run_one "$a" "$b" "$c" "$d"' _ {}

cargo test --workspace --doc --quiet || echo doc-tests >>"$work/failed"

if [ -s "$work/failed" ]; then
    echo "error: $(wc -l <"$work/failed") test binaries failed: $(tr '\n' ' ' <"$work/failed")"
    exit 101
fi
echo "every test binary passed ($(wc -l <"$work/queue") binaries, $jobs at a time)"

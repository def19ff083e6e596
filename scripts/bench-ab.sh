#!/usr/bin/env bash
# A/B throughput of two strand binaries on this machine: strand-bench
# (single node, no latency runs) alternating the binaries RUNS times each
# (odd rounds A first, even rounds B first), then the median and range of
# every row for each, and the ratio of the medians.
#
#   scripts/bench-ab.sh BEFORE_BIN AFTER_BIN [RUNS] [strand-bench options...]
#
# e.g. scripts/bench-ab.sh /tmp/before/strand target/release/strand 8 --sizes 100,1024 --count 2000000
# Raw outputs stay in $STRAND_CACHE/bench-ab/.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/deps.sh"
a="$1"; b="$2"; runs="${3:-8}"; shift 3 || shift $#
bench="$CARGO_TARGET_DIR/debug/strand-bench"
[ -x "$bench" ] || cargo build -q -p strand-compat-tests --bin strand-bench
out="$STRAND_CACHE/bench-ab"
rm -rf "$out"; mkdir -p "$out"
one() { # label bin round
    "$bench" --strand "$2" --no-latency --out "$out/$1-$3.md" --work "$out/work-$1-$3" "${@:4}" >/dev/null
}
for r in $(seq 1 "$runs"); do
    if (( r % 2 )); then one a "$a" "$r" "$@"; one b "$b" "$r" "$@"
    else one b "$b" "$r" "$@"; one a "$a" "$r" "$@"; fi
    echo "round $r of $runs done" >&2
done
python3 - "$out" "$runs" <<'EOF'
import sys, re, statistics, glob
out, runs = sys.argv[1], int(sys.argv[2])
def rows(path):
    got = {}
    for line in open(path):
        m = re.match(r"\|\s*(\d+ B)\s*\|\s*([^|]+?)\s*\|\s*(\d+)\s*\|", line)
        if m:
            got[(m.group(1), m.group(2))] = int(m.group(3))
    return got
res = {"a": {}, "b": {}}
for side in "ab":
    for f in sorted(glob.glob(f"{out}/{side}-*.md")):
        for k, v in rows(f).items():
            res[side].setdefault(k, []).append(v)
print("| msg size | run | A median | B median | B / A | range A | range B |")
print("|---:|---|---:|---:|---:|---|---|")
ratios = []
for k in res["a"]:
    A, B = res["a"][k], res["b"].get(k, [])
    if not B:
        continue
    ma, mb = statistics.median(A), statistics.median(B)
    ratios.append(mb / ma)
    k_ = lambda x: f"{x/1e6:.2f}M" if x >= 1e6 else f"{x/1e3:.0f}k"
    print(f"| {k[0]} | {k[1]} | {ma:,.0f} | {mb:,.0f} | {mb/ma:.3f} | {k_(min(A))}-{k_(max(A))} | {k_(min(B))}-{k_(max(B))} |")
print(f"\nmean ratio {statistics.mean(ratios):.3f} over {len(ratios)} rows, {runs} runs each")
EOF

#!/usr/bin/env bash
# A/B throughput of two strand binaries with strand-bench, alternating runs
# (odd runs A first), each run's section in OUT/{a,b}-nN-I.md; then a table of
# medians, ranges and broker CPU per million messages.
#
#   scripts/ab-bench.sh A_BIN B_BIN NODES RUNS OUT [strand-bench options]
#   e.g. scripts/ab-bench.sh before/strand target/release/strand 1 8 /tmp/ab --sizes 100,1024 --count 1000000
set -euo pipefail
a="$(realpath "$1")"; b="$(realpath "$2")"; nodes="$3"; runs="$4"; out="$5"; shift 5
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench="${STRAND_BENCH:-$root/target/release/strand-bench}"
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
    if (( i % 2 )); then order="a b"; else order="b a"; fi
    for w in $order; do
        bin="$a"; [ "$w" = b ] && bin="$b"
        timeout 1200 "$bench" --strand "$bin" --nodes "$nodes" --no-latency "$@" \
            --out "$out/$w-n$nodes-$i.md" --work "$out/work" >"$out/$w-n$nodes-$i.log" 2>&1 \
            || echo "run $w $i failed" >&2
    done
done
python3 - "$out" "$nodes" <<'PY'
import glob, re, statistics, sys
out, nodes = sys.argv[1], sys.argv[2]
rows = {}
for w in ("a", "b"):
    for f in sorted(glob.glob(f"{out}/{w}-n{nodes}-*.md")):
        for line in open(f):
            m = re.match(r"\| (\d+) B \| ([^|]+) \| (\d+) \| [\d.]+ \| (\d+) \| [\d.]+ s \| ([\d.]+) s \|", line)
            if m:
                size, run, rate, msgs, cpu = m.groups()
                rows.setdefault((int(size), run.strip()), {"a": [], "b": []})[w].append(
                    (int(rate), float(cpu) / int(msgs) * 1e6))
def k(x): return f"{x/1000:.0f}k" if x < 1e6 else f"{x/1e6:.2f}M"
print("| msg size | run | A msgs/s | B | B / A | range A | range B | broker CPU s per M msgs A | B |")
print("|---:|---|---:|---:|---:|---|---|---:|---:|")
for key in sorted(rows):
    a, b = rows[key]["a"], rows[key]["b"]
    if not a or not b:
        continue
    ma, mb = statistics.median(r for r, _ in a), statistics.median(r for r, _ in b)
    ca, cb = statistics.median(c for _, c in a), statistics.median(c for _, c in b)
    print(f"| {key[0]} B | {key[1]} | {ma:,.0f} | {mb:,.0f} | {mb/ma:.3f} | "
          f"{k(min(r for r, _ in a))}-{k(max(r for r, _ in a))} | "
          f"{k(min(r for r, _ in b))}-{k(max(r for r, _ in b))} | {ca:.2f} | {cb:.2f} |")
PY

#!/usr/bin/env bash
# Counts the instructions a Strand broker executes (valgrind callgrind, user
# space, start-up included) while librdkafka's rdkafka_performance produces
# COUNT messages of SIZE bytes to one partition of a single node. Repeatable
# for the same binary and inputs, whatever else the machine does: what the
# A/B comparisons in BENCHMARKS.md use beside wall-clock throughput.
#
#   scripts/callgrind-produce.sh BIN [ACKS=1] [COUNT=100000] [SIZE=1024] [MODE=produce]
#
# MODE=consume: the COUNT messages are produced first, uncounted, and only
# their read from the log start by rdkafka_performance's consumer is
# counted (callgrind's instrumentation is switched on for it alone).
#
# Needs valgrind, kcat and rdkafka_performance (compat-tests/scripts/build-librdkafka.sh).
set -euo pipefail
bin="$(realpath "$1")"; acks="${2:-1}"; count="${3:-100000}"; size="${4:-1024}"
mode="${5:-produce}"
case "$mode" in
    produce) instr=yes ;;
    consume) instr=no ;;
    *) echo "callgrind-produce.sh: MODE is produce or consume, not $mode" >&2; exit 2 ;;
esac
cache="${STRAND_CACHE:-$HOME/.cache/strand}"
perf="$cache/librdkafka-2.12.1/examples/rdkafka_performance"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cport="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > "$dir/server.properties" <<P
node.id=1
process.roles=broker,controller
listeners=PLAINTEXT://127.0.0.1:$port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=true
P
"$bin" format --cluster-id callgrindcallgrindcall --node-id 1 \
    --initial-controllers "1@127.0.0.1:$cport" "$dir/server.properties" >/dev/null
valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" --instr-atstart="$instr" \
    "$bin" "$dir/server.properties" >"$dir/broker.log" 2>&1 &
pid=$!
for _ in $(seq 240); do
    kcat -L -b "127.0.0.1:$port" -t callgrind -m 2 >/dev/null 2>&1 && break
    sleep 0.5
done
"$perf" -P -t callgrind -p 0 -s "$size" -c "$count" -b "127.0.0.1:$port" -X "acks=$acks" \
    2>&1 | grep 'msgs/s' | tail -1 >&2
if [ "$mode" = consume ]; then
    callgrind_control -i on "$pid" >/dev/null
    "$perf" -C -t callgrind -p 0 -o beginning -e -c "$count" -b "127.0.0.1:$port" \
        2>&1 | grep 'msgs/s' | tail -1 >&2
    callgrind_control -i off "$pid" >/dev/null
fi
kill -INT "$pid"
wait "$pid" || true
callgrind_annotate "$dir/callgrind.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {print $1}'

#!/usr/bin/env bash
# Produce throughput over TLS against plaintext, Strand and the reference
# Kafka side by side (issue 18): one node each, 1 KiB records, acks=all,
# 1,000,000 per run with librdkafka's rdkafka_performance (OpenSSL on the
# client), REPS runs per configuration, each on a fresh node (empty data
# directory) with the protocols alternating, so that no run pays for an
# earlier one's writeback. A benchmark, not a test: run it on a quiet
# machine after a release build:
#
#   cargo build --release -p strand
#   scripts/tls-vs-kafka.sh [REPS=3]
#
# SERVERS="strand" runs Strand alone (default: "strand kafka").
#
# Prints one line per run (rdkafka_performance's summary and the broker's CPU
# time over the run). The broker's key
# store is a PEM file (ssl.keystore.type=PEM) made here with openssl, for
# both brokers. Needs the reference Kafka (compat-tests/scripts/fetch-kafka.sh)
# and rdkafka_performance (compat-tests/scripts/build-librdkafka.sh).
set -euo pipefail
reps="${1:-3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${STRAND_CACHE:-$HOME/.cache/strand}"
strand="${CARGO_TARGET_DIR:-$cache/target}/release/strand"
kafka="${STRAND_KAFKA_DIR:-$("$here/compat-tests/scripts/fetch-kafka.sh" | tail -n 1)}"
perf="$("$here/compat-tests/scripts/build-librdkafka.sh" | tail -n 1)/examples/rdkafka_performance"
work="$(mktemp -d /tmp/strand-tls-bench-XXXXXX)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
n=1000000

# A CA and the brokers' key and certificate (127.0.0.1), unencrypted PKCS#8.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/ca.key" -out "$work/ca.pem" -days 2 -subj "/CN=bench-ca" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$work/broker.key" -out "$work/broker.csr" -subj "/CN=localhost" 2>/dev/null
printf "subjectAltName=IP:127.0.0.1,DNS:localhost\n" > "$work/san.ext"
openssl x509 -req -in "$work/broker.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
    -out "$work/broker.crt" -days 2 -extfile "$work/san.ext" 2>/dev/null
openssl pkcs8 -topk8 -nocrypt -in "$work/broker.key" -out "$work/broker.pk8"
cat "$work/broker.pk8" "$work/broker.crt" > "$work/broker.pem"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 240); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.5; done; return 1; }
java_cp=(java -cp "$kafka/libs/*")

start_strand() {
    plain=$(free_port); tls=$(free_port); rm -rf "$work/data"; sync
    "$strand" --override node.id=1 --override "listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$tls" \
        --override "advertised.listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$tls" \
        --override "log.dirs=$work/data" --override ssl.keystore.type=PEM --override "ssl.keystore.location=$work/broker.pem" \
        > "$work/broker.log" 2>&1 &
    pid=$!
    wait_port "$tls"
}

start_kafka() {
    plain=$(free_port); tls=$(free_port); ctrl=$(free_port); rm -rf "$work/data"; sync
    cat > "$work/kafka.properties" <<P
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctrl
listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$tls,CONTROLLER://127.0.0.1:$ctrl
advertised.listeners=PLAINTEXT://127.0.0.1:$plain,SSL://127.0.0.1:$tls
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$work/data
ssl.keystore.type=PEM
ssl.keystore.location=$work/broker.pem
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
P
    "${java_cp[@]}" kafka.tools.StorageTool format -t "$("${java_cp[@]}" kafka.tools.StorageTool random-uuid)" \
        -c "$work/kafka.properties" > "$work/format.log" 2>&1
    java -Xms128m -Xmx1g -Djava.awt.headless=true -cp "$kafka/libs/*" kafka.Kafka "$work/kafka.properties" > "$work/broker.log" 2>&1 &
    pid=$!
    wait_port "$tls"
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

run() { # SERVER PROTOCOL REP
    "start_$1"
    local topic="tls-$1-$2-$3" port=$plain extra=()
    "${java_cp[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$plain" --create \
        --topic "$topic" --partitions 1 --replication-factor 1 > /dev/null 2>&1
    if [ "$2" = SSL ]; then port=$tls; extra=(-X security.protocol=SSL -X "ssl.ca.location=$work/ca.pem"); fi
    # The broker's CPU time (user + system) over the run, from /proc.
    local before after result
    before=$(cpu_ticks "$pid")
    result=$("$perf" -P -t "$topic" -p 0 -s 1024 -c "$n" -b "127.0.0.1:$port" -X acks=all "${extra[@]}" 2>&1 \
        | grep 'messages produced' | tail -n 1)
    after=$(cpu_ticks "$pid")
    echo "$1 $2 run $3: $result; broker CPU $(awk -v a="$before" -v b="$after" -v t="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f s", (b - a) / t }')"
    kill "$pid"; wait "$pid" || true; pid=""
}

for rep in $(seq 1 "$reps"); do
    for server in ${SERVERS:-strand kafka}; do
        for protocol in SSL PLAINTEXT; do
            run "$server" "$protocol" "$rep"
        done
    done
done

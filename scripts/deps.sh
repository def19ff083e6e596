#!/usr/bin/env bash
# Installs the Debian packages Strand's build and tests need, only those missing.
# Sourced by scripts/broker.sh and scripts/test.sh.
set -euo pipefail

strand_apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "[deps] installing: ${missing[*]}" >&2
        local sudo=""
        [ "$(id -u)" = 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# Build: a C toolchain for the compression codecs; libclang/RocksDB/snappy for the
# controller's RocksDB store (system library, see .cargo/config.toml).
STRAND_BUILD_PKGS=(build-essential pkg-config libclang-dev librocksdb-dev libsnappy-dev)
# Tests: kcat, and what librdkafka's own test suite needs to build.
# iptables and iproute2: the chaos run's network faults between namespaces.
# chromium: the status page's browser test (headless).
STRAND_TEST_PKGS=(kcat chromium openssl python3 python3-venv zlib1g-dev libssl-dev libzstd-dev liblz4-dev libsasl2-dev libcurl4-openssl-dev rapidjson-dev iptables iproute2)

# The Python clients, in a virtualenv under the cache; STRAND_PYTHON names
# it: confluent-kafka (bundling its own librdkafka) drives the exactly-once
# tests, kafka-python's admin client the reassignment tests.
STRAND_CONFLUENT_KAFKA_VERSION=2.16.1
STRAND_KAFKA_PYTHON_VERSION=3.0.12
strand_python_env() {
    local venv="$STRAND_CACHE/python"
    if ! "$venv/bin/python" -c "import confluent_kafka, kafka, sys; sys.exit(confluent_kafka.version()[0] != '$STRAND_CONFLUENT_KAFKA_VERSION' or kafka.__version__ != '$STRAND_KAFKA_PYTHON_VERSION')" 2>/dev/null; then
        echo "[deps] installing confluent-kafka $STRAND_CONFLUENT_KAFKA_VERSION and kafka-python $STRAND_KAFKA_PYTHON_VERSION into $venv" >&2
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "confluent-kafka==$STRAND_CONFLUENT_KAFKA_VERSION" "kafka-python==$STRAND_KAFKA_PYTHON_VERSION"
    fi
    export STRAND_PYTHON="$venv/bin/python"
}

# cargo-deny, which the test command runs over deny.toml (licences, bans,
# sources), built once into the cache at this version.
STRAND_CARGO_DENY_VERSION=0.20.2
strand_cargo_deny() {
    local bin="$STRAND_CACHE/tools/bin/cargo-deny"
    if ! "$bin" --version 2>/dev/null | grep -qx "cargo-deny $STRAND_CARGO_DENY_VERSION"; then
        echo "[deps] building cargo-deny $STRAND_CARGO_DENY_VERSION into $STRAND_CACHE/tools" >&2
        CARGO_TARGET_DIR="$STRAND_CACHE/tools/target" cargo install --quiet --locked --root "$STRAND_CACHE/tools" cargo-deny --version "$STRAND_CARGO_DENY_VERSION" >&2
    fi
    echo "$bin"
}

# Build outputs live outside the clone so repeated runs on one machine are fast;
# an empty cache only makes the first run slower.
export STRAND_CACHE="${STRAND_CACHE:-$HOME/.cache/strand}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$STRAND_CACHE/target}"

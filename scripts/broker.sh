#!/usr/bin/env bash
# Builds (release) and runs the Strand broker. With no arguments: a durable
# single node on 127.0.0.1:9092 with its data in ./data. Arguments are passed
# through: scripts/broker.sh config/server.properties --override num.partitions=4
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/deps.sh"
strand_apt_install "${STRAND_BUILD_PKGS[@]}"
cargo build --release --quiet --manifest-path "$here/../Cargo.toml" --bin strand
exec "$CARGO_TARGET_DIR/release/strand" "$@"

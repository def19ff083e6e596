#!/usr/bin/env bash
# Builds (release) and runs the Strand broker. With no arguments: a durable
# single node on 127.0.0.1:9092 with its data in ./data. Arguments are passed
# through: scripts/broker.sh config/server.properties --override num.partitions=4
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/deps.sh"
strand_apt_install "${STRAND_BUILD_PKGS[@]}"
# Build from the repository root: cargo reads .cargo/config.toml (the system
# RocksDB settings) from the working directory, not from the manifest's.
# cargo shows its progress: a first build takes minutes.
(cd "$here/.." && cargo build --release --bin strand)
# Run from the caller's directory, so the default ./data is theirs.
exec "$CARGO_TARGET_DIR/release/strand" "$@"

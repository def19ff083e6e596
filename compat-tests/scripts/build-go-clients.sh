#!/usr/bin/env bash
# Build compat-tests/go-clients (IBM/sarama, segmentio/kafka-go and
# franz-go's kadm, at the versions its go.mod pins, fetched through the Go
# module proxy) into $STRAND_CACHE/go-clients. Installs Go from Debian when
# missing. Rebuilds only when the sources change.
# The last line printed is the binary (for STRAND_GO_CLIENTS).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$here/go-clients"
cache="${STRAND_CACHE:-$HOME/.cache/strand}"
dir="$cache/go-clients"
log() { printf '[build-go-clients] %s\n' "$*" >&2; }
if ! command -v go >/dev/null; then
    log "installing Go"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends golang-go
fi
sum="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)"
if [ ! -x "$dir/go-clients" ] || [ "$(cat "$dir/.sum" 2>/dev/null)" != "$sum" ]; then
    log "building $src"
    mkdir -p "$dir"
    (cd "$src" && go build -o "$dir/go-clients" .)
    echo "$sum" > "$dir/.sum"
fi
echo "$dir/go-clients"

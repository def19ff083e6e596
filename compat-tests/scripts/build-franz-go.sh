#!/usr/bin/env bash
# Build franz-go's kgo test binary (its unit and integration tests, which
# run against the brokers KGO_SEEDS names) from the module at a pinned
# version, fetched through the Go module proxy. Installs Go from Debian when
# missing. Idempotent: a stamp makes a second run only print.
# The last line printed is the test binary (for STRAND_FRANZ_GO_TEST).
set -euo pipefail
version=v1.22.3
cache="${STRAND_CACHE:-$HOME/.cache/strand}"
dir="$cache/franz-go-$version"
log() { printf '[build-franz-go] %s\n' "$*" >&2; }
if ! command -v go >/dev/null; then
    log "installing Go"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends golang-go
fi
if [ ! -f "$dir/.stamp" ]; then
    src="$(cd "$(mktemp -d)" && go mod init fetch >/dev/null 2>&1 &&
        go mod download -json "github.com/twmb/franz-go@$version" |
        sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
    log "building kgo's tests from $src"
    rm -rf "$dir" && mkdir -p "$dir"
    cp -r "$src" "$dir/src" && chmod -R u+w "$dir/src"
    (cd "$dir/src/pkg/kgo" && go test -c -o "$dir/kgo.test" .)
    touch "$dir/.stamp"
fi
echo "$dir/kgo.test"

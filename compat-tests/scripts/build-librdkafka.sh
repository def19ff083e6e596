#!/usr/bin/env bash
# Build librdkafka 2.12.1's test suite (tests/test-runner) and examples/rdkafka_performance
# from the source shipped in the published crate rdkafka-sys =4.10.0+2.12.1.
#
# Idempotent: every step leaves a stamp file; a second run only checks and prints paths.
#   STRAND_CACHE   build root (default $HOME/.cache/strand); the tree goes to
#                  $STRAND_CACHE/librdkafka-2.12.1 (the cargo registry is never built in)
#   JOBS           make parallelism (default 2)
#   FORCE=1        redo every step (rm stamps)
# Prints the produced paths at the end; the last line is the suite dir (for `--suite`).
set -euo pipefail

CRATE_VER="4.10.0+2.12.1"
RDK_VER="2.12.1"
CACHE="${STRAND_CACHE:-$HOME/.cache/strand}"
DIR="$CACHE/librdkafka-$RDK_VER"
JOBS="${JOBS:-2}"
CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"

log() { printf '[build-librdkafka] %s\n' "$*" >&2; }
t0=$SECONDS

# --- 1. apt prerequisites (only when something is missing) -------------------------------
APT_PKGS=(build-essential python3 pkg-config zlib1g-dev libssl-dev libzstd-dev liblz4-dev
          libsasl2-dev libcurl4-openssl-dev rapidjson-dev)
missing=()
for p in "${APT_PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    log "installing missing apt packages: ${missing[*]}"
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# --- 2. locate (or fetch) the crate source ------------------------------------------------
find_src() {
    local d
    for d in "$CARGO_HOME"/registry/src/*/rdkafka-sys-"$CRATE_VER"/librdkafka; do
        if [ -f "$d/configure" ]; then echo "$d"; return 0; fi
    done
    return 1
}

mkdir -p "$CACHE"
if [ ! -f "$DIR/.stamp-copied" ]; then
    SRC="$(find_src || true)"
    if [ -z "$SRC" ]; then
        log "rdkafka-sys $CRATE_VER not in $CARGO_HOME/registry; fetching with a throwaway project"
        tmp="$(mktemp -d)"
        trap 'rm -rf "$tmp"' EXIT
        (
            cd "$tmp"
            cargo new --quiet --lib dl
            cd dl
            cargo add --quiet "rdkafka-sys@=$CRATE_VER" --no-default-features
            cargo fetch --quiet
        )
        SRC="$(find_src)" || { log "fetch did not produce rdkafka-sys-$CRATE_VER"; exit 1; }
    fi
    log "copying $SRC -> $DIR"
    rm -rf "$DIR"
    cp -a "$SRC" "$DIR"
    # the registry copy is read-only; the build tree must not be
    chmod -R u+w "$DIR"
    touch "$DIR/.stamp-copied"
fi

cd "$DIR"

# --- 3. configure / build -------------------------------------------------------------------
step() { # step NAME CMD...
    local name="$1"; shift
    if [ -f ".stamp-$name" ] && [ -z "${FORCE:-}" ]; then return 0; fi
    log "step $name: $*"
    local s=$SECONDS
    "$@"
    touch ".stamp-$name"
    log "step $name done in $((SECONDS - s)) s"
}

if [ -n "${FORCE:-}" ]; then rm -f .stamp-configure .stamp-libs .stamp-tests .stamp-perf; fi

step configure ./configure --prefix="$DIR/_install"
step libs make -j"$JOBS" libs
step tests make -j"$JOBS" -C tests build
step perf make -C examples rdkafka_performance

# sanity: artefacts exist (stamps could be stale if someone cleaned by hand)
for f in src/librdkafka.so.1 src-cpp/librdkafka++.so.1 tests/test-runner examples/rdkafka_performance; do
    if [ ! -e "$f" ]; then
        log "missing $DIR/$f although stamped; rerun with FORCE=1"
        exit 1
    fi
done

log "done in $((SECONDS - t0)) s"
echo "librdkafka:           $DIR/src/librdkafka.so.1"
echo "librdkafka++:         $DIR/src-cpp/librdkafka++.so.1"
echo "test-runner:          $DIR/tests/test-runner"
echo "rdkafka_performance:  $DIR/examples/rdkafka_performance"
echo "suite dir (--suite), on its own last line:"
echo "$DIR"

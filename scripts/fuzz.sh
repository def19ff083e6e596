#!/usr/bin/env bash
# Runs every libFuzzer target for a set time (default 600 s each, two at a
# time on this 2-core machine), then merges what each found into the corpus
# kept in fuzz/corpus (replayed by scripts/test.sh on stable). Needs the
# nightly toolchain and cargo-fuzz (installed here if missing). Crashes land
# in fuzz/artifacts/TARGET/. Results go in RELIABILITY.md by hand.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(request record_batch log_open coordinator_state properties)
fi
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
cargo +nightly fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
cd fuzz
cargo +nightly fuzz build -O -a
run() {
    local t="$1"
    mkdir -p "corpus/$t" "new-corpus/$t"
    # New inputs go to new-corpus; the kept corpus is only read.
    cargo +nightly fuzz run -O -a "$t" "new-corpus/$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -timeout=10 -print_final_stats=1 >"new-corpus/$t.log" 2>&1
    echo "$t: $(grep -E '^stat::number_of_executed_units' "new-corpus/$t.log" | awk '{print $2}') runs, exit ok"
}
status=0
for ((i = 0; i < ${#targets[@]}; i += 2)); do
    pids=()
    for t in "${targets[@]:i:2}"; do
        run "$t" & pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || status=1; done
done
# Keep a minimal set covering what was found. Named inputs (the seeds and
# regression inputs, unlike libFuzzer's hash-named ones) always stay.
for t in "${targets[@]}"; do
    named="$(mktemp -d)"
    find "corpus/$t" -type f -regextype posix-extended ! -regex '.*/[0-9a-f]{40}' -exec cp {} "$named"/ \;
    cp -n "new-corpus/$t"/* "corpus/$t"/ 2>/dev/null || true
    cargo +nightly fuzz cmin -O -a "$t" "corpus/$t" >/dev/null 2>&1 || true
    cp "$named"/* "corpus/$t"/ 2>/dev/null || true
    rm -rf "$named"
done
exit $status

#!/usr/bin/env bash
# Resolve the reference Apache Kafka (broker, tools and their dependencies,
# as jars from Maven Central; reference-kafka/pom.xml names the version) into
# $STRAND_CACHE/kafka-VERSION/libs, and Kafka's tools of the 3.9 line
# (reference-kafka/clients-3.9/pom.xml) into $STRAND_CACHE/kafka-tools-VERSION/libs. Installs Java 17 and Maven from Debian's
# packages when missing. Idempotent: a stamp makes a second run only print.
# The last line printed is the directory (for STRAND_KAFKA_DIR): Kafka's,
# or with --tools-3.9 that of the 3.9 tools.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$here/reference-kafka/pom.xml"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")"
cache="${STRAND_CACHE:-$HOME/.cache/strand}"
dir="$cache/kafka-$version"
log() { printf '[fetch-kafka] %s\n' "$*" >&2; }

if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
    log "installing Java 17 and Maven"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
        openjdk-17-jdk-headless maven
fi

if [ ! -f "$dir/.stamp" ] || [ "$pom" -nt "$dir/.stamp" ]; then
    log "resolving Apache Kafka $version into $dir/libs"
    rm -rf "$dir/libs"
    mkdir -p "$dir"
    mvn -q -B -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$dir/libs" >&2
    ls "$dir/libs/kafka_2.13-$version.jar" >/dev/null
    touch "$dir/.stamp"
fi
log "Apache Kafka $version: $(ls "$dir/libs" | wc -l) jars"

# Kafka's tools and Java client of the 3.9 line (older API versions), beside it.
old_pom="$here/reference-kafka/clients-3.9/pom.xml"
old_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$old_pom")"
old_dir="$cache/kafka-tools-$old_version"
if [ ! -f "$old_dir/.stamp" ] || [ "$old_pom" -nt "$old_dir/.stamp" ]; then
    log "resolving Kafka's tools $old_version into $old_dir/libs"
    rm -rf "$old_dir/libs"
    mkdir -p "$old_dir"
    mvn -q -B -f "$old_pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$old_dir/libs" >&2
    ls "$old_dir/libs/kafka-tools-$old_version.jar" >/dev/null
    touch "$old_dir/.stamp"
fi
log "Kafka's tools $old_version: $(ls "$old_dir/libs" | wc -l) jars"
if [ "${1:-}" = "--tools-3.9" ]; then
    echo "$old_dir"
else
    echo "$dir"
fi

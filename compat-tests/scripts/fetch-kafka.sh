#!/usr/bin/env bash
# Resolve the reference Apache Kafka (broker, tools and their dependencies,
# as jars from Maven Central; reference-kafka/pom.xml names the version) into
# $STRAND_CACHE/kafka-VERSION/libs. Installs Java 17 and Maven from Debian's
# packages when missing. Idempotent: a stamp makes a second run only print.
# The last line printed is the directory (for STRAND_KAFKA_DIR).
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
echo "$dir"

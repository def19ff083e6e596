#!/usr/bin/env bash
# Run one of the reference Kafka's command-line tools by its name, as its
# bin/ script would (kafka-topics, kafka-console-producer, ...), from the
# jars fetch-kafka.sh resolved:
#   compat-tests/scripts/kafka-tool.sh kafka-topics --bootstrap-server HOST:PORT --list
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${STRAND_KAFKA_DIR:-$("$here/scripts/fetch-kafka.sh" 2>/dev/null | tail -n 1)}"
tool="${1:?usage: kafka-tool.sh TOOL [ARGS...]}"; shift
case "$tool" in
    kafka-topics) main=org.apache.kafka.tools.TopicCommand ;;
    kafka-configs) main=org.apache.kafka.tools.ConfigCommand ;;
    kafka-acls) main=org.apache.kafka.tools.AclCommand ;;
    kafka-console-producer) main=org.apache.kafka.tools.ConsoleProducer ;;
    kafka-console-consumer) main=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    kafka-consumer-groups) main=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    kafka-transactions) main=org.apache.kafka.tools.TransactionsCommand ;;
    kafka-get-offsets) main=org.apache.kafka.tools.GetOffsetShell ;;
    kafka-delete-records) main=org.apache.kafka.tools.DeleteRecordsCommand ;;
    kafka-leader-election) main=org.apache.kafka.tools.LeaderElectionCommand ;;
    kafka-log-dirs) main=org.apache.kafka.tools.LogDirsCommand ;;
    kafka-reassign-partitions) main=org.apache.kafka.tools.reassign.ReassignPartitionsCommand ;;
    kafka-metadata-quorum) main=org.apache.kafka.tools.MetadataQuorumCommand ;;
    kafka-cluster) main=org.apache.kafka.tools.ClusterTool ;;
    kafka-features) main=org.apache.kafka.tools.FeatureCommand ;;
    kafka-verifiable-producer) main=org.apache.kafka.tools.VerifiableProducer ;;
    kafka-verifiable-consumer) main=org.apache.kafka.tools.VerifiableConsumer ;;
    kafka-producer-perf-test) main=org.apache.kafka.tools.ProducerPerformance ;;
    kafka-consumer-perf-test) main=org.apache.kafka.tools.ConsumerPerformance ;;
    kafka-e2e-latency) main=org.apache.kafka.tools.EndToEndLatency ;;
    kafka-storage) main=kafka.tools.StorageTool ;;
    *) echo "kafka-tool.sh: unknown tool $tool" >&2; exit 2 ;;
esac
# The 3.x line (STRAND_KAFKA_DIR naming its tools' directory): two tools
# still in the core jar, and log4j 1 (reload4j) for logging.
logging=(-Dlog4j2.configurationFile="$here/reference-kafka/log4j2-tools.properties")
if compgen -G "$dir/libs/kafka-clients-3.*.jar" >/dev/null; then
    case "$tool" in
        kafka-configs) main=kafka.admin.ConfigCommand ;;
        kafka-console-producer) main=kafka.tools.ConsoleProducer ;;
    esac
    logging=(-Dlog4j.configuration="file:$here/reference-kafka/log4j-tools.properties")
fi
exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" -Xmx512m -Djava.awt.headless=true \
    "${logging[@]}" -cp "$dir/libs/*" "$main" "$@"

// An exactly_once_v2 Kafka Streams application for tests/streams.rs: it
// splits each line of the input topic into words, re-keys them by word
// (a repartition topic), counts them in a state store (a changelog topic)
// and writes every new count to the output topic. The record cache is off,
// so each word read yields exactly one output record: under exactly-once,
// a word's counts on the output read 1, 2, 3, ... with no repeat and no gap.
//
//   java -cp OUT:KAFKA/libs/* WordCount BOOTSTRAP STATE_DIR REPLICATION_FACTOR
//
// Prints "state RUNNING" (and every other state change) on stdout.

import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public final class WordCount {
    public static void main(String[] args) throws InterruptedException {
        if (args.length != 3) {
            System.err.println("usage: WordCount BOOTSTRAP STATE_DIR REPLICATION_FACTOR");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "strand-word-count");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[1]);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, Integer.parseInt(args[2]));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream("streams-input", Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\s+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to("streams-output", Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}

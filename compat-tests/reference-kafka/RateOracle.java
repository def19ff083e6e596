// Kafka's own quota rate (org.apache.kafka.common.metrics: a Sensor with a
// Rate over 11 samples of 1 s, as ClientQuotaManager configures it), driven
// by a trace on stdin: lines "<ms> <value>", ms relative to the first line.
// A value of 0 records nothing and only measures. For each line it prints
// "<ms> <rate> <windowSize>". Run with the reference Kafka's kafka-clients
// jar on the class path: `java -cp kafka-clients.jar RateOracle.java`.
import java.util.Scanner;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Rate;

public class RateOracle {
    public static void main(String[] args) {
        int samples = args.length > 0 ? Integer.parseInt(args[0]) : 11;
        MetricConfig config = new MetricConfig().samples(samples).timeWindow(1, TimeUnit.SECONDS);
        Metrics metrics = new Metrics(config);
        Sensor sensor = metrics.sensor("quota", config);
        Rate rate = new Rate();
        MetricName name = metrics.metricName("rate", "quota");
        sensor.add(name, rate);
        // The sensor's first sample began when it was made (now): the trace
        // runs from there, as a quota's sensor is made on its first request.
        long base = System.currentTimeMillis();
        Scanner in = new Scanner(System.in);
        StringBuilder out = new StringBuilder();
        while (in.hasNextLong()) {
            long at = in.nextLong();
            double value = in.nextDouble();
            long now = base + at;
            if (value != 0) {
                sensor.record(value, now, false);
            }
            out.append(at).append(' ').append(rate.measure(config, now)).append(' ')
                .append(rate.windowSize(config, now)).append('\n');
        }
        System.out.print(out);
        metrics.close();
    }
}

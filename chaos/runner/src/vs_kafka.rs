//! strand-vs-kafka: Strand and the reference Apache Kafka on the same
//! machine, in the same run, with the same clients (issue 17): for each
//! repetition a fresh cluster of each (one node, or three with replication
//! factor 3 and min.insync.replicas=2; their order alternating), then
//! produce (acks=all or 1, optionally idempotent or compressed, over one or
//! more partitions)
//! and consume of SIZE-byte messages with librdkafka's `rdkafka_performance`
//! and with Kafka's own `kafka-producer-perf-test` /
//! `kafka-consumer-perf-test` (the Java client), and, at a fixed rate, the
//! Java producer's latency percentiles, and Kafka's EndToEndLatency (one
//! message at a time, produce to consume). Prints a markdown table: each
//! system's median and spread, their ratio, the brokers' CPU seconds per
//! run and their peak RSS. A benchmark, not a test: run it on a quiet
//! machine, with a release build of Strand.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod procstat;
use procstat::{cpu_seconds, peak_rss_mib};

use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use strand_compat_tests::cluster::{Cluster, ClusterSpec, KafkaDist, Server};

#[derive(Parser, Debug)]
#[command(about = "Strand and the reference Kafka side by side: throughput, broker CPU, peak RSS")]
struct Args {
    /// The strand binary (a release build).
    #[arg(long)]
    strand: PathBuf,
    /// librdkafka's tree (compat-tests/scripts/build-librdkafka.sh).
    #[arg(long)]
    suite: Option<PathBuf>,
    /// Messages per run.
    #[arg(long, default_value_t = 200_000)]
    count: u64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: u64,
    /// Repetitions of every workload on each system.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Nodes per cluster: 1, or 3 (replication factor 3,
    /// min.insync.replicas=2).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=3))]
    nodes: u8,
    /// Partitions of each benchmark topic (the producers spread over them).
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// The producers' compression.type (none, gzip, snappy, lz4, zstd).
    #[arg(long, default_value = "none")]
    compression: String,
    /// Records per second of the latency workload (Kafka's producer perf
    /// test at a fixed rate, with --acks); 0 leaves it out.
    #[arg(long, default_value_t = 5_000)]
    latency_rate: u64,
    /// The producers' acks (1 or all).
    #[arg(long, default_value = "all", value_parser = ["1", "all"])]
    acks: String,
    /// The producers' enable.idempotence: each client's default (librdkafka:
    /// off; the Java client: on with acks=all), or on or off for both.
    #[arg(long, default_value = "default", value_parser = ["default", "true", "false"])]
    idempotence: String,
    /// Empties the page cache before each consume run (`drop_caches`,
    /// root only): the log is read from the disk.
    #[arg(long)]
    cold: bool,
    /// Messages of the end-to-end latency run (Kafka's EndToEndLatency:
    /// one message at a time, produced and consumed); 0 leaves it out.
    #[arg(long, default_value_t = 5_000)]
    e2e_count: u64,
    /// Instead of the workloads above: write this many GiB to one
    /// partition (acks=1), then time a restart after a clean shutdown and
    /// one after kill -9, each until the whole log is served again. One
    /// node only.
    #[arg(long, default_value_t = 0)]
    recovery_gib: u64,
    /// Instead of the workloads above: create a topic of this many
    /// partitions (timed), then run the Java producer at this many
    /// messages per second for 30 s, round robin over the partitions (one
    /// message per partition per second), and report its latency.
    #[arg(long, default_value_t = 0)]
    many_partitions: u64,
    /// Instead of the workloads above: `--coordinator-groups` groups each
    /// commit this many offsets (confluent-kafka,
    /// compat-tests/clients/offsets_load.py), then the node is restarted
    /// and timed until every group's committed offset is answered again
    /// (the group coordinator's load). One node only.
    #[arg(long, default_value_t = 0)]
    coordinator_commits: u64,
    #[arg(long, default_value_t = 20)]
    coordinator_groups: u64,
    /// Only the latency runs (the fixed rate and EndToEndLatency).
    #[arg(long)]
    latency_only: bool,
}

impl Args {
    /// The producer settings both clients are given, as `key=value`.
    fn producer_settings(&self) -> Vec<String> {
        let mut v = vec![format!("acks={}", self.acks)];
        if self.idempotence != "default" {
            v.push(format!("enable.idempotence={}", self.idempotence));
        }
        v
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Workload {
    ProduceRdkafka,
    ProduceJava,
    ConsumeRdkafka,
    ConsumeJava,
    /// The Java consumer's group join in that run (rebalance.time.ms).
    ConsumeJavaJoin,
    /// The Java producer at a fixed rate: its p50 / p99 / p99.9 latency.
    LatencyP50,
    LatencyP99,
    LatencyP999,
    LatencyMax,
    /// EndToEndLatency: average, p99 and p99.9 from produce to consume.
    E2eAvg,
    E2eP99,
    E2eP999,
    /// The recovery run: its produce rate, and the two restarts' times.
    RecoveryProduce,
    RestartClean,
    RestartKill9,
    /// Creating the `--many-partitions` topic.
    ManyCreate,
    /// The coordinator run: the commits' rate, and the load after a restart.
    CoordinatorCommit,
    CoordinatorLoad,
}

impl Workload {
    const THROUGHPUT: [Workload; 4] = [
        Workload::ProduceRdkafka,
        Workload::ProduceJava,
        Workload::ConsumeRdkafka,
        Workload::ConsumeJava,
    ];
    /// Every row the throughput runs give.
    const THROUGHPUT_ROWS: [Workload; 5] = [
        Workload::ProduceRdkafka,
        Workload::ProduceJava,
        Workload::ConsumeRdkafka,
        Workload::ConsumeJava,
        Workload::ConsumeJavaJoin,
    ];
    const LATENCY: [Workload; 4] = [
        Workload::LatencyP50,
        Workload::LatencyP99,
        Workload::LatencyP999,
        Workload::LatencyMax,
    ];
    const E2E: [Workload; 3] = [Workload::E2eAvg, Workload::E2eP99, Workload::E2eP999];
    const RECOVERY: [Workload; 3] = [
        Workload::RecoveryProduce,
        Workload::RestartClean,
        Workload::RestartKill9,
    ];

    fn label(self) -> &'static str {
        match self {
            Workload::ProduceRdkafka => "produce, rdkafka_performance, msgs/s",
            Workload::ProduceJava => "produce, kafka-producer-perf-test, msgs/s",
            Workload::ConsumeRdkafka => "consume from the start, rdkafka_performance, msgs/s",
            Workload::ConsumeJava => "consume from the start, kafka-consumer-perf-test, msgs/s",
            Workload::ConsumeJavaJoin => {
                "the Java consumer's group join in that run (rebalance.time.ms), ms"
            }
            Workload::LatencyP50 => "produce latency p50 at a fixed rate, linger.ms=0, ms",
            Workload::LatencyP99 => "produce latency p99 at a fixed rate, linger.ms=0, ms",
            Workload::LatencyP999 => "produce latency p99.9 at a fixed rate, linger.ms=0, ms",
            Workload::LatencyMax => "produce latency max at a fixed rate, linger.ms=0, ms",
            Workload::E2eAvg => "end-to-end latency average, one at a time, ms",
            Workload::E2eP99 => "end-to-end latency p99, one at a time, ms",
            Workload::E2eP999 => "end-to-end latency p99.9, one at a time, ms",
            Workload::RecoveryProduce => {
                "produce of the recovery log, rdkafka_performance acks=1, msgs/s"
            }
            Workload::RestartClean => {
                "start after a clean shutdown until the whole log is served, s"
            }
            Workload::RestartKill9 => "start after kill -9 until the whole log is served, s",
            Workload::ManyCreate => "kafka-topics --create (and --alter) of the topic, s",
            Workload::CoordinatorCommit => "offset commits (asynchronous), commits/s",
            Workload::CoordinatorLoad => {
                "start after a clean shutdown until every group's offset is answered, s"
            }
        }
    }
}

/// One run: its figure (messages per second, or milliseconds of latency)
/// and the brokers' CPU seconds during it.
#[derive(Clone, Copy, Debug)]
struct Sample {
    value: f64,
    broker_cpu_s: f64,
}

/// The number before `pat` in `line` (`... 810372 msgs/s`).
fn number_before(line: &str, pat: &str) -> Option<f64> {
    let i = line.find(pat)?;
    line[..i]
        .split(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .rfind(|s| !s.is_empty())?
        .parse()
        .ok()
}

fn kafka_tool() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compat-tests/scripts/kafka-tool.sh")
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!("{cmd:?} failed:\n{text}"));
    }
    Ok(text)
}

/// The Java producer's flags shared by its throughput and latency runs.
fn java_producer_args(
    args: &Args,
    topic: &str,
    count: u64,
    rate: i64,
    bootstrap: &str,
) -> Vec<String> {
    let mut v: Vec<String> = [
        "kafka-producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        &count.to_string(),
        "--record-size",
        &args.size.to_string(),
        "--throughput",
        &rate.to_string(),
        "--bootstrap-server",
        bootstrap,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for setting in args.producer_settings() {
        v.push("--command-property".into());
        v.push(setting);
    }
    if args.compression != "none" {
        v.push("--command-property".into());
        v.push(format!("compression.type={}", args.compression));
    }
    v
}

/// One workload against the cluster at `bootstrap`: messages per second
/// (throughput workloads), or the three latency percentiles in ms (one run
/// of the Java producer at `--latency-rate` for 10 s).
fn workload(
    w: Workload,
    args: &Args,
    dist: &KafkaDist,
    perf: &Path,
    bootstrap: &str,
) -> Result<Vec<(Workload, f64)>, String> {
    let (count, size) = (args.count.to_string(), args.size.to_string());
    let one = |v: f64| Ok(vec![(w, v)]);
    // librdkafka: the producer spreads keyless messages over the partitions
    // itself (no -p); the consumer names each partition.
    let partitions: Vec<String> = (0..args.partitions)
        .flat_map(|p| ["-p".to_string(), p.to_string()])
        .collect();
    match w {
        Workload::ProduceRdkafka => {
            let mut cmd = Command::new(perf);
            cmd.args([
                "-P", "-t", "bench-r", "-s", &size, "-c", &count, "-b", bootstrap,
            ])
            .args(["-X", &format!("compression.codec={}", args.compression)]);
            for setting in args.producer_settings() {
                cmd.args(["-X", &setting]);
            }
            if args.partitions == 1 {
                cmd.args(["-p", "0"]);
            }
            let out = run(&mut cmd)?;
            let line = out
                .lines()
                .rfind(|l| l.starts_with("% ") && l.contains(" messages produced "))
                .ok_or("no summary from rdkafka_performance -P")?;
            one(number_before(line, " msgs/s").ok_or_else(|| format!("unreadable: {line}"))?)
        }
        Workload::ConsumeRdkafka => {
            if args.cold {
                drop_page_cache()?;
            }
            let out = run(Command::new(perf)
                .args(["-C", "-t", "bench-r"])
                .args(&partitions)
                .args(["-o", "beginning", "-e", "-c", &count, "-b", bootstrap])
                // Room for a whole fetch of compressed batches (117 MB once
                // decompressed at 1 KiB): past the default 64 MB librdkafka
                // backs off a second after each fetch, whatever the broker.
                .args(["-X", "queued.max.messages.kbytes=1048576"]))?;
            let line = out
                .lines()
                .rfind(|l| {
                    l.starts_with("% ")
                        && l.contains(" consumed in ")
                        && !l.starts_with("% INTERVAL")
                })
                .ok_or("no summary from rdkafka_performance -C")?;
            one(number_before(line, " msgs/s").ok_or_else(|| format!("unreadable: {line}"))?)
        }
        Workload::ProduceJava => {
            let out = run(Command::new(kafka_tool())
                .env("STRAND_KAFKA_DIR", &dist.dir)
                .args(java_producer_args(
                    args, "bench-j", args.count, -1, bootstrap,
                )))?;
            let line = out
                .lines()
                .rfind(|l| l.contains("records sent") && l.contains("th."))
                .ok_or("no summary from kafka-producer-perf-test")?;
            one(number_before(line, " records/sec").ok_or_else(|| format!("unreadable: {line}"))?)
        }
        Workload::ConsumeJava => {
            if args.cold {
                drop_page_cache()?;
            }
            let out = run(Command::new(kafka_tool())
                .env("STRAND_KAFKA_DIR", &dist.dir)
                .args([
                    "kafka-consumer-perf-test",
                    "--topic",
                    "bench-j",
                    "--num-records",
                    &count,
                    "--timeout",
                    "120000",
                    "--bootstrap-server",
                    bootstrap,
                ]))?;
            // The CSV row after the header; nMsg.sec is its sixth column
            // (the whole run, the group join included), rebalance.time.ms
            // its seventh.
            let row = out
                .lines()
                .rfind(|l| l.split(", ").count() >= 10 && !l.starts_with("start.time"))
                .ok_or("no summary from kafka-consumer-perf-test")?;
            let column = |i: usize| -> Result<f64, String> {
                row.split(", ")
                    .nth(i)
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or_else(|| format!("unreadable: {row}"))
            };
            Ok(vec![
                (Workload::ConsumeJava, column(5)?),
                (Workload::ConsumeJavaJoin, column(6)?),
            ])
        }
        Workload::LatencyP50
        | Workload::LatencyP99
        | Workload::LatencyP999
        | Workload::LatencyMax => {
            let (topic, rate, secs) = if args.many_partitions > 0 {
                ("bench-many", args.many_partitions, 30)
            } else {
                ("bench-l", args.latency_rate, 10)
            };
            // The first 2 s are the client's start (connections, metadata,
            // JIT) and are left out: the steady-state line is the figure.
            let warmup = rate * 2;
            let mut java =
                java_producer_args(args, topic, rate * secs + warmup, rate as i64, bootstrap);
            // linger.ms=0 (Kafka 3.x's default; 4.x waits 5 ms to fill a
            // batch): the client sends as soon as it can, so what is left
            // of the latency is the broker's and the network's.
            java.extend([
                "--warmup-records".to_string(),
                warmup.to_string(),
                "--command-property".to_string(),
                "linger.ms=0".to_string(),
            ]);
            if args.many_partitions > 0 {
                java.extend([
                    "--command-property".to_string(),
                    "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"
                        .to_string(),
                ]);
            }
            let out = run(Command::new(kafka_tool())
                .env("STRAND_KAFKA_DIR", &dist.dir)
                .args(java))?;
            let line = out
                .lines()
                .rfind(|l| l.contains("steady state records sent") && l.contains("99.9th"))
                .ok_or("no steady-state summary from kafka-producer-perf-test at a fixed rate")?;
            let at =
                |pat: &str| number_before(line, pat).ok_or_else(|| format!("unreadable: {line}"));
            Ok(vec![
                (Workload::LatencyP50, at(" ms 50th")?),
                (Workload::LatencyP99, at(" ms 99th")?),
                (Workload::LatencyP999, at(" ms 99.9th")?),
                (Workload::LatencyMax, at(" ms max latency")?),
            ])
        }
        Workload::ConsumeJavaJoin => Err("the Java consumer's run gives its join time".into()),
        Workload::RecoveryProduce
        | Workload::RestartClean
        | Workload::RestartKill9
        | Workload::CoordinatorCommit
        | Workload::CoordinatorLoad => {
            Err("restarting runs need the cluster (one_rep runs them)".into())
        }
        Workload::ManyCreate => {
            // Kafka refuses one request that makes more than 10,000
            // metadata records ("excessively large batch operation"): the
            // topic is created with at most 5,000 partitions, then grown.
            const STEP: u64 = 5_000;
            let started = std::time::Instant::now();
            run(Command::new(kafka_tool())
                .env("STRAND_KAFKA_DIR", &dist.dir)
                .args(["kafka-topics", "--bootstrap-server", bootstrap, "--create"])
                .args(["--topic", "bench-many", "--partitions"])
                .arg(args.many_partitions.min(STEP).to_string())
                .args(["--replication-factor", &args.nodes.to_string()]))?;
            let mut partitions = args.many_partitions.min(STEP);
            while partitions < args.many_partitions {
                partitions = (partitions + STEP).min(args.many_partitions);
                run(Command::new(kafka_tool())
                    .env("STRAND_KAFKA_DIR", &dist.dir)
                    .args(["kafka-topics", "--bootstrap-server", bootstrap, "--alter"])
                    .args(["--topic", "bench-many", "--partitions"])
                    .arg(partitions.to_string()))?;
            }
            let created = started.elapsed().as_secs_f64();
            // Two messages into every partition, as fast as they go, before
            // the timed run: that measures a running topic, not the
            // partitions' creation catching up.
            let mut prime =
                java_producer_args(args, "bench-many", args.many_partitions * 2, -1, bootstrap);
            prime.extend([
                "--command-property".to_string(),
                "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"
                    .to_string(),
            ]);
            run(Command::new(kafka_tool())
                .env("STRAND_KAFKA_DIR", &dist.dir)
                .args(prime))?;
            one(created)
        }
        Workload::E2eAvg | Workload::E2eP99 | Workload::E2eP999 => {
            let out = run(Command::new(kafka_tool())
                .env("STRAND_KAFKA_DIR", &dist.dir)
                .args([
                    "kafka-e2e-latency",
                    "--bootstrap-server",
                    bootstrap,
                    "--topic",
                    "bench-e",
                    "--num-records",
                    &args.e2e_count.to_string(),
                    "--producer-acks",
                    &args.acks,
                    "--record-size",
                    &size,
                ]))?;
            // "Avg latency: 1.8208 ms" and "Percentiles: 50th = 1, 99th = 8, 99.9th = 46".
            let find = |prefix: &str| {
                out.lines()
                    .rfind(|l| l.starts_with(prefix))
                    .ok_or_else(|| format!("no {prefix:?} line from EndToEndLatency:\n{out}"))
            };
            let avg = find("Avg latency:")?;
            let pct = find("Percentiles:")?;
            let after = |line: &str, pat: &str| -> Result<f64, String> {
                line.split_once(pat)
                    .and_then(|(_, r)| r.split([',', ' ']).find(|s| !s.is_empty()))
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("unreadable: {line}"))
            };
            Ok(vec![
                (Workload::E2eAvg, after(avg, "Avg latency:")?),
                (Workload::E2eP99, after(pct, " 99th = ")?),
                (Workload::E2eP999, after(pct, " 99.9th = ")?),
            ])
        }
    }
}

/// The recovery run on a one-node `cluster`: `--recovery-gib` GiB into
/// one partition, then the time from starting the node until the log end
/// offset is the whole log again, after a clean shutdown and after kill -9.
fn recovery(
    args: &Args,
    perf: &Path,
    cluster: &mut Cluster,
) -> Result<Vec<(Workload, f64)>, String> {
    let count = (args.recovery_gib << 30) / args.size.max(1);
    let bootstrap = cluster.bootstrap();
    let out = run(Command::new(perf)
        .args([
            "-P",
            "-t",
            "bench-rec",
            "-p",
            "0",
            "-s",
            &args.size.to_string(),
        ])
        .args(["-c", &count.to_string(), "-b", &bootstrap, "-X", "acks=1"]))?;
    let line = out
        .lines()
        .rfind(|l| l.starts_with("% ") && l.contains(" messages produced "))
        .ok_or("no summary from rdkafka_performance -P")?;
    let rate = number_before(line, " msgs/s").ok_or_else(|| format!("unreadable: {line}"))?;
    let node = *cluster.node_ids().first().ok_or("no node")?;
    let mut restart = |kill: bool| -> Result<f64, String> {
        if kill {
            cluster.kill9(node).map_err(|e| e.to_string())?;
        } else {
            cluster
                .terminate_timeout(node, Duration::from_secs(600))
                .map_err(|e| e.to_string())?;
        }
        let started = std::time::Instant::now();
        cluster.respawn(node).map_err(|e| e.to_string())?;
        cluster
            .wait_ready(Duration::from_secs(900))
            .map_err(|e| e.to_string())?;
        let bootstrap = cluster.bootstrap();
        // The node serves again once ListOffsets answers the whole log.
        loop {
            let end = Command::new("kcat")
                .args(["-Q", "-b", &bootstrap, "-t", "bench-rec:0:-1"])
                .output()
                .ok()
                .and_then(|o| {
                    let text = String::from_utf8_lossy(&o.stdout).to_string();
                    text.split_once(" offset ")
                        .and_then(|(_, n)| n.trim().parse::<u64>().ok())
                });
            if end == Some(count) {
                return Ok(started.elapsed().as_secs_f64());
            }
            if started.elapsed() > Duration::from_secs(900) {
                return Err(format!("the log end is {end:?}, not {count}, after 900 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // kill -9 first, while the log just written is not fsynced: what a
    // crash leaves to recover.
    let killed = restart(true)?;
    let clean = restart(false)?;
    Ok(vec![
        (Workload::RecoveryProduce, rate),
        (Workload::RestartClean, clean),
        (Workload::RestartKill9, killed),
    ])
}

/// The coordinator run on a one-node `cluster`: the groups' commits, then
/// the time from starting the node again until every group's committed
/// offset is answered.
fn coordinator_load(args: &Args, cluster: &mut Cluster) -> Result<Vec<(Workload, f64)>, String> {
    let python = std::env::var("STRAND_PYTHON").unwrap_or_else(|_| {
        format!(
            "{}/python/bin/python3",
            strand_compat_tests::harness::strand_cache().display()
        )
    });
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compat-tests/clients/offsets_load.py");
    let (groups, commits) = (
        args.coordinator_groups.to_string(),
        args.coordinator_commits.to_string(),
    );
    let started = std::time::Instant::now();
    run(Command::new(&python).arg(&script).args([
        "commit",
        &cluster.bootstrap(),
        "bench-rec",
        &groups,
        &commits,
    ]))?;
    let rate = (args.coordinator_groups * args.coordinator_commits) as f64
        / started.elapsed().as_secs_f64();
    let node = *cluster.node_ids().first().ok_or("no node")?;
    cluster
        .terminate_timeout(node, Duration::from_secs(600))
        .map_err(|e| e.to_string())?;
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs_f64();
    cluster.respawn(node).map_err(|e| e.to_string())?;
    let out = run(Command::new(&python).arg(&script).args([
        "wait",
        &cluster.bootstrap(),
        "bench-rec",
        &groups,
        &commits,
        &format!("{since:.3}"),
    ]))?;
    let load = out
        .lines()
        .rev()
        .find_map(|l| l.trim().parse::<f64>().ok())
        .ok_or_else(|| format!("no time from offsets_load.py wait:\n{out}"))?;
    Ok(vec![
        (Workload::CoordinatorCommit, rate),
        (Workload::CoordinatorLoad, load),
    ])
}

/// Writes back dirty pages and empties the page cache, so the next read
/// comes from the disk.
fn drop_page_cache() -> Result<(), String> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("--cold needs root (/proc/sys/vm/drop_caches): {e}"))
}

/// The CPU seconds every node of `cluster` has used so far.
fn cluster_cpu_seconds(cluster: &mut Cluster) -> f64 {
    cluster
        .node_ids()
        .into_iter()
        .filter_map(|id| cluster.pid(id))
        .map(cpu_seconds)
        .sum()
}

/// One fresh cluster of `server`: every workload once, then the largest
/// peak RSS of its nodes.
fn one_rep(
    server: Server,
    args: &Args,
    dist: &KafkaDist,
    perf: &Path,
) -> Result<(Vec<(Workload, Sample)>, f64), String> {
    let name = server.name();
    let rf = args.nodes.to_string();
    let min_isr = if args.nodes >= 3 { "2" } else { "1" };
    let spec = ClusterSpec::combined(usize::from(args.nodes))
        .with_override("num.partitions", "1")
        .with_override("default.replication.factor", &rf)
        .with_override("min.insync.replicas", min_isr)
        .with_override("offsets.topic.replication.factor", &rf)
        .with_override("transaction.state.log.replication.factor", &rf)
        .with_override("transaction.state.log.min.isr", min_isr)
        .with_override("group.initial.rebalance.delay.ms", "0")
        .with_start_timeout(Duration::from_secs(90));
    let mut cluster = Cluster::start_server(server, spec).map_err(|e| format!("{name}: {e}"))?;
    let bootstrap = cluster.bootstrap();
    for topic in ["bench-r", "bench-j", "bench-l", "bench-e", "bench-rec"] {
        run(Command::new(kafka_tool())
            .env("STRAND_KAFKA_DIR", &dist.dir)
            .args([
                "kafka-topics",
                "--bootstrap-server",
                &bootstrap,
                "--create",
                "--topic",
                topic,
                "--partitions",
                &args.partitions.to_string(),
                "--replication-factor",
                &rf,
            ]))?;
    }
    let mut runs: Vec<Workload> = if args.latency_only {
        Vec::new()
    } else {
        Workload::THROUGHPUT.to_vec()
    };
    if args.recovery_gib > 0 {
        runs = vec![Workload::RecoveryProduce];
    } else if args.many_partitions > 0 {
        runs = vec![Workload::ManyCreate, Workload::LatencyP50];
    } else if args.coordinator_commits > 0 {
        runs = vec![Workload::CoordinatorCommit];
    } else if args.latency_rate > 0 {
        // One run gives all three percentiles.
        runs.push(Workload::LatencyP50);
    }
    if args.e2e_count > 0
        && args.recovery_gib == 0
        && args.many_partitions == 0
        && args.coordinator_commits == 0
    {
        runs.push(Workload::E2eAvg);
    }
    let mut samples = Vec::new();
    for w in runs {
        let before = cluster_cpu_seconds(&mut cluster);
        let figures = if w == Workload::RecoveryProduce {
            recovery(args, perf, &mut cluster)?
        } else if w == Workload::CoordinatorCommit {
            coordinator_load(args, &mut cluster)?
        } else {
            workload(w, args, dist, perf, &bootstrap)?
        };
        // A run that restarts the node has no CPU figure: the counters
        // start again with the new process.
        let broker_cpu_s = if matches!(w, Workload::RecoveryProduce | Workload::CoordinatorCommit) {
            f64::NAN
        } else {
            cluster_cpu_seconds(&mut cluster) - before
        };
        for (w, value) in figures {
            eprintln!(
                "strand-vs-kafka: {name}: {}: {value:.1}, brokers {broker_cpu_s:.1} CPU s",
                w.label()
            );
            samples.push((
                w,
                Sample {
                    value,
                    broker_cpu_s,
                },
            ));
        }
    }
    let rss = cluster
        .node_ids()
        .into_iter()
        .filter_map(|id| cluster.pid(id))
        .map(peak_rss_mib)
        .fold(0.0, f64::max);
    // A broker slower to stop than the harness waits is killed: reported,
    // not a failed run (its figures were taken; the next run starts fresh).
    if let Err(e) = cluster.shutdown() {
        eprintln!("strand-vs-kafka: {name}: stopping: {e}");
    }
    Ok((samples, rss))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn spread(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{lo:.1}-{hi:.1}")
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let modes = [
        args.recovery_gib,
        args.many_partitions,
        args.coordinator_commits,
    ];
    if modes.iter().filter(|m| **m > 0).count() > 1 {
        eprintln!("strand-vs-kafka: --recovery-gib, --many-partitions and --coordinator-commits are separate runs");
        return std::process::ExitCode::from(2);
    }
    if (args.recovery_gib > 0 || args.coordinator_commits > 0) && args.nodes != 1 {
        eprintln!("strand-vs-kafka: --recovery-gib and --coordinator-commits run on one node");
        return std::process::ExitCode::from(2);
    }
    let dist = match KafkaDist::locate() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("strand-vs-kafka: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let suite = args
        .suite
        .clone()
        .unwrap_or_else(|| strand_compat_tests::harness::strand_cache().join("librdkafka-2.12.1"));
    let perf = suite.join("examples/rdkafka_performance");
    // (system, workload) -> samples; system -> peak RSS per rep.
    let mut samples: Vec<(&str, Workload, Sample)> = Vec::new();
    let mut rss: Vec<(&str, f64)> = Vec::new();
    for rep in 0..args.reps {
        let mut order = [
            ("Strand", Server::Strand(args.strand.clone())),
            ("Kafka", Server::Kafka(dist.clone())),
        ];
        if rep % 2 == 1 {
            order.reverse();
        }
        for (name, server) in order {
            match one_rep(server, &args, &dist, &perf) {
                Ok((s, r)) => {
                    samples.extend(s.into_iter().map(|(w, x)| (name, w, x)));
                    rss.push((name, r));
                }
                Err(e) => {
                    eprintln!("strand-vs-kafka: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
    }
    println!(
        "| workload ({} msgs of {} B, {} node(s), {} partition(s), acks={}, idempotence {}, compression {}{}) | Strand median (range) | Kafka median (range) | Strand / Kafka | brokers' CPU s per run, Strand / Kafka |",
        args.count,
        args.size,
        args.nodes,
        args.partitions,
        args.acks,
        args.idempotence,
        args.compression,
        if args.cold { ", page cache emptied before consuming" } else { "" }
    );
    println!("|---|---:|---:|---:|---:|");
    let mut shown: Vec<Workload> = if args.latency_only {
        Vec::new()
    } else {
        Workload::THROUGHPUT_ROWS.to_vec()
    };
    if args.recovery_gib > 0 {
        shown = Workload::RECOVERY.to_vec();
    } else if args.many_partitions > 0 {
        shown = vec![Workload::ManyCreate];
        shown.extend(Workload::LATENCY);
    } else if args.coordinator_commits > 0 {
        shown = vec![Workload::CoordinatorCommit, Workload::CoordinatorLoad];
    } else {
        if args.latency_rate > 0 {
            shown.extend(Workload::LATENCY);
        }
        if args.e2e_count > 0 {
            shown.extend(Workload::E2E);
        }
    }
    for w in shown {
        let of = |sys: &str, f: fn(&Sample) -> f64| -> Vec<f64> {
            samples
                .iter()
                .filter(|(s, x, _)| *s == sys && *x == w)
                .map(|(_, _, v)| f(v))
                .collect()
        };
        let (s, k) = (of("Strand", |x| x.value), of("Kafka", |x| x.value));
        let (sc, kc) = (
            of("Strand", |x| x.broker_cpu_s),
            of("Kafka", |x| x.broker_cpu_s),
        );
        let label = if Workload::LATENCY.contains(&w) && args.many_partitions > 0 {
            format!(
                "{} ({} msgs/s round robin over {} partitions, 30 s)",
                w.label(),
                args.many_partitions,
                args.many_partitions
            )
        } else if Workload::LATENCY.contains(&w) {
            format!("{} ({} msgs/s)", w.label(), args.latency_rate)
        } else if Workload::E2E.contains(&w) {
            format!("{} ({} msgs)", w.label(), args.e2e_count)
        } else {
            w.label().to_string()
        };
        let cpu = if sc.iter().chain(&kc).any(|c| c.is_nan()) {
            "-".to_string()
        } else {
            format!("{:.1} / {:.1}", median(sc), median(kc))
        };
        println!(
            "| {label} | {:.1} ({}) | {:.1} ({}) | {:.2} | {cpu} |",
            median(s.clone()),
            spread(&s),
            median(k.clone()),
            spread(&k),
            median(s) / median(k).max(f64::MIN_POSITIVE),
        );
    }
    let peak = |sys: &str| -> Vec<f64> {
        rss.iter()
            .filter(|(s, _)| *s == sys)
            .map(|(_, r)| *r)
            .collect()
    };
    println!(
        "| peak RSS of a broker, MiB | {:.0} ({}) | {:.0} ({}) | {:.2} | |",
        median(peak("Strand")),
        spread(&peak("Strand")),
        median(peak("Kafka")),
        spread(&peak("Kafka")),
        median(peak("Strand")) / median(peak("Kafka")).max(1.0)
    );
    std::process::ExitCode::SUCCESS
}

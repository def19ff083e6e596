//! strand-vs-kafka: Strand and the reference Apache Kafka on the same
//! machine, in the same run, with the same clients (issue 17): for each
//! repetition a fresh cluster of each (one node, or three with replication
//! factor 3 and min.insync.replicas=2; their order alternating), then
//! produce (acks=all, optionally compressed, over one or more partitions)
//! and consume of SIZE-byte messages with librdkafka's `rdkafka_performance`
//! and with Kafka's own `kafka-producer-perf-test` /
//! `kafka-consumer-perf-test` (the Java client), and, at a fixed rate, the
//! Java producer's latency percentiles. Prints a markdown table: each
//! system's median and spread, their ratio, the brokers' CPU seconds per
//! run and their peak RSS. A benchmark, not a test: run it on a quiet
//! machine, with a release build of Strand.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

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
    /// test at a fixed rate, acks=all); 0 leaves it out.
    #[arg(long, default_value_t = 5_000)]
    latency_rate: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Workload {
    ProduceRdkafka,
    ProduceJava,
    ConsumeRdkafka,
    ConsumeJava,
    /// The Java producer at a fixed rate: its p50 / p99 / p99.9 latency.
    LatencyP50,
    LatencyP99,
    LatencyP999,
}

impl Workload {
    const THROUGHPUT: [Workload; 4] = [
        Workload::ProduceRdkafka,
        Workload::ProduceJava,
        Workload::ConsumeRdkafka,
        Workload::ConsumeJava,
    ];
    const LATENCY: [Workload; 3] = [
        Workload::LatencyP50,
        Workload::LatencyP99,
        Workload::LatencyP999,
    ];

    fn label(self) -> &'static str {
        match self {
            Workload::ProduceRdkafka => "produce acks=all, rdkafka_performance, msgs/s",
            Workload::ProduceJava => "produce acks=all, kafka-producer-perf-test, msgs/s",
            Workload::ConsumeRdkafka => "consume from the start, rdkafka_performance, msgs/s",
            Workload::ConsumeJava => "consume from the start, kafka-consumer-perf-test, msgs/s",
            Workload::LatencyP50 => "produce latency p50 at a fixed rate, ms",
            Workload::LatencyP99 => "produce latency p99 at a fixed rate, ms",
            Workload::LatencyP999 => "produce latency p99.9 at a fixed rate, ms",
        }
    }

    /// Whether a lower figure is the better one.
    fn lower_is_better(self) -> bool {
        Workload::LATENCY.contains(&self)
    }
}

/// One run: its figure (messages per second, or milliseconds of latency)
/// and the brokers' CPU seconds during it.
#[derive(Clone, Copy, Debug)]
struct Sample {
    value: f64,
    broker_cpu_s: f64,
}

/// The CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name: utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// Peak resident set (VmHWM) in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
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
        "--command-property",
        "acks=all",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
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
            .args(["-X", "acks=all"])
            .args(["-X", &format!("compression.codec={}", args.compression)]);
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
            let out = run(Command::new(perf)
                .args(["-C", "-t", "bench-r"])
                .args(&partitions)
                .args(["-o", "beginning", "-e", "-c", &count, "-b", bootstrap]))?;
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
            // The CSV row after the header; nMsg.sec is its sixth column.
            let row = out
                .lines()
                .rfind(|l| l.split(", ").count() >= 10 && !l.starts_with("start.time"))
                .ok_or("no summary from kafka-consumer-perf-test")?;
            one(row
                .split(", ")
                .nth(5)
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| format!("unreadable: {row}"))?)
        }
        Workload::LatencyP50 | Workload::LatencyP99 | Workload::LatencyP999 => {
            let rate = args.latency_rate;
            let out = run(Command::new(kafka_tool())
                .env("STRAND_KAFKA_DIR", &dist.dir)
                .args(java_producer_args(
                    args,
                    "bench-l",
                    rate * 10,
                    rate as i64,
                    bootstrap,
                )))?;
            let line = out
                .lines()
                .rfind(|l| l.contains("records sent") && l.contains("99.9th"))
                .ok_or("no summary from kafka-producer-perf-test at a fixed rate")?;
            let at =
                |pat: &str| number_before(line, pat).ok_or_else(|| format!("unreadable: {line}"));
            Ok(vec![
                (Workload::LatencyP50, at(" ms 50th")?),
                (Workload::LatencyP99, at(" ms 99th")?),
                (Workload::LatencyP999, at(" ms 99.9th")?),
            ])
        }
    }
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
    for topic in ["bench-r", "bench-j", "bench-l"] {
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
    let mut runs: Vec<Workload> = Workload::THROUGHPUT.to_vec();
    if args.latency_rate > 0 {
        // One run gives all three percentiles.
        runs.push(Workload::LatencyP50);
    }
    let mut samples = Vec::new();
    for w in runs {
        let before = cluster_cpu_seconds(&mut cluster);
        let figures = workload(w, args, dist, perf, &bootstrap)?;
        let broker_cpu_s = cluster_cpu_seconds(&mut cluster) - before;
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
    cluster
        .shutdown()
        .map_err(|e| format!("{name}: stopping: {e}"))?;
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
        "| workload ({} msgs of {} B, {} node(s), {} partition(s), compression {}) | Strand median (range) | Kafka median (range) | Strand / Kafka | brokers' CPU s per run, Strand / Kafka |",
        args.count, args.size, args.nodes, args.partitions, args.compression
    );
    println!("|---|---:|---:|---:|---:|");
    let mut shown: Vec<Workload> = Workload::THROUGHPUT.to_vec();
    if args.latency_rate > 0 {
        shown.extend(Workload::LATENCY);
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
        let label = if w.lower_is_better() {
            format!("{} ({} msgs/s)", w.label(), args.latency_rate)
        } else {
            w.label().to_string()
        };
        println!(
            "| {label} | {:.1} ({}) | {:.1} ({}) | {:.2} | {:.1} / {:.1} |",
            median(s.clone()),
            spread(&s),
            median(k.clone()),
            spread(&k),
            median(s) / median(k).max(f64::MIN_POSITIVE),
            median(sc),
            median(kc)
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

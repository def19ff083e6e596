//! strand-vs-kafka: Strand and the reference Apache Kafka on the same
//! machine, in the same run, with the same clients (issue 17): for each
//! repetition a fresh single node of each (their order alternating), then
//! produce (acks=all) and consume of SIZE-byte messages with librdkafka's
//! `rdkafka_performance` and with Kafka's own `kafka-producer-perf-test` /
//! `kafka-consumer-perf-test` (the Java client). Prints a markdown table:
//! each system's median and spread, their ratio, the broker's CPU seconds
//! per run and its peak RSS. A benchmark, not a test: run it on a quiet
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Workload {
    ProduceRdkafka,
    ProduceJava,
    ConsumeRdkafka,
    ConsumeJava,
}

impl Workload {
    const ALL: [Workload; 4] = [
        Workload::ProduceRdkafka,
        Workload::ProduceJava,
        Workload::ConsumeRdkafka,
        Workload::ConsumeJava,
    ];

    fn label(self) -> &'static str {
        match self {
            Workload::ProduceRdkafka => "produce acks=all, rdkafka_performance",
            Workload::ProduceJava => "produce acks=all, kafka-producer-perf-test",
            Workload::ConsumeRdkafka => "consume from the start, rdkafka_performance",
            Workload::ConsumeJava => "consume from the start, kafka-consumer-perf-test",
        }
    }
}

/// One run: messages per second and the broker's CPU seconds during it.
#[derive(Clone, Copy, Debug)]
struct Sample {
    msgs_per_s: f64,
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

/// One workload against the node at `bootstrap`: messages per second.
fn workload(
    w: Workload,
    args: &Args,
    dist: &KafkaDist,
    perf: &Path,
    bootstrap: &str,
) -> Result<f64, String> {
    let (count, size) = (args.count.to_string(), args.size.to_string());
    match w {
        Workload::ProduceRdkafka => {
            let out = run(Command::new(perf).args([
                "-P", "-t", "bench-r", "-p", "0", "-s", &size, "-c", &count, "-b", bootstrap, "-X",
                "acks=all",
            ]))?;
            let line = out
                .lines()
                .rfind(|l| l.starts_with("% ") && l.contains(" messages produced "))
                .ok_or("no summary from rdkafka_performance -P")?;
            number_before(line, " msgs/s").ok_or_else(|| format!("unreadable: {line}"))
        }
        Workload::ConsumeRdkafka => {
            let out = run(Command::new(perf).args([
                "-C",
                "-t",
                "bench-r",
                "-p",
                "0",
                "-o",
                "beginning",
                "-e",
                "-c",
                &count,
                "-b",
                bootstrap,
            ]))?;
            let line = out
                .lines()
                .rfind(|l| {
                    l.starts_with("% ")
                        && l.contains(" consumed in ")
                        && !l.starts_with("% INTERVAL")
                })
                .ok_or("no summary from rdkafka_performance -C")?;
            number_before(line, " msgs/s").ok_or_else(|| format!("unreadable: {line}"))
        }
        Workload::ProduceJava => {
            let out = run(Command::new(kafka_tool())
                .env("STRAND_KAFKA_DIR", &dist.dir)
                .args([
                    "kafka-producer-perf-test",
                    "--topic",
                    "bench-j",
                    "--num-records",
                    &count,
                    "--record-size",
                    &size,
                    "--throughput",
                    "-1",
                    "--bootstrap-server",
                    bootstrap,
                    "--command-property",
                    "acks=all",
                ]))?;
            let line = out
                .lines()
                .rfind(|l| l.contains("records sent") && l.contains("th."))
                .ok_or("no summary from kafka-producer-perf-test")?;
            number_before(line, " records/sec").ok_or_else(|| format!("unreadable: {line}"))
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
            row.split(", ")
                .nth(5)
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| format!("unreadable: {row}"))
        }
    }
}

/// One fresh node of `server`: every workload once, then its peak RSS.
fn one_rep(
    server: Server,
    args: &Args,
    dist: &KafkaDist,
    perf: &Path,
) -> Result<(Vec<(Workload, Sample)>, f64), String> {
    let name = server.name();
    let spec = ClusterSpec::combined(1)
        .with_override("num.partitions", "1")
        .with_override("default.replication.factor", "1")
        .with_override("offsets.topic.replication.factor", "1")
        .with_override("transaction.state.log.replication.factor", "1")
        .with_override("transaction.state.log.min.isr", "1")
        .with_override("group.initial.rebalance.delay.ms", "0")
        .with_start_timeout(Duration::from_secs(90));
    let mut cluster = Cluster::start_server(server, spec).map_err(|e| format!("{name}: {e}"))?;
    let bootstrap = cluster.bootstrap();
    let pid = cluster.pid(1).ok_or("no broker process")?;
    for topic in ["bench-r", "bench-j"] {
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
                "1",
                "--replication-factor",
                "1",
            ]))?;
    }
    let mut samples = Vec::new();
    for w in Workload::ALL {
        let before = cpu_seconds(pid);
        let msgs_per_s = workload(w, args, dist, perf, &bootstrap)?;
        let broker_cpu_s = cpu_seconds(pid) - before;
        eprintln!(
            "strand-vs-kafka: {name}: {}: {msgs_per_s:.0} msgs/s, broker {broker_cpu_s:.1} CPU s",
            w.label()
        );
        samples.push((
            w,
            Sample {
                msgs_per_s,
                broker_cpu_s,
            },
        ));
    }
    let rss = peak_rss_mib(pid);
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
    format!("{lo:.0}-{hi:.0}")
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
        "| workload ({} msgs of {} B, one node) | Strand msgs/s median (range) | Kafka msgs/s median (range) | Strand / Kafka | broker CPU s per run, Strand / Kafka |",
        args.count, args.size
    );
    println!("|---|---:|---:|---:|---:|");
    for w in Workload::ALL {
        let of = |sys: &str, f: fn(&Sample) -> f64| -> Vec<f64> {
            samples
                .iter()
                .filter(|(s, x, _)| *s == sys && *x == w)
                .map(|(_, _, v)| f(v))
                .collect()
        };
        let (s, k) = (
            of("Strand", |x| x.msgs_per_s),
            of("Kafka", |x| x.msgs_per_s),
        );
        let (sc, kc) = (
            of("Strand", |x| x.broker_cpu_s),
            of("Kafka", |x| x.broker_cpu_s),
        );
        println!(
            "| {} | {:.0} ({}) | {:.0} ({}) | {:.2} | {:.1} / {:.1} |",
            w.label(),
            median(s.clone()),
            spread(&s),
            median(k.clone()),
            spread(&k),
            median(s) / median(k).max(1.0),
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
        "| peak RSS of the broker, MiB | {:.0} ({}) | {:.0} ({}) | {:.2} | |",
        median(peak("Strand")),
        spread(&peak("Strand")),
        median(peak("Kafka")),
        spread(&peak("Kafka")),
        median(peak("Strand")) / median(peak("Kafka")).max(1.0)
    );
    std::process::ExitCode::SUCCESS
}

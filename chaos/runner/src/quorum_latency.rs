//! strand-quorum-latency: acks=all produce latency at a fixed rate under
//! `strand.acks.policy=replica-count` (2 of 3) and under Kafka's
//! `all-in-sync`, on one 3-node cluster with one follower of both topics
//! paused in bursts (SIGSTOP for `--stop-ms` every `--period-ms`).
//!
//! Both topics have their replicas in the same order, so the same node leads
//! both and the same node is the paused follower; the runs alternate between
//! the topics, `--runs` times each. Each message's latency is from `send`
//! to its delivery report (librdkafka through the rdkafka crate, acks=all,
//! idempotent, linger 0). Prints one table of p50/p99/p99.9/max per policy,
//! over all runs, and per run.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use clap::Parser;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

#[derive(Parser, Debug)]
#[command(
    about = "acks=all latency, replica-count 2 of 3 against all-in-sync, with a follower paused in bursts"
)]
struct Args {
    /// The strand binary (a release build).
    #[arg(long)]
    strand: PathBuf,
    /// Messages per second.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Seconds per run.
    #[arg(long, default_value_t = 20)]
    secs: u64,
    /// Runs per policy (alternating).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Message size in bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// The follower is paused this long...
    #[arg(long, default_value_t = 400)]
    stop_ms: u64,
    /// ...every this long (0: never paused).
    #[arg(long, default_value_t = 1200)]
    period_ms: u64,
    /// `strand.acks.eviction.ms` of the replica-count topic.
    #[arg(long, default_value_t = 200)]
    eviction_ms: u64,
}

struct Latencies(Arc<Mutex<Vec<u64>>>, Arc<Mutex<u64>>);

impl ClientContext for Latencies {}

impl ProducerContext for Latencies {
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Self::DeliveryOpaque) {
        match result {
            Ok(_) => {
                if let Ok(mut v) = self.0.lock() {
                    v.push(sent.elapsed().as_micros() as u64);
                }
            }
            Err(_) => {
                if let Ok(mut f) = self.1.lock() {
                    *f += 1;
                }
            }
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strand-quorum-latency: {e}");
            ExitCode::from(2)
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn row(name: &str, mut v: Vec<u64>, failed: u64) -> String {
    v.sort_unstable();
    format!(
        "| {name} | {} | {failed} | {:.1} | {:.1} | {:.1} | {:.1} |",
        v.len(),
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        percentile(&v, 0.999),
        v.last().map_or(f64::NAN, |m| *m as f64 / 1000.0)
    )
}

fn run(args: &Args) -> Result<(), String> {
    let spec = ClusterSpec::combined(3).with_override("auto.create.topics.enable", "false");
    let mut cluster = Cluster::start(&args.strand, spec).map_err(|e| format!("cluster: {e}"))?;
    let bootstrap = cluster.bootstrap();
    let ids = cluster.node_ids();
    let (leader, paused) = (ids[0], ids[2]);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let eviction = args.eviction_ms.to_string();
    let assignment: Vec<i32> = ids.clone();
    let replicas: [&[i32]; 1] = [&assignment];
    let quorum = NewTopic::new(
        "latency-replica-count",
        1,
        TopicReplication::Variable(&replicas),
    )
    .set("min.insync.replicas", "2")
    .set("strand.acks.policy", "replica-count")
    .set("strand.acks.replicas", "2")
    .set("strand.acks.eviction.ms", &eviction);
    let all = NewTopic::new(
        "latency-all-in-sync",
        1,
        TopicReplication::Variable(&replicas),
    )
    .set("min.insync.replicas", "2");
    for r in rt
        .block_on(admin.create_topics(&[quorum, all], &AdminOptions::new()))
        .map_err(|e| e.to_string())?
    {
        r.map_err(|(t, e)| format!("create {t}: {e}"))?;
    }
    let topics = ["latency-replica-count", "latency-all-in-sync"];
    wait_whole(&bootstrap, &topics, leader)?;
    println!(
        "3 nodes, leader {leader}, follower {paused} paused {} ms every {} ms; {} msgs/s of {} B for {} s per run, {} runs per policy; eviction {} ms",
        args.stop_ms, args.period_ms, args.rate, args.size, args.secs, args.runs, args.eviction_ms
    );
    let mut all_samples: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let mut all_failed = [0u64; 2];
    let mut per_run = Vec::new();
    for run in 0..args.runs {
        let order = if run % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            wait_whole(&bootstrap, &topics, leader)?;
            let (samples, failed) = produce(args, &bootstrap, topics[k], &mut cluster, paused)?;
            per_run.push(row(
                &format!("{} (run {})", topics[k], run + 1),
                samples.clone(),
                failed,
            ));
            all_samples[k].extend(samples);
            all_failed[k] += failed;
        }
    }
    println!("| topic | acknowledged | failed | p50 ms | p99 ms | p99.9 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for k in 0..2 {
        println!("{}", row(topics[k], all_samples[k].clone(), all_failed[k]));
    }
    for r in per_run {
        println!("{r}");
    }
    Ok(())
}

/// Until `leader` leads every topic with all three replicas in sync.
fn wait_whole(bootstrap: &str, topics: &[&str], leader: i32) -> Result<(), String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let whole = topics.iter().all(|t| {
            c.fetch_metadata(Some(t), Duration::from_secs(3))
                .ok()
                .is_some_and(|md| {
                    md.topics().first().is_some_and(|t| {
                        t.partitions()
                            .first()
                            .is_some_and(|p| p.leader() == leader && p.isr().len() == 3)
                    })
                })
        });
        if whole {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{topics:?} not whole under leader {leader}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One run: `rate` messages per second for `secs`, the follower paused in
/// bursts meanwhile; the latencies of the acknowledged ones (µs) and the
/// count of failed ones.
fn produce(
    args: &Args,
    bootstrap: &str,
    topic: &str,
    cluster: &mut Cluster,
    paused: i32,
) -> Result<(Vec<u64>, u64), String> {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(Mutex::new(0u64));
    let producer: ThreadedProducer<Latencies> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "0")
        .set("message.timeout.ms", "30000")
        .create_with_context(Latencies(samples.clone(), failed.clone()))
        .map_err(|e| e.to_string())?;
    let payload = vec![b'x'; args.size];
    let stop = Arc::new(AtomicBool::new(false));
    let pid = cluster.pid(paused).ok_or("the follower is down")?;
    let pauser = {
        let stop = stop.clone();
        let (stop_ms, period_ms) = (args.stop_ms, args.period_ms);
        std::thread::spawn(move || {
            if period_ms == 0 {
                return;
            }
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(period_ms.saturating_sub(stop_ms)));
                // SAFETY: signals to the node's own process, by PID.
                unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
                std::thread::sleep(Duration::from_millis(stop_ms));
                unsafe { libc::kill(pid as i32, libc::SIGCONT) };
            }
        })
    };
    let start = Instant::now();
    let total = args.rate * args.secs;
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / args.rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let record =
            BaseRecord::<(), [u8], Box<Instant>>::with_opaque_to(topic, Box::new(Instant::now()))
                .partition(0)
                .payload(&payload[..]);
        if producer.send(record).is_err() {
            if let Ok(mut f) = failed.lock() {
                *f += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = pauser.join();
    // SAFETY: as above; the follower must run again whatever happened.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let _ = producer.flush(Duration::from_secs(30));
    let v = samples.lock().map_err(|e| e.to_string())?.clone();
    let f = *failed.lock().map_err(|e| e.to_string())?;
    Ok((v, f))
}

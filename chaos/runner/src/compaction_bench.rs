//! strand-compaction-bench: what the log cleaner costs a producer (issue
//! 34). One Strand broker; two 1-partition topics, one plain and one
//! compacted (small segments, cleaned at a dirty ratio of 0.1, so the
//! cleaner works through the whole run); the compacted one first filled
//! with more distinct keys than the cleaner's offset map holds. Then, in
//! alternating order, runs of COUNT messages with keys drawn from that key
//! space, produced at full speed by librdkafka (the rdkafka crate, acks=1)
//! to each topic. Prints a markdown table: each topic's median rate and
//! spread, their ratio, the cleaner passes during the compacted runs, and
//! the broker's resident memory against the plain runs' (the cleaner's own
//! memory is its map, `log.cleaner.dedupe.buffer.size`). A benchmark, not a
//! test: run it with a release build of Strand on a quiet machine.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod procstat;

use clap::Parser;
use rand::Rng;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strand_compat_tests::Broker;

#[derive(Parser, Clone)]
#[command(
    about = "Produce throughput to a compacted topic while the cleaner runs, against a plain one"
)]
struct Args {
    /// The strand binary (a release build).
    #[arg(long)]
    strand: PathBuf,
    /// Messages per run.
    #[arg(long, default_value_t = 5_000_000)]
    count: u64,
    /// Distinct keys (more than the map holds: see --dedupe-buffer).
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Runs per topic.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// log.cleaner.dedupe.buffer.size (its 24-byte slots at a 0.9 load
    /// hold this / 26.7 keys).
    #[arg(long, default_value_t = 8 << 20)]
    dedupe_buffer: u64,
    /// The compacted topic's segment.bytes.
    #[arg(long, default_value_t = 8 << 20)]
    segment_bytes: u64,
}

/// Counts acknowledged and failed deliveries.
struct Acks {
    acked: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.acked.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// Produces `count` keyed messages to `topic`: messages per second, and
/// the broker's largest resident set (MiB) sampled during the run.
fn run(bootstrap: &str, pid: u32, topic: &str, args: &Args) -> Result<(f64, f64), String> {
    let acked = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let producer: ThreadedProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "1")
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .set("compression.type", "none")
        .create_with_context(Acks {
            acked: acked.clone(),
            failed: failed.clone(),
        })
        .map_err(|e| format!("producer: {e}"))?;
    let mut rng = rand::thread_rng();
    let value = vec![b'v'; args.size];
    let started = Instant::now();
    let mut peak = procstat::rss_mib(pid);
    let mut last_sample = Instant::now();
    for _ in 0..args.count {
        let key = format!("key-{:010}", rng.gen_range(0..args.keys));
        let mut record = BaseRecord::to(topic).key(&key).payload(&value[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        if last_sample.elapsed() > Duration::from_millis(100) {
            peak = peak.max(procstat::rss_mib(pid));
            last_sample = Instant::now();
        }
    }
    while acked.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed) < args.count {
        peak = peak.max(procstat::rss_mib(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = started.elapsed().as_secs_f64();
    producer
        .flush(Duration::from_secs(30))
        .map_err(|e| format!("flush: {e}"))?;
    if failed.load(Ordering::Relaxed) > 0 {
        return Err(format!(
            "{} deliveries failed",
            failed.load(Ordering::Relaxed)
        ));
    }
    Ok((args.count as f64 / secs, peak))
}

/// The log cleaner's passes so far, from the broker's log.
fn passes(broker: &Broker) -> usize {
    std::fs::read_to_string(broker.log_path())
        .map(|l| l.matches("log cleaner pass").count())
        .unwrap_or(0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let dedupe = args.dedupe_buffer.to_string();
    let broker = Broker::start(
        &args.strand,
        &[
            ("log.cleaner.dedupe.buffer.size", dedupe.as_str()),
            ("log.cleaner.backoff.ms", "100"),
            ("num.partitions", "1"),
        ],
    )
    .map_err(|e| format!("starting strand: {e}"))?;
    let bootstrap = broker.addr();
    let pid = broker.pid();
    let segment = args.segment_bytes.to_string();
    create_topic(&bootstrap, "plain", &[])?;
    create_topic(
        &bootstrap,
        "compacted",
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", segment.as_str()),
            ("min.cleanable.dirty.ratio", "0.1"),
        ],
    )?;
    // Every key once, so the log holds more keys than the map.
    let fill = Args {
        count: args.keys,
        ..args.clone()
    };
    // The broker's memory before the cleaner has run: after the same
    // produce to the plain topic (the produce path's own buffers warmed).
    run(&bootstrap, pid, "plain", &fill)?;
    run(&bootstrap, pid, "plain", &args)?;
    let rss_before = procstat::rss_mib(pid);
    // And once the cleaner has been over the compacted topic.
    run(&bootstrap, pid, "compacted", &fill)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while passes(&broker) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let rss_cleaning = procstat::rss_mib(pid);
    let (mut plain, mut compacted) = (Vec::new(), Vec::new());
    let (mut plain_rss, mut compacted_rss) = (0f64, 0f64);
    let mut cleaned = 0;
    for rep in 0..args.reps {
        let order = if rep % 2 == 0 {
            ["plain", "compacted"]
        } else {
            ["compacted", "plain"]
        };
        for topic in order {
            let before = passes(&broker);
            let (rate, rss) = run(&bootstrap, pid, topic, &args)?;
            eprintln!("rep {rep} {topic}: {rate:.0} msgs/s, broker RSS up to {rss:.0} MiB");
            if topic == "plain" {
                plain.push(rate);
                plain_rss = plain_rss.max(rss);
            } else {
                compacted.push(rate);
                compacted_rss = compacted_rss.max(rss);
                cleaned += passes(&broker) - before;
            }
        }
    }
    let (p, c) = (median(&mut plain.clone()), median(&mut compacted.clone()));
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::MAX, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{lo:.0}-{hi:.0}")
    };
    println!(
        "| topic | msgs/s (median of {}) | range | broker RSS peak |",
        args.reps
    );
    println!("|---|---|---|---|");
    println!(
        "| plain | {p:.0} | {} | {plain_rss:.0} MiB |",
        range(&plain)
    );
    println!(
        "| compacted, cleaner running ({cleaned} passes) | {c:.0} | {} | {compacted_rss:.0} MiB |",
        range(&compacted)
    );
    println!(
        "\ncompacted / plain: {:.2}; keys drawn from {} for {} messages a run; \
         dedupe buffer {} MiB ({} keys); broker RSS {rss_before:.0} MiB after a plain run, \
         {rss_cleaning:.0} MiB once the cleaner had been over {} keys (+{:.0} MiB); \
         broker CPU {:.1} s in all; peak RSS {:.0} MiB",
        c / p,
        args.keys,
        args.count,
        args.dedupe_buffer >> 20,
        (args.dedupe_buffer / 24) * 9 / 10,
        args.keys,
        rss_cleaning - rss_before,
        procstat::cpu_seconds(pid),
        procstat::peak_rss_mib(pid),
    );
    Ok(())
}

/// CreateTopics through librdkafka's admin client.
fn create_topic(bootstrap: &str, topic: &str, configs: &[(&str, &str)]) -> Result<(), String> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let mut t = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
    for (k, v) in configs {
        t = t.set(k, v);
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let results = rt
        .block_on(admin.create_topics([&t], &AdminOptions::new()))
        .map_err(|e| format!("CreateTopics: {e}"))?;
    for r in results {
        r.map_err(|(t, e)| format!("CreateTopics {t}: {e}"))?;
    }
    Ok(())
}

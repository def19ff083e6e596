//! strand-lease-probe: what a partition leader cut off from the rest of the
//! cluster (its followers and the controller quorum, but not its clients)
//! still accepts, with write leases on or off (`strand.write.lease.*`).
//!
//! Three nodes, each on a host of its own (network namespaces, as
//! strand-chaos); one partition with replication factor 3; one producer
//! writing unique values as fast as its acknowledgements come, every record
//! stamped by the broker (`message.timestamp.type=LogAppendTime`, so an
//! acknowledgement says when the leader appended it, on the machine's one
//! clock). The leader is isolated for a while and healed; everything is
//! read back. A write acknowledged but absent afterwards is lost: with
//! acks=1 those are what the cut-off leader took after its followers could
//! no longer fetch. The probe reports when the last of them was appended
//! (relative to the cut), when another broker was first named leader, and
//! how many were lost; `--check` makes those the verdict:
//! - leases on: every lost write was appended within one lease of the cut,
//!   and before the new leader was elected; with acks=all nothing is lost;
//! - leases off: only the acks=all half (the old leader's acks=1 writes are
//!   Kafka's own exposure).
//!
//! Needs root. Exit status 0 when the checks hold, 1 when one fails, 2 when
//! the probe itself could not run.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

// strand-chaos's test hosts; the probe uses only cuts.
#[allow(dead_code)]
#[path = "net.rs"]
mod net;

use clap::Parser;
use net::Net;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use strand_compat_tests::cluster::{active_controller, Cluster, ClusterSpec};

const TOPIC: &str = "lease-probe";

#[derive(Parser, Debug)]
#[command(
    about = "Isolates a partition leader and measures what it still accepts, with write leases on or off"
)]
struct Args {
    /// The strand binary.
    #[arg(long)]
    strand: PathBuf,
    /// Write leases on (`strand.write.lease.enable`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leases: bool,
    /// `strand.write.lease.ms` (below the probe's 3 s session timeout).
    #[arg(long, default_value_t = 2_000)]
    lease_ms: u64,
    /// The producer's acks: 1 or all.
    #[arg(long, default_value = "1")]
    acks: String,
    /// How long the leader stays cut off.
    #[arg(long, default_value_t = 10)]
    isolate_secs: u64,
    /// Where the nodes' directories and logs go.
    #[arg(long, default_value = "target/strand-lease-probe")]
    out: PathBuf,
    /// Exit 1 unless the module's checks hold.
    #[arg(long)]
    check: bool,
    /// Where the partition's leader is placed: with the active controller
    /// (cutting it off also moves the controller, and its own heartbeats
    /// never cross the cut) or on another node.
    #[arg(long, value_enum, default_value_t = Placement::Other)]
    leader: Placement,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    Controller,
    Other,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Acknowledged writes: value -> the broker's append time.
#[derive(Default)]
struct Acked {
    writes: Mutex<BTreeMap<u64, i64>>,
    failed: AtomicU64,
}

struct Reports(Arc<Acked>);

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, value: Self::DeliveryOpaque) {
        match result {
            Ok(m) => {
                let appended = m.timestamp().to_millis().unwrap_or_else(now_ms);
                if let Ok(mut w) = self.0.writes.lock() {
                    w.insert(*value, appended);
                }
            }
            Err(_) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match probe(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("strand-lease-probe: {e}");
            ExitCode::from(2)
        }
    }
}

fn client(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("socket.timeout.ms", "3000")
        .set("metadata.max.age.ms", "1000")
        .set("topic.metadata.refresh.interval.ms", "500")
        .set("reconnect.backoff.max.ms", "200")
        .set("log_level", "3");
    c
}

/// The partition's leader as the brokers in `bootstrap` see it.
fn leader(bootstrap: &str) -> Option<i32> {
    let c: BaseConsumer = client(bootstrap).create().ok()?;
    let md = c.fetch_metadata(Some(TOPIC), Duration::from_secs(2)).ok()?;
    let t = md.topics().first()?;
    let p = t.partitions().first()?;
    (t.error().is_none() && p.leader() >= 0).then_some(p.leader())
}

fn full_isr(bootstrap: &str) -> bool {
    let Ok(c) = client(bootstrap).create::<BaseConsumer>() else {
        return false;
    };
    c.fetch_metadata(Some(TOPIC), Duration::from_secs(2))
        .ok()
        .is_some_and(|md| {
            md.topics().first().is_some_and(|t| {
                t.partitions()
                    .first()
                    .is_some_and(|p| p.leader() >= 0 && p.isr().len() == 3)
            })
        })
}

fn probe(args: &Args) -> Result<bool, String> {
    let acks_all = match args.acks.as_str() {
        "1" => false,
        "all" | "-1" => true,
        other => return Err(format!("--acks {other}: expected 1 or all")),
    };
    let _ = std::fs::remove_dir_all(&args.out);
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let out = std::fs::canonicalize(&args.out).map_err(|e| e.to_string())?;
    let net = Net::create(std::process::id(), 3)
        .map_err(|e| format!("network namespaces (root needed): {e}"))?;
    let spec = ClusterSpec::combined(3)
        .with_hosts(net.hosts().to_vec())
        .with_dir(out.join("cluster"))
        .with_start_timeout(Duration::from_secs(60))
        .with_override("broker.session.timeout.ms", "3000")
        .with_override("broker.heartbeat.interval.ms", "500")
        .with_override("replica.lag.time.max.ms", "5000")
        .with_override("auto.create.topics.enable", "false")
        .with_override("strand.write.lease.enable", args.leases.to_string())
        .with_override("strand.write.lease.ms", args.lease_ms.to_string())
        .with_override("strand.write.lease.safety.margin.ms", "200");
    let cluster = Cluster::start(&args.strand, spec).map_err(|e| format!("cluster start: {e}"))?;
    let bootstrap = cluster.bootstrap();
    let admin: AdminClient<DefaultClientContext> =
        client(&bootstrap).create().map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // The preferred leader (first replica) on the active controller, or
    // on the node after it.
    let controller = cluster
        .node_ids()
        .into_iter()
        .find_map(|id| {
            let addr = cluster.broker_addr(id)?.parse().ok()?;
            active_controller(addr, Duration::from_secs(2)).ok()
        })
        .ok_or("no node named the active controller")?;
    let mut replicas = cluster.node_ids();
    let at = replicas
        .iter()
        .position(|id| *id == controller)
        .ok_or("the active controller is not a node")?;
    let first = match args.leader {
        Placement::Controller => at,
        Placement::Other => (at + 1) % replicas.len(),
    };
    replicas.rotate_left(first);
    let assignment = [replicas.as_slice()];
    let topic = NewTopic::new(TOPIC, 1, TopicReplication::Variable(&assignment))
        .set("min.insync.replicas", "2")
        .set("message.timestamp.type", "LogAppendTime");
    for r in rt
        .block_on(admin.create_topics(&[topic], &AdminOptions::new()))
        .map_err(|e| e.to_string())?
    {
        r.map_err(|(t, e)| format!("create {t}: {e}"))?;
    }
    let ready = Instant::now() + Duration::from_secs(60);
    while !full_isr(&bootstrap) {
        if Instant::now() > ready {
            return Err("no full ISR after 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let old_leader = leader(&bootstrap).ok_or("no leader")?;
    if (old_leader == controller) != (args.leader == Placement::Controller) {
        return Err(format!(
            "leader {old_leader}, active controller {controller}: not the placement asked for"
        ));
    }

    // The producer: one write in flight at a time, each a unique value.
    let acked = Arc::new(Acked::default());
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let mut c = client(&bootstrap);
        if acks_all {
            c.set("acks", "all").set("enable.idempotence", "true");
        } else {
            c.set("acks", "1")
                .set("enable.idempotence", "false")
                .set("message.send.max.retries", "0");
        }
        c.set("message.timeout.ms", "5000").set("linger.ms", "0");
        c.create_with_context::<_, ThreadedProducer<Reports>>(Reports(acked.clone()))
            .map_err(|e| e.to_string())?
    };
    let sent = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let mut value = 0u64;
            while !stop.load(Ordering::Relaxed) {
                value += 1;
                let payload = value.to_string();
                let record =
                    BaseRecord::<(), String, Box<u64>>::with_opaque_to(TOPIC, Box::new(value))
                        .partition(0)
                        .payload(&payload);
                if producer.send(record).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = producer.flush(Duration::from_secs(10));
        })
    };

    std::thread::sleep(Duration::from_secs(3));
    let others: Vec<i32> = cluster
        .node_ids()
        .into_iter()
        .filter(|id| *id != old_leader)
        .collect();
    let others_bootstrap = others
        .iter()
        .filter_map(|id| cluster.broker_addr(*id))
        .collect::<Vec<_>>()
        .join(",");
    let cut_at = now_ms();
    for o in &others {
        net.cut(old_leader, *o).map_err(|e| e.to_string())?;
    }
    // When the rest of the cluster names another leader.
    let mut elected_at = None;
    let heal_at = Instant::now() + Duration::from_secs(args.isolate_secs);
    while Instant::now() < heal_at {
        if elected_at.is_none() {
            if let Some(l) = leader(&others_bootstrap).filter(|l| *l != old_leader) {
                elected_at = Some((now_ms(), l));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    net.heal().map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    let _ = writer.join();

    // Everything the partition holds, read from its start.
    let present = read_all(&bootstrap)?;
    let writes = acked.writes.lock().map_err(|e| e.to_string())?.clone();
    let lost: Vec<(u64, i64)> = writes
        .iter()
        .filter(|(v, _)| !present.contains_key(v))
        .map(|(v, t)| (*v, *t))
        .collect();
    let last_lost = lost.iter().map(|(_, t)| t - cut_at).max();
    let first_lost = lost.iter().map(|(_, t)| t - cut_at).min();
    let after_cut = writes.values().filter(|t| **t >= cut_at).count();
    println!(
        "leases {}, lease {} ms, acks={}: leader {old_leader} ({}) cut off for {} s; sent {}, acknowledged {} ({} appended after the cut), failed {}",
        if args.leases { "on" } else { "off" },
        args.lease_ms,
        args.acks,
        match args.leader {
            Placement::Controller => "the active controller",
            Placement::Other => "not the controller",
        },
        args.isolate_secs,
        sent.load(Ordering::Relaxed),
        writes.len(),
        after_cut,
        acked.failed.load(Ordering::Relaxed),
    );
    match elected_at {
        Some((t, l)) => println!("new leader {l} named {} ms after the cut", t - cut_at),
        None => println!("no new leader named while the leader was cut off"),
    }
    println!(
        "lost: {} acknowledged writes, appended from {:?} to {:?} ms after the cut",
        lost.len(),
        first_lost,
        last_lost
    );
    if !args.check {
        return Ok(true);
    }
    let mut ok = true;
    if acks_all && !lost.is_empty() {
        println!("CHECK FAILED: acks=all lost {} writes", lost.len());
        ok = false;
    }
    if args.leases {
        if let Some(last) = last_lost.filter(|l| *l >= args.lease_ms as i64) {
            println!(
                "CHECK FAILED: a lost write was appended {last} ms after the cut, past the {} ms lease",
                args.lease_ms
            );
            ok = false;
        }
        match (elected_at, last_lost) {
            (None, _) => {
                println!("CHECK FAILED: no new leader within the isolation");
                ok = false;
            }
            // The old leader's last heartbeat went out before the cut, so
            // its lease ended within one lease of it; the controller fences
            // it only a session after that heartbeat.
            (Some((t, _)), _) if t - cut_at < args.lease_ms as i64 => {
                println!(
                    "CHECK FAILED: a new leader was named {} ms after the cut, within the {} ms lease",
                    t - cut_at,
                    args.lease_ms
                );
                ok = false;
            }
            (Some((t, _)), Some(last)) if t - cut_at <= last => {
                println!(
                    "CHECK FAILED: a new leader was named {} ms after the cut, before the old one's last write at {last} ms",
                    t - cut_at
                );
                ok = false;
            }
            _ => {}
        }
    }
    if after_cut == 0 {
        println!(
            "CHECK FAILED: nothing was acknowledged after the cut (the probe saw no leader change)"
        );
        ok = false;
    }
    Ok(ok)
}

/// Every value in the partition, with its offset.
fn read_all(bootstrap: &str) -> Result<BTreeMap<u64, i64>, String> {
    let c: BaseConsumer = client(bootstrap)
        .set("group.id", "lease-probe-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_uncommitted")
        .create()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let high = loop {
        match c.fetch_watermarks(TOPIC, 0, Duration::from_secs(3)) {
            Ok((_, high)) => break high,
            Err(e) if Instant::now() > deadline => return Err(format!("watermarks: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Beginning)
        .map_err(|e| e.to_string())?;
    c.assign(&tpl).map_err(|e| e.to_string())?;
    let mut present = BTreeMap::new();
    let mut next = 0i64;
    while next < high {
        if Instant::now() > deadline {
            return Err(format!("read stopped at {next} of {high}"));
        }
        if let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
            next = m.offset() + 1;
            if let Some(v) = m
                .payload()
                .and_then(|p| std::str::from_utf8(p).ok())
                .and_then(|s| s.parse::<u64>().ok())
            {
                present.insert(v, m.offset());
            }
        }
    }
    Ok(present)
}

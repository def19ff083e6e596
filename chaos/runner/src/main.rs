//! strand-chaos: a cluster of Strand nodes, each on a host of its own (a
//! network namespace), concurrent Kafka clients recording a history, a
//! seeded schedule of faults (partitions, one-way loss, pauses, kill -9,
//! every node killed, failed fsyncs), healing, final reads, and the
//! checker's verdict on the history. Needs root (network namespaces).
//!
//! Exit status: 0 when the history shows no anomaly, 1 when it shows any,
//! 2 when the run itself failed (the cluster did not start, ...).
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod faults;
mod net;
mod workload;

use clap::Parser;
use faults::{FaultKind, World};
use net::Net;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::fs;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use strand_chaos::Isolation;
use strand_compat_tests::cluster::{active_controller, Cluster, ClusterSpec};
use workload::{ConsumerKind, Shared};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    /// Idempotent acks=all producers; consumers by assign in both isolation levels.
    Queue,
    /// Consumer groups (subscribe) that rebalance under faults and commit
    /// and fetch their offsets.
    Groups,
    /// Transactions over several partitions: committed, aborted, and left
    /// hanging by an instance its successor fences; with the queue, two
    /// consume-transform-produce members of one group (exactly once).
    Transactions,
}

#[derive(Parser, Debug)]
#[command(
    about = "Runs concurrent Kafka clients against a Strand cluster under faults and checks the history"
)]
struct Args {
    /// The strand binary.
    #[arg(long, required_unless_present = "check")]
    strand: Option<PathBuf>,
    /// Only judge a recorded history (`history.jsonl` of an earlier run)
    /// with this build's checker: no cluster, no faults.
    #[arg(long, value_name = "HISTORY")]
    check: Option<PathBuf>,
    /// Nodes (combined broker+controller).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Seeds the fault schedule and the clients' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long the clients run (faults included).
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// Faults to draw from (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<FaultKind>,
    /// Workloads (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    workloads: Vec<Workload>,
    /// Where the history, the report, the fault log and the nodes' logs go.
    #[arg(long, default_value = "target/strand-chaos")]
    out: PathBuf,
    /// compat-tests' faultfs library (LD_PRELOAD into the nodes) for failed
    /// fsyncs and full disks; without it, FailedFsync and FullDisk are skipped.
    #[arg(long)]
    faultfs: Option<PathBuf>,
    /// Extra broker setting KEY=VALUE for every node (repeatable), after the
    /// chaos profile's own.
    #[arg(long = "override", value_parser = key_value)]
    overrides: Vec<(String, String)>,
    /// Setting KEY=VALUE of the workload's topics (repeatable), e.g.
    /// unclean.leader.election.enable=true to watch the checker catch what
    /// that loses.
    #[arg(long = "topic-config", value_parser = key_value)]
    topic_configs: Vec<(String, String)>,
    /// How the queue's producers acknowledge.
    #[arg(long, value_enum, default_value = "all")]
    acks: workload::Acks,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

const PARTITIONS: i32 = 4;
const QUEUE: &str = "chaos-queue";
const TXN: &str = "chaos-txn";
const TRANSACTIONAL_IDS: usize = 2;
const PIPELINES: usize = 2;

/// A run's verdict, and its exit code.
enum Verdict {
    /// No anomaly, and the run did what it had to (exit 0).
    Valid,
    /// An anomaly, or a node panicked (exit 1).
    Anomalies,
    /// No anomaly, but the run did too little, a planned fault did not
    /// start, or a final read did not complete: it proves nothing (exit 3).
    Inconclusive,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.check {
        Some(history) => judge(history).map(|valid| {
            if valid {
                Verdict::Valid
            } else {
                Verdict::Anomalies
            }
        }),
        None => run(args),
    };
    match result {
        Ok(Verdict::Valid) => ExitCode::SUCCESS,
        Ok(Verdict::Anomalies) => ExitCode::from(1),
        Ok(Verdict::Inconclusive) => ExitCode::from(3),
        Err(e) => {
            eprintln!("strand-chaos: {e}");
            ExitCode::from(2)
        }
    }
}

struct Log {
    file: fs::File,
    start: Instant,
}

impl Log {
    fn line(&mut self, s: &str) {
        let line = format!("[{:7.2}s] {s}", self.start.elapsed().as_secs_f64());
        println!("{line}");
        let _ = writeln!(self.file, "{line}");
    }
}

/// Checks a recorded history and prints what the checker finds.
fn judge(history: &std::path::Path) -> Result<bool, String> {
    let file = fs::File::open(history).map_err(|e| format!("{}: {e}", history.display()))?;
    let events =
        strand_chaos::history::read(std::io::BufReader::new(file)).map_err(|e| e.to_string())?;
    let report = strand_chaos::check(&events).map_err(|e| e.to_string())?;
    println!("history: {} events; {:?}", events.len(), report.stats);
    for a in report.anomalies.iter().take(20) {
        println!(
            "ANOMALY {}: {} (events {:?})",
            a.kind, a.explanation, a.events
        );
    }
    println!("anomalies: {:?}", report.counts());
    Ok(report.valid())
}

fn run(mut args: Args) -> Result<Verdict, String> {
    if args.faults.is_empty() {
        args.faults = FaultKind::ALL.to_vec();
    }
    if args.faultfs.is_none() {
        args.faults
            .retain(|f| !matches!(f, FaultKind::FailedFsync | FaultKind::FullDisk));
    }
    if args.workloads.is_empty() {
        args.workloads = vec![Workload::Queue, Workload::Groups, Workload::Transactions];
    }
    let _ = fs::remove_dir_all(&args.out);
    fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    // Absolute: the nodes run in their own directories, and faultfs opens
    // the control file by the path it is given.
    args.out = fs::canonicalize(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut log = Log {
        file: fs::File::create(args.out.join("faults.log")).map_err(|e| e.to_string())?,
        start: Instant::now(),
    };
    let net = Net::create(std::process::id(), args.nodes)
        .map_err(|e| format!("network namespaces (root needed): {e}"))?;
    let control = args.out.join("faultfs-control");
    let mut spec = ClusterSpec::combined(args.nodes)
        .with_hosts(net.hosts().to_vec())
        .with_dir(args.out.join("cluster"))
        .with_start_timeout(Duration::from_secs(60))
        .with_override("broker.session.timeout.ms", "3000")
        .with_override("broker.heartbeat.interval.ms", "500")
        .with_override("replica.lag.time.max.ms", "5000")
        .with_override("default.replication.factor", args.nodes.to_string())
        .with_override("min.insync.replicas", "2")
        .with_override("offsets.topic.num.partitions", "5")
        .with_override("transaction.state.log.num.partitions", "5")
        .with_override("group.initial.rebalance.delay.ms", "0")
        .with_override("auto.create.topics.enable", "false");
    for (k, v) in &args.overrides {
        spec = spec.with_override(k, v);
    }
    if let Some(lib) = &args.faultfs {
        fs::write(&control, "").map_err(|e| e.to_string())?;
        spec = spec
            .with_env("LD_PRELOAD", lib.display().to_string())
            .with_env("STRAND_FAULTFS_CONTROL", control.display().to_string());
    }
    let mut cluster = Cluster::start(args.strand.as_deref().ok_or("--strand is required")?, spec)
        .map_err(|e| format!("cluster start: {e}"))?;
    let bootstrap = cluster.bootstrap();
    log.line(&format!(
        "{} nodes on {bootstrap}; seed {}; faults {:?}; workloads {:?}",
        args.nodes, args.seed, args.faults, args.workloads
    ));
    create_topics(&bootstrap, args.nodes, &args.topic_configs)?;
    wait_full_isr(
        &bootstrap,
        &[QUEUE, TXN],
        args.nodes,
        Duration::from_secs(60),
        || Ok(()),
    )?;

    let shared = Shared::new(bootstrap.clone());
    let acks = args.acks;
    let mut threads = Vec::new();
    let mut session = 0u64;
    let mut next_session = || {
        session += 1;
        session
    };
    let mut topics_read = Vec::new();
    for w in &args.workloads {
        match w {
            Workload::Queue => {
                topics_read.push((QUEUE.to_string(), PARTITIONS));
                for i in 0..2 {
                    let s = shared.clone();
                    let seed = args.seed * 100 + i;
                    threads.push(std::thread::spawn(move || {
                        workload::producer(s, QUEUE.into(), PARTITIONS, seed, acks)
                    }));
                }
                assign_readers(&shared, QUEUE, &mut next_session, &mut threads);
            }
            Workload::Groups => {
                if !args.workloads.contains(&Workload::Queue) {
                    topics_read.push((QUEUE.to_string(), PARTITIONS));
                    let s = shared.clone();
                    let seed = args.seed * 100 + 50;
                    threads.push(std::thread::spawn(move || {
                        workload::producer(s, QUEUE.into(), PARTITIONS, seed, acks)
                    }));
                }
                for _ in 0..2 {
                    let (s, id) = (shared.clone(), next_session());
                    threads.push(std::thread::spawn(move || {
                        workload::consumer(
                            s,
                            vec![(QUEUE.into(), PARTITIONS)],
                            Isolation::ReadCommitted,
                            ConsumerKind::Subscribe {
                                group: "chaos-group".into(),
                                commit: true,
                            },
                            id,
                        )
                    }));
                }
            }
            Workload::Transactions => {
                topics_read.push((TXN.to_string(), PARTITIONS));
                for i in 0..TRANSACTIONAL_IDS {
                    let s = shared.clone();
                    let seed = args.seed * 100 + 10 + i as u64;
                    threads.push(std::thread::spawn(move || {
                        workload::transactional_producer(
                            s,
                            TXN.into(),
                            PARTITIONS,
                            format!("chaos-tx-{i}"),
                            seed,
                        )
                    }));
                }
                assign_readers(&shared, TXN, &mut next_session, &mut threads);
                // Consume-transform-produce from the queue into the same
                // topic, two members of one group.
                if args.workloads.contains(&Workload::Queue) {
                    for i in 0..PIPELINES {
                        let (s, id) = (shared.clone(), next_session());
                        threads.push(std::thread::spawn(move || {
                            workload::pipeline(
                                s,
                                QUEUE.into(),
                                TXN.into(),
                                PARTITIONS,
                                "chaos-etl".into(),
                                format!("chaos-etl-{i}"),
                                id,
                            )
                        }));
                    }
                }
            }
        }
    }

    // The faults, one at a time, each healed before the next.
    let run_for = Duration::from_secs(args.secs);
    let started = Instant::now();
    let plan = faults::plan(args.seed, run_for, &args.faults, Duration::from_secs(5));
    log.line(&format!("{} faults planned", plan.len()));
    let faultfs_control = args.faultfs.as_ref().map(|_| control.clone());
    // Fault windows on the history's clock, for throughput during and between faults.
    let mut windows = Vec::new();
    let mut kinds_run = std::collections::BTreeMap::new();
    let mut not_started = 0usize;
    for step in &plan {
        sleep_until(started + step.at);
        restart_late_exits(&mut cluster, &mut log)?;
        let leaders = leaders(&bootstrap, &[QUEUE, TXN]);
        let controller = controller(&cluster);
        let mut world = World {
            cluster: &mut cluster,
            net: &net,
            leaders,
            controller,
            faultfs_control: faultfs_control.clone(),
            topics: vec![(QUEUE.into(), PARTITIONS), (TXN.into(), PARTITIONS)],
        };
        let from = shared.history.elapsed();
        match faults::start(step, &mut world) {
            Ok(what) => {
                log.line(&format!("fault: {what} for {:?}", step.lasts));
                *kinds_run.entry(format!("{:?}", step.kind)).or_insert(0) += 1;
            }
            Err(e) => {
                not_started += 1;
                log.line(&format!("fault {:?} could not start: {e}", step.kind));
            }
        }
        sleep_until(started + step.at + step.lasts);
        match faults::heal(&mut world) {
            Ok(()) => log.line("healed"),
            Err(e) => return Err(format!("healing failed: {e}")),
        }
        windows.push((from, shared.history.elapsed()));
    }
    sleep_until(started + run_for);
    let clients_ran = shared.history.elapsed();
    shared.stop.store(true, Ordering::SeqCst);
    log.line("clients stopping");
    // A client blocked inside librdkafka past its own timeouts (seed 1 on
    // 2026-12-02: send_offsets_to_transaction with a 20 s timeout still
    // blocked minutes after the clients were told to stop; librdkafka
    // issues 5456 and 5511: its coordinator-request timeout is never
    // checked, so the call waits for a group coordinator that went down
    // or away) is left behind:
    // its operation stays without a completion, which the checker takes as
    // unknown, and the fencing below settles its transaction.
    let deadline = Instant::now() + Duration::from_secs(90);
    while threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let blocked = threads.iter().filter(|t| !t.is_finished()).count();
    if blocked > 0 {
        log.line(&format!(
            "{blocked} client thread(s) still blocked in the client library; left behind"
        ));
    }
    for t in threads.into_iter().filter(|t| t.is_finished()) {
        let _ = t.join();
    }
    restart_late_exits(&mut cluster, &mut log)?;

    // Every transactional id gets a new instance: its InitProducerId ends a
    // transaction an abandoned instance left open.
    for i in 0..TRANSACTIONAL_IDS {
        fence(&bootstrap, &format!("chaos-tx-{i}"));
    }
    for i in 0..PIPELINES {
        fence(&bootstrap, &format!("chaos-etl-{i}"));
    }
    wait_full_isr(
        &bootstrap,
        &[QUEUE, TXN],
        args.nodes,
        Duration::from_secs(60),
        || restart_late_exits(&mut cluster, &mut log),
    )?;
    log.line("final reads");
    workload::final_reads(&shared, &topics_read, Duration::from_secs(30));
    workload::final_fetches(
        &shared,
        &["chaos-group".to_string(), "chaos-etl".to_string()],
        QUEUE,
        PARTITIONS,
    );

    let events = shared.history.events();
    let mut out = fs::File::create(args.out.join("history.jsonl")).map_err(|e| e.to_string())?;
    strand_chaos::history::write(&mut out, &events).map_err(|e| e.to_string())?;
    let report = strand_chaos::check(&events).map_err(|e| e.to_string())?;
    fs::write(
        args.out.join("report.json"),
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    log.line(&format!(
        "history: {} events; {:?}",
        events.len(),
        report.stats
    ));
    let (during, between) = throughput(&events, &windows, clients_ran);
    log.line(&format!(
        "faults injected: {kinds_run:?}; acknowledged writes per second: {during:.0} during faults, {between:.0} between them"
    ));
    for a in report.anomalies.iter().take(20) {
        log.line(&format!(
            "ANOMALY {}: {} (events {:?})",
            a.kind, a.explanation, a.events
        ));
    }
    log.line(&format!("anomalies: {:?}", report.counts()));
    // A node that panicked, however the history came out, fails the run:
    // the broker never panics, and a restart must not hide one.
    let mut panicked = Vec::new();
    for id in cluster.node_ids() {
        let text = fs::read(cluster.log_path(id)).unwrap_or_default();
        if String::from_utf8_lossy(&text).contains("panicked at") {
            panicked.push(id);
        }
    }
    if !panicked.is_empty() {
        log.line(&format!("nodes {panicked:?} panicked (see their logs)"));
    }
    drop(cluster);
    drop(net);
    if !report.valid() || !panicked.is_empty() {
        return Ok(Verdict::Anomalies);
    }
    let partitions: usize = topics_read.iter().map(|(_, n)| *n as usize).sum();
    let mut shortfalls = report.shortfalls(&strand_chaos::Floor::for_run(args.secs, partitions));
    if not_started > 0 {
        shortfalls.push(format!("{not_started} planned fault(s) did not start"));
    }
    if shortfalls.is_empty() {
        return Ok(Verdict::Valid);
    }
    for s in &shortfalls {
        log.line(&format!("INCONCLUSIVE: {s}"));
    }
    Ok(Verdict::Inconclusive)
}

/// Two consumers of every partition of `topic` by assign, one per
/// isolation level.
fn assign_readers(
    shared: &Arc<Shared>,
    topic: &'static str,
    next_session: &mut impl FnMut() -> u64,
    threads: &mut Vec<std::thread::JoinHandle<()>>,
) {
    for iso in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
        let (s, id) = (shared.clone(), next_session());
        threads.push(std::thread::spawn(move || {
            workload::consumer(
                s,
                vec![(topic.into(), PARTITIONS)],
                iso,
                ConsumerKind::Assign,
                id,
            )
        }));
    }
}

/// Acknowledged writes (sends ok, transactions committed) per second
/// completed inside the fault windows and outside them, up to `end`.
fn throughput(
    events: &[strand_chaos::Event],
    windows: &[(Duration, Duration)],
    end: Duration,
) -> (f64, f64) {
    use strand_chaos::{Kind, Op};
    let in_fault = |t: Duration| windows.iter().any(|(a, b)| *a <= t && t < *b);
    let (mut during, mut between) = (0u64, 0u64);
    for e in events {
        let writes = match (&e.kind, &e.op) {
            (Kind::Ok, Op::Send { .. }) => 1,
            (
                Kind::Ok,
                Op::Txn {
                    writes,
                    abort: false,
                    ..
                },
            ) => writes.len() as u64,
            _ => 0,
        };
        let t = Duration::from_nanos(e.time_ns);
        if writes == 0 || t > end {
            continue;
        }
        if in_fault(t) {
            during += writes;
        } else {
            between += writes;
        }
    }
    let fault_secs: f64 = windows.iter().map(|(a, b)| (*b - *a).as_secs_f64()).sum();
    let quiet_secs = (end.as_secs_f64() - fault_secs).max(1e-9);
    (
        during as f64 / fault_secs.max(1e-9),
        between as f64 / quiet_secs,
    )
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

fn create_topics(bootstrap: &str, rf: usize, configs: &[(String, String)]) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let topics: Vec<NewTopic<'_>> = [QUEUE, TXN]
        .iter()
        .map(|t| {
            configs.iter().fold(
                NewTopic::new(t, PARTITIONS, TopicReplication::Fixed(rf as i32)),
                |n, (k, v)| n.set(k, v),
            )
        })
        .collect();
    let results = rt
        .block_on(admin.create_topics(&topics, &AdminOptions::new()))
        .map_err(|e| e.to_string())?;
    for r in results {
        r.map_err(|(t, e)| format!("create {t}: {e}"))?;
    }
    Ok(())
}

fn metadata_client(bootstrap: &str) -> Option<BaseConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("socket.timeout.ms", "3000")
        .create()
        .ok()
}

/// The leader of every partition of `topics`, as a client sees them.
fn leaders(bootstrap: &str, topics: &[&str]) -> Vec<i32> {
    let Some(c) = metadata_client(bootstrap) else {
        return vec![];
    };
    let mut out = Vec::new();
    for t in topics {
        if let Ok(md) = c.fetch_metadata(Some(t), Duration::from_secs(3)) {
            for topic in md.topics() {
                out.extend(
                    topic
                        .partitions()
                        .iter()
                        .map(|p| p.leader())
                        .filter(|l| *l >= 0),
                );
            }
        }
    }
    out
}

/// The active controller, as DescribeQuorum reports it (asked of any node
/// that answers; DescribeCluster would name the node asked).
fn controller(cluster: &Cluster) -> Option<i32> {
    cluster.broker_ids().into_iter().find_map(|id| {
        let addr: SocketAddr = cluster.broker_addr(id)?.parse().ok()?;
        active_controller(addr, Duration::from_secs(2)).ok()
    })
}

/// A node the fault doomed may exit only after the heal (a failed fsync
/// that comes due just before the rule is cleared, a shutdown still under
/// way): it is restarted before the next fault and before the final reads,
/// so every fault heals.
fn restart_late_exits(cluster: &mut Cluster, log: &mut Log) -> Result<(), String> {
    let started = cluster
        .restart_down()
        .map_err(|e| format!("restarting nodes that exited after a heal: {e}"))?;
    if !started.is_empty() {
        log.line(&format!(
            "restarted {started:?}, which exited after the heal"
        ));
    }
    Ok(())
}

/// Waits until every partition of `topics` has a leader and every replica
/// (at most `rf`; a reassignment may have taken some away) in its ISR.
fn wait_full_isr(
    bootstrap: &str,
    topics: &[&str],
    rf: usize,
    timeout: Duration,
    mut meanwhile: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let c = metadata_client(bootstrap).ok_or("metadata client")?;
    loop {
        let full = topics.iter().all(|t| {
            c.fetch_metadata(Some(t), Duration::from_secs(3))
                .ok()
                .is_some_and(|md| {
                    md.topics().iter().all(|topic| {
                        topic.error().is_none()
                            && topic.partitions().len() == PARTITIONS as usize
                            && topic.partitions().iter().all(|p| {
                                // Reassignments may have changed the
                                // replica count: every replica in sync.
                                p.leader() >= 0
                                    && p.isr().len() == p.replicas().len()
                                    && p.replicas().len() <= rf
                            })
                    })
                })
        });
        if full {
            return Ok(());
        }
        meanwhile()?;
        if Instant::now() > deadline {
            return Err(format!(
                "partitions of {topics:?} without a full ISR after {timeout:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A new instance of `transactional_id` (InitProducerId fences the old one
/// and ends its transaction), retried for a while.
fn fence(bootstrap: &str, transactional_id: &str) {
    use rdkafka::producer::{BaseProducer, Producer};
    for _ in 0..10 {
        let p: Result<BaseProducer, _> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("transactional.id", transactional_id)
            .create();
        if let Ok(p) = p {
            if p.init_transactions(Duration::from_secs(15)).is_ok() {
                return;
            }
        }
    }
    eprintln!("strand-chaos: could not fence {transactional_id}");
}

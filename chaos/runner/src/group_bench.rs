//! strand-group-bench: a large KIP-848 consumer group's rebalance, side by
//! side with the reference Kafka (issue 37). On one node of each: a topic
//! of `--partitions` partitions, then `--members` consumer-protocol members
//! (raw ConsumerGroupHeartbeat, one connection each) join one group and
//! heartbeat until the group is Stable; then one more member joins, and the
//! time until every member is stable again is measured.
//!
//! The members are the same client on both servers: in each round every
//! member sends one heartbeat, in turn, reporting what it owns, and takes
//! an assignment it is given at once (revoking and taking up partitions
//! without delay). "Stable" is ConsumerGroupDescribe's group state, checked
//! after each round: every member at the assignment epoch with its whole
//! target. Both keep the default assignment interval (a target at most
//! once per `group.consumer.assignment.interval.ms`, 1 s, KIP-1263) unless
//! `--interval-zero`.
//! A benchmark, not a test: run it with a release build of Strand.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod procstat;

use clap::Parser;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, CreateTopicsRequest,
    CreateTopicsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use strand_compat_tests::cluster::{Cluster, ClusterSpec, KafkaDist, Server};
use strand_compat_tests::wire::Connection;

#[derive(Parser, Clone)]
#[command(about = "A large consumer-protocol group's rebalance, Strand and Kafka side by side")]
struct Args {
    /// The strand binary (a release build).
    #[arg(long)]
    strand: PathBuf,
    /// Members of the group before the one that joins.
    #[arg(long, default_value_t = 100)]
    members: usize,
    /// Partitions of the group's one topic.
    #[arg(long, default_value_t = 1000)]
    partitions: i32,
    /// Repetitions on each server (a fresh node each).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Give both `group.consumer.assignment.interval.ms=0` (a target
    /// computed in the heartbeat that needs it) instead of the default,
    /// 1 s (KIP-1263).
    #[arg(long)]
    interval_zero: bool,
}

const TOPIC: &str = "group-bench";
const GROUP: &str = "group-bench";
const TIMEOUT: Duration = Duration::from_secs(30);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

struct Member {
    id: String,
    epoch: i32,
    conn: Connection,
    owned: BTreeMap<uuid::Uuid, Vec<i32>>,
}

impl Member {
    /// One heartbeat: a join at epoch 0, else what it owns. Retried while
    /// the coordinator is not ready.
    fn beat(&mut self) -> Result<(), String> {
        let joining = self.epoch == 0;
        let mut req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_member_id(s(&self.id))
            .with_member_epoch(self.epoch)
            .with_rebalance_timeout_ms(if joining { 60_000 } else { -1 })
            .with_topic_partitions(Some(
                self.owned
                    .iter()
                    .map(|(t, p)| {
                        TopicPartitions::default()
                            .with_topic_id(*t)
                            .with_partitions(p.clone())
                    })
                    .collect(),
            ));
        if joining {
            req.subscribed_topic_names = Some(vec![TopicName(s(TOPIC))]);
        }
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let r: ConsumerGroupHeartbeatResponse = self
                .conn
                .call(ApiKey::ConsumerGroupHeartbeat, 1, &req)
                .map_err(|e| format!("heartbeat: {e}"))?;
            // COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, LOAD_IN_PROGRESS.
            if matches!(r.error_code, 14..=16) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            if r.error_code != 0 {
                return Err(format!(
                    "heartbeat of {}: error {} {:?}",
                    self.id, r.error_code, r.error_message
                ));
            }
            self.epoch = r.member_epoch;
            if let Some(a) = r.assignment {
                self.owned = a
                    .topic_partitions
                    .into_iter()
                    .map(|tp| (tp.topic_id, tp.partitions))
                    .collect();
            }
            return Ok(());
        }
    }
}

/// Whether the group is Stable with `members` members.
fn stable(admin: &mut Connection, members: usize) -> Result<bool, String> {
    let r: ConsumerGroupDescribeResponse = admin
        .call(
            ApiKey::ConsumerGroupDescribe,
            0,
            &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(GROUP))]),
        )
        .map_err(|e| format!("describe: {e}"))?;
    let g = r.groups.first().ok_or("no group described")?;
    Ok(g.error_code == 0 && g.group_state.as_str() == "Stable" && g.members.len() == members)
}

/// Heartbeats every member in turn until the group is Stable; the rounds
/// it took.
fn until_stable(members: &mut [Member], admin: &mut Connection) -> Result<usize, String> {
    for round in 1..=10_000 {
        for m in members.iter_mut() {
            m.beat()?;
        }
        if stable(admin, members.len())? {
            return Ok(round);
        }
    }
    Err("the group did not become stable".into())
}

struct Sample {
    form_s: f64,
    join_s: f64,
    join_rounds: usize,
    cpu_s: f64,
    rss_mib: f64,
}

fn one_rep(server: Server, args: &Args) -> Result<Sample, String> {
    let name = server.name();
    let mut spec = ClusterSpec::combined(1)
        .with_override("offsets.topic.replication.factor", "1")
        .with_override("group.consumer.max.size", "100000")
        .with_start_timeout(Duration::from_secs(90));
    if args.interval_zero {
        spec = spec
            .with_override("group.consumer.min.assignment.interval.ms", "0")
            .with_override("group.consumer.assignment.interval.ms", "0");
    }
    let mut cluster = Cluster::start_server(server, spec).map_err(|e| format!("{name}: {e}"))?;
    let addr = cluster.bootstrap();
    let addr = addr.split(',').next().unwrap_or(&addr).to_string();
    let mut admin = Connection::open(&addr, TIMEOUT).map_err(|e| e.to_string())?;
    let created: CreateTopicsResponse = admin
        .call(
            ApiKey::CreateTopics,
            5,
            &CreateTopicsRequest::default()
                .with_timeout_ms(60_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(s(TOPIC)))
                    .with_num_partitions(args.partitions)
                    .with_replication_factor(1)]),
        )
        .map_err(|e| format!("create: {e}"))?;
    let code = created.topics.first().map_or(-1, |t| t.error_code);
    if code != 0 {
        return Err(format!("{name}: CreateTopics error {code}"));
    }
    // Every partition led before the group starts.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m: MetadataResponse = admin
            .call(
                ApiKey::Metadata,
                12,
                &MetadataRequest::default().with_topics(None),
            )
            .map_err(|e| format!("metadata: {e}"))?;
        let ready = m.topics.iter().any(|t| {
            t.name.as_ref().is_some_and(|n| n.as_str() == TOPIC)
                && t.partitions.len() == args.partitions as usize
                && t.partitions.iter().all(|p| p.leader_id.0 >= 0)
        });
        if ready {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{name}: the topic's partitions have no leaders"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // FindCoordinator makes `__consumer_offsets` (as a client's first one
    // does) and names the coordinator once it is there.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r: FindCoordinatorResponse = admin
            .call(
                ApiKey::FindCoordinator,
                3,
                &FindCoordinatorRequest::default().with_key(s(GROUP)),
            )
            .map_err(|e| format!("find coordinator: {e}"))?;
        if r.error_code == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{name}: no coordinator: error {}", r.error_code));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = cluster
        .node_ids()
        .first()
        .and_then(|id| cluster.pid(*id))
        .ok_or("no node")?;
    let cpu_before = procstat::cpu_seconds(pid);
    let mut members = Vec::with_capacity(args.members + 1);
    for i in 0..=args.members {
        members.push(Member {
            id: format!("bench-member-{i:05}-0000000"),
            epoch: 0,
            conn: Connection::open(&addr, TIMEOUT).map_err(|e| e.to_string())?,
            owned: BTreeMap::new(),
        });
    }
    let newcomer = members.pop().ok_or("no members")?;
    let started = Instant::now();
    until_stable(&mut members, &mut admin)?;
    let form_s = started.elapsed().as_secs_f64();
    members.push(newcomer);
    let started = Instant::now();
    let join_rounds = until_stable(&mut members, &mut admin)?;
    let join_s = started.elapsed().as_secs_f64();
    let cpu_s = procstat::cpu_seconds(pid) - cpu_before;
    let rss_mib = procstat::peak_rss_mib(pid);
    let total: usize = members
        .iter()
        .flat_map(|m| m.owned.values())
        .map(Vec::len)
        .sum();
    if total != args.partitions as usize {
        return Err(format!(
            "{name}: the members own {total} partitions, not {}",
            args.partitions
        ));
    }
    Ok(Sample {
        form_s,
        join_s,
        join_rounds,
        cpu_s,
        rss_mib,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.2}-{hi:.2}")
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let dist = match KafkaDist::locate() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("strand-group-bench: the reference Kafka: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut results: Vec<(&str, Vec<Sample>)> = Vec::new();
    for (label, server) in [
        ("Strand", Server::Strand(args.strand.clone())),
        ("Kafka", Server::Kafka(dist.clone())),
    ] {
        let mut samples = Vec::new();
        for rep in 0..args.reps {
            match one_rep(server.clone(), &args) {
                Ok(s) => {
                    eprintln!(
                        "{label} rep {rep}: formed in {:.2} s, newcomer stable in {:.2} s ({} rounds), {:.2} CPU s",
                        s.form_s, s.join_s, s.join_rounds, s.cpu_s
                    );
                    samples.push(s);
                }
                Err(e) => {
                    eprintln!("strand-group-bench: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
        results.push((label, samples));
    }
    println!(
        "| {} members over {} partitions, {} runs each | Strand median (range) | Kafka median (range) | Strand / Kafka |",
        args.members, args.partitions, args.reps
    );
    println!("|---|---:|---:|---:|");
    type Field = fn(&Sample) -> f64;
    let rows: [(&str, Field); 5] = [
        ("the group forms: every member joined and stable, s", |s| {
            s.form_s
        }),
        ("one member joins: until every member is stable, s", |s| {
            s.join_s
        }),
        ("rounds of heartbeats until then", |s| s.join_rounds as f64),
        ("broker CPU over both, s", |s| s.cpu_s),
        ("peak RSS of the broker, MiB", |s| s.rss_mib),
    ];
    for (what, f) in rows {
        let strand: Vec<f64> = results[0].1.iter().map(f).collect();
        let kafka: Vec<f64> = results[1].1.iter().map(f).collect();
        let (ms, mk) = (median(strand.clone()), median(kafka.clone()));
        println!(
            "| {what} | {ms:.2} ({}) | {mk:.2} ({}) | {:.2} |",
            range(&strand),
            range(&kafka),
            if mk > 0.0 { ms / mk } else { f64::NAN }
        );
    }
    std::process::ExitCode::SUCCESS
}

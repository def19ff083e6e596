//! Consumer-group acceptance tests, each on a fresh 3-node cluster (combined
//! broker+controller nodes) with a 6-partition topic, replication factor 3 and
//! min.insync.replicas=2, driven by librdkafka consumers (classic protocol):
//!
//! * three consumers committing synchronously lose no committed offset when
//!   the group coordinator (leader of the group's `__consumer_offsets`
//!   partition) is SIGKILLed mid-consumption: the new coordinator holds every
//!   acknowledged commit, the group settles on it (after one consumer is
//!   replaced there, so that every partition changes hands on the new
//!   coordinator), every record is processed, every partition is resumed
//!   exactly at its committed offset, and only records after the last
//!   acknowledged commit of their partition are ever processed twice;
//! * a static member (KIP-345 `group.instance.id`) that closes (no LeaveGroup)
//!   and comes back within the session timeout gets its partitions back at the
//!   same generation, without the other members being rebalanced.

mod common;

use common::{eventually, partition_view, Client, GroupView};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::TopicPartitionList;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

/// Timeout of one raw-protocol probe.
const PROBE: Duration = Duration::from_secs(2);
const PARTITIONS: i32 = 6;
const OFFSETS_TOPIC: &str = "__consumer_offsets";
const OFFSETS_PARTITIONS: i32 = 5;

/// One test at a time: each starts three nodes and relies on 3 s broker
/// sessions, which should not compete with another cluster for the CPU.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The cluster of a test; `STRAND_GROUPS_TEST_DIR=<dir>` keeps its files (node
/// logs) in `<dir>/<test>` instead of a temporary directory.
fn spec(test: &str) -> ClusterSpec {
    let spec = match std::env::var_os("STRAND_GROUPS_TEST_DIR") {
        Some(d) => ClusterSpec::combined(3).with_dir(std::path::PathBuf::from(d).join(test)),
        None => ClusterSpec::combined(3),
    };
    spec.with_override("broker.session.timeout.ms", "3000")
        .with_override("broker.heartbeat.interval.ms", "500")
        .with_override("default.replication.factor", "3")
        .with_override("min.insync.replicas", "2")
        .with_override("group.initial.rebalance.delay.ms", "0")
        .with_override(
            "offsets.topic.num.partitions",
            OFFSETS_PARTITIONS.to_string(),
        )
}

fn addr(cluster: &Cluster, id: i32) -> String {
    cluster.broker_addr(id).expect("broker address")
}

fn log_tails(cluster: &Cluster, ids: &[i32]) -> String {
    ids.iter()
        .map(|id| format!("--- node {id} log tail ---\n{}", cluster.log_tail(*id)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until every broker in `via` sees a leader and an ISR of 3 for every
/// partition of `topic`.
fn wait_topic_fully_replicated(
    cluster: &Cluster,
    via: &[i32],
    topic: &str,
    partitions: i32,
    timeout: Duration,
) {
    eventually(
        &format!("{topic}: a leader and an ISR of 3 for all {partitions} partitions on {via:?}"),
        timeout,
        || {
            for id in via {
                let a = addr(cluster, *id);
                for p in 0..partitions {
                    let v = partition_view(&a, topic, p, PROBE)?;
                    if v.error_code != 0 || v.leader < 0 || v.isr.len() != 3 {
                        return None;
                    }
                }
            }
            Some(())
        },
    );
}

/// Creates `topic` (6 partitions, RF 3, min.insync.replicas=2) and waits until
/// it is fully replicated everywhere.
fn create_topic(cluster: &Cluster, topic: &str) {
    let ids = cluster.broker_ids();
    let mut c = Client::connect(&addr(cluster, ids[0])).unwrap();
    let code = common::create_topic_with(
        &mut c,
        topic,
        PARTITIONS,
        3,
        &[("min.insync.replicas", "2")],
    )
    .expect("CreateTopics answered");
    assert_eq!(code, 0, "CreateTopics {topic}");
    wait_topic_fully_replicated(cluster, &ids, topic, PARTITIONS, Duration::from_secs(30));
}

/// The coordinator of `group` once every broker of `via` answers FindCoordinator
/// without error and they all agree (creating `__consumer_offsets` on first use).
fn agreed_coordinator(cluster: &Cluster, via: &[i32], group: &str, timeout: Duration) -> i32 {
    agreed_coordinator_except(cluster, via, group, None, timeout)
}

/// Like [`agreed_coordinator`], for a coordinator other than `except`.
fn agreed_coordinator_except(
    cluster: &Cluster,
    via: &[i32],
    group: &str,
    except: Option<i32>,
    timeout: Duration,
) -> i32 {
    let deadline = Instant::now() + timeout;
    loop {
        let last: Vec<Option<(i16, i32)>> = via
            .iter()
            .map(|id| common::find_coordinator(&addr(cluster, *id), group, 0, PROBE))
            .collect();
        if let Some(Some(first)) = last.first().copied() {
            if first.0 == 0
                && first.1 >= 0
                && Some(first.1) != except
                && last.iter().all(|a| *a == Some(first))
            {
                return first.1;
            }
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for brokers {via:?} to agree on a coordinator \
             for group {group} (other than {except:?}); last answers (error, node): {last:?}\n{}",
            log_tails(cluster, via)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The group as its coordinator describes it.
fn describe(cluster: &Cluster, coordinator: i32, group: &str) -> Option<GroupView> {
    common::describe_group(&addr(cluster, coordinator), group, PROBE).filter(|g| g.error_code == 0)
}

/// Produces `n` records with values "0".."n-1" and keys "key-<i>" (librdkafka's
/// default partitioner spreads them), acks=all; returns (partition, offset) -> i.
fn produce_numbered(bootstrap: &str, topic: &str, n: u64) -> BTreeMap<(i32, i64), u64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            // Small batches, so that consumers fetching little per partition
            // interleave the partitions.
            .set("batch.num.messages", "10")
            .set("message.timeout.ms", "60000")
            .set("client.id", "groups-test-producer")
            .create()
            .expect("producer");
        let mut pending = Vec::with_capacity(n as usize);
        for i in 0..n {
            let key = format!("key-{i}");
            let value = i.to_string();
            let delivery = loop {
                match producer.send_result(FutureRecord::to(topic).key(&key).payload(&value)) {
                    Ok(d) => break d,
                    Err((e, _)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err((e, _)) => panic!("send of record {i} refused: {e}"),
                }
            };
            pending.push((i, delivery));
        }
        let mut acked = BTreeMap::new();
        for (i, d) in pending {
            match d.await {
                Ok(Ok(d)) => {
                    assert!(acked.insert((d.partition, d.offset), i).is_none());
                }
                Ok(Err((e, _))) => panic!("record {i} not delivered: {e}"),
                Err(_) => panic!("record {i}: delivery report dropped"),
            }
        }
        acked
    })
}

/// One JoinGroup response as librdkafka logs it (debug=cgrp).
#[derive(Clone, Debug)]
struct Join {
    generation: i32,
    leader_is_me: bool,
    line: String,
}

/// What a consumer's context saw: rebalance callbacks, its assignment, the
/// JoinGroup responses, and librdkafka's warnings and errors.
#[derive(Default)]
struct CtxState {
    rebalances: Vec<String>,
    assigned: BTreeSet<i32>,
    /// Assigned partitions from which nothing was processed since the assignment.
    fresh: BTreeSet<i32>,
    joins: Vec<Join>,
    notable: Vec<String>,
}

#[derive(Clone)]
struct Ctx {
    state: Arc<Mutex<CtxState>>,
}

impl Ctx {
    fn new() -> Ctx {
        Ctx {
            state: Arc::new(Mutex::new(CtxState::default())),
        }
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, CtxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn rebalance_count(&self) -> usize {
        self.lock().rebalances.len()
    }
    fn assigned(&self) -> BTreeSet<i32> {
        self.lock().assigned.clone()
    }
    fn last_join(&self) -> Option<Join> {
        self.lock().joins.last().cloned()
    }
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<i32> {
    let mut v: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
    v.sort_unstable();
    v
}

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        if let Some(rest) = msg.split("JoinGroup response: GenerationId ").nth(1) {
            let generation = rest
                .split(|c: char| !c.is_ascii_digit() && c != '-')
                .next()
                .and_then(|g| g.parse().ok())
                .unwrap_or(i32::MIN);
            let leader_is_me = rest
                .split("LeaderId ")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .is_some_and(|l| l.ends_with("(me)"));
            self.lock().joins.push(Join {
                generation,
                leader_is_me,
                line: msg.to_string(),
            });
        } else if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            let mut s = self.lock();
            if s.notable.len() < 200 {
                s.notable.push(format!("{level:?} {fac}: {msg}"));
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let mut s = self.lock();
        if s.notable.len() < 200 {
            s.notable.push(format!("error {error}: {reason}"));
        }
    }
}

impl ConsumerContext for Ctx {
    fn post_rebalance(&self, _c: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut s = self.lock();
        match rebalance {
            Rebalance::Assign(tpl) => {
                let ps = partitions_of(tpl);
                s.assigned = ps.iter().copied().collect();
                s.fresh = s.assigned.clone();
                s.rebalances.push(format!("assign {ps:?}"));
            }
            Rebalance::Revoke(tpl) => {
                let ps = partitions_of(tpl);
                for p in &ps {
                    s.assigned.remove(p);
                    s.fresh.remove(p);
                }
                s.rebalances.push(format!("revoke {ps:?}"));
            }
            Rebalance::Error(e) => s.rebalances.push(format!("error {e}")),
        }
    }
}

fn consumer_config(bootstrap: &str, group: &str, client_id: &str) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("client.id", client_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("heartbeat.interval.ms", "1000")
        .set("debug", "cgrp")
        .set_log_level(RDKafkaLogLevel::Debug);
    cfg
}

// ---------------------------------------------------------------------------
// coordinator_failover_loses_no_committed_offset

#[derive(Clone, Debug)]
struct Processed {
    consumer: usize,
    partition: i32,
    offset: i64,
    value: u64,
    after_kill: bool,
}

/// What the consumers did, in one global order (every event under one lock).
#[derive(Default)]
struct Ledger {
    processed: Vec<Processed>,
    times: HashMap<(i32, i64), u32>,
    /// partition -> highest offset acknowledged by a successful commit.
    acked_commit: BTreeMap<i32, i64>,
    /// partition -> highest offset a commit was attempted with.
    attempted_commit: BTreeMap<i32, i64>,
    /// consumer -> partition -> last offset it committed successfully.
    committed_by: BTreeMap<usize, BTreeMap<i32, i64>>,
    commits_ok: usize,
    commit_failures: Vec<String>,
    poll_errors: Vec<String>,
    /// `acked_commit` at the moment the coordinator was SIGKILLed.
    at_kill: Option<BTreeMap<i32, i64>>,
    /// (consumer, partition, first offset processed after an assignment,
    /// acked commit then, highest attempted commit then)
    resumes: Vec<(usize, i32, i64, i64, i64, bool)>,
    violations: Vec<String>,
}

impl Ledger {
    fn process(&mut self, consumer: usize, partition: i32, offset: i64, value: u64, fresh: bool) {
        let after_kill = self.at_kill.is_some();
        let acked = self.acked_commit.get(&partition).copied().unwrap_or(0);
        let attempted = self
            .attempted_commit
            .get(&partition)
            .copied()
            .unwrap_or(0)
            .max(acked);
        let n = {
            let n = self.times.entry((partition, offset)).or_insert(0);
            *n += 1;
            *n
        };
        if n > 1 && offset < acked {
            self.violations.push(format!(
                "consumer {consumer} processed {partition}@{offset} again (time {n}) although \
                 offset {acked} of partition {partition} had been committed (acknowledged)"
            ));
        }
        if n > 1 {
            if let Some(k) = self.at_kill.as_ref().and_then(|m| m.get(&partition)) {
                if offset < *k {
                    self.violations.push(format!(
                        "consumer {consumer} re-processed {partition}@{offset} after the kill; \
                         offset {k} was committed at the kill"
                    ));
                }
            }
        }
        if fresh {
            if offset < acked || offset > attempted {
                self.violations.push(format!(
                    "consumer {consumer} resumed partition {partition} at offset {offset}; \
                     acknowledged commit {acked}, highest commit attempted {attempted}"
                ));
            }
            self.resumes
                .push((consumer, partition, offset, acked, attempted, after_kill));
        }
        self.processed.push(Processed {
            consumer,
            partition,
            offset,
            value,
            after_kill,
        });
    }

    fn distinct(&self) -> usize {
        self.times.len()
    }
}

/// How often a committing consumer polls and commits.
const COMMIT_PACE: Duration = Duration::from_millis(3);

fn run_committing_consumer(
    idx: usize,
    bootstrap: String,
    group: String,
    topic: String,
    ctx: Ctx,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let consumer: BaseConsumer<Ctx> =
        consumer_config(&bootstrap, &group, &format!("committer-{idx}"))
            .set("session.timeout.ms", "10000")
            // A little of each partition per fetch: every partition is consumed
            // a bit at a time, so all of them are mid-way at the kill.
            .set("max.partition.fetch.bytes", "1024")
            .set("queued.min.messages", "20")
            .create_with_context(ctx.clone())
            .expect("consumer");
    consumer.subscribe(&[&topic]).expect("subscribe");
    while !stop.load(Ordering::SeqCst) {
        let m = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            Some(Err(e)) => {
                let mut l = ledger.lock().unwrap();
                if l.poll_errors.len() < 100 {
                    l.poll_errors.push(format!("consumer {idx}: {e}"));
                }
                continue;
            }
            Some(Ok(m)) => m,
        };
        let (p, o) = (m.partition(), m.offset());
        let value: u64 = m
            .payload()
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("consumer {idx}: unreadable value at {p}@{o}"));
        let fresh = ctx.lock().fresh.remove(&p);
        {
            let mut l = ledger.lock().unwrap();
            l.process(idx, p, o, value, fresh);
            let a = l.attempted_commit.entry(p).or_insert(0);
            *a = (*a).max(o + 1);
        }
        let result = consumer.commit_message(&m, CommitMode::Sync);
        let mut l = ledger.lock().unwrap();
        match result {
            Ok(()) => {
                let a = l.acked_commit.entry(p).or_insert(0);
                *a = (*a).max(o + 1);
                l.committed_by.entry(idx).or_default().insert(p, o + 1);
                l.commits_ok += 1;
            }
            Err(e) => {
                let after = if l.at_kill.is_some() {
                    "after"
                } else {
                    "before"
                };
                l.commit_failures.push(format!(
                    "consumer {idx} commit {p}@{} ({after} the kill): {e}",
                    o + 1
                ));
            }
        }
        drop(l);
        // Pacing (not synchronisation): consumption should outlast the failover.
        std::thread::sleep(COMMIT_PACE);
    }
    // Dropping the consumer closes it (LeaveGroup).
}

/// A committing consumer on its own thread.
struct Committer {
    idx: usize,
    ctx: Ctx,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    fn start(
        idx: usize,
        bootstrap: &str,
        group: &str,
        topic: &str,
        ledger: &Arc<Mutex<Ledger>>,
    ) -> Committer {
        let ctx = Ctx::new();
        let stop = Arc::new(AtomicBool::new(false));
        let (b, g, t, c, l, s) = (
            bootstrap.to_string(),
            group.to_string(),
            topic.to_string(),
            ctx.clone(),
            ledger.clone(),
            stop.clone(),
        );
        let thread = std::thread::spawn(move || run_committing_consumer(idx, b, g, t, c, l, s));
        Committer {
            idx,
            ctx,
            stop,
            thread: Some(thread),
        }
    }

    /// Closes the consumer (it leaves the group) and waits for its thread.
    fn close(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("consumer thread");
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[test]
fn coordinator_failover_loses_no_committed_offset() {
    const TEST: &str = "coordinator_failover_loses_no_committed_offset";
    let _serial = one_at_a_time();
    let started = Instant::now();
    let topic = "orders";
    let group = "failover-group";
    const N: u64 = 3000;
    let mut cluster = Cluster::start(&common::strand_bin(), spec(TEST)).expect("cluster starts");
    let ids = cluster.broker_ids();
    create_topic(&cluster, topic);

    let acked = produce_numbered(&cluster.bootstrap(), topic, N);
    assert_eq!(acked.len() as u64, N, "every record acknowledged");
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for (p, o) in acked.keys() {
        let e = ends.entry(*p).or_insert(0);
        *e = (*e).max(o + 1);
    }
    for p in 0..PARTITIONS {
        let end = ends.get(&p).copied().unwrap_or(0);
        let count = acked.keys().filter(|(q, _)| *q == p).count() as i64;
        assert!(count > 0, "partition {p} got no record: {ends:?}");
        assert_eq!(
            count, end,
            "partition {p}: offsets 0..{end} all acknowledged"
        );
    }
    println!(
        "produced {N} records, partition ends {ends:?}, {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // The coordinator exists (and __consumer_offsets is fully replicated)
    // before the consumers start.
    let initial = agreed_coordinator(&cluster, &ids, group, Duration::from_secs(30));
    wait_topic_fully_replicated(
        &cluster,
        &ids,
        OFFSETS_TOPIC,
        OFFSETS_PARTITIONS,
        Duration::from_secs(30),
    );
    println!("coordinator of {group}: node {initial}");

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let bootstrap = cluster.bootstrap();
    let mut committers: Vec<Committer> = (0..3)
        .map(|i| Committer::start(i, &bootstrap, group, topic, &ledger))
        .collect();

    // Mid-consumption: a stable group of three, commits acknowledged on every
    // partition, a third of the records processed.
    let t0 = Instant::now();
    let (group_before, coordinator) = eventually(
        "a stable group of three committing on every partition, N/3 records processed",
        Duration::from_secs(60),
        || {
            let l = ledger.lock().unwrap();
            if l.distinct() < (N / 3) as usize || l.acked_commit.len() < PARTITIONS as usize {
                return None;
            }
            drop(l);
            if committers.iter().any(|c| c.ctx.assigned().is_empty()) {
                return None;
            }
            let coord = common::find_coordinator(&addr(&cluster, ids[0]), group, 0, PROBE)
                .filter(|(e, n)| *e == 0 && *n >= 0)?
                .1;
            let g = describe(&cluster, coord, group)?;
            (g.state == "Stable" && g.members.len() == 3).then_some((g, coord))
        },
    );
    let victim = coordinator;
    cluster.kill9(victim).unwrap();
    let (at_kill, processed_at_kill) = {
        let mut l = ledger.lock().unwrap();
        let snapshot = l.acked_commit.clone();
        l.at_kill = Some(snapshot.clone());
        (snapshot, l.distinct())
    };
    let killed_at = Instant::now();
    println!(
        "SIGKILLed coordinator {victim} after {:.1}s of consumption: {processed_at_kill} of {N} \
         records processed, acknowledged commits {at_kill:?}; group before: {:?}",
        t0.elapsed().as_secs_f64(),
        group_before
            .members
            .iter()
            .map(|m| (&m.client_id, &m.assignment))
            .collect::<Vec<_>>()
    );
    assert!(
        (processed_at_kill as u64) < N,
        "the coordinator was killed after all records were processed: not mid-consumption"
    );
    let survivors: Vec<i32> = ids.iter().copied().filter(|id| *id != victim).collect();

    // A new coordinator on a survivor, which has every acknowledged commit.
    let new_coordinator = agreed_coordinator_except(
        &cluster,
        &survivors,
        group,
        Some(victim),
        Duration::from_secs(30),
    );
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let early = eventually(
        &format!("OffsetFetch answered by the new coordinator {new_coordinator}"),
        Duration::from_secs(30),
        || {
            common::offset_fetch(&addr(&cluster, new_coordinator), group, topic, &all, PROBE)
                .filter(|f| f.error_code == 0 && f.partitions.values().all(|(_, e)| *e == 0))
        },
    );
    println!(
        "new coordinator {new_coordinator} after {:.1}s; its committed offsets {:?}",
        killed_at.elapsed().as_secs_f64(),
        early.partitions
    );
    for p in 0..PARTITIONS {
        let want = at_kill.get(&p).copied().unwrap_or(0);
        let got = early.partitions.get(&p).map_or(-1, |(o, _)| *o);
        assert!(
            got >= want,
            "partition {p}: the new coordinator {new_coordinator} returns committed offset {got}, \
             but {want} was acknowledged before the kill of {victim}\n{}",
            log_tails(&cluster, &survivors)
        );
    }

    // Partitions change hands on the new coordinator: consumer 0 is replaced
    // (it leaves, the group rebalances; its successor joins, the group
    // rebalances again), so consumers resume from the offsets the new
    // coordinator holds.
    let remaining = N as usize - ledger.lock().unwrap().distinct();
    committers[0].close();
    let mut closed = vec![committers.remove(0)];
    committers.push(Committer::start(3, &bootstrap, group, topic, &ledger));
    println!("replaced consumer 0 by consumer 3 with {remaining} records left");

    // Consumption goes on until every record is processed.
    eventually(
        &format!("all {N} records processed after the coordinator failover"),
        Duration::from_secs(90),
        || (ledger.lock().unwrap().distinct() as u64 >= N).then_some(()),
    );
    let consumed_at = Instant::now();
    // The group settles on the new coordinator with its three members, and the
    // last commits reach the end of every partition.
    let coordinator_now = agreed_coordinator(&cluster, &survivors, group, Duration::from_secs(30));
    assert_eq!(
        coordinator_now, new_coordinator,
        "the coordinator stays on {new_coordinator}"
    );
    let group_after = eventually(
        &format!("group {group} Stable with 3 members on coordinator {new_coordinator}"),
        Duration::from_secs(30),
        || {
            describe(&cluster, new_coordinator, group)
                .filter(|g| g.state == "Stable" && g.members.len() == 3)
        },
    );
    let final_offsets = eventually(
        "the committed offsets reach the end of every partition",
        Duration::from_secs(30),
        || {
            common::offset_fetch(&addr(&cluster, new_coordinator), group, topic, &all, PROBE)
                .filter(|f| {
                    f.error_code == 0
                        && (0..PARTITIONS)
                            .all(|p| f.partitions.get(&p).map(|(o, _)| *o) == ends.get(&p).copied())
                })
        },
    );
    for c in committers.iter_mut() {
        c.close();
    }
    closed.append(&mut committers);

    let l = ledger.lock().unwrap();
    for p in 0..PARTITIONS {
        let acked_commit = l.acked_commit.get(&p).copied().unwrap_or(0);
        let got = final_offsets.partitions.get(&p).map_or(-1, |(o, _)| *o);
        assert!(
            got >= acked_commit,
            "partition {p}: committed {got} < acknowledged {acked_commit}"
        );
    }
    // Every record processed at least once, with the value produced there.
    let mut missing = Vec::new();
    for ((p, o), v) in &acked {
        if !l.times.contains_key(&(*p, *o)) {
            missing.push((*p, *o, *v));
        }
    }
    let wrong: Vec<&Processed> = l
        .processed
        .iter()
        .filter(|r| acked.get(&(r.partition, r.offset)) != Some(&r.value))
        .collect();
    let duplicates: Vec<(i32, i64, u32)> = l
        .times
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|((p, o), n)| (*p, *o, *n))
        .collect();
    let mut dup_sorted = duplicates.clone();
    dup_sorted.sort_unstable();
    let resumes_after_kill: Vec<_> = l.resumes.iter().filter(|r| r.5).collect();
    println!(
        "consumed all {N} after {:.1}s ({:.1}s after the kill); {} processed in all, {} twice or more \
         ({} after the kill); {} commits acknowledged, {} failed; resumes {:?}",
        t0.elapsed().as_secs_f64(),
        consumed_at.duration_since(killed_at).as_secs_f64(),
        l.processed.len(),
        duplicates.len(),
        l.processed.iter().filter(|r| r.after_kill).count(),
        l.commits_ok,
        l.commit_failures.len(),
        l.resumes
    );
    println!(
        "duplicates (partition, offset, times): {:?}",
        &dup_sorted[..dup_sorted.len().min(50)]
    );
    println!(
        "commit failures: {:?}",
        &l.commit_failures[..l.commit_failures.len().min(20)]
    );
    println!(
        "poll errors: {:?}",
        &l.poll_errors[..l.poll_errors.len().min(20)]
    );
    println!("last commits per consumer: {:?}", l.committed_by);
    let per_consumer: BTreeMap<usize, usize> =
        l.processed.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r.consumer).or_insert(0) += 1;
            m
        });
    println!("records processed per consumer: {per_consumer:?}");
    println!(
        "group after: {:?}",
        group_after
            .members
            .iter()
            .map(|m| (&m.client_id, &m.assignment))
            .collect::<Vec<_>>()
    );
    for c in &closed {
        let i = c.idx;
        let s = c.ctx.lock();
        println!(
            "consumer {i}: rebalances {:?}; joins {:?}; librdkafka warnings: {}",
            s.rebalances,
            s.joins
                .iter()
                .map(|j| (j.generation, j.leader_is_me))
                .collect::<Vec<_>>(),
            s.notable.len()
        );
        for n in s.notable.iter().take(8) {
            println!("    {n}");
        }
    }
    println!("resumes after the kill: {resumes_after_kill:?}");
    assert!(
        missing.is_empty(),
        "{} records never processed (skipped), first: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    assert!(
        wrong.is_empty(),
        "records processed with a value not produced there: {:?}",
        &wrong[..wrong.len().min(10)]
    );
    assert!(
        l.violations.is_empty(),
        "{} re-deliveries of committed records / wrong resume offsets, first: {:#?}",
        l.violations.len(),
        &l.violations[..l.violations.len().min(20)]
    );
    assert!(
        !resumes_after_kill.is_empty(),
        "no partition changed hands after the failover: the resume check did not run"
    );
    drop(l);

    cluster.restart(victim).expect("the killed node restarts");
    wait_topic_fully_replicated(&cluster, &ids, topic, PARTITIONS, Duration::from_secs(60));
    let after_restart = agreed_coordinator(&cluster, &ids, group, Duration::from_secs(30));
    let offsets_after_restart = eventually(
        "OffsetFetch after the restart of the killed node",
        Duration::from_secs(30),
        || {
            common::offset_fetch(&addr(&cluster, after_restart), group, topic, &all, PROBE)
                .filter(|f| f.error_code == 0)
        },
    );
    assert_eq!(
        offsets_after_restart.partitions, final_offsets.partitions,
        "committed offsets after node {victim} rejoined (coordinator {after_restart})"
    );
    println!(
        "node {victim} restarted; coordinator {after_restart}; test took {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// static_member_restart_keeps_assignment_without_rebalance

const STATIC_SESSION_TIMEOUT: Duration = Duration::from_secs(20);

/// A static member polling from its own thread; records the (partition,
/// offset) of every message it receives.
struct StaticMember {
    instance: String,
    ctx: Ctx,
    received: Arc<Mutex<Vec<(i32, i64)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StaticMember {
    fn start(
        bootstrap: &str,
        group: &str,
        topic: &str,
        instance: &str,
        incarnation: u32,
    ) -> StaticMember {
        let ctx = Ctx::new();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let consumer: BaseConsumer<Ctx> =
            consumer_config(bootstrap, group, &format!("{instance}-run{incarnation}"))
                .set("group.instance.id", instance)
                .set(
                    "session.timeout.ms",
                    STATIC_SESSION_TIMEOUT.as_millis().to_string(),
                )
                .create_with_context(ctx.clone())
                .expect("consumer");
        consumer.subscribe(&[topic]).expect("subscribe");
        let (r, s) = (received.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                    r.lock().unwrap().push((m.partition(), m.offset()));
                }
            }
            // Dropping the consumer closes it; a static member sends no LeaveGroup.
        });
        StaticMember {
            instance: instance.to_string(),
            ctx,
            received,
            stop,
            thread: Some(thread),
        }
    }

    /// Closes the consumer (waits for the close to finish).
    fn close(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("consumer thread");
        }
    }
}

impl Drop for StaticMember {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn member_of<'a>(g: &'a GroupView, instance: &str) -> Option<&'a common::MemberView> {
    g.members
        .iter()
        .find(|m| m.group_instance_id.as_deref() == Some(instance))
}

fn assignment_in(m: &common::MemberView, topic: &str) -> BTreeSet<i32> {
    m.assignment
        .get(topic)
        .map(|ps| ps.iter().copied().collect())
        .unwrap_or_default()
}

#[test]
fn static_member_restart_keeps_assignment_without_rebalance() {
    const TEST: &str = "static_member_restart_keeps_assignment_without_rebalance";
    let _serial = one_at_a_time();
    let started = Instant::now();
    let topic = "static-topic";
    let group = "static-group";
    let cluster = Cluster::start(&common::strand_bin(), spec(TEST)).expect("cluster starts");
    let ids = cluster.broker_ids();
    create_topic(&cluster, topic);
    let coordinator = agreed_coordinator(&cluster, &ids, group, Duration::from_secs(30));
    wait_topic_fully_replicated(
        &cluster,
        &ids,
        OFFSETS_TOPIC,
        OFFSETS_PARTITIONS,
        Duration::from_secs(30),
    );
    let bootstrap = cluster.bootstrap();

    let instances = ["static-a", "static-b", "static-c"];
    let mut members: Vec<StaticMember> = instances
        .iter()
        .map(|i| StaticMember::start(&bootstrap, group, topic, i, 1))
        .collect();

    // Stable: three static members, each consumer's assignment as the
    // coordinator stored it, together all six partitions, one generation.
    let stable = eventually(
        "a Stable group of three static members covering the six partitions",
        Duration::from_secs(60),
        || {
            let g = describe(&cluster, coordinator, group)?;
            if g.state != "Stable" || g.members.len() != 3 {
                return None;
            }
            let mut union = BTreeSet::new();
            for m in &members {
                let a = m.ctx.assigned();
                let stored = assignment_in(member_of(&g, &m.instance)?, topic);
                if a.is_empty() || a != stored {
                    return None;
                }
                union.extend(a);
            }
            let gens: BTreeSet<i32> = members
                .iter()
                .map(|m| m.ctx.last_join().map_or(i32::MIN, |j| j.generation))
                .collect();
            (union == (0..PARTITIONS).collect() && gens.len() == 1).then_some(g)
        },
    );
    let generation = members[0].ctx.last_join().unwrap().generation;
    let counts: Vec<usize> = members.iter().map(|m| m.ctx.rebalance_count()).collect();
    let assignments: Vec<BTreeSet<i32>> = members.iter().map(|m| m.ctx.assigned()).collect();
    let member_ids: Vec<String> = instances
        .iter()
        .map(|i| member_of(&stable, i).unwrap().member_id.clone())
        .collect();
    println!(
        "stable after {:.1}s at generation {generation}: assignments {assignments:?}, member ids \
         {member_ids:?}, rebalance callbacks {counts:?}",
        started.elapsed().as_secs_f64()
    );
    // Restart a member that is not the leader.
    let v = members
        .iter()
        .position(|m| m.ctx.last_join().is_some_and(|j| !j.leader_is_me))
        .expect("a non-leader member");
    let survivors: Vec<usize> = (0..3).filter(|i| *i != v).collect();
    let old_assignment = assignments[v].clone();

    let closed_at = Instant::now();
    members[v].close();
    println!(
        "closed {} (member {}) in {:.1}s",
        instances[v],
        member_ids[v],
        closed_at.elapsed().as_secs_f64()
    );
    // No LeaveGroup: the coordinator still has the member, the group stays Stable.
    let g = describe(&cluster, coordinator, group).expect("DescribeGroups after the close");
    assert_eq!(
        g.state, "Stable",
        "group after the static member's close: {g:?}"
    );
    assert_eq!(
        member_of(&g, instances[v]).map(|m| m.member_id.clone()),
        Some(member_ids[v].clone()),
        "the closed static member is still a member (no LeaveGroup): {g:?}"
    );

    members[v] = StaticMember::start(&bootstrap, group, topic, instances[v], 2);
    let back = eventually(
        &format!("{} assigned again", instances[v]),
        STATIC_SESSION_TIMEOUT,
        || {
            let a = members[v].ctx.assigned();
            (!a.is_empty()).then_some(a)
        },
    );
    let back_after = closed_at.elapsed();
    println!(
        "{} assigned {back:?} again {:.1}s after the close; its joins: {:?}",
        instances[v],
        back_after.as_secs_f64(),
        members[v]
            .ctx
            .lock()
            .joins
            .iter()
            .map(|j| &j.line)
            .collect::<Vec<_>>()
    );
    assert!(
        back_after < STATIC_SESSION_TIMEOUT,
        "back within the session timeout"
    );
    assert_eq!(
        back, old_assignment,
        "the restarted static member gets its partitions back"
    );
    let rejoin = members[v].ctx.lock().joins.clone();
    assert_eq!(
        rejoin.len(),
        1,
        "the restarted member joined once: {rejoin:?}"
    );
    assert_eq!(
        rejoin[0].generation, generation,
        "the restarted member joins the current generation (no rebalance): {}",
        rejoin[0].line
    );

    // For a while: the coordinator stays Stable at that assignment, the other
    // members see no rebalance, join no new generation and keep their member ids.
    let check = |what: &str| {
        let g = describe(&cluster, coordinator, group)
            .unwrap_or_else(|| panic!("{what}: DescribeGroups at {coordinator}"));
        assert_eq!(g.state, "Stable", "{what}: {g:?}");
        assert_eq!(g.members.len(), 3, "{what}: {g:?}");
        for i in 0..3 {
            let m = member_of(&g, instances[i])
                .unwrap_or_else(|| panic!("{what}: {} in {g:?}", instances[i]));
            assert_eq!(
                assignment_in(m, topic),
                assignments[i],
                "{what}: stored assignment of {}",
                instances[i]
            );
            if i == v {
                assert_ne!(
                    m.member_id, member_ids[v],
                    "{what}: the restarted instance has a new member id"
                );
            } else {
                assert_eq!(
                    m.member_id, member_ids[i],
                    "{what}: member id of {}",
                    instances[i]
                );
            }
        }
        for i in &survivors {
            let m = &members[*i];
            let s = m.ctx.lock();
            assert_eq!(
                s.rebalances.len(),
                counts[*i],
                "{what}: {} was rebalanced: {:?}",
                m.instance,
                s.rebalances
            );
            assert_eq!(
                s.assigned, assignments[*i],
                "{what}: assignment of {}",
                m.instance
            );
            assert_eq!(
                s.joins.last().map(|j| j.generation),
                Some(generation),
                "{what}: {} joined another generation: {:?}",
                m.instance,
                s.joins.iter().map(|j| &j.line).collect::<Vec<_>>()
            );
        }
        assert_eq!(
            members[v].ctx.assigned(),
            old_assignment,
            "{what}: assignment of the restarted member"
        );
    };
    // Absence of a rebalance cannot be awaited: observe over several
    // heartbeat intervals (1 s), checking at every step.
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(4) {
        check("after the restart");
        std::thread::sleep(Duration::from_millis(200));
    }

    // The group consumes: 60 new records, each received by the member that
    // owns its partition.
    let base: Vec<usize> = members
        .iter()
        .map(|m| m.received.lock().unwrap().len())
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let acked: BTreeMap<(i32, i64), String> = rt.block_on(async {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("acks", "all")
            .create()
            .expect("producer");
        let mut out = BTreeMap::new();
        for i in 0..60 {
            let (key, value) = (format!("k{i}"), format!("v{i}"));
            let d = producer
                .send(
                    FutureRecord::to(topic).key(&key).payload(&value),
                    Duration::from_secs(30),
                )
                .await
                .unwrap_or_else(|(e, _)| panic!("produce {value}: {e}"));
            out.insert((d.partition, d.offset), value);
        }
        out
    });
    let owner = |p: i32| (0..3).find(|i| assignments[*i].contains(&p)).unwrap();
    eventually(
        "the members receive the 60 new records",
        Duration::from_secs(30),
        || {
            let got: BTreeSet<(i32, i64)> = members
                .iter()
                .zip(&base)
                .flat_map(|(m, b)| m.received.lock().unwrap()[*b..].to_vec())
                .collect();
            acked.keys().all(|k| got.contains(k)).then_some(())
        },
    );
    for (i, m) in members.iter().enumerate() {
        let r = m.received.lock().unwrap();
        let foreign: Vec<&(i32, i64)> = r[base[i]..]
            .iter()
            .filter(|(p, _)| owner(*p) != i)
            .collect();
        assert!(
            foreign.is_empty(),
            "{} received records of partitions it does not own: {foreign:?}",
            m.instance
        );
    }
    check("after consuming");
    for m in &members {
        let s = m.ctx.lock();
        println!(
            "{}: rebalances {:?}; joins {:?}; librdkafka warnings {:?}",
            m.instance,
            s.rebalances,
            s.joins
                .iter()
                .map(|j| (j.generation, j.leader_is_me))
                .collect::<Vec<_>>(),
            &s.notable[..s.notable.len().min(5)]
        );
    }
    for m in members.iter_mut() {
        m.close();
    }
    println!(
        "static member test took {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// offsets.retention.minutes: the committed offsets of a group without
/// members expire once the retention has passed since the commit (the
/// shortest retention Kafka allows is one minute), and not before.
#[test]
fn offsets_of_a_group_without_members_expire() {
    let broker = strand_compat_tests::harness::Broker::start(
        &common::strand_bin(),
        &[
            ("num.partitions", "1"),
            ("offsets.topic.num.partitions", "1"),
            ("offsets.retention.minutes", "1"),
            ("offsets.retention.check.interval.ms", "500"),
        ],
    )
    .expect("broker starts");
    let addr = broker.addr();
    let mut c = Client::connect(&addr).unwrap();
    common::auto_create(&mut c, "expiring");
    // The first FindCoordinator creates __consumer_offsets; wait until it answers.
    common::eventually("a coordinator", Duration::from_secs(30), || {
        common::find_coordinator(&addr, "g-expire", 0, Duration::from_secs(5))
            .filter(|(e, _)| *e == 0)
    });
    let code = common::eventually("the commit", Duration::from_secs(30), || {
        common::offset_commit_simple(&addr, "g-expire", "expiring", 0, 42, Duration::from_secs(5))
            .filter(|e| *e == 0)
    });
    assert_eq!(code, 0);
    let committed = Instant::now();
    let fetch = || {
        common::offset_fetch(&addr, "g-expire", "expiring", &[0], Duration::from_secs(5))
            .and_then(|f| f.partitions.get(&0).map(|p| p.0))
    };
    assert_eq!(fetch(), Some(42));
    common::eventually("the offset expires", Duration::from_secs(120), || {
        (fetch() == Some(-1)).then_some(())
    });
    let after = committed.elapsed();
    assert!(
        after >= Duration::from_secs(55),
        "expired after {after:?}, before offsets.retention.minutes"
    );
}

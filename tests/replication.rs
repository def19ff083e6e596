//! Replication acceptance tests, each on a fresh 3-node cluster (combined
//! broker+controller nodes) with one partition, replication factor 3 and
//! min.insync.replicas=2:
//!
//! * an idempotent acks=all producer loses no acknowledged record across ten
//!   SIGKILLs of the partition leader (each followed by a restart);
//! * with both followers SIGSTOPped, acks=all is refused (NOT_ENOUGH_REPLICAS or
//!   NOT_ENOUGH_REPLICAS_AFTER_APPEND) while acks=1 still succeeds, and acks=all
//!   succeeds again once the followers are back in the ISR;
//! * an old leader holding unreplicated acks=1 records truncates them after a
//!   new leader was elected and rejoins the ISR; the replicas end byte-identical
//!   and no consumer was ever served a record beyond the HW.

mod common;

use bytes::Bytes;
use common::{eventually, partition_view, Client, Fetched, PartitionView};
use rand::Rng;
use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

/// Timeout of one Metadata probe (a SIGSTOPped broker accepts but never answers).
const PROBE: Duration = Duration::from_secs(2);
const NOT_ENOUGH_REPLICAS: i16 = 19;
const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

/// The tests run one at a time: each starts three or four nodes, and the
/// failure detection they rely on (3 s broker sessions) should not compete
/// with another cluster for the CPU.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Three combined nodes; a broker is fenced 3 s after its last heartbeat.
fn spec(replica_lag_time_max_ms: u64) -> ClusterSpec {
    tuned(ClusterSpec::combined(3), replica_lag_time_max_ms)
}

fn tuned(spec: ClusterSpec, replica_lag_time_max_ms: u64) -> ClusterSpec {
    spec.with_override("broker.session.timeout.ms", "3000")
        .with_override("broker.heartbeat.interval.ms", "500")
        .with_override(
            "replica.lag.time.max.ms",
            replica_lag_time_max_ms.to_string(),
        )
}

fn addr(cluster: &Cluster, id: i32) -> String {
    cluster.broker_addr(id).expect("broker address")
}

/// The partition as broker `via` sees it, once its ISR is `isr`.
fn wait_isr(
    cluster: &Cluster,
    via: i32,
    topic: &str,
    isr: &[i32],
    timeout: Duration,
) -> PartitionView {
    let a = addr(cluster, via);
    let mut want = isr.to_vec();
    want.sort_unstable();
    eventually(
        &format!("ISR {want:?} for {topic}-0 as broker {via} sees it"),
        timeout,
        || partition_view(&a, topic, 0, PROBE).filter(|v| v.isr == want),
    )
}

/// Waits until every broker in `via` reports the same leader, epoch and an ISR of 3.
fn wait_full_isr_everywhere(
    cluster: &Cluster,
    via: &[i32],
    topic: &str,
    timeout: Duration,
) -> PartitionView {
    eventually(
        &format!("ISR of 3 for {topic}-0 on brokers {via:?}"),
        timeout,
        || {
            let views: Vec<PartitionView> = via
                .iter()
                .map(|id| partition_view(&addr(cluster, *id), topic, 0, PROBE))
                .collect::<Option<Vec<_>>>()?;
            let first = views[0].clone();
            (first.error_code == 0
                && first.leader >= 0
                && first.isr.len() == 3
                && views.iter().all(|v| *v == first))
            .then_some(first)
        },
    )
}

/// Creates `topic` (1 partition, RF 3, min.insync.replicas=2) and waits until
/// every broker sees a leader and an ISR of 3.
fn create_replicated_topic(cluster: &Cluster, topic: &str) -> PartitionView {
    let ids = cluster.broker_ids();
    let mut c = Client::connect(&addr(cluster, ids[0])).unwrap();
    let code = common::create_topic_with(&mut c, topic, 1, 3, &[("min.insync.replicas", "2")])
        .expect("CreateTopics answered");
    assert_eq!(code, 0, "CreateTopics {topic}");
    let v = wait_full_isr_everywhere(cluster, &ids, topic, Duration::from_secs(30));
    assert_eq!(v.replicas.len(), 3, "replication factor 3: {v:?}");
    v
}

/// The leader as the first answering broker of `via` reports it.
fn current_leader(cluster: &Cluster, via: &[i32], topic: &str) -> Option<PartitionView> {
    via.iter()
        .find_map(|id| partition_view(&addr(cluster, *id), topic, 0, PROBE))
        .filter(|v| v.leader >= 0)
}

/// Reads partition 0 from its current leader (asking the brokers in `via`),
/// from offset 0 until at least `min_end` and the HW seen at the first fetch.
fn read_log(cluster: &Cluster, via: &[i32], topic: &str, min_end: i64) -> Vec<(i64, Bytes)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    'retry: loop {
        assert!(
            Instant::now() < deadline,
            "could not read {topic}-0 up to offset {min_end} within 60 s"
        );
        let Some(leader) = current_leader(cluster, via, topic) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let Ok(mut c) = Client::connect_timeout(&addr(cluster, leader.leader), PROBE) else {
            continue;
        };
        let mut out: Vec<(i64, Bytes)> = Vec::new();
        let mut offset = 0i64;
        let mut end: Option<i64> = None;
        loop {
            let f: Fetched = match common::fetch_values_at_epoch(
                &mut c,
                topic,
                0,
                offset,
                500,
                leader.leader_epoch,
            ) {
                Ok(f) if f.error_code == 0 => f,
                _ => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue 'retry;
                }
            };
            let end = *end.get_or_insert(f.high_watermark.max(min_end));
            for (o, v) in f.records {
                if o >= offset {
                    out.push((o, v));
                }
            }
            offset = f.next_offset;
            if offset >= end {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "reading {topic}-0 from broker {}: stuck at offset {offset} (HW {}), want {end}",
                leader.leader,
                f.high_watermark
            );
        }
    }
}

/// An rdkafka idempotent acks=all producer writing 0, 1, 2, ... (as text) to
/// partition 0, continuously, from its own thread; every successful delivery
/// report is recorded as sequence -> offset.
struct SeqProducer {
    acked: Arc<Mutex<BTreeMap<u64, i64>>>,
    failures: Arc<Mutex<Vec<(u64, String)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
}

impl SeqProducer {
    fn start(bootstrap: &str, topic: &str) -> SeqProducer {
        let acked = Arc::new(Mutex::new(BTreeMap::new()));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, f, s) = (acked.clone(), failures.clone(), stop.clone());
        let bootstrap = bootstrap.to_string();
        let topic = topic.to_string();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(produce_sequence(bootstrap, topic, a, f, s))
        });
        SeqProducer {
            acked,
            failures,
            stop,
            thread: Some(thread),
        }
    }

    fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    fn acked(&self) -> BTreeMap<u64, i64> {
        self.acked.lock().unwrap().clone()
    }

    fn failures(&self) -> Vec<(u64, String)> {
        self.failures.lock().unwrap().clone()
    }

    /// Stops sending, waits for every outstanding delivery report; returns how
    /// many records were sent.
    fn finish(&mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .map(|t| t.join().expect("producer thread"))
            .unwrap_or(0)
    }
}

impl Drop for SeqProducer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

async fn produce_sequence(
    bootstrap: String,
    topic: String,
    acked: Arc<Mutex<BTreeMap<u64, i64>>>,
    failures: Arc<Mutex<Vec<(u64, String)>>>,
    stop: Arc<AtomicBool>,
) -> u64 {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", "60000")
        .set("linger.ms", "5")
        .set("client.id", "replication-test")
        .create()
        .expect("producer");
    // At most this many records without a delivery report.
    let window = Arc::new(tokio::sync::Semaphore::new(500));
    let mut reports = tokio::task::JoinSet::new();
    let mut seq = 0u64;
    'send: while !stop.load(Ordering::SeqCst) {
        let permit = window.clone().acquire_owned().await.unwrap();
        let value = seq.to_string();
        let delivery = loop {
            let record = FutureRecord::<(), String>::to(&topic)
                .partition(0)
                .payload(&value);
            match producer.send_result(record) {
                Ok(d) => break d,
                Err((e, _)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err((e, _)) => {
                    failures
                        .lock()
                        .unwrap()
                        .push((seq, format!("send refused: {e}")));
                    break 'send;
                }
            }
        };
        let (acked, failures) = (acked.clone(), failures.clone());
        let s = seq;
        reports.spawn(async move {
            let _permit = permit;
            match delivery.await {
                Ok(Ok(d)) => {
                    assert_eq!(d.partition, 0);
                    let prev = acked.lock().unwrap().insert(s, d.offset);
                    assert!(prev.is_none(), "two delivery reports for sequence {s}");
                }
                Ok(Err((e, _))) => failures.lock().unwrap().push((s, e.to_string())),
                Err(_) => failures
                    .lock()
                    .unwrap()
                    .push((s, "delivery report dropped".into())),
            }
        });
        while reports.try_join_next().is_some() {}
        seq += 1;
        // Pace the producer (about 500 records/s) to keep the log small.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Every outstanding record gets its report (success or message timeout).
    while reports.join_next().await.is_some() {}
    let _ = producer.flush(Duration::from_secs(5));
    seq
}

/// Checks the log read from offset 0: consecutive offsets, sequence numbers
/// strictly increasing, and every acknowledged record at its acknowledged
/// offset. Returns the log as offset -> sequence.
fn check_log(log: &[(i64, Bytes)], acked: &BTreeMap<u64, i64>, when: &str) -> BTreeMap<i64, u64> {
    let mut by_offset = BTreeMap::new();
    let mut prev: Option<u64> = None;
    for (i, (offset, value)) in log.iter().enumerate() {
        assert_eq!(*offset, i as i64, "{when}: offsets are consecutive from 0");
        let text = std::str::from_utf8(value).expect("utf-8 value");
        let seq: u64 = text
            .parse()
            .unwrap_or_else(|_| panic!("{when}: value {text:?}"));
        if let Some(p) = prev {
            assert!(
                seq > p,
                "{when}: sequence {seq} at offset {offset} follows {p}: duplicate or reordering"
            );
        }
        prev = Some(seq);
        by_offset.insert(*offset, seq);
    }
    let mut missing = Vec::new();
    for (seq, offset) in acked {
        if by_offset.get(offset) != Some(seq) {
            missing.push((*seq, *offset, by_offset.get(offset).copied()));
        }
    }
    assert!(
        missing.is_empty(),
        "{when}: {} of {} acknowledged records are not at their acknowledged offset \
         (seq, acked offset, seq found there), first ones: {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(20)]
    );
    by_offset
}

#[test]
fn leader_failover_loses_no_acknowledged_write() {
    let _serial = one_at_a_time();
    let started = Instant::now();
    let topic = "failover";
    let mut cluster = Cluster::start(&common::strand_bin(), spec(2000)).expect("cluster starts");
    let ids = cluster.broker_ids();
    create_replicated_topic(&cluster, topic);
    let mut producer = SeqProducer::start(&cluster.bootstrap(), topic);
    let mut rng = rand::thread_rng();
    for round in 1..=10 {
        let round_start = Instant::now();
        let target = producer.acked_count() + rng.gen_range(50..500);
        eventually(
            &format!("round {round}: {target} acknowledged records"),
            Duration::from_secs(60),
            || (producer.acked_count() >= target).then_some(()),
        );
        let before = wait_full_isr_everywhere(&cluster, &ids, topic, Duration::from_secs(30));
        let victim = before.leader;
        cluster.kill9(victim).unwrap();
        let acked_at_kill = producer.acked_count();
        let survivors: Vec<i32> = ids.iter().copied().filter(|id| *id != victim).collect();
        let after = eventually(
            &format!("round {round}: a new leader after SIGKILL of {victim}"),
            Duration::from_secs(30),
            || {
                current_leader(&cluster, &survivors, topic)
                    .filter(|v| v.leader != victim && v.leader_epoch > before.leader_epoch)
            },
        );
        let acked_at_election = producer.acked_count();
        eventually(
            &format!("round {round}: acks from the new leader {}", after.leader),
            Duration::from_secs(60),
            || (producer.acked_count() >= acked_at_election + 20).then_some(()),
        );
        let failover = round_start.elapsed();
        cluster.restart(victim).unwrap();
        let full = wait_full_isr_everywhere(&cluster, &ids, topic, Duration::from_secs(60));
        let acked = producer.acked();
        let min_end = acked.values().max().map_or(0, |o| o + 1);
        let log = read_log(&cluster, &ids, topic, min_end);
        check_log(&log, &acked, &format!("round {round}"));
        println!(
            "round {round}: killed leader {victim} (epoch {}) after {acked_at_kill} acks; \
             new leader {} (epoch {}) with {acked_at_election} acks; ISR {:?} at epoch {} again; \
             {} acked, {} records in the log; failover {:.1}s, round {:.1}s",
            before.leader_epoch,
            after.leader,
            after.leader_epoch,
            full.isr,
            full.leader_epoch,
            acked.len(),
            log.len(),
            failover.as_secs_f64(),
            round_start.elapsed().as_secs_f64()
        );
    }
    let sent = producer.finish();
    let acked = producer.acked();
    let failures = producer.failures();
    let min_end = acked.values().max().map_or(0, |o| o + 1);
    let log = read_log(&cluster, &ids, topic, min_end);
    check_log(&log, &acked, "after the last round");
    println!(
        "done: {sent} sent, {} acknowledged, {} failed, {} records in the log, {:.1}s",
        acked.len(),
        failures.len(),
        log.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} deliveries failed (idempotent, message.timeout.ms=60000), first: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert_eq!(
        acked.len() as u64,
        sent,
        "every sent record was acknowledged"
    );
}

/// With a 3-node combined cluster, SIGSTOPping both followers also stops two of
/// the three controllers: the metadata quorum is lost, the leader's ISR shrink
/// (AlterPartition) cannot commit, the maximal ISR stays {L, F1, F2}, and an
/// acks=all request can only time out (REQUEST_TIMED_OUT), as in Kafka. So this
/// test runs on three controller-only nodes plus three brokers: the quorum
/// stays up and commits the shrink (or fences the stopped brokers).
#[test]
fn min_isr_refuses_acks_all_with_two_followers_stopped() {
    let _serial = one_at_a_time();
    let started = Instant::now();
    let topic = "minisr";
    let mut cluster = Cluster::start(&common::strand_bin(), tuned(ClusterSpec::split(3, 3), 2000))
        .expect("cluster starts");
    let ids = cluster.broker_ids();
    let v = create_replicated_topic(&cluster, topic);
    let leader = v.leader;
    let followers: Vec<i32> = ids.iter().copied().filter(|id| *id != leader).collect();
    let la = addr(&cluster, leader);
    let mut c = Client::connect(&la).unwrap();
    let (e, offset) =
        common::produce_values(&mut c, topic, 0, -1, 15_000, &["all-before".into()]).unwrap();
    assert_eq!((e, offset), (0, 0), "acks=all with every replica in sync");

    for f in &followers {
        cluster.stop(*f).unwrap();
    }
    // Sent at once: the records are appended (the ISR is still 3), the HW
    // cannot pass them, and when the ISR shrinks below min ISR the request is
    // answered NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    let t = Instant::now();
    let (first, _) = common::produce_values(
        &mut c,
        topic,
        0,
        -1,
        15_000,
        &["all-while-stopped-1".into()],
    )
    .unwrap();
    let took = t.elapsed();
    println!("acks=all with followers {followers:?} stopped: error {first} after {took:?}");
    assert!(
        first == NOT_ENOUGH_REPLICAS || first == NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        "acks=all with both followers stopped answered {first} after {took:?}, \
         want NOT_ENOUGH_REPLICAS(_AFTER_APPEND); leader {leader} log tail:\n{}",
        cluster.log_tail(leader)
    );
    assert!(
        took < Duration::from_secs(15),
        "answered within the request timeout"
    );
    // Once the leader knows the ISR is itself alone, acks=all is refused
    // before the append.
    wait_isr(&cluster, leader, topic, &[leader], Duration::from_secs(30));
    let t = Instant::now();
    let (second, _) = common::produce_values(
        &mut c,
        topic,
        0,
        -1,
        15_000,
        &["all-while-stopped-2".into()],
    )
    .unwrap();
    println!(
        "acks=all with ISR [{leader}]: error {second} after {:?}",
        t.elapsed()
    );
    assert_eq!(
        second, NOT_ENOUGH_REPLICAS,
        "acks=all with an ISR of 1 < min ISR 2"
    );
    let (e, one_offset) =
        common::produce_values(&mut c, topic, 0, 1, 15_000, &["one-while-stopped".into()]).unwrap();
    assert_eq!(e, 0, "acks=1 with both followers stopped");
    assert!(one_offset >= 1, "acks=1 appended at {one_offset}");

    for f in &followers {
        cluster.cont(*f).unwrap();
    }
    let back = wait_full_isr_everywhere(&cluster, &ids, topic, Duration::from_secs(60));
    let (e, after) =
        common::produce_values(&mut c, topic, 0, -1, 15_000, &["all-after".into()]).unwrap();
    assert_eq!(e, 0, "acks=all once the ISR is {:?} again", back.isr);
    assert_eq!(after, one_offset + 1);
    let log: Vec<(i64, String)> = read_log(&cluster, &ids, topic, after + 1)
        .into_iter()
        .map(|(o, v)| (o, String::from_utf8(v.to_vec()).unwrap()))
        .collect();
    println!("log: {log:?}");
    assert!(log.contains(&(0, "all-before".to_string())));
    assert!(log.contains(&(one_offset, "one-while-stopped".to_string())));
    assert!(log.contains(&(after, "all-after".to_string())));
    assert!(
        !log.iter().any(|(_, v)| v == "all-while-stopped-2"),
        "a record refused with NOT_ENOUGH_REPLICAS is not appended"
    );
    println!(
        "leader {leader}, ISR back to {:?}: acks=all at offset {after}; {:.1}s",
        back.isr,
        started.elapsed().as_secs_f64()
    );
}

/// A consumer that follows the partition leader (as Metadata reports it) and
/// records every (broker, offset, value) a read_uncommitted Fetch serves it.
struct Reader {
    served: Arc<Mutex<Vec<(i32, i64, String)>>>,
    fetches: Arc<Mutex<HashMap<i32, u64>>>,
    next: Arc<Mutex<(i32, i64)>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Reader {
    fn start(brokers: Vec<(i32, String)>, topic: &str) -> Reader {
        let served = Arc::new(Mutex::new(Vec::new()));
        let fetches = Arc::new(Mutex::new(HashMap::new()));
        let next = Arc::new(Mutex::new((-1, 0)));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, f, n, st) = (served.clone(), fetches.clone(), next.clone(), stop.clone());
        let topic = topic.to_string();
        let thread = std::thread::spawn(move || {
            let timeout = Duration::from_secs(1);
            // As a client: the leader and its epoch from metadata, the epoch
            // sent with every fetch (KIP-320), so a broker that learned of a
            // later leader answers FENCED_LEADER_EPOCH and the reader moves.
            let mut conn: Option<(i32, i32, Client)> = None;
            let mut offset = 0i64;
            while !st.load(Ordering::SeqCst) {
                if conn.is_none() {
                    let leader = brokers
                        .iter()
                        .find_map(|(_, a)| partition_view(a, &topic, 0, timeout))
                        .filter(|v| v.leader >= 0)
                        .map(|v| (v.leader, v.leader_epoch));
                    let a = leader.and_then(|(l, epoch)| {
                        brokers.iter().find(|(id, _)| *id == l).map(|b| (b, epoch))
                    });
                    conn = a.and_then(|((id, a), epoch)| {
                        Client::connect_timeout(a, Duration::from_secs(2))
                            .ok()
                            .map(|c| (*id, epoch, c))
                    });
                    if conn.is_none() {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                }
                let (id, epoch, c) = conn.as_mut().unwrap();
                let (id, epoch) = (*id, *epoch);
                match common::fetch_values_at_epoch(c, &topic, 0, offset, 100, epoch) {
                    Ok(fetched) if fetched.error_code == 0 => {
                        *f.lock().unwrap().entry(id).or_insert(0) += 1;
                        let mut served = s.lock().unwrap();
                        for (o, v) in fetched.records {
                            if o >= offset {
                                served.push((id, o, String::from_utf8_lossy(&v).into_owned()));
                            }
                        }
                        offset = offset.max(fetched.next_offset);
                        *n.lock().unwrap() = (id, offset);
                    }
                    _ => {
                        conn = None;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        });
        Reader {
            served,
            fetches,
            next,
            stop,
            thread: Some(thread),
        }
    }

    /// Successful fetches served by broker `id` so far.
    fn fetches_from(&self, id: i32) -> u64 {
        self.fetches.lock().unwrap().get(&id).copied().unwrap_or(0)
    }

    /// (broker of the last successful fetch, next offset to read).
    fn position(&self) -> (i32, i64) {
        *self.next.lock().unwrap()
    }

    fn finish(&mut self) -> Vec<(i32, i64, String)> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("reader thread");
        }
        self.served.lock().unwrap().clone()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The concatenated segment files (`*.log`, by name) of `topic`-0 on node `id`.
fn segment_bytes(cluster: &Cluster, id: i32, topic: &str) -> Vec<u8> {
    let dir = cluster.data_dir(id).join(format!("{topic}-0"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .flat_map(|p| std::fs::read(p).unwrap_or_default())
        .collect()
}

#[test]
fn divergence_old_leader_truncates_and_rejoins() {
    let _serial = one_at_a_time();
    let started = Instant::now();
    let topic = "diverge";
    // The followers are stopped for well under replica.lag.time.max.ms, so the
    // old leader never proposes to drop them from the ISR and one of them can
    // be elected.
    let lag = Duration::from_secs(10);
    // A follower answer carries at most replica.fetch.max.bytes (at least one
    // batch): with each acks=1 record bigger than half of it, the one answer
    // a stopped follower can have in flight holds at most the first of them,
    // however late the leader reads it. The divergence does not rest on timing.
    let fetch_max_bytes = 8192;
    let pad = "x".repeat(fetch_max_bytes * 3 / 4);
    let mut cluster = Cluster::start(
        &common::strand_bin(),
        spec(lag.as_millis() as u64)
            .with_override("replica.fetch.max.bytes", fetch_max_bytes.to_string()),
    )
    .expect("cluster starts");
    let ids = cluster.broker_ids();
    let v0 = create_replicated_topic(&cluster, topic);
    let old = v0.leader;
    let followers: Vec<i32> = ids.iter().copied().filter(|id| *id != old).collect();
    let mut c = Client::connect(&addr(&cluster, old)).unwrap();

    // Committed records, acknowledged by the whole ISR.
    let mut acked: BTreeMap<i64, String> = BTreeMap::new();
    for i in 0..5 {
        let value = format!("committed-{i}");
        let (e, o) =
            common::produce_values(&mut c, topic, 0, -1, 15_000, std::slice::from_ref(&value))
                .unwrap();
        assert_eq!((e, o), (0, i), "acks=all {value}");
        acked.insert(o, value);
    }
    let brokers: Vec<(i32, String)> = ids.iter().map(|id| (*id, addr(&cluster, *id))).collect();
    let mut reader = Reader::start(brokers, topic);
    eventually(
        "the reader has read the committed records from the leader",
        Duration::from_secs(20),
        || (reader.position() == (old, 5)).then_some(()),
    );

    // Records only the old leader gets: both followers are stopped.
    for f in &followers {
        cluster.stop(*f).unwrap();
    }
    let followers_stopped = Instant::now();
    let mut unreplicated = Vec::new();
    for i in 0..5 {
        let value = format!("unreplicated-{i}-{pad}");
        let (e, o) =
            common::produce_values(&mut c, topic, 0, 1, 15_000, std::slice::from_ref(&value))
                .unwrap();
        assert_eq!((e, o), (0, 5 + i), "acks=1 {value} on the old leader");
        unreplicated.push(value);
    }
    // The reader polls the old leader while it holds them beyond its HW.
    let n = reader.fetches_from(old);
    eventually(
        "the reader fetches from the old leader holding unreplicated records",
        Duration::from_secs(5),
        || (reader.fetches_from(old) >= n + 3).then_some(()),
    );
    cluster.stop(old).unwrap();
    let stopped_for = followers_stopped.elapsed();
    assert!(
        stopped_for < lag / 2,
        "the followers were stopped for {stopped_for:?}, too close to replica.lag.time.max.ms"
    );
    for f in &followers {
        cluster.cont(*f).unwrap();
    }

    // A follower is elected (the old leader is fenced after its session).
    let v1 = eventually("a follower becomes leader", Duration::from_secs(30), || {
        current_leader(&cluster, &followers, topic)
            .filter(|v| followers.contains(&v.leader) && v.leader_epoch > v0.leader_epoch)
    });
    let new = v1.leader;
    let mut want_isr = followers.clone();
    want_isr.sort_unstable();
    let v1 = wait_isr(&cluster, new, topic, &want_isr, Duration::from_secs(30));
    assert_eq!(v1.leader, new);
    println!(
        "old leader {old} (epoch {}) stopped; {new} leads at epoch {} with ISR {:?} after {:.1}s",
        v0.leader_epoch,
        v1.leader_epoch,
        v1.isr,
        followers_stopped.elapsed().as_secs_f64()
    );
    // A follower's long-poll fetch pending at the old leader when it was
    // stopped completes with the first acks=1 batch, so the new leader may hold
    // it (legitimately): it stays, at its offset; the rest must go.
    let mut c = Client::connect(&addr(&cluster, new)).unwrap();
    let mut new_start = None;
    for i in 0..5 {
        let value = format!("new-leader-{i}");
        // A new leader takes writes once its write lease covers the
        // leadership (a heartbeat round trip or two): until then it answers
        // NOT_LEADER_OR_FOLLOWER, which clients retry; nothing else is.
        let (e, o) = eventually(
            "the new leader takes writes",
            Duration::from_secs(10),
            || {
                let r = common::produce_values(
                    &mut c,
                    topic,
                    0,
                    -1,
                    15_000,
                    std::slice::from_ref(&value),
                )
                .unwrap();
                (r.0 != NOT_LEADER_OR_FOLLOWER).then_some(r)
            },
        );
        assert_eq!(e, 0, "acks=all {value} on the new leader {new}");
        let start = *new_start.get_or_insert(o);
        assert_eq!(o, start + i, "acks=all {value} on the new leader {new}");
        acked.insert(o, value);
    }
    let kept = (new_start.unwrap() - 5) as usize;
    println!("the new leader had {kept} of the 5 acks=1 records when elected");
    assert!(
        kept <= 1,
        "a stopped follower has at most one fetch answer in flight, of at most \
         {fetch_max_bytes} bytes: the new leader cannot hold {kept} acks=1 records"
    );
    for (i, u) in unreplicated[..kept].iter().enumerate() {
        acked.insert(5 + i as i64, u.clone());
    }

    // The old leader comes back, truncates its divergent tail and rejoins.
    cluster.cont(old).unwrap();
    let v2 = wait_full_isr_everywhere(&cluster, &ids, topic, Duration::from_secs(60));
    assert_eq!(v2.leader, new, "the new leader keeps leading");
    let mut c = Client::connect(&addr(&cluster, new)).unwrap();
    let (e, o) = common::produce_values(&mut c, topic, 0, -1, 15_000, &["last".into()]).unwrap();
    assert_eq!(
        (e, o),
        (0, new_start.unwrap() + 5),
        "acks=all with the ISR back to {:?}",
        v2.isr
    );
    acked.insert(o, "last".into());

    // Every replica ends with the same bytes.
    let files = eventually(
        "the three replicas' segment files are identical",
        Duration::from_secs(30),
        || {
            let files: Vec<Vec<u8>> = ids
                .iter()
                .map(|id| segment_bytes(&cluster, *id, topic))
                .collect();
            (!files[0].is_empty() && files.iter().all(|f| *f == files[0])).then_some(files)
        },
    );
    let served = reader.finish();
    let log: BTreeMap<i64, String> = read_log(&cluster, &ids, topic, o + 1)
        .into_iter()
        .map(|(o, v)| (o, String::from_utf8(v.to_vec()).unwrap()))
        .collect();
    let short = |v: &String| v.chars().take(24).collect::<String>();
    println!(
        "final log: {:?}",
        log.iter().map(|(o, v)| (*o, short(v))).collect::<Vec<_>>()
    );
    println!(
        "segment bytes per replica: {}; reader served {} records: {:?}",
        files[0].len(),
        served.len(),
        served
            .iter()
            .map(|(b, o, v)| (*b, *o, short(v)))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        log, acked,
        "the final log is exactly the acknowledged records (and the acks=1 records the new leader had)"
    );
    for u in &unreplicated[kept..] {
        assert!(
            !log.values().any(|v| v == u),
            "{} (acks=1, only on the old leader) is not in the final log",
            short(u)
        );
    }
    for (broker, offset, value) in &served {
        assert_eq!(
            log.get(offset),
            Some(value),
            "broker {broker} served {value:?} at offset {offset}, not in the final log (HW gating)"
        );
    }
    assert!(
        served.iter().any(|(b, _, _)| *b == new),
        "the reader also read from the new leader"
    );
    let truncation: Vec<String> = std::fs::read_to_string(cluster.log_path(old))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("truncat") || l.contains("following"))
        .map(String::from)
        .collect();
    println!(
        "divergence test: {:.1}s; old leader {old} says:\n{}",
        started.elapsed().as_secs_f64(),
        truncation.join("\n")
    );
}

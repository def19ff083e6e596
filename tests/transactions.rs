//! Transaction acceptance tests, driven by librdkafka's transactional producer
//! and read_committed consumers:
//!
//! * coordinator failover: a transactional producer commits and aborts in a
//!   loop over three partitions of a replication-factor-3 topic while the
//!   broker coordinating its transactional id is SIGKILLed (5 rounds).
//!   Afterwards every transaction is on all its partitions or on none,
//!   acknowledged commits are visible, acknowledged aborts are not, no LSO is
//!   stuck, and a read_committed consumer sees the committed records in order;
//! * timeout: a transaction left open past transaction.timeout.ms is aborted
//!   by the coordinator (epoch bumped), the LSO moves on, and the stalled
//!   producer's commit is fenced; the idle id later expires;
//! * exactly-once pipeline: consume-transform-produce with
//!   `sendOffsetsToTransaction`, restarted after an abort and after a zombie
//!   instance is fenced, writes each input record exactly once and leaves the
//!   group's committed offsets at the input's end offsets.

mod common;

use common::{eventually, partition_view, Client};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeTransactionsRequest, DescribeTransactionsResponse,
    ListOffsetsRequest, ListOffsetsResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

const PROBE: Duration = Duration::from_secs(2);
const TXN_PARTITIONS: i32 = 5;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn spec(nodes: usize, test: &str) -> ClusterSpec {
    let spec = match std::env::var_os("STRAND_TXN_TEST_DIR") {
        Some(d) => ClusterSpec::combined(nodes).with_dir(std::path::PathBuf::from(d).join(test)),
        None => ClusterSpec::combined(nodes),
    };
    spec.with_override("broker.session.timeout.ms", "3000")
        .with_override("broker.heartbeat.interval.ms", "500")
        .with_override("group.initial.rebalance.delay.ms", "0")
        .with_override("offsets.topic.num.partitions", "3")
        .with_override(
            "transaction.state.log.num.partitions",
            TXN_PARTITIONS.to_string(),
        )
        .with_override(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "200",
        )
}

fn addr(cluster: &Cluster, id: i32) -> String {
    cluster.broker_addr(id).expect("broker address")
}

fn log_tails(cluster: &Cluster) -> String {
    cluster
        .node_ids()
        .iter()
        .map(|id| format!("--- node {id} log tail ---\n{}", cluster.log_tail(*id)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn create_topic(cluster: &Cluster, topic: &str, partitions: i32, rf: i16) {
    let ids = cluster.broker_ids();
    let mut c = Client::connect(&addr(cluster, ids[0])).unwrap();
    let code = common::create_topic_with(
        &mut c,
        topic,
        partitions,
        rf,
        &[("min.insync.replicas", "2")],
    )
    .expect("CreateTopics answered");
    assert_eq!(code, 0, "CreateTopics {topic}");
    let addrs: Vec<String> = ids.iter().map(|id| addr(cluster, *id)).collect();
    eventually(
        &format!("{topic} fully replicated"),
        Duration::from_secs(30),
        || {
            for a in &addrs {
                for p in 0..partitions {
                    let v = partition_view(a, topic, p, PROBE)?;
                    if v.error_code != 0 || v.leader < 0 || v.isr.len() != rf as usize {
                        return None;
                    }
                }
            }
            Some(())
        },
    );
}

/// ListOffsets (v5) latest of one partition at its leader, read_committed
/// (the LSO) or read_uncommitted (the HW).
fn latest_offset(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    read_committed: bool,
) -> Option<i64> {
    let leader = cluster
        .broker_ids()
        .iter()
        .find_map(|id| partition_view(&addr(cluster, *id), topic, partition, PROBE))?
        .leader;
    let mut c = Client::connect_timeout(&addr(cluster, leader), PROBE).ok()?;
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(i8::from(read_committed))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)])]);
    let resp: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &req).ok()?;
    let p = &resp.topics.first()?.partitions.first()?;
    (p.error_code == 0).then_some(p.offset)
}

/// Waits until no partition of `topic` has an open transaction: LSO == HW.
fn wait_lso_caught_up(cluster: &Cluster, topic: &str, partitions: i32, timeout: Duration) {
    eventually(
        &format!("LSO == HW on every partition of {topic}"),
        timeout,
        || {
            for p in 0..partitions {
                let hw = latest_offset(cluster, topic, p, false)?;
                let lso = latest_offset(cluster, topic, p, true)?;
                if lso != hw {
                    return None;
                }
            }
            Some(())
        },
    );
}

/// The broker coordinating `transactional_id`, as FindCoordinator answers.
fn txn_coordinator(cluster: &Cluster, transactional_id: &str) -> Option<i32> {
    cluster.broker_ids().iter().find_map(|id| {
        match common::find_coordinator(&addr(cluster, *id), transactional_id, 1, PROBE)? {
            (0, node) => Some(node),
            _ => None,
        }
    })
}

/// ListTransactions (v1) at every broker: (transactional id, state), filtered by state.
fn list_txns(cluster: &Cluster, states: &[&str]) -> Vec<(String, String)> {
    use kafka_protocol::messages::{ListTransactionsRequest, ListTransactionsResponse};
    let mut out = Vec::new();
    for id in cluster.broker_ids() {
        let Ok(mut c) = Client::connect_timeout(&addr(cluster, id), PROBE) else {
            continue;
        };
        let req = ListTransactionsRequest::default()
            .with_state_filters(
                states
                    .iter()
                    .map(|s| StrBytes::from_string(s.to_string()))
                    .collect(),
            )
            .with_duration_filter(-1);
        if let Ok(resp) = c.call::<_, ListTransactionsResponse>(ApiKey::ListTransactions, 1, &req) {
            out.extend(resp.transaction_states.iter().map(|t| {
                (
                    t.transactional_id.0.to_string(),
                    t.transaction_state.to_string(),
                )
            }));
        }
    }
    out
}

/// DescribeTransactions at the coordinator: (error code, state, producer id, epoch).
fn describe_txn(cluster: &Cluster, transactional_id: &str) -> Option<(i16, String, i64, i16)> {
    let coordinator = txn_coordinator(cluster, transactional_id)?;
    let mut c = Client::connect_timeout(&addr(cluster, coordinator), PROBE).ok()?;
    let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(
        StrBytes::from_string(transactional_id.to_string()),
    )]);
    let resp: DescribeTransactionsResponse = c.call(ApiKey::DescribeTransactions, 0, &req).ok()?;
    let s = resp.transaction_states.first()?;
    Some((
        s.error_code,
        s.transaction_state.to_string(),
        s.producer_id.0,
        s.producer_epoch,
    ))
}

/// A transactional producer that serves its delivery reports in the
/// background (abort and commit wait for them).
type TxnProducer = ThreadedProducer<DefaultProducerContext>;

fn txn_producer(bootstrap: &str, transactional_id: &str, extra: &[(&str, &str)]) -> TxnProducer {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("transactional.id", transactional_id)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("transaction.timeout.ms", "30000")
        .set("message.timeout.ms", "30000")
        .set("socket.timeout.ms", "10000");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    cfg.create().expect("producer")
}

fn read_committed_consumer(bootstrap: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .create()
        .expect("consumer")
}

/// Appends one plain (non-transactional) sentinel record to each partition:
/// once every transaction before it is complete, reading up to it reads
/// everything committed before.
fn produce_sentinels(bootstrap: &str, topic: &str, partitions: i32) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .create()
        .expect("producer");
    for part in 0..partitions {
        p.send(
            BaseRecord::<(), _>::to(topic)
                .partition(part)
                .payload("sentinel"),
        )
        .map_err(|(e, _)| e)
        .expect("sentinel queued");
    }
    p.flush(Duration::from_secs(30))
        .expect("sentinels delivered");
}

/// Every record of `topic` a read_committed consumer receives up to the
/// sentinel of each partition: partition -> [(offset, value)].
fn read_committed_all(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, Vec<(i64, String)>> {
    let c = read_committed_consumer(bootstrap, &format!("reader-{}", std::process::id()));
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    let mut done = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.len() < partitions as usize {
        assert!(
            Instant::now() < deadline,
            "read_committed consumer did not reach every sentinel: {done:?}"
        );
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("consume");
        let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        if v == "sentinel" {
            done.insert(m.partition());
        } else {
            out.entry(m.partition()).or_default().push((m.offset(), v));
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Committed,
    Aborted,
    /// The client could not tell (fatal error mid-commit, producer recreated).
    Unknown,
}

/// Ends the current transaction as wanted, retrying what librdkafka calls
/// retriable; returns what is known of its fate.
fn end_transaction(p: &TxnProducer, commit: bool) -> Result<Outcome, KafkaError> {
    let timeout = Duration::from_secs(30);
    loop {
        let r = if commit {
            p.commit_transaction(timeout)
        } else {
            p.abort_transaction(timeout)
        };
        match r {
            Ok(()) => {
                return Ok(if commit {
                    Outcome::Committed
                } else {
                    Outcome::Aborted
                })
            }
            Err(KafkaError::Transaction(e)) if e.is_retriable() => continue,
            Err(KafkaError::Transaction(e)) if e.txn_requires_abort() => loop {
                match p.abort_transaction(timeout) {
                    Ok(()) => return Ok(Outcome::Aborted),
                    Err(KafkaError::Transaction(e)) if e.is_retriable() => continue,
                    Err(e) => return Err(e),
                }
            },
            Err(e) => return Err(e),
        }
    }
}

// ---------------------------------------------------------------------------
// coordinator_failover_keeps_transactions_atomic
// ---------------------------------------------------------------------------

#[test]
fn coordinator_failover_keeps_transactions_atomic() {
    let _serial = one_at_a_time();
    let mut cluster = Cluster::start(
        &common::strand_bin(),
        spec(3, "failover")
            .with_override("default.replication.factor", "3")
            .with_override("min.insync.replicas", "2"),
    )
    .expect("cluster starts");
    let topic = "txn-failover";
    const PARTS: i32 = 3;
    const PER_PARTITION: usize = 4;
    create_topic(&cluster, topic, PARTS, 3);
    let bootstrap = cluster.bootstrap();
    let txn_id = "failover-tx";

    let stop = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(AtomicUsize::new(0));
    let outcomes: Arc<Mutex<Vec<(String, Outcome)>>> = Arc::new(Mutex::new(Vec::new()));
    let producer = {
        let (stop, ended, outcomes, bootstrap) = (
            stop.clone(),
            ended.clone(),
            outcomes.clone(),
            bootstrap.clone(),
        );
        std::thread::spawn(move || {
            let mut generation = 0;
            'instances: while !stop.load(Ordering::Acquire) {
                generation += 1;
                let p = txn_producer(&bootstrap, txn_id, &[]);
                if let Err(e) = p.init_transactions(Duration::from_secs(60)) {
                    eprintln!("init_transactions failed ({e}); new instance");
                    continue;
                }
                for k in 0.. {
                    if stop.load(Ordering::Acquire) {
                        break 'instances;
                    }
                    let name = format!("g{generation}t{k}");
                    if let Err(e) = p.begin_transaction() {
                        eprintln!("begin_transaction failed ({e}); new instance");
                        continue 'instances;
                    }
                    for part in 0..PARTS {
                        for i in 0..PER_PARTITION {
                            let v = format!("{name}:{part}:{i}");
                            let mut rec = BaseRecord::<(), String>::to(topic)
                                .partition(part)
                                .payload(&v);
                            loop {
                                match p.send(rec) {
                                    Ok(()) => break,
                                    Err((_, r)) => {
                                        rec = r;
                                        p.poll(Duration::from_millis(10));
                                    }
                                }
                            }
                        }
                    }
                    // Every third transaction is aborted on purpose.
                    let commit = k % 3 != 2;
                    let outcome = match end_transaction(&p, commit) {
                        Ok(o) => o,
                        Err(e) => {
                            eprintln!("{name}: end of transaction failed ({e}); outcome unknown, new instance");
                            outcomes.lock().unwrap().push((name, Outcome::Unknown));
                            ended.fetch_add(1, Ordering::AcqRel);
                            continue 'instances;
                        }
                    };
                    outcomes.lock().unwrap().push((name, outcome));
                    ended.fetch_add(1, Ordering::AcqRel);
                }
            }
        })
    };

    let wait_ended = |at_least: usize, what: &str, cluster: &Cluster| {
        let deadline = Instant::now() + Duration::from_secs(90);
        while ended.load(Ordering::Acquire) < at_least {
            assert!(
                Instant::now() < deadline && !producer.is_finished(),
                "{what}: only {} transactions ended\n{}",
                ended.load(Ordering::Acquire),
                log_tails(cluster)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut rng_state = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut rand = move |n: u64| {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        rng_state % n
    };
    for round in 1..=5 {
        let before = ended.load(Ordering::Acquire);
        wait_ended(before + 2 + rand(5) as usize, "before the kill", &cluster);
        let victim = eventually("a transaction coordinator", Duration::from_secs(30), || {
            txn_coordinator(&cluster, txn_id)
        });
        cluster.kill9(victim).unwrap();
        let killed_at = ended.load(Ordering::Acquire);
        eprintln!("round {round}: killed coordinator {victim} after {killed_at} transactions");
        // Transactions go on with the other two nodes.
        wait_ended(
            killed_at + 3,
            &format!("round {round}: after killing {victim}"),
            &cluster,
        );
        cluster.restart(victim).expect("the killed node restarts");
    }
    stop.store(true, Ordering::Release);
    producer.join().expect("producer thread");

    wait_lso_caught_up(&cluster, topic, PARTS, Duration::from_secs(60));
    produce_sentinels(&bootstrap, topic, PARTS);
    let seen = read_committed_all(&bootstrap, topic, PARTS);

    // Per transaction: which (partition, i) a read_committed reader saw.
    let mut by_txn: HashMap<String, HashSet<(i32, usize)>> = HashMap::new();
    for (part, records) in &seen {
        let mut last_offset = -1;
        let mut last_in_txn: HashMap<&str, usize> = HashMap::new();
        for (offset, v) in records {
            assert!(
                *offset > last_offset,
                "offsets in order on partition {part}"
            );
            last_offset = *offset;
            let mut it = v.split(':');
            let (name, vp, i) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            let (vp, i): (i32, usize) = (vp.parse().unwrap(), i.parse().unwrap());
            assert_eq!(vp, *part, "{v} on partition {part}");
            if let Some(prev) = last_in_txn.insert(name, i) {
                assert!(i > prev, "{v}: records of one transaction in order, once");
            }
            assert!(
                by_txn.entry(name.to_string()).or_default().insert((vp, i)),
                "{v} seen twice"
            );
        }
    }
    let outcomes = outcomes.lock().unwrap().clone();
    let full = PARTS as usize * PER_PARTITION;
    let (mut committed, mut aborted, mut unknown) = (0, 0, 0);
    for (name, outcome) in &outcomes {
        let n = by_txn.get(name).map_or(0, HashSet::len);
        match outcome {
            Outcome::Committed => {
                committed += 1;
                assert_eq!(
                    n, full,
                    "committed transaction {name}: {n} of {full} records visible"
                )
            }
            Outcome::Aborted => {
                aborted += 1;
                assert_eq!(n, 0, "aborted transaction {name}: {n} records visible")
            }
            Outcome::Unknown => {
                unknown += 1;
                assert!(
                    n == 0 || n == full,
                    "transaction {name} partly visible: {n} of {full}"
                )
            }
        }
    }
    let known: HashSet<&str> = outcomes.iter().map(|(n, _)| n.as_str()).collect();
    for (name, recs) in &by_txn {
        // A transaction begun but not ended when the producer stopped, or
        // whose instance was replaced before it ended: all or nothing.
        if !known.contains(name.as_str()) {
            assert!(
                recs.len() == full,
                "unended transaction {name} partly visible: {}",
                recs.len()
            );
        }
    }
    eprintln!(
        "{} transactions: {committed} committed, {aborted} aborted, {unknown} unknown; {} records visible",
        outcomes.len(),
        seen.values().map(Vec::len).sum::<usize>()
    );
    assert!(committed >= 10 && aborted >= 3, "enough of both outcomes");
}

// ---------------------------------------------------------------------------
// timed_out_transaction_is_aborted_and_fenced
// ---------------------------------------------------------------------------

#[test]
fn timed_out_transaction_is_aborted_and_fenced() {
    let _serial = one_at_a_time();
    let cluster = Cluster::start(
        &common::strand_bin(),
        spec(1, "timeout")
            .with_override("transactional.id.expiration.ms", "5000")
            .with_override(
                "transaction.remove.expired.transaction.cleanup.interval.ms",
                "200",
            ),
    )
    .expect("node starts");
    let topic = "txn-timeout";
    create_topic(&cluster, topic, 1, 1);
    let bootstrap = cluster.bootstrap();
    let txn_id = "stalling-tx";
    let p = txn_producer(
        &bootstrap,
        txn_id,
        &[
            ("transaction.timeout.ms", "2000"),
            ("message.timeout.ms", "2000"),
            ("socket.timeout.ms", "2000"),
        ],
    );
    p.init_transactions(Duration::from_secs(30))
        .expect("init_transactions");
    p.begin_transaction().unwrap();
    for i in 0..3 {
        p.send(
            BaseRecord::<(), String>::to(topic)
                .partition(0)
                .payload(&format!("stalled-{i}")),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    }
    p.flush(Duration::from_secs(10)).expect("records delivered");
    let (code, state, pid, epoch) = describe_txn(&cluster, txn_id).expect("DescribeTransactions");
    assert_eq!((code, state.as_str()), (0, "Ongoing"));
    assert_eq!(
        list_txns(&cluster, &["Ongoing"]),
        vec![(txn_id.to_string(), "Ongoing".to_string())]
    );
    assert!(list_txns(&cluster, &["CompleteCommit"]).is_empty());
    let hw = latest_offset(&cluster, topic, 0, false).unwrap();
    assert_eq!(hw, 3);
    assert_eq!(
        latest_offset(&cluster, topic, 0, true),
        Some(0),
        "LSO held at the open transaction"
    );

    // The producer stalls; the coordinator aborts past the timeout and the LSO moves on.
    let started = Instant::now();
    wait_lso_caught_up(&cluster, topic, 1, Duration::from_secs(30));
    eprintln!("LSO released {:?} after the records", started.elapsed());
    let (code, state, pid_after, epoch_after) = describe_txn(&cluster, txn_id).unwrap();
    assert_eq!((code, state.as_str()), (0, "CompleteAbort"));
    assert_eq!(pid_after, pid);
    assert_eq!(epoch_after, epoch + 1, "the abort bumped the epoch");

    // The stalled producer's commit is fenced.
    match p.commit_transaction(Duration::from_secs(10)) {
        Ok(()) => panic!("the stalled producer's commit succeeded"),
        Err(e) => eprintln!("stalled commit refused: {e}"),
    }
    produce_sentinels(&bootstrap, topic, 1);
    let seen = read_committed_all(&bootstrap, topic, 1);
    assert!(seen.is_empty(), "aborted records visible: {seen:?}");

    // Idle past transactional.id.expiration.ms, the id is removed.
    drop(p);
    eventually(
        "the transactional id expires",
        Duration::from_secs(30),
        || {
            let (code, ..) = describe_txn(&cluster, txn_id)?;
            (code == 105).then_some(()) // TRANSACTIONAL_ID_NOT_FOUND
        },
    );
}

// ---------------------------------------------------------------------------
// exactly_once_pipeline_survives_abort_and_zombie
// ---------------------------------------------------------------------------

const IN: &str = "eos-in";
const OUT: &str = "eos-out";
const GROUP: &str = "eos-pipeline";
const PIPE_TXN: &str = "eos-pipeline-tx";
const INPUT_PER_PARTITION: usize = 150;

struct Pipeline {
    consumer: BaseConsumer,
    producer: TxnProducer,
}

impl Pipeline {
    fn start(bootstrap: &str) -> Pipeline {
        let producer = txn_producer(bootstrap, PIPE_TXN, &[]);
        producer
            .init_transactions(Duration::from_secs(30))
            .expect("init_transactions");
        let consumer = read_committed_consumer(bootstrap, GROUP);
        consumer.subscribe(&[IN]).unwrap();
        Pipeline { consumer, producer }
    }

    /// Consumes up to `max` records and writes them transformed inside one
    /// transaction with the consumer's offsets; commits or aborts. Returns
    /// how many records the transaction carried (0 = nothing to do).
    fn step(&self, max: usize, commit: bool) -> Result<usize, KafkaError> {
        let mut batch = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while batch.len() < max && Instant::now() < deadline {
            match self.consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => batch.push((m.partition(), m.offset())),
                Some(Err(e)) => return Err(e),
                None if !batch.is_empty() => break,
                None => {}
            }
        }
        if batch.is_empty() {
            return Ok(0);
        }
        self.producer.begin_transaction()?;
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for (part, offset) in &batch {
            let v = format!("{part}:{offset}");
            self.producer
                .send(
                    BaseRecord::<(), String>::to(OUT)
                        .partition(*part)
                        .payload(&v),
                )
                .map_err(|(e, _)| e)?;
            next.insert(*part, offset + 1);
        }
        let mut offsets = TopicPartitionList::new();
        for (part, off) in &next {
            offsets
                .add_partition_offset(IN, *part, Offset::Offset(*off))
                .unwrap();
        }
        let meta = self.consumer.group_metadata().expect("group metadata");
        self.producer
            .send_offsets_to_transaction(&offsets, &meta, Duration::from_secs(30))?;
        if commit {
            self.producer.commit_transaction(Duration::from_secs(30))?;
        } else {
            self.producer.abort_transaction(Duration::from_secs(30))?;
            // Rewind to the last committed offsets, as an application does after an abort.
            let committed = self.consumer.committed(Duration::from_secs(10))?;
            for e in committed.elements() {
                let off = match e.offset() {
                    Offset::Offset(o) => Offset::Offset(o),
                    _ => Offset::Beginning,
                };
                self.consumer
                    .seek(e.topic(), e.partition(), off, Duration::from_secs(10))?;
            }
        }
        Ok(batch.len())
    }
}

#[test]
fn exactly_once_pipeline_survives_abort_and_zombie() {
    let _serial = one_at_a_time();
    let cluster = Cluster::start(&common::strand_bin(), spec(1, "pipeline")).expect("node starts");
    create_topic(&cluster, IN, 2, 1);
    create_topic(&cluster, OUT, 2, 1);
    let bootstrap = cluster.bootstrap();
    {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("acks", "all")
            .create()
            .unwrap();
        for part in 0..2 {
            for i in 0..INPUT_PER_PARTITION {
                p.send(
                    BaseRecord::<(), String>::to(IN)
                        .partition(part)
                        .payload(&format!("in-{i}")),
                )
                .map_err(|(e, _)| e)
                .unwrap();
                p.poll(Duration::ZERO);
            }
        }
        p.flush(Duration::from_secs(30)).unwrap();
    }

    // Instance A: two committed transactions, then one aborted; then it stops.
    let a = Pipeline::start(&bootstrap);
    let mut done = 0;
    while done < 2 {
        if a.step(40, true).expect("A commits") > 0 {
            done += 1;
        }
    }
    while a.step(40, false).expect("A aborts") == 0 {}
    drop(a);

    // Instance B takes over after the abort and commits once.
    let b = Pipeline::start(&bootstrap);
    while b.step(40, true).expect("B commits") == 0 {}
    // Instance C starts with the same transactional id: B becomes a zombie.
    let c = Pipeline::start(&bootstrap);
    let zombie = b.step(40, true);
    assert!(
        zombie.is_err(),
        "the fenced instance's transaction must fail, got {zombie:?}"
    );
    drop(b);

    // C finishes the input.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "pipeline did not finish");
        let n = c.step(60, true).expect("C commits");
        if n > 0 {
            continue;
        }
        let committed = c.consumer.committed(Duration::from_secs(10)).unwrap();
        let at_end = (0..2).all(|part| {
            committed
                .find_partition(IN, part)
                .is_some_and(|e| e.offset() == Offset::Offset(INPUT_PER_PARTITION as i64))
        });
        if at_end {
            break;
        }
    }
    drop(c);

    produce_sentinels(&bootstrap, OUT, 2);
    let seen = read_committed_all(&bootstrap, OUT, 2);
    let mut per_input: HashMap<String, usize> = HashMap::new();
    for records in seen.values() {
        for (_, v) in records {
            *per_input.entry(v.clone()).or_default() += 1;
        }
    }
    for part in 0..2 {
        for off in 0..INPUT_PER_PARTITION {
            let key = format!("{part}:{off}");
            assert_eq!(
                per_input.get(&key).copied().unwrap_or(0),
                1,
                "input {key} in the output"
            );
        }
    }
    assert_eq!(
        per_input.len(),
        2 * INPUT_PER_PARTITION,
        "nothing else in the output"
    );
    // The group's committed offsets are the input's end offsets.
    let offsets = common::offset_fetch(
        &addr(&cluster, cluster.broker_ids()[0]),
        GROUP,
        IN,
        &[0, 1],
        PROBE,
    )
    .expect("OffsetFetch answered");
    assert_eq!(offsets.error_code, 0);
    for part in 0..2 {
        assert_eq!(
            offsets.partitions.get(&part),
            Some(&(INPUT_PER_PARTITION as i64, 0)),
            "committed offset of {IN}-{part}"
        );
    }
}

// ---------------------------------------------------------------------------
// kip890_part2_protocol: transaction.version 2 clients (raw protocol)
// ---------------------------------------------------------------------------

/// Produce v12 of one transactional batch (pid, epoch, first sequence) of `values`.
fn produce_v12(
    c: &mut Client,
    txn_id: &str,
    topic: &str,
    pid: i64,
    epoch: i16,
    seq: i32,
    values: &[&str],
) -> i16 {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<strand_protocol::testing::TestRecord> = values
        .iter()
        .map(|v| (None, Some(bytes::Bytes::from(v.to_string())), now))
        .collect();
    let records = bytes::Bytes::from(strand_protocol::testing::encode_records_txn(
        &recs,
        pid,
        epoch,
        seq,
        kafka_protocol::records::Compression::None,
        true,
    ));
    let req = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(txn_id.into()))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = c.call(ApiKey::Produce, 12, &req).unwrap();
    resp.responses[0].partition_responses[0].error_code
}

/// EndTxn v5: (error code, producer id, producer epoch).
fn end_txn_v5(c: &mut Client, txn_id: &str, pid: i64, epoch: i16, commit: bool) -> (i16, i64, i16) {
    use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(txn_id.into())))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse = c.call(ApiKey::EndTxn, 5, &req).unwrap();
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

#[test]
fn kip890_part2_protocol() {
    use kafka_protocol::messages::{
        ApiVersionsRequest, ApiVersionsResponse, GroupId, InitProducerIdRequest,
        InitProducerIdResponse, OffsetFetchRequest, OffsetFetchResponse, ProducerId,
        TxnOffsetCommitRequest, TxnOffsetCommitResponse,
    };
    let _serial = one_at_a_time();
    let cluster = Cluster::start(&common::strand_bin(), spec(1, "kip890")).expect("node starts");
    let topic = "tv2-data";
    create_topic(&cluster, topic, 1, 1);
    let a = addr(&cluster, cluster.broker_ids()[0]);
    let mut c = Client::connect(&a).unwrap();
    let txn = "tv2-tx";

    // The finalized feature tells clients to use the part 2 protocol.
    let av: ApiVersionsResponse = c
        .call(
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("strand-test"))
                .with_client_software_version(StrBytes::from_static_str("1")),
        )
        .unwrap();
    let tv = av
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .expect("transaction.version finalized");
    assert_eq!(tv.max_version_level, 2);
    let endtxn = av
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::EndTxn as i16)
        .unwrap();
    assert_eq!(endtxn.max_version, 5);

    let (pid, e0) = eventually(
        "InitProducerId for a transactional id",
        Duration::from_secs(30),
        || {
            let req = InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(StrBytes::from_string(txn.into()))))
                .with_transaction_timeout_ms(30_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            let r: InitProducerIdResponse = Client::connect(&a)
                .ok()?
                .call(ApiKey::InitProducerId, 5, &req)
                .ok()?;
            (r.error_code == 0).then_some((r.producer_id.0, r.producer_epoch))
        },
    );

    // No AddPartitionsToTxn: the partition leader adds the partition (Produce v12).
    assert_eq!(
        produce_v12(&mut c, txn, topic, pid, e0, 0, &["c1", "c2", "c3"]),
        0
    );
    let (code, state, ..) = describe_txn(&cluster, txn).unwrap();
    assert_eq!((code, state.as_str()), (0, "Ongoing"));
    // EndTxn v5 bumps the epoch and says so.
    let (code, p1, e1) = end_txn_v5(&mut c, txn, pid, e0, true);
    assert_eq!((code, p1, e1), (0, pid, e0 + 1));
    // A retry of that EndTxn (lost answer) succeeds once the commit completed.
    eventually(
        "the retried EndTxn succeeds",
        Duration::from_secs(10),
        || {
            let (code, p, e) = end_txn_v5(&mut c, txn, pid, e0, true);
            (code == 0).then(|| assert_eq!((p, e), (pid, e0 + 1)))
        },
    );
    // A late write of the ended transaction (old epoch) cannot open a new one.
    assert_eq!(
        produce_v12(&mut c, txn, topic, pid, e0, 3, &["late"]),
        47,
        "INVALID_PRODUCER_EPOCH for the old epoch"
    );

    // Second transaction, aborted. Until the first one has completed, the
    // implicit add is refused with a retriable NOT_ENOUGH_REPLICAS.
    let retrying = |c: &mut Client, epoch: i16, values: &[&str]| {
        eventually(
            "a transactional produce after the previous EndTxn",
            Duration::from_secs(10),
            || match produce_v12(c, txn, topic, pid, epoch, 0, values) {
                0 => Some(()),
                19 => None,
                other => panic!("produce answered {other}"),
            },
        )
    };
    retrying(&mut c, e1, &["a1", "a2"]);
    let (code, _, e2) = end_txn_v5(&mut c, txn, pid, e1, false);
    assert_eq!((code, e2), (0, e1 + 1));

    // Third transaction: data and offsets (TxnOffsetCommit v5, without
    // AddOffsetsToTxn), committed.
    retrying(&mut c, e2, &["c4"]);
    let group = "tv2-group";
    let commit_req = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(txn.into())))
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(e2)
        .with_generation_id(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_topics(vec![
            kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.into())))
                .with_partitions(vec![
                    kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(42)
                        .with_committed_leader_epoch(-1),
                ]),
        ]);
    let coordinator = eventually("the group coordinator", Duration::from_secs(30), || {
        match common::find_coordinator(&a, group, 0, PROBE)? {
            (0, node) => Some(addr(&cluster, node)),
            _ => None,
        }
    });
    let mut gc = Client::connect(&coordinator).unwrap();
    let r: TxnOffsetCommitResponse = gc.call(ApiKey::TxnOffsetCommit, 5, &commit_req).unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let stable_fetch = |gc: &mut Client| -> (i16, i64) {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.into())))
            .with_require_stable(true)
            .with_topics(Some(vec![
                kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.into())))
                    .with_partition_indexes(vec![0]),
            ]));
        let r: OffsetFetchResponse = gc.call(ApiKey::OffsetFetch, 7, &req).unwrap();
        let p = &r.topics[0].partitions[0];
        (p.error_code, p.committed_offset)
    };
    assert_eq!(
        stable_fetch(&mut gc).0,
        88,
        "UNSTABLE_OFFSET_COMMIT while the transaction is open"
    );
    let (code, _, _) = end_txn_v5(&mut c, txn, pid, e2, true);
    assert_eq!(code, 0);
    eventually(
        "the transactional offset is committed",
        Duration::from_secs(10),
        || (stable_fetch(&mut gc) == (0, 42)).then_some(()),
    );

    wait_lso_caught_up(&cluster, topic, 1, Duration::from_secs(10));
    let bootstrap = cluster.bootstrap();
    produce_sentinels(&bootstrap, topic, 1);
    let seen = read_committed_all(&bootstrap, topic, 1);
    let values: Vec<&str> = seen[&0].iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(values, ["c1", "c2", "c3", "c4"]);
}

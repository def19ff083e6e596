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
//! * exactly-once under a zombie (issue 11), with the rdkafka crate and with
//!   confluent-kafka (Python, `compat-tests/clients/eos_processor.py`), on
//!   one node and on three: consume-transform-produce with
//!   `sendOffsetsToTransaction`; an instance aborts and stops, the next one
//!   leaves a transaction (records and offsets) open and is fenced by a
//!   third. Once the third's InitProducerId returns, and again after the
//!   zombie's commit fails fenced, the zombie's transaction is aborted on
//!   every partition (no open transaction, none of its records visible to
//!   read_committed, the group's offsets those from before it, none
//!   pending); at the end each input is in the output exactly once and the
//!   group's offsets are the input's end offsets. `STRAND_EOS_RUNS` repeats
//!   the history (fresh names each run).

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
    // min.insync.replicas 2 where the replication factor allows it.
    let min_isr = rf.min(2).to_string();
    let code = common::create_topic_with(
        &mut c,
        topic,
        partitions,
        rf,
        &[("min.insync.replicas", min_isr.as_str())],
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
    produce_sentinel(bootstrap, topic, partitions, "sentinel");
}

/// Appends the plain record `value` to each partition of `topic`.
fn produce_sentinel(bootstrap: &str, topic: &str, partitions: i32, value: &str) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .create()
        .expect("producer");
    for part in 0..partitions {
        p.send(
            BaseRecord::<(), _>::to(topic)
                .partition(part)
                .payload(value),
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
    read_committed_until(bootstrap, topic, partitions, "sentinel")
}

/// Every record of `topic` a read_committed consumer receives before the
/// record `sentinel` on each partition; other sentinels ("sentinel*") are
/// skipped: partition -> [(offset, value)].
fn read_committed_until(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    sentinel: &str,
) -> BTreeMap<i32, Vec<(i64, String)>> {
    let c = read_committed_consumer(
        bootstrap,
        &format!("reader-{}-{sentinel}", std::process::id()),
    );
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
            "read_committed consumer did not reach {sentinel} on every partition of {topic}: {done:?}"
        );
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("consume");
        let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        if v == sentinel {
            done.insert(m.partition());
        } else if !v.starts_with("sentinel") {
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
    // The markers are written before CompleteAbort is persisted: the state
    // follows the LSO by one write.
    let (code, state, pid_after, epoch_after) = common::eventually(
        "the transaction completes its abort",
        Duration::from_secs(10),
        || describe_txn(&cluster, txn_id).filter(|(_, state, _, _)| state != "PrepareAbort"),
    );
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
// Exactly-once under a zombie (the history of issue 11), with the rdkafka
// crate's librdkafka and with confluent-kafka's (Python), on one node and on
// a 3-node cluster.
//
// The property is the one Kafka promises: once a new instance's
// InitProducerId has returned, the earlier instance's ongoing transaction is
// aborted on every partition it touched, the group's offsets included, and
// nothing the fenced instance wrote ever becomes visible to read_committed,
// whatever either instance does next. Each input is then in the output
// exactly once, and the group's offsets end at the input's end.
// ---------------------------------------------------------------------------

/// Inputs per partition of the pipeline's input topic (2 partitions).
const PIPE_INPUT_PER_PARTITION: i64 = 60;
const PIPE_PARTITIONS: i32 = 2;
const PIPE_BATCH: usize = 20;

/// The names one run of the history uses (fresh per run).
#[derive(Clone)]
struct PipelineIds {
    input: String,
    output: String,
    group: String,
    txn_id: String,
}

impl PipelineIds {
    fn new(client: &str, run: usize) -> Self {
        let tag = format!("{client}-{}-{run}", std::process::id());
        PipelineIds {
            input: format!("eos-in-{tag}"),
            output: format!("eos-out-{tag}"),
            group: format!("eos-group-{tag}"),
            txn_id: format!("eos-tx-{tag}"),
        }
    }
}

/// How a client reported a failed transaction call.
#[derive(Debug)]
struct TxnCallError {
    /// librdkafka's error name (`_FENCED`, `PRODUCER_FENCED`, ...).
    code: String,
    fatal: bool,
}

impl TxnCallError {
    fn is_fenced(&self) -> bool {
        matches!(
            self.code.as_str(),
            "_FENCED" | "PRODUCER_FENCED" | "INVALID_PRODUCER_EPOCH"
        )
    }
}

/// Instances of one consume-transform-produce application that share a
/// transactional id and a consumer group. Each instance is a transactional
/// producer and a read_committed consumer of the input.
trait Processors {
    /// A new instance: `init_transactions`, then its consumer subscribes.
    fn start(&mut self, name: &str);
    /// Consumes up to `max` inputs, begins a transaction that writes
    /// `NAME|partition:offset` for each to the same output partition and
    /// sends the consumer's offsets, and flushes. Returns how many (0: none
    /// came within a few seconds; no transaction then).
    fn batch(&mut self, name: &str, max: usize) -> usize;
    fn commit(&mut self, name: &str) -> Result<(), TxnCallError>;
    fn abort(&mut self, name: &str) -> Result<(), TxnCallError>;
    /// Closes the instance's consumer; its producer stays open, idle.
    fn close_consumer(&mut self, name: &str);
}

/// The processors on the rdkafka crate (librdkafka, in this process).
struct RdkafkaProcessors {
    bootstrap: String,
    ids: PipelineIds,
    instances: HashMap<String, (Option<BaseConsumer>, TxnProducer)>,
}

fn rdkafka_txn_error(e: KafkaError) -> TxnCallError {
    use rdkafka::types::RDKafkaErrorCode as C;
    match e {
        KafkaError::Transaction(t) => TxnCallError {
            code: match t.code() {
                C::Fenced => "_FENCED".to_string(),
                C::ProducerFenced => "PRODUCER_FENCED".to_string(),
                C::InvalidProducerEpoch => "INVALID_PRODUCER_EPOCH".to_string(),
                other => format!("{other:?}"),
            },
            fatal: t.is_fatal(),
        },
        other => TxnCallError {
            code: other.to_string(),
            fatal: false,
        },
    }
}

impl Processors for RdkafkaProcessors {
    fn start(&mut self, name: &str) {
        let producer = txn_producer(&self.bootstrap, &self.ids.txn_id, &[]);
        producer
            .init_transactions(Duration::from_secs(30))
            .expect("init_transactions");
        let consumer = read_committed_consumer(&self.bootstrap, &self.ids.group);
        consumer.subscribe(&[&self.ids.input]).unwrap();
        self.instances
            .insert(name.to_string(), (Some(consumer), producer));
    }

    fn batch(&mut self, name: &str, max: usize) -> usize {
        let (Some(consumer), producer) = &self.instances[name] else {
            panic!("{name} has no consumer");
        };
        let mut batch = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while batch.len() < max && Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(200)) {
                Some(m) => {
                    let m = m.expect("consume");
                    batch.push((m.partition(), m.offset()));
                }
                None if !batch.is_empty() => break,
                None => {}
            }
        }
        if batch.is_empty() {
            return 0;
        }
        producer.begin_transaction().expect("begin_transaction");
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for (part, offset) in &batch {
            producer
                .send(
                    BaseRecord::<(), String>::to(&self.ids.output)
                        .partition(*part)
                        .payload(&format!("{name}|{part}:{offset}")),
                )
                .map_err(|(e, _)| e)
                .expect("send");
            next.insert(*part, offset + 1);
        }
        let mut offsets = TopicPartitionList::new();
        for (part, off) in &next {
            offsets
                .add_partition_offset(&self.ids.input, *part, Offset::Offset(*off))
                .unwrap();
        }
        let meta = consumer.group_metadata().expect("group metadata");
        producer
            .send_offsets_to_transaction(&offsets, &meta, Duration::from_secs(30))
            .expect("send_offsets_to_transaction");
        producer
            .flush(Duration::from_secs(30))
            .expect("outputs delivered");
        batch.len()
    }

    fn commit(&mut self, name: &str) -> Result<(), TxnCallError> {
        self.instances[name]
            .1
            .commit_transaction(Duration::from_secs(30))
            .map_err(rdkafka_txn_error)
    }

    fn abort(&mut self, name: &str) -> Result<(), TxnCallError> {
        self.instances[name]
            .1
            .abort_transaction(Duration::from_secs(30))
            .map_err(rdkafka_txn_error)
    }

    fn close_consumer(&mut self, name: &str) {
        if let Some((consumer, _)) = self.instances.get_mut(name) {
            drop(consumer.take());
        }
    }
}

/// The processors on confluent-kafka (Python), in `compat-tests/clients/eos_processor.py`,
/// driven one command per line.
struct PythonProcessors {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

impl PythonProcessors {
    fn spawn(bootstrap: &str, ids: &PipelineIds) -> Self {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("compat-tests/clients/eos_processor.py");
        let mut child = Command::new(common::python())
            .arg(script)
            .args([bootstrap, &ids.input, &ids.output, &ids.group, &ids.txn_id])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python processor starts");
        let stdin = child.stdin.take().expect("stdin piped");
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        PythonProcessors {
            child,
            stdin,
            lines,
        }
    }

    /// Sends one command; its answer after "ok " (or the error after "err ").
    fn call(&mut self, command: &str) -> Result<String, TxnCallError> {
        use std::io::Write;
        writeln!(self.stdin, "{command}").expect("command sent to the python processor");
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("python processor did not answer {command:?}: {e}"));
        if let Some(rest) = line.strip_prefix("ok") {
            return Ok(rest.trim().to_string());
        }
        let mut words = line.strip_prefix("err ").unwrap_or(&line).split(' ');
        Err(TxnCallError {
            code: words.next().unwrap_or_default().to_string(),
            fatal: words.next() == Some("fatal"),
        })
    }
}

impl Drop for PythonProcessors {
    fn drop(&mut self) {
        let _ = self.call("quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Processors for PythonProcessors {
    fn start(&mut self, name: &str) {
        self.call(&format!("start {name}"))
            .unwrap_or_else(|e| panic!("start {name}: {e:?}"));
    }

    fn batch(&mut self, name: &str, max: usize) -> usize {
        let n = self
            .call(&format!("batch {name} {max}"))
            .unwrap_or_else(|e| panic!("batch {name}: {e:?}"));
        n.parse().expect("a count")
    }

    fn commit(&mut self, name: &str) -> Result<(), TxnCallError> {
        self.call(&format!("commit {name}")).map(|_| ())
    }

    fn abort(&mut self, name: &str) -> Result<(), TxnCallError> {
        self.call(&format!("abort {name}")).map(|_| ())
    }

    fn close_consumer(&mut self, name: &str) {
        self.call(&format!("close_consumer {name}"))
            .unwrap_or_else(|e| panic!("close_consumer {name}: {e:?}"));
    }
}

/// OffsetFetch v7 with require_stable at the group's coordinator: partition
/// -> (committed offset, partition error code), or the group's error code.
fn offsets_stable(
    cluster: &Cluster,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<BTreeMap<i32, (i64, i16)>, i16> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse};
    let coordinator = eventually("the group's coordinator", Duration::from_secs(30), || {
        cluster.broker_ids().iter().find_map(|id| {
            match common::find_coordinator(&addr(cluster, *id), group, 0, PROBE)? {
                (0, node) => Some(node),
                _ => None,
            }
        })
    });
    let mut c = Client::connect_timeout(&addr(cluster, coordinator), PROBE).map_err(|_| -1i16)?;
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_require_stable(true)
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_indexes((0..partitions).collect())]));
    let resp: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 7, &req).map_err(|_| -1i16)?;
    if resp.error_code != 0 {
        return Err(resp.error_code);
    }
    Ok(resp
        .topics
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, (p.committed_offset, p.error_code)))
        .collect())
}

/// The group's committed offsets once none is pending (require_stable):
/// partition -> offset (-1: none).
fn stable_committed(cluster: &Cluster, ids: &PipelineIds) -> BTreeMap<i32, i64> {
    eventually(
        "stable committed offsets",
        Duration::from_secs(30),
        || match offsets_stable(cluster, &ids.group, &ids.input, PIPE_PARTITIONS) {
            Ok(m) if m.values().all(|(_, code)| *code == 0) => {
                Some(m.into_iter().map(|(p, (o, _))| (p, o)).collect())
            }
            _ => None,
        },
    )
}

/// Every value of `topic` a read_committed consumer receives before the
/// plain record `sentinel`, appended now to each partition (so the read
/// covers everything written before this call): partition -> values.
fn read_committed_before_sentinel(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    sentinel: &str,
) -> BTreeMap<i32, Vec<String>> {
    produce_sentinel(bootstrap, topic, partitions, sentinel);
    read_committed_until(bootstrap, topic, partitions, sentinel)
        .into_iter()
        .map(|(p, records)| (p, records.into_iter().map(|(_, v)| v).collect()))
        .collect()
}

/// What Kafka promises once the new instance's InitProducerId has returned
/// (and whatever the fenced instance does afterwards): its transaction is
/// aborted on every partition it touched. No partition of the output holds an
/// open transaction, none of the zombie's records is visible to
/// read_committed, the group's offsets are exactly those committed before
/// the zombie's transaction with none pending, and the transactional id has
/// no transaction running.
fn assert_zombie_aborted(
    cluster: &Cluster,
    ids: &PipelineIds,
    zombie: &str,
    committed_before: &BTreeMap<i32, i64>,
    when: &str,
) {
    let bootstrap = cluster.bootstrap();
    for part in 0..PIPE_PARTITIONS {
        let hw = latest_offset(cluster, &ids.output, part, false);
        let lso = latest_offset(cluster, &ids.output, part, true);
        assert!(
            hw.is_some() && hw == lso,
            "{when}: {}-{part} still has an open transaction (HW {hw:?}, LSO {lso:?})",
            ids.output
        );
    }
    let seen = read_committed_before_sentinel(
        &bootstrap,
        &ids.output,
        PIPE_PARTITIONS,
        &format!("sentinel-{}", when.replace(' ', "-")),
    );
    let leaked: Vec<&String> = seen
        .values()
        .flatten()
        .filter(|v| v.starts_with(&format!("{zombie}|")))
        .collect();
    assert!(
        leaked.is_empty(),
        "{when}: the fenced instance's records are visible to read_committed: {leaked:?}"
    );
    let offsets = offsets_stable(cluster, &ids.group, &ids.input, PIPE_PARTITIONS)
        .unwrap_or_else(|code| panic!("{when}: OffsetFetch failed with {code}"));
    let offsets: BTreeMap<i32, i64> = offsets
        .into_iter()
        .map(|(p, (o, code))| {
            assert_eq!(
                code, 0,
                "{when}: offsets of {}-{p} not stable: the fenced transaction's offsets are pending",
                ids.input
            );
            (p, o)
        })
        .collect();
    assert_eq!(
        &offsets, committed_before,
        "{when}: the group's offsets must be those committed before the fenced transaction"
    );
    let state = describe_txn(cluster, &ids.txn_id).map(|(_, s, _, _)| s);
    assert!(
        matches!(
            state.as_deref(),
            Some("Empty" | "CompleteAbort" | "CompleteCommit")
        ),
        "{when}: the transactional id should have no transaction running: {state:?}"
    );
}

/// One run of the history (issue 11) with fresh topics, group and
/// transactional id:
/// 1. instance A commits batches until half of the input is done, aborts one
///    more batch and closes its consumer (its producer stays open, idle);
/// 2. instance B takes over, consumes the next batch, writes its outputs and
///    offsets into a transaction and flushes, and never ends it (it "crashed");
/// 3. instance C initialises with the same transactional id: B is a zombie;
///    B's commit (and then abort) must fail, fenced;
/// 4. C finishes the input.
fn zombie_history(cluster: &Cluster, rf: i16, procs: &mut dyn Processors, ids: &PipelineIds) {
    let bootstrap = cluster.bootstrap();
    create_topic(cluster, &ids.input, PIPE_PARTITIONS, rf);
    create_topic(cluster, &ids.output, PIPE_PARTITIONS, rf);
    {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("acks", "all")
            .create()
            .unwrap();
        for part in 0..PIPE_PARTITIONS {
            for i in 0..PIPE_INPUT_PER_PARTITION {
                p.send(
                    BaseRecord::<(), String>::to(&ids.input)
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
    let total = (PIPE_INPUT_PER_PARTITION * i64::from(PIPE_PARTITIONS)) as usize;

    // 1. A: commits until half the input is done, then aborts one batch.
    procs.start("A");
    let mut done = 0;
    while done < total / 2 {
        let n = procs.batch("A", PIPE_BATCH);
        if n > 0 {
            procs.commit("A").expect("A commits");
            done += n;
        }
    }
    while procs.batch("A", PIPE_BATCH) == 0 {}
    procs.abort("A").expect("A aborts");
    procs.close_consumer("A");
    let committed_before = stable_committed(cluster, ids);
    assert_eq!(
        committed_before.values().map(|o| o.max(&0)).sum::<i64>(),
        done as i64,
        "A's committed offsets cover what A committed"
    );

    // 2. B: one transaction, never ended.
    procs.start("B");
    let mut zombie_inputs = 0;
    while zombie_inputs == 0 {
        zombie_inputs = procs.batch("B", PIPE_BATCH);
    }
    procs.close_consumer("B");
    // The history reached its point: B's transaction is open on the output.
    let open = (0..PIPE_PARTITIONS).any(|part| {
        latest_offset(cluster, &ids.output, part, true)
            < latest_offset(cluster, &ids.output, part, false)
    });
    assert!(open, "B's transaction should be open on the output");

    // 3. C initialises: B's transaction must be aborted everywhere by now.
    procs.start("C");
    assert_zombie_aborted(cluster, ids, "B", &committed_before, "after C's init");
    let zombie_commit = procs.commit("B");
    match &zombie_commit {
        Err(e) if e.is_fenced() && e.fatal => {}
        other => panic!("the zombie's commit must fail fatally, fenced: {other:?}"),
    }
    let zombie_abort = procs.abort("B");
    assert!(
        zombie_abort.is_err(),
        "the fenced instance cannot end a transaction: {zombie_abort:?}"
    );
    assert_zombie_aborted(
        cluster,
        ids,
        "B",
        &committed_before,
        "after the zombie's commit",
    );

    // 4. C finishes the input.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "C did not finish the input");
        if procs.batch("C", 3 * PIPE_BATCH) > 0 {
            procs.commit("C").expect("C commits");
            continue;
        }
        let committed = stable_committed(cluster, ids);
        if (0..PIPE_PARTITIONS).all(|p| committed.get(&p) == Some(&PIPE_INPUT_PER_PARTITION)) {
            break;
        }
    }

    // The output: each input exactly once, from A or C, nothing from B.
    let seen =
        read_committed_before_sentinel(&bootstrap, &ids.output, PIPE_PARTITIONS, "sentinel-end");
    let mut per_input: HashMap<String, Vec<String>> = HashMap::new();
    for (part, values) in &seen {
        for v in values {
            let (who, input) = v.split_once('|').expect("NAME|partition:offset");
            assert!(
                input.starts_with(&format!("{part}:")),
                "output {v} on partition {part}"
            );
            assert_ne!(who, "B", "the fenced instance's record {v} is visible");
            per_input
                .entry(input.to_string())
                .or_default()
                .push(who.to_string());
        }
    }
    for part in 0..PIPE_PARTITIONS {
        for off in 0..PIPE_INPUT_PER_PARTITION {
            let key = format!("{part}:{off}");
            assert_eq!(
                per_input.get(&key).map_or(0, Vec::len),
                1,
                "input {key} in the output: {:?}",
                per_input.get(&key)
            );
        }
    }
    assert_eq!(per_input.len(), total, "nothing else in the output");
    let final_offsets = stable_committed(cluster, ids);
    for part in 0..PIPE_PARTITIONS {
        assert_eq!(
            final_offsets.get(&part),
            Some(&PIPE_INPUT_PER_PARTITION),
            "committed offset of {}-{part}",
            ids.input
        );
    }
}

/// How many times each zombie test runs the history (fresh names each time):
/// `STRAND_EOS_RUNS`, default 1.
fn eos_runs() -> usize {
    std::env::var("STRAND_EOS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

fn zombie_test(nodes: usize, client: &str) {
    let _serial = one_at_a_time();
    let cluster = Cluster::start(
        &common::strand_bin(),
        spec(nodes, &format!("zombie-{client}-{nodes}")),
    )
    .expect("cluster starts");
    let rf = nodes as i16;
    for run in 0..eos_runs() {
        let ids = PipelineIds::new(client, run);
        let started = Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match client {
            "rdkafka" => {
                let mut procs = RdkafkaProcessors {
                    bootstrap: cluster.bootstrap(),
                    ids: ids.clone(),
                    instances: HashMap::new(),
                };
                zombie_history(&cluster, rf, &mut procs, &ids);
            }
            _ => {
                let mut procs = PythonProcessors::spawn(&cluster.bootstrap(), &ids);
                zombie_history(&cluster, rf, &mut procs, &ids);
            }
        }));
        if let Err(e) = outcome {
            eprintln!("{}", log_tails(&cluster));
            std::panic::resume_unwind(e);
        }
        eprintln!(
            "zombie history with {client} on {nodes} node(s), run {}: ok in {:.1}s",
            run + 1,
            started.elapsed().as_secs_f64()
        );
    }
}

#[test]
fn exactly_once_pipeline_survives_abort_and_zombie() {
    zombie_test(1, "rdkafka");
}

#[test]
fn exactly_once_zombie_rdkafka_three_nodes() {
    zombie_test(3, "rdkafka");
}

#[test]
fn exactly_once_zombie_confluent_kafka_python_one_node() {
    zombie_test(1, "python");
}

#[test]
fn exactly_once_zombie_confluent_kafka_python_three_nodes() {
    zombie_test(3, "python");
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

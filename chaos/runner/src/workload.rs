//! The clients: idempotent producers, transactional producers (some of
//! whose transactions abort, some left hanging by an instance that is
//! dropped and fenced by its successor), consumers by `assign` and by
//! `subscribe` in both isolation levels, offset commits and fetches, and
//! the final reads. Each runs on its own thread and records every
//! operation in the shared history.

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use strand_chaos::{Isolation, Op, Record, Recorder, Tp, Write};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What every client shares.
pub struct Shared {
    pub bootstrap: String,
    pub history: Recorder,
    pub stop: AtomicBool,
    next_value: AtomicU64,
    next_process: AtomicU64,
    next_txn: AtomicU64,
}

impl Shared {
    pub fn new(bootstrap: String) -> Arc<Shared> {
        Arc::new(Shared {
            bootstrap,
            history: Recorder::new(),
            stop: AtomicBool::new(false),
            next_value: AtomicU64::new(1),
            next_process: AtomicU64::new(1),
            next_txn: AtomicU64::new(1),
        })
    }

    fn value(&self) -> u64 {
        self.next_value.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh process number (after an `info`, the old one is retired).
    pub fn process(&self) -> u64 {
        self.next_process.fetch_add(1, Ordering::Relaxed)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            .set("socket.timeout.ms", "5000")
            .set("metadata.max.age.ms", "3000")
            .set("topic.metadata.refresh.interval.ms", "1000")
            .set("reconnect.backoff.max.ms", "500")
            .set("log_level", "3");
        c
    }
}

/// One delivery report, sent to the thread that waits for it.
type Delivered = Result<(i32, i64), String>;

pub struct Reports;

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<mpsc::Sender<Delivered>>;

    fn delivery(&self, result: &DeliveryResult<'_>, tx: Self::DeliveryOpaque) {
        let r = match result {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, _)) => Err(e.to_string()),
        };
        let _ = tx.send(r);
    }
}

/// A record's value: the number a workload wrote, or
/// [`strand_chaos::history::UNREADABLE`] (a garbage read to the checker).
fn value_of(m: &rdkafka::message::BorrowedMessage<'_>) -> u64 {
    use rdkafka::Message;
    m.payload()
        .and_then(|p| std::str::from_utf8(p).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(strand_chaos::history::UNREADABLE)
}

fn tp(topic: &str, partition: i32) -> Tp {
    Tp::new(topic, partition)
}

/// Sends one record and returns the receiver of its delivery report.
fn send(
    p: &ThreadedProducer<Reports>,
    topic: &str,
    partition: i32,
    value: u64,
) -> Result<mpsc::Receiver<Delivered>, String> {
    let (tx, rx) = mpsc::channel();
    let payload = value.to_string();
    p.send(
        BaseRecord::with_opaque_to(topic, Box::new(tx))
            .partition(partition)
            .payload(&payload)
            .key(&payload),
    )
    .map(|_| rx)
    .map_err(|(e, _)| e.to_string())
}

/// Waits for a transaction's deliveries, filling in each write's offset,
/// with one deadline for the batch, not one per record: a producer whose
/// deliveries stall (fenced, in an abortable error) would otherwise hold
/// the thread up to 20 s per record (in seeds 101 and 110 of the long run
/// one pipeline batch stayed open ~10 minutes and the clients could not
/// stop). The last failure, if any, goes to `failed`.
fn await_deliveries(
    done: &mut [Write],
    receivers: Vec<Result<mpsc::Receiver<Delivered>, String>>,
    failed: &mut Option<String>,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for (w, rx) in done.iter_mut().zip(receivers) {
        match rx.and_then(|rx| {
            rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .map_err(|e| e.to_string())?
        }) {
            Ok((_, offset)) => w.offset = Some(offset),
            Err(e) => *failed = Some(e),
        }
    }
}

/// How the queue's producers acknowledge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Acks {
    /// acks=all with idempotence (the promise under test).
    All,
    /// acks=1 without idempotence or retries: the leader's append alone
    /// (what the sensitivity runs lose on purpose).
    Leader,
}

/// A producer sending unique values to random partitions, one at a time:
/// idempotent with acks=all, or acks=1.
pub fn producer(shared: Arc<Shared>, topic: String, partitions: i32, seed: u64, acks: Acks) {
    let mut rng = StdRng::seed_from_u64(seed);
    let make = || {
        let mut c = shared.config();
        match acks {
            Acks::All => c.set("enable.idempotence", "true").set("acks", "all"),
            Acks::Leader => c
                .set("enable.idempotence", "false")
                .set("acks", "1")
                .set("message.send.max.retries", "0"),
        };
        c.set("message.timeout.ms", "10000")
            .set("linger.ms", "1")
            .create_with_context::<_, ThreadedProducer<Reports>>(Reports)
    };
    let mut producer = match make() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("strand-chaos: producer: {e}");
            return;
        }
    };
    let mut process = shared.process();
    while !shared.stopped() {
        let partition = rng.gen_range(0..partitions);
        let value = shared.value();
        let write = Write {
            tp: tp(&topic, partition),
            value,
            offset: None,
        };
        shared.history.invoke(
            process,
            Op::Send {
                write: write.clone(),
            },
        );
        let outcome = send(&producer, &topic, partition, value).and_then(|rx| {
            rx.recv_timeout(Duration::from_secs(20))
                .map_err(|e| e.to_string())?
        });
        match outcome {
            Ok((_, offset)) => {
                shared.history.ok(
                    process,
                    Op::Send {
                        write: Write {
                            offset: Some(offset),
                            ..write
                        },
                    },
                );
            }
            Err(e) => {
                // An error after the append does not prove the record absent.
                shared.history.info(process, Op::Send { write }, e);
                process = shared.process();
                // The idempotent producer may be fatally broken (its epoch
                // bumped); a new one starts clean.
                if let Ok(p) = make() {
                    producer = p;
                }
            }
        }
    }
    let _ = producer.flush(Duration::from_secs(5));
}

/// A transactional producer: transactions of 1-3 sends to random
/// partitions, 20% aborted, 5% left hanging (the instance is dropped
/// mid-transaction; its successor's InitProducerId fences it and aborts
/// the transaction).
pub fn transactional_producer(
    shared: Arc<Shared>,
    topic: String,
    partitions: i32,
    transactional_id: String,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let make = || -> Result<ThreadedProducer<Reports>, KafkaError> {
        let p = shared
            .config()
            .set("transactional.id", &transactional_id)
            .set("transaction.timeout.ms", "10000")
            .set("message.timeout.ms", "10000")
            .set("linger.ms", "1")
            .create_with_context::<_, ThreadedProducer<Reports>>(Reports)?;
        p.init_transactions(Duration::from_secs(20))?;
        Ok(p)
    };
    let mut producer: Option<ThreadedProducer<Reports>> = None;
    while !shared.stopped() {
        let p = match producer.take() {
            Some(p) => p,
            None => match make() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("strand-chaos: {transactional_id}: init: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            },
        };
        let process = shared.process();
        let id = shared.next_txn.fetch_add(1, Ordering::Relaxed);
        let abort = rng.gen_bool(0.2);
        let hang = !abort && rng.gen_bool(0.05);
        let writes: Vec<Write> = (0..rng.gen_range(1..=3))
            .map(|_| Write {
                tp: tp(&topic, rng.gen_range(0..partitions)),
                value: shared.value(),
                offset: None,
            })
            .collect();
        let op = |writes: Vec<Write>| Op::Txn {
            id,
            writes,
            group: None,
            offsets: vec![],
            inputs: vec![],
            abort,
        };
        shared.history.invoke(process, op(writes.clone()));
        if let Err(e) = p.begin_transaction() {
            shared.history.fail(process, op(writes), e.to_string());
            continue;
        }
        let mut done = writes.clone();
        let mut failed = None;
        let receivers: Vec<_> = writes
            .iter()
            .map(|w| send(&p, &topic, w.tp.partition, w.value))
            .collect();
        await_deliveries(&mut done, receivers, &mut failed);
        if hang {
            // Never ended: it cannot commit, and the next instance's
            // InitProducerId aborts it.
            drop(p);
            shared
                .history
                .fail(process, op(done), "abandoned mid-transaction");
            continue;
        }
        let end = if abort || failed.is_some() {
            p.abort_transaction(Duration::from_secs(20))
        } else {
            p.commit_transaction(Duration::from_secs(20))
        };
        match (end, abort, failed) {
            (Ok(()), _, None) => {
                shared.history.ok(process, op(done));
                producer = Some(p);
            }
            (Ok(()), _, Some(e)) => {
                // A send failed and the abort succeeded: not committed.
                shared.history.fail(process, op(done), e);
                producer = Some(p);
            }
            (Err(e), true, _) => {
                // An abort that did not answer: the transaction still cannot
                // commit (the next instance aborts it).
                shared.history.fail(process, op(done), e.to_string());
            }
            (Err(e), false, _) => {
                // A commit whose outcome is unknown; a new instance fences
                // this one, and completes or aborts its transaction.
                shared.history.info(process, op(done), e.to_string());
            }
        }
    }
    if let Some(p) = producer {
        let _ = p.flush(Duration::from_secs(5));
    }
}

/// Rebalances seen by a subscribed consumer, for its poll loop to record.
#[derive(Default)]
pub struct Rebalances {
    changed: AtomicBool,
}

impl ClientContext for Rebalances {}

impl ConsumerContext for Rebalances {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, _: &Rebalance<'_>) {
        self.changed.store(true, Ordering::SeqCst);
    }
}

fn assignment_tps(c: &BaseConsumer<Rebalances>) -> Vec<Tp> {
    c.assignment()
        .map(|l| {
            l.elements()
                .iter()
                .map(|e| tp(e.topic(), e.partition()))
                .collect()
        })
        .unwrap_or_default()
}

pub enum ConsumerKind {
    /// Every partition assigned, from the beginning.
    Assign,
    /// A group member; `commit` commits its position every few polls and
    /// fetches the group's offsets.
    Subscribe { group: String, commit: bool },
}

/// A consumer polling batches of records and recording each poll; with
/// `Subscribe { commit: true }` it commits and fetches offsets too.
pub fn consumer(
    shared: Arc<Shared>,
    topics: Vec<(String, i32)>,
    isolation: Isolation,
    kind: ConsumerKind,
    session: u64,
) {
    let level = match isolation {
        Isolation::ReadCommitted => "read_committed",
        Isolation::ReadUncommitted => "read_uncommitted",
    };
    let mut config = shared.config();
    config
        .set("isolation.level", level)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500");
    let group = match &kind {
        ConsumerKind::Assign => format!("chaos-assign-{session}"),
        ConsumerKind::Subscribe { group, .. } => group.clone(),
    };
    config.set("group.id", &group);
    let c: BaseConsumer<Rebalances> = match config.create_with_context(Rebalances::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("strand-chaos: consumer {session}: {e}");
            return;
        }
    };
    // Assignments are recorded by a process of their own: they happen
    // inside a poll.
    let control = shared.process();
    let record_assignment = |tps: Vec<Tp>| {
        let op = Op::Assign { session, tps };
        shared.history.invoke(control, op.clone());
        shared.history.ok(control, op);
    };
    match &kind {
        ConsumerKind::Assign => {
            let mut list = TopicPartitionList::new();
            let mut tps = Vec::new();
            for (t, n) in &topics {
                for p in 0..*n {
                    let _ = list.add_partition_offset(t, p, Offset::Beginning);
                    tps.push(tp(t, p));
                }
            }
            if let Err(e) = c.assign(&list) {
                eprintln!("strand-chaos: consumer {session}: assign: {e}");
                return;
            }
            record_assignment(tps);
        }
        ConsumerKind::Subscribe { .. } => {
            let names: Vec<&str> = topics.iter().map(|(t, _)| t.as_str()).collect();
            if let Err(e) = c.subscribe(&names) {
                eprintln!("strand-chaos: consumer {session}: subscribe: {e}");
                return;
            }
        }
    }
    let commit = matches!(kind, ConsumerKind::Subscribe { commit: true, .. });
    let mut polls = 0u64;
    let process = shared.process();
    while !shared.stopped() {
        let poll = |records: Vec<Record>| Op::Poll {
            session,
            isolation,
            records,
        };
        shared.history.invoke(process, poll(vec![]));
        let mut records = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline && records.len() < 50 {
            let msg = c.poll(Duration::from_millis(50));
            if c.context().changed.swap(false, Ordering::SeqCst) {
                // The records so far came before the rebalance.
                shared
                    .history
                    .ok(process, poll(std::mem::take(&mut records)));
                record_assignment(assignment_tps(&c));
                shared.history.invoke(process, poll(vec![]));
            }
            if let Some(Ok(m)) = msg {
                records.push(Record {
                    tp: tp(m.topic(), m.partition()),
                    offset: m.offset(),
                    value: value_of(&m),
                });
            }
        }
        shared.history.ok(process, poll(records));
        polls += 1;
        if commit && polls.is_multiple_of(5) {
            commit_and_fetch(&shared, &c, &group);
        }
    }
}

/// Commits the consumer's position for its assignment, then fetches the
/// group's committed offsets for it.
fn commit_and_fetch(shared: &Shared, c: &BaseConsumer<Rebalances>, group: &str) {
    let Ok(position) = c.position() else { return };
    let offsets: Vec<(Tp, i64)> = position
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((tp(e.topic(), e.partition()), o)),
            _ => None,
        })
        .collect();
    if offsets.is_empty() {
        return;
    }
    let process = shared.process();
    let op = Op::Commit {
        group: group.to_string(),
        offsets: offsets.clone(),
    };
    shared.history.invoke(process, op.clone());
    let mut list = TopicPartitionList::new();
    for (t, o) in &offsets {
        let _ = list.add_partition_offset(&t.topic, t.partition, Offset::Offset(*o));
    }
    match c.commit(&list, CommitMode::Sync) {
        Ok(()) => {
            shared.history.ok(process, op);
        }
        // A commit the coordinator refused (rebalance in progress, an older
        // generation) is a failure, anything else unknown; the checker
        // takes either as possibly applied, since the refusal may be of a
        // retry whose first attempt was appended.
        Err(KafkaError::ConsumerCommit(code))
            if matches!(
                code,
                rdkafka::types::RDKafkaErrorCode::IllegalGeneration
                    | rdkafka::types::RDKafkaErrorCode::RebalanceInProgress
                    | rdkafka::types::RDKafkaErrorCode::UnknownMemberId
            ) =>
        {
            shared.history.fail(process, op, code.to_string());
        }
        Err(e) => {
            shared.history.info(process, op, e.to_string());
        }
    }
    let process = shared.process();
    let tps: Vec<Tp> = offsets.iter().map(|(t, _)| t.clone()).collect();
    let fetch = |offsets: Vec<(Tp, Option<i64>)>| Op::FetchOffsets {
        group: group.to_string(),
        offsets,
    };
    shared.history.invoke(
        process,
        fetch(tps.iter().map(|t| (t.clone(), None)).collect()),
    );
    let mut list = TopicPartitionList::new();
    for t in &tps {
        list.add_partition(&t.topic, t.partition);
    }
    match c.committed_offsets(list, Duration::from_secs(10)) {
        Ok(got) => {
            shared.history.ok(process, fetch(fetched(&got)));
        }
        Err(e) => {
            shared.history.fail(process, fetch(vec![]), e.to_string());
        }
    }
}

/// A group's committed offsets as the history records them (None: none).
fn fetched(list: &TopicPartitionList) -> Vec<(Tp, Option<i64>)> {
    list.elements()
        .iter()
        .map(|e| {
            let o = match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            };
            (tp(e.topic(), e.partition()), o)
        })
        .collect()
}

/// After healing: each group's committed offsets for every partition of
/// `topic`, fetched once (read_committed: stable offsets only), so the
/// last commits are checked too.
pub fn final_fetches(shared: &Shared, groups: &[String], topic: &str, partitions: i32) {
    for group in groups {
        let process = shared.process();
        let fetch = |offsets: Vec<(Tp, Option<i64>)>| Op::FetchOffsets {
            group: group.clone(),
            offsets,
        };
        let asked = (0..partitions).map(|p| (tp(topic, p), None)).collect();
        shared.history.invoke(process, fetch(asked));
        let result = shared
            .config()
            .set("group.id", group)
            .set("isolation.level", "read_committed")
            .create::<BaseConsumer>()
            .map_err(|e| e.to_string())
            .and_then(|c| {
                let mut list = TopicPartitionList::new();
                for p in 0..partitions {
                    list.add_partition(topic, p);
                }
                c.committed_offsets(list, Duration::from_secs(30))
                    .map_err(|e| e.to_string())
            });
        match result {
            Ok(got) => {
                shared.history.ok(process, fetch(fetched(&got)));
            }
            Err(e) => {
                shared.history.fail(process, fetch(vec![]), e);
            }
        }
    }
}

/// After healing: every partition read from its start to its end with
/// read_committed, one FinalRead per partition. An end not reached in
/// `timeout` (a transaction still open) leaves the read short, and what
/// it missed shows as unseen.
pub fn final_reads(shared: &Shared, topics: &[(String, i32)], timeout: Duration) {
    for (topic, partitions) in topics {
        for p in 0..*partitions {
            let process = shared.process();
            let op = |records: Vec<Record>| Op::FinalRead {
                tp: tp(topic, p),
                records,
            };
            shared.history.invoke(process, op(vec![]));
            match final_read(shared, topic, p, timeout) {
                Ok(records) => {
                    shared.history.ok(process, op(records));
                }
                Err(e) => {
                    shared.history.fail(process, op(vec![]), e);
                }
            }
        }
    }
}

fn final_read(
    shared: &Shared,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<Vec<Record>, String> {
    let c: BaseConsumer = shared
        .config()
        .set("group.id", "chaos-final")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| e.to_string())?;
    let (_, high) = c
        .fetch_watermarks(topic, partition, Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Beginning)
        .map_err(|e| e.to_string())?;
    c.assign(&list).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    let mut records = Vec::new();
    loop {
        let at = c
            .position()
            .ok()
            .and_then(|l| l.elements().first().map(|e| e.offset()));
        if matches!(at, Some(Offset::Offset(o)) if o >= high) {
            return Ok(records);
        }
        // A final read that does not reach the end proves nothing: it
        // fails, and the run is inconclusive.
        if Instant::now() >= deadline {
            return Err(format!(
                "the final read of {topic}-{partition} reached {at:?}, not {high}, in time"
            ));
        }
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            records.push(Record {
                tp: tp(topic, partition),
                offset: m.offset(),
                value: value_of(&m),
            });
        }
    }
}

/// Consume-transform-produce: a group member reading `input` with
/// read_committed, and for every batch a transaction that writes one new
/// value per input record to `output` and commits the batch's offsets for
/// the group (`send_offsets_to_transaction`). Its polls are recorded too.
pub fn pipeline(
    shared: Arc<Shared>,
    input: String,
    output: String,
    partitions: i32,
    group: String,
    transactional_id: String,
    session: u64,
) {
    let mut config = shared.config();
    config
        .set("group.id", &group)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500");
    let c: BaseConsumer<Rebalances> = match config.create_with_context(Rebalances::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("strand-chaos: pipeline consumer: {e}");
            return;
        }
    };
    if let Err(e) = c.subscribe(&[input.as_str()]) {
        eprintln!("strand-chaos: pipeline subscribe: {e}");
        return;
    }
    let make = || -> Result<ThreadedProducer<Reports>, KafkaError> {
        let p = shared
            .config()
            .set("transactional.id", &transactional_id)
            .set("transaction.timeout.ms", "10000")
            .set("message.timeout.ms", "10000")
            .set("linger.ms", "1")
            .create_with_context::<_, ThreadedProducer<Reports>>(Reports)?;
        p.init_transactions(Duration::from_secs(20))?;
        Ok(p)
    };
    let control = shared.process();
    let reader = shared.process();
    let mut producer: Option<ThreadedProducer<Reports>> = None;
    while !shared.stopped() {
        // One batch, read as any poll is.
        let poll = |records: Vec<Record>| Op::Poll {
            session,
            isolation: Isolation::ReadCommitted,
            records,
        };
        shared.history.invoke(reader, poll(vec![]));
        let mut records = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline && records.len() < 20 {
            let msg = c.poll(Duration::from_millis(50));
            if c.context().changed.swap(false, Ordering::SeqCst) {
                shared
                    .history
                    .ok(reader, poll(std::mem::take(&mut records)));
                let op = Op::Assign {
                    session,
                    tps: assignment_tps(&c),
                };
                shared.history.invoke(control, op.clone());
                shared.history.ok(control, op);
                shared.history.invoke(reader, poll(vec![]));
            }
            if let Some(Ok(m)) = msg {
                records.push(Record {
                    tp: tp(m.topic(), m.partition()),
                    offset: m.offset(),
                    value: value_of(&m),
                });
            }
        }
        shared.history.ok(reader, poll(records.clone()));
        if records.is_empty() {
            continue;
        }
        let p = match producer.take() {
            Some(p) => p,
            None => match make() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("strand-chaos: {transactional_id}: init: {e}");
                    // The batch is not processed: read it again from the
                    // group's offsets.
                    rewind(&shared, &c, control, session, &group);
                    continue;
                }
            },
        };
        let Some(meta) = c.group_metadata() else {
            producer = Some(p);
            continue;
        };
        // The offsets to commit: after each partition's last record.
        let mut next: std::collections::BTreeMap<Tp, i64> = Default::default();
        for r in &records {
            next.insert(r.tp.clone(), r.offset + 1);
        }
        let offsets: Vec<(Tp, i64)> = next.into_iter().collect();
        let inputs: Vec<u64> = records.iter().map(|r| r.value).collect();
        let writes: Vec<Write> = records
            .iter()
            .map(|r| Write {
                tp: tp(&output, r.tp.partition % partitions),
                value: shared.value(),
                offset: None,
            })
            .collect();
        let process = shared.process();
        let id = shared.next_txn.fetch_add(1, Ordering::Relaxed);
        let op = |writes: Vec<Write>| Op::Txn {
            id,
            writes,
            group: Some(group.clone()),
            offsets: offsets.clone(),
            inputs: inputs.clone(),
            abort: false,
        };
        shared.history.invoke(process, op(writes.clone()));
        if let Err(e) = p.begin_transaction() {
            shared.history.fail(process, op(writes), e.to_string());
            rewind(&shared, &c, control, session, &group);
            continue;
        }
        let mut done = writes.clone();
        let mut failed = None;
        let receivers: Vec<_> = writes
            .iter()
            .map(|w| send(&p, &output, w.tp.partition, w.value))
            .collect();
        await_deliveries(&mut done, receivers, &mut failed);
        let mut list = TopicPartitionList::new();
        for (t, o) in &offsets {
            let _ = list.add_partition_offset(&t.topic, t.partition, Offset::Offset(*o));
        }
        if failed.is_none() {
            if let Err(e) = p.send_offsets_to_transaction(&list, &meta, Duration::from_secs(20)) {
                failed = Some(e.to_string());
            }
        }
        let end = match failed {
            None => p.commit_transaction(Duration::from_secs(20)),
            Some(_) => p.abort_transaction(Duration::from_secs(20)),
        };
        match (end, failed) {
            (Ok(()), None) => {
                shared.history.ok(process, op(done));
                producer = Some(p);
            }
            (Ok(()), Some(e)) => {
                shared.history.fail(process, op(done), e);
                producer = Some(p);
                rewind(&shared, &c, control, session, &group);
            }
            (Err(e), Some(_)) => {
                shared.history.fail(process, op(done), e.to_string());
                rewind(&shared, &c, control, session, &group);
            }
            (Err(e), None) => {
                // Committed or not: the next instance's InitProducerId
                // settles it, and the group's offsets say where to resume.
                shared.history.info(process, op(done), e.to_string());
                rewind(&shared, &c, control, session, &group);
            }
        }
    }
}

/// After a batch that was not committed: back to the group's committed
/// offsets, so its records are processed again (that is what exactly-once
/// asks of an application). Each seek is recorded: the session's reading of
/// that partition starts anew. Until the group's offsets are read and every
/// seek is done, nothing is processed: a rewind that gave up (the
/// coordinator away during a kill) let the next batch start past the
/// aborted one's records, and the long run's seed 316 caught them missing.
fn rewind(shared: &Shared, c: &BaseConsumer<Rebalances>, control: u64, session: u64, group: &str) {
    while !shared.stopped() {
        let Ok(assigned) = c.assignment() else { return };
        // The group's offsets as OffsetFetch answers them: checked as a
        // register against the transactions' offset commits.
        let fetch = |offsets: Vec<(Tp, Option<i64>)>| Op::FetchOffsets {
            group: group.to_string(),
            offsets,
        };
        let asked: Vec<(Tp, Option<i64>)> = assigned
            .elements()
            .iter()
            .map(|e| (tp(e.topic(), e.partition()), None))
            .collect();
        shared.history.invoke(control, fetch(asked));
        let committed = match c.committed_offsets(assigned, Duration::from_secs(10)) {
            Ok(committed) => {
                shared.history.ok(control, fetch(fetched(&committed)));
                committed
            }
            Err(e) => {
                shared.history.fail(control, fetch(vec![]), e.to_string());
                eprintln!("strand-chaos: rewind: the group's offsets: {e}; again");
                // A retry, not a wait for a condition: the coordinator
                // answers again once the fault heals or a new one is elected.
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let mut all = true;
        for e in committed.elements() {
            let (to, at) = match e.offset() {
                Offset::Offset(o) => (Offset::Offset(o), o),
                _ => (Offset::Beginning, 0),
            };
            let op = Op::Seek {
                session,
                tp: tp(e.topic(), e.partition()),
                offset: at,
            };
            shared.history.invoke(control, op.clone());
            match c.seek(e.topic(), e.partition(), to, Duration::from_secs(5)) {
                Ok(()) => {
                    shared.history.ok(control, op);
                }
                Err(err) => {
                    shared.history.fail(control, op, err.to_string());
                    all = false;
                }
            }
        }
        if all {
            return;
        }
    }
}

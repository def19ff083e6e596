//! Kafka Streams with exactly_once_v2 against a 3-node Strand cluster
//! (issue 16): `compat-tests/streams-app/WordCount.java`, compiled here
//! against the reference Kafka's jars, counts the words of a fixed input
//! through a repartition topic and a state store with its changelog. The
//! run goes on across an application instance killed (kill -9) in the
//! middle of its work, a new instance that starts with an empty state
//! directory (so it restores the store from the changelog, which the log
//! cleaner has compacted by then: issue 34), and a broker killed and
//! restarted.
//!
//! The property a user of exactly-once relies on, read back under
//! read_committed: the record cache is off, so each word of the input
//! yields one output record, and a word's counts read exactly 1, 2, ..., N
//! for its N occurrences: nothing counted twice (a repeat or a jump), lost
//! (a missing final count) or exposed from an aborted transaction.
//!
//! Needs the reference Kafka's jars (`compat-tests/scripts/fetch-kafka.sh`)
//! and a JDK.

mod common;

use common::{create_topic_with, eventually, partition_view, Client};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strand_compat_tests::cluster::{Cluster, ClusterSpec, KafkaDist};

const INPUT: &str = "streams-input";
const OUTPUT: &str = "streams-output";
const PARTITIONS: i32 = 3;
const WORDS: usize = 40;
const LINES_PER_PHASE: usize = 400;
const WORDS_PER_LINE: usize = 4;

/// The state store's changelog (`<application.id>-<store>-changelog`).
const CHANGELOG: &str = "strand-word-count-counts-changelog";

/// How many data records (control batches aside) `topic`/`partition`
/// holds from its start to its HW, read from its leader.
fn data_records(cluster: &Cluster, any: &str, topic: &str, partition: i32) -> Option<usize> {
    let leader = partition_view(any, topic, partition, Duration::from_secs(5))?.leader;
    let mut c = Client::connect(&cluster.broker_addr(leader)?).ok()?;
    let (mut offset, mut n) = (0, 0);
    loop {
        let f = common::fetch_values(&mut c, topic, partition, offset, 0).ok()?;
        if f.error_code != 0 {
            return None;
        }
        n += f
            .records
            .iter()
            .filter(|(o, _)| *o >= offset && !f.control.contains(o))
            .count();
        if f.next_offset <= offset || f.next_offset >= f.high_watermark {
            return Some(n);
        }
        offset = f.next_offset;
    }
}

/// Line `i` of the input: four words of a small vocabulary, spread unevenly.
fn line(i: usize) -> String {
    (0..WORDS_PER_LINE)
        .map(|k| format!("w{}", (i * 7 + k * k * 13 + i / 5) % WORDS))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Compiles the application into a scratch directory.
fn compile(dist: &KafkaDist, out: &Path) {
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-tests/streams-app/WordCount.java");
    let javac = dist
        .java
        .parent()
        .map(|bin| bin.join("javac"))
        .filter(|j| j.exists())
        .unwrap_or_else(|| PathBuf::from("javac"));
    let status = Command::new(javac)
        .arg("-cp")
        .arg(format!("{}/libs/*", dist.dir.display()))
        .arg("-d")
        .arg(out)
        .arg(source)
        .status()
        .expect("javac");
    assert!(status.success(), "WordCount.java compiles");
}

/// One instance of the application; its stdout is watched for RUNNING.
struct App {
    child: Child,
    running: Arc<AtomicBool>,
}

impl App {
    fn start(dist: &KafkaDist, classes: &Path, bootstrap: &str, state_dir: &Path) -> App {
        let log4j = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("compat-tests/reference-kafka/log4j2-tools.properties");
        let mut child = Command::new(&dist.java)
            .arg("-Xmx512m")
            .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
            .arg("-cp")
            .arg(format!(
                "{}:{}/libs/*",
                classes.display(),
                dist.dir.display()
            ))
            .arg("WordCount")
            .arg(bootstrap)
            .arg(state_dir)
            .arg("3")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the Streams application");
        let out = child.stdout.take().expect("piped");
        let running = Arc::new(AtomicBool::new(false));
        let flag = running.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                println!("app: {l}");
                flag.store(l == "state RUNNING", Ordering::Release);
            }
        });
        App { child, running }
    }

    /// kill -9, by PID: no chance to commit or abort anything.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Everything on the output topic under read_committed, in order per word.
fn spawn_reader(bootstrap: &str, stop: Arc<AtomicBool>) -> Arc<Mutex<Vec<(String, i64)>>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "streams-test-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("log_level", "3")
        .create()
        .expect("a consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(OUTPUT, p, Offset::Beginning)
            .expect("a partition");
    }
    consumer.assign(&tpl).expect("assigned");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Acquire) {
            let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            let word = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
            let count = m
                .payload()
                .and_then(|v| <[u8; 8]>::try_from(v).ok())
                .map_or(-1, i64::from_be_bytes);
            sink.lock().expect("not poisoned").push((word, count));
        }
    });
    seen
}

type Input = Arc<ThreadedProducer<DefaultProducerContext>>;

/// Writes `lines` of the input, one every `pace` (a steady stream keeps a
/// transaction of the application open when a fault strikes), and waits
/// until all are acknowledged.
fn produce(producer: &Input, lines: std::ops::Range<usize>, pace: Duration) {
    for i in lines {
        let key = i.to_string();
        let value = line(i);
        producer
            .send(BaseRecord::to(INPUT).key(&key).payload(&value))
            .expect("queued");
        std::thread::sleep(pace);
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("acknowledged");
}

/// `produce` on a thread of its own.
fn produce_in_background(
    producer: &Input,
    lines: std::ops::Range<usize>,
    pace: Duration,
) -> std::thread::JoinHandle<()> {
    let producer = producer.clone();
    std::thread::spawn(move || produce(&producer, lines, pace))
}

#[test]
fn exactly_once_word_count_across_an_instance_kill_and_a_broker_restart() {
    let dist = KafkaDist::locate().expect("the reference Kafka");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let classes = scratch.path().join("classes");
    compile(&dist, &classes);
    let mut cluster = Cluster::start(
        &common::strand_bin(),
        ClusterSpec::combined(3)
            .with_override("default.replication.factor", "3")
            .with_override("offsets.topic.replication.factor", "3")
            .with_override("transaction.state.log.replication.factor", "3")
            .with_override("transaction.state.log.min.isr", "2")
            .with_override("min.insync.replicas", "2")
            .with_override("group.initial.rebalance.delay.ms", "0")
            .with_override("broker.session.timeout.ms", "4000")
            .with_override("broker.heartbeat.interval.ms", "500")
            // Segments roll every half second and the cleaner takes any
            // dirty log, so the changelog is compacted before it is restored.
            .with_override("log.roll.ms", "500")
            .with_override("log.cleaner.backoff.ms", "200")
            .with_override("log.cleaner.min.cleanable.ratio", "0.01"),
    )
    .expect("a 3-node cluster");
    let bootstrap = cluster.bootstrap();
    let first = cluster
        .broker_addr(cluster.broker_ids()[0])
        .expect("an address");
    let mut c = Client::connect(&first).expect("a connection");
    for topic in [INPUT, OUTPUT] {
        assert_eq!(
            create_topic_with(&mut c, topic, PARTITIONS, 3, &[]).unwrap(),
            0
        );
    }
    let producer: Input = Arc::new(
        ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("log_level", "3")
            .create()
            .expect("a producer"),
    );
    let pace = Duration::from_millis(10);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = spawn_reader(&bootstrap, stop.clone());
    let output_len = || seen.lock().expect("not poisoned").len();
    let words_in = |lines: usize| lines * WORDS_PER_LINE;

    // Phase 1: instance A, killed (kill -9) while the input still flows.
    let mut a = App::start(&dist, &classes, &bootstrap, &scratch.path().join("state-a"));
    eventually("instance A running", Duration::from_secs(180), || {
        a.running.load(Ordering::Acquire).then_some(())
    });
    let writing = produce_in_background(&producer, 0..LINES_PER_PHASE, pace);
    eventually("instance A under way", Duration::from_secs(180), || {
        (output_len() >= words_in(LINES_PER_PHASE) / 4).then_some(())
    });
    a.kill9();
    println!(
        "instance A killed with {} of {} outputs committed",
        output_len(),
        words_in(LINES_PER_PHASE)
    );
    writing.join().expect("phase 1 written");

    // The changelog compacted: far fewer records than the counts A made.
    let counted = output_len();
    let left = eventually("the changelog compacted", Duration::from_secs(120), || {
        let left: usize = (0..PARTITIONS)
            .map(|p| data_records(&cluster, &first, CHANGELOG, p))
            .sum::<Option<usize>>()?;
        (left * 2 < counted).then_some(left)
    });
    println!("changelog compacted to {left} records of {counted} counts");

    // Phase 2: instance B from an empty state directory (it restores the
    // store from the compacted changelog, and waits out A's open transaction).
    produce(
        &producer,
        LINES_PER_PHASE..2 * LINES_PER_PHASE,
        Duration::ZERO,
    );
    let b = App::start(&dist, &classes, &bootstrap, &scratch.path().join("state-b"));
    eventually("instance B running", Duration::from_secs(180), || {
        b.running.load(Ordering::Acquire).then_some(())
    });

    // Phase 3: the rest of the input, and the leader of an output
    // partition killed and restarted while B works through it.
    let writing = produce_in_background(&producer, 2 * LINES_PER_PHASE..3 * LINES_PER_PHASE, pace);
    eventually("instance B into phase 3", Duration::from_secs(180), || {
        (output_len() > words_in(2 * LINES_PER_PHASE)).then_some(())
    });
    let victim = partition_view(&first, OUTPUT, 0, Duration::from_secs(2))
        .map(|v| v.leader)
        .filter(|l| *l >= 0)
        .expect("a leader of the output's partition 0");
    let before = output_len();
    cluster.kill9(victim).expect("kill -9 a broker");
    cluster.restart(victim).expect("restart it");
    println!(
        "broker {victim} killed and restarted with {before} of {} outputs committed",
        words_in(3 * LINES_PER_PHASE)
    );
    writing.join().expect("phase 3 written");
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..3 * LINES_PER_PHASE {
        for w in line(i).split(' ') {
            *expected.entry(w.to_string()).or_default() += 1;
        }
    }
    let total: i64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(300), || {
        let seen = seen.lock().expect("not poisoned");
        let mut last: BTreeMap<&str, i64> = BTreeMap::new();
        for (w, n) in seen.iter() {
            last.insert(w, *n);
        }
        expected
            .iter()
            .all(|(w, n)| last.get(w.as_str()).is_some_and(|l| l >= n))
            .then_some(())
    });
    stop.store(true, Ordering::Release);
    let seen = seen.lock().expect("not poisoned").clone();
    let mut counts: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (w, n) in seen {
        counts.entry(w).or_default().push(n);
    }
    println!(
        "{} words, {total} occurrences, {} output records",
        expected.len(),
        counts.values().map(Vec::len).sum::<usize>()
    );
    let wrong: Vec<String> = counts
        .iter()
        .filter(|(w, ns)| {
            let n = expected.get(*w).copied().unwrap_or(0);
            **ns != (1..=n).collect::<Vec<_>>()
        })
        .map(|(w, ns)| format!("{w}: expected 1..={:?}, read {ns:?}", expected.get(w)))
        .collect();
    assert!(wrong.is_empty(), "counts not exactly once: {wrong:#?}");
    assert_eq!(counts.len(), expected.len(), "every word has counts");
}

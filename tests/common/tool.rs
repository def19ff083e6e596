//! A Kafka command-line tool (`compat-tests/scripts/kafka-tool.sh`) run in
//! the background, its JSON event lines collected as they come: the
//! verifiable producer and consumer.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use strand_compat_tests::cluster::KafkaDist;

/// A Kafka tool whose stdout lines are collected as they come.
pub struct Tool {
    pub child: Child,
    pub lines: Arc<Mutex<Vec<Value>>>,
}

impl Tool {
    pub fn start(dist: &KafkaDist, tool: &str, args: &[&str]) -> Tool {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-tests/scripts/kafka-tool.sh");
        let mut child = Command::new(script)
            .arg(tool)
            .args(args)
            .env("STRAND_KAFKA_DIR", &dist.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("a Kafka tool");
        let out = child.stdout.take().expect("piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // The tools print one JSON object per line; anything else
                // is a log line.
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().expect("not poisoned").push(v);
                }
            }
        });
        Tool { child, lines }
    }

    /// The values of this tool's events named `name`.
    pub fn values(&self, name: &str) -> Vec<String> {
        self.lines
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|v| v["name"] == name)
            .filter_map(|v| v["value"].as_str().map(str::to_string))
            .collect()
    }

    /// The last few events, for a failure's message.
    pub fn tail(&self) -> String {
        let lines = self.lines.lock().expect("not poisoned");
        let from = lines.len().saturating_sub(5);
        lines[from..]
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn count(&self, name: &str) -> usize {
        self.lines
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|v| v["name"] == name)
            .count()
    }
}

impl Tool {
    /// SIGTERM to the tool's process (kafka-tool.sh execs java), then
    /// waits for it to exit.
    pub fn terminate(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: a plain kill(2) of our own child, which we have not reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        // By PID: the tool's own process.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a verifiable producer and consumer pair delivered.
pub struct Delivery {
    /// Values the producer sent (its summary).
    pub sent: u64,
    pub acked: std::collections::BTreeSet<String>,
    pub failed: Vec<String>,
    /// How often the consumer read each of the producer's values.
    pub consumed: std::collections::BTreeMap<String, usize>,
    /// How many records the consumer read that `others` claimed.
    pub others: usize,
}

/// Stops the producer (it flushes what it sent), waits until the consumer
/// has read every acknowledged value, and checks what a user of acks=all
/// relies on: every send reported once, nothing consumed twice, nothing
/// consumed that was not sent. Records `others` claims (a test's own,
/// written beside the producer) are counted apart.
pub fn finish_delivery(
    producer: &mut Tool,
    consumer: &Tool,
    timeout: std::time::Duration,
    others: &dyn Fn(&str) -> bool,
) -> Delivery {
    producer.terminate();
    let sent = producer
        .lines
        .lock()
        .expect("not poisoned")
        .iter()
        .find(|v| v["name"] == "tool_data")
        .and_then(|v| v["sent"].as_u64())
        .expect("the producer's summary");
    let acked: std::collections::BTreeSet<String> = producer
        .values("producer_send_success")
        .into_iter()
        .collect();
    let failed = producer.values("producer_send_error");
    println!(
        "producer: {sent} sent, {} acknowledged, {} failed",
        acked.len(),
        failed.len()
    );
    assert_eq!(
        acked.len() + failed.len(),
        sent as usize,
        "every send reported once"
    );
    super::eventually("every acknowledged message consumed", timeout, || {
        let consumed: std::collections::BTreeSet<String> =
            consumer.values("record_data").into_iter().collect();
        acked.is_subset(&consumed).then_some(())
    });
    let mut consumed = std::collections::BTreeMap::<String, usize>::new();
    let mut other = 0;
    for v in consumer.values("record_data") {
        if others(&v) {
            other += 1;
        } else {
            *consumed.entry(v).or_default() += 1;
        }
    }
    let twice: Vec<_> = consumed.iter().filter(|(_, n)| **n > 1).collect();
    let unsent: Vec<_> = consumed
        .keys()
        .filter(|v| v.parse::<u64>().map_or(true, |n| n >= sent))
        .collect();
    println!(
        "consumer: {} records, {} distinct",
        consumed.values().sum::<usize>(),
        consumed.len()
    );
    assert!(twice.is_empty(), "consumed more than once: {twice:?}");
    assert!(unsent.is_empty(), "consumed but never sent: {unsent:?}");
    Delivery {
        sent,
        acked,
        failed,
        consumed,
        others: other,
    }
}

impl Tool {
    /// Kafka's verifiable producer at 400 records/s into `topic`: idempotent,
    /// acks=all, retrying for two minutes (its config written to `dir`).
    pub fn verifiable_producer(dist: &KafkaDist, bootstrap: &str, topic: &str, dir: &Path) -> Tool {
        let config = dir.join("producer.properties");
        std::fs::write(
            &config,
            // The tool sets retries=0 unless told.
            "enable.idempotence=true\nacks=all\nretries=2147483647\ndelivery.timeout.ms=120000\nrequest.timeout.ms=10000\n",
        )
        .expect("producer.properties");
        Tool::start(
            dist,
            "kafka-verifiable-producer",
            &[
                "--bootstrap-server",
                bootstrap,
                "--topic",
                topic,
                "--max-messages",
                // Far more than a run sends: the producer is stopped (SIGTERM,
                // which it answers by flushing what it sent).
                "10000000",
                "--throughput",
                "400",
                "--acks",
                "-1",
                "--producer.config",
                &config.display().to_string(),
            ],
        )
    }

    /// Kafka's verifiable consumer of `topic` in `group`, from the earliest
    /// offset, printing every record; `read_committed` sets its isolation
    /// level (its config written to `dir`).
    pub fn verifiable_consumer(
        dist: &KafkaDist,
        bootstrap: &str,
        topic: &str,
        group: &str,
        read_committed: bool,
        dir: &Path,
    ) -> Tool {
        Self::verifiable_consumer_with(dist, bootstrap, topic, group, read_committed, dir, &[])
    }

    /// With extra arguments (`--group-protocol consumer`).
    pub fn verifiable_consumer_with(
        dist: &KafkaDist,
        bootstrap: &str,
        topic: &str,
        group: &str,
        read_committed: bool,
        dir: &Path,
        extra: &[&str],
    ) -> Tool {
        let config = dir.join("consumer.properties");
        let isolation = if read_committed {
            "read_committed"
        } else {
            "read_uncommitted"
        };
        std::fs::write(&config, format!("isolation.level={isolation}\n"))
            .expect("consumer.properties");
        let config = config.display().to_string();
        let mut args = vec![
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--group-id",
            group,
            "--reset-policy",
            "earliest",
            "--verbose",
            "--consumer.config",
            &config,
        ];
        args.extend_from_slice(extra);
        Tool::start(dist, "kafka-verifiable-consumer", &args)
    }
}

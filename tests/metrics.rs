//! The metrics and health listener (`strand.http.listener`) as an operator
//! uses it: every metric README.md documents is served; on a 3-node
//! cluster under load and faults the counters and gauges say what happened
//! (records and bytes in and out, an under-replicated partition while a
//! follower is down and none once it is back, ISR shrinks and expands, the
//! leadership moving when its broker is killed, one active controller,
//! whose metadata commits are timed);
//! `/health/ready` is false until a restarted broker has recovered its logs
//! and can serve every partition, and true from then on.

mod common;

use common::Client;
use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
use kafka_protocol::messages::BrokerId;
use std::time::{Duration, Instant};
use strand_compat_tests::cluster::{Cluster, ClusterSpec, NodeState};

/// The samples of a scrape: (series with labels, value).
fn scrape(addr: &str) -> Vec<(String, f64)> {
    let (code, body) = common::http_get(addr, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The value of `series` (name with labels, exactly as served), 0 if absent.
fn value(samples: &[(String, f64)], series: &str) -> f64 {
    samples
        .iter()
        .find(|(s, _)| s == series)
        .map_or(0.0, |(_, v)| *v)
}

/// The metrics README.md's table documents: (name, type, labels).
fn documented() -> Vec<(String, String, String)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find("### Metrics and health")
        .expect("README.md has the metrics section");
    readme[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((
                name.to_string(),
                cells.get(2)?.to_string(),
                cells.get(3)?.to_string(),
            ))
        })
        .collect()
}

fn http(cluster: &Cluster, id: i32) -> String {
    cluster.http_addr(id).expect("an HTTP listener")
}

fn running(cluster: &mut Cluster) -> Vec<i32> {
    cluster
        .node_ids()
        .into_iter()
        .filter(|id| matches!(cluster.state(*id), Ok(NodeState::Running)))
        .collect()
}

const TOPIC: &str = "metered";
const GROUP: &str = "metered-group";
const URP: &str = "kafka_server_replicamanager_underreplicatedpartitions";
const LEADERS: &str = "kafka_server_replicamanager_leadercount";

#[test]
fn metrics_follow_load_and_faults_on_three_nodes() {
    let spec = ClusterSpec::combined(3)
        .with_http_listener()
        .with_override("replica.lag.time.max.ms", "2000")
        .with_override("broker.session.timeout.ms", "6000")
        .with_override("broker.heartbeat.interval.ms", "500")
        .with_override("auto.create.topics.enable", "false");
    let mut cluster = Cluster::start(&common::strand_bin(), spec).expect("the cluster starts");
    let b1 = cluster.broker_addr(1).unwrap();
    // The topic is led by the group's coordinator, which then knows the
    // group's lag on it.
    let coordinator = common::eventually("the group coordinator", Duration::from_secs(60), || {
        match common::find_coordinator(&b1, GROUP, 0, Duration::from_secs(5))? {
            (0, id) => Some(id),
            _ => None,
        }
    });
    let mut replicas = vec![coordinator];
    replicas.extend([1, 2, 3].into_iter().filter(|b| *b != coordinator));
    let mut c = Client::connect(&b1).unwrap();
    let t = common::creatable_topic(TOPIC, -1, -1, &[("min.insync.replicas", "2")])
        .with_assignments(vec![CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(replicas.iter().map(|b| BrokerId(*b)).collect())]);
    let resp = common::create_topics(&mut c, vec![t]).unwrap();
    assert_eq!(resp.topics[0].error_code, 0);
    let leader = common::eventually("a leader", Duration::from_secs(30), || {
        let v = common::partition_view(&b1, TOPIC, 0, Duration::from_secs(2))?;
        (v.leader > 0 && v.isr.len() == 3).then_some(v.leader)
    });
    assert_eq!(leader, coordinator, "the preferred replica leads");

    // Records in, through the leader; out, to a consumer.
    let la = cluster.broker_addr(leader).unwrap();
    let mut lc = Client::connect(&la).unwrap();
    let before = scrape(&http(&cluster, leader));
    let mut bytes_written = 0usize;
    for i in 0..50 {
        let values: Vec<String> = (0..10).map(|j| format!("v-{i}-{j}")).collect();
        bytes_written += values.iter().map(String::len).sum::<usize>();
        let (code, _) = common::produce_values(&mut lc, TOPIC, 0, -1, 10_000, &values).unwrap();
        assert_eq!(code, 0);
    }
    let read = common::read_values(&la, TOPIC, 0);
    assert_eq!(read.len(), 500);
    assert_eq!(
        common::offset_commit_simple(&la, GROUP, TOPIC, 0, 100, Duration::from_secs(10)),
        Some(0)
    );
    let after = scrape(&http(&cluster, leader));
    let topic =
        |name: &str| format!("kafka_server_brokertopicmetrics_{name}_total{{topic=\"{TOPIC}\"}}");
    let delta = |series: &str| value(&after, series) - value(&before, series);
    assert_eq!(delta(&topic("messagesin")), 500.0);
    assert!(delta(&topic("bytesin")) > bytes_written as f64);
    assert!(
        delta(&topic("bytesout")) >= delta(&topic("bytesin")),
        "every record was read once"
    );
    assert!(delta("kafka_network_requestmetrics_requests_total{request=\"Produce\"}") >= 50.0);
    assert!(delta("kafka_network_requestmetrics_totaltimems_count{request=\"Produce\"}") >= 50.0);
    assert!(
        delta("kafka_server_brokertopicmetrics_replicationbytesout_total")
            >= delta(&topic("bytesin"))
    );
    assert_eq!(
        value(
            &after,
            &format!("kafka_consumergroup_lag{{consumergroup=\"{GROUP}\",topic=\"{TOPIC}\",partition=\"0\"}}")
        ),
        400.0
    );
    assert_eq!(value(&after, URP), 0.0);
    assert!(value(&after, LEADERS) >= 1.0);
    // Each connection is an authentication on its listener, as Kafka
    // counts them (PLAINTEXT: accepted); none failed.
    let auth = |outcome: &str| {
        format!("kafka_server_socket_server_metrics_{outcome}_authentication_total{{listener=\"PLAINTEXT\"}}")
    };
    assert!(delta(&auth("successful")) >= 1.0);
    assert_eq!(value(&after, &auth("failed")), 0.0);

    // Every documented metric is served: by the leader, which now has a
    // series of each label; the unlabelled ones by every node.
    let docs = documented();
    assert!(docs.len() >= 30, "README's table: {docs:?}");
    for id in cluster.node_ids() {
        let samples = if id == leader {
            after.clone()
        } else {
            scrape(&http(&cluster, id))
        };
        for (name, kind, labels) in &docs {
            if id != leader && !labels.is_empty() {
                continue;
            }
            let prefix = if kind == "histogram" {
                format!("{name}_count")
            } else {
                name.clone()
            };
            assert!(
                samples
                    .iter()
                    .any(|(s, _)| s == &prefix || s.starts_with(&format!("{prefix}{{"))),
                "node {id} does not serve {name}"
            );
        }
    }

    // A follower down while writes go on: the leader shrinks the ISR and
    // its partitions are under-replicated, and none is once the follower is
    // back. (The internal topics' partitions it leads count too.)
    let follower = [1, 2, 3].into_iter().find(|b| *b != leader).unwrap();
    cluster.kill9(follower).unwrap();
    let (code, _) =
        common::produce_values(&mut lc, TOPIC, 0, -1, 10_000, &["after".into()]).unwrap();
    assert_eq!(code, 0);
    let shrinks = "kafka_server_replicamanager_isrshrinks_total";
    let expands = "kafka_server_replicamanager_isrexpands_total";
    common::eventually(
        "the partition under-replicated",
        Duration::from_secs(60),
        || {
            let s = scrape(&http(&cluster, leader));
            (value(&s, URP) >= 1.0 && value(&s, shrinks) >= 1.0).then_some(())
        },
    );
    cluster.restart(follower).unwrap();
    common::eventually(
        "the partition fully replicated again",
        Duration::from_secs(60),
        || {
            let s = scrape(&http(&cluster, leader));
            (value(&s, URP) == 0.0 && value(&s, expands) >= 1.0).then_some(())
        },
    );

    // The leader killed: its leadership moves to a survivor, whose leader
    // count rises; exactly one node is the active controller.
    let counts = |cluster: &mut Cluster| {
        running(cluster)
            .into_iter()
            .map(|id| (id, value(&scrape(&http(cluster, id)), LEADERS)))
            .collect::<Vec<_>>()
    };
    let before = counts(&mut cluster);
    cluster.kill9(leader).unwrap();
    common::eventually("the leadership moved", Duration::from_secs(60), || {
        let now = counts(&mut cluster);
        now.iter()
            .any(|(id, n)| before.iter().any(|(b, m)| b == id && *n >= m + 1.0))
            .then_some(())
    });
    // Exactly one node is the active controller, and it has committed
    // metadata (the killed broker's fencing at least) and timed it.
    common::eventually("one active controller", Duration::from_secs(60), || {
        let scrapes: Vec<Vec<(String, f64)>> = running(&mut cluster)
            .into_iter()
            .map(|id| scrape(&http(&cluster, id)))
            .collect();
        let active: Vec<&Vec<(String, f64)>> = scrapes
            .iter()
            .filter(|s| value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1.0)
            .collect();
        (active.len() == 1
            && value(
                active[0],
                "kafka_server_raft_metrics_commit_latency_ms_count",
            ) >= 1.0
            && value(
                active[0],
                "kafka_controller_controllereventmanager_eventqueueprocessingtimems_count",
            ) >= 1.0)
            .then_some(())
    });
}

/// A broker restarted after kill -9 with data in many partitions: its
/// listener answers before the logs are recovered, not ready; once ready,
/// the broker serves every partition at once; the log shows the recovery's
/// progress.
#[test]
fn ready_only_once_the_logs_are_recovered() {
    const PARTITIONS: i32 = 40;
    let spec = ClusterSpec::combined(1).with_http_listener();
    let mut cluster = Cluster::start(&common::strand_bin(), spec).expect("the node starts");
    let addr = cluster.broker_addr(1).unwrap();
    let health = http(&cluster, 1);
    assert_eq!(
        common::http_get(&health, "/health/live").map(|(c, _)| c),
        Some(200)
    );
    assert_eq!(
        common::http_get(&health, "/health/ready").map(|(c, _)| c),
        Some(200)
    );
    let mut c = Client::connect(&addr).unwrap();
    let resp = common::create_topics(
        &mut c,
        vec![common::creatable_topic("recovering", PARTITIONS, 1, &[])],
    )
    .unwrap();
    assert_eq!(resp.topics[0].error_code, 0);
    for p in 0..PARTITIONS {
        let values: Vec<String> = (0..200)
            .map(|i| format!("{p}-{i}-{}", "x".repeat(200)))
            .collect();
        let (code, _) =
            common::produce_values(&mut c, "recovering", p, -1, 10_000, &values).unwrap();
        assert_eq!(code, 0);
    }
    drop(c);
    cluster.kill9(1).unwrap();

    // Probes from before the restart until the first ready answer.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let prober = {
        let (stop, health, addr) = (stop.clone(), health.clone(), addr.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop.load(std::sync::atomic::Ordering::Acquire) && Instant::now() < deadline {
                match common::http_get(&health, "/health/ready") {
                    Some((200, body)) => {
                        // Ready: every partition is served now.
                        let mut c = Client::connect(&addr).expect("ready, so it accepts clients");
                        for p in 0..PARTITIONS {
                            let f = common::fetch_values(&mut c, "recovering", p, 0, 0).unwrap();
                            assert_eq!(f.error_code, 0, "ready, but partition {p} is not served");
                            assert_eq!(f.high_watermark, 200, "partition {p}");
                        }
                        seen.push((200, body));
                        return seen;
                    }
                    Some((code, body)) => seen.push((code, body)),
                    None => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            seen
        })
    };
    cluster.restart(1).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Release);
    let seen = prober.join().unwrap();
    assert_eq!(seen.last().map(|(c, _)| *c), Some(200), "{seen:?}");
    let not_ready: Vec<&String> = seen
        .iter()
        .filter(|(c, _)| *c == 503)
        .map(|(_, b)| b)
        .collect();
    assert!(
        not_ready
            .iter()
            .any(|b| b.contains("\"partitions_loaded\":false")),
        "no answer while the logs were recovered: {seen:?}"
    );
    assert!(not_ready.iter().all(|b| b.contains("\"ready\":false")));
    // The recovery reported its progress, as Kafka's does.
    let log = std::fs::read_to_string(cluster.log_path(1)).unwrap();
    assert!(
        log.contains(&format!(
            "loaded {PARTITIONS} of {PARTITIONS} partitions (100%)"
        )),
        "{log}"
    );
}

/// `/metrics` with 1,000 partitions on one node answers within 50 ms.
#[test]
fn a_scrape_of_a_thousand_partitions_is_quick() {
    let spec = ClusterSpec::combined(1).with_http_listener();
    let cluster = Cluster::start(&common::strand_bin(), spec).expect("the node starts");
    let mut c = Client::connect(&cluster.broker_addr(1).unwrap()).unwrap();
    let resp =
        common::create_topics(&mut c, vec![common::creatable_topic("wide", 1000, 1, &[])]).unwrap();
    assert_eq!(resp.topics[0].error_code, 0);
    let health = http(&cluster, 1);
    common::eventually("1,000 partitions led", Duration::from_secs(120), || {
        (value(&scrape(&health), LEADERS) >= 1000.0).then_some(())
    });
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            scrape(&health);
            t.elapsed()
        })
        .collect();
    times.sort();
    assert!(
        times[2] < Duration::from_millis(50),
        "scrapes took {times:?}"
    );
}

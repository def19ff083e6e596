//! The status page (`strand.http.listener`'s `/`) in a real browser:
//! headless Chromium (Debian's, installed by the test command) loads it
//! from a 3-node cluster under load, runs its script, and what it renders
//! shows every broker, a topic's replicas and ISR, and charts with data
//! points. The screenshot is kept under the target directory
//! (`status-page.png`; docs/status-page.png is one such).

mod common;

use common::Client;
use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
use kafka_protocol::messages::BrokerId;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use strand_compat_tests::cluster::{Cluster, ClusterSpec};

const TOPIC: &str = "shown";

/// Chromium, headless, on `url` with `args`; its standard output. The
/// virtual time budget lets the page's timers run (a poll every two
/// seconds: several polls), waiting for each fetch to be answered.
fn chromium(url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=12000",
            "--window-size=1300,1200",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `data-points` of the canvas `id` in `dom`.
fn points(dom: &str, id: &str) -> usize {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no {id}"));
    let tag = &dom[at..at + dom[at..].find('>').unwrap()];
    let value = tag.split("data-points=\"").nth(1).unwrap();
    value[..value.find('"').unwrap()].parse().unwrap()
}

#[test]
fn the_status_page_shows_the_cluster_in_a_browser() {
    let spec = ClusterSpec::combined(3)
        .with_http_listener()
        .with_override("auto.create.topics.enable", "false");
    let cluster = Cluster::start(&common::strand_bin(), spec).expect("the cluster starts");
    let b1 = cluster.broker_addr(1).unwrap();
    let mut c = Client::connect(&b1).unwrap();
    let t = common::creatable_topic(TOPIC, -1, -1, &[]).with_assignments(vec![
        CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![BrokerId(1), BrokerId(2), BrokerId(3)]),
    ]);
    assert_eq!(
        common::create_topics(&mut c, vec![t]).unwrap().topics[0].error_code,
        0
    );
    common::eventually("the partition in sync", Duration::from_secs(30), || {
        let v = common::partition_view(&b1, TOPIC, 0, Duration::from_secs(2))?;
        (v.leader == 1 && v.isr.len() == 3).then_some(())
    });

    // Load on broker 1 (the leader) while the page is open.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, b1) = (stop.clone(), b1.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&b1).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) {
                let values: Vec<String> = (0..50).map(|i| format!("v-{n}-{i}")).collect();
                let (code, _) =
                    common::produce_values(&mut c, TOPIC, 0, -1, 10_000, &values).unwrap();
                assert_eq!(code, 0);
                n += 1;
            }
            n
        })
    };
    let url = format!("http://{}/", cluster.http_addr(1).unwrap());
    let dom = chromium(&url, &["--dump-dom"]);
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    chromium(&url, &[&format!("--screenshot={}", shot.display())]);
    stop.store(true, Ordering::Release);
    assert!(writer.join().unwrap() > 0);

    // Every broker, active; the topic's replicas and ISR; charts drawn.
    for id in 1..=3 {
        let addr = cluster.broker_addr(id).unwrap();
        let port = addr.rsplit(':').next().unwrap();
        assert!(
            dom.contains(&format!(
                "<td>{id}</td><td>127.0.0.1:{port}</td><td></td><td class=\"ok\">active</td>"
            )),
            "broker {id} not shown as active:\n{dom}"
        );
    }
    assert!(
        dom.contains(&format!(
            "<td>{TOPIC}</td><td>0</td><td>1</td><td>1,2,3</td><td>1,2,3</td>"
        )),
        "the topic's partition, leader, replicas and ISR:\n{dom}"
    );
    for chart in ["chart-in", "chart-bytes", "chart-latency"] {
        assert!(
            points(&dom, chart) >= 2,
            "{chart} has no data points:\n{dom}"
        );
    }
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}

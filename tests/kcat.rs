//! kcat (librdkafka 2.0.2 as Debian packages it) against Strand: 10,000
//! messages produced with acks=all to an auto-created topic come back
//! identical and in order, also after kill -9 and a restart.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use strand_compat_tests::Broker;

fn kcat_available() -> bool {
    Command::new("kcat")
        .arg("-V")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn produce(addr: &str, topic: &str, lines: &[String]) {
    let mut child = Command::new("kcat")
        .args([
            "-b",
            addr,
            "-P",
            "-t",
            topic,
            "-X",
            "acks=all",
            "-X",
            "enable.idempotence=true",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn kcat");
    {
        let stdin = child.stdin.as_mut().expect("stdin");
        for l in lines {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "kcat producer failed: {status}");
}

fn consume(addr: &str, topic: &str) -> Vec<String> {
    let out = Command::new("kcat")
        .args(["-b", addr, "-C", "-t", topic, "-o", "beginning", "-e", "-q"])
        .output()
        .expect("run kcat");
    assert!(
        out.status.success(),
        "kcat consumer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn kcat_round_trip_survives_kill_9() {
    assert!(
        kcat_available(),
        "kcat is required (the test command installs it)"
    );
    let mut broker = Broker::start(
        &common::strand_bin(),
        &[("auto.create.topics.enable", "true")],
    )
    .unwrap();
    let lines: Vec<String> = (0..10_000)
        .map(|i| format!("message-{i:05}-{}", "x".repeat(i % 50)))
        .collect();
    produce(&broker.addr(), "kcat-topic", &lines);
    assert_eq!(
        consume(&broker.addr(), "kcat-topic"),
        lines,
        "consumed back identical and in order"
    );

    broker.kill9().unwrap();
    broker.restart().unwrap();
    assert_eq!(
        consume(&broker.addr(), "kcat-topic"),
        lines,
        "identical after kill -9 and restart"
    );

    // And the restarted broker keeps taking writes after the recovered tail.
    let more: Vec<String> = (0..100).map(|i| format!("after-restart-{i}")).collect();
    produce(&broker.addr(), "kcat-topic", &more);
    let all = consume(&broker.addr(), "kcat-topic");
    assert_eq!(all.len(), 10_100);
    assert_eq!(&all[10_000..], &more[..]);
}

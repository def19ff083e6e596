//! KIP-848 group records are written as Kafka 4.4 writes them: every record
//! a consumer group writes here (joins, a regex subscription, a static
//! member, a revocation, leaves, a session that ends) is read by Kafka's
//! own serde (`GroupCoordinatorRecordSerde`, from the reference Kafka's
//! jars), which writes back the very same key and value bytes.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::process::Command;

use strand_compat_tests::cluster::KafkaDist;
use strand_group::consumer::codec;
use strand_group::consumer::embedded::{encode_subscription, Subscription};
use strand_group::consumer::{
    Assignment, ClassicJoin, ConsumerGroup, ConsumerGroupConfig, Epoch, HeartbeatRequest, Record,
    TopicId, TopicImage,
};

const REENCODE_JAVA: &str = r#"
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;

public class Reencode {
    static byte[] unhex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return b;
    }
    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x));
        return s.toString();
    }
    public static void main(String[] args) throws Exception {
        GroupCoordinatorRecordSerde serde = new GroupCoordinatorRecordSerde();
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            String[] p = line.split(" ");
            byte[] v = p[1].equals("-") ? null : unhex(p[1]);
            CoordinatorRecord r = serde.deserialize(ByteBuffer.wrap(unhex(p[0])), v == null ? null : ByteBuffer.wrap(v));
            byte[] v2 = serde.serializeValue(r);
            System.out.println(hex(serde.serializeKey(r)) + " " + (v2 == null ? "-" : hex(v2)) + "\t" + r);
        }
    }
}
"#;

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// The records of a group taken through joins and leaves.
fn group_records() -> Vec<Record> {
    let t1 = TopicId::from_bytes([1; 16]);
    let image = TopicImage::new([
        ("orders".to_string(), t1, 4),
        ("orders-eu".to_string(), TopicId::from_bytes([2; 16]), 2),
    ]);
    let cfg = ConsumerGroupConfig::default();
    let mut g = ConsumerGroup::new("g");
    let mut log = Vec::new();
    let mut hb = |g: &mut ConsumerGroup, req: HeartbeatRequest, now: i64| {
        let (answer, records) = g.heartbeat(&req, &image, &cfg, now).expect("heartbeat");
        log.extend(records);
        answer
    };
    let join =
        |id: &str, instance: Option<&str>, names: Option<Vec<String>>, regex: Option<&str>| {
            HeartbeatRequest {
                member_id: id.into(),
                member_epoch: 0,
                instance_id: instance.map(str::to_string),
                rack_id: Some("rack-a".into()),
                rebalance_timeout_ms: 300_000,
                subscribed_topic_names: names,
                subscribed_topic_regex: regex.map(str::to_string),
                server_assignor: Some("uniform".into()),
                owned: Some(Assignment::new()),
                client_id: "consumer-1".into(),
                client_host: "/127.0.0.1".into(),
            }
        };
    let a = hb(
        &mut g,
        join("a", None, Some(vec!["orders".into()]), None),
        0,
    );
    hb(
        &mut g,
        join("b", Some("instance-b"), None, Some("orders.*")),
        1,
    );
    // a owns all of orders; b's join revokes half of it from a.
    let mut beat = join("a", None, None, None);
    beat.member_epoch = a.member_epoch.get();
    beat.rebalance_timeout_ms = -1;
    beat.rack_id = None;
    beat.server_assignor = None;
    beat.owned = a.assignment.clone();
    hb(&mut g, beat, 2);
    // b leaves for now, then for good; a's session ends.
    let mut leave = join("b", Some("instance-b"), None, None);
    leave.member_epoch = Epoch::STATIC_LEAVE.get();
    hb(&mut g, leave.clone(), 3);
    leave.member_epoch = Epoch::LEAVE.get();
    hb(&mut g, leave, 4);
    // A classic member joins (its ClassicMemberMetadata).
    let classic = ClassicJoin {
        member_id: "k".into(),
        rebalance_timeout_ms: 300_000,
        session_timeout_ms: 45_000,
        protocol_type: "consumer".into(),
        protocols: vec![
            (
                "cooperative-sticky".into(),
                encode_subscription(&Subscription {
                    version: 3,
                    topics: vec!["orders".into()],
                    rack_id: Some("rack-b".into()),
                    ..Subscription::default()
                }),
            ),
            ("range".into(), bytes::Bytes::from_static(&[0, 0])),
        ],
        client_id: "classic-1".into(),
        client_host: "/127.0.0.1".into(),
        ..ClassicJoin::default()
    };
    let (_, records) = g
        .classic_join(&classic, &image, &cfg, 5)
        .expect("classic join");
    log.extend(records);
    log.extend(g.tick(1_000_000, &image, &cfg));
    log
}

#[test]
fn kafka_reads_and_writes_our_group_records_byte_for_byte() {
    let records = group_records();
    let kinds: BTreeSet<String> = records
        .iter()
        .map(|r| {
            format!("{r:?}")
                .split([' ', '(', '{'])
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(kinds.len(), 8, "every kind of record is written: {kinds:?}");
    let lines: Vec<String> = records
        .iter()
        .map(|r| {
            let (k, v) = codec::encode("g", r);
            format!("{} {}", hex(&k), v.as_deref().map_or("-".to_string(), hex))
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Reencode.java"), REENCODE_JAVA).unwrap();
    std::fs::write(dir.path().join("records"), lines.join("\n")).unwrap();
    let dist = KafkaDist::locate().expect("the reference Kafka (fetch-kafka.sh)");
    let out = Command::new("java")
        .arg("-cp")
        .arg(format!("{}/libs/*", dist.dir.display()))
        .arg(dir.path().join("Reencode.java"))
        .arg(dir.path().join("records"))
        .output()
        .expect("java runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kafka: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(kafka.len(), lines.len());
    for ((ours, theirs), r) in lines.iter().zip(&kafka).zip(&records) {
        let (bytes, read) = theirs.split_once('\t').unwrap();
        assert_eq!(ours, bytes, "{r:?}\nKafka read: {read}");
        // And what Kafka writes, we read back as the record.
        let (k, v) = bytes.split_once(' ').unwrap();
        let unhex = |s: &str| -> Vec<u8> {
            (0..s.len() / 2)
                .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
                .collect()
        };
        let value = (v != "-").then(|| unhex(v));
        let back = codec::decode(&unhex(k), value.as_deref()).unwrap();
        assert_eq!(back, Some(("g".to_string(), r.clone())));
    }
}

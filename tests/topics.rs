//! Topic deletion on one node, as a user relies on it: once DeleteTopics
//! has answered, nothing of the topic's records ever comes back, neither in
//! a topic re-created under the same name (it starts empty at offset 0)
//! nor after a restart; and the broker's data directory holds only the new
//! topic's partition. The replica manager's plan (`replica_plan`) decides
//! these deletions; this is the path it takes through the binary.

mod common;

use common::{eventually, Client};
use kafka_protocol::messages::{ApiKey, DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::path::{Path, PathBuf};
use std::time::Duration;
use strand_compat_tests::Broker;

const TOPIC: &str = "recreated";

fn delete_topic(c: &mut Client, name: &str) -> i16 {
    let req = DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(StrBytes::from_string(name.to_string()))])
        .with_timeout_ms(15_000);
    let resp: DeleteTopicsResponse = c.call(ApiKey::DeleteTopics, 4, &req).unwrap();
    resp.responses[0].error_code
}

/// Every value of partition 0 from offset 0 up to the HW.
fn read_all(addr: &str) -> Vec<(i64, String)> {
    let mut c = Client::connect(addr).unwrap();
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let f = common::fetch_values(&mut c, TOPIC, 0, offset, 0).unwrap();
        assert_eq!(f.error_code, 0, "fetch at {offset}");
        for (o, v) in &f.records {
            if *o >= offset {
                out.push((*o, String::from_utf8_lossy(v).into_owned()));
            }
        }
        if f.next_offset >= f.high_watermark || f.next_offset == offset {
            return out;
        }
        offset = f.next_offset;
    }
}

/// The partition directories of `TOPIC` under the broker's log directory.
fn partition_dirs(data: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(data.join("data"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(TOPIC))
        })
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn a_deleted_topics_records_never_come_back() {
    let mut broker = Broker::start(&common::strand_bin(), &[]).unwrap();
    let addr = broker.addr();
    let mut c = Client::connect(&addr).unwrap();
    assert_eq!(
        common::create_topic_with(&mut c, TOPIC, 1, 1, &[]).unwrap(),
        0
    );
    let old: Vec<String> = (0..5).map(|i| format!("old-{i}")).collect();
    let first = eventually(
        "the new topic takes writes",
        Duration::from_secs(10),
        || {
            match common::produce_values(&mut c, TOPIC, 0, -1, 5_000, &old).unwrap() {
                (0, base) => Some(base),
                (3 | 6, _) => None, // leadership not applied yet
                (code, _) => panic!("produce answered {code}"),
            }
        },
    );
    assert_eq!(first, 0);
    assert_eq!(read_all(&addr).len(), 5);

    assert_eq!(delete_topic(&mut c, TOPIC), 0);
    // Re-created under the same name: a new topic id, an empty log.
    eventually("the name is free again", Duration::from_secs(10), || {
        match common::create_topic_with(&mut c, TOPIC, 1, 1, &[]).unwrap() {
            0 => Some(()),
            36 => None, // TOPIC_ALREADY_EXISTS while the deletion completes
            code => panic!("create answered {code}"),
        }
    });
    let new = vec!["new-0".to_string()];
    let base = eventually(
        "the re-created topic takes writes",
        Duration::from_secs(10),
        || match common::produce_values(&mut c, TOPIC, 0, -1, 5_000, &new).unwrap() {
            (0, base) => Some(base),
            (3 | 6, _) => None,
            (code, _) => panic!("produce answered {code}"),
        },
    );
    assert_eq!(base, 0, "the re-created topic starts at offset 0");
    assert_eq!(read_all(&addr), vec![(0, "new-0".to_string())]);
    assert_eq!(partition_dirs(broker.data_dir()).len(), 1);

    // And after a restart.
    broker.restart().unwrap();
    let after = eventually(
        "the partition is served again",
        Duration::from_secs(20),
        || {
            let mut c = Client::connect(&addr).ok()?;
            let f = common::fetch_values(&mut c, TOPIC, 0, 0, 0).ok()?;
            (f.error_code == 0).then(|| read_all(&addr))
        },
    );
    assert_eq!(after, vec![(0, "new-0".to_string())]);
    assert_eq!(partition_dirs(broker.data_dir()).len(), 1);
    broker.terminate().unwrap();
}

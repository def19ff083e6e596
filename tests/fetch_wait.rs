//! Fetch limits and the DelayedFetch: a fetch waiting for min_bytes completes
//! when data is appended, not at its max_wait_ms.

mod common;

use bytes::Bytes;
use common::Client;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use strand_compat_tests::Broker;
use strand_protocol::batch::validate_record_set;
use strand_protocol::testing::encode_batch;

const TOPIC: &str = "waiting";

fn produce(c: &mut Client, partition: i32, n: usize) -> i64 {
    let records = Bytes::from(encode_batch(n, -1, -1, -1, Compression::None));
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &req).unwrap();
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0);
    p.base_offset
}

fn fetch_request(
    parts: &[(i32, i64)],
    max_wait_ms: i32,
    min_bytes: i32,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> FetchRequest {
    let partitions = parts
        .iter()
        .map(|(p, o)| {
            fetch_request::FetchPartition::default()
                .with_partition(*p)
                .with_fetch_offset(*o)
                .with_partition_max_bytes(partition_max_bytes)
        })
        .collect();
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(max_bytes)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(partitions)])
}

fn fetch(
    c: &mut Client,
    parts: &[(i32, i64)],
    max_wait_ms: i32,
    min_bytes: i32,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> FetchResponse {
    c.call(
        ApiKey::Fetch,
        11,
        &fetch_request(
            parts,
            max_wait_ms,
            min_bytes,
            max_bytes,
            partition_max_bytes,
        ),
    )
    .unwrap()
}

fn batches(p: &fetch_response::PartitionData) -> Vec<i64> {
    validate_record_set(p.records.as_ref().unwrap())
        .map(|hs| hs.iter().map(|h| h.base_offset).collect())
        .unwrap_or_default()
}

#[test]
fn fetch_limits_and_delayed_fetch_wakeup() {
    let broker = Broker::start(&common::strand_bin(), &[("num.partitions", "2")]).unwrap();
    let mut c = Client::connect(&broker.addr()).unwrap();
    let md = common::auto_create(&mut c, TOPIC);
    assert_eq!(md.topics[0].partitions.len(), 2);
    for _ in 0..3 {
        produce(&mut c, 0, 5);
    }
    produce(&mut c, 1, 5);

    // Whole batches from the one containing the fetch offset.
    let r = fetch(&mut c, &[(0, 7)], 0, 1, 1 << 20, 1 << 20);
    assert_eq!(batches(&r.responses[0].partitions[0]), vec![5, 10]);
    // A partition limit smaller than one batch still returns that whole batch.
    let r = fetch(&mut c, &[(0, 0)], 0, 1, 1 << 20, 10);
    assert_eq!(batches(&r.responses[0].partitions[0]), vec![0]);
    // The response limit: the first partition gets one batch, the next nothing.
    let r = fetch(&mut c, &[(0, 0), (1, 0)], 0, 1, 10, 1 << 20);
    assert_eq!(batches(&r.responses[0].partitions[0]), vec![0]);
    assert!(batches(&r.responses[0].partitions[1]).is_empty());
    // Fetching at the HW with max_wait 0 answers at once, empty (not null).
    let r = fetch(&mut c, &[(0, 15)], 0, 1, 1 << 20, 1 << 20);
    assert_eq!(
        r.responses[0].partitions[0]
            .records
            .as_ref()
            .map(|b| b.len()),
        Some(0)
    );
    assert_eq!(r.responses[0].partitions[0].high_watermark, 15);

    // A fetch that waits far longer than the client's read timeout (30 s)
    // can only answer in time if the append wakes it.
    let addr = broker.addr();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut w = Client::connect(&addr).unwrap();
        w.send(
            ApiKey::Fetch,
            11,
            &fetch_request(&[(1, 5)], 120_000, 1, 1 << 20, 1 << 20),
        )
        .unwrap();
        sent_tx.send(()).unwrap();
        w.receive::<FetchResponse>(ApiKey::Fetch, 11).unwrap()
    });
    sent_rx.recv().unwrap();
    produce(&mut c, 1, 2);
    let r = waiter
        .join()
        .expect("the waiting fetch was answered before its client's read timeout");
    assert_eq!(batches(&r.responses[0].partitions[0]), vec![5]);
    assert_eq!(r.responses[0].partitions[0].high_watermark, 7);
}

//! Idempotent producer end to end: duplicates answered with their original
//! offsets and not appended, out-of-order and fenced epochs rejected, and the
//! state (and producer-id allocation) surviving kill -9 and a clean restart.

mod common;

use bytes::Bytes;
use common::Client;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use strand_compat_tests::Broker;
use strand_protocol::testing::{encode_records, TestRecord};
use strand_protocol::ErrorCode;

const TOPIC: &str = "idem";

fn init_producer_id(c: &mut Client) -> i64 {
    let resp: InitProducerIdResponse = c
        .call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .unwrap();
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.producer_epoch, 0);
    resp.producer_id.0
}

fn produce(c: &mut Client, pid: i64, epoch: i16, seq: i32, n: usize) -> (i16, i64) {
    // Current timestamps: producer state expires producer.id.expiration.ms
    // after a producer's last batch timestamp, as in Kafka.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<TestRecord> = (0..n)
        .map(|i| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from_static(b"value")),
                now,
            )
        })
        .collect();
    let records = Bytes::from(encode_records(&recs, pid, epoch, seq, Compression::None));
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &req).unwrap();
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn high_watermark(c: &mut Client) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1),
            ])]);
    let resp: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &req).unwrap();
    resp.topics[0].partitions[0].offset
}

#[test]
fn idempotent_producer_state_and_ids_survive_restarts() {
    let mut broker = Broker::start(&common::strand_bin(), &[("num.partitions", "1")]).unwrap();
    let mut c = Client::connect(&broker.addr()).unwrap();
    common::auto_create(&mut c, TOPIC);

    let pid = init_producer_id(&mut c);
    assert_eq!(produce(&mut c, pid, 0, 0, 3), (0, 0));
    assert_eq!(produce(&mut c, pid, 0, 3, 3), (0, 3));
    // A retry of an earlier batch: its original offsets, nothing appended.
    assert_eq!(produce(&mut c, pid, 0, 0, 3), (0, 0));
    assert_eq!(high_watermark(&mut c), 6);
    // A gap in the sequence.
    assert_eq!(
        produce(&mut c, pid, 0, 10, 1).0,
        ErrorCode::OutOfOrderSequenceNumber.code()
    );
    // An unknown producer id is accepted at any sequence (state expired or never seen).
    assert_eq!(produce(&mut c, pid + 500, 0, 42, 1), (0, 6));

    broker.kill9().unwrap();
    broker.restart().unwrap();
    let mut c = Client::connect(&broker.addr()).unwrap();
    assert_eq!(
        produce(&mut c, pid, 0, 3, 3),
        (0, 3),
        "duplicate detected after kill -9"
    );
    assert_eq!(produce(&mut c, pid, 0, 6, 2), (0, 7));
    // A new epoch must start at sequence 0; after it, the old epoch is fenced.
    assert_eq!(
        produce(&mut c, pid, 1, 5, 1).0,
        ErrorCode::OutOfOrderSequenceNumber.code()
    );
    assert_eq!(produce(&mut c, pid, 1, 0, 1), (0, 9));
    assert_eq!(
        produce(&mut c, pid, 0, 8, 1).0,
        ErrorCode::InvalidProducerEpoch.code()
    );
    let pid_after_crash = init_producer_id(&mut c);
    assert!(
        pid_after_crash > pid,
        "producer ids never repeat across restarts"
    );

    broker.terminate().unwrap();
    broker.restart().unwrap();
    let mut c = Client::connect(&broker.addr()).unwrap();
    assert_eq!(
        produce(&mut c, pid, 1, 0, 1),
        (0, 9),
        "duplicate detected after a clean restart"
    );
    assert_eq!(produce(&mut c, pid, 1, 1, 1), (0, 10));
    assert_eq!(high_watermark(&mut c), 11);
    assert!(init_producer_id(&mut c) > pid_after_crash);
}

//! Replays the fuzz corpus (fuzz/corpus/TARGET/*: the seeds and what
//! `scripts/fuzz.sh` runs found worth keeping) through the fuzz targets'
//! bodies on stable, so every `scripts/test.sh` run checks that none of
//! those inputs panics. The properties corpus is replayed by the config unit
//! tests (the parser lives in the broker binary).

#[path = "../fuzz/targets.rs"]
mod targets;

use std::path::PathBuf;

fn corpus(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn replay(target: &str, run: fn(&[u8])) {
    let dir = corpus(target);
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "no corpus in {}", dir.display());
    for input in &inputs {
        let data = std::fs::read(input).unwrap();
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{} panics", input.display());
    }
    eprintln!("{target}: {} inputs replayed", inputs.len());
}

#[test]
fn request_corpus() {
    replay("request", targets::request);
}

#[test]
fn record_batch_corpus() {
    replay("record_batch", targets::record_batch);
}

#[test]
fn log_open_corpus() {
    replay("log_open", targets::log_open);
}

#[test]
fn coordinator_state_corpus() {
    replay("coordinator_state", targets::coordinator_state);
}

/// Writes the hand-made seeds (run once with `--ignored`; the files are
/// committed): real requests, record sets in every codec, a partition
/// directory, coordinator records.
#[test]
#[ignore]
fn write_seeds() {
    use bytes::BytesMut;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
    use kafka_protocol::records::Compression;
    use strand_protocol::testing::encode_batch;

    let write = |target: &str, name: &str, data: &[u8]| {
        let dir = corpus(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    };
    fn frame<R: Encodable + HeaderVersion>(key: ApiKey, version: i16, req: &R) -> Vec<u8> {
        let mut b = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(1)
            .with_client_id(Some(StrBytes::from_static_str("seed")))
            .encode(&mut b, key.request_header_version(version))
            .unwrap();
        req.encode(&mut b, version).unwrap();
        b.to_vec()
    }
    let topic = || TopicName(StrBytes::from_static_str("t"));
    let records = encode_batch(3, -1, -1, -1, Compression::None);
    write(
        "request",
        "api_versions_v3",
        &frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()),
    );
    write(
        "request",
        "metadata_v9",
        &frame(
            ApiKey::Metadata,
            9,
            &MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic())),
            ])),
        ),
    );
    write(
        "request",
        "produce_v9",
        &frame(
            ApiKey::Produce,
            9,
            &ProduceRequest::default()
                .with_acks(-1)
                .with_topic_data(vec![produce_request::TopicProduceData::default()
                    .with_name(topic())
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_records(Some(records.clone().into())),
                    ])]),
        ),
    );
    write(
        "request",
        "fetch_v15",
        &frame(
            ApiKey::Fetch,
            15,
            &FetchRequest::default()
                .with_replica_state(
                    fetch_request::ReplicaState::default().with_replica_id(BrokerId(2)),
                )
                .with_topics(vec![
                    fetch_request::FetchTopic::default()
                        .with_partitions(vec![fetch_request::FetchPartition::default()
                            .with_partition_max_bytes(1 << 20)]),
                ]),
        ),
    );
    write(
        "request",
        "create_topics_v5",
        &frame(
            ApiKey::CreateTopics,
            5,
            &CreateTopicsRequest::default().with_topics(vec![
                create_topics_request::CreatableTopic::default()
                    .with_name(topic())
                    .with_num_partitions(3)
                    .with_replication_factor(1),
            ]),
        ),
    );
    for (name, c) in [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let mut set = vec![0u8];
        set.extend(encode_batch(4, -1, -1, -1, c));
        write("record_batch", &format!("set_{name}"), &set);
    }
    // Mode 1: codec zstd, 1 record, a records section to decompress.
    write(
        "record_batch",
        "built_zstd",
        &[1, 4, 0, 0, 1, 0, 0, 0x28, 0xb5, 0x2f, 0xfd],
    );
    // A partition directory: one segment with three batches, the rest empty.
    let mut segment = Vec::new();
    for n in [1, 2, 3] {
        let mut b = encode_batch(n, -1, -1, -1, Compression::None);
        let base = segment_offsets(&segment);
        strand_protocol::batch::assign_offset_and_epoch(&mut b, base, 0);
        segment.extend(b);
    }
    segment.resize(segment.len().div_ceil(16) * 16, 0);
    let mut dir = vec![(segment.len() / 16) as u8];
    dir.extend(&segment);
    dir.extend([0u8; 9]);
    write("log_open", "three_batches", &dir);
    let record = strand_txn::coordinator::TxnRecord {
        producer_id: strand_types::ProducerId::from_wire(7),
        previous_producer_id: None,
        producer_epoch: strand_types::ProducerEpoch::from_wire(1),
        last_producer_epoch: None,
        next_producer_id: None,
        transaction_version: 0,
        timeout_ms: 60_000,
        state: strand_txn::coordinator::TxnState::Ongoing,
        partitions: [("t".to_string(), 0)].into_iter().collect(),
        start_timestamp: 1,
        last_update_timestamp: 2,
    };
    let key = strand_txn::txn_log::encode_key("tx");
    let mut input = vec![key.len() as u8];
    input.extend(&key);
    input.extend(&strand_txn::txn_log::encode_value(&record));
    write("coordinator_state", "ongoing", &input);
    write(
        "properties",
        "server_properties",
        &std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/server.properties"))
            .unwrap(),
    );
}

/// The next offset after the batches in `segment`.
fn segment_offsets(segment: &[u8]) -> i64 {
    strand_protocol::batch::BatchIter::new(segment)
        .last()
        .map(|(_, h)| h.next_offset())
        .unwrap_or(0)
}

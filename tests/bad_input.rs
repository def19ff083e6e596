//! Bad input over a raw socket: each case gets Kafka's error code or a closed
//! connection, never a crash, and the broker then serves a normal client.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::Client;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::records::Compression;
use strand_compat_tests::Broker;
use strand_protocol::testing::encode_batch;
use strand_protocol::ErrorCode;

fn produce_req(topic: &str, records: Vec<u8>) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(records)))])])
}

fn produce_code(c: &mut Client, topic: &str, records: Vec<u8>) -> (i16, i64) {
    let resp: ProduceResponse = c
        .call(ApiKey::Produce, 9, &produce_req(topic, records))
        .unwrap();
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn create_topic(c: &mut Client, name: &str, configs: &[(&str, &str)]) {
    let code = common::create_topic_with(c, name, 1, 1, configs).unwrap();
    assert_eq!(code, 0, "CreateTopics {name}");
}

fn raw_header(api_key: i16, version: i16, correlation: i32) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_i16(api_key);
    b.put_i16(version);
    b.put_i32(correlation);
    b.put_i16(4);
    b.put_slice(b"test");
    b
}

#[test]
fn bad_input_gets_errors_or_close_and_broker_keeps_serving() {
    let broker = Broker::start(
        &common::strand_bin(),
        &[
            ("socket.request.max.bytes", "1048576"),
            ("message.max.bytes", "20000"),
        ],
    )
    .unwrap();
    let addr = broker.addr();
    let mut c = Client::connect(&addr).unwrap();
    create_topic(&mut c, "bad", &[]);
    create_topic(&mut c, "small", &[("max.message.bytes", "200")]);

    // Good batch first: offsets 0..=2.
    assert_eq!(
        produce_code(
            &mut c,
            "bad",
            encode_batch(3, -1, -1, -1, Compression::None)
        ),
        (0, 0)
    );

    // Bad CRC -> CORRUPT_MESSAGE, nothing appended.
    let mut b = encode_batch(2, -1, -1, -1, Compression::None);
    let n = b.len();
    b[n - 1] ^= 0xff;
    assert_eq!(
        produce_code(&mut c, "bad", b).0,
        ErrorCode::CorruptMessage.code()
    );

    // Wrong record count (CRC fixed up so only the count is wrong) ->
    // INVALID_RECORD, as Kafka answers (tests/differential.rs).
    let mut b = encode_batch(2, -1, -1, -1, Compression::None);
    b[57..61].copy_from_slice(&7i32.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(
        produce_code(&mut c, "bad", b).0,
        ErrorCode::InvalidRecord.code()
    );

    // Truncated batch -> INVALID_RECORD.
    let b = encode_batch(2, -1, -1, -1, Compression::None);
    assert_eq!(
        produce_code(&mut c, "bad", b[..b.len() - 5].to_vec()).0,
        ErrorCode::InvalidRecord.code()
    );

    // Over message.max.bytes (broker) and over the topic's max.message.bytes -> MESSAGE_TOO_LARGE.
    assert_eq!(
        produce_code(
            &mut c,
            "bad",
            encode_batch(1200, -1, -1, -1, Compression::None)
        )
        .0,
        ErrorCode::MessageTooLarge.code()
    );
    assert_eq!(
        produce_code(
            &mut c,
            "small",
            encode_batch(20, -1, -1, -1, Compression::None)
        )
        .0,
        ErrorCode::MessageTooLarge.code()
    );

    // Invalid topic name -> INVALID_TOPIC_EXCEPTION.
    assert_eq!(
        produce_code(
            &mut c,
            "bad topic!",
            encode_batch(1, -1, -1, -1, Compression::None)
        )
        .0,
        ErrorCode::InvalidTopicException.code()
    );
    let md: MetadataResponse = c
        .call(
            ApiKey::Metadata,
            9,
            &MetadataRequest::default()
                .with_allow_auto_topic_creation(true)
                .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
                )
                .with_name(Some(TopicName(StrBytes::from_static_str("bad topic!"))))])),
        )
        .unwrap();
    assert_eq!(
        md.topics[0].error_code,
        ErrorCode::InvalidTopicException.code()
    );

    // None of the rejected batches used an offset: the next good one gets offset 3.
    assert_eq!(
        produce_code(
            &mut c,
            "bad",
            encode_batch(1, -1, -1, -1, Compression::None)
        ),
        (0, 3)
    );

    // Unsupported ApiVersions version -> v0 UNSUPPORTED_VERSION that still lists our ranges.
    let mut raw = Client::connect(&addr).unwrap();
    raw.send_raw(&raw_header(18, 99, 7)).unwrap();
    let mut frame = raw.read_frame().unwrap();
    let correlation = i32::from_be_bytes(frame[..4].try_into().unwrap());
    assert_eq!(correlation, 7);
    let _ = bytes::Buf::get_i32(&mut frame);
    let av = ApiVersionsResponse::decode(&mut frame, 0).unwrap();
    assert_eq!(av.error_code, ErrorCode::UnsupportedVersion.code());
    let (_, served_max) = strand_protocol::api::advertised(ApiKey::ApiVersions).unwrap();
    assert!(av
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::ApiVersions as i16 && k.max_version == served_max));

    // Cases where Kafka closes the connection.
    type Case = (&'static str, Box<dyn Fn(&mut Client)>);
    let closes: Vec<Case> = vec![
        (
            "length over socket.request.max.bytes",
            Box::new(|c: &mut Client| {
                use std::io::Write;
                c.stream.write_all(&(50_000_000i32).to_be_bytes()).unwrap();
            }),
        ),
        (
            "negative length",
            Box::new(|c: &mut Client| {
                use std::io::Write;
                c.stream.write_all(&(-1i32).to_be_bytes()).unwrap();
            }),
        ),
        (
            "unknown api key",
            Box::new(|c: &mut Client| c.send_raw(&raw_header(999, 0, 1)).unwrap()),
        ),
        (
            "unsupported version",
            Box::new(|c: &mut Client| {
                c.send_raw(&raw_header(ApiKey::Produce as i16, 99, 1))
                    .unwrap()
            }),
        ),
        (
            "truncated frame body",
            Box::new(|c: &mut Client| {
                let mut h = raw_header(ApiKey::Metadata as i16, 9, 1);
                h.put_u8(0x80); // a compact array length varint cut short
                c.send_raw(&h).unwrap();
            }),
        ),
        (
            "array count of 2^31 in a tiny frame (must not drive an allocation)",
            Box::new(|c: &mut Client| {
                let mut h = raw_header(ApiKey::Metadata as i16, 1, 1);
                h.put_i32(i32::MAX);
                c.send_raw(&h).unwrap();
            }),
        ),
        (
            "garbage produce body",
            Box::new(|c: &mut Client| {
                let mut h = raw_header(ApiKey::Produce as i16, 7, 1);
                h.put_slice(&[0xff; 13]);
                c.send_raw(&h).unwrap();
            }),
        ),
    ];
    for (what, send) in closes {
        let mut c = Client::connect(&addr).unwrap();
        send(&mut c);
        assert!(c.is_closed(), "{what}: the broker closes the connection");
    }

    // A truncated frame (length says more than arrives, then the peer goes away) is harmless too.
    {
        let mut c = Client::connect(&addr).unwrap();
        use std::io::Write;
        c.stream.write_all(&100i32.to_be_bytes()).unwrap();
        c.stream.write_all(&[0, 3, 0]).unwrap();
    }

    // The broker still serves a normal client, and the data is intact.
    let mut c = Client::connect(&addr).unwrap();
    let fetch = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("bad")))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &fetch).unwrap();
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 4);
    let headers = strand_protocol::batch::validate_record_set(p.records.as_ref().unwrap()).unwrap();
    assert_eq!(
        headers.iter().map(|h| h.base_offset).collect::<Vec<_>>(),
        vec![0, 3]
    );
}

/// One request frame with `correlation`, as a client that pipelines writes
/// it (length prefix included).
fn request_frame<
    Req: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::HeaderVersion,
>(
    key: ApiKey,
    version: i16,
    correlation: i32,
    req: &Req,
) -> Vec<u8> {
    use kafka_protocol::protocol::Encodable;
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("pipelined")))
        .encode(&mut body, key.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// A response frame's correlation id and body.
fn response_of(c: &mut Client, key: ApiKey, version: i16) -> (i32, Bytes) {
    let mut frame = c.read_frame().unwrap();
    let header = ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
    (header.correlation_id, frame)
}

/// A client may write its next requests before the first is answered (every
/// Kafka client keeps several in flight), and the broker reads the next one
/// while it serves the one before. What a client relies on holds: each is
/// answered, in the order sent, and applied in that order; an acks=0 produce
/// written just before the client closes its connection is still appended;
/// a bad frame, or the client's half-close, right behind a request that
/// waits closes the connection only after that request is answered.
#[test]
fn requests_written_back_to_back_are_served_in_order() {
    let broker = Broker::start(
        &common::strand_bin(),
        &[("socket.request.max.bytes", "1048576")],
    )
    .unwrap();
    let addr = broker.addr();
    let mut c = Client::connect(&addr).unwrap();
    create_topic(&mut c, "pipe", &[]);

    // 50 produces in one write, each a different number of records.
    let produces: Vec<usize> = (1..=50).map(|i| i % 7 + 1).collect();
    let mut burst = Vec::new();
    for (i, records) in produces.iter().enumerate() {
        let req = produce_req(
            "pipe",
            encode_batch(*records, -1, -1, -1, Compression::None),
        );
        burst.extend(request_frame(ApiKey::Produce, 9, 1000 + i as i32, &req));
    }
    use std::io::Write;
    c.stream.write_all(&burst).unwrap();
    let mut next_offset = 0i64;
    for (i, records) in produces.iter().enumerate() {
        let (correlation, mut body) = response_of(&mut c, ApiKey::Produce, 9);
        assert_eq!(correlation, 1000 + i as i32, "answered in the order sent");
        let r = ProduceResponse::decode(&mut body, 9).unwrap();
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(
            (p.error_code, p.base_offset),
            (0, next_offset),
            "produce {i}"
        );
        next_offset += *records as i64;
    }

    // acks=0, then the client goes away at once: the records are still
    // appended (nothing is answered to say otherwise).
    {
        let mut gone = Client::connect(&addr).unwrap();
        let req = produce_req("pipe", encode_batch(4, -1, -1, -1, Compression::None)).with_acks(0);
        gone.stream
            .write_all(&request_frame(ApiKey::Produce, 9, 1, &req))
            .unwrap();
        gone.stream.shutdown(std::net::Shutdown::Both).unwrap();
    }
    let end = next_offset + 4;
    common::eventually(
        "the acks=0 records",
        std::time::Duration::from_secs(10),
        || {
            let fetched = common::fetch_values(&mut c, "pipe", 0, 0, 0).unwrap();
            (fetched.high_watermark == end).then_some(())
        },
    );

    // A fetch that waits (nothing past the end yet) with, right behind it
    // in one write, a bad length prefix, or the client's half-close: the
    // fetch is answered when its wait is over, and only then does the
    // connection close.
    let waiting_fetch = FetchRequest::default()
        .with_max_wait_ms(300)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("pipe")))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(end)
                .with_partition_max_bytes(1 << 20)])]);
    for half_close in [false, true] {
        let mut c = Client::connect(&addr).unwrap();
        let mut frames = request_frame(ApiKey::Fetch, 11, 77, &waiting_fetch);
        if !half_close {
            frames.extend_from_slice(&50_000_000i32.to_be_bytes());
        }
        c.stream.write_all(&frames).unwrap();
        if half_close {
            c.stream.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let (correlation, mut body) = response_of(&mut c, ApiKey::Fetch, 11);
        assert_eq!(correlation, 77, "half-close {half_close}");
        let r = FetchResponse::decode(&mut body, 11).unwrap();
        let p = &r.responses[0].partitions[0];
        assert_eq!((p.error_code, p.high_watermark), (0, end));
        assert!(c.is_closed(), "half-close {half_close}: closed after");
    }
}

//! A minimal blocking Kafka client for tests: encodes requests with the
//! kafka-protocol crate and reads responses by correlation id.
#![allow(dead_code)]

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

pub fn strand_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_strand"))
}

pub struct Client {
    pub stream: TcpStream,
    correlation: i32,
}

impl Client {
    pub fn connect(addr: &str) -> std::io::Result<Client> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            correlation: 0,
        })
    }

    /// Sends one request and returns its decoded response.
    pub fn call<Req: Encodable + HeaderVersion, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> std::io::Result<Resp> {
        self.send(key, version, req)?;
        self.receive(key, version)
    }

    /// Writes one request (the first half of `call`).
    pub fn send<Req: Encodable + HeaderVersion>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> std::io::Result<()> {
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("strand-test")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, key.request_header_version(version))
            .map_err(io_err)?;
        req.encode(&mut body, version).map_err(io_err)?;
        self.send_raw(&body)
    }

    /// Reads the response to the last request sent (the second half of `call`).
    pub fn receive<Resp: Decodable>(&mut self, key: ApiKey, version: i16) -> std::io::Result<Resp> {
        let mut frame = self.read_frame()?;
        let rh = ResponseHeader::decode(&mut frame, key.response_header_version(version))
            .map_err(io_err)?;
        assert_eq!(
            rh.correlation_id, self.correlation,
            "responses come in request order"
        );
        Resp::decode(&mut frame, version).map_err(io_err)
    }

    /// Writes a size prefix and the body.
    pub fn send_raw(&mut self, body: &[u8]) -> std::io::Result<()> {
        let mut out = BytesMut::with_capacity(body.len() + 4);
        out.put_i32(body.len() as i32);
        out.put_slice(body);
        self.stream.write_all(&out)
    }

    pub fn read_frame(&mut self) -> std::io::Result<Bytes> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len)?;
        let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut buf)?;
        Ok(Bytes::from(buf))
    }

    /// True when the broker has closed the connection (EOF or reset).
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }
}

fn io_err<E: std::fmt::Display>(e: E) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Auto-creates `topic` through Metadata, as a client would; returns the response.
pub fn auto_create(c: &mut Client, topic: &str) -> kafka_protocol::messages::MetadataResponse {
    use kafka_protocol::messages::{
        metadata_request::MetadataRequestTopic, MetadataRequest, TopicName,
    };
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_string(topic.to_string())),
        ))]));
    let md: kafka_protocol::messages::MetadataResponse = c.call(ApiKey::Metadata, 9, &req).unwrap();
    assert_eq!(md.topics[0].error_code, 0, "auto-create {topic}");
    md
}

impl Client {
    /// Like [`Client::connect`], with `timeout` for the connect and for every
    /// read and write (a SIGSTOPped broker accepts connections but never answers).
    pub fn connect_timeout(addr: &str, timeout: Duration) -> std::io::Result<Client> {
        let sa: std::net::SocketAddr = addr.parse().map_err(io_err)?;
        let stream = TcpStream::connect_timeout(&sa, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            correlation: 0,
        })
    }
}

/// Polls `check` every 100 ms until it returns `Some`, panicking with `what`
/// after `timeout`.
pub fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// CreateTopics (v5) of one topic with `replication_factor` and topic configs;
/// returns the topic's error code.
pub fn create_topic_with(
    c: &mut Client,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(&str, &str)],
) -> std::io::Result<i16> {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, TopicName};
    let t = CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_string())))
        .with_num_partitions(partitions)
        .with_replication_factor(replication_factor)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(k.to_string()))
                        .with_value(Some(StrBytes::from_string(v.to_string())))
                })
                .collect(),
        );
    let resp: CreateTopicsResponse = c.call(
        ApiKey::CreateTopics,
        5,
        &CreateTopicsRequest::default()
            .with_topics(vec![t])
            .with_timeout_ms(15_000),
    )?;
    Ok(resp.topics[0].error_code)
}

/// One partition as a broker's Metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionView {
    pub error_code: i16,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// Metadata (v9) of `topic` from the broker at `addr`, partition `partition`;
/// `None` when the broker does not answer within `timeout` or does not know it.
pub fn partition_view(
    addr: &str,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Option<PartitionView> {
    use kafka_protocol::messages::{
        metadata_request::MetadataRequestTopic, MetadataRequest, MetadataResponse, TopicName,
    };
    let mut c = Client::connect_timeout(addr, timeout).ok()?;
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_string(topic.to_string())),
        ))]));
    let md: MetadataResponse = c.call(ApiKey::Metadata, 9, &req).ok()?;
    let t = md.topics.first()?;
    if t.error_code != 0 {
        return None;
    }
    let p = t
        .partitions
        .iter()
        .find(|p| p.partition_index == partition)?;
    let mut isr: Vec<i32> = p.isr_nodes.iter().map(|b| b.0).collect();
    isr.sort_unstable();
    Some(PartitionView {
        error_code: p.error_code,
        leader: p.leader_id.0,
        leader_epoch: p.leader_epoch,
        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
        isr,
    })
}

/// Produce (v9) of one non-idempotent batch of `values` (keyless, current
/// timestamps) to `topic`/`partition`: (error code, base offset).
pub fn produce_values(
    c: &mut Client,
    topic: &str,
    partition: i32,
    acks: i16,
    timeout_ms: i32,
    values: &[String],
) -> std::io::Result<(i16, i64)> {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<strand_protocol::testing::TestRecord> = values
        .iter()
        .map(|v| (None, Some(Bytes::from(v.clone())), now))
        .collect();
    let records = Bytes::from(strand_protocol::testing::encode_records(
        &recs,
        -1,
        -1,
        -1,
        kafka_protocol::records::Compression::None,
    ));
    let req = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &req)?;
    let p = &resp.responses[0].partition_responses[0];
    Ok((p.error_code, p.base_offset))
}

/// What one consumer Fetch of one partition returned.
#[derive(Clone, Debug, Default)]
pub struct Fetched {
    pub error_code: i16,
    pub high_watermark: i64,
    /// (offset, value) of every record of the whole batches returned, including
    /// records before the fetch offset when a batch starts earlier.
    pub records: Vec<(i64, Bytes)>,
    /// Offset after the last whole batch returned (the fetch offset if none).
    pub next_offset: i64,
}

/// One consumer Fetch (v11, read_uncommitted, replica id -1) of
/// `topic`/`partition` at `offset`.
pub fn fetch_values(
    c: &mut Client,
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
) -> std::io::Result<Fetched> {
    use kafka_protocol::messages::{
        fetch_request, BrokerId, FetchRequest, FetchResponse, TopicName,
    };
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(4 << 20)
        .with_isolation_level(0)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(4 << 20)])]);
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &req)?;
    let p = &resp.responses[0].partitions[0];
    let mut out = Fetched {
        error_code: p.error_code,
        high_watermark: p.high_watermark,
        records: Vec::new(),
        next_offset: offset,
    };
    let data = p.records.clone().unwrap_or_default();
    let mut pos = 0;
    while pos < data.len() {
        let Ok(h) = strand_protocol::batch::BatchHeader::parse(&data[pos..]) else {
            break;
        };
        let end = pos + h.total_size();
        if end > data.len() {
            break; // a partial trailing batch
        }
        let mut buf = data.slice(pos..end);
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).map_err(io_err)?;
        for r in set.records {
            out.records
                .push((r.offset, r.value.clone().unwrap_or_default()));
        }
        out.next_offset = h.next_offset();
        pos = end;
    }
    Ok(out)
}

//! A minimal blocking Kafka client for tests: encodes requests with the
//! kafka-protocol crate and reads responses by correlation id.
#![allow(dead_code)]

pub mod facts;
pub mod tool;

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

/// Every record value of `topic`/`partition` the broker at `addr` serves,
/// from the log start to its high watermark (a follower's copy too: a
/// fetch with no leader epoch).
pub fn read_values(addr: &str, topic: &str, partition: i32) -> Vec<String> {
    let mut c = Client::connect(addr).unwrap();
    let mut values = Vec::new();
    let mut offset = 0;
    loop {
        let f = fetch_values(&mut c, topic, partition, offset, 0).unwrap();
        assert_eq!(f.error_code, 0, "fetch from {addr}");
        for (o, v) in &f.records {
            if *o >= offset {
                values.push(String::from_utf8(v.to_vec()).expect("a value the test wrote"));
            }
        }
        if f.next_offset >= f.high_watermark || f.next_offset == offset {
            return values;
        }
        offset = f.next_offset;
    }
}

/// IncrementalAlterConfigs (v1) of one config of one resource (Kafka's
/// resource type: 2 topic, 4 broker, 8 broker logger, 32 group): `value` None
/// deletes it. The answer's (error code, message).
pub fn alter_config(
    c: &mut Client,
    resource_type: i8,
    resource: &str,
    key: &str,
    value: Option<&str>,
) -> (i16, String) {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{
        IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let r: IncrementalAlterConfigsResponse = c
        .call(
            ApiKey::IncrementalAlterConfigs,
            1,
            &IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(s(resource))
                    .with_configs(vec![AlterableConfig::default()
                        .with_name(s(key))
                        .with_config_operation(if value.is_some() { 0 } else { 1 })
                        .with_value(value.map(s))]),
            ]),
        )
        .expect("IncrementalAlterConfigs answers");
    let r = &r.responses[0];
    (
        r.error_code,
        r.error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

/// The fault-injecting library (`compat-tests/faultfs`), built beside the
/// test executable (a dev-dependency).
pub fn faultfs_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let lib = exe.with_file_name("libstrand_faultfs.so");
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
}

pub struct Client {
    pub stream: TcpStream,
    correlation: i32,
}

impl Client {
    pub fn from_stream(stream: TcpStream) -> Client {
        Client {
            stream,
            correlation: 0,
        }
    }

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
    /// Whether the broker closes this connection (end of stream or a reset)
    /// before the read timeout; a timeout means it is still open.
    pub fn is_closed(&mut self) -> bool {
        use std::io::ErrorKind;
        let mut b = [0u8; 1];
        match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
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
    let t = creatable_topic(name, partitions, replication_factor, configs);
    Ok(create_topics(c, vec![t])?.topics[0].error_code)
}

/// A CreateTopics entry with these topic configs.
pub fn creatable_topic(
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(&str, &str)],
) -> kafka_protocol::messages::create_topics_request::CreatableTopic {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::TopicName;
    CreatableTopic::default()
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
        )
}

/// CreateTopics (v5, 15 s timeout).
pub fn create_topics(
    c: &mut Client,
    topics: Vec<kafka_protocol::messages::create_topics_request::CreatableTopic>,
) -> std::io::Result<kafka_protocol::messages::CreateTopicsResponse> {
    use kafka_protocol::messages::CreateTopicsRequest;
    c.call(
        ApiKey::CreateTopics,
        5,
        &CreateTopicsRequest::default()
            .with_topics(topics)
            .with_timeout_ms(15_000),
    )
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
    let values: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
    let resp = produce_batch(c, topic, partition, acks, timeout_ms, &values)?;
    let p = &resp.responses[0].partition_responses[0];
    Ok((p.error_code, p.base_offset))
}

/// [`produce_values`]' request, answered with the whole response.
pub fn produce_batch(
    c: &mut Client,
    topic: &str,
    partition: i32,
    acks: i16,
    timeout_ms: i32,
    values: &[&[u8]],
) -> std::io::Result<kafka_protocol::messages::ProduceResponse> {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let recs: Vec<strand_protocol::testing::TestRecord> = values
        .iter()
        .map(|v| (None, Some(Bytes::copy_from_slice(v)), now))
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
    c.call(ApiKey::Produce, 9, &req)
}

/// What one consumer Fetch of one partition returned.
#[derive(Clone, Debug, Default)]
pub struct Fetched {
    pub error_code: i16,
    pub high_watermark: i64,
    /// (offset, value) of every record of the whole batches returned, including
    /// records before the fetch offset when a batch starts earlier.
    pub records: Vec<(i64, Bytes)>,
    /// The offsets among `records` that are control records (transaction
    /// markers).
    pub control: Vec<i64>,
    /// Offset after the last whole batch returned (the fetch offset if none).
    pub next_offset: i64,
}

/// One consumer Fetch (v11, read_uncommitted, replica id -1) of
/// `topic`/`partition` at `offset`, with no current leader epoch (any
/// replica may answer it, KIP-392).
pub fn fetch_values(
    c: &mut Client,
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
) -> std::io::Result<Fetched> {
    fetch_values_at_epoch(c, topic, partition, offset, max_wait_ms, -1)
}

/// [`fetch_values`] with the current leader epoch a client knows (KIP-320):
/// a replica that knows a later epoch answers FENCED_LEADER_EPOCH, as a
/// client that learned its leader from older metadata is told.
pub fn fetch_values_at_epoch(
    c: &mut Client,
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
    current_leader_epoch: i32,
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
                .with_current_leader_epoch(current_leader_epoch)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(4 << 20)])]);
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &req)?;
    let p = &resp.responses[0].partitions[0];
    let mut out = Fetched {
        error_code: p.error_code,
        high_watermark: p.high_watermark,
        records: Vec::new(),
        control: Vec::new(),
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
            if h.is_control() {
                out.control.push(r.offset);
            }
            out.records
                .push((r.offset, r.value.clone().unwrap_or_default()));
        }
        out.next_offset = h.next_offset();
        pos = end;
    }
    Ok(out)
}

/// FindCoordinator (v3) of `key` with `key_type` (0 = group) at the broker at
/// `addr`: (error code, coordinator node id); `None` when the broker does not
/// answer within `timeout`.
pub fn find_coordinator(
    addr: &str,
    key: &str,
    key_type: i8,
    timeout: Duration,
) -> Option<(i16, i32)> {
    use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    let mut c = Client::connect_timeout(addr, timeout).ok()?;
    let req = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(key.to_string()))
        .with_key_type(key_type);
    let resp: FindCoordinatorResponse = c.call(ApiKey::FindCoordinator, 3, &req).ok()?;
    Some((resp.error_code, resp.node_id.0))
}

/// What OffsetFetch answered for one group and topic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchedOffsets {
    pub error_code: i16,
    /// partition -> (committed offset, -1 when none; partition error code)
    pub partitions: std::collections::BTreeMap<i32, (i64, i16)>,
}

/// OffsetFetch (v6) of `partitions` of `topic` for `group` at the broker at
/// `addr`; `None` when it does not answer within `timeout`.
pub fn offset_fetch(
    addr: &str,
    group: &str,
    topic: &str,
    partitions: &[i32],
    timeout: Duration,
) -> Option<FetchedOffsets> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName};
    let mut c = Client::connect_timeout(addr, timeout).ok()?;
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_indexes(partitions.to_vec())]));
    let resp: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 6, &req).ok()?;
    let mut out = FetchedOffsets {
        error_code: resp.error_code,
        partitions: Default::default(),
    };
    for t in &resp.topics {
        if t.name.0.as_str() != topic {
            continue;
        }
        for p in &t.partitions {
            out.partitions
                .insert(p.partition_index, (p.committed_offset, p.error_code));
        }
    }
    Some(out)
}

/// One member of a consumer group as DescribeGroups describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    /// The decoded consumer-protocol assignment: topic -> partitions (sorted).
    pub assignment: std::collections::BTreeMap<String, Vec<i32>>,
}

/// A group as DescribeGroups describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupView {
    pub error_code: i16,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberView>,
}

/// Decodes a consumer-protocol assignment (version, [topic [partition]],
/// user data); empty bytes decode to an empty assignment.
pub fn decode_consumer_assignment(
    bytes: &Bytes,
) -> std::io::Result<std::collections::BTreeMap<String, Vec<i32>>> {
    use bytes::Buf;
    use kafka_protocol::messages::ConsumerProtocolAssignment;
    let mut out = std::collections::BTreeMap::new();
    if bytes.is_empty() {
        return Ok(out);
    }
    let mut buf = bytes.clone();
    let version = buf.get_i16().clamp(0, 3);
    let a = ConsumerProtocolAssignment::decode(&mut buf, version).map_err(io_err)?;
    for tp in a.assigned_partitions {
        let mut ps = tp.partitions.clone();
        ps.sort_unstable();
        out.entry(tp.topic.0.to_string())
            .or_insert_with(Vec::new)
            .extend(ps);
    }
    for ps in out.values_mut() {
        ps.sort_unstable();
    }
    Ok(out)
}

/// DescribeGroups (v5) of `group` at the broker at `addr`; `None` when it does
/// not answer within `timeout`.
pub fn describe_group(addr: &str, group: &str, timeout: Duration) -> Option<GroupView> {
    use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, GroupId};
    let mut c = Client::connect_timeout(addr, timeout).ok()?;
    let req = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))]);
    let resp: DescribeGroupsResponse = c.call(ApiKey::DescribeGroups, 5, &req).ok()?;
    let g = resp.groups.first()?;
    let members = g
        .members
        .iter()
        .map(|m| MemberView {
            member_id: m.member_id.to_string(),
            group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
            client_id: m.client_id.to_string(),
            assignment: decode_consumer_assignment(&m.member_assignment).unwrap_or_default(),
        })
        .collect();
    Some(GroupView {
        error_code: g.error_code,
        state: g.group_state.to_string(),
        protocol_type: g.protocol_type.to_string(),
        protocol: g.protocol_data.to_string(),
        members,
    })
}

/// A simple OffsetCommit (v7, generation -1, no member) of `offset` for
/// `topic`/`partition` in `group` at the broker at `addr`: the partition's
/// error code; `None` when it does not answer within `timeout`.
pub fn offset_commit_simple(
    addr: &str,
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
    timeout: Duration,
) -> Option<i16> {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest, OffsetCommitResponse, TopicName};
    let mut c = Client::connect_timeout(addr, timeout).ok()?;
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)])]);
    let resp: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &req).ok()?;
    resp.topics
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| p.error_code)
}

/// One v2 batch (no producer id, current timestamps) around a ready-made
/// records section `body` (compressed with `codec` or not) that claims
/// `records` records, its CRC right: the framing is well formed whatever the
/// body holds.
pub fn batch_around(body: &[u8], codec: i16, records: i32) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut b = Vec::with_capacity(61 + body.len());
    b.put_i64(0);
    b.put_i32((49 + body.len()) as i32);
    b.put_i32(-1);
    b.put_i8(2);
    b.put_u32(0);
    b.put_i16(codec);
    b.put_i32(records - 1);
    b.put_i64(now);
    b.put_i64(now);
    b.put_i64(-1);
    b.put_i16(-1);
    b.put_i32(-1);
    b.put_i32(records);
    b.extend_from_slice(body);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Runs one of the reference Kafka's tools (`compat-tests/scripts/kafka-tool.sh`)
/// against `bootstrap`; its standard output, once it succeeded.
pub fn kafka_tool(
    kafka_dir: &std::path::Path,
    tool: &str,
    bootstrap: &str,
    args: &[&str],
) -> String {
    let out = std::process::Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-tests/scripts/kafka-tool.sh"),
    )
    .arg(tool)
    .args(["--bootstrap-server", bootstrap])
    .args(args)
    .env("STRAND_KAFKA_DIR", kafka_dir)
    .output()
    .unwrap_or_else(|e| panic!("{tool} runs: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{tool} {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// InitProducerId (v4) with the transaction timeout given: (error,
/// producer id, epoch).
pub fn init_producer_id_with_timeout(
    c: &mut Client,
    txn: Option<&str>,
    current: Option<(i64, i16)>,
    timeout_ms: i32,
) -> (i16, i64, i16) {
    use kafka_protocol::messages::{
        InitProducerIdRequest, InitProducerIdResponse, ProducerId, TransactionalId,
    };
    let (pid, epoch) = current.unwrap_or((-1, -1));
    let r: InitProducerIdResponse = c
        .call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(
                    txn.map(|t| TransactionalId(StrBytes::from_string(t.into()))),
                )
                .with_transaction_timeout_ms(timeout_ms)
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch),
        )
        .expect("InitProducerId");
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

/// AddPartitionsToTxn (v3) of `topic`/0: the partition's error.
pub fn add_partition(c: &mut Client, txn: &str, (pid, epoch): (i64, i16), topic: &str) -> i16 {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ProducerId, TopicName,
        TransactionalId,
    };
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(txn.into())))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![0])]);
    let r: AddPartitionsToTxnResponse = c
        .call(ApiKey::AddPartitionsToTxn, 3, &req)
        .expect("AddPartitionsToTxn");
    r.results_by_topic_v3_and_below
        .first()
        .and_then(|t| t.results_by_partition.first())
        .map_or(-100, |p| p.partition_error_code)
}

/// EndTxn (v3): the error.
pub fn end_txn(c: &mut Client, txn: &str, (pid, epoch): (i64, i16), commit: bool) -> i16 {
    use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId, TransactionalId};
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(txn.into())))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse = c.call(ApiKey::EndTxn, 3, &req).expect("EndTxn");
    r.error_code
}

/// A consumer's Fetch (v11, replica id -1, no current leader epoch) of
/// `topic`/`partition` from `offset` under `isolation`, at most 4 MiB.
pub fn consumer_fetch(
    topic: &str,
    partition: i32,
    offset: i64,
    isolation: i8,
    max_wait_ms: i32,
) -> kafka_protocol::messages::FetchRequest {
    use kafka_protocol::messages::{fetch_request, BrokerId, FetchRequest, TopicName};
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(4 << 20)
        .with_isolation_level(isolation)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(4 << 20)])])
}

/// AlterPartitionReassignments (v0): (partition -> target or None to
/// cancel) -> each partition's (error code, message).
pub fn reassign(
    c: &mut Client,
    topic: &str,
    targets: &[(i32, Option<&[i32]>)],
) -> Vec<(i32, i16, Option<String>)> {
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    use kafka_protocol::messages::{
        AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
        TopicName,
    };
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(
                targets
                    .iter()
                    .map(|(p, r)| {
                        ReassignablePartition::default()
                            .with_partition_index(*p)
                            .with_replicas(r.map(|r| r.iter().map(|b| BrokerId(*b)).collect()))
                    })
                    .collect(),
            )]);
    let resp: AlterPartitionReassignmentsResponse = c
        .call(ApiKey::AlterPartitionReassignments, 0, &req)
        .expect("AlterPartitionReassignments answers");
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    resp.responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    p.partition_index,
                    p.error_code,
                    p.error_message.as_ref().map(|m| m.to_string()),
                )
            })
        })
        .collect()
}

/// GET `path` from `addr`: (status code, body); None when nothing answers.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    std::io::Write::write_fmt(
        &mut s,
        format_args!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n"),
    )
    .ok()?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut s, &mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// The Python interpreter with confluent-kafka: `STRAND_PYTHON` (set by
/// scripts/test.sh to its virtualenv) or `python3`.
pub fn python() -> String {
    let python = std::env::var("STRAND_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let probe = std::process::Command::new(&python)
        .args([
            "-c",
            "import confluent_kafka; print(confluent_kafka.version()[0])",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        probe.status.success(),
        "{python} cannot import confluent_kafka (scripts/test.sh installs it; or set STRAND_PYTHON): {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    python
}

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

//! One Kafka request over a fresh connection, for tools outside the test
//! binaries (the chaos runner's admin operations): encode with the
//! kafka-protocol crate, read the one answer, decode.

use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Sends `req` as `key` v`version` to `addr` and returns the decoded answer;
/// `timeout` bounds the connect and each read and write.
pub fn call<Req: Encodable + HeaderVersion, Resp: Decodable + HeaderVersion>(
    addr: &str,
    key: ApiKey,
    version: i16,
    req: &Req,
    timeout: Duration,
) -> io::Result<Resp> {
    Connection::open(addr, timeout)?.call(key, version, req)
}

/// One connection for many requests, answered in turn.
pub struct Connection {
    stream: TcpStream,
    correlation_id: i32,
}

impl Connection {
    /// Connects to `addr`; `timeout` bounds the connect and each read and
    /// write.
    pub fn open(addr: &str, timeout: Duration) -> io::Result<Connection> {
        let target = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| invalid(format!("no address for {addr}")))?;
        let stream = TcpStream::connect_timeout(&target, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            correlation_id: 0,
        })
    }

    /// Sends `req` as `key` v`version` and returns the decoded answer.
    pub fn call<Req: Encodable + HeaderVersion, Resp: Decodable + HeaderVersion>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> io::Result<Resp> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("strand-wire")));
        let mut body = bytes::BytesMut::new();
        header
            .encode(&mut body, Req::header_version(version))
            .map_err(invalid)?;
        req.encode(&mut body, version).map_err(invalid)?;
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as i32).to_be_bytes());
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame)?;
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len)?;
        let len = i32::from_be_bytes(len);
        if !(0..=64 << 20).contains(&len) {
            return Err(invalid(format!("answer of {len} bytes")));
        }
        let mut answer = vec![0u8; len as usize];
        self.stream.read_exact(&mut answer)?;
        let mut buf = bytes::Bytes::from(answer);
        let header =
            ResponseHeader::decode(&mut buf, Resp::header_version(version)).map_err(invalid)?;
        if header.correlation_id != self.correlation_id {
            return Err(invalid("answer to another request"));
        }
        Resp::decode(&mut buf, version).map_err(invalid)
    }
}

//! A Kafka-wire connection from this broker to another one, one request at a
//! time: follower fetches, transaction markers to partition leaders, and
//! KIP-890 verification requests to transaction coordinators.

use crate::transport::{SaslCredentials, Stream, Transport};
use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rand::distributions::{Alphanumeric, DistString};
use std::sync::Arc;
use std::time::Duration;
use strand_security::scram::{Mechanism, ScramClient};
use strand_types::BrokerId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest response frame accepted from another broker.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

pub struct BrokerConn {
    stream: Box<dyn Stream>,
    correlation: i32,
    client_id: StrBytes,
    /// The inter-broker credentials, kept to re-authenticate (KIP-368).
    sasl: Option<SaslCredentials>,
    /// When to re-authenticate: at 85-95% of the session lifetime the
    /// other broker reported (as Kafka's clients pick), so that it never
    /// closes this connection for an expired session.
    reauthenticate_at: Option<std::time::Instant>,
}

impl BrokerConn {
    pub async fn connect(
        transport: &dyn Transport,
        addr: &str,
        client_id: String,
    ) -> std::io::Result<BrokerConn> {
        let stream = tokio::time::timeout(Duration::from_secs(5), transport.connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        let mut conn = BrokerConn {
            stream,
            correlation: 0,
            client_id: StrBytes::from_string(client_id),
            sasl: transport.sasl().cloned(),
            reauthenticate_at: None,
        };
        conn.authenticate_in_time().await?;
        Ok(conn)
    }

    /// Authenticates (again) with the inter-broker credentials, if any,
    /// within 10 s, and notes when the session must be renewed.
    async fn authenticate_in_time(&mut self) -> std::io::Result<()> {
        let Some(creds) = self.sasl.clone() else {
            return Ok(());
        };
        let lifetime_ms = tokio::time::timeout(Duration::from_secs(10), self.authenticate(&creds))
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "SASL authentication timed out",
                )
            })??;
        self.reauthenticate_at = (lifetime_ms > 0).then(|| {
            let share = rand::Rng::gen_range(&mut rand::thread_rng(), 0.85..0.95);
            std::time::Instant::now() + Duration::from_millis((lifetime_ms as f64 * share) as u64)
        });
        Ok(())
    }

    /// SaslHandshake and SaslAuthenticate with this broker's inter-broker
    /// credentials; the session lifetime the other broker reports (ms, 0:
    /// none).
    async fn authenticate(&mut self, creds: &SaslCredentials) -> std::io::Result<i64> {
        let refused =
            |what: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, what);
        let handshake: SaslHandshakeResponse = self
            .exchange(
                ApiKey::SaslHandshake,
                1,
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_string(creds.mechanism.clone())),
            )
            .await?;
        if handshake.error_code != 0 {
            return Err(refused(format!(
                "SaslHandshake for {}: error {}",
                creds.mechanism, handshake.error_code
            )));
        }
        let Some(mechanism) = Mechanism::from_name(&creds.mechanism) else {
            // PLAIN: one message.
            let token = format!("\0{}\0{}", creds.username, creds.password);
            let (_, lifetime_ms) = self.sasl_step(token.into_bytes()).await?;
            return Ok(lifetime_ms);
        };
        let nonce = Alphanumeric.sample_string(&mut rand::thread_rng(), 32);
        let mut client = ScramClient::new(mechanism, &creds.username, &creds.password, &nonce);
        let (server_first, _) = self.sasl_step(client.client_first()).await?;
        let client_final = client
            .client_final(&server_first)
            .map_err(|e| refused(format!("SCRAM server-first message: {e}")))?;
        let (server_final, lifetime_ms) = self.sasl_step(client_final).await?;
        client
            .server_final(&server_final)
            .map_err(|e| refused(format!("SCRAM server-final message: {e}")))?;
        Ok(lifetime_ms)
    }

    /// One SaslAuthenticate: the server's bytes and the session lifetime.
    async fn sasl_step(&mut self, token: Vec<u8>) -> std::io::Result<(bytes::Bytes, i64)> {
        let r: SaslAuthenticateResponse = self
            .exchange(
                ApiKey::SaslAuthenticate,
                2,
                &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(token)),
            )
            .await?;
        if r.error_code != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "SASL authentication refused (error {}): {}",
                    r.error_code,
                    r.error_message.as_deref().unwrap_or("")
                ),
            ));
        }
        Ok((r.auth_bytes, r.session_lifetime_ms))
    }

    /// Sends `req` as `key` at `version` and reads its response,
    /// re-authenticating first when the session is due for it. An error
    /// leaves the connection unusable (the caller drops it).
    pub async fn send<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> std::io::Result<Resp> {
        if self
            .reauthenticate_at
            .is_some_and(|at| std::time::Instant::now() >= at)
        {
            self.authenticate_in_time().await?;
            tracing::info!("re-authenticated an inter-broker connection (KIP-368)");
        }
        self.exchange(key, version, req).await
    }

    /// One request and its response, as they are.
    async fn exchange<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> std::io::Result<Resp> {
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(self.client_id.clone()));
        let mut body = BytesMut::with_capacity(256);
        body.put_i32(0);
        header
            .encode(&mut body, key.request_header_version(version))
            .map_err(invalid)?;
        req.encode(&mut body, version).map_err(invalid)?;
        let len = (body.len() - 4) as i32;
        body[..4].copy_from_slice(&len.to_be_bytes());
        self.stream.write_all(&body).await?;

        let mut prefix = [0u8; 4];
        self.stream.read_exact(&mut prefix).await?;
        let len = i32::from_be_bytes(prefix);
        if len < 4 || len as usize > MAX_RESPONSE_BYTES {
            return Err(invalid(format!("bad response size {len}")));
        }
        let mut frame = BytesMut::zeroed(len as usize);
        self.stream.read_exact(&mut frame).await?;
        let mut frame = frame.freeze();
        let rh = ResponseHeader::decode(&mut frame, key.response_header_version(version))
            .map_err(invalid)?;
        if rh.correlation_id != self.correlation {
            return Err(invalid(format!(
                "response for correlation id {} while waiting for {}",
                rh.correlation_id, self.correlation
            )));
        }
        Resp::decode(&mut frame, version).map_err(invalid)
    }
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

/// Idle connections to other brokers (and this one), reused only after a
/// complete exchange: requests that are not on a hot path (transaction
/// markers, KIP-890 verification).
pub struct BrokerConnPool {
    transport: Arc<dyn Transport>,
    client_id: String,
    idle: parking_lot::Mutex<std::collections::HashMap<BrokerId, Vec<BrokerConn>>>,
}

impl BrokerConnPool {
    pub fn new(transport: Arc<dyn Transport>, client_id: String) -> Self {
        BrokerConnPool {
            transport,
            client_id,
            idle: parking_lot::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Sends `req` to broker `broker` at `addr` and waits for the answer, at
    /// most `timeout`.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &self,
        broker: BrokerId,
        addr: &str,
        key: ApiKey,
        version: i16,
        req: &Req,
        timeout: Duration,
    ) -> std::io::Result<Resp> {
        let idle = self.idle.lock().get_mut(&broker).and_then(Vec::pop);
        let mut conn = match idle {
            Some(c) => c,
            None => BrokerConn::connect(&*self.transport, addr, self.client_id.clone()).await?,
        };
        let resp = tokio::time::timeout(timeout, conn.send(key, version, req))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "request timed out")
            })??;
        self.idle.lock().entry(broker).or_default().push(conn);
        Ok(resp)
    }
}

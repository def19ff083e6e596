//! Listener and connections. Each connection reads size-prefixed frames,
//! answers requests strictly in order (like Kafka, one request in flight per
//! connection), and is closed where Kafka closes it: an oversized or malformed
//! frame, an unknown API key, an unsupported version of an API other than
//! ApiVersions. Connections are served concurrently, one task each.
//!
//! Limits, with Kafka's names: `max.connections` and
//! `max.connections.per.ip` (see `connection_quotas`), `connections.max.idle.ms`
//! (a connection with no request for that long is closed),
//! `queued.max.request.bytes` (a pool of bytes that requests being read or
//! served draw from: a request waits for its bytes before its body is read),
//! and `socket.request.max.bytes` (a larger frame closes the connection). An
//! idle connection holds no buffers: they are taken per request and a large
//! response's buffer is given back once it is written.

use crate::authentication::{Admission, ConnAuth};
use crate::client_quotas::Throttle;
use crate::connection_quotas::{ConnectionQuotas, ConnectionSlot};
use crate::handlers;
use crate::handlers::api_versions_response;
use crate::listener_security::ListenerSecurity;
use crate::node::Node;
use crate::transport::{Listener, ServerConn, TlsConn};
use crate::zero_copy::{Chunk, SliceRegistry, SpliceBuf};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::{ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Encodable;
use std::sync::Arc;
use std::time::Duration;
use strand_protocol::frame::check_frame_len;
use strand_protocol::request::{decode_request, Decoded};
use strand_protocol::ErrorCode;
use strand_security::principal::KafkaPrincipal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{watch, Semaphore};

/// The longest the listener backs off after an accept error when no
/// connection closes meanwhile.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// A response buffer larger than this is given back once its client has
/// been quiet for [`BUFFER_GRACE`].
const IDLE_RESPONSE_BUFFER: usize = 64 * 1024;
const BUFFER_GRACE: Duration = Duration::from_secs(1);

/// A response buffer larger than this is given back after it is written.
/// Smaller ones are kept for the next response: a consumer's fetches are
/// about the same size each time (max.partition.fetch.bytes, 1 MiB by
/// default), and growing a fresh buffer for each would copy every response
/// twice over (measured: 9% of 1 KiB consume throughput with a 1 MiB cap).
const KEPT_RESPONSE_BUFFER: usize = 16 << 20;

/// Serves `listener` (TCP in the binary) until `shutdown` turns true.
/// Serves the listener named `listener_name` (`listeners`): a client is
/// told the brokers' addresses on the listener it connected on.
pub async fn serve<L: Listener>(
    listener: L,
    listener_name: Arc<str>,
    node: Arc<Node>,
    shutdown: watch::Receiver<bool>,
) {
    let security = Arc::new(ListenerSecurity::plaintext());
    serve_with(
        listener,
        listener_name,
        security,
        node,
        shutdown,
        |stream, _| async move { Ok(Accepted::Plain(stream)) },
    )
    .await
}

/// [`serve`] with the listener's security protocol: TLS over TCP
/// connections (SSL, SASL_SSL) and SASL authentication (SASL_*).
pub async fn serve_secured<L: Listener<Conn = tokio::net::TcpStream>>(
    listener: L,
    listener_name: Arc<str>,
    security: Arc<ListenerSecurity>,
    node: Arc<Node>,
    shutdown: watch::Receiver<bool>,
) {
    serve_with(
        listener,
        listener_name,
        security,
        node,
        shutdown,
        |stream, security| async move {
            let Some(acceptor) = &security.tls else {
                return Ok(Accepted::Plain(stream));
            };
            let stream = acceptor.current().accept(stream).await?;
            let conn = TlsConn::new(stream);
            // On SSL listeners the client certificate names the principal;
            // SASL_SSL takes it from SASL.
            let principal = match conn.peer_certificate() {
                Some(der) if !security.protocol.uses_sasl() => {
                    let name = strand_security::principal::subject_dn(der)
                        .and_then(|dn| security.principal_mapper.user_name(&dn))
                        .map_err(std::io::Error::other)?;
                    tracing::debug!(principal = %name, "TLS client authenticated");
                    KafkaPrincipal::user(name)
                }
                _ => KafkaPrincipal::anonymous(),
            };
            Ok(Accepted::Tls(conn, principal))
        },
    )
    .await
}

/// A connection after its TLS handshake, if its listener has TLS.
enum Accepted<S> {
    Plain(S),
    Tls(TlsConn, KafkaPrincipal),
}

async fn serve_with<L, F, Fut>(
    listener: L,
    listener_name: Arc<str>,
    security: Arc<ListenerSecurity>,
    node: Arc<Node>,
    mut shutdown: watch::Receiver<bool>,
    secure: F,
) where
    L: Listener,
    F: Fn(L::Conn, Arc<ListenerSecurity>) -> Fut + Send + Sync + 'static + Clone,
    Fut: std::future::Future<Output = std::io::Result<Accepted<L::Conn>>> + Send + 'static,
{
    // Its authentication counters exist from the start, as Kafka's do.
    node.broker.metrics.listener_started(&listener_name);
    let quotas = ConnectionQuotas::new(node.broker.config.connection_limits);
    // The request memory pool; unbounded when queued.max.request.bytes <= 0.
    let pool = usize::try_from(node.broker.config.queued_max_request_bytes)
        .ok()
        .filter(|b| *b > 0)
        .map(|b| Arc::new(Semaphore::new(b.min(Semaphore::MAX_PERMITS))));
    loop {
        tokio::select! {
            _ = quotas.wait_for_capacity() => {}
            _ = shutdown.changed() => return,
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS...: retrying at once would spin.
                // A closing connection frees what was missing, if anything.
                tracing::warn!(error = %e, "accept failed; backing off");
                quotas.wait_for_a_close(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let slot = match quotas.try_admit(peer.ip()) {
            Ok(slot) => slot,
            Err(refused) => {
                tracing::info!(%peer, ?refused, "connection refused: max.connections.per.ip");
                drop(stream);
                continue;
            }
        };
        let node = node.clone();
        let shutdown = shutdown.clone();
        let pool = pool.clone();
        let name = listener_name.clone();
        let security = security.clone();
        let secure = secure.clone();
        tokio::spawn(async move {
            // The TLS handshake is the connection's first read: a peer that
            // stalls in it is idle like any other.
            let idle = idle_limit(&node);
            let handshake = secure(stream, security.clone());
            let accepted = match idle {
                Some(d) => tokio::time::timeout(d, handshake)
                    .await
                    .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
                None => handshake.await,
            };
            // As Kafka's socket server counts them: a connection without
            // SASL is authenticated once its TLS handshake (if any) is
            // done, and a failed handshake is a failed authentication;
            // SASL exchanges count where they end (`ConnAuth`).
            if security.sasl.is_none() {
                node.broker.metrics.authentication(&name, accepted.is_ok());
            }
            let result = match accepted {
                Ok(Accepted::Plain(stream)) => {
                    let auth = ConnAuth::new(&security, KafkaPrincipal::anonymous());
                    connection(
                        stream, peer, name, security, auth, node, shutdown, pool, slot,
                    )
                    .await
                }
                Ok(Accepted::Tls(stream, principal)) => {
                    let auth = ConnAuth::new(&security, principal);
                    connection(
                        stream, peer, name, security, auth, node, shutdown, pool, slot,
                    )
                    .await
                }
                Err(e) => {
                    tracing::info!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            if let Err(reason) = result {
                tracing::debug!(%peer, %reason, "connection closed");
            }
        });
    }
}

/// Why a connection was closed.
#[derive(Debug, thiserror::Error)]
enum Closed {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(String),
    #[error("shutting down")]
    Shutdown,
    #[error("idle for connections.max.idle.ms")]
    Idle,
    #[error("{0}")]
    Authentication(String),
}

/// `connections.max.idle.ms`; negative: never closed for idleness
/// (Kafka's convention).
fn idle_limit(node: &Node) -> Option<Duration> {
    u64::try_from(node.broker.config.connections_max_idle_ms)
        .ok()
        .map(Duration::from_millis)
}

/// How long a failed authentication's answer waits (Kafka's
/// `connection.failed.authentication.delay.ms` default): a client guessing
/// passwords gets one try per connection and per delay.
const FAILED_AUTHENTICATION_DELAY: Duration = Duration::from_millis(100);

#[allow(clippy::too_many_arguments)]
async fn connection<S: ServerConn>(
    mut stream: S,
    peer: std::net::SocketAddr,
    listener: Arc<str>,
    security: Arc<ListenerSecurity>,
    mut auth: ConnAuth,
    node: Arc<Node>,
    mut shutdown: watch::Receiver<bool>,
    pool: Option<Arc<Semaphore>>,
    _slot: ConnectionSlot,
) -> Result<(), Closed> {
    let max = node.broker.config.socket_request_max_bytes;
    let idle = idle_limit(&node);
    // Kafka reports a member's host as "/<address>".
    let client_host = format!("/{}", peer.ip());
    let mut out = BytesMut::new();
    loop {
        if out.capacity() > IDLE_RESPONSE_BUFFER {
            // A quiet client does not keep a large response buffer: after a
            // short grace (a consumer's next fetch comes sooner) it goes.
            // (readable() is cancel-safe; a half-read prefix would not be.)
            tokio::select! {
                r = stream.readable() => { r?; }
                _ = tokio::time::sleep(BUFFER_GRACE) => out = BytesMut::new(),
                _ = shutdown.changed() => return Err(Closed::Shutdown),
            }
        }
        let mut prefix = [0u8; 4];
        let idle_deadline = async {
            match idle {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = stream.read_exact(&mut prefix) => { r?; }
            _ = idle_deadline => return Err(Closed::Idle),
            _ = shutdown.changed() => return Err(Closed::Shutdown),
        }
        let len = check_frame_len(prefix, max).map_err(|e| {
            tracing::warn!(error = %e, "closing connection");
            Closed::Protocol(e.to_string())
        })?;
        // Held while the frame is read and decoded (as Kafka frees a
        // request's buffer once it is handled, not while it waits in
        // purgatory). The pool is at least socket.request.max.bytes (checked
        // at start-up), so any frame fits.
        let bytes = match &pool {
            Some(pool) => Some(
                pool.acquire_many(len as u32)
                    .await
                    .map_err(|_| Closed::Shutdown)?,
            ),
            None => None,
        };
        // A client that stops sending in the middle of a frame is idle too
        // (and must not keep pool bytes).
        let frame = match idle {
            Some(d) => tokio::time::timeout(d, read_frame(&mut stream, len))
                .await
                .map_err(|_| Closed::Idle)??,
            None => read_frame(&mut stream, len).await?,
        }
        .freeze();
        let arrived = std::time::Instant::now();
        out.clear();
        // Boxed: the request's future lives only while it runs, so an idle
        // connection's task stays small.
        let from = (client_host.as_str(), &listener);
        let mut timing = None;
        let (answer, throttle) = Box::pin(handle_frame(
            &node,
            frame,
            bytes,
            &mut out,
            from,
            (&security, &mut auth),
            (arrived, &mut timing),
        ))
        .await?;
        // Kafka's throttle runs from when the response is ready, so the time
        // spent writing a large response counts towards it.
        let throttled_until =
            (throttle > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(throttle));
        match answer {
            Answer::None => {}
            Answer::Buffered => stream.write_all(&out).await?,
            Answer::BufferedThenClose(why) => {
                tokio::time::sleep(FAILED_AUTHENTICATION_DELAY).await;
                stream.write_all(&out).await?;
                stream.flush().await?;
                return Err(Closed::Authentication(why));
            }
            Answer::Spliced(chunks) => {
                for chunk in &chunks {
                    match chunk {
                        Chunk::Mem(m) => stream.write_all(m).await?,
                        Chunk::File(slice) => stream.send_file(slice).await?,
                    }
                }
            }
        }
        // TLS may hold the end of the response until flushed.
        stream.flush().await?;
        if let Some((key, queued)) = timing {
            node.broker.metrics.answered(
                key as i16,
                || format!("{key:?}"),
                queued,
                arrived.elapsed(),
                throttle,
            );
        }
        if out.capacity() > KEPT_RESPONSE_BUFFER {
            out = BytesMut::new();
        }
        // A quota's throttle: answered at once, then nothing more is read
        // from this connection until it has passed (KIP-219).
        // A client that goes away meanwhile frees its connection at once.
        if let Some(until) = throttled_until {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = stream.closed() => return Ok(()),
                _ = shutdown.changed() => return Err(Closed::Shutdown),
            }
        }
    }
}

/// The first allocation for a frame, and the least it grows by.
const FRAME_STEP: usize = 64 * 1024;

/// Reads a `len`-byte frame into a buffer that grows with the bytes that
/// arrive (doubling, up to `len`): a length prefix alone never allocates what
/// it claims. While much of a large frame is still to come, the connection is
/// woken only when a good part of it has arrived ([`read_low_water`]), not
/// for every segment or TLS record the client sends: the frame cannot be
/// handled before its last byte anyway, and each wake-up costs a pass
/// through the scheduler and the system calls of a read.
async fn read_frame<S: ServerConn>(stream: &mut S, len: usize) -> std::io::Result<BytesMut> {
    let mut frame = BytesMut::with_capacity(len.min(FRAME_STEP));
    let mut low_water = 1;
    while frame.len() < len {
        let remaining = len - frame.len();
        let wanted = read_low_water(remaining, S::HELD_ABOVE_SOCKET);
        if wanted != low_water {
            // Only a saving: a socket that refuses it is read as before.
            match stream.set_read_low_water(wanted) {
                Ok(()) => low_water = wanted,
                Err(e) => tracing::debug!(error = %e, "receive low-water mark not set"),
            }
        }
        if frame.capacity() == frame.len() {
            frame.reserve(remaining.min(frame.len().max(FRAME_STEP)));
        }
        let n = (&mut *stream)
            .take(remaining as u64)
            .read_buf(&mut frame)
            .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    if low_water != 1 {
        // The next frame's prefix must wake the connection at its first byte.
        stream.set_read_low_water(1)?;
    }
    Ok(frame)
}

/// The most a frame read waits to have arrived before it is woken.
const MAX_READ_LOW_WATER: usize = 256 * 1024;
/// Below this, a frame is read as its bytes come.
const MIN_READ_LOW_WATER: usize = 32 * 1024;

/// The socket's receive low-water mark while `remaining` bytes of a frame
/// are unread, up to `held` of them possibly already above the socket (in
/// TLS's buffers): a power of two no more than half of what must still come
/// through the socket and at most [`MAX_READ_LOW_WATER`], or 1 (wake at any
/// byte) once that is small. Never more than will arrive, so a read never
/// waits for bytes the client will not send; powers of two so the mark
/// changes a few times per frame, not at every read.
fn read_low_water(remaining: usize, held: usize) -> usize {
    let half = remaining.saturating_sub(held) / 2;
    if half < MIN_READ_LOW_WATER {
        return 1;
    }
    let power = 1usize << (usize::BITS - 1 - half.leading_zeros());
    power.min(MAX_READ_LOW_WATER)
}

/// What to write for a request.
enum Answer {
    /// Nothing (acks=0 produce).
    None,
    /// The response, encoded in the connection's buffer.
    Buffered,
    /// The response, then the connection closes (authentication refused).
    BufferedThenClose(String),
    /// The response as memory chunks and file slices (a fetch: its
    /// records are sent from the segment files).
    Spliced(Vec<Chunk>),
}

/// Decodes one request frame, runs it and encodes the response into `out`
/// (or, for records sent from files, into chunks that use its memory).
async fn handle_frame(
    node: &Node,
    frame: Bytes,
    pool_bytes: Option<tokio::sync::SemaphorePermit<'_>>,
    out: &mut BytesMut,
    (client_host, listener): (&str, &Arc<str>),
    (security, auth): (&ListenerSecurity, &mut ConnAuth),
    (arrived, timing): (std::time::Instant, &mut Option<(ApiKey, Duration)>),
) -> Result<(Answer, Throttle), Closed> {
    let unthrottled = |a: Answer| Ok((a, 0));
    let frame_len = frame.len();
    if auth.wants_raw_token() {
        drop(pool_bytes);
        return match auth.raw_token(node, security, &frame) {
            crate::authentication::RawAnswer::Token(token) => {
                out.put_i32(token.len() as i32);
                out.put_slice(&token);
                unthrottled(Answer::Buffered)
            }
            crate::authentication::RawAnswer::Close(why) => Err(Closed::Authentication(why)),
        };
    }
    let decoded = decode_request(frame).map_err(|e| Closed::Protocol(e.to_string()));
    drop(pool_bytes);
    let (key, version, header, request) = match decoded? {
        Decoded::Request {
            key,
            version,
            header,
            request,
        } => (key, version, header, request),
        Decoded::UnsupportedApiVersions { correlation_id } => {
            // KIP-511: answer in v0 with our ranges so the client can pick a version.
            let resp = api_versions_response(
                ErrorCode::UnsupportedVersion.code(),
                &strand_metadata::image::MetadataImage::default(),
                0,
                node.broker.config.serves_consumer_protocol(),
            );
            encode_response(out, correlation_id, 0, 0, &ResponseKind::ApiVersions(resp));
            return unthrottled(Answer::Buffered);
        }
    };
    let correlation_id = header.correlation_id;
    let response_header_version = key.response_header_version(version);
    let mut encode = |response: &ResponseKind| {
        encode_response(
            out,
            correlation_id,
            response_header_version,
            version,
            response,
        )
    };
    match auth.admit(node, security, key, version, &request) {
        Admission::Serve => {}
        Admission::Answer(response) => {
            encode(&response);
            return unthrottled(Answer::Buffered);
        }
        Admission::AnswerThenClose(response) => {
            encode(&response);
            return unthrottled(Answer::BufferedThenClose("authentication failed".into()));
        }
        Admission::Close(why) => {
            tracing::info!(%why, "closing connection");
            return Err(Closed::Authentication(why));
        }
    }
    let ctx = handlers::RequestContext {
        principal: auth.principal.clone(),
        client_ip: client_host.trim_start_matches('/').to_string(),
        version,
        client_host: client_host.to_string(),
        listener: listener.clone(),
        client_id: header
            .client_id
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default(),
        slices: SliceRegistry::default(),
    };
    let image = node.broker.image();
    let who = (ctx.principal.name.as_str(), ctx.client_id.as_str());
    let mut request = request;
    let metered = node.broker.quotas.meter(
        &image,
        (&mut request, version),
        who,
        frame_len,
        auth.authenticating(),
    );
    *timing = Some((key, arrived.elapsed()));
    let (response, handling) = if metered.request_time {
        // The time this request spends on the async workers (its polls),
        // not its waits: Kafka's request-handler thread time.
        let mut running = Box::pin(handlers::dispatch(node, &ctx, request));
        let mut handling = Duration::ZERO;
        let response = std::future::poll_fn(|cx| {
            let start = std::time::Instant::now();
            let r = std::future::Future::poll(running.as_mut(), cx);
            handling += start.elapsed();
            r
        })
        .await;
        (response, handling)
    } else {
        (
            handlers::dispatch(node, &ctx, request).await,
            Duration::ZERO,
        )
    };
    let mut response = response.map_err(Closed::Protocol)?;
    let throttle = node.broker.quotas.settle(
        &image,
        metered,
        who,
        handling,
        version,
        response.as_mut(),
        &ctx.slices,
        node.broker.clock.now_ms(),
    );
    let Some(response) = response else {
        return Ok((Answer::None, throttle));
    };
    let slices = ctx.slices.take();
    if slices.is_empty() {
        encode_response(
            out,
            correlation_id,
            response_header_version,
            version,
            &response,
        );
        return Ok((Answer::Buffered, throttle));
    }
    // Only fetches hand out slices.
    let ResponseKind::Fetch(fetch) = &response else {
        tracing::error!(
            ?key,
            "file slices in a response other than a fetch; closing"
        );
        return Err(Closed::Protocol("unplaced records in a response".into()));
    };
    let mut buf = SpliceBuf::new(std::mem::take(out), slices);
    buf.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    if let Err(e) = header
        .encode(&mut buf, response_header_version)
        .and_then(|()| fetch.encode(&mut buf, version))
    {
        tracing::error!(error = %e, "fetch response encode failed; closing");
        return Err(Closed::Protocol(e.to_string()));
    }
    match buf.finish(0..4) {
        Some((chunks, rest)) => {
            *out = rest;
            Ok((Answer::Spliced(chunks), throttle))
        }
        None => {
            tracing::error!(?key, "a response's records could not be placed; closing");
            Err(Closed::Protocol("unplaced records in a response".into()))
        }
    }
}

fn encode_response(
    out: &mut BytesMut,
    correlation_id: i32,
    header_version: i16,
    version: i16,
    response: &ResponseKind,
) {
    out.put_i32(0);
    let start = out.len();
    encode_body(out, correlation_id, header_version, version, response);
    let len = (out.len() - start) as i32;
    out[start - 4..start].copy_from_slice(&len.to_be_bytes());
}

/// The response header and body (after the size prefix).
fn encode_body(
    out: &mut BytesMut,
    correlation_id: i32,
    header_version: i16,
    version: i16,
    response: &ResponseKind,
) {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    // Encoding our own well-formed structs cannot fail except on a bug; a
    // failure is logged and the frame left empty-bodied rather than panicking.
    if let Err(e) = header.encode(out, header_version) {
        tracing::error!(error = %e, "response header encode failed");
    }
    if let Err(e) = response.encode(out, version) {
        tracing::error!(error = %e, "response encode failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ApiKey;

    /// The receive low-water mark of a frame read: as the frame comes in,
    /// the mark steps down in powers of two and ends at 1.
    #[test]
    fn read_low_water_steps_down_as_a_frame_arrives() {
        let k = 1024;
        let table = [
            // (remaining, held above the socket) -> mark
            ((1024 * k, 0), 256 * k),
            ((600 * k, 0), 256 * k),
            ((400 * k, 0), 128 * k),
            ((130 * k, 0), 64 * k),
            ((64 * k, 0), 32 * k),
            ((63 * k, 0), 1),
            ((4, 0), 1),
            ((0, 0), 1),
            ((1024 * k, 64 * k), 256 * k),
            ((128 * k, 64 * k), 32 * k),
            ((100 * k, 64 * k), 1),
            ((10 * k, 64 * k), 1),
        ];
        for ((remaining, held), mark) in table {
            assert_eq!(read_low_water(remaining, held), mark, "{remaining} {held}");
        }
    }

    proptest::proptest! {
        /// The mark never exceeds what must still come through the socket
        /// (else the read would wait for bytes the client never sends), and
        /// a read that has gained bytes never raises it.
        #[test]
        fn read_low_water_never_waits_past_the_frame(
            remaining in 0usize..64 << 20,
            held in 0usize..1 << 20,
            read in 1usize..1 << 20,
        ) {
            let mark = read_low_water(remaining, held);
            proptest::prop_assert!(mark == 1 || mark <= remaining.saturating_sub(held));
            proptest::prop_assert!(mark <= MAX_READ_LOW_WATER);
            let after = read_low_water(remaining.saturating_sub(read), held);
            proptest::prop_assert!(after <= mark);
        }
    }

    /// The ApiVersions response header is v0 at every version: no tag buffer
    /// between the correlation id and the error code, even for v3+.
    #[test]
    fn api_versions_header_has_no_tagged_fields() {
        for version in 0..=3 {
            let mut out = BytesMut::new();
            let resp = ResponseKind::ApiVersions(api_versions_response(
                0,
                &strand_metadata::image::MetadataImage::default(),
                version,
                false,
            ));
            encode_response(
                &mut out,
                42,
                ApiKey::ApiVersions.response_header_version(version),
                version,
                &resp,
            );
            let len = i32::from_be_bytes(out[0..4].try_into().unwrap()) as usize;
            assert_eq!(len, out.len() - 4);
            assert_eq!(i32::from_be_bytes(out[4..8].try_into().unwrap()), 42);
            assert_eq!(
                &out[8..10],
                &[0, 0],
                "v{version}: error code follows the correlation id"
            );
        }
    }
}

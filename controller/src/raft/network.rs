//! Controller RPC on the controller listener: Raft's AppendEntries, Vote and
//! InstallSnapshot between controllers (and to brokers, which follow the
//! metadata log as non-voting learners), plus controller requests from brokers
//! (registration, heartbeats, forwarded admin requests) to the active
//! controller.
//!
//! Wire format: each message is a 4-byte big-endian length and a JSON body.
//! A connection carries one request at a time; the client keeps it open and
//! reconnects after any error.
//!
//! How connections are opened and admitted is the node's [`RpcSecurity`]:
//! plain TCP ([`PlainRpc`]), or what the binary plugs in for a secured
//! controller listener (TLS, with the peer's certificate as its credential).
//! The framing runs on whatever stream it gives.

use super::{NodeId, Raft, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A controller RPC connection: TCP, or TLS over it.
pub trait RpcStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> RpcStream for T {}

pub type BoxRpcStream = Box<dyn RpcStream>;
pub type RpcFuture<T> = Pin<Box<dyn Future<Output = std::io::Result<T>> + Send>>;

/// How this node opens connections to controller listeners and admits the
/// ones made to its own. An error from `accept` closes the connection
/// before any request is read: an unauthenticated peer can neither vote,
/// append, nor send a controller request.
pub trait RpcSecurity: Send + Sync + 'static {
    fn connect(&self, addr: &str) -> RpcFuture<BoxRpcStream>;
    fn accept(&self, stream: TcpStream, peer: SocketAddr) -> RpcFuture<BoxRpcStream>;
}

/// Plain TCP: every peer that reaches the port is admitted.
pub struct PlainRpc;

impl PlainRpc {
    pub fn shared() -> Arc<dyn RpcSecurity> {
        Arc::new(PlainRpc)
    }
}

impl RpcSecurity for PlainRpc {
    fn connect(&self, addr: &str) -> RpcFuture<BoxRpcStream> {
        let addr = addr.to_string();
        Box::pin(async move {
            let s = TcpStream::connect(&addr).await?;
            s.set_nodelay(true)?;
            Ok(Box::new(s) as BoxRpcStream)
        })
    }

    fn accept(&self, stream: TcpStream, _peer: SocketAddr) -> RpcFuture<BoxRpcStream> {
        Box::pin(async move {
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as BoxRpcStream)
        })
    }
}

/// How long a peer has to complete its TLS handshake.
const ADMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest RPC frame accepted (snapshots are sent in chunks well below this).
pub const MAX_RPC_FRAME: usize = 64 << 20;

/// Connections the listener serves at once, admitted or still in their
/// handshake; past it a new connection is closed at once, so strangers can
/// exhaust the slots but not the process's file descriptors.
const MAX_CONNECTIONS: usize = 1024;

/// Handshakes in progress from one address: a stranger renewing half-open
/// handshakes cannot take every slot from the cluster's own nodes.
const MAX_ADMITTING_PER_IP: usize = 32;

/// An admitted connection that sends nothing for this long is closed
/// (Kafka's `connections.max.idle.ms` default); the peer reconnects on its
/// next request.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Once a frame's length has arrived, its body must follow within this.
const FRAME_TIMEOUT: Duration = Duration::from_secs(60);

/// How much of a frame's body is reserved before its bytes arrive: a peer
/// claiming a large frame gets memory only as it sends the bytes.
const FRAME_RESERVE: usize = 64 << 10;

#[derive(Debug, Serialize, Deserialize)]
pub enum RpcRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// A controller request (JSON of `crate::ControllerRequest`), for the active controller.
    Controller(serde_json::Value),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum RpcResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    Controller(serde_json::Value),
    /// The request could not be decoded or served.
    Error(String),
}

async fn write_frame<S: AsyncWrite + Unpin + ?Sized>(
    stream: &mut S,
    value: &impl Serialize,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await
}

async fn read_frame<T: for<'de> Deserialize<'de>, S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
) -> std::io::Result<T> {
    let len = read_frame_len(stream).await?;
    read_frame_body(stream, len).await
}

async fn read_frame_len<S: AsyncRead + Unpin + ?Sized>(stream: &mut S) -> std::io::Result<usize> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_RPC_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("RPC frame of {len} bytes exceeds {MAX_RPC_FRAME}"),
        ));
    }
    Ok(len)
}

async fn read_frame_body<T: for<'de> Deserialize<'de>, S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
    len: usize,
) -> std::io::Result<T> {
    let mut body = Vec::with_capacity(len.min(FRAME_RESERVE));
    let read = (&mut *stream)
        .take(len as u64)
        .read_to_end(&mut body)
        .await?;
    if read < len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("RPC frame ended after {read} of {len} bytes"),
        ));
    }
    serde_json::from_slice(&body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// A served connection's request: the next frame, waited for at most the
/// idle timeout, its body within the frame timeout of its length.
async fn read_request<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
    limits: &ServeLimits,
) -> std::io::Result<RpcRequest> {
    let timed_out =
        |what: &str| std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_string());
    let len = tokio::time::timeout(limits.idle_timeout, read_frame_len(stream))
        .await
        .map_err(|_| timed_out("idle connection"))??;
    tokio::time::timeout(limits.frame_timeout, read_frame_body(stream, len))
        .await
        .map_err(|_| timed_out("frame body not received in time"))?
}

/// Handshakes in progress per peer address; a slot is given back on drop.
#[derive(Clone)]
struct Admitting {
    per_ip: usize,
    counts: Arc<parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

struct AdmittingSlot {
    admitting: Admitting,
    ip: std::net::IpAddr,
}

impl Admitting {
    fn new(per_ip: usize) -> Admitting {
        Admitting {
            per_ip,
            counts: Default::default(),
        }
    }

    fn try_take(&self, ip: std::net::IpAddr) -> Option<AdmittingSlot> {
        let mut counts = self.counts.lock();
        let n = counts.entry(ip).or_insert(0);
        if *n >= self.per_ip {
            return None;
        }
        *n += 1;
        Some(AdmittingSlot {
            admitting: self.clone(),
            ip,
        })
    }
}

impl Drop for AdmittingSlot {
    fn drop(&mut self) {
        let mut counts = self.admitting.counts.lock();
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// A client for one peer's controller listener.
pub struct RpcClient {
    addr: String,
    security: Arc<dyn RpcSecurity>,
    /// The open connection and when its last exchange ended.
    conn: tokio::sync::Mutex<Option<(BoxRpcStream, std::time::Instant)>>,
}

impl RpcClient {
    pub fn new(addr: impl Into<String>, security: Arc<dyn RpcSecurity>) -> RpcClient {
        RpcClient {
            addr: addr.into(),
            security,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends one request and waits for its response, within `timeout`.
    ///
    /// The connection is taken out of the client for the exchange and put
    /// back only after a whole response was read. If the exchange fails, times
    /// out, or its future is dropped (openraft cancels RPCs on its own
    /// timeouts), the connection is closed with it: a reused connection never
    /// holds the unread response of an earlier request, which the next caller
    /// would otherwise take as its own (a stale vote or append answer).
    pub async fn call(
        &self,
        request: &RpcRequest,
        timeout: Duration,
    ) -> std::io::Result<RpcResponse> {
        let mut guard = self.conn.lock().await;
        // A connection idle for half the listener's idle timeout is dropped
        // here rather than found closed by the server in the middle of a call.
        let taken = guard
            .take()
            .filter(|(_, last)| last.elapsed() < IDLE_TIMEOUT / 2)
            .map(|(stream, _)| stream);
        let exchange = async {
            let mut stream = match taken {
                Some(s) => s,
                None => self.security.connect(&self.addr).await?,
            };
            write_frame(&mut stream, request).await?;
            let response = read_frame::<RpcResponse, _>(&mut stream).await?;
            Ok::<_, std::io::Error>((response, stream))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok((response, stream))) => {
                *guard = Some((stream, std::time::Instant::now()));
                Ok(response)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("RPC to {} timed out", self.addr),
            )),
        }
    }
}

/// Serves the controller listener: Raft RPCs go to the local Raft instance,
/// controller requests to `on_controller_request`.
pub async fn serve<F, Fut>(
    listener: TcpListener,
    security: Arc<dyn RpcSecurity>,
    raft: Raft,
    on_controller_request: F,
) where
    F: Fn(serde_json::Value) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = serde_json::Value> + Send,
{
    let dispatch = move |request: RpcRequest| {
        let raft = raft.clone();
        let handler = on_controller_request.clone();
        async move {
            match request {
                RpcRequest::AppendEntries(r) => {
                    RpcResponse::AppendEntries(raft.append_entries(r).await)
                }
                RpcRequest::Vote(r) => RpcResponse::Vote(raft.vote(r).await),
                RpcRequest::InstallSnapshot(r) => {
                    RpcResponse::InstallSnapshot(raft.install_snapshot(r).await)
                }
                RpcRequest::Controller(v) => RpcResponse::Controller(handler(v).await),
            }
        }
    };
    serve_with(listener, security, ServeLimits::default(), dispatch).await
}

/// What the controller listener allows a peer.
#[derive(Clone, Copy, Debug)]
struct ServeLimits {
    max_connections: usize,
    max_admitting_per_ip: usize,
    admit_timeout: Duration,
    idle_timeout: Duration,
    frame_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            max_connections: MAX_CONNECTIONS,
            max_admitting_per_ip: MAX_ADMITTING_PER_IP,
            admit_timeout: ADMIT_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            frame_timeout: FRAME_TIMEOUT,
        }
    }
}

/// Accepts, admits (through `security`) and serves connections, each
/// request answered by `dispatch`, within `limits`.
async fn serve_with<D, DFut>(
    listener: TcpListener,
    security: Arc<dyn RpcSecurity>,
    limits: ServeLimits,
    dispatch: D,
) where
    D: Fn(RpcRequest) -> DFut + Send + Sync + Clone + 'static,
    DFut: std::future::Future<Output = RpcResponse> + Send,
{
    let connections = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let admitting = Admitting::new(limits.max_admitting_per_ip);
    // Connections closed at a limit are logged at most once per interval:
    // a flood must not turn into a flood of log lines.
    let mut last_warned: Option<std::time::Instant> = None;
    let mut warn_closed = |peer: SocketAddr, why: &str| {
        if last_warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            last_warned = Some(std::time::Instant::now());
            tracing::warn!(%peer, "controller listener closed a new connection: {why}");
        }
    };
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "controller listener accept failed");
                // Out of descriptors, most likely: give closing connections a moment.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(connection) = connections.clone().try_acquire_owned() else {
            warn_closed(peer, "the listener serves as many connections as it may");
            continue;
        };
        let Some(admitting_slot) = admitting.try_take(peer.ip()) else {
            warn_closed(peer, "too many handshakes in progress from this address");
            continue;
        };
        let dispatch = dispatch.clone();
        let handshake = security.accept(stream, peer);
        tokio::spawn(async move {
            let _connection = connection;
            let admitted = tokio::time::timeout(limits.admit_timeout, handshake).await;
            drop(admitting_slot);
            let mut stream = match admitted {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::warn!(%peer, error = %e, "controller listener refused a connection");
                    return;
                }
                Err(_) => {
                    tracing::warn!(%peer, "controller listener: a connection was not admitted in time");
                    return;
                }
            };
            loop {
                let request = match read_request(&mut stream, &limits).await {
                    Ok(r) => r,
                    Err(e) => {
                        if e.kind() != std::io::ErrorKind::UnexpectedEof {
                            tracing::debug!(%peer, error = %e, "controller RPC connection closed");
                        }
                        return;
                    }
                };
                let response = dispatch(request).await;
                if write_frame(&mut stream, &response).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// openraft's network factory: one `RpcClient` per target node.
#[derive(Clone)]
pub struct Network {
    security: Arc<dyn RpcSecurity>,
    clients: Arc<parking_lot::Mutex<std::collections::HashMap<NodeId, Arc<RpcClient>>>>,
}

impl Network {
    pub fn new(security: Arc<dyn RpcSecurity>) -> Network {
        Network {
            security,
            clients: Default::default(),
        }
    }

    fn client(&self, target: NodeId, node: &BasicNode) -> Arc<RpcClient> {
        let mut clients = self.clients.lock();
        match clients.get(&target) {
            Some(c) if c.addr() == node.addr => c.clone(),
            _ => {
                let c = Arc::new(RpcClient::new(node.addr.clone(), self.security.clone()));
                clients.insert(target, c.clone());
                c
            }
        }
    }
}

pub struct Connection {
    target: NodeId,
    client: Arc<RpcClient>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Connection {
        Connection {
            target,
            client: self.client(target, node),
        }
    }
}

fn unreachable<E: std::error::Error>(e: &std::io::Error) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(e))
}

fn unexpected<E: std::error::Error>(what: &str) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(format!(
        "unexpected RPC response to {what}"
    ))))
}

impl Connection {
    async fn call<E: std::error::Error>(
        &self,
        request: RpcRequest,
        option: &RPCOption,
    ) -> Result<RpcResponse, RPCError<NodeId, BasicNode, E>> {
        self.client
            .call(&request, option.hard_ttl())
            .await
            .map_err(|e| unreachable(&e))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(RpcRequest::AppendEntries(rpc), &option).await? {
            RpcResponse::AppendEntries(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(unexpected("AppendEntries")),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self.call(RpcRequest::InstallSnapshot(rpc), &option).await? {
            RpcResponse::InstallSnapshot(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(unexpected("InstallSnapshot")),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(RpcRequest::Vote(rpc), &option).await? {
            RpcResponse::Vote(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(unexpected("Vote")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that answers each request with its own payload, the first one
    /// only after `first_delay`.
    async fn echo_peer(first_delay: Duration) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut first = true;
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                loop {
                    let Ok(RpcRequest::Controller(v)) = read_frame(&mut stream).await else {
                        break;
                    };
                    if std::mem::take(&mut first) {
                        tokio::time::sleep(first_delay).await;
                    }
                    if write_frame(&mut stream, &RpcResponse::Controller(v))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        });
        addr
    }

    fn payload(r: &RpcResponse) -> serde_json::Value {
        match r {
            RpcResponse::Controller(v) => v.clone(),
            other => panic!("unexpected response {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_timed_out_exchange_never_answers_the_next_request() {
        let addr = echo_peer(Duration::from_millis(300)).await;
        let client = RpcClient::new(addr, PlainRpc::shared());
        let first = RpcRequest::Controller(serde_json::json!("first"));
        let err = client
            .call(&first, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        // The late answer to "first" must not be taken for "second".
        let second = RpcRequest::Controller(serde_json::json!("second"));
        let r = client.call(&second, Duration::from_secs(5)).await.unwrap();
        assert_eq!(payload(&r), serde_json::json!("second"));
    }

    #[tokio::test]
    async fn a_dropped_exchange_never_answers_the_next_request() {
        let addr = echo_peer(Duration::from_millis(300)).await;
        let client = RpcClient::new(addr, PlainRpc::shared());
        // The caller gives up (drops the future) with the request on the wire.
        let first = RpcRequest::Controller(serde_json::json!("first"));
        let dropped = tokio::time::timeout(
            Duration::from_millis(50),
            client.call(&first, Duration::from_secs(5)),
        )
        .await;
        assert!(dropped.is_err());
        let second = RpcRequest::Controller(serde_json::json!("second"));
        let r = client.call(&second, Duration::from_secs(5)).await.unwrap();
        assert_eq!(payload(&r), serde_json::json!("second"));
        // The connection is reused after a complete exchange.
        let third = RpcRequest::Controller(serde_json::json!("third"));
        let r = client.call(&third, Duration::from_secs(5)).await.unwrap();
        assert_eq!(payload(&r), serde_json::json!("third"));
    }

    /// Admits each connection after `delay`, or never.
    struct SlowAdmission(Option<Duration>);

    impl RpcSecurity for SlowAdmission {
        fn connect(&self, addr: &str) -> RpcFuture<BoxRpcStream> {
            PlainRpc.connect(addr)
        }

        fn accept(&self, stream: TcpStream, _peer: SocketAddr) -> RpcFuture<BoxRpcStream> {
            let delay = self.0;
            Box::pin(async move {
                match delay {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending::<()>().await,
                }
                Ok(Box::new(stream) as BoxRpcStream)
            })
        }
    }

    async fn limited_listener(security: Arc<dyn RpcSecurity>, limits: ServeLimits) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let echo = |r: RpcRequest| async move {
            match r {
                RpcRequest::Controller(v) => RpcResponse::Controller(v),
                other => RpcResponse::Error(format!("unexpected {other:?}")),
            }
        };
        tokio::spawn(serve_with(listener, security, limits, echo));
        addr
    }

    /// Whether the listener closes `stream` within `within`.
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
        let mut b = [0u8; 1];
        matches!(
            tokio::time::timeout(within, stream.read(&mut b)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }

    const LONG: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn handshakes_in_progress_from_one_address_are_capped() {
        let limits = ServeLimits {
            max_connections: 100,
            max_admitting_per_ip: 4,
            admit_timeout: Duration::from_millis(500),
            idle_timeout: LONG,
            frame_timeout: LONG,
        };
        let addr = limited_listener(Arc::new(SlowAdmission(None)), limits).await;
        let mut pending = Vec::new();
        for _ in 0..4 {
            pending.push(TcpStream::connect(&addr).await.unwrap());
        }
        let mut fifth = TcpStream::connect(&addr).await.unwrap();
        assert!(closed_within(&mut fifth, Duration::from_secs(5)).await);
        // The four in their handshake are held until the admission timeout ...
        for s in &mut pending {
            assert!(closed_within(s, Duration::from_secs(5)).await);
        }
        // ... which gives their slots back.
        let mut next = TcpStream::connect(&addr).await.unwrap();
        assert!(!closed_within(&mut next, Duration::from_millis(200)).await);
    }

    #[tokio::test]
    async fn connections_are_capped_and_slots_come_back() {
        let limits = ServeLimits {
            max_connections: 3,
            max_admitting_per_ip: 3,
            admit_timeout: LONG,
            idle_timeout: LONG,
            frame_timeout: LONG,
        };
        let addr = limited_listener(PlainRpc::shared(), limits).await;
        let clients: Vec<RpcClient> = (0..3)
            .map(|_| RpcClient::new(addr.clone(), PlainRpc::shared()))
            .collect();
        for (i, c) in clients.iter().enumerate() {
            let r = c
                .call(&RpcRequest::Controller(i.into()), Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(payload(&r), serde_json::json!(i));
        }
        let mut fourth = TcpStream::connect(&addr).await.unwrap();
        assert!(closed_within(&mut fourth, Duration::from_secs(5)).await);
        // The admitted connections are still served.
        for c in &clients {
            c.call(
                &RpcRequest::Controller("again".into()),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        }
        // A client that goes away gives its slot back.
        drop(clients);
        let late = RpcClient::new(addr.clone(), PlainRpc::shared());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let r = late
                .call(
                    &RpcRequest::Controller("late".into()),
                    Duration::from_secs(1),
                )
                .await;
            if r.is_ok() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no slot came back: {r:?}"
            );
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_frame_that_stalls_and_an_idle_connection_are_closed() {
        let limits = ServeLimits {
            max_connections: 10,
            max_admitting_per_ip: 10,
            admit_timeout: LONG,
            idle_timeout: Duration::from_millis(300),
            frame_timeout: Duration::from_millis(300),
        };
        let addr = limited_listener(PlainRpc::shared(), limits).await;
        // Claims the largest frame and sends ten bytes of it.
        let mut stalled = TcpStream::connect(&addr).await.unwrap();
        stalled
            .write_all(&(MAX_RPC_FRAME as u32).to_be_bytes())
            .await
            .unwrap();
        stalled.write_all(&[b' '; 10]).await.unwrap();
        assert!(closed_within(&mut stalled, Duration::from_secs(5)).await);
        let mut idle = TcpStream::connect(&addr).await.unwrap();
        assert!(closed_within(&mut idle, Duration::from_secs(5)).await);
        // A frame over the limit is refused at its length.
        let mut oversized = TcpStream::connect(&addr).await.unwrap();
        oversized
            .write_all(&(MAX_RPC_FRAME as u32 + 1).to_be_bytes())
            .await
            .unwrap();
        assert!(closed_within(&mut oversized, Duration::from_secs(5)).await);
        // A peer that keeps to the limits is served.
        let client = RpcClient::new(addr, PlainRpc::shared());
        let r = client
            .call(&RpcRequest::Controller("ok".into()), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(payload(&r), serde_json::json!("ok"));
    }
}

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
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_RPC_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("RPC frame of {len} bytes exceeds {MAX_RPC_FRAME}"),
        ));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// A client for one peer's controller listener.
pub struct RpcClient {
    addr: String,
    security: Arc<dyn RpcSecurity>,
    conn: tokio::sync::Mutex<Option<BoxRpcStream>>,
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
        let taken = guard.take();
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
                *guard = Some(stream);
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
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "controller listener accept failed");
                continue;
            }
        };
        let raft = raft.clone();
        let handler = on_controller_request.clone();
        let admitting = security.accept(stream, peer);
        tokio::spawn(async move {
            let mut stream = match tokio::time::timeout(ADMIT_TIMEOUT, admitting).await {
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
                let request: RpcRequest = match read_frame(&mut stream).await {
                    Ok(r) => r,
                    Err(e) => {
                        if e.kind() != std::io::ErrorKind::UnexpectedEof {
                            tracing::debug!(%peer, error = %e, "controller RPC connection closed");
                        }
                        return;
                    }
                };
                let response = match request {
                    RpcRequest::AppendEntries(r) => {
                        RpcResponse::AppendEntries(raft.append_entries(r).await)
                    }
                    RpcRequest::Vote(r) => RpcResponse::Vote(raft.vote(r).await),
                    RpcRequest::InstallSnapshot(r) => {
                        RpcResponse::InstallSnapshot(raft.install_snapshot(r).await)
                    }
                    RpcRequest::Controller(v) => RpcResponse::Controller(handler(v).await),
                };
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
}

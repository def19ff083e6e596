//! Raft between controllers in one process, for simulations: each RPC is a
//! direct call on the target's `Raft`, delayed by a latency and allowed only
//! while the caller's link predicate says the two nodes can reach each
//! other, when it is sent and when its answer comes back (else it is lost,
//! as over a cut network).

use super::{NodeId, Raft, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Whether `from` can reach `to` now.
pub type Link = Arc<dyn Fn(NodeId, NodeId) -> bool + Send + Sync>;

/// The controllers of one simulated quorum; clones share it.
#[derive(Clone)]
pub struct InProcessNetwork {
    nodes: Arc<parking_lot::Mutex<BTreeMap<NodeId, Raft>>>,
    link: Link,
    latency: Duration,
}

impl InProcessNetwork {
    pub fn new(link: Link, latency: Duration) -> Self {
        InProcessNetwork {
            nodes: Arc::default(),
            link,
            latency,
        }
    }

    /// Makes `raft` reachable as node `id`.
    pub fn join(&self, id: NodeId, raft: Raft) {
        self.nodes.lock().insert(id, raft);
    }

    /// The connections of node `from`.
    pub fn factory(&self, from: NodeId) -> InProcessFactory {
        InProcessFactory {
            from,
            network: self.clone(),
        }
    }
}

pub struct InProcessFactory {
    from: NodeId,
    network: InProcessNetwork,
}

impl RaftNetworkFactory<TypeConfig> for InProcessFactory {
    type Network = InProcessConn;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> InProcessConn {
        InProcessConn {
            from: self.from,
            target,
            network: self.network.clone(),
        }
    }
}

pub struct InProcessConn {
    from: NodeId,
    target: NodeId,
    network: InProcessNetwork,
}

fn unreachable<E: std::error::Error>(why: &str) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(why.to_string())))
}

impl InProcessConn {
    #[allow(clippy::result_large_err)]
    fn target<E: std::error::Error>(&self) -> Result<Raft, RPCError<NodeId, BasicNode, E>> {
        if !(self.network.link)(self.from, self.target) {
            return Err(unreachable("partitioned"));
        }
        self.network
            .nodes
            .lock()
            .get(&self.target)
            .cloned()
            .ok_or_else(|| unreachable("target is down"))
    }

    async fn deliver<T, E, F>(
        &self,
        option: &RPCOption,
        send: impl FnOnce(Raft) -> F,
    ) -> Result<T, RPCError<NodeId, BasicNode, E>>
    where
        E: std::error::Error,
        F: std::future::Future<Output = Result<T, E>>,
    {
        let raft = self.target::<E>()?;
        tokio::time::sleep(self.network.latency).await;
        let res = tokio::time::timeout(option.hard_ttl(), send(raft))
            .await
            .map_err(|_| unreachable("timed out"))?;
        tokio::time::sleep(self.network.latency).await;
        self.target::<E>()?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for InProcessConn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.deliver(
            &option,
            |raft| async move { raft.append_entries(rpc).await },
        )
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.deliver(
            &option,
            |raft| async move { raft.install_snapshot(rpc).await },
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.deliver(&option, |raft| async move { raft.vote(rpc).await })
            .await
    }
}

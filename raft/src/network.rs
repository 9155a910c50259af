//! The tonic transport between Raft peers: openraft's `RaftNetwork` on the
//! client side, and the `RaftService` server that hands requests to the
//! local `Raft`. Messages are bincode inside a protobuf `Payload` (see
//! `proto/raft.proto` for why).
//!
//! [`Faults`] lets tests cut a node off: while isolated, it neither sends
//! nor answers any node-to-node RPC.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubestore_proto::raft::raft_service_client::RaftServiceClient;
use kubestore_proto::raft::raft_service_server::RaftService;
use kubestore_proto::raft::Payload;
use kubestore_storage::{Node, NodeId, Stage, StageTimes, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::Raft;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use crate::election::LeaderContact;

/// Largest message a node accepts from a peer (a batch of entries).
pub const MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

/// Fault injection shared by a node's client and server side.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    isolated: Arc<AtomicBool>,
}

impl Faults {
    /// Cuts the node off from (or reconnects it to) every peer.
    pub fn set_isolated(&self, isolated: bool) {
        self.isolated.store(isolated, Ordering::SeqCst);
    }

    /// Whether the node is cut off now.
    pub fn is_isolated(&self) -> bool {
        self.isolated.load(Ordering::SeqCst)
    }
}

/// A lazily connecting channel to a peer's gRPC address.
pub(crate) fn channel(addr: &str) -> Result<Channel, tonic::transport::Error> {
    let uri = if addr.starts_with("http://") || addr.starts_with("https://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    Ok(Endpoint::from_shared(uri)?
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .connect_lazy())
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Payload, tonic::Status> {
    bincode::serialize(value)
        .map(|data| Payload { data })
        .map_err(|e| tonic::Status::internal(format!("encode: {e}")))
}

pub(crate) fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, tonic::Status> {
    bincode::deserialize(payload)
        .map_err(|e| tonic::Status::invalid_argument(format!("decode: {e}")))
}

/// Creates [`PeerClient`]s. openraft asks for a client per replication
/// stream and also per leadership check (every read-index round), so the
/// channel to each peer is made once and shared: a tonic channel is one
/// HTTP/2 connection that multiplexes every call. Without the cache each
/// read-index round opened (and dropped) a TCP connection per follower.
#[derive(Debug, Clone, Default)]
pub struct NetworkFactory {
    pub(crate) faults: Faults,
    channels: Arc<Mutex<HashMap<NodeId, (String, Channel)>>>,
    /// [`Stage::ReplicationRpc`] is timed here.
    timings: Arc<StageTimes>,
}

impl NetworkFactory {
    pub(crate) fn new(faults: Faults, timings: Arc<StageTimes>) -> Self {
        Self {
            faults,
            channels: Arc::default(),
            timings,
        }
    }

    /// The shared channel to `target` at `addr` (made anew if its address changed).
    fn channel_to(&self, target: NodeId, addr: &str) -> Option<Channel> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((known, ch)) = channels.get(&target) {
            if known == addr {
                return Some(ch.clone());
            }
        }
        let ch = channel(addr).ok()?;
        channels.insert(target, (addr.to_string(), ch.clone()));
        Some(ch)
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        PeerClient {
            target,
            client: self.channel_to(target, &node.addr).map(|ch| {
                RaftServiceClient::new(ch)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES)
            }),
            addr: node.addr.clone(),
            faults: self.faults.clone(),
            timings: self.timings.clone(),
        }
    }
}

/// The client side of replication to one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    addr: String,
    client: Option<RaftServiceClient<Channel>>,
    faults: Faults,
    timings: Arc<StageTimes>,
}

impl PeerClient {
    /// Sends one request and decodes the peer's `Result<Resp, RaftError<E>>`.
    async fn call<Req, Resp, E>(
        &mut self,
        req: &Req,
        timeout: Duration,
        rpc: RpcKind,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        if self.faults.is_isolated() {
            return Err(RPCError::Unreachable(Unreachable::new(
                &std::io::Error::other("isolated by fault injection"),
            )));
        }
        let Some(client) = self.client.as_mut() else {
            let e = std::io::Error::other(format!("invalid peer address {:?}", self.addr));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        };
        let payload = encode(req).map_err(|s| RPCError::Network(NetworkError::new(&s)))?;
        let call = async {
            match rpc {
                RpcKind::Append => client.append_entries(payload).await,
                RpcKind::Vote => client.vote(payload).await,
                RpcKind::Snapshot => client.install_snapshot(payload).await,
            }
        };
        let reply = match tokio::time::timeout(timeout, call).await {
            Err(_) => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{rpc:?} to {} timed out", self.target),
                );
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
            Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
                return Err(RPCError::Unreachable(Unreachable::new(&status)));
            }
            Ok(Err(status)) => return Err(RPCError::Network(NetworkError::new(&status))),
            Ok(Ok(reply)) => reply.into_inner(),
        };
        let result: Result<Resp, RaftError<NodeId, E>> =
            decode(&reply.data).map_err(|s| RPCError::Network(NetworkError::new(&s)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

#[derive(Debug, Clone, Copy)]
enum RpcKind {
    Append,
    Vote,
    Snapshot,
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let started = Instant::now();
        let answer = self.call(&rpc, option.hard_ttl(), RpcKind::Append).await;
        if !rpc.entries.is_empty() {
            // Heartbeats carry no write: only replication is timed.
            self.timings.record_since(Stage::ReplicationRpc, started);
        }
        answer
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(&rpc, option.hard_ttl(), RpcKind::Snapshot).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(&rpc, option.hard_ttl(), RpcKind::Vote).await
    }
}

/// The server side of replication: decodes a peer's request and hands it to
/// the local Raft.
#[derive(Clone)]
pub struct RaftRpcServer {
    pub(crate) raft: Raft<TypeConfig>,
    /// [`Stage::AppendEntriesHandled`] is timed here.
    pub(crate) timings: Arc<StageTimes>,
    pub(crate) faults: Faults,
    /// Touched whenever a leader's entries arrive or are accepted, a
    /// snapshot chunk is accepted or a vote is granted, for the election
    /// timer.
    pub(crate) leader_contact: LeaderContact,
}

impl RaftRpcServer {
    fn admit(&self) -> Result<(), tonic::Status> {
        if self.faults.is_isolated() {
            return Err(tonic::Status::unavailable("isolated by fault injection"));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl RaftService for RaftRpcServer {
    async fn append_entries(
        &self,
        req: tonic::Request<Payload>,
    ) -> Result<tonic::Response<Payload>, tonic::Status> {
        self.admit()?;
        let started = Instant::now();
        let rpc: AppendEntriesRequest<TypeConfig> = decode(&req.get_ref().data)?;
        let carries_entries = !rpc.entries.is_empty();
        // A request from a leader whose vote is at least this node's is
        // contact on arrival: the core may answer it only seconds later
        // (replaying entries after a large snapshot install), and the
        // timer is about whether the leader lives, not about the core.
        if rpc.vote >= self.raft.metrics().borrow().vote {
            self.leader_contact.touch();
        }
        let result = self.raft.append_entries(rpc).await;
        if matches!(&result, Ok(resp) if !matches!(resp, AppendEntriesResponse::HigherVote(_))) {
            self.leader_contact.touch();
        }
        if carries_entries {
            self.timings
                .record_since(Stage::AppendEntriesHandled, started);
        }
        encode(&result).map(tonic::Response::new)
    }

    async fn vote(
        &self,
        req: tonic::Request<Payload>,
    ) -> Result<tonic::Response<Payload>, tonic::Status> {
        self.admit()?;
        let rpc: VoteRequest<NodeId> = decode(&req.get_ref().data)?;
        let result = self.raft.vote(rpc).await;
        if matches!(&result, Ok(resp) if resp.vote_granted) {
            self.leader_contact.touch();
        }
        encode(&result).map(tonic::Response::new)
    }

    async fn install_snapshot(
        &self,
        req: tonic::Request<Payload>,
    ) -> Result<tonic::Response<Payload>, tonic::Status> {
        self.admit()?;
        let rpc: InstallSnapshotRequest<TypeConfig> = decode(&req.get_ref().data)?;
        let vote = rpc.vote;
        let result = self.raft.install_snapshot(rpc).await;
        // The answer carries this node's vote from before the chunk: the
        // chunk was accepted if the leader's is at least that.
        if matches!(&result, Ok(resp) if resp.vote <= vote) {
            self.leader_contact.touch_snapshot();
        }
        encode(&result).map(tonic::Response::new)
    }
}

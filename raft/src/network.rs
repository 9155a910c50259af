//! The transport between Raft peers: openraft's `RaftNetwork` on the
//! client side, and the server side that hands requests to the local
//! `Raft`. Messages are bincode inside a protobuf `Payload` or
//! `SequencedPayload` (see `proto/raft.proto` for why).
//!
//! AppendEntries, which carries every write and every heartbeat, travels
//! as messages on one long-lived call stream per leader and follower
//! (`crate::call_stream`, a connection of the peer port of its own),
//! shared by openraft's replication to that follower and its leadership
//! checks. Votes and snapshots, which are rare, are unary gRPC calls
//! (`RaftService`).
//!
//! [`Faults`] lets tests cut a node off: while isolated, it neither sends
//! nor answers any node-to-node RPC.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubestore_proto::raft::raft_service_client::RaftServiceClient;
use kubestore_proto::raft::raft_service_server::RaftService;
use kubestore_proto::raft::{Payload, SequencedPayload};
use kubestore_storage::{LogDurability, Node, NodeId, Stage, StageTimes, TypeConfig};
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
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};

pub use crate::call_stream::MAX_MESSAGE_BYTES;
use crate::call_stream::{self, CallStream, StreamEnded, StreamKind};
use crate::election::LeaderContact;
pub use crate::faults::Faults;

/// AppendEntries sent to a peer and not answered, past which its stream
/// is replaced. Healthy, a follower has a few in flight: openraft 0.9's
/// replication waits for each answer, and the leadership checks of
/// read-index rounds add one each. A paused follower answers nothing while
/// the leader retries every heartbeat interval, each retry carrying the
/// entries again.
const MAX_UNANSWERED_ENTRIES: u64 = 32;

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
    encode_bytes(value).map(|data| Payload { data })
}

fn encode_bytes<T: Serialize>(value: &T) -> Result<Vec<u8>, tonic::Status> {
    bincode::serialize(value).map_err(|e| tonic::Status::internal(format!("encode: {e}")))
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
#[derive(Debug, Clone)]
pub struct NetworkFactory {
    pub(crate) faults: Faults,
    links: Arc<Mutex<HashMap<NodeId, Arc<PeerLink>>>>,
    /// Streams opened to send AppendEntries (`/debug/cluster`'s
    /// `entries_streams_opened`).
    pub(crate) entries_streams_opened: Arc<AtomicU64>,
    /// [`Stage::ReplicationRpc`] is timed here.
    timings: Arc<StageTimes>,
    /// How far this node's log is on disk: the commit index a follower is
    /// told never runs ahead of it.
    durability: LogDurability,
}

impl NetworkFactory {
    pub(crate) fn new(faults: Faults, timings: Arc<StageTimes>, durability: LogDurability) -> Self {
        Self {
            faults,
            links: Arc::default(),
            entries_streams_opened: Arc::default(),
            timings,
            durability,
        }
    }

    /// The shared link to `target` at `addr` (made anew if its address
    /// changed); `None` if `addr` is not a valid address.
    fn link_to(&self, target: NodeId, addr: &str) -> Option<Arc<PeerLink>> {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(link) = links.get(&target) {
            if link.addr == addr {
                return Some(Arc::clone(link));
            }
        }
        let link = Arc::new(PeerLink {
            target,
            addr: addr.to_string(),
            channel: channel(addr).ok()?,
            entries: Mutex::new(None),
            opened: Arc::clone(&self.entries_streams_opened),
        });
        if let Some(old) = links.insert(target, Arc::clone(&link)) {
            old.close_entries();
        }
        Some(link)
    }
}

type EntriesStream = CallStream<SequencedPayload, SequencedPayload>;

/// What this node holds for one peer: the channel to it (one HTTP/2
/// connection, for votes and snapshots), and the stream its AppendEntries
/// travel on.
#[derive(Debug)]
struct PeerLink {
    target: NodeId,
    addr: String,
    channel: Channel,
    /// Opened by the first AppendEntries, and again by the first after it
    /// ended.
    entries: Mutex<Option<EntriesStream>>,
    /// The factory's count of entries streams opened.
    opened: Arc<AtomicU64>,
}

impl PeerLink {
    fn entries(&self) -> std::sync::MutexGuard<'_, Option<EntriesStream>> {
        // Every change is one assignment: consistent whatever panicked.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn client(&self) -> RaftServiceClient<Channel> {
        RaftServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Sends one encoded AppendEntries on the stream to the peer (opened
    /// if there is none open) and returns the receiver of its answer.
    fn send_entries(
        &self,
        data: Vec<u8>,
    ) -> Result<call_stream::Answer<SequencedPayload>, StreamEnded> {
        let request = |seq| SequencedPayload { data, seq };
        let mut entries = self.entries();
        if let Some(stream) = entries.as_ref().filter(|s| s.is_open()) {
            let unanswered = stream.unanswered();
            if unanswered < MAX_UNANSWERED_ENTRIES {
                return stream.send(request);
            }
            // The peer stopped answering and every retry queued another
            // copy of the entries behind the last. A unary call that timed
            // out would have been cancelled; here the stream is.
            tracing::debug!(
                target_node = self.target,
                unanswered,
                "replacing the entries stream to an unanswering peer"
            );
            stream.close();
        }
        let stream = EntriesStream::open(
            tracing::debug_span!("entries_stream", target = self.target),
            self.addr.clone(),
            StreamKind::Entries,
        );
        self.opened.fetch_add(1, Ordering::Relaxed);
        let answer = stream.send(request);
        *entries = Some(stream);
        answer
    }

    /// Ends the stream to the peer, if one is open: what it still holds
    /// is not sent, and the next AppendEntries opens another.
    fn close_entries(&self) {
        if let Some(stream) = self.entries().take() {
            stream.close();
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        PeerClient {
            target,
            link: self.link_to(target, &node.addr),
            addr: node.addr.clone(),
            faults: self.faults.clone(),
            timings: self.timings.clone(),
            durability: self.durability.clone(),
        }
    }
}

/// The client side of replication to one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    addr: String,
    link: Option<Arc<PeerLink>>,
    faults: Faults,
    timings: Arc<StageTimes>,
    durability: LogDurability,
}

impl PeerClient {
    /// Sends one request and decodes the peer's `Result<Resp, RaftError<E>>`.
    /// AppendEntries goes on the link's stream, the rest as unary calls.
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
        let Some(link) = self.link.as_ref() else {
            let e = std::io::Error::other(format!("invalid peer address {:?}", self.addr));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        };
        let data = encode_bytes(req).map_err(|s| RPCError::Network(NetworkError::new(&s)))?;
        let call = async {
            let reply: Result<Vec<u8>, CallFailed> = match rpc {
                RpcKind::Append => {
                    let mut answer = link.send_entries(data)?;
                    Ok(answer.received().await?.data)
                }
                RpcKind::Vote | RpcKind::Snapshot => {
                    let (mut client, payload) = (link.client(), Payload { data });
                    let reply = match rpc {
                        RpcKind::Vote => client.vote(payload).await?,
                        _ => client.install_snapshot(payload).await?,
                    };
                    Ok(reply.into_inner().data)
                }
            };
            reply
        };
        let reply = match tokio::time::timeout(timeout, call).await {
            Err(_) => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{rpc:?} to {} timed out", self.target),
                );
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
            Ok(Err(CallFailed::Ended)) => {
                let e = std::io::Error::other(format!("the stream to {} ended", self.target));
                return Err(RPCError::Unreachable(Unreachable::new(&e)));
            }
            Ok(Err(CallFailed::Status(status))) if status.code() == tonic::Code::Unavailable => {
                return Err(RPCError::Unreachable(Unreachable::new(&status)));
            }
            Ok(Err(CallFailed::Status(status))) => {
                return Err(RPCError::Network(NetworkError::new(&status)))
            }
            Ok(Ok(reply)) => reply,
        };
        let result: Result<Resp, RaftError<NodeId, E>> =
            decode(&reply).map_err(|s| RPCError::Network(NetworkError::new(&s)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

/// Why a call to a peer got no answer.
enum CallFailed {
    /// Its stream ended first (the peer went away, or it is isolated).
    Ended,
    /// The unary call failed.
    Status(tonic::Status),
}

impl From<StreamEnded> for CallFailed {
    fn from(StreamEnded: StreamEnded) -> Self {
        Self::Ended
    }
}

impl From<tonic::Status> for CallFailed {
    fn from(status: tonic::Status) -> Self {
        Self::Status(status)
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
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let started = Instant::now();
        // The leader counts its own entries before their fsync; a follower
        // applies nothing the leader's disk does not hold yet.
        rpc.leader_commit = self.durability.clamp_commit(rpc.leader_commit);
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

    /// Serves a leader's stream of AppendEntries on `connection`.
    pub(crate) fn serve_entries(&self, connection: TcpStream) {
        let server = self.clone();
        call_stream::serve(
            tracing::debug_span!("entries_stream_served"),
            connection,
            &self.raft,
            &self.faults,
            move |request| {
                let server = server.clone();
                async move { server.answer_entries(request).await }
            },
        );
    }

    /// Hands one AppendEntries from the stream to the local Raft; its
    /// answer, under the request's `seq`. A request that does not decode
    /// ends the stream.
    async fn answer_entries(
        &self,
        request: SequencedPayload,
    ) -> Result<SequencedPayload, tonic::Status> {
        let started = Instant::now();
        let rpc: AppendEntriesRequest<TypeConfig> = decode(&request.data)?;
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
        Ok(SequencedPayload {
            data: encode_bytes(&result)?,
            seq: request.seq,
        })
    }
}

#[tonic::async_trait]
impl RaftService for RaftRpcServer {
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

//! What a node serves its peers on the peer port beside Raft (which is in
//! [`crate::network`]), never beside a client API: forwarded writes
//! (validated again against
//! [`RaftNodeConfig::command_limits`](crate::RaftNodeConfig::command_limits)
//! before they are proposed) and read indexes for followers, each on one
//! call stream per follower (`crate::call_stream`), and this node's
//! client address for MemberList (`ClusterService`, gRPC).

use std::convert::Infallible;

use futures::FutureExt;
use kubestore_proto::raft::cluster_service_server::{ClusterService, ClusterServiceServer};
use kubestore_proto::raft::{
    ClientAddrRequest, ClientAddrResponse, ForwardRequest, ForwardResponse, ReadIndexRequest,
    ReadIndexResponse,
};
use kubestore_storage::Command;
use tokio::net::TcpStream;
use tracing::Instrument;

use crate::call_stream;
use crate::network::{self, MAX_MESSAGE_BYTES};
use crate::node::RaftNode;
use crate::propose::Redirect;

/// Serves this node's client address to other nodes.
#[derive(Clone)]
pub struct ClusterRpcServer {
    node: RaftNode,
}

impl RaftNode {
    /// The client address service, to be served on the node's peer port.
    pub fn cluster_service(&self) -> ClusterServiceServer<ClusterRpcServer> {
        ClusterServiceServer::new(ClusterRpcServer { node: self.clone() })
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Serves a follower's stream of forwarded writes on `connection`.
    pub(crate) fn serve_forwards(&self, connection: TcpStream) {
        let node = self.clone();
        call_stream::serve(
            tracing::debug_span!("forward_stream_served", node = self.inner.id),
            connection,
            &self.inner.raft,
            &self.inner.faults,
            move |request| answer_forwarded(node.clone(), request).map(Ok::<_, Infallible>),
        );
    }

    /// Serves a follower's stream of read-index requests on `connection`.
    pub(crate) fn serve_read_indexes(&self, connection: TcpStream) {
        let node = self.clone();
        call_stream::serve(
            tracing::debug_span!("read_index_stream_served", node = self.inner.id),
            connection,
            &self.inner.raft,
            &self.inner.faults,
            move |request| answer_read_index(node.clone(), request).map(Ok::<_, Infallible>),
        );
    }
}

#[tonic::async_trait]
impl ClusterService for ClusterRpcServer {
    async fn client_addr(
        &self,
        _req: tonic::Request<ClientAddrRequest>,
    ) -> Result<tonic::Response<ClientAddrResponse>, tonic::Status> {
        if self.node.inner.faults.is_isolated() {
            return Err(tonic::Status::unavailable("isolated by fault injection"));
        }
        Ok(tonic::Response::new(ClientAddrResponse {
            client_addr: self.node.inner.client_addr.clone().unwrap_or_default(),
        }))
    }
}

/// Decodes, checks and proposes one forwarded command; its answer, under
/// the request's `seq`. A command that does not decode (nested too deep)
/// or would not pass a front end's checks is answered with an error and
/// never proposed.
async fn answer_forwarded(node: RaftNode, request: ForwardRequest) -> ForwardResponse {
    let seq = request.seq;
    let failed = |error: String| ForwardResponse {
        response: Vec::new(),
        leader_id: None,
        error,
        seq,
    };
    // Debug level, as `RaftNode::write`'s: one span per forwarded write.
    let span = tracing::debug_span!("forwarded_write", node = node.inner.id, seq);
    // Decoding bounds the nesting of txns (`kubestore_storage::MAX_TXN_DEPTH`);
    // validation holds the command to what this node's front ends accept.
    let cmd = span.in_scope(|| {
        let cmd: Command =
            network::decode(&request.command).map_err(|s| s.message().to_string())?;
        cmd.validate(&node.inner.command_limits).map_err(|e| {
            tracing::warn!(node = node.inner.id, seq, error = %e, cmd = %cmd, "refused a forwarded command");
            format!("invalid command: {e}")
        })?;
        Ok::<_, String>(cmd)
    });
    let cmd = match cmd {
        Ok(cmd) => cmd,
        Err(error) => return failed(error),
    };
    match node.write_forwarded(cmd).instrument(span).await {
        Ok(resp) => match bincode::serialize(&resp) {
            Ok(response) => ForwardResponse {
                response,
                leader_id: Some(node.inner.id),
                error: String::new(),
                seq,
            },
            Err(e) => failed(format!("encoding the answer: {e}")),
        },
        Err(Redirect::To(leader_id)) => ForwardResponse {
            response: Vec::new(),
            leader_id,
            error: String::new(),
            seq,
        },
        Err(Redirect::Fail(e)) => failed(e.to_string()),
    }
}

/// A read index for a follower, under the request's `seq`: refused with
/// the leader this node knows of if it is not the leader.
async fn answer_read_index(node: RaftNode, request: ReadIndexRequest) -> ReadIndexResponse {
    let seq = request.seq;
    let leader = node.current_leader();
    if leader != Some(node.inner.id) {
        return ReadIndexResponse {
            index: 0,
            leader_id: leader,
            error: format!("node {} is not the leader", node.inner.id),
            seq,
        };
    }
    match node.read_index().await {
        Ok(index) => ReadIndexResponse {
            index,
            leader_id: leader,
            error: String::new(),
            seq,
        },
        Err(e) => ReadIndexResponse {
            index: 0,
            leader_id: None,
            error: e.to_string(),
            seq,
        },
    }
}

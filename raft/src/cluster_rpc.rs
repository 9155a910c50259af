//! The cluster service a node serves its peers on the peer port
//! (`ClusterService`, beside openraft's `RaftService` in
//! [`crate::network`], never beside a client API): forwarded writes
//! (validated again against [`RaftNodeConfig::command_limits`](crate::RaftNodeConfig::command_limits) before they
//! are proposed), read indexes for followers, and this node's client
//! address for MemberList.

use kubestore_proto::raft::cluster_service_server::{ClusterService, ClusterServiceServer};
use kubestore_proto::raft::{
    ClientAddrRequest, ClientAddrResponse, ForwardRequest, ForwardResponse, ReadIndexRequest,
    ReadIndexResponse,
};
use kubestore_storage::Command;
use tracing::Instrument;

use crate::network::{self, MAX_MESSAGE_BYTES};
use crate::node::RaftNode;
use crate::propose::Redirect;

/// Serves forwarded writes and read-index requests from other nodes.
#[derive(Clone)]
pub struct ClusterRpcServer {
    node: RaftNode,
}

impl RaftNode {
    /// Write forwarding, read index and client address, to be served on the
    /// node's peer port.
    pub fn cluster_service(&self) -> ClusterServiceServer<ClusterRpcServer> {
        ClusterServiceServer::new(ClusterRpcServer { node: self.clone() })
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

#[tonic::async_trait]
impl ClusterService for ClusterRpcServer {
    async fn forward(
        &self,
        req: tonic::Request<ForwardRequest>,
    ) -> Result<tonic::Response<ForwardResponse>, tonic::Status> {
        if self.node.inner.faults.is_isolated() {
            return Err(tonic::Status::unavailable("isolated by fault injection"));
        }
        let span = tracing::info_span!("forwarded_write", node = self.node.inner.id);
        // Decoding bounds the nesting of txns (`kubestore_storage::MAX_TXN_DEPTH`);
        // validation holds the command to what this node's front ends accept.
        let cmd: Command = span.in_scope(|| {
            let cmd: Command = network::decode(&req.get_ref().command)?;
            cmd.validate(&self.node.inner.command_limits).map_err(|e| {
                tracing::warn!(error = %e, cmd = %cmd, "refused a forwarded command");
                tonic::Status::invalid_argument(format!("invalid command: {e}"))
            })?;
            Ok::<_, tonic::Status>(cmd)
        })?;
        let reply = match self.node.write_forwarded(cmd).instrument(span).await {
            Ok(resp) => ForwardResponse {
                response: bincode::serialize(&resp)
                    .map_err(|e| tonic::Status::internal(e.to_string()))?,
                leader_id: Some(self.node.inner.id),
                error: String::new(),
            },
            Err(Redirect::To(leader_id)) => ForwardResponse {
                response: Vec::new(),
                leader_id,
                error: String::new(),
            },
            Err(Redirect::Fail(e)) => ForwardResponse {
                response: Vec::new(),
                leader_id: None,
                error: e.to_string(),
            },
        };
        Ok(tonic::Response::new(reply))
    }

    async fn read_index(
        &self,
        _req: tonic::Request<ReadIndexRequest>,
    ) -> Result<tonic::Response<ReadIndexResponse>, tonic::Status> {
        if self.node.inner.faults.is_isolated() {
            return Err(tonic::Status::unavailable("isolated by fault injection"));
        }
        let leader = self.node.current_leader();
        if leader != Some(self.node.inner.id) {
            return Ok(tonic::Response::new(ReadIndexResponse {
                index: 0,
                leader_id: leader,
                error: format!("node {} is not the leader", self.node.inner.id),
            }));
        }
        let reply = match self.node.read_index().await {
            Ok(index) => ReadIndexResponse {
                index,
                leader_id: leader,
                error: String::new(),
            },
            Err(e) => ReadIndexResponse {
                index: 0,
                leader_id: None,
                error: e.to_string(),
            },
        };
        Ok(tonic::Response::new(reply))
    }

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

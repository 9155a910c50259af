//! etcd's Cluster service: MemberList from the Raft membership. Membership
//! changes answer `Unimplemented`: kubestore's Raft group is fixed at
//! bootstrap (`--peers`).

use kubestore_proto::etcd::etcdserverpb as pb;
use kubestore_proto::etcd::etcdserverpb::cluster_server::Cluster;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::context::Context;
use super::status;

/// How long MemberList waits for a peer to say its client address (once
/// per peer and process; the answer is kept).
const CLIENT_ADDR_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct ClusterService(pub(super) Context);

fn url(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

fn strip_scheme(addr: &str) -> String {
    addr.split_once("://")
        .map_or(addr, |(_, rest)| rest)
        .to_string()
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(
        &self,
        _request: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        Err(status::not_supported(
            "MemberAdd (membership is fixed at bootstrap)",
        ))
    }

    async fn member_remove(
        &self,
        _request: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        Err(status::not_supported(
            "MemberRemove (membership is fixed at bootstrap)",
        ))
    }

    async fn member_update(
        &self,
        _request: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        Err(status::not_supported(
            "MemberUpdate (membership is fixed at bootstrap)",
        ))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn member_list(
        &self,
        request: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        if request.into_inner().linearizable {
            self.0
                .node
                .linearizable_barrier()
                .await
                .map_err(status::raft)?;
        }
        // Peer URLs are the Raft membership's (peer port) addresses; client
        // URLs are where each member serves this API, which each member
        // tells the others over the peer port (a member that has not
        // answered yet is listed without one, as etcd lists an unstarted
        // member). Client URLs go out as plain `host:port`: etcdctl dials
        // member URLs in gRPC passthrough mode, which sends
        // `http://host:port` as the HTTP/2 `:authority`; etcd's Go server
        // tolerates that, the h2 server here refuses it (PROTOCOL_ERROR),
        // and every etcd client accepts a URL without a scheme.
        let client_addrs = self.0.node.member_client_addrs(CLIENT_ADDR_TIMEOUT).await;
        let members = self
            .0
            .node
            .members()
            .into_iter()
            .map(|(id, peer_addr)| pb::Member {
                id,
                name: format!("node-{id}"),
                peer_ur_ls: vec![url(&peer_addr)],
                client_ur_ls: client_addrs
                    .get(&id)
                    .map(|a| strip_scheme(a))
                    .into_iter()
                    .collect(),
                is_learner: false,
            })
            .collect();
        let current = self.0.node.store().applied().revision.0;
        Ok(Response::new(pb::MemberListResponse {
            header: self.0.header(current),
            members,
        }))
    }

    async fn member_promote(
        &self,
        _request: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        Err(status::not_supported(
            "MemberPromote (there are no learners)",
        ))
    }
}

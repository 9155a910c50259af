//! The etcd v3 gRPC API on every node, over the same revision log and
//! keyspace as the Kubernetes REST API.
//!
//! A request maps onto the storage model one to one: a Put, DeleteRange or
//! Txn is one `Command::Txn` through Raft (one revision per transaction),
//! Compact is `Command::Compact`, and a Range reads the node's MVCC store
//! after a linearizable barrier (or at once when `serializable`). Watches
//! follow the node's revision-ordered event log. Lease grants, renewals and
//! revokes are log entries too; the leader expires leases (see `lease`). Every response carries
//! etcd's `ResponseHeader`, and every error etcd's gRPC code and message,
//! so etcd clients (etcdctl, client-go's etcd3 storage, the etcd-client
//! crate) react as they do against etcd. `status` is the one place that
//! makes those errors: storage's, Raft's and apply's errors map there, in
//! etcd's words (its `rpctypes`).

mod cluster;
mod context;
mod convert;
mod dispatch;
mod kv;
mod lease;
mod maintenance;
mod status;
mod unary;
mod watch;

use kubestore_proto::etcd::etcdserverpb::cluster_server::ClusterServer;
use kubestore_proto::etcd::etcdserverpb::kv_server::KvServer;
use kubestore_proto::etcd::etcdserverpb::lease_server::LeaseServer;
use kubestore_proto::etcd::etcdserverpb::maintenance_server::MaintenanceServer;
use kubestore_proto::etcd::etcdserverpb::watch_server::WatchServer;
use kubestore_raft::RaftNode;

use context::Context;
pub use context::{EtcdOptions, ETCD_CLUSTER_VERSION, ETCD_VERSION, MAX_REQUEST_BYTES};
pub use dispatch::EtcdDispatch;

/// The etcd front end of a node: the services' shared [`Context`], the
/// lease keeper, and the slots of the keyspace-wide Maintenance calls.
#[derive(Debug, Clone)]
pub struct EtcdContext {
    ctx: Context,
    keeper: lease::LeaseKeeper,
    /// Slots of the Maintenance calls that read the whole keyspace (Hash,
    /// HashKV, Snapshot): [`maintenance::MAX_MAINTENANCE_INFLIGHT`].
    maintenance_slots: std::sync::Arc<tokio::sync::Semaphore>,
}

impl EtcdContext {
    pub fn new(
        node: RaftNode,
        options: EtcdOptions,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        Self {
            ctx: Context::new(node, options, stop),
            keeper: lease::LeaseKeeper::default(),
            maintenance_slots: std::sync::Arc::new(tokio::sync::Semaphore::new(
                maintenance::MAX_MAINTENANCE_INFLIGHT,
            )),
        }
    }

    /// Runs the lease keeper (expiry on the leader) until the node stops.
    pub async fn run_lease_keeper(self) {
        let stop = self.ctx.stop.clone();
        self.keeper.run(self.ctx, stop).await
    }

    /// The tonic services of the etcd API, to add to the node's gRPC server.
    pub fn services(&self) -> EtcdServices {
        let limit = MAX_REQUEST_BYTES + 1024 * 1024;
        let ctx = &self.ctx;
        EtcdServices {
            kv: KvServer::new(kv::KvService(ctx.clone()))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
            kv_handler: kv::KvService(ctx.clone()),
            kv_limit: limit,
            watch: WatchServer::new(watch::WatchService(ctx.clone()))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
            lease: LeaseServer::new(lease::LeaseService {
                ctx: ctx.clone(),
                keeper: self.keeper.clone(),
            }),
            maintenance: MaintenanceServer::new(maintenance::MaintenanceService::new(
                ctx.clone(),
                self.maintenance_slots.clone(),
            ))
            .max_encoding_message_size(usize::MAX),
            cluster: ClusterServer::new(cluster::ClusterService(ctx.clone())),
        }
    }
}

/// The etcd API's tonic services of one node.
#[derive(Debug)]
pub struct EtcdServices {
    pub kv: KvServer<kv::KvService>,
    /// The KV service's handler, for the unary calls answered without
    /// tonic's codec ([`unary`]), and the largest message it takes.
    kv_handler: kv::KvService,
    kv_limit: usize,
    pub watch: WatchServer<watch::WatchService>,
    pub lease: LeaseServer<lease::LeaseService>,
    pub maintenance: MaintenanceServer<maintenance::MaintenanceService>,
    pub cluster: ClusterServer<cluster::ClusterService>,
}

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
mod convert;
mod kv;
mod lease;
mod maintenance;
mod status;
mod watch;

use kubestore_proto::etcd::etcdserverpb::cluster_server::ClusterServer;
use kubestore_proto::etcd::etcdserverpb::kv_server::KvServer;
use kubestore_proto::etcd::etcdserverpb::lease_server::LeaseServer;
use kubestore_proto::etcd::etcdserverpb::maintenance_server::MaintenanceServer;
use kubestore_proto::etcd::etcdserverpb::watch_server::WatchServer;
use kubestore_proto::etcd::etcdserverpb::ResponseHeader;
use kubestore_raft::RaftNode;
use kubestore_storage::{Command, Limits};
use std::time::Duration;
use tonic::Status;

/// The etcd server version kubestore reports (clients gate features on it).
pub const ETCD_VERSION: &str = "3.5.16";
/// The cluster version (major.minor) etcd reports beside it.
pub const ETCD_CLUSTER_VERSION: &str = "3.5.0";
/// etcd's default `--max-request-bytes` (1.5 MiB), on a request's encoded
/// size; the command it becomes is held to [`Limits::ETCD`] (its op count,
/// `--max-txn-ops`, and its keys and values, at most this many bytes).
pub const MAX_REQUEST_BYTES: usize = Limits::ETCD.max_command_bytes;

/// Settings of the etcd front end (`--etcd-progress-notify-seconds`,
/// `--quota-backend-bytes`).
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// How often a watch created with `progress_notify` gets a progress
    /// response while idle (etcd's default is 10 minutes).
    pub progress_notify_interval: Duration,
    /// Refuse writes once the database is larger than this (etcd's
    /// `--quota-backend-bytes`); the NOSPACE alarm is raised.
    pub quota_bytes: u64,
    /// Requests in flight, shared with the REST front end.
    pub limits: crate::limits::InflightLimits,
}

/// What every etcd service of a node shares.
#[derive(Debug, Clone)]
pub struct EtcdContext {
    node: RaftNode,
    options: EtcdOptions,
    keeper: lease::LeaseKeeper,
    /// Turns true when the node shuts down: long-lived streams (watch,
    /// keep-alive) end so the gRPC server's graceful shutdown can finish.
    stop: tokio::sync::watch::Receiver<bool>,
    /// Derived once from the membership (fixed at bootstrap), not per
    /// response.
    cluster_id: std::sync::Arc<std::sync::OnceLock<u64>>,
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
            node,
            options,
            keeper: lease::LeaseKeeper::default(),
            stop,
            cluster_id: std::sync::Arc::default(),
            maintenance_slots: std::sync::Arc::new(tokio::sync::Semaphore::new(
                maintenance::MAX_MAINTENANCE_INFLIGHT,
            )),
        }
    }

    /// Takes an in-flight slot for a unary request, or refuses it with
    /// etcd's `ResourceExhausted` "too many requests".
    fn admit(&self, class: crate::limits::RequestClass) -> Result<crate::limits::Admitted, Status> {
        self.options
            .limits
            .admit(class)
            .map_err(|_| status::too_many_requests())
    }

    /// Resolves once the node is shutting down.
    async fn stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|s| *s).await;
    }

    /// Runs the lease keeper (expiry on the leader) until the node stops.
    pub async fn run_lease_keeper(self) {
        let stop = self.stop.clone();
        self.keeper.clone().run(self, stop).await
    }

    /// A stable id for the cluster: derived from its initial members, so
    /// every node reports the same one.
    fn cluster_id(&self) -> u64 {
        if let Some(id) = self.cluster_id.get() {
            return *id;
        }
        let members = self.node.members();
        let mut h = Fnv64::default();
        for (id, addr) in &members {
            h.write(&id.to_be_bytes());
            h.write(addr.as_bytes());
        }
        // Kept once the membership is known (it is fixed from then on).
        if members.is_empty() {
            h.finish()
        } else {
            *self.cluster_id.get_or_init(|| h.finish())
        }
    }

    /// The header of a response served at `revision`.
    fn header(&self, revision: u64) -> Option<ResponseHeader> {
        Some(ResponseHeader {
            cluster_id: self.cluster_id(),
            member_id: self.node.id(),
            revision: revision as i64,
            raft_term: self.node.current_term(),
        })
    }

    /// The NOSPACE alarm is raised while the database exceeds the quota.
    fn over_quota(&self) -> bool {
        self.node.store().size_on_disk() > self.options.quota_bytes
    }

    /// The tonic services of the etcd API, to add to the node's gRPC server.
    pub fn services(&self) -> EtcdServices {
        let limit = MAX_REQUEST_BYTES + 1024 * 1024;
        EtcdServices {
            kv: KvServer::new(kv::KvService(self.clone()))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
            watch: WatchServer::new(watch::WatchService(self.clone()))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
            lease: LeaseServer::new(lease::LeaseService {
                ctx: self.clone(),
                keeper: self.keeper.clone(),
            }),
            maintenance: MaintenanceServer::new(maintenance::MaintenanceService::new(self.clone()))
                .max_encoding_message_size(usize::MAX),
            cluster: ClusterServer::new(cluster::ClusterService(self.clone())),
        }
    }
}

/// The etcd API's tonic services of one node.
#[derive(Debug)]
pub struct EtcdServices {
    pub kv: KvServer<kv::KvService>,
    pub watch: WatchServer<watch::WatchService>,
    pub lease: LeaseServer<lease::LeaseService>,
    pub maintenance: MaintenanceServer<maintenance::MaintenanceService>,
    pub cluster: ClusterServer<cluster::ClusterService>,
}

/// Checks a command the etcd API is about to propose against etcd's limits
/// ([`Limits::ETCD`]), with etcd's errors. The leader checks every
/// forwarded command the same way (with the node's limits, which are at
/// least these), so this is the front end's answer, not the only check.
fn validate(cmd: &Command) -> Result<(), Status> {
    cmd.validate(&Limits::ETCD).map_err(status::invalid)
}

/// FNV-1a, 64 bit: a stable hash across processes and versions (std's
/// hasher is neither), for the cluster id and HashKV. Hand-written: eight
/// lines, where a crate would add a dependency for one function.
#[derive(Debug, Clone, Copy)]
struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv64 {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(self) -> u64 {
        self.0
    }
}

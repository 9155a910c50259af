//! One running kubestore node: the Raft node and its three listeners, started
//! together and stopped together: the REST API, the etcd API (gRPC, for
//! clients) and the peer port (gRPC, Raft and cluster RPCs between nodes
//! only, so a client cannot send a forged Raft message). Used by `kubestore
//! serve` and by the in-process test cluster.

use std::net::SocketAddr;
use std::time::Duration;

use futures::Stream;
use kubestore_raft::{RaftNode, RaftNodeConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::Router;
use tonic::transport::Server;
use tower_http::trace::TraceLayer;

use crate::config::ServeConfig;
use crate::http::{self, AppState, SharedState};
use crate::kube::cache::{CacheLimits, WatchCache};
use crate::kube::store::KubeStore;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("raft: {0}")]
    Raft(#[from] kubestore_raft::RaftNodeError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// A node with its servers running.
#[derive(Debug)]
pub struct RunningNode {
    pub raft: RaftNode,
    pub rest_addr: SocketAddr,
    /// The etcd API (client) listener.
    pub grpc_addr: SocketAddr,
    /// The peer listener (Raft and cluster RPCs).
    pub peer_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningNode {
    /// Starts a node on already-bound listeners (so tests can use port 0):
    /// `rest` for the Kubernetes API, `grpc` for the etcd API, `peer` for
    /// the other nodes.
    pub async fn start(
        config: ServeConfig,
        rest: TcpListener,
        grpc: TcpListener,
        peer: TcpListener,
    ) -> Result<Self, NodeError> {
        let rest_addr = rest.local_addr()?;
        let grpc_addr = grpc.local_addr()?;
        let peer_addr = peer.local_addr()?;
        let advertised_peer = config
            .advertise_peer_addr
            .clone()
            .unwrap_or_else(|| peer_addr.to_string());
        let members = config
            .members(&advertised_peer)
            .map_err(NodeError::Config)?;
        let mut raft_config = RaftNodeConfig::new(config.id, config.data_dir.clone(), members);
        raft_config.client_addr = Some(
            config
                .advertise_client_addr
                .clone()
                .unwrap_or_else(|| grpc_addr.to_string()),
        );
        raft_config.snapshot_after_entries = config.snapshot_after_entries;
        raft_config.log_entries_kept_after_snapshot = config.snapshot_catch_up_entries;
        raft_config.heartbeat_interval = Duration::from_millis(config.heartbeat_interval);
        raft_config.election_timeout_min = Duration::from_millis(config.election_timeout);
        raft_config.election_timeout_max = Duration::from_millis(config.election_timeout * 2);
        raft_config.read_lease = Duration::from_millis(config.read_lease_ms);
        raft_config.disk_faults = config.disk_faults.clone();
        raft_config.command_limits =
            kubestore_raft::command_limits(max_command_bytes(config.max_body_bytes));
        let raft = RaftNode::start(raft_config).await?;
        let limits = crate::limits::InflightLimits::new(
            config.max_requests_inflight,
            config.max_mutating_requests_inflight,
        );
        let (shutdown, _) = watch::channel(false);
        let mut tasks = Vec::new();

        // The peer port: Raft and cluster RPCs, nothing a client needs.
        // Call streams (replication, forwarding, read indexes) are served
        // by the Raft node itself; the rest goes to the peer gRPC server.
        tasks.push(tokio::spawn(serve_grpc(
            "peer",
            peer_grpc_server(&raft),
            raft.serve_peer_port(peer),
            shutdown.subscribe(),
        )));

        // The client port: the etcd API, nothing a peer needs.
        let etcd = crate::etcd::EtcdContext::new(
            raft.clone(),
            crate::etcd::EtcdOptions {
                progress_notify_interval: Duration::from_secs(
                    config.etcd_progress_notify_seconds.max(1),
                ),
                quota_bytes: config.quota_backend_bytes,
                limits: limits.clone(),
            },
            shutdown.subscribe(),
        );
        let etcd_api = etcd.services();
        tasks.push(tokio::spawn(etcd.clone().run_lease_keeper()));
        // Streams per client connection are bounded as on the REST port
        // (kube-apiserver's 1,000): beyond them an HTTP/2 client waits for
        // a stream on its side instead of queueing requests in the node.
        // gRPC is HTTP/2 alone, as tonic's server serves it.
        let mut etcd_port =
            hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                .http2_only();
        etcd_port
            .http2()
            .timer(hyper_util::rt::TokioTimer::new())
            .max_concurrent_streams(http::serve::HTTP2_MAX_STREAMS_PER_CONNECTION);
        let dispatch = crate::etcd::EtcdDispatch::new(etcd_api);
        let stop = shutdown.subscribe();
        tasks.push(tokio::spawn(async move {
            http::serve::serve_connections("etcd", grpc, &etcd_port, dispatch, stop).await;
        }));

        let cache = WatchCache::new(
            raft.store().clone(),
            CacheLimits {
                max_events: config.watch_cache_events.max(1),
                max_age: Duration::from_secs(config.watch_cache_seconds),
            },
        );
        // Fill the cache before serving, so `resourceVersion=0` reads never
        // see it empty (a snapshot being installed just delays this).
        if let Err(e) = cache.catch_up_blocking().await {
            tracing::warn!(error = %e, "watch cache not filled yet; the feeder retries");
        }
        tasks.push(tokio::spawn(cache.clone().run(shutdown.subscribe())));
        let kube = KubeStore::new(raft.clone(), cache);
        // The garbage collector and the namespace controller: they act
        // while this node is the Raft leader (see `kube::controllers`).
        tasks.push(tokio::spawn(crate::kube::controllers::run(
            kube.clone(),
            raft.clone(),
            shutdown.subscribe(),
        )));
        let state = AppState::new(SharedState {
            node: raft.clone(),
            kube: kube.clone(),
            max_body_bytes: config.max_body_bytes,
            metrics: crate::http::metrics::Metrics::default(),
            bookmark_interval: std::time::Duration::from_secs(
                config.watch_bookmark_interval_seconds.max(1),
            ),
            stop: shutdown.subscribe(),
            fault_injection: config.fault_injection,
            limits: limits.clone(),
        });
        let app = http::router(state).layer(TraceLayer::new_for_http());
        tasks.push(tokio::spawn(http::serve::serve(
            rest,
            app,
            shutdown.subscribe(),
        )));

        let policy = crate::compaction::CompactionPolicy {
            retention: Duration::from_secs(config.history_retention_seconds),
            max_revisions: config.history_max_revisions,
            interval: Duration::from_secs(config.compaction_interval_seconds.max(1)),
        };
        tasks.push(tokio::spawn(crate::compaction::run(
            raft.clone(),
            policy,
            shutdown.subscribe(),
        )));

        let mut stop = shutdown.subscribe();
        tasks.push(tokio::spawn(async move {
            let ensure = async {
                loop {
                    match kube.ensure_system_namespaces().await {
                        Ok(()) => break,
                        Err(e) => {
                            tracing::debug!(error = %e, "system namespaces not written yet; retrying");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            };
            tokio::select! {
                _ = ensure => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        }));

        tracing::info!(node = config.id, %rest_addr, %grpc_addr, %peer_addr, "kubestore node started");
        Ok(Self {
            raft,
            rest_addr,
            grpc_addr,
            peer_addr,
            shutdown,
            tasks,
        })
    }

    /// Binds the configured addresses and starts.
    pub async fn bind_and_start(config: ServeConfig) -> Result<Self, NodeError> {
        let rest = TcpListener::bind(config.rest_addr).await?;
        let grpc = TcpListener::bind(config.grpc_addr).await?;
        let peer = TcpListener::bind(config.peer_addr).await?;
        Self::start(config, rest, grpc, peer).await
    }

    /// Stops the servers and Raft; the storage closes when this returns.
    pub async fn shutdown(self) {
        self.shutdown.send_replace(true);
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// The most bytes of keys and values a command from this node's front ends
/// carries: an etcd request's limit, or a Kubernetes object stored from a
/// body of up to `max_body_bytes`, re-encoded as JSON: a protobuf body's
/// strings may grow up to six times (a control character becomes
/// `\u0000`), plus the fields the server sets.
fn max_command_bytes(max_body_bytes: usize) -> usize {
    kubestore_storage::Limits::ETCD
        .max_command_bytes
        .max(max_body_bytes.saturating_mul(6).saturating_add(64 * 1024))
}

/// The peer port's gRPC server: `RaftService` and `ClusterService` only
/// (the call streams beside them are served by `RaftNode::serve_peer_port`).
/// This is the one place the peer listener's gRPC server is built: TLS
/// between peers (a later issue) goes here, as
/// `Server::builder().tls_config(..)` with the peer certificates, and on
/// the call streams' connections, leaving the etcd port alone. Message sizes
/// are bounded by each service (`kubestore_raft::network::MAX_MESSAGE_BYTES`)
/// and the nesting of decoded commands by storage's `Deserialize`
/// (`kubestore_storage::MAX_TXN_DEPTH`).
fn peer_grpc_server(raft: &RaftNode) -> Router {
    Server::builder()
        .add_service(raft.raft_service())
        .add_service(raft.cluster_service())
}

/// Serves one gRPC listener's connections until `stop` turns true.
#[tracing::instrument(level = "debug", skip_all, fields(listener = what))]
async fn serve_grpc(
    what: &'static str,
    router: Router,
    incoming: impl Stream<Item = std::io::Result<TcpStream>>,
    mut stop: watch::Receiver<bool>,
) {
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    if let Err(e) = router.serve_with_incoming_shutdown(incoming, stopped).await {
        tracing::error!(error = %e, listener = what, "gRPC server failed");
    }
}

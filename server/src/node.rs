//! One running kubestore node: the Raft node, its gRPC server and its REST
//! server, started together and stopped together. Used by `kubestore serve`
//! and by the in-process test cluster.

use std::net::SocketAddr;
use std::time::Duration;

use kubestore_raft::{RaftNode, RaftNodeConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower_http::trace::TraceLayer;

use crate::config::ServeConfig;
use crate::http::{self, AppState};
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
    pub grpc_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningNode {
    /// Starts a node on already-bound listeners (so tests can use port 0).
    pub async fn start(
        config: ServeConfig,
        rest: TcpListener,
        grpc: TcpListener,
    ) -> Result<Self, NodeError> {
        let rest_addr = rest.local_addr()?;
        let grpc_addr = grpc.local_addr()?;
        let advertised = config
            .advertise_grpc_addr
            .clone()
            .unwrap_or_else(|| grpc_addr.to_string());
        let members = config.members(&advertised).map_err(NodeError::Config)?;
        let mut raft_config = RaftNodeConfig::new(config.id, config.data_dir.clone(), members);
        raft_config.snapshot_after_entries = config.snapshot_after_entries;
        raft_config.log_entries_kept_after_snapshot = (config.snapshot_after_entries / 10).max(10);
        raft_config.read_lease = Duration::from_millis(config.read_lease_ms);
        let raft = RaftNode::start(raft_config).await?;
        let limits = crate::limits::InflightLimits::new(
            config.max_requests_inflight,
            config.max_mutating_requests_inflight,
        );
        let (shutdown, _) = watch::channel(false);
        let mut tasks = Vec::new();

        // One gRPC port per node: Raft between nodes, the etcd API for clients.
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
        let grpc_server = tonic::transport::Server::builder()
            .add_service(raft.raft_service())
            .add_service(raft.cluster_service())
            .add_service(etcd_api.kv)
            .add_service(etcd_api.watch)
            .add_service(etcd_api.lease)
            .add_service(etcd_api.maintenance)
            .add_service(etcd_api.cluster);
        let mut stop = shutdown.subscribe();
        tasks.push(tokio::spawn(async move {
            // No Nagle: Raft messages are small and latency-bound.
            let incoming =
                tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true));
            let stopped = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = grpc_server
                .serve_with_incoming_shutdown(incoming, stopped)
                .await
            {
                tracing::error!(error = %e, "gRPC server failed");
            }
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
        if let Err(e) = cache.catch_up() {
            tracing::warn!(error = %e, "watch cache not filled yet; the feeder retries");
        }
        tasks.push(tokio::spawn(cache.clone().run(shutdown.subscribe())));
        let kube = KubeStore::new(raft.clone(), cache);
        let state = AppState {
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
        };
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

        tracing::info!(node = config.id, %rest_addr, %grpc_addr, "kubestore node started");
        Ok(Self {
            raft,
            rest_addr,
            grpc_addr,
            shutdown,
            tasks,
        })
    }

    /// Binds the configured addresses and starts.
    pub async fn bind_and_start(config: ServeConfig) -> Result<Self, NodeError> {
        let rest = TcpListener::bind(config.rest_addr).await?;
        let grpc = TcpListener::bind(config.grpc_addr).await?;
        Self::start(config, rest, grpc).await
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

//! What every request handler of the REST front end shares.

use kubestore_raft::RaftNode;

use crate::http::metrics::Metrics;
use crate::kube::store::KubeStore;
use crate::limits::InflightLimits;

/// Everything a request handler may touch.
#[derive(Debug, Clone)]
pub struct AppState {
    pub node: RaftNode,
    pub kube: KubeStore,
    /// Largest request body accepted; larger ones get `413`.
    pub max_body_bytes: usize,
    /// How often a watch with `allowWatchBookmarks` gets a bookmark.
    pub bookmark_interval: std::time::Duration,
    /// Request counters and latencies for `/metrics`.
    pub metrics: Metrics,
    /// Turns true when the node shuts down: open watches end, so the
    /// server's graceful shutdown can finish.
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// `/debug/faults` is served (`--fault-injection`).
    pub fault_injection: bool,
    /// Requests in flight, shared with the etcd front end.
    pub limits: InflightLimits,
}

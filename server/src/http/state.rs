//! What every request handler of the REST front end shares.

use std::sync::Arc;

use kubestore_raft::RaftNode;

use crate::http::metrics::Metrics;
use crate::kube::store::KubeStore;
use crate::limits::InflightLimits;

/// Everything a request handler may touch, behind one `Arc`: axum clones
/// the state for every handler and middleware layer a request passes, so a
/// clone is one reference count, not one per shared part.
#[derive(Debug, Clone)]
pub struct AppState(Arc<SharedState>);

impl AppState {
    pub fn new(shared: SharedState) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

/// What [`AppState`] shares.
#[derive(Debug)]
pub struct SharedState {
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

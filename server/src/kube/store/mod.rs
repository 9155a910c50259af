//! The Kubernetes object store of one node: the verbs as reads of the
//! watch cache (or the MVCC history) and as transactions on the revision
//! log.
//!
//! - [`reads`](self::reads): get and list, and the choice of where a read is served
//!   from ([`ReadPath`]): the watch cache now, after a read barrier, or
//!   once it reached a revision; a retained cache snapshot at an exact
//!   revision; the MVCC history in storage below what the cache retains.
//!   Pagination (`limit`/`continue`) reads every page at the first page's
//!   revision.
//! - [`writes`](self::writes): every write is the transaction a kube-apiserver would
//!   send to etcd: create = `Txn[MOD(key) == 0 (and the namespace exists)
//!   → Put]`, update and delete = `Txn[MOD(key) == rev → Put/Delete, else
//!   Range]`, all of the changes of one existing object through one
//!   guarded read-modify-write ([`deletes`](self::deletes): one object, a
//!   collection, a namespace's finalize). The preconditions are decided inside the
//!   state machine, so a conflict is decided once, identically on every
//!   node. What a create or update stores is `kube::admission`'s, what a
//!   delete does `kube::deletion`'s; `dryRun` stops each write before it
//!   is proposed.

mod deletes;
mod reads;
mod writes;

use std::sync::Arc;

use kubestore_raft::RaftNode;
use kubestore_storage::Revision;

use crate::kube::admission::NameGenerator;
use crate::kube::cache::{CachedObject, WatchCache};

pub use deletes::Deleted;
pub use writes::Current;

/// How fresh a read must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Linearizable: sees every write acknowledged before the read began.
    MostRecent,
    /// Whatever this node has applied.
    Any,
    /// At least this revision: wait briefly for this node to reach it.
    NotOlderThan(u64),
    /// Exactly this revision, from the MVCC history.
    Exact(u64),
}

/// How a read was served; the `X-Kubestore-Read` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPath {
    /// This node's watch cache, no network round (`Any`, `NotOlderThan`,
    /// a continue token at the latest revision).
    Cache,
    /// A linearizable read barrier, then the watch cache once it reached
    /// the barrier's revision (`Most Recent`).
    QuorumCache,
    /// A retained watch-cache snapshot at an exact revision (`Exact`,
    /// continue tokens).
    Snapshot,
    /// The MVCC history in storage at an exact revision older than the
    /// cache retains.
    History,
}

impl ReadPath {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadPath::Cache => "cache",
            ReadPath::QuorumCache => "quorum-cache",
            ReadPath::Snapshot => "snapshot",
            ReadPath::History => "history",
        }
    }
}

/// A list result: the items (as clients see them) and the revision read at.
#[derive(Debug)]
pub struct Listed {
    pub items: Vec<Arc<CachedObject>>,
    pub revision: Revision,
    /// Set when more items follow: the token for the next page.
    pub continue_token: Option<String>,
    /// How many items follow this page (only without selectors).
    pub remaining: Option<u64>,
    pub served: ReadPath,
}

/// The Kubernetes object store of one node: writes through Raft, reads
/// from the watch cache (or the MVCC history for old revisions).
#[derive(Debug, Clone)]
pub struct KubeStore {
    node: RaftNode,
    cache: WatchCache,
    /// Where a create whose generated name is taken gets another.
    names: NameGenerator,
}

impl KubeStore {
    pub fn new(node: RaftNode, cache: WatchCache) -> Self {
        Self {
            node,
            cache,
            names: NameGenerator::random(),
        }
    }

    /// The store with `names` as the source of generated names (tests
    /// force a collision with it).
    pub fn with_name_generator(mut self, names: NameGenerator) -> Self {
        self.names = names;
        self
    }

    /// The node's watch cache.
    pub fn cache(&self) -> &WatchCache {
        &self.cache
    }
}

/// Unit tests of the reads and writes against a one-member Raft node.
#[cfg(test)]
mod tests;

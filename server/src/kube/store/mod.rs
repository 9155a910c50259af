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

use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Guarded writes whose guard failed, shared by every clone.
    guard_failures: Arc<GuardFailures>,
    /// The namespaces creates last found usable, shared by every clone.
    usable_namespaces: Arc<writes::UsableNamespaces>,
}

/// The kinds of guarded write, as `/metrics` labels them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardedWrite {
    /// A create: the key must be absent and the namespace unchanged.
    Create,
    /// A change of one existing object (update, patch, apply, status,
    /// a deletion's first or last step): the key at the revision read.
    Update,
    /// A collection's deletion: each key at the revision listed.
    DeleteCollection,
}

impl GuardedWrite {
    pub const ALL: [GuardedWrite; 3] = [
        GuardedWrite::Create,
        GuardedWrite::Update,
        GuardedWrite::DeleteCollection,
    ];

    /// The `/metrics` label value.
    pub fn label(self) -> &'static str {
        match self {
            GuardedWrite::Create => "create",
            GuardedWrite::Update => "update",
            GuardedWrite::DeleteCollection => "deletecollection",
        }
    }
}

/// How many guarded writes this node proposed whose guard failed, by kind:
/// the state they were decided on had moved by the time they applied
/// (another writer got there first, or this node had not applied the
/// latest write yet), so they were decided again. Each costs a replicated
/// entry that writes nothing.
#[derive(Debug, Default)]
struct GuardFailures([AtomicU64; GuardedWrite::ALL.len()]);

impl KubeStore {
    pub fn new(node: RaftNode, cache: WatchCache) -> Self {
        Self {
            node,
            cache,
            names: NameGenerator::random(),
            guard_failures: Arc::default(),
            usable_namespaces: Arc::default(),
        }
    }

    /// Guarded writes of `kind` this node proposed whose guard failed.
    pub fn guard_failures(&self, kind: GuardedWrite) -> u64 {
        self.guard_failures.0[kind as usize].load(Ordering::Relaxed)
    }

    fn count_guard_failure(&self, kind: GuardedWrite) {
        self.guard_failures.0[kind as usize].fetch_add(1, Ordering::Relaxed);
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

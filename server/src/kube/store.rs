//! Kubernetes verbs as transactions on the revision log.
//!
//! Every write is the transaction a kube-apiserver would send to etcd:
//! create = `Txn[MOD(key) == 0 (and the namespace exists) → Put]`, update
//! and delete = `Txn[MOD(key) == rev → Put/Delete, else Range]`. The
//! preconditions are decided inside the state machine, so a conflict is
//! decided once, identically on every node.

use std::ops::Bound;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use kubestore_raft::{RaftNode, RaftNodeError};
use kubestore_storage::{
    Command, CommandResult, Compare, CompareOp, CompareTarget, DeleteRequest, KeyRange, KeyValue,
    Op, OpResponse, PutRequest, RangeRequest, Response, Revision, Txn, TxnResponse,
};

use crate::kube::cache::{CachedObject, Objects, WatchCache};
use crate::kube::error::KubeError;
use crate::kube::object::{self, UpdateScope};
use crate::kube::paging::{self, ContinueToken, PageRequest};
use crate::kube::resources::{self, ResourceType};
use crate::kube::selectors::Selectors;

/// Namespaces that exist from the start and may not be deleted.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// How many times an unconditional update retries a lost race.
const UPDATE_RETRIES: usize = 8;

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

/// How long a read for a revision this node has not reached waits before
/// answering `504` (kube's watch cache waits 3 s too).
const TOO_LARGE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// How long a most-recent read waits for the watch cache to reach the
/// revision the read barrier returned (it is normally already there).
const CACHE_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(10);

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

/// Optional preconditions of a delete (`DeleteOptions.preconditions`).
#[derive(Debug, Default, Clone)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<u64>,
}

/// The Kubernetes object store of one node: writes through Raft, reads
/// from the watch cache (or the MVCC history for old revisions).
#[derive(Debug, Clone)]
pub struct KubeStore {
    node: RaftNode,
    cache: WatchCache,
}

/// Where a read finds its objects.
enum View {
    /// A watch-cache map of the type at `revision`.
    Cached {
        objects: Objects,
        revision: u64,
        served: ReadPath,
    },
    /// Storage's MVCC history at this revision.
    History(u64),
}

fn range_one(key: &str) -> Op {
    Op::Range(RangeRequest {
        range: KeyRange::single(key.as_bytes().to_vec()),
        ..RangeRequest::default()
    })
}

fn txn_result(resp: Response) -> Result<(TxnResponse, Revision), KubeError> {
    match resp.result {
        Ok(CommandResult::Txn(t)) => Ok((t, resp.revision)),
        Ok(other) => Err(KubeError::Internal(format!(
            "unexpected state machine answer {other:?}"
        ))),
        Err(e) => Err(KubeError::Internal(e.to_string())),
    }
}

/// The key-values a Range op of a transaction returned.
fn range_kvs(resp: &TxnResponse, i: usize) -> &[KeyValue] {
    match resp.responses.get(i) {
        Some(OpResponse::Range(r)) => &r.kvs,
        _ => &[],
    }
}

/// One page from a map of objects: up to `limit` matches (all with 0)
/// from key `start` within `prefix`; the key of the next match, if any, and
/// how many objects follow (without selectors).
fn page_of(
    objects: &Objects,
    prefix: &str,
    start: &str,
    selectors: &Selectors,
    limit: u64,
) -> (Vec<Arc<CachedObject>>, Option<String>, Option<u64>) {
    let mut items = Vec::new();
    let mut rest = objects
        .range::<_, str>((Bound::Included(start), Bound::Unbounded))
        .take_while(|(k, _)| k.starts_with(prefix))
        .map(|(_, o)| o)
        .filter(|o| selectors.matches(&o.object));
    while let Some(obj) = rest.next() {
        if limit > 0 && items.len() as u64 == limit {
            let remaining = selectors.is_empty().then(|| 1 + rest.count() as u64);
            return (items, Some(obj.key.clone()), remaining);
        }
        items.push(obj.clone());
    }
    (items, None, None)
}

impl KubeStore {
    pub fn new(node: RaftNode, cache: WatchCache) -> Self {
        Self { node, cache }
    }

    /// The node's watch cache.
    pub fn cache(&self) -> &WatchCache {
        &self.cache
    }

    /// Waits (3 s at most) for this node's watch cache to reach revision
    /// `rv`; then `504` Too large resource version, as kube answers.
    pub async fn wait_for_revision(&self, rv: u64) -> Result<(), KubeError> {
        if self.cache.wait_for(rv, TOO_LARGE_WAIT).await {
            Ok(())
        } else {
            Err(KubeError::TooLargeResourceVersion {
                requested: rv,
                current: self.cache.revision(),
            })
        }
    }

    /// A linearizable read point: the barrier, then the cache caught up to
    /// it. Returns the revision to read at.
    pub async fn quorum_revision(&self) -> Result<u64, KubeError> {
        let applied = self.node.linearizable_barrier().await?;
        if !self
            .cache
            .wait_for(applied.revision.0, CACHE_CATCH_UP)
            .await
        {
            return Err(RaftNodeError::Timeout("the watch cache to reach the read barrier").into());
        }
        Ok(applied.revision.0)
    }

    /// Where a read of `freshness` finds the type's objects.
    async fn view(&self, rt: &ResourceType, freshness: Freshness) -> Result<View, KubeError> {
        let current = |served| {
            let (objects, revision) = self.cache.current(rt);
            View::Cached {
                objects,
                revision,
                served,
            }
        };
        Ok(match freshness {
            Freshness::MostRecent => {
                self.quorum_revision().await?;
                current(ReadPath::QuorumCache)
            }
            Freshness::Any => current(ReadPath::Cache),
            Freshness::NotOlderThan(rv) => {
                self.wait_for_revision(rv).await?;
                current(ReadPath::Cache)
            }
            Freshness::Exact(rv) => {
                self.wait_for_revision(rv).await?;
                self.exact(rt, rv)
            }
        })
    }

    /// The type at exactly `rv`: a retained cache snapshot, else history.
    fn exact(&self, rt: &ResourceType, rv: u64) -> View {
        match self.cache.snapshot_at(rt, rv) {
            Some(objects) => View::Cached {
                objects,
                revision: rv,
                served: ReadPath::Snapshot,
            },
            None => View::History(rv),
        }
    }

    fn read_key(&self, key: &str) -> Result<(Option<KeyValue>, Revision), KubeError> {
        let resp = self.node.store().range(&RangeRequest {
            range: KeyRange::single(key.as_bytes().to_vec()),
            ..RangeRequest::default()
        })?;
        Ok((resp.kvs.into_iter().next(), resp.revision))
    }

    fn decode(rt: &ResourceType, kv: &KeyValue) -> Option<Value> {
        object::from_stored(rt, &kv.key, &kv.value, kv.mod_revision.0)
    }

    /// One object, or `NotFound`, and how it was read.
    #[tracing::instrument(level = "debug", skip(self, rt), fields(resource = rt.plural))]
    pub async fn get(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        freshness: Freshness,
    ) -> Result<(Arc<CachedObject>, ReadPath), KubeError> {
        let key = rt.key(ns, name);
        match self.view(rt, freshness).await? {
            View::Cached {
                objects, served, ..
            } => objects
                .get(&key)
                .map(|o| (o.clone(), served))
                .ok_or_else(|| KubeError::not_found(rt, name)),
            View::History(rv) => {
                let resp = self.node.store().range(&RangeRequest {
                    range: KeyRange::single(key.into_bytes()),
                    revision: Some(Revision(rv)),
                    ..RangeRequest::default()
                })?;
                resp.kvs
                    .first()
                    .and_then(|kv| CachedObject::decode(rt, &kv.key, &kv.value, kv.mod_revision.0))
                    .map(|o| (Arc::new(o), ReadPath::History))
                    .ok_or_else(|| KubeError::not_found(rt, name))
            }
        }
    }

    /// Every object of a collection that matches `selectors`, in key order.
    #[tracing::instrument(level = "debug", skip(self, rt, selectors), fields(resource = rt.plural))]
    pub async fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        freshness: Freshness,
        selectors: &Selectors,
    ) -> Result<Listed, KubeError> {
        self.list_page(rt, ns, freshness, selectors, &PageRequest::default())
            .await
    }

    /// One page of a collection. Without a continue token the page is read
    /// at the freshness asked for; with one, at the token's revision, so
    /// every page shows the same snapshot (from the cache while it retains
    /// that revision, then from history, then `410`).
    #[tracing::instrument(level = "debug", skip(self, rt, selectors, page), fields(resource = rt.plural))]
    pub async fn list_page(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        freshness: Freshness,
        selectors: &Selectors,
        page: &PageRequest,
    ) -> Result<Listed, KubeError> {
        let prefix = rt.collection_prefix(ns);
        let (start, view) = match &page.token {
            Some(t) => {
                let view = match t.revision {
                    // A token from another node may name a revision this
                    // one has not applied yet (and a forged one any
                    // revision): wait for it as for an exact read, then
                    // `504`, rather than read the future from storage.
                    Some(rv) => {
                        self.wait_for_revision(rv).await?;
                        self.exact(rt, rv)
                    }
                    None => {
                        let (objects, revision) = self.cache.current(rt);
                        View::Cached {
                            objects,
                            revision,
                            served: ReadPath::Cache,
                        }
                    }
                };
                (format!("{prefix}{}", t.start), view)
            }
            None => (prefix.clone(), self.view(rt, freshness).await?),
        };
        let (items, next, remaining, revision, served) = match view {
            View::Cached {
                objects,
                revision,
                served,
            } => {
                let (items, next, remaining) =
                    page_of(&objects, &prefix, &start, selectors, page.limit);
                (items, next, remaining, revision, served)
            }
            View::History(rv) => {
                let (items, next, remaining) = self
                    .page_from_history(rt, &prefix, start, rv, selectors, page)
                    .await?;
                (items, next, remaining, rv, ReadPath::History)
            }
        };
        let continue_token = next.map(|key| {
            ContinueToken {
                revision: Some(revision),
                start: key[prefix.len()..].to_string(),
            }
            .encode()
        });
        Ok(Listed {
            items,
            revision: Revision(revision),
            continue_token,
            remaining,
            served,
        })
    }

    /// A page read from the MVCC history at `rv`: for exact revisions the
    /// cache no longer retains. `410` once compacted.
    async fn page_from_history(
        &self,
        rt: &ResourceType,
        prefix: &str,
        start: String,
        rv: u64,
        selectors: &Selectors,
        page: &PageRequest,
    ) -> Result<(Vec<Arc<CachedObject>>, Option<String>, Option<u64>), KubeError> {
        let mut start = start.into_bytes();
        let end = kubestore_storage::prefix_end(prefix.as_bytes());
        let limit = page.limit;
        let mut items = Vec::new();
        let mut remaining = None;
        let mut next: Option<String> = None;
        // With selectors a chunk may match fewer than `limit`: read on.
        loop {
            let read = RangeRequest {
                range: KeyRange {
                    key: start.clone(),
                    range_end: end.clone(),
                },
                limit: if limit > 0 { limit.max(64) } else { 0 },
                revision: Some(Revision(rv)),
                ..RangeRequest::default()
            };
            // A history scan: off the async workers.
            let resp = self
                .node
                .store()
                .run_blocking(move |s| s.range(&read))
                .await
                .map_err(|e| match e {
                    kubestore_storage::StoreError::Compacted { .. } if page.token.is_some() => {
                        let fresh = page.token.as_ref().map(|t| {
                            ContinueToken {
                                revision: None,
                                start: t.start.clone(),
                            }
                            .encode()
                        });
                        paging::expired_continue(fresh)
                    }
                    other => KubeError::from(other),
                })?;
            let total = resp.count;
            let mut taken = 0u64;
            for kv in &resp.kvs {
                taken += 1;
                if limit > 0 && items.len() as u64 == limit {
                    // One more match exists beyond the page.
                    next = Some(String::from_utf8_lossy(&kv.key).into_owned());
                    break;
                }
                if let Some(obj) = CachedObject::decode(rt, &kv.key, &kv.value, kv.mod_revision.0)
                    .filter(|o| selectors.matches(&o.object))
                {
                    items.push(Arc::new(obj));
                }
            }
            if next.is_some() {
                if selectors.is_empty() {
                    remaining = Some(total - (taken - 1));
                }
                break;
            }
            match resp.kvs.last() {
                Some(last) if resp.more => {
                    start = last.key.clone();
                    start.push(0);
                }
                _ => break,
            }
        }
        Ok((items, next, remaining))
    }

    /// Creates `obj` (already validated and prepared). The namespace of a
    /// namespaced object must exist, checked in the same transaction.
    #[tracing::instrument(level = "debug", skip(self, rt, obj), fields(resource = rt.plural))]
    pub async fn create(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        obj: Map<String, Value>,
    ) -> Result<Value, KubeError> {
        let key = rt.key(ns, name);
        let mut compare = vec![Compare::mod_revision(key.clone(), CompareOp::Equal, 0)];
        let mut failure = vec![range_one(&key)];
        let ns_key = ns
            .filter(|_| rt.namespaced)
            .map(|ns| resources::namespaces().key(None, ns));
        if let Some(ns_key) = &ns_key {
            compare.push(Compare {
                range: KeyRange::single(ns_key.as_bytes().to_vec()),
                op: CompareOp::Greater,
                target: CompareTarget::Create(Revision::ZERO),
            });
            failure.push(range_one(ns_key));
        }
        let stored = object::to_stored(&obj);
        let txn = Txn {
            compare,
            success: vec![Op::Put(PutRequest::new(key.clone().into_bytes(), stored))],
            failure,
        };
        let (resp, revision) = txn_result(self.node.write(Command::Txn(txn)).await?)?;
        if resp.succeeded {
            let mut obj = obj;
            object::metadata_mut(&mut obj)
                .insert("resourceVersion".into(), json!(revision.0.to_string()));
            return Ok(Value::Object(obj));
        }
        if let Some(existing) = range_kvs(&resp, 0).first() {
            // A create retried after its first attempt committed finds its own
            // uid: that is this request's success, not a conflict.
            let ours = object::meta_str(&obj, "uid");
            let stored = Self::decode(rt, existing);
            if ours.is_some()
                && stored
                    .as_ref()
                    .and_then(|s| s.pointer("/metadata/uid"))
                    .and_then(Value::as_str)
                    == ours
            {
                return stored.ok_or_else(|| KubeError::Internal("stored object vanished".into()));
            }
            return Err(KubeError::already_exists(rt, name));
        }
        match ns {
            Some(ns) => Err(KubeError::not_found(resources::namespaces(), ns)),
            None => Err(KubeError::Internal(
                "create guard failed without a cause".into(),
            )),
        }
    }

    /// Replaces an object. With `metadata.resourceVersion` set, it is the
    /// optimistic-concurrency precondition (409 on mismatch); without, the
    /// update applies to whatever is current.
    #[tracing::instrument(level = "debug", skip(self, rt, obj), fields(resource = rt.plural))]
    pub async fn update(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        obj: Map<String, Value>,
    ) -> Result<Value, KubeError> {
        self.update_in(rt, ns, name, obj, UpdateScope::Object).await
    }

    /// An update of the part of the object `scope` names (the object, or
    /// only its status through the status subresource).
    pub async fn update_in(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        obj: Map<String, Value>,
        scope: UpdateScope,
    ) -> Result<Value, KubeError> {
        let key = rt.key(ns, name);
        let wanted_rv = match object::meta_str(&obj, "resourceVersion") {
            None | Some("") => None,
            Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                KubeError::BadRequest(format!(
                    "invalid resourceVersion {rv:?}: must be an unsigned integer"
                ))
            })?),
        };
        // The state to update: most recent, so a follower that lags does not
        // answer 404 for an object it has not applied yet.
        self.node.linearizable_barrier().await?;
        let mut next = self.read_key(&key)?.0;
        for _ in 0..UPDATE_RETRIES {
            let Some(current) = next.take() else {
                return Err(KubeError::not_found(rt, name));
            };
            let old = match serde_json::from_slice::<Value>(&current.value) {
                Ok(Value::Object(o)) => o,
                _ => Map::new(),
            };
            let guard_rev = wanted_rv.unwrap_or(current.mod_revision.0);
            let mut new = obj.clone();
            object::prepare_update_in(rt, scope, &old, &mut new);
            let txn = Txn {
                compare: vec![Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    guard_rev,
                )],
                success: vec![Op::Put(PutRequest::new(
                    key.clone().into_bytes(),
                    object::to_stored(&new),
                ))],
                failure: vec![range_one(&key)],
            };
            let (resp, revision) = txn_result(self.node.write(Command::Txn(txn)).await?)?;
            if resp.succeeded {
                object::metadata_mut(&mut new)
                    .insert("resourceVersion".into(), json!(revision.0.to_string()));
                return Ok(Value::Object(new));
            }
            if wanted_rv.is_some() && !range_kvs(&resp, 0).is_empty() {
                return Err(KubeError::conflict(rt, name));
            }
            // Lost a race with another writer: retry on the state the guard
            // saw (absent = deleted meanwhile = 404).
            next = range_kvs(&resp, 0).first().cloned();
        }
        Err(KubeError::conflict(rt, name))
    }

    /// Deletes one object and returns its last state. Deleting a namespace
    /// deletes every object in it in the same revision.
    #[tracing::instrument(level = "debug", skip(self, rt), fields(resource = rt.plural))]
    pub async fn delete(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        pre: &Preconditions,
    ) -> Result<Value, KubeError> {
        if rt.plural == "namespaces" && SYSTEM_NAMESPACES.contains(&name) {
            return Err(KubeError::Forbidden {
                resource: rt.group_resource(),
                name: name.to_string(),
                message: format!(
                    "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
                ),
            });
        }
        let key = rt.key(ns, name);
        self.node.linearizable_barrier().await?;
        let mut next = self.read_key(&key)?.0;
        for _ in 0..UPDATE_RETRIES {
            let Some(current) = next.take() else {
                return Err(KubeError::not_found(rt, name));
            };
            let last = Self::decode(rt, &current).unwrap_or_else(|| json!({}));
            if let Some(uid) = &pre.uid {
                let actual = last
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if actual != uid {
                    return Err(KubeError::Conflict {
                        resource: rt.group_resource(),
                        name: name.to_string(),
                        detail: format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
                    });
                }
            }
            let guard_rev = pre.resource_version.unwrap_or(current.mod_revision.0);
            let mut success = vec![Op::Delete(DeleteRequest {
                range: KeyRange::single(key.clone().into_bytes()),
                prev_kv: false,
            })];
            if rt.plural == "namespaces" {
                for member in resources::RESOURCES.iter().filter(|r| r.namespaced) {
                    success.push(Op::Delete(DeleteRequest {
                        range: KeyRange::prefix(member.collection_prefix(Some(name)).into_bytes()),
                        prev_kv: false,
                    }));
                }
            }
            let txn = Txn {
                compare: vec![Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    guard_rev,
                )],
                success,
                failure: vec![range_one(&key)],
            };
            let (resp, _) = txn_result(self.node.write(Command::Txn(txn)).await?)?;
            if resp.succeeded {
                return Ok(last);
            }
            if pre.resource_version.is_some() && !range_kvs(&resp, 0).is_empty() {
                return Err(KubeError::conflict(rt, name));
            }
            next = range_kvs(&resp, 0).first().cloned();
        }
        Err(KubeError::conflict(rt, name))
    }

    /// Deletes every object of a collection matching `selectors` and returns
    /// what was deleted. Each object is guarded by the revision it was listed
    /// at, so one changed meanwhile (and maybe no longer matching) is listed
    /// again rather than deleted blindly; all deletes share one revision.
    /// Namespaces go one by one through [`KubeStore::delete`], which also
    /// deletes their contents.
    #[tracing::instrument(level = "debug", skip(self, rt, selectors), fields(resource = rt.plural))]
    pub async fn delete_collection(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        selectors: &Selectors,
    ) -> Result<Listed, KubeError> {
        for _ in 0..UPDATE_RETRIES {
            let listed = self.list(rt, ns, Freshness::MostRecent, selectors).await?;
            let mut compare = Vec::new();
            let mut success = Vec::new();
            let mut deleted = Vec::new();
            for cached in listed.items {
                let item = &cached.object;
                let name = item
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let item_ns = item
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                if rt.plural == "namespaces" {
                    if SYSTEM_NAMESPACES.contains(&name.as_str()) {
                        continue;
                    }
                    match self
                        .delete(rt, None, &name, &Preconditions::default())
                        .await
                    {
                        Ok(last) => {
                            deleted.extend(CachedObject::from_value(last.clone()).map(Arc::new))
                        }
                        Err(KubeError::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                let rv: u64 = item
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let key = rt.key(item_ns.as_deref(), &name);
                compare.push(Compare::mod_revision(key.clone(), CompareOp::Equal, rv));
                success.push(Op::Delete(DeleteRequest {
                    range: KeyRange::single(key.into_bytes()),
                    prev_kv: false,
                }));
                deleted.push(cached.clone());
            }
            if success.is_empty() {
                let revision = self.node.store().applied().revision;
                return Ok(Listed {
                    items: deleted,
                    revision,
                    continue_token: None,
                    remaining: None,
                    served: ReadPath::QuorumCache,
                });
            }
            let txn = Txn {
                compare,
                success,
                failure: Vec::new(),
            };
            let (resp, revision) = txn_result(self.node.write(Command::Txn(txn)).await?)?;
            if resp.succeeded {
                return Ok(Listed {
                    items: deleted,
                    revision,
                    continue_token: None,
                    remaining: None,
                    served: ReadPath::QuorumCache,
                });
            }
        }
        Err(KubeError::Conflict {
            resource: rt.group_resource(),
            name: String::new(),
            detail: "the collection kept changing; try again".into(),
        })
    }

    /// Creates `default`, `kube-system` and `kube-public` if they do not
    /// exist (idempotent: a guard per namespace, one transaction).
    pub async fn ensure_system_namespaces(&self) -> Result<(), KubeError> {
        let rt = resources::namespaces();
        let mut ops = Vec::new();
        for name in SYSTEM_NAMESPACES {
            let key = rt.key(None, name);
            let mut obj = object::decode_body(
                rt,
                json!({ "metadata": { "name": name } })
                    .to_string()
                    .as_bytes(),
            )?;
            object::prepare_create(rt, &mut obj);
            ops.push(Op::Txn(Txn {
                compare: vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)],
                success: vec![Op::Put(PutRequest::new(
                    key.into_bytes(),
                    object::to_stored(&obj),
                ))],
                failure: vec![],
            }));
        }
        txn_result(
            self.node
                .write(Command::Txn(Txn {
                    success: ops,
                    ..Txn::default()
                }))
                .await?,
        )?;
        Ok(())
    }
}

//! Kubernetes verbs as transactions on the revision log.
//!
//! Every write is the transaction a kube-apiserver would send to etcd:
//! create = `Txn[MOD(key) == 0 (and the namespace exists) → Put]`, update
//! and delete = `Txn[MOD(key) == rev → Put/Delete, else Range]`. The
//! preconditions are decided inside the state machine, so a conflict is
//! decided once, identically on every node.

use serde_json::{json, Map, Value};

use kubestore_raft::RaftNode;
use kubestore_storage::{
    Command, CommandResult, Compare, CompareOp, CompareTarget, DeleteRequest, KeyRange, KeyValue,
    Op, OpResponse, PutRequest, RangeRequest, Response, Revision, Txn, TxnResponse,
};

use crate::http::status::ApiError;
use crate::kube::object;
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

/// A list result: the items (as clients see them) and the revision read at.
#[derive(Debug)]
pub struct Listed {
    pub items: Vec<Value>,
    pub revision: Revision,
    /// Set when more items follow: the token for the next page.
    pub continue_token: Option<String>,
    /// How many items follow this page (only without selectors).
    pub remaining: Option<u64>,
}

/// Optional preconditions of a delete (`DeleteOptions.preconditions`).
#[derive(Debug, Default, Clone)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<u64>,
}

/// The Kubernetes object store of one node.
#[derive(Debug, Clone)]
pub struct KubeStore {
    node: RaftNode,
}

fn range_one(key: &str) -> Op {
    Op::Range(RangeRequest {
        range: KeyRange::single(key.as_bytes().to_vec()),
        ..RangeRequest::default()
    })
}

/// A read at a compacted revision: kube's 410 for lists from storage.
fn list_too_old(e: kubestore_storage::StoreError) -> ApiError {
    match e {
        kubestore_storage::StoreError::Compacted { .. } => {
            ApiError::Expired("The resourceVersion for the provided list is too old.".into())
        }
        other => ApiError::from(other),
    }
}

fn txn_result(resp: Response) -> Result<(TxnResponse, Revision), ApiError> {
    match resp.result {
        Ok(CommandResult::Txn(t)) => Ok((t, resp.revision)),
        Ok(other) => Err(ApiError::Internal(format!(
            "unexpected state machine answer {other:?}"
        ))),
        Err(e) => Err(ApiError::Internal(e.to_string())),
    }
}

/// The key-values a Range op of a transaction returned.
fn range_kvs(resp: &TxnResponse, i: usize) -> &[KeyValue] {
    match resp.responses.get(i) {
        Some(OpResponse::Range(r)) => &r.kvs,
        _ => &[],
    }
}

impl KubeStore {
    pub fn new(node: RaftNode) -> Self {
        Self { node }
    }

    /// Waits until this node may serve a read of `freshness`; returns the
    /// revision to read at (`None`: the current state).
    async fn settle(&self, freshness: Freshness) -> Result<Option<Revision>, ApiError> {
        match freshness {
            Freshness::MostRecent => {
                self.node.linearizable_barrier().await?;
                Ok(None)
            }
            Freshness::Any => Ok(None),
            Freshness::NotOlderThan(rv) => {
                self.wait_for_revision(rv).await?;
                Ok(None)
            }
            Freshness::Exact(rv) => {
                self.wait_for_revision(rv).await?;
                Ok(Some(Revision(rv)))
            }
        }
    }

    /// Waits (3 s at most) for this node to reach revision `rv`; then
    /// `504` Too large resource version, as kube answers.
    pub async fn wait_for_revision(&self, rv: u64) -> Result<(), ApiError> {
        let mut applied = self.node.store().subscribe();
        let current = applied.borrow().revision.0;
        if current >= rv {
            return Ok(());
        }
        let reached = matches!(
            tokio::time::timeout(TOO_LARGE_WAIT, applied.wait_for(|s| s.revision.0 >= rv)).await,
            Ok(Ok(_))
        );
        if reached {
            Ok(())
        } else {
            Err(ApiError::TooLargeResourceVersion {
                requested: rv,
                current: self.node.store().applied().revision.0,
            })
        }
    }

    fn read_key(&self, key: &str) -> Result<(Option<KeyValue>, Revision), ApiError> {
        let resp = self.node.store().range(&RangeRequest {
            range: KeyRange::single(key.as_bytes().to_vec()),
            ..RangeRequest::default()
        })?;
        Ok((resp.kvs.into_iter().next(), resp.revision))
    }

    fn decode(rt: &ResourceType, kv: &KeyValue) -> Option<Value> {
        object::from_stored(rt, &kv.key, &kv.value, kv.mod_revision.0)
    }

    /// One object, or `NotFound`.
    #[tracing::instrument(level = "debug", skip(self, rt), fields(resource = rt.plural))]
    pub async fn get(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        freshness: Freshness,
    ) -> Result<Value, ApiError> {
        let at = self.settle(freshness).await?;
        let resp = self
            .node
            .store()
            .range(&RangeRequest {
                range: KeyRange::single(rt.key(ns, name).into_bytes()),
                revision: at,
                ..RangeRequest::default()
            })
            .map_err(list_too_old)?;
        resp.kvs
            .first()
            .and_then(|kv| Self::decode(rt, kv))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// Every object of a collection that matches `selectors`, in key order.
    #[tracing::instrument(level = "debug", skip(self, rt, selectors), fields(resource = rt.plural))]
    pub async fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        freshness: Freshness,
        selectors: &Selectors,
    ) -> Result<Listed, ApiError> {
        self.list_page(rt, ns, freshness, selectors, &PageRequest::default())
            .await
    }

    /// One page of a collection. Without a continue token the page is read
    /// at the freshness asked for; with one, at the token's revision, so
    /// every page shows the same snapshot.
    #[tracing::instrument(level = "debug", skip(self, rt, selectors, page), fields(resource = rt.plural))]
    pub async fn list_page(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        freshness: Freshness,
        selectors: &Selectors,
        page: &PageRequest,
    ) -> Result<Listed, ApiError> {
        let prefix = rt.collection_prefix(ns);
        let (mut start, mut revision) = match &page.token {
            Some(t) => (
                format!("{prefix}{}", t.start).into_bytes(),
                t.revision.map(Revision),
            ),
            None => (prefix.clone().into_bytes(), self.settle(freshness).await?),
        };
        let end = kubestore_storage::prefix_end(prefix.as_bytes());
        let limit = page.limit;
        let mut items = Vec::new();
        let mut remaining = None;
        let mut next_start: Option<Vec<u8>> = None;
        // With selectors a chunk may match fewer than `limit`: read on.
        loop {
            let resp = self
                .node
                .store()
                .range(&RangeRequest {
                    range: KeyRange {
                        key: start.clone(),
                        range_end: end.clone(),
                    },
                    limit: if limit > 0 { limit.max(64) } else { 0 },
                    revision,
                    ..RangeRequest::default()
                })
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
                    other => list_too_old(other),
                })?;
            revision = Some(resp.revision);
            let total = resp.count;
            let mut taken = 0u64;
            for kv in &resp.kvs {
                taken += 1;
                if limit > 0 && items.len() as u64 == limit {
                    // One more match exists beyond the page.
                    next_start = Some(kv.key.clone());
                    break;
                }
                if let Some(obj) = Self::decode(rt, kv).filter(|o| selectors.matches(o)) {
                    items.push(obj);
                }
            }
            if next_start.is_some() {
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
        let revision = revision.unwrap_or_default();
        let continue_token = next_start.map(|key| {
            ContinueToken {
                revision: Some(revision.0),
                start: String::from_utf8_lossy(&key[prefix.len()..]).into_owned(),
            }
            .encode()
        });
        Ok(Listed {
            items,
            revision,
            continue_token,
            remaining,
        })
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
    ) -> Result<Value, ApiError> {
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
                target: CompareTarget::Create(0),
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
                return stored.ok_or_else(|| ApiError::Internal("stored object vanished".into()));
            }
            return Err(ApiError::already_exists(rt, name));
        }
        match ns {
            Some(ns) => Err(ApiError::not_found(resources::namespaces(), ns)),
            None => Err(ApiError::Internal(
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
    ) -> Result<Value, ApiError> {
        let key = rt.key(ns, name);
        let wanted_rv = match object::meta_str(&obj, "resourceVersion") {
            None | Some("") => None,
            Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                ApiError::BadRequest(format!(
                    "invalid resourceVersion {rv:?}: must be an unsigned integer"
                ))
            })?),
        };
        // The state to update: most recent, so a follower that lags does not
        // answer 404 for an object it has not applied yet.
        self.settle(Freshness::MostRecent).await?;
        let mut next = self.read_key(&key)?.0;
        for _ in 0..UPDATE_RETRIES {
            let Some(current) = next.take() else {
                return Err(ApiError::not_found(rt, name));
            };
            let old = match serde_json::from_slice::<Value>(&current.value) {
                Ok(Value::Object(o)) => o,
                _ => Map::new(),
            };
            let guard_rev = wanted_rv.unwrap_or(current.mod_revision.0);
            let mut new = obj.clone();
            object::prepare_update(rt, &old, &mut new);
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
                return Err(ApiError::conflict(rt, name));
            }
            // Lost a race with another writer: retry on the state the guard
            // saw (absent = deleted meanwhile = 404).
            next = range_kvs(&resp, 0).first().cloned();
        }
        Err(ApiError::conflict(rt, name))
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
    ) -> Result<Value, ApiError> {
        if rt.plural == "namespaces" && SYSTEM_NAMESPACES.contains(&name) {
            return Err(ApiError::Forbidden {
                resource: rt.group_resource(),
                name: name.to_string(),
                message: format!(
                    "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
                ),
            });
        }
        let key = rt.key(ns, name);
        self.settle(Freshness::MostRecent).await?;
        let mut next = self.read_key(&key)?.0;
        for _ in 0..UPDATE_RETRIES {
            let Some(current) = next.take() else {
                return Err(ApiError::not_found(rt, name));
            };
            let last = Self::decode(rt, &current).unwrap_or_else(|| json!({}));
            if let Some(uid) = &pre.uid {
                let actual = last
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if actual != uid {
                    return Err(ApiError::Conflict {
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
                return Err(ApiError::conflict(rt, name));
            }
            next = range_kvs(&resp, 0).first().cloned();
        }
        Err(ApiError::conflict(rt, name))
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
    ) -> Result<Listed, ApiError> {
        for _ in 0..UPDATE_RETRIES {
            let listed = self.list(rt, ns, Freshness::MostRecent, selectors).await?;
            let mut compare = Vec::new();
            let mut success = Vec::new();
            let mut deleted = Vec::new();
            for item in listed.items {
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
                        Ok(last) => deleted.push(last),
                        Err(ApiError::NotFound { .. }) => {}
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
                deleted.push(item);
            }
            if success.is_empty() {
                let revision = self.node.store().applied().revision;
                return Ok(Listed {
                    items: deleted,
                    revision,
                    continue_token: None,
                    remaining: None,
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
                });
            }
        }
        Err(ApiError::Conflict {
            resource: rt.group_resource(),
            name: String::new(),
            detail: "the collection kept changing; try again".into(),
        })
    }

    /// Creates `default`, `kube-system` and `kube-public` if they do not
    /// exist (idempotent: a guard per namespace, one transaction).
    pub async fn ensure_system_namespaces(&self) -> Result<(), ApiError> {
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

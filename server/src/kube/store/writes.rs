//! Writes: each verb is the transaction a kube-apiserver would send to
//! etcd. A create is guarded by the key's absence (and the namespace's
//! presence); every change of one existing object (update, status update,
//! patch, delete) goes through [`KubeStore::read_modify_write`]: after a
//! read barrier, read the key, compute the change, and write it guarded by
//! the client's precondition or else by the revision read, retrying a lost
//! race on the state the guard saw.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use kubestore_storage::{
    Command, Compare, CompareOp, CompareTarget, DeleteRequest, KeyRange, KeyValue, Op, OpResponse,
    PutRequest, RangeRequest, Revision, Txn, TxnResponse,
};

use super::{Freshness, KubeStore, Listed, Preconditions, ReadPath};
use crate::kube::admission::{self, Admitted, UpdateScope, SYSTEM_NAMESPACES};
use crate::kube::apply;
use crate::kube::cache::CachedObject;
use crate::kube::error::KubeError;
use crate::kube::object;
use crate::kube::resources::{self, ResourceType};
use crate::kube::selectors::Selectors;
use crate::write;

/// How many times an update, a status update or a delete without a
/// precondition of its own retries a lost race.
const UPDATE_RETRIES: usize = 8;

fn range_one(key: &str) -> Op {
    Op::Range(RangeRequest {
        range: KeyRange::single(key.as_bytes().to_vec()),
        ..RangeRequest::default()
    })
}

fn put(key: &str, obj: &Map<String, Value>) -> Op {
    Op::Put(PutRequest::new(
        key.as_bytes().to_vec(),
        object::to_stored(obj),
    ))
}

/// The key-values a Range op of a transaction returned.
fn range_kvs(resp: &TxnResponse, i: usize) -> &[KeyValue] {
    match resp.responses.get(i) {
        Some(OpResponse::Range(r)) => &r.kvs,
        _ => &[],
    }
}

/// The stored state of an object, as a guarded change sees it.
#[derive(Debug, Clone, Copy)]
pub struct Current<'a> {
    rt: &'a ResourceType,
    kv: &'a KeyValue,
}

impl Current<'_> {
    /// The object as clients see it (`kind`, `apiVersion`,
    /// `resourceVersion` filled in); `None` for a stored value that is not
    /// a JSON object (written through the etcd API).
    pub fn object(&self) -> Option<Value> {
        object::from_stored(
            self.rt,
            &self.kv.key,
            &self.kv.value,
            self.kv.mod_revision.0,
        )
    }

    /// The object as stored (an empty one for a value that is not a JSON
    /// object): what an update carries its server-owned fields from.
    fn stored(&self) -> Map<String, Value> {
        match serde_json::from_slice::<Value>(&self.kv.value) {
            Ok(Value::Object(o)) => o,
            _ => Map::new(),
        }
    }
}

/// What a guarded change does to the current state of its key.
struct Change<T> {
    /// Run when the guard holds.
    ops: Vec<Op>,
    /// The client's own precondition (a resourceVersion): a mismatch is a
    /// `409`. `None`: the guard is the revision read, and a lost race is
    /// retried.
    precondition: Option<u64>,
    /// What the verb answers when the change is written.
    answer: T,
}

impl KubeStore {
    /// Runs one transaction through Raft: its response and revision.
    async fn write_txn(&self, txn: Txn) -> Result<(TxnResponse, Revision), KubeError> {
        Ok(write::txn(&self.node, Command::Txn(txn)).await?)
    }

    fn read_key(&self, key: &str) -> Result<(Option<KeyValue>, Revision), KubeError> {
        let resp = self.node.store().range(&RangeRequest {
            range: KeyRange::single(key.as_bytes().to_vec()),
            ..RangeRequest::default()
        })?;
        Ok((resp.kvs.into_iter().next(), resp.revision))
    }

    /// The one guarded read-modify-write of an existing object.
    ///
    /// After a read barrier (the most recent state, so a follower that
    /// lags does not answer `404` for an object it has not applied yet),
    /// reads `key` and lets `change` turn its current state into the ops
    /// to run. They run in `Txn[MOD(key) == guard → ops, else Range(key)]`,
    /// the guard being the change's precondition or else the revision
    /// read. A failed guard is a `409` when the precondition was the
    /// client's; otherwise a lost race, retried (at most `attempts` times
    /// in all) on the state the guard saw. A key that is or becomes absent
    /// is `404`. Returns the change's answer and the write's revision.
    async fn read_modify_write<T, E>(
        &self,
        rt: &ResourceType,
        name: &str,
        key: &str,
        attempts: usize,
        mut change: impl FnMut(Current<'_>) -> Result<Change<T>, E>,
    ) -> Result<(T, Revision), E>
    where
        E: From<KubeError>,
    {
        self.node
            .linearizable_barrier()
            .await
            .map_err(KubeError::from)?;
        let mut next = self.read_key(key)?.0;
        for _ in 0..attempts {
            let Some(current) = next.take() else {
                return Err(KubeError::not_found(rt, name).into());
            };
            let Change {
                ops,
                precondition,
                answer,
            } = change(Current { rt, kv: &current })?;
            let guard = precondition.unwrap_or(current.mod_revision.0);
            let txn = Txn {
                compare: vec![Compare::mod_revision(
                    key.to_string(),
                    CompareOp::Equal,
                    guard,
                )],
                success: ops,
                failure: vec![range_one(key)],
            };
            let (resp, revision) = self.write_txn(txn).await?;
            if resp.succeeded {
                return Ok((answer, revision));
            }
            let seen = range_kvs(&resp, 0).first().cloned();
            if precondition.is_some() && seen.is_some() {
                return Err(KubeError::conflict(rt, name).into());
            }
            // Lost a race with another writer: retry on the state the guard
            // saw (absent = deleted meanwhile = 404).
            next = seen;
        }
        Err(KubeError::conflict(rt, name).into())
    }

    /// Creates an admitted object. The namespace of a namespaced object
    /// must exist, checked in the same transaction.
    #[tracing::instrument(level = "debug", skip(self, rt, admitted), fields(resource = rt.plural))]
    pub async fn create(&self, rt: &ResourceType, admitted: Admitted) -> Result<Value, KubeError> {
        let Admitted {
            name,
            namespace: ns,
            object: obj,
        } = admitted;
        let ns = ns.as_deref();
        let key = rt.key(ns, &name);
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
        let txn = Txn {
            compare,
            success: vec![put(&key, &obj)],
            failure,
        };
        let (resp, revision) = self.write_txn(txn).await?;
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
            let stored = Current { rt, kv: existing }.object();
            if ours.is_some()
                && stored
                    .as_ref()
                    .and_then(|s| s.pointer("/metadata/uid"))
                    .and_then(Value::as_str)
                    == ours
            {
                return stored.ok_or_else(|| KubeError::Internal("stored object vanished".into()));
            }
            return Err(KubeError::already_exists(rt, &name));
        }
        match ns {
            Some(ns) => Err(KubeError::not_found(resources::namespaces(), ns)),
            None => Err(KubeError::Internal(
                "create guard failed without a cause".into(),
            )),
        }
    }

    /// Replaces an admitted object (`PUT`), or only its status with
    /// [`UpdateScope::Status`]. With `metadata.resourceVersion` set, it is
    /// the optimistic-concurrency precondition (409 on mismatch); without,
    /// the update applies to whatever is current.
    #[tracing::instrument(level = "debug", skip(self, rt, admitted), fields(resource = rt.plural))]
    pub async fn update(
        &self,
        rt: &ResourceType,
        admitted: Admitted,
        scope: UpdateScope,
    ) -> Result<Value, KubeError> {
        let Admitted {
            name,
            namespace,
            object: obj,
        } = admitted;
        // Checked before the barrier: a malformed precondition is refused
        // whether or not the object exists.
        admission::precondition(&obj)?;
        self.update_with(
            rt,
            namespace.as_deref(),
            &name,
            scope,
            UPDATE_RETRIES,
            |_| Ok::<_, KubeError>(obj.clone()),
        )
        .await
    }

    /// [`update`](Self::update) recorded as an `Update` by `manager` in
    /// the object's `managedFields`.
    pub async fn update_as(
        &self,
        rt: &ResourceType,
        admitted: Admitted,
        scope: UpdateScope,
        manager: &apply::Manager,
    ) -> Result<Value, KubeError> {
        let Admitted {
            name,
            namespace,
            object: obj,
        } = admitted;
        admission::precondition(&obj)?;
        self.update_managed(
            rt,
            namespace.as_deref(),
            &name,
            scope,
            UPDATE_RETRIES,
            Some(manager),
            |_| Ok::<_, KubeError>(obj.clone()),
        )
        .await
    }

    /// An update computed from the current object (a patch): `change`
    /// gets the stored state and returns the object to write, whose
    /// `metadata.resourceVersion`, when set, is its precondition; without
    /// one, `change` runs again on the newer state after a lost race, at
    /// most `attempts` times in all. [`admission::admit_update`] prepares
    /// what it returns, within `scope`.
    pub async fn update_with<E>(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        scope: UpdateScope,
        attempts: usize,
        change: impl FnMut(Current<'_>) -> Result<Map<String, Value>, E>,
    ) -> Result<Value, E>
    where
        E: From<KubeError>,
    {
        self.update_managed(rt, ns, name, scope, attempts, None, change)
            .await
    }

    /// [`update_with`](Self::update_with) recording the write as an
    /// `Update` by `manager` in the object's `managedFields`
    /// ([`apply::track_update`], against the stored object, after
    /// admission); `None` leaves them as `change` wrote them (an apply
    /// writes its own).
    #[allow(clippy::too_many_arguments)] // the update's inputs, each distinct
    pub async fn update_managed<E>(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        scope: UpdateScope,
        attempts: usize,
        manager: Option<&apply::Manager>,
        mut change: impl FnMut(Current<'_>) -> Result<Map<String, Value>, E>,
    ) -> Result<Value, E>
    where
        E: From<KubeError>,
    {
        let key = rt.key(ns, name);
        let target = apply::Target::of(rt);
        let (mut new, revision) = self
            .read_modify_write(rt, name, &key, attempts, |current| -> Result<_, E> {
                let mut new = change(current)?;
                let precondition = admission::precondition(&new).map_err(E::from)?;
                let stored = current.stored();
                admission::admit_update(rt, scope, &stored, &mut new);
                if let Some(manager) = manager {
                    apply::track_update(
                        &target,
                        manager,
                        Some(&stored),
                        &mut new,
                        &object::now_rfc3339(),
                    )
                    .map_err(|e| E::from(KubeError::from(e)))?;
                }
                Ok(Change {
                    ops: vec![put(&key, &new)],
                    precondition,
                    answer: new,
                })
            })
            .await?;
        object::metadata_mut(&mut new)
            .insert("resourceVersion".into(), json!(revision.0.to_string()));
        Ok(Value::Object(new))
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
        admission::admit_delete(rt, name)?;
        let key = rt.key(ns, name);
        let (last, _) = self
            .read_modify_write(rt, name, &key, UPDATE_RETRIES, |current| {
                let last = current.object().unwrap_or_else(|| json!({}));
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
                let mut ops = vec![Op::Delete(DeleteRequest {
                    range: KeyRange::single(key.clone().into_bytes()),
                    prev_kv: false,
                })];
                if rt.plural == "namespaces" {
                    for member in resources::RESOURCES.iter().filter(|r| r.namespaced) {
                        ops.push(Op::Delete(DeleteRequest {
                            range: KeyRange::prefix(
                                member.collection_prefix(Some(name)).into_bytes(),
                            ),
                            prev_kv: false,
                        }));
                    }
                }
                Ok(Change {
                    ops,
                    precondition: pre.resource_version,
                    answer: last,
                })
            })
            .await?;
        Ok(last)
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
            let revision = if success.is_empty() {
                self.node.store().applied().revision
            } else {
                let txn = Txn {
                    compare,
                    success,
                    failure: Vec::new(),
                };
                match self.write_txn(txn).await? {
                    (resp, revision) if resp.succeeded => revision,
                    _ => continue,
                }
            };
            return Ok(Listed {
                items: deleted,
                revision,
                continue_token: None,
                remaining: None,
                served: ReadPath::QuorumCache,
            });
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
            let body = json!({ "metadata": { "name": name } }).to_string();
            let admitted = admission::admit_create(rt, None, body.as_bytes())?;
            let key = rt.key(None, name);
            ops.push(Op::Txn(Txn {
                compare: vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)],
                success: vec![put(&key, &admitted.object)],
                failure: vec![],
            }));
        }
        self.write_txn(Txn {
            success: ops,
            ..Txn::default()
        })
        .await?;
        Ok(())
    }
}

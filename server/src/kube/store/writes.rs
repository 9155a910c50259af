//! Writes: each verb is the transaction a kube-apiserver would send to
//! etcd. A create is guarded by the key's absence and by the revision of
//! its namespace as read (so a namespace that started terminating
//! meanwhile fails the guard and the create is refused); every change of
//! one existing object (update, status update, patch, delete) goes through
//! [`KubeStore::read_modify_write`]: read the key from this node's state,
//! compute the change, and write it guarded by the revision read,
//! retrying a lost race on the state the guard saw; an answer without a
//! write (`404`, a failed precondition, nothing to write) is decided on a
//! state read after a read barrier.
//!
//! `dryRun` is decided here (and, for deletes, in `deletes`, through the
//! same guarded change) and nowhere else: a dry run takes the same
//! path (admission, preconditions, the change computed on the current
//! state, the guard checked against that state) and stops before the
//! write, answering what would have been stored at the current revision
//! (a create: with no `resourceVersion`, as kube answers). Deletes are in
//! `deletes`.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use serde_json::{json, Map, Value};

use kubestore_storage::{
    Command, Compare, CompareOp, DeleteRequest, KeyRange, KeyValue, Op, OpResponse, PutRequest,
    RangeRequest, Revision, Txn, TxnResponse,
};

use super::{GuardedWrite, KubeStore};
use crate::kube::admission::{self, Admitted, UpdateScope, SYSTEM_NAMESPACES};
use crate::kube::apply;
use crate::kube::crd;
use crate::kube::deletion::{self, UpdateEffect};
use crate::kube::error::KubeError;
use crate::kube::object;
use crate::kube::options::{DryRun, Preconditions};
use crate::kube::resources::{self, ResourceType};
use crate::write;

/// How many times an update, a status update or a delete without a
/// precondition of its own retries a lost race.
pub(super) const UPDATE_RETRIES: usize = 8;

/// How many names a create with `generateName` tries before it gives up
/// (kube's `maxNameGenerationCreateAttempts`, 1.32+): enough for a
/// million names per prefix with a 0.1% chance of failing.
const GENERATED_NAME_ATTEMPTS: usize = 8;

fn range_one(key: &str) -> Op {
    Op::Range(RangeRequest {
        range: KeyRange::single(key.as_bytes().to_vec()),
        ..RangeRequest::default()
    })
}

pub(super) fn delete_key(key: &str) -> Op {
    Op::Delete(DeleteRequest {
        range: KeyRange::single(key.as_bytes().to_vec()),
        prev_kv: false,
    })
}

pub(super) fn put(key: &str, obj: &Map<String, Value>) -> Op {
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
    /// The stored value parsed on first use, and whether it is an object: a
    /// change and the update around it both read it, and it is parsed
    /// once.
    parsed: &'a OnceCell<Parsed>,
}

/// A stored value as [`Current`] parsed it.
#[derive(Debug, Default)]
struct Parsed {
    /// Whether the value is a JSON object (not: written through the etcd
    /// API).
    is_object: bool,
    /// The object (empty when the value is not one).
    object: Map<String, Value>,
}

impl<'a> Current<'a> {
    fn parsed(&self) -> &'a Parsed {
        self.parsed
            .get_or_init(|| match serde_json::from_slice::<Value>(&self.kv.value) {
                Ok(Value::Object(object)) => Parsed {
                    is_object: true,
                    object,
                },
                _ => Parsed::default(),
            })
    }

    /// The object as clients see it (`kind`, `apiVersion`,
    /// `resourceVersion` filled in); `None` for a stored value that is not
    /// a JSON object (written through the etcd API).
    pub fn object(&self) -> Option<Value> {
        let parsed = self.parsed();
        if !parsed.is_object {
            object::not_an_object(&self.kv.key);
            return None;
        }
        Some(object::to_client(
            self.rt,
            parsed.object.clone(),
            self.revision(),
        ))
    }

    /// The revision that last modified it.
    pub fn revision(&self) -> u64 {
        self.kv.mod_revision.0
    }

    /// The object as stored (an empty one for a value that is not a JSON
    /// object): what an update carries its server-owned fields from.
    pub fn stored(&self) -> &'a Map<String, Value> {
        &self.parsed().object
    }
}

/// Whether an update stores nothing new: `new` equals `stored` but for
/// what is not stored or not compared (`kind`, `apiVersion`,
/// `metadata.resourceVersion`) and the `time` of managed-fields entries.
/// kube writes nothing then: its field manager keeps a manager's time when
/// the manager's update changed no field, and its storage skips a write of
/// the bytes already stored (so a no-op patch keeps the resourceVersion
/// and kubectl says "patched (no change)").
fn unchanged(stored: &Map<String, Value>, new: &Map<String, Value>) -> bool {
    // Compared in place, member by member (both maps iterate in key
    // order), skipping what is not compared: no copy of either object.
    fn same_except<'a>(
        a: &'a Map<String, Value>,
        b: &'a Map<String, Value>,
        skip: &'a [&str],
    ) -> bool {
        let kept =
            |m: &'a Map<String, Value>| m.iter().filter(|(k, _)| !skip.contains(&k.as_str()));
        kept(a).eq(kept(b))
    }
    fn same_entries(a: &[Value], b: &[Value]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|pair| match pair {
                (Value::Object(x), Value::Object(y)) => same_except(x, y, &["time"]),
                (x, y) => x == y,
            })
    }
    fn same_metadata(a: Option<&Value>, b: Option<&Value>) -> bool {
        let (Some(Value::Object(a)), Some(Value::Object(b))) = (a, b) else {
            return a == b;
        };
        same_except(a, b, &["resourceVersion", "managedFields"])
            && match (a.get("managedFields"), b.get("managedFields")) {
                (Some(Value::Array(x)), Some(Value::Array(y))) => same_entries(x, y),
                (x, y) => x == y,
            }
    }
    same_except(stored, new, &["kind", "apiVersion", "metadata"])
        && same_metadata(stored.get("metadata"), new.get("metadata"))
}

/// The namespaces this node's creates last found usable (present and
/// not terminating), by key, with the revision that last modified each:
/// a create in one of them guards on that revision without reading and
/// parsing the namespace again (a read of its row and a parse of its JSON,
/// about 4% of the nodes' CPU under REST creates).
///
/// Correct however stale: the create's transaction compares the
/// namespace's `mod_revision` with the remembered one, so a namespace
/// changed since (terminating, deleted, created again) fails the guard,
/// and the next attempt reads it from the store. Only a usable namespace
/// is remembered: a refusal (absent, terminating) always rests on a read.
#[derive(Debug, Default)]
pub(super) struct UsableNamespaces(RwLock<HashMap<String, u64>>);

impl UsableNamespaces {
    /// Namespaces remembered at most; past it the memory starts afresh.
    const MAX: usize = 4096;

    fn get(&self, key: &str) -> Option<u64> {
        let by_key = self.0.read().unwrap_or_else(PoisonError::into_inner);
        by_key.get(key).copied()
    }

    fn remember(&self, key: &str, mod_revision: u64) {
        if self.get(key) == Some(mod_revision) {
            return;
        }
        let mut by_key = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if by_key.len() >= Self::MAX {
            by_key.clear();
        }
        by_key.insert(key.to_string(), mod_revision);
    }

    fn forget(&self, key: &str) {
        let mut by_key = self.0.write().unwrap_or_else(PoisonError::into_inner);
        by_key.remove(key);
    }
}

/// Whether a stored namespace is terminating (its value is not an object:
/// written through the etcd API, taken as active).
fn namespace_terminating(kv: &KeyValue) -> bool {
    match serde_json::from_slice::<Value>(&kv.value) {
        Ok(Value::Object(ns)) => deletion::is_terminating(&ns),
        _ => false,
    }
}

/// What a guarded change does to the current state of its key.
pub(super) struct Change<T> {
    /// Run when the guard holds; none: nothing to write, the answer
    /// stands at the revision read.
    pub(super) ops: Vec<Op>,
    /// The client's own precondition (a resourceVersion): a mismatch is a
    /// `409`. `None`: the guard is the revision read, and a lost race is
    /// retried.
    pub(super) precondition: Option<u64>,
    /// What the verb answers when the change is written.
    pub(super) answer: T,
}

impl KubeStore {
    /// Runs one transaction through Raft: its response and revision.
    pub(super) async fn write_txn(&self, txn: Txn) -> Result<(TxnResponse, Revision), KubeError> {
        Ok(write::txn(&self.node, Command::Txn(txn)).await?)
    }

    /// The current key-value of `key` in this node's applied state.
    fn read_key(&self, key: &str) -> Result<Option<KeyValue>, KubeError> {
        Ok(self.node.store().get(key.as_bytes())?)
    }

    /// The one guarded read-modify-write of an existing object.
    ///
    /// Reads `key` from this node's applied state and lets `change` turn
    /// it into the ops to run, in `Txn[MOD(key) == revision read → ops,
    /// else Range(key)]`. The guard makes the write linearizable whatever
    /// the state read: a write computed from a state that is no longer
    /// current fails it, and the failure's Range returns the current state
    /// (read at the write's place in the log), on which `change` runs
    /// again: at most `attempts` writes in all.
    ///
    /// An answer decided without a write (`404` for an absent key, an
    /// error from `change`, the client's precondition not holding (`409`),
    /// a change with nothing to write, a dry run) must rest on the most
    /// recent state: when the state it rests on was read locally, it is
    /// read again after a read barrier (so a follower that lags answers
    /// neither a `404` for an object it has not applied yet nor a stale
    /// "unchanged"), and it stands only if the key did not move; otherwise
    /// `change` runs on the newer state. So the common update (a
    /// change to write, a precondition that holds) costs no barrier, as
    /// kube's `GuaranteedUpdate` from its watch cache; the same answers
    /// as with a barrier first.
    ///
    /// Returns the change's answer and the write's revision (for an answer
    /// without a write, the key's revision).
    pub(super) async fn read_modify_write<T, E>(
        &self,
        rt: &ResourceType,
        name: &str,
        key: &str,
        attempts: usize,
        dry_run: DryRun,
        mut change: impl FnMut(Current<'_>) -> Result<Change<T>, E>,
    ) -> Result<(T, Revision), E>
    where
        E: From<KubeError>,
    {
        let mut next = self.read_key(key)?;
        // Whether `next` is at least as recent as this call: read after a
        // barrier, or returned by a write's failed guard.
        let mut fresh = false;
        let mut writes = 0;
        loop {
            let parsed = OnceCell::new();
            let outcome = next.as_ref().map(|current| {
                change(Current {
                    rt,
                    kv: current,
                    parsed: &parsed,
                })
            });
            let read_at = next.as_ref().map(|kv| kv.mod_revision.0);
            let decided_without_write = match &outcome {
                None | Some(Err(_)) => true,
                Some(Ok(c)) => {
                    dry_run.is_dry_run()
                        || c.ops.is_empty()
                        || c.precondition.is_some_and(|p| Some(p) != read_at)
                }
            };
            if decided_without_write && !fresh {
                self.node
                    .linearizable_barrier()
                    .await
                    .map_err(KubeError::from)?;
                fresh = true;
                let again = self.read_key(key)?;
                if again.as_ref().map(|kv| kv.mod_revision.0) != read_at {
                    // The key moved since the local read: decide again.
                    next = again;
                    continue;
                }
            }
            let (Some(current), Some(outcome)) = (next.take(), outcome) else {
                return Err(KubeError::not_found(rt, name).into());
            };
            let Change {
                ops,
                precondition,
                answer,
            } = outcome?;
            if precondition.is_some_and(|p| p != current.mod_revision.0) {
                return Err(KubeError::conflict(rt, name).into());
            }
            if dry_run.is_dry_run() || ops.is_empty() {
                return Ok((answer, current.mod_revision));
            }
            if writes == attempts {
                return Err(KubeError::conflict(rt, name).into());
            }
            writes += 1;
            let txn = Txn {
                compare: vec![Compare::mod_revision(
                    key.to_string(),
                    CompareOp::Equal,
                    current.mod_revision.0,
                )],
                success: ops,
                failure: vec![range_one(key)],
            };
            let (resp, revision) = self.write_txn(txn).await?;
            if resp.succeeded {
                return Ok((answer, revision));
            }
            self.count_guard_failure(GuardedWrite::Update);
            // Lost a race with another writer, or read a state this node
            // had not caught up from: decide again on the state the guard
            // saw (absent = deleted meanwhile = 404; the client's
            // precondition against it = 409).
            next = range_kvs(&resp, 0).first().cloned();
            fresh = true;
        }
    }

    /// Creates an admitted object. The namespace of a namespaced object
    /// must exist and not be terminating (`404`, `403`): it is read here
    /// and the create is guarded by the revision read, so a namespace
    /// that changed meanwhile (say, started terminating) is read again.
    /// The local read is enough on the common path; a namespace this node
    /// finds absent or terminating is read again after a read barrier
    /// before the create is refused.
    ///
    /// A name the server generated (`generateName`) that is taken is
    /// replaced by another, as kube 1.32+ retries it: at most
    /// [`GENERATED_NAME_ATTEMPTS`] names in all, then kube's `409` "the
    /// server was not able to generate a unique name" (retry after 1 s).
    /// Every verb that creates (POST, an apply that creates, dry runs)
    /// comes through here.
    #[tracing::instrument(level = "debug", skip(self, rt, admitted), fields(resource = rt.plural))]
    pub async fn create(
        &self,
        rt: &ResourceType,
        mut admitted: Admitted,
        dry_run: DryRun,
    ) -> Result<Value, KubeError> {
        if admitted.generated_from.is_none() {
            // A name of the client's own is tried once: no copy kept.
            return self.create_once(rt, admitted, dry_run).await;
        }
        for _ in 1..GENERATED_NAME_ATTEMPTS {
            match self.create_once(rt, admitted.clone(), dry_run).await {
                Err(KubeError::AlreadyExists { .. }) => {
                    admitted.regenerate_name(&self.names);
                }
                other => return other,
            }
        }
        let name = admitted.name.clone();
        match self.create_once(rt, admitted, dry_run).await {
            Err(KubeError::AlreadyExists { .. }) => {
                Err(KubeError::generated_name_conflict(rt, &name))
            }
            other => other,
        }
    }

    /// One attempt of [`create`](Self::create), under the admitted name.
    async fn create_once(
        &self,
        rt: &ResourceType,
        admitted: Admitted,
        dry_run: DryRun,
    ) -> Result<Value, KubeError> {
        let Admitted {
            name,
            namespace: ns,
            object: mut obj,
            ..
        } = admitted;
        self.admit_definition(rt, &mut obj);
        self.check_definition_active(rt)?;
        let ns = ns.as_deref();
        let key = rt.key(ns, &name);
        let ns_key = ns
            .filter(|_| rt.namespaced)
            .map(|ns| resources::namespaces().key(None, ns));
        let mut barrier_done = false;
        if dry_run.is_dry_run() {
            self.node
                .linearizable_barrier()
                .await
                .map_err(KubeError::from)?;
            barrier_done = true;
        }
        for attempt in 0..UPDATE_RETRIES {
            let mut compare = vec![Compare::mod_revision(key.clone(), CompareOp::Equal, 0)];
            let mut failure = vec![range_one(&key)];
            if let (Some(ns_key), Some(ns)) = (&ns_key, ns) {
                // A first attempt guards on the revision the namespace was
                // last found usable at ([`UsableNamespaces`]); a dry run,
                // which writes no guard, and every retry read it.
                let remembered = (attempt == 0 && !dry_run.is_dry_run())
                    .then(|| self.usable_namespaces.get(ns_key))
                    .flatten();
                let ns_revision = match remembered {
                    Some(revision) => revision,
                    None => {
                        let found = self.read_key(ns_key)?;
                        let usable = found.as_ref().filter(|kv| !namespace_terminating(kv));
                        let Some(kv) = usable else {
                            self.usable_namespaces.forget(ns_key);
                            if !barrier_done {
                                // This node may lag: decide on the most recent state.
                                self.node
                                    .linearizable_barrier()
                                    .await
                                    .map_err(KubeError::from)?;
                                barrier_done = true;
                                continue;
                            }
                            return Err(match found {
                                None => KubeError::not_found(resources::namespaces(), ns),
                                Some(_) => KubeError::NamespaceTerminating {
                                    resource: rt.group_resource(),
                                    name: name.clone(),
                                    namespace: ns.to_string(),
                                },
                            });
                        };
                        self.usable_namespaces.remember(ns_key, kv.mod_revision.0);
                        kv.mod_revision.0
                    }
                };
                compare.push(Compare::mod_revision(
                    ns_key.clone(),
                    CompareOp::Equal,
                    ns_revision,
                ));
                failure.push(range_one(ns_key));
            }
            if dry_run.is_dry_run() {
                if self.read_key(&key)?.is_some() {
                    return Err(KubeError::already_exists(rt, &name));
                }
                return Ok(Value::Object(obj));
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
            self.count_guard_failure(GuardedWrite::Create);
            if let Some(existing) = range_kvs(&resp, 0).first() {
                // A create retried after its first attempt committed finds its own
                // uid: that is this request's success, not a conflict.
                let ours = object::meta_str(&obj, "uid");
                let stored = object::from_stored(
                    rt,
                    &existing.key,
                    &existing.value,
                    existing.mod_revision.0,
                );
                if ours.is_some()
                    && stored
                        .as_ref()
                        .and_then(|s| s.pointer("/metadata/uid"))
                        .and_then(Value::as_str)
                        == ours
                {
                    return stored
                        .ok_or_else(|| KubeError::Internal("stored object vanished".into()));
                }
                return Err(KubeError::already_exists(rt, &name));
            }
            if ns_key.is_none() {
                return Err(KubeError::Internal(
                    "create guard failed without a cause".into(),
                ));
            }
            // The namespace changed (or went) since it was read: read it again.
        }
        Err(KubeError::conflict(rt, &name))
    }

    /// A CustomResourceDefinition about to be written: whether its names
    /// are free among the types this node serves decides whether it is
    /// established ([`crd::admission::accept_names`]); other types pass.
    fn admit_definition(&self, rt: &ResourceType, obj: &mut Map<String, Value>) {
        if std::ptr::eq(rt, resources::custom_resource_definitions()) {
            crd::admission::accept_names(obj, &self.cache.types());
        }
    }

    /// A custom resource is created only while its definition is not
    /// being deleted (kube's `405`: "create not allowed while custom
    /// resource definition is terminating").
    fn check_definition_active(&self, rt: &ResourceType) -> Result<(), KubeError> {
        let Some(custom) = rt.custom else {
            return Ok(());
        };
        let defs = resources::custom_resource_definitions();
        let (objects, _) = self.cache.current(defs);
        let terminating = objects
            .get(defs.key(None, &custom.definition).as_str())
            .map(|d| d.to_value())
            .as_ref()
            .and_then(Value::as_object)
            .is_some_and(deletion::is_being_deleted);
        if terminating {
            return Err(KubeError::MethodNotAllowed(
                "create not allowed while custom resource definition is terminating".into(),
            ));
        }
        Ok(())
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
        dry_run: DryRun,
    ) -> Result<Value, KubeError> {
        self.update_as(rt, admitted, scope, dry_run, None).await
    }

    /// [`update`](Self::update) recorded as an `Update` by `manager` in
    /// the object's `managedFields` (`None`: as [`update`](Self::update)).
    pub async fn update_as(
        &self,
        rt: &ResourceType,
        admitted: Admitted,
        scope: UpdateScope,
        dry_run: DryRun,
        manager: Option<&apply::Manager>,
    ) -> Result<Value, KubeError> {
        let Admitted {
            name,
            namespace,
            object: obj,
            ..
        } = admitted;
        // Checked before the barrier: a malformed precondition is refused
        // whether or not the object exists.
        admission::precondition(&obj)?;
        // As kube's update handler: a uid in the body is a precondition on
        // the stored object (`409`), checked before anything else.
        let uid = Preconditions {
            uid: object::meta_str(&obj, "uid")
                .filter(|u| !u.is_empty())
                .map(str::to_string),
            resource_version: None,
        };
        self.update_managed(
            rt,
            namespace.as_deref(),
            &name,
            scope,
            UPDATE_RETRIES,
            dry_run,
            manager,
            |current| {
                deletion::check_preconditions(
                    rt,
                    &name,
                    current.stored(),
                    current.revision(),
                    &uid,
                )?;
                Ok::<_, KubeError>(obj.clone())
            },
        )
        .await
    }

    /// An update computed from the current object (a patch): `change`
    /// gets the stored state and returns the object to write, whose
    /// `metadata.resourceVersion`, when set, is its precondition; without
    /// one, `change` runs again on the newer state after a lost race, at
    /// most `attempts` times in all. [`admission::admit_update`] prepares
    /// what it returns, within `scope`; the deletion rules
    /// ([`deletion::check_update`]) then refuse new finalizers on an
    /// object being deleted, and turn the update that removes its last
    /// finalizer into its deletion.
    #[allow(clippy::too_many_arguments)] // the verb's inputs, each its own
    pub async fn update_with<E>(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        scope: UpdateScope,
        attempts: usize,
        dry_run: DryRun,
        change: impl FnMut(Current<'_>) -> Result<Map<String, Value>, E>,
    ) -> Result<Value, E>
    where
        E: From<KubeError>,
    {
        self.update_managed(rt, ns, name, scope, attempts, dry_run, None, change)
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
        dry_run: DryRun,
        manager: Option<&apply::Manager>,
        mut change: impl FnMut(Current<'_>) -> Result<Map<String, Value>, E>,
    ) -> Result<Value, E>
    where
        E: From<KubeError>,
    {
        let key = rt.key(ns, name);
        let target = apply::Target::of(rt);
        let (mut new, revision) = self
            .read_modify_write(
                rt,
                name,
                &key,
                attempts,
                dry_run,
                |current| -> Result<_, E> {
                    let mut new = change(current)?;
                    let precondition = admission::precondition(&new).map_err(E::from)?;
                    let stored = current.stored();
                    admission::admit_update(rt, scope, stored, &mut new).map_err(E::from)?;
                    if scope != UpdateScope::Status {
                        self.admit_definition(rt, &mut new);
                    }
                    if let Some(manager) = manager {
                        apply::track_update(
                            &target,
                            manager,
                            Some(stored),
                            &mut new,
                            &object::now_rfc3339(),
                        )
                        .map_err(|e| E::from(KubeError::from(e)))?;
                    }
                    let ops =
                        match deletion::check_update(rt, name, stored, &new).map_err(E::from)? {
                            UpdateEffect::Write if unchanged(stored, &new) => {
                                // Nothing to store: no write, no new
                                // revision, no event; the managers' times
                                // stay as they were.
                                if let Some(m) =
                                    stored.get("metadata").and_then(|m| m.get("managedFields"))
                                {
                                    object::metadata_mut(&mut new)
                                        .insert("managedFields".into(), m.clone());
                                }
                                vec![]
                            }
                            UpdateEffect::Write => vec![put(&key, &new)],
                            UpdateEffect::Delete => vec![delete_key(&key)],
                        };
                    Ok(Change {
                        ops,
                        precondition,
                        answer: new,
                    })
                },
            )
            .await?;
        object::metadata_mut(&mut new)
            .insert("resourceVersion".into(), json!(revision.0.to_string()));
        Ok(Value::Object(new))
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

#[cfg(test)]
mod unchanged_tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            _ => Map::new(),
        }
    }

    #[test]
    fn an_update_that_changes_nothing_but_times_stores_nothing() {
        let stored = obj(json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "a", "managedFields": [{"manager": "kubectl", "operation": "Update", "time": "2026-01-01T00:00:00Z"}]},
            "data": {"k": "v"}}));
        let same = obj(json!({
            "metadata": {"name": "a", "resourceVersion": "7", "managedFields": [{"manager": "kubectl", "operation": "Update", "time": "2026-02-02T00:00:00Z"}]},
            "data": {"k": "v"}}));
        assert!(unchanged(&stored, &same));
        let mut changed = same.clone();
        changed.insert("data".into(), json!({"k": "w"}));
        assert!(!unchanged(&stored, &changed));
        // Another manager taking ownership is a change of its own.
        let taken = obj(json!({
            "metadata": {"name": "a", "managedFields": [{"manager": "other", "operation": "Apply", "time": "2026-02-02T00:00:00Z"}]},
            "data": {"k": "v"}}));
        assert!(!unchanged(&stored, &taken));
        // A label is compared; so is the number of managers.
        let mut labeled = same.clone();
        object::metadata_mut(&mut labeled).insert("labels".into(), json!({"a": "b"}));
        assert!(!unchanged(&stored, &labeled));
        let mut more = same.clone();
        object::metadata_mut(&mut more).insert(
            "managedFields".into(),
            json!([{"manager": "kubectl", "operation": "Update"}, {"manager": "x"}]),
        );
        assert!(!unchanged(&stored, &more));
    }
}

//! The controllers that finish what a DELETE leaves pending: the garbage
//! collector ([`gc`]: owner references, the `orphan` and
//! `foregroundDeletion` finalizers), the namespace controller
//! ([`namespaces`]: a terminating namespace's contents, then the
//! namespace) and the pod garbage collector's orphaned pods ([`pods`]: a
//! pod in its grace period with no kubelet to finish it).
//!
//! Where they run and why that is safe:
//!
//! - on the Raft leader only: every node runs [`run`], which waits (on
//!   Raft's leader changes, not a timer) until its node leads, and stops
//!   the moment it does not. A new leader starts with a full resync from
//!   its watch cache, so work a deposed leader left half done is found
//!   again: the controllers are level-triggered, the events only say where
//!   to look;
//! - driven by the watch cache's ordered event stream: each type's events
//!   after the revision last seen (a full resync when the ring no longer
//!   reaches back that far), never by polling the objects; the one timer
//!   is the end of a pod's grace period;
//! - every write is a normal guarded write of the store (an update
//!   guarded by the revision read, a delete with the uid and
//!   resourceVersion the decision was made on), so a decision made on a
//!   state that changed meanwhile is refused by the state machine, not
//!   applied; the changed object's event brings it back to be decided
//!   again. Two leaders overlapping for a moment (a deposed one that has
//!   not noticed yet) therefore cannot undo each other: each decision is
//!   checked against the state it was made on, and the facts decided on
//!   are monotonic (an owner's uid, once gone, never comes back; a
//!   terminating namespace cannot gain contents, since a create is
//!   guarded by its namespace's revision).
//!
//! Failed writes (Raft unavailable, an unknown outcome) are retried after
//! a backoff; everything else the next event or resync brings back.

mod actions;
mod definitions;
pub mod gc;
mod namespaces;
mod pods;

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kubestore_raft::RaftNode;
use kubestore_storage::EventKind;
use serde_json::Value;
use tokio::sync::watch;
use tracing::Instrument;

use crate::kube::cache::{CachedObject, WatchCache};
use crate::kube::deletion::{self, FINALIZER_FOREGROUND, FINALIZER_ORPHAN};
use crate::kube::error::KubeError;
use crate::kube::resources::{self, ResourceType, TypeSet};
use crate::kube::store::KubeStore;

use gc::OwnerIndex;

/// Events read from the cache per type per step.
const EVENTS_PER_STEP: usize = 1024;
/// Objects a resync visits between two yields to the runtime.
const OBJECTS_PER_YIELD: usize = 4096;
/// The first and the longest wait before failed work is tried again.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// One piece of work, by type index in [`Controllers::types`] and etcd
/// key (the key decides: the index is checked against it when the work
/// is done, as the served types may have changed since it was queued).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Work {
    /// An object with owner references: are its owners still there?
    Dependent(usize, String),
    /// An object being deleted with the `orphan` or `foregroundDeletion`
    /// finalizer.
    Owner(usize, String),
    /// A terminating namespace, by name.
    Namespace(String),
    /// A pod in its grace period, by etcd key.
    PodGrace(String),
    /// A CustomResourceDefinition being deleted, by name: its objects go,
    /// then its cleanup finalizer.
    Definition(String),
}

/// Runs the controllers on this node whenever it is the Raft leader,
/// until `stop` turns true.
pub async fn run(kube: KubeStore, node: RaftNode, mut stop: watch::Receiver<bool>) {
    let me = node.id();
    loop {
        let leader = node.current_leader();
        if leader != Some(me) {
            tokio::select! {
                changed = node.leader_changed(leader) => if changed.is_err() { return },
                _ = stop.wait_for(|s| *s) => return,
            }
            continue;
        }
        let span = tracing::info_span!("controllers", node = me, term = node.current_term());
        tokio::select! {
            _ = lead(&kube).instrument(span) => {}
            _ = node.leader_changed(Some(me)) => {
                tracing::info!(node = me, "no longer the leader: controllers pause");
            }
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// The controllers' state while this node leads.
struct Controllers {
    kube: KubeStore,
    index: OwnerIndex,
    /// Namespaces being terminated, by name.
    terminating: HashSet<String>,
    queue: VecDeque<Work>,
    queued: HashSet<Work>,
    /// The served types the controllers follow (as of the last resync):
    /// one per etcd prefix (a custom type's versions share theirs).
    served: Arc<TypeSet>,
    types: Vec<&'static ResourceType>,
    /// Per type, the revision its events have been read to.
    seen: Vec<u64>,
    /// Pods in a grace period no kubelet will end, by when it ends.
    grace_ends: BTreeSet<(DateTime<Utc>, String)>,
}

/// Leads until cancelled: resync, then follow the events.
async fn lead(kube: &KubeStore) {
    let cache = kube.cache().clone();
    let mut revisions = cache.subscribe();
    let mut c = Controllers {
        kube: kube.clone(),
        index: OwnerIndex::default(),
        terminating: HashSet::new(),
        queue: VecDeque::new(),
        queued: HashSet::new(),
        served: Arc::new(TypeSet::builtin()),
        types: Vec::new(),
        seen: Vec::new(),
        grace_ends: BTreeSet::new(),
    };
    c.resync(&cache).await;
    let mut retry: Vec<Work> = Vec::new();
    let mut backoff = RETRY_MIN;
    loop {
        while let Some(work) = c.queue.pop_front() {
            c.queued.remove(&work);
            match c.process(&cache, &work).await {
                Ok(()) => backoff = RETRY_MIN,
                Err(e) => {
                    tracing::debug!(error = %e, ?work, "controller work failed; retried later");
                    retry.push(work);
                }
            }
        }
        let grace_end = c.grace_ends.first().map(|(t, _)| until(*t));
        tokio::select! {
            changed = revisions.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(backoff), if !retry.is_empty() => {
                backoff = (backoff * 2).min(RETRY_MAX);
                for work in retry.drain(..) {
                    c.enqueue(work);
                }
            }
            _ = tokio::time::sleep(grace_end.unwrap_or_default()), if grace_end.is_some() => {
                c.grace_periods_ended(Utc::now());
            }
        }
        if !c.follow(&cache) {
            tracing::info!("the watch cache's ring no longer reaches back: resync");
            c.resync(&cache).await;
        }
    }
}

/// How long from now until `t` (zero once it has passed).
fn until(t: DateTime<Utc>) -> Duration {
    (t - Utc::now()).to_std().unwrap_or_default()
}

fn is_pods(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "pods"
}

fn is_nodes(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "nodes"
}

/// Whether the node `pod` is bound to is a Node object.
fn node_exists(cache: &WatchCache, pod: &serde_json::Map<String, Value>) -> bool {
    let Some(node) = pods::node_name(pod) else {
        return false;
    };
    resources::find("", "v1", "nodes")
        .is_some_and(|nodes| lookup(cache, nodes, &nodes.key(None, node)).is_some())
}

/// The served types, one per etcd prefix: the built-ins, and of each
/// custom type's versions the storage version (else the first served).
fn one_per_prefix(served: &TypeSet) -> Vec<&'static ResourceType> {
    let mut out: Vec<&'static ResourceType> = Vec::new();
    for rt in served.iter() {
        match out.iter_mut().find(|t| t.etcd_prefix == rt.etcd_prefix) {
            Some(t) => {
                if rt.custom.is_some_and(|c| c.storage) {
                    *t = rt;
                }
            }
            None => out.push(rt),
        }
    }
    out
}

fn lookup(cache: &WatchCache, rt: &ResourceType, key: &str) -> Option<Arc<CachedObject>> {
    cache.current(rt).0.get(key).cloned()
}

/// What the controllers read of an object of type `rt` when they observe
/// it: its metadata alone (uid, owner references, deletion state,
/// finalizers), except a pod's whole object, whose `spec.nodeName` decides
/// its grace period. The leader does this for every event of every type,
/// so skipping the rest of the JSON (a ConfigMap's data, say) unparsed
/// matters.
fn observed(rt: &ResourceType, obj: &CachedObject) -> Value {
    if is_pods(rt) {
        obj.to_value()
    } else {
        obj.to_metadata_value()
    }
}

fn as_map(v: &Value) -> Option<&serde_json::Map<String, Value>> {
    v.as_object()
}

impl Controllers {
    fn enqueue(&mut self, work: Work) {
        if self.queued.insert(work.clone()) {
            self.queue.push_back(work);
        }
    }

    /// Queues the pods whose grace period has ended by `now`.
    fn grace_periods_ended(&mut self, now: DateTime<Utc>) {
        while let Some((t, _)) = self.grace_ends.first() {
            if *t > now {
                break;
            }
            if let Some((_, key)) = self.grace_ends.pop_first() {
                self.enqueue(Work::PodGrace(key));
            }
        }
    }

    /// A node went: the pods bound to it in a grace period are now
    /// without a kubelet.
    fn node_gone(&mut self, cache: &WatchCache, node: &str) {
        let Some(pods_rt) = resources::find("", "v1", "pods") else {
            return;
        };
        let (objects, _) = cache.current(pods_rt);
        for (key, obj) in objects.iter() {
            let bound_here = as_map(&obj.to_value())
                .is_some_and(|p| deletion::is_being_deleted(p) && pods::node_name(p) == Some(node));
            if bound_here {
                self.enqueue(Work::PodGrace(key.to_string()));
            }
        }
    }

    /// Rebuilds everything from the cache's current state and queues every
    /// object that may need work. It visits every object (a second or so
    /// for a million), so it yields to the runtime every
    /// [`OBJECTS_PER_YIELD`] of them rather than hold a worker thread.
    async fn resync(&mut self, cache: &WatchCache) {
        self.index = OwnerIndex::default();
        self.terminating.clear();
        self.served = cache.types();
        self.types = one_per_prefix(&self.served);
        self.seen = vec![0; self.types.len()];
        for (i, rt) in self.types.clone().into_iter().enumerate() {
            let (objects, revision) = cache.current(rt);
            self.seen[i] = revision;
            for (n, (key, obj)) in objects.iter().enumerate() {
                self.observe(cache, i, key, Some(&observed(rt, obj)));
                if n % OBJECTS_PER_YIELD == OBJECTS_PER_YIELD - 1 {
                    tokio::task::yield_now().await;
                }
            }
        }
        tracing::debug!(queued = self.queue.len(), "controllers resynced");
    }

    /// Reads the events after what was seen, type by type; `false` when a
    /// type's ring no longer reaches back (a resync is needed).
    fn follow(&mut self, cache: &WatchCache) -> bool {
        if !Arc::ptr_eq(&cache.types(), &self.served) {
            // The served types changed: start again from what they are.
            return false;
        }
        let target = cache.revision();
        for (i, rt) in self.types.clone().into_iter().enumerate() {
            loop {
                let Ok((events, upto)) = cache.events_after(rt, self.seen[i], EVENTS_PER_STEP)
                else {
                    return false;
                };
                let done = events.is_empty() || upto >= target;
                for event in events {
                    let last = event.object.as_ref().or(event.prev.as_ref());
                    let Some(key) = last.map(|o| o.key.clone()) else {
                        continue;
                    };
                    if event.kind == EventKind::Delete {
                        if let Some(last) = &event.object {
                            self.gone(i, &last.to_metadata_value());
                            if is_nodes(rt) {
                                self.node_gone(cache, key.rsplit('/').next().unwrap_or_default());
                            }
                        }
                    }
                    let current = lookup(cache, rt, &key);
                    let current = current.map(|o| observed(rt, &o));
                    self.observe(cache, i, &key, current.as_ref());
                }
                self.seen[i] = self.seen[i].max(upto);
                if done {
                    break;
                }
            }
        }
        true
    }

    /// Follows the events until every type has been read to at least
    /// `revision` (one step, as the cache already holds it).
    async fn catch_up(&mut self, cache: &WatchCache, revision: u64) {
        while self.seen.iter().copied().min().unwrap_or(0) < revision {
            if !self.follow(cache) {
                self.resync(cache).await;
            }
        }
    }

    /// An object of type `i` was deleted (`last`: its last state): its
    /// dependents may be orphans now, its owners may wait for it, its
    /// namespace may be emptying.
    fn gone(&mut self, i: usize, last: &Value) {
        if let Some(uid) = last.pointer("/metadata/uid").and_then(Value::as_str) {
            for (j, key) in self.index.dependents(uid) {
                self.enqueue(Work::Dependent(j, key));
            }
        }
        let ns = last.pointer("/metadata/namespace").and_then(Value::as_str);
        for r in gc::owner_refs(last) {
            if let Some((j, key)) = gc::owner_key(&self.types, &r, ns) {
                self.enqueue(Work::Owner(j, key));
            }
        }
        if let Some(custom) = self.types[i].custom {
            // The definition of a type being emptied may be done now.
            self.enqueue(Work::Definition(custom.definition.clone()));
        }
        if self.types[i].namespaced {
            if let Some(ns) = ns.filter(|ns| self.terminating.contains(*ns)) {
                self.enqueue(Work::Namespace(ns.to_string()));
            }
        }
    }

    /// The current state of one object (`None`: gone): index it and queue
    /// what it may need.
    fn observe(&mut self, cache: &WatchCache, i: usize, key: &str, current: Option<&Value>) {
        self.index.refresh(i, key, current);
        let rt = self.types[i];
        let name = || key.rsplit('/').next().unwrap_or_default().to_string();
        let Some(obj) = current.and_then(as_map) else {
            if std::ptr::eq(rt, resources::namespaces()) {
                self.terminating.remove(&name());
            }
            return;
        };
        if std::ptr::eq(rt, resources::namespaces()) {
            if deletion::is_being_deleted(obj) {
                self.terminating.insert(name());
                self.enqueue(Work::Namespace(name()));
            } else {
                self.terminating.remove(&name());
            }
        }
        if std::ptr::eq(rt, resources::custom_resource_definitions())
            && definitions::is_cleaning_up(obj)
        {
            self.enqueue(Work::Definition(name()));
        }
        let refs = current.map(gc::owner_refs).unwrap_or_default();
        if !refs.is_empty() {
            self.enqueue(Work::Dependent(i, key.to_string()));
            // An owner being deleted may be waiting for this one (or for it
            // to drop a blocking reference): let it look again.
            let ns = obj
                .get("metadata")
                .and_then(|m| m.get("namespace"))
                .and_then(Value::as_str);
            for r in refs {
                if let Some((j, owner_key)) = gc::owner_key(&self.types, &r, ns) {
                    let owner = lookup(cache, self.types[j], &owner_key);
                    if owner.is_some_and(|o| {
                        as_map(&o.to_metadata_value()).is_some_and(deletion::is_being_deleted)
                    }) {
                        self.enqueue(Work::Owner(j, owner_key));
                    }
                }
            }
        }
        if is_pods(rt) {
            match pods::verdict(obj, node_exists(cache, obj), Utc::now()) {
                pods::Verdict::Nothing => {}
                pods::Verdict::WaitUntil(t) => {
                    self.grace_ends.insert((t, key.to_string()));
                }
                pods::Verdict::DeleteNow => self.enqueue(Work::PodGrace(key.to_string())),
            }
        }
        if deletion::is_being_deleted(obj)
            && deletion::finalizers(obj)
                .iter()
                .any(|f| f == FINALIZER_ORPHAN || f == FINALIZER_FOREGROUND)
        {
            self.enqueue(Work::Owner(i, key.to_string()));
        }
    }

    async fn process(&mut self, cache: &WatchCache, work: &Work) -> Result<(), KubeError> {
        match work {
            Work::Dependent(i, key) => match self.type_of(*i, key) {
                Some(i) => self.dependent(cache, i, key).await,
                None => Ok(()),
            },
            Work::Owner(i, key) => match self.type_of(*i, key) {
                Some(i) => self.owner(cache, i, key).await,
                None => Ok(()),
            },
            Work::Namespace(name) => namespaces::finish(&self.kube, cache, name).await,
            Work::PodGrace(key) => self.pod_grace(cache, key).await,
            Work::Definition(name) => definitions::finish(&self.kube, cache, name).await,
        }
    }

    /// The index of the type `key` is an object of: `i` when it still is.
    fn type_of(&self, i: usize, key: &str) -> Option<usize> {
        let owns = |rt: &ResourceType| key.starts_with(&rt.collection_prefix(None));
        if self.types.get(i).is_some_and(|rt| owns(rt)) {
            return Some(i);
        }
        self.types.iter().position(|rt| owns(rt))
    }

    /// Deletes a pod whose grace period has ended with no kubelet to
    /// finish it (a delete with a grace period of 0, guarded by the uid
    /// and revision seen).
    #[tracing::instrument(level = "debug", skip(self, cache))]
    async fn pod_grace(&mut self, cache: &WatchCache, key: &str) -> Result<(), KubeError> {
        let Some(rt) = resources::find("", "v1", "pods") else {
            return Ok(());
        };
        let Some(current) = lookup(cache, rt, key) else {
            return Ok(());
        };
        let current_value = current.to_value();
        let Some(pod) = as_map(&current_value) else {
            return Ok(());
        };
        match pods::verdict(pod, node_exists(cache, pod), Utc::now()) {
            pods::Verdict::Nothing => Ok(()),
            pods::Verdict::WaitUntil(t) => {
                self.grace_ends.insert((t, key.to_string()));
                Ok(())
            }
            pods::Verdict::DeleteNow => {
                tracing::info!(
                    key,
                    node = pods::node_name(pod),
                    "grace period over and no kubelet: deleting the pod"
                );
                actions::delete_seen_now(&self.kube, rt, &current).await
            }
        }
    }

    /// Decides on a dependent from its owners' current states.
    #[tracing::instrument(level = "debug", skip(self, cache), fields(resource = self.types[i].plural))]
    async fn dependent(
        &mut self,
        cache: &WatchCache,
        i: usize,
        key: &str,
    ) -> Result<(), KubeError> {
        let rt = self.types[i];
        let Some(current) = lookup(cache, rt, key) else {
            return Ok(());
        };
        let current_value = current.to_value();
        let Some(obj) = as_map(&current_value) else {
            return Ok(());
        };
        let ns = current_value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        let mut owners = Vec::new();
        for r in gc::owner_refs(&current_value) {
            let state = gc::owner_key(&self.types, &r, ns).map(|(j, owner_key)| {
                let found = lookup(cache, self.types[j], &owner_key).map(|o| o.to_value());
                gc::owner_state(&r, found.as_ref())
            });
            owners.push((r, state));
        }
        let uid = obj
            .get("metadata")
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let has_dependents = self.index.has_dependents(uid);
        match gc::verdict(obj, &owners, has_dependents) {
            gc::Verdict::Keep => Ok(()),
            gc::Verdict::DropRefs(uids) => {
                tracing::info!(
                    key,
                    ?uids,
                    "removing references to owners that are gone or waiting"
                );
                actions::drop_owner_refs(&self.kube, rt, &current, &uids).await
            }
            gc::Verdict::Delete(policy) => {
                tracing::info!(key, ?policy, "deleting a dependent whose owners are gone");
                actions::delete_seen(&self.kube, rt, &current, Some(policy)).await
            }
        }
    }

    /// Moves an owner being deleted on: orphans or deletes its dependents,
    /// and removes its garbage-collector finalizer once done.
    #[tracing::instrument(level = "debug", skip(self, cache), fields(resource = self.types[i].plural))]
    async fn owner(&mut self, cache: &WatchCache, i: usize, key: &str) -> Result<(), KubeError> {
        let rt = self.types[i];
        let Some(seen) = lookup(cache, rt, key) else {
            return Ok(());
        };
        // The owner index must know every dependent created before the
        // state acted on: the owner's state may be newer than the events
        // followed so far (it is read from the cache as it is now), and a
        // dependent missing from the index would be neither orphaned nor
        // waited for.
        self.catch_up(cache, seen.revision).await;
        let Some(current) = lookup(cache, rt, key) else {
            return Ok(());
        };
        let current_value = current.to_value();
        let Some(obj) = as_map(&current_value) else {
            return Ok(());
        };
        let uid = obj
            .get("metadata")
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let dependents: Vec<(usize, Arc<CachedObject>)> = self
            .index
            .dependents(&uid)
            .into_iter()
            .filter_map(|(j, k)| lookup(cache, self.types[j], &k).map(|o| (j, o)))
            .collect();
        let values: Vec<Value> = dependents.iter().map(|(_, o)| o.to_value()).collect();
        match gc::owner_step(obj, &uid, &values) {
            gc::OwnerStep::Nothing => Ok(()),
            gc::OwnerStep::Orphan => {
                for (j, dep) in &dependents {
                    actions::drop_owner_refs(
                        &self.kube,
                        self.types[*j],
                        dep,
                        std::slice::from_ref(&uid),
                    )
                    .await?;
                }
                tracing::info!(key, orphaned = dependents.len(), "dependents orphaned");
                actions::remove_finalizer(&self.kube, rt, &current, FINALIZER_ORPHAN).await
            }
            gc::OwnerStep::Foreground { blocking } => {
                for (j, dep) in dependents {
                    self.enqueue(Work::Dependent(j, dep.key.to_string()));
                }
                if blocking == 0 {
                    tracing::info!(key, "no blocking dependents left: foreground deletion ends");
                    actions::remove_finalizer(&self.kube, rt, &current, FINALIZER_FOREGROUND).await
                } else {
                    tracing::debug!(key, blocking, "waiting for blocking dependents");
                    Ok(())
                }
            }
        }
    }
}

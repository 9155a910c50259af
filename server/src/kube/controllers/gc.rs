//! The garbage collector's decisions, pure, and its index of owners.
//!
//! As kube's garbage collector (`pkg/controller/garbagecollector`):
//!
//! - a dependent is an object with `metadata.ownerReferences`; each
//!   reference names its owner by kind, name and uid, resolved in the
//!   dependent's namespace for a namespaced owner type;
//! - an owner is *absent* when no object of that kind and name exists, or
//!   one exists with another uid (a uid is never reused, so absence is
//!   final); *waiting* when it is being deleted with the
//!   `foregroundDeletion` finalizer; otherwise *solid* (an owner of a kind
//!   not served is taken as solid: it cannot be checked);
//! - a dependent with a solid owner stays, and loses its references to
//!   absent and waiting owners; one without is deleted: in the foreground
//!   when a waiting owner waits for it and it has dependents of its own,
//!   else as its own finalizers say (background by default);
//! - an owner being deleted with the `orphan` finalizer has its
//!   references removed from its dependents, then the finalizer; one with
//!   `foregroundDeletion` has its dependents deleted, and loses the
//!   finalizer once no dependent with `blockOwnerDeletion` remains.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use crate::kube::deletion::{self, FINALIZER_FOREGROUND, FINALIZER_ORPHAN};
use crate::kube::options::Propagation;
use crate::kube::resources::ResourceType;

/// One `metadata.ownerReferences` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub block_owner_deletion: bool,
}

/// The owner references of an object (entries without a uid, name or
/// kind are skipped: they name nothing the collector can check).
pub fn owner_refs(obj: &Value) -> Vec<OwnerRef> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let s = |f: &str| r.get(f).and_then(Value::as_str).map(str::to_string);
                    Some(OwnerRef {
                        api_version: s("apiVersion").unwrap_or_default(),
                        kind: s("kind")?,
                        name: s("name")?,
                        uid: s("uid").filter(|u| !u.is_empty())?,
                        block_owner_deletion: r
                            .get("blockOwnerDeletion")
                            .and_then(Value::as_bool)
                            .unwrap_or(false),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The served type an owner reference names (by group and kind), and the
/// key its owner has for a dependent in `dependent_ns`; `None` when the
/// kind is not served or a namespaced owner is named from a
/// cluster-scoped dependent.
pub fn owner_key(
    types: &[&'static ResourceType],
    r: &OwnerRef,
    dependent_ns: Option<&str>,
) -> Option<(usize, String)> {
    let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let i = types
        .iter()
        .position(|rt| rt.group == group && rt.kind == r.kind)?;
    let rt = types[i];
    if rt.namespaced {
        Some((i, rt.key(Some(dependent_ns?), &r.name)))
    } else {
        Some((i, rt.key(None, &r.name)))
    }
}

/// What the collector finds behind an owner reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    Absent,
    Waiting,
    Solid,
}

/// The state of the owner a reference names, given what (if anything)
/// is stored under its key.
pub fn owner_state(r: &OwnerRef, found: Option<&Value>) -> OwnerState {
    let Some(Value::Object(owner)) = found else {
        return OwnerState::Absent;
    };
    let uid = owner
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .and_then(Value::as_str);
    if uid != Some(r.uid.as_str()) {
        return OwnerState::Absent;
    }
    if deletion::is_being_deleted(owner)
        && deletion::finalizers(owner)
            .iter()
            .any(|f| f == FINALIZER_FOREGROUND)
    {
        OwnerState::Waiting
    } else {
        OwnerState::Solid
    }
}

/// What the collector does with a dependent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// Keep it, without its references to these owner uids.
    DropRefs(Vec<String>),
    /// Delete it with this policy.
    Delete(Propagation),
}

/// The verdict on `dependent`, given the state behind each of its
/// references (`None`: a kind the collector cannot check) and whether it
/// has dependents of its own.
pub fn verdict(
    dependent: &Map<String, Value>,
    owners: &[(OwnerRef, Option<OwnerState>)],
    has_dependents: bool,
) -> Verdict {
    if owners.is_empty() || deletion::is_being_deleted(dependent) {
        return Verdict::Keep;
    }
    let uids = |want: OwnerState| -> Vec<String> {
        owners
            .iter()
            .filter(|(_, s)| *s == Some(want))
            .map(|(r, _)| r.uid.clone())
            .collect()
    };
    let solid = owners
        .iter()
        .any(|(_, s)| matches!(s, None | Some(OwnerState::Solid)));
    let waiting = uids(OwnerState::Waiting);
    if solid {
        let mut drop = uids(OwnerState::Absent);
        drop.extend(waiting);
        return if drop.is_empty() {
            Verdict::Keep
        } else {
            Verdict::DropRefs(drop)
        };
    }
    if !waiting.is_empty() && has_dependents {
        return Verdict::Delete(Propagation::Foreground);
    }
    let own = deletion::finalizers(dependent);
    if own.iter().any(|f| f == FINALIZER_ORPHAN) {
        Verdict::Delete(Propagation::Orphan)
    } else if own.iter().any(|f| f == FINALIZER_FOREGROUND) {
        Verdict::Delete(Propagation::Foreground)
    } else {
        Verdict::Delete(Propagation::Background)
    }
}

/// What the collector does for an owner being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerStep {
    Nothing,
    /// Remove the references to it from these dependents, then its
    /// `orphan` finalizer.
    Orphan,
    /// Its dependents are to be deleted; it waits while `blocking` of
    /// them (with `blockOwnerDeletion`) remain.
    Foreground {
        blocking: usize,
    },
}

/// The step for `owner` (uid `uid`) given its current dependents.
pub fn owner_step(owner: &Map<String, Value>, uid: &str, dependents: &[Value]) -> OwnerStep {
    if !deletion::is_being_deleted(owner) {
        return OwnerStep::Nothing;
    }
    let finalizers = deletion::finalizers(owner);
    if finalizers.iter().any(|f| f == FINALIZER_ORPHAN) {
        return OwnerStep::Orphan;
    }
    if finalizers.iter().any(|f| f == FINALIZER_FOREGROUND) {
        let blocking = dependents
            .iter()
            .filter(|d| {
                owner_refs(d)
                    .iter()
                    .any(|r| r.uid == uid && r.block_owner_deletion)
            })
            .count();
        return OwnerStep::Foreground { blocking };
    }
    OwnerStep::Nothing
}

/// Which objects name which owners: owner uid → dependents (by type index
/// and key), kept from the current state of each changed object.
#[derive(Debug, Default)]
pub struct OwnerIndex {
    by_owner: HashMap<String, BTreeSet<(usize, String)>>,
    by_dependent: HashMap<(usize, String), Vec<String>>,
}

impl OwnerIndex {
    /// Records the current state of one object (`None`: it is gone).
    pub fn refresh(&mut self, rt: usize, key: &str, current: Option<&Value>) {
        let id = (rt, key.to_string());
        if let Some(old) = self.by_dependent.remove(&id) {
            for uid in old {
                if let Some(set) = self.by_owner.get_mut(&uid) {
                    set.remove(&id);
                    if set.is_empty() {
                        self.by_owner.remove(&uid);
                    }
                }
            }
        }
        let uids: Vec<String> = current
            .map(owner_refs)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.uid)
            .collect();
        if uids.is_empty() {
            return;
        }
        for uid in &uids {
            self.by_owner
                .entry(uid.clone())
                .or_default()
                .insert(id.clone());
        }
        self.by_dependent.insert(id, uids);
    }

    /// The objects that name `uid` as an owner.
    pub fn dependents(&self, uid: &str) -> Vec<(usize, String)> {
        self.by_owner
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn has_dependents(&self, uid: &str) -> bool {
        self.by_owner.contains_key(uid)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object"),
        }
    }

    fn owned_by(uids: &[(&str, bool)]) -> Value {
        let refs: Vec<Value> = uids
            .iter()
            .map(|(uid, block)| {
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": format!("o-{uid}"),
                       "uid": uid, "blockOwnerDeletion": block})
            })
            .collect();
        json!({"metadata": {"name": "d", "namespace": "n", "ownerReferences": refs}})
    }

    #[test]
    fn references_resolve_in_the_dependents_namespace_or_cluster_wide() {
        let builtin: Vec<_> = crate::kube::resources::TypeSet::builtin().iter().collect();
        let d = owned_by(&[("u1", false)]);
        let refs = owner_refs(&d);
        let (i, key) = owner_key(&builtin, &refs[0], Some("n")).expect("configmaps are served");
        assert_eq!(builtin[i].plural, "configmaps");
        assert_eq!(key, "/registry/configmaps/n/o-u1");
        let node = OwnerRef {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: "n1".into(),
            uid: "u".into(),
            block_owner_deletion: false,
        };
        assert_eq!(
            owner_key(&builtin, &node, Some("n"))
                .map(|k| k.1)
                .as_deref(),
            Some("/registry/minions/n1")
        );
        let dep = OwnerRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            ..node.clone()
        };
        assert_eq!(
            owner_key(&builtin, &dep, None),
            None,
            "a namespaced owner needs a namespace"
        );
        let unknown = OwnerRef {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            ..node
        };
        assert_eq!(owner_key(&builtin, &unknown, Some("n")), None);
    }

    #[test]
    fn an_owner_is_absent_when_gone_or_replaced_and_waiting_in_foreground() {
        let r = &owner_refs(&owned_by(&[("u1", false)]))[0];
        assert_eq!(owner_state(r, None), OwnerState::Absent);
        let other = json!({"metadata": {"uid": "u2"}});
        assert_eq!(
            owner_state(r, Some(&other)),
            OwnerState::Absent,
            "same name, new uid"
        );
        let live = json!({"metadata": {"uid": "u1"}});
        assert_eq!(owner_state(r, Some(&live)), OwnerState::Solid);
        let fg = json!({"metadata": {"uid": "u1", "deletionTimestamp": "t", "finalizers": ["foregroundDeletion"]}});
        assert_eq!(owner_state(r, Some(&fg)), OwnerState::Waiting);
    }

    #[test]
    fn a_dependent_goes_with_its_last_owner_and_stays_with_a_solid_one() {
        let d = obj(owned_by(&[("u1", false), ("u2", false)]));
        let refs = owner_refs(&Value::Object(d.clone()));
        let with = |a: OwnerState, b: OwnerState| {
            vec![(refs[0].clone(), Some(a)), (refs[1].clone(), Some(b))]
        };
        assert_eq!(
            verdict(&d, &with(OwnerState::Solid, OwnerState::Solid), false),
            Verdict::Keep
        );
        assert_eq!(
            verdict(&d, &with(OwnerState::Solid, OwnerState::Absent), false),
            Verdict::DropRefs(vec!["u2".into()])
        );
        assert_eq!(
            verdict(&d, &with(OwnerState::Absent, OwnerState::Absent), false),
            Verdict::Delete(Propagation::Background)
        );
        assert_eq!(
            verdict(&d, &with(OwnerState::Waiting, OwnerState::Absent), true),
            Verdict::Delete(Propagation::Foreground),
            "a dependent with dependents of its own goes in the foreground"
        );
        // An owner the collector cannot check keeps the dependent.
        let unknown = vec![
            (refs[0].clone(), None),
            (refs[1].clone(), Some(OwnerState::Absent)),
        ];
        assert_eq!(
            verdict(&d, &unknown, false),
            Verdict::DropRefs(vec!["u2".into()])
        );
        // A dependent already being deleted is left to its own finalizers.
        let mut going = d.clone();
        going["metadata"]["deletionTimestamp"] = json!("t");
        assert_eq!(
            verdict(&going, &with(OwnerState::Absent, OwnerState::Absent), false),
            Verdict::Keep
        );
    }

    #[test]
    fn a_foreground_owner_waits_for_blocking_dependents_only() {
        let owner = obj(json!({"metadata": {"uid": "u1", "deletionTimestamp": "t",
            "finalizers": ["foregroundDeletion"]}}));
        let blocking = owned_by(&[("u1", true)]);
        let loose = owned_by(&[("u1", false)]);
        assert_eq!(
            owner_step(&owner, "u1", &[blocking, loose.clone()]),
            OwnerStep::Foreground { blocking: 1 }
        );
        assert_eq!(
            owner_step(&owner, "u1", &[loose]),
            OwnerStep::Foreground { blocking: 0 }
        );
        let orphaning = obj(json!({"metadata": {"uid": "u1", "deletionTimestamp": "t",
            "finalizers": ["orphan"]}}));
        assert_eq!(owner_step(&orphaning, "u1", &[]), OwnerStep::Orphan);
        let live = obj(json!({"metadata": {"uid": "u1", "finalizers": ["orphan"]}}));
        assert_eq!(owner_step(&live, "u1", &[]), OwnerStep::Nothing);
    }

    #[test]
    fn the_index_follows_the_current_state_of_each_dependent() {
        let mut index = OwnerIndex::default();
        index.refresh(1, "k", Some(&owned_by(&[("u1", false), ("u2", false)])));
        assert_eq!(index.dependents("u1"), vec![(1, "k".to_string())]);
        index.refresh(1, "k", Some(&owned_by(&[("u2", false)])));
        assert!(index.dependents("u1").is_empty());
        assert!(index.has_dependents("u2"));
        index.refresh(1, "k", None);
        assert!(!index.has_dependents("u2"));
    }
}

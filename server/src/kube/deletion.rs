//! Deletion decisions, pure: what a DELETE does to the stored object
//! given its finalizers and the request's options, what an update of an
//! object being deleted may do, and what the first DELETE of a namespace
//! does. The store runs each decision inside its guarded read-modify-write
//! (so it is made on the state the write is guarded by); the controllers
//! (`kube::controllers`) finish what a decision leaves pending.
//!
//! The rules are kube-apiserver's (`registry/generic/registry/store.go`,
//! the namespace storage), for types that delete without a grace period:
//!
//! - the preconditions (uid, resourceVersion) are checked first: `409`;
//! - the propagation policy becomes finalizers: `Orphan` adds `orphan`,
//!   `Foreground` adds `foregroundDeletion`, `Background` neither (and an
//!   explicit policy drops the other one); without a policy the object's
//!   own finalizers decide and the default is `Background`;
//! - no finalizer left: the object is deleted now; otherwise it is kept
//!   with `deletionTimestamp` (set once) and `deletionGracePeriodSeconds:
//!   0`, its `generation` bumped when it has one, and a later DELETE only
//!   updates its finalizers;
//! - an update of an object being deleted may not add finalizers (`422`),
//!   and the one that removes the last finalizer deletes it;
//! - a namespace's first DELETE sets `deletionTimestamp` and the phase
//!   `Terminating` and keeps it; once its `spec.finalizers` (the namespace
//!   controller's `kubernetes`) and `metadata.finalizers` are empty, a
//!   DELETE removes it.

use serde_json::{json, Map, Value};

use crate::kube::error::{FieldCause, KubeError};
use crate::kube::object::metadata_mut;
use crate::kube::options::{DeleteOptions, Preconditions, Propagation};
use crate::kube::resources::ResourceType;

/// The garbage collector orphans the dependents, then removes it.
pub const FINALIZER_ORPHAN: &str = "orphan";
/// The garbage collector deletes the blocking dependents, then removes it.
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";
/// In a namespace's `spec.finalizers`: the namespace controller deletes
/// its contents, then removes it.
pub const FINALIZER_NAMESPACE: &str = "kubernetes";

/// What a DELETE does to the stored object.
#[derive(Debug, Clone, PartialEq)]
pub enum DeletePlan {
    /// Remove the key now.
    Delete,
    /// Keep the object, written as this (being deleted, finalizers set).
    Mark(Map<String, Value>),
    /// Already being deleted and nothing changes: answer it as it is.
    Pending,
}

/// The finalizers of an object (`metadata.finalizers`).
pub fn finalizers(obj: &Map<String, Value>) -> Vec<String> {
    string_list(obj.get("metadata").and_then(|m| m.get("finalizers")))
}

/// A namespace's `spec.finalizers`.
pub fn namespace_finalizers(obj: &Map<String, Value>) -> Vec<String> {
    string_list(obj.get("spec").and_then(|s| s.get("finalizers")))
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the object has been asked to go (`deletionTimestamp` set).
pub fn is_being_deleted(obj: &Map<String, Value>) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|t| !t.is_null())
}

/// Whether a stored namespace is terminating: creates in it are refused.
pub fn is_terminating(ns: &Map<String, Value>) -> bool {
    is_being_deleted(ns)
        || ns
            .get("status")
            .and_then(|s| s.get("phase"))
            .and_then(Value::as_str)
            == Some("Terminating")
}

/// Checks a delete's preconditions against the stored object at
/// `revision`, with kube's message on a mismatch (`409`).
pub fn check_preconditions(
    rt: &ResourceType,
    name: &str,
    stored: &Map<String, Value>,
    revision: u64,
    pre: &Preconditions,
) -> Result<(), KubeError> {
    let conflict = |detail: String| KubeError::Conflict {
        resource: rt.group_resource(),
        name: name.to_string(),
        detail,
    };
    if let Some(uid) = &pre.uid {
        let actual = stored
            .get("metadata")
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if actual != uid {
            return Err(conflict(format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
            )));
        }
    }
    if let Some(rv) = pre.resource_version {
        if rv != revision {
            return Err(conflict(format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {revision}"
            )));
        }
    }
    Ok(())
}

/// The finalizers a delete leaves on an object: its own, with `orphan`
/// and `foregroundDeletion` as the options (or, without a policy, the
/// object itself) say.
fn finalizers_after_delete(current: &[String], opts: &DeleteOptions) -> Vec<String> {
    let has = |f: &str| current.iter().any(|c| c == f);
    let orphan = match (opts.orphan_dependents, opts.propagation) {
        (Some(o), _) => o,
        (None, Some(p)) => p == Propagation::Orphan,
        (None, None) => has(FINALIZER_ORPHAN) && !has(FINALIZER_FOREGROUND),
    };
    let foreground = match (opts.orphan_dependents, opts.propagation) {
        (Some(_), _) => false,
        (None, Some(p)) => p == Propagation::Foreground,
        (None, None) => has(FINALIZER_FOREGROUND),
    };
    let mut out: Vec<String> = current
        .iter()
        .filter(|f| *f != FINALIZER_ORPHAN && *f != FINALIZER_FOREGROUND)
        .cloned()
        .collect();
    if orphan {
        out.push(FINALIZER_ORPHAN.into());
    }
    if foreground {
        out.push(FINALIZER_FOREGROUND.into());
    }
    out
}

/// What a DELETE with `opts` does to `stored` (any type but namespaces),
/// at `now` (RFC 3339). Preconditions are checked apart
/// ([`check_preconditions`]).
pub fn plan_delete(stored: &Map<String, Value>, opts: &DeleteOptions, now: &str) -> DeletePlan {
    let current = finalizers(stored);
    let after = finalizers_after_delete(&current, opts);
    if after.is_empty() {
        return DeletePlan::Delete;
    }
    let same_set = {
        let mut a = current.clone();
        let mut b = after.clone();
        a.sort();
        b.sort();
        a == b
    };
    let deleting = is_being_deleted(stored);
    if deleting && same_set {
        return DeletePlan::Pending;
    }
    let mut marked = stored.clone();
    let meta = metadata_mut(&mut marked);
    if !same_set {
        meta.insert("finalizers".into(), json!(after));
    }
    if !deleting {
        if let Some(generation) = meta.get("generation").and_then(Value::as_i64) {
            if generation > 0 {
                meta.insert("generation".into(), json!(generation.saturating_add(1)));
            }
        }
        meta.insert("deletionTimestamp".into(), json!(now));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    }
    DeletePlan::Mark(marked)
}

/// What a DELETE does to a stored namespace at `now`: the first marks it
/// terminating; once its finalizers are gone, one removes it.
pub fn plan_namespace_delete(stored: &Map<String, Value>, now: &str) -> DeletePlan {
    if !is_being_deleted(stored) {
        let mut marked = stored.clone();
        metadata_mut(&mut marked).insert("deletionTimestamp".into(), json!(now));
        let status = marked.entry("status").or_insert_with(|| json!({}));
        if !status.is_object() {
            *status = json!({});
        }
        status["phase"] = json!("Terminating");
        return DeletePlan::Mark(marked);
    }
    if namespace_finalizers(stored).is_empty() && finalizers(stored).is_empty() {
        DeletePlan::Delete
    } else {
        DeletePlan::Pending
    }
}

/// What an update does once admitted: write the object, or delete it
/// because it removed the last finalizer of an object being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateEffect {
    Write,
    Delete,
}

/// Checks an admitted update `new` of the stored `old` against the
/// deletion rules: an object being deleted may not gain finalizers
/// (`422`, kube's wording), and losing its last one deletes it.
pub fn check_update(
    rt: &ResourceType,
    name: &str,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Result<UpdateEffect, KubeError> {
    if !is_being_deleted(old) {
        return Ok(UpdateEffect::Write);
    }
    let before = finalizers(old);
    let after = finalizers(new);
    let mut added: Vec<&str> = after
        .iter()
        .filter(|f| !before.contains(f))
        .map(String::as_str)
        .collect();
    added.sort_unstable();
    added.dedup();
    if !added.is_empty() {
        let quoted: Vec<String> = added.iter().map(|f| json!(f).to_string()).collect();
        return Err(KubeError::invalid(
            rt,
            name,
            vec![FieldCause::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    quoted.join(", ")
                ),
            )],
        ));
    }
    let still_held =
        !after.is_empty() || (rt.plural == "namespaces" && !namespace_finalizers(new).is_empty());
    let grace = old
        .get("metadata")
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if still_held || grace != 0 {
        Ok(UpdateEffect::Write)
    } else {
        Ok(UpdateEffect::Delete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    const NOW: &str = "2026-01-01T00:00:00Z";

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object"),
        }
    }

    fn with_policy(p: Propagation) -> DeleteOptions {
        DeleteOptions {
            propagation: Some(p),
            ..DeleteOptions::default()
        }
    }

    fn configmaps() -> &'static ResourceType {
        resources::find("", "v1", "configmaps").expect("configmaps")
    }

    #[test]
    fn without_finalizers_a_background_delete_deletes_now() {
        let plain = obj(json!({"metadata": {"name": "a"}}));
        assert_eq!(
            plan_delete(&plain, &DeleteOptions::default(), NOW),
            DeletePlan::Delete
        );
        assert_eq!(
            plan_delete(&plain, &with_policy(Propagation::Background), NOW),
            DeletePlan::Delete
        );
    }

    #[test]
    fn finalizers_keep_the_object_marked_once_with_a_zero_grace_period() {
        let held = obj(json!({"metadata": {"name": "a", "finalizers": ["x/y"], "generation": 3}}));
        let DeletePlan::Mark(marked) = plan_delete(&held, &DeleteOptions::default(), NOW) else {
            panic!("kept while a finalizer remains");
        };
        assert_eq!(marked["metadata"]["deletionTimestamp"], NOW);
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(marked["metadata"]["finalizers"], json!(["x/y"]));
        assert_eq!(
            marked["metadata"]["generation"], 4,
            "kube bumps a generation"
        );
        // A second DELETE changes nothing: the timestamp stays the first one.
        assert_eq!(
            plan_delete(&marked, &DeleteOptions::default(), "2030-01-01T00:00:00Z"),
            DeletePlan::Pending
        );
    }

    #[test]
    fn the_propagation_policy_becomes_the_garbage_collectors_finalizers() {
        let plain = obj(json!({"metadata": {"name": "a"}}));
        let DeletePlan::Mark(orphan) = plan_delete(&plain, &with_policy(Propagation::Orphan), NOW)
        else {
            panic!("orphan waits for the garbage collector");
        };
        assert_eq!(orphan["metadata"]["finalizers"], json!(["orphan"]));
        let DeletePlan::Mark(fg) = plan_delete(&plain, &with_policy(Propagation::Foreground), NOW)
        else {
            panic!("foreground waits for the dependents");
        };
        assert_eq!(fg["metadata"]["finalizers"], json!(["foregroundDeletion"]));
        // The deprecated orphanDependents=true is Orphan.
        let legacy = DeleteOptions {
            orphan_dependents: Some(true),
            ..DeleteOptions::default()
        };
        assert!(matches!(
            plan_delete(&plain, &legacy, NOW),
            DeletePlan::Mark(_)
        ));
        // Without a policy the object's own finalizer decides; an explicit
        // Background drops it, and with nothing left the object goes now.
        assert_eq!(
            plan_delete(&orphan, &DeleteOptions::default(), NOW),
            DeletePlan::Pending
        );
        assert_eq!(
            plan_delete(&orphan, &with_policy(Propagation::Background), NOW),
            DeletePlan::Delete
        );
        // A second DELETE may switch an orphaning delete to foreground.
        let DeletePlan::Mark(switched) =
            plan_delete(&orphan, &with_policy(Propagation::Foreground), NOW)
        else {
            panic!("the finalizers change");
        };
        assert_eq!(
            switched["metadata"]["finalizers"],
            json!(["foregroundDeletion"])
        );
    }

    #[test]
    fn preconditions_are_kubes_conflicts() {
        let rt = configmaps();
        let stored = obj(json!({"metadata": {"name": "a", "uid": "u1"}}));
        let ok = Preconditions {
            uid: Some("u1".into()),
            resource_version: Some(7),
        };
        assert!(check_preconditions(rt, "a", &stored, 7, &ok).is_ok());
        match check_preconditions(rt, "a", &stored, 8, &ok) {
            Err(KubeError::Conflict { detail, .. }) => assert_eq!(
                detail,
                "Precondition failed: ResourceVersion in precondition: 7, ResourceVersion in object meta: 8"
            ),
            other => panic!("expected 409, got {other:?}"),
        }
        let wrong = Preconditions {
            uid: Some("u2".into()),
            resource_version: None,
        };
        match check_preconditions(rt, "a", &stored, 7, &wrong) {
            Err(KubeError::Conflict { detail, .. }) => assert_eq!(
                detail,
                "Precondition failed: UID in precondition: u2, UID in object meta: u1"
            ),
            other => panic!("expected 409, got {other:?}"),
        }
    }

    #[test]
    fn an_object_being_deleted_gains_no_finalizer_and_goes_with_its_last() {
        let rt = configmaps();
        let old = obj(
            json!({"metadata": {"name": "a", "finalizers": ["a/b", "c/d"],
            "deletionTimestamp": NOW, "deletionGracePeriodSeconds": 0}}),
        );
        let more = obj(json!({"metadata": {"name": "a", "finalizers": ["a/b", "e/f"]}}));
        match check_update(rt, "a", &old, &more) {
            Err(KubeError::Invalid { causes, .. }) => {
                assert_eq!(causes[0].field, "metadata.finalizers");
                assert_eq!(
                    causes[0].message,
                    r#"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"e/f"}"#
                );
            }
            other => panic!("expected 422, got {other:?}"),
        }
        let fewer = obj(json!({"metadata": {"name": "a", "finalizers": ["c/d"]}}));
        assert_eq!(
            check_update(rt, "a", &old, &fewer).ok(),
            Some(UpdateEffect::Write)
        );
        let none = obj(json!({"metadata": {"name": "a", "finalizers": []}}));
        assert_eq!(
            check_update(rt, "a", &old, &none).ok(),
            Some(UpdateEffect::Delete)
        );
        // Not being deleted: finalizers come and go freely.
        let live = obj(json!({"metadata": {"name": "a"}}));
        assert_eq!(
            check_update(rt, "a", &live, &more).ok(),
            Some(UpdateEffect::Write)
        );
    }

    #[test]
    fn a_namespace_terminates_first_and_goes_once_its_finalizers_are_gone() {
        let active = obj(json!({"metadata": {"name": "team"},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}));
        let DeletePlan::Mark(terminating) = plan_namespace_delete(&active, NOW) else {
            panic!("the first DELETE marks it");
        };
        assert_eq!(terminating["status"]["phase"], "Terminating");
        assert_eq!(terminating["metadata"]["deletionTimestamp"], NOW);
        assert!(is_terminating(&terminating));
        assert_eq!(
            plan_namespace_delete(&terminating, NOW),
            DeletePlan::Pending
        );
        let mut finalized = terminating.clone();
        finalized["spec"]["finalizers"] = json!([]);
        assert_eq!(plan_namespace_delete(&finalized, NOW), DeletePlan::Delete);
    }
}

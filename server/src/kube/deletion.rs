//! Deletion decisions, pure: what a DELETE does to the stored object
//! given its finalizers and the request's options, what an update of an
//! object being deleted may do, and what the first DELETE of a namespace
//! does. The store runs each decision inside its guarded read-modify-write
//! (so it is made on the state the write is guarded by); the controllers
//! (`kube::controllers`) finish what a decision leaves pending.
//!
//! The rules are kube-apiserver's (`registry/generic/registry/store.go`,
//! `registry/rest/delete.go`, the pod and namespace storage):
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
//! - pods delete gracefully ([`pod_grace_period`]): a scheduled pod that
//!   has not terminated is kept with `deletionTimestamp` = now + its grace
//!   period (the request's `gracePeriodSeconds`, else its
//!   `spec.terminationGracePeriodSeconds`) and that period in
//!   `deletionGracePeriodSeconds`, for its kubelet to stop it and delete
//!   it with a grace period of 0; a later DELETE may only shorten the
//!   period (to 0: the pod goes now unless finalizers hold it), any other
//!   is answered with the pod as it is;
//! - an update of an object being deleted may not add finalizers (`422`),
//!   and the one that removes the last finalizer deletes it;
//! - a namespace's first DELETE sets `deletionTimestamp` and the phase
//!   `Terminating` and keeps it; once its `spec.finalizers` (the namespace
//!   controller's `kubernetes`) and `metadata.finalizers` are empty, a
//!   DELETE removes it.

use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Map, Value};

use crate::kube::error::{FieldCause, KubeError};
use crate::kube::object::{self, metadata_mut};
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

/// The grace period a DELETE with `opts` gives `stored`, for the types
/// that delete gracefully (pods: kube's `podStrategy.CheckGracefulDelete`);
/// `None` for every other type. An unscheduled pod, or one that has
/// terminated, gets 0; a negative period is 1 s, as kube treats it.
pub fn pod_grace_period(
    rt: &ResourceType,
    stored: &Map<String, Value>,
    opts: &DeleteOptions,
) -> Option<i64> {
    if !(rt.group.is_empty() && rt.plural == "pods") {
        return None;
    }
    let spec = stored.get("spec");
    let mut period = opts
        .grace_period_seconds
        .or_else(|| {
            spec.and_then(|s| s.get("terminationGracePeriodSeconds"))
                .and_then(Value::as_i64)
        })
        .unwrap_or(0);
    let scheduled = spec
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = stored
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str);
    if !scheduled || matches!(phase, Some("Succeeded" | "Failed")) {
        period = 0;
    }
    Some(if period < 0 { 1 } else { period })
}

/// The grace period an object being deleted was given
/// (`deletionGracePeriodSeconds`; 0 when absent).
pub fn deletion_grace_period(obj: &Map<String, Value>) -> i64 {
    obj.get("metadata")
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// When an object being deleted is due to go (`deletionTimestamp`), if it
/// is one and the timestamp parses.
pub fn deletion_deadline(obj: &Map<String, Value>) -> Option<DateTime<Utc>> {
    let ts = obj
        .get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .and_then(Value::as_str)?;
    DateTime::parse_from_rfc3339(ts)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// What a DELETE with `opts` does to `stored` (any type but namespaces),
/// at `now`. Preconditions are checked apart ([`check_preconditions`]).
pub fn plan_delete(
    rt: &ResourceType,
    stored: &Map<String, Value>,
    opts: &DeleteOptions,
    now: DateTime<Utc>,
) -> DeletePlan {
    let graceful = pod_grace_period(rt, stored, opts);
    let deleting = is_being_deleted(stored);
    let pending_grace = deletion_grace_period(stored);
    if deleting && graceful.is_some() && pending_grace > 0 {
        return shorten_grace_period(stored, opts, pending_grace, now);
    }
    match graceful {
        Some(period) if period > 0 && !deleting => {
            let mut marked = stored.clone();
            let after = finalizers_after_delete(&finalizers(stored), opts);
            let meta = metadata_mut(&mut marked);
            set_finalizers(meta, after);
            bump_generation(meta);
            meta.insert(
                "deletionTimestamp".into(),
                json!(object::format_time(plus_seconds(now, period))),
            );
            meta.insert("deletionGracePeriodSeconds".into(), json!(period));
            DeletePlan::Mark(marked)
        }
        _ => plan_finalized_delete(stored, opts, now),
    }
}

/// A DELETE of a pod already in its grace period: only a shorter period
/// changes anything (the deadline moves back by the difference, not
/// before now); 0 deletes it unless finalizers hold it.
fn shorten_grace_period(
    stored: &Map<String, Value>,
    opts: &DeleteOptions,
    pending: i64,
    now: DateTime<Utc>,
) -> DeletePlan {
    let Some(mut period) = opts.grace_period_seconds.map(|p| p.max(0)) else {
        return DeletePlan::Pending;
    };
    if period >= pending {
        return DeletePlan::Pending;
    }
    let after = finalizers_after_delete(&finalizers(stored), opts);
    if period == 0 && after.is_empty() {
        return DeletePlan::Delete;
    }
    let started = deletion_deadline(stored).unwrap_or(now);
    let mut deadline = plus_seconds(plus_seconds(started, pending.saturating_neg()), period);
    if deadline < now {
        deadline = now;
        if period != 0 {
            // The whole period has passed: still graceful, as short as
            // it gets, and the kubelet makes the final delete.
            period = 1;
        }
    }
    let mut marked = stored.clone();
    let meta = metadata_mut(&mut marked);
    set_finalizers(meta, after);
    meta.insert(
        "deletionTimestamp".into(),
        json!(object::format_time(deadline)),
    );
    meta.insert("deletionGracePeriodSeconds".into(), json!(period));
    DeletePlan::Mark(marked)
}

/// `t` moved by `seconds`, kept within the years RFC 3339 can write
/// (0001 to 9999): a client's grace period can be any 64-bit number.
fn plus_seconds(t: DateTime<Utc>, seconds: i64) -> DateTime<Utc> {
    let bound = |year: i32, end: bool| {
        let (month, day, h, m, sec) = if end {
            (12, 31, 23, 59, 59)
        } else {
            (1, 1, 0, 0, 0)
        };
        chrono::NaiveDate::from_ymd_opt(year, month, day)
            .and_then(|d| d.and_hms_opt(h, m, sec))
            .map(|n| n.and_utc())
    };
    let (Some(first), Some(last)) = (bound(1, false), bound(9999, true)) else {
        return t;
    };
    let moved = Duration::try_seconds(seconds).and_then(|d| t.checked_add_signed(d));
    match moved {
        Some(m) => m.clamp(first, last),
        None if seconds < 0 => first,
        None => last,
    }
}

fn set_finalizers(meta: &mut Map<String, Value>, finalizers: Vec<String>) {
    if finalizers.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), json!(finalizers));
    }
}

/// Kube bumps a positive generation when deletion starts.
fn bump_generation(meta: &mut Map<String, Value>) {
    if let Some(generation) = meta.get("generation").and_then(Value::as_i64) {
        if generation > 0 {
            meta.insert("generation".into(), json!(generation.saturating_add(1)));
        }
    }
}

/// A DELETE without a grace period: gone now, or held by finalizers.
fn plan_finalized_delete(
    stored: &Map<String, Value>,
    opts: &DeleteOptions,
    now: DateTime<Utc>,
) -> DeletePlan {
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
        bump_generation(meta);
        meta.insert("deletionTimestamp".into(), json!(object::format_time(now)));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    }
    DeletePlan::Mark(marked)
}

/// What a DELETE does to a stored namespace at `now`: the first marks it
/// terminating; once its finalizers are gone, one removes it.
pub fn plan_namespace_delete(stored: &Map<String, Value>, now: DateTime<Utc>) -> DeletePlan {
    if !is_being_deleted(stored) {
        let mut marked = stored.clone();
        metadata_mut(&mut marked)
            .insert("deletionTimestamp".into(), json!(object::format_time(now)));
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

    fn at(ts: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(ts)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(|e| panic!("{ts}: {e}"))
    }

    fn now() -> DateTime<Utc> {
        at(NOW)
    }

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
            plan_delete(configmaps(), &plain, &DeleteOptions::default(), now()),
            DeletePlan::Delete
        );
        assert_eq!(
            plan_delete(
                configmaps(),
                &plain,
                &with_policy(Propagation::Background),
                now()
            ),
            DeletePlan::Delete
        );
    }

    #[test]
    fn finalizers_keep_the_object_marked_once_with_a_zero_grace_period() {
        let held = obj(json!({"metadata": {"name": "a", "finalizers": ["x/y"], "generation": 3}}));
        let DeletePlan::Mark(marked) =
            plan_delete(configmaps(), &held, &DeleteOptions::default(), now())
        else {
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
            plan_delete(
                configmaps(),
                &marked,
                &DeleteOptions::default(),
                at("2030-01-01T00:00:00Z")
            ),
            DeletePlan::Pending
        );
    }

    #[test]
    fn the_propagation_policy_becomes_the_garbage_collectors_finalizers() {
        let plain = obj(json!({"metadata": {"name": "a"}}));
        let DeletePlan::Mark(orphan) = plan_delete(
            configmaps(),
            &plain,
            &with_policy(Propagation::Orphan),
            now(),
        ) else {
            panic!("orphan waits for the garbage collector");
        };
        assert_eq!(orphan["metadata"]["finalizers"], json!(["orphan"]));
        let DeletePlan::Mark(fg) = plan_delete(
            configmaps(),
            &plain,
            &with_policy(Propagation::Foreground),
            now(),
        ) else {
            panic!("foreground waits for the dependents");
        };
        assert_eq!(fg["metadata"]["finalizers"], json!(["foregroundDeletion"]));
        // The deprecated orphanDependents=true is Orphan.
        let legacy = DeleteOptions {
            orphan_dependents: Some(true),
            ..DeleteOptions::default()
        };
        assert!(matches!(
            plan_delete(configmaps(), &plain, &legacy, now()),
            DeletePlan::Mark(_)
        ));
        // Without a policy the object's own finalizer decides; an explicit
        // Background drops it, and with nothing left the object goes now.
        assert_eq!(
            plan_delete(configmaps(), &orphan, &DeleteOptions::default(), now()),
            DeletePlan::Pending
        );
        assert_eq!(
            plan_delete(
                configmaps(),
                &orphan,
                &with_policy(Propagation::Background),
                now()
            ),
            DeletePlan::Delete
        );
        // A second DELETE may switch an orphaning delete to foreground.
        let DeletePlan::Mark(switched) = plan_delete(
            configmaps(),
            &orphan,
            &with_policy(Propagation::Foreground),
            now(),
        ) else {
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
        let DeletePlan::Mark(terminating) = plan_namespace_delete(&active, now()) else {
            panic!("the first DELETE marks it");
        };
        assert_eq!(terminating["status"]["phase"], "Terminating");
        assert_eq!(terminating["metadata"]["deletionTimestamp"], NOW);
        assert!(is_terminating(&terminating));
        assert_eq!(
            plan_namespace_delete(&terminating, now()),
            DeletePlan::Pending
        );
        let mut finalized = terminating.clone();
        finalized["spec"]["finalizers"] = json!([]);
        assert_eq!(plan_namespace_delete(&finalized, now()), DeletePlan::Delete);
    }

    fn pods() -> &'static ResourceType {
        resources::find("", "v1", "pods").expect("pods")
    }

    fn pod(node: &str, phase: &str, grace: Option<i64>) -> Map<String, Value> {
        let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
        if !node.is_empty() {
            spec["nodeName"] = json!(node);
        }
        if let Some(g) = grace {
            spec["terminationGracePeriodSeconds"] = json!(g);
        }
        obj(
            json!({"metadata": {"name": "p", "generation": 1}, "spec": spec,
            "status": {"phase": phase}}),
        )
    }

    fn grace(seconds: i64) -> DeleteOptions {
        DeleteOptions {
            grace_period_seconds: Some(seconds),
            ..DeleteOptions::default()
        }
    }

    #[test]
    fn a_running_pod_on_a_node_is_kept_for_its_grace_period() {
        let running = pod("n1", "Running", Some(30));
        let DeletePlan::Mark(marked) =
            plan_delete(pods(), &running, &DeleteOptions::default(), now())
        else {
            panic!("a scheduled pod deletes gracefully");
        };
        assert_eq!(
            marked["metadata"]["deletionTimestamp"],
            "2026-01-01T00:00:30Z"
        );
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
        assert_eq!(marked["metadata"]["generation"], 2);
        // The request's period wins over the pod's.
        let DeletePlan::Mark(short) = plan_delete(pods(), &running, &grace(5), now()) else {
            panic!("still graceful");
        };
        assert_eq!(short["metadata"]["deletionGracePeriodSeconds"], 5);
        // A negative period is one second.
        let DeletePlan::Mark(negative) = plan_delete(pods(), &running, &grace(-3), now()) else {
            panic!("still graceful");
        };
        assert_eq!(negative["metadata"]["deletionGracePeriodSeconds"], 1);
        // Other types ignore a grace period.
        assert_eq!(
            plan_delete(configmaps(), &running, &grace(30), now()),
            DeletePlan::Delete
        );
    }

    #[test]
    fn an_unscheduled_or_finished_pod_or_a_zero_period_deletes_now() {
        for (p, opts) in [
            (pod("", "Pending", Some(30)), DeleteOptions::default()),
            (pod("n1", "Succeeded", Some(30)), DeleteOptions::default()),
            (pod("n1", "Failed", Some(30)), DeleteOptions::default()),
            (pod("n1", "Running", Some(30)), grace(0)),
            (pod("n1", "Running", None), DeleteOptions::default()),
        ] {
            assert_eq!(plan_delete(pods(), &p, &opts, now()), DeletePlan::Delete);
        }
        // A finalizer holds a pod deleted without grace, as any object.
        let mut held = pod("", "Pending", None);
        held["metadata"]["finalizers"] = json!(["x/y"]);
        let DeletePlan::Mark(marked) = plan_delete(pods(), &held, &DeleteOptions::default(), now())
        else {
            panic!("held");
        };
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    }

    #[test]
    fn any_grace_period_makes_a_writable_deadline() {
        for period in [i64::MAX, i64::MAX / 1000, 400_000_000_000] {
            let DeletePlan::Mark(marked) =
                plan_delete(pods(), &pod("n1", "Running", None), &grace(period), now())
            else {
                panic!("graceful");
            };
            assert_eq!(
                marked["metadata"]["deletionTimestamp"],
                "9999-12-31T23:59:59Z"
            );
            assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], period);
            // Shortening from there stays within the calendar too.
            let DeletePlan::Mark(shorter) = plan_delete(pods(), &marked, &grace(5), now()) else {
                panic!("shortened");
            };
            assert!(shorter["metadata"]["deletionTimestamp"].is_string());
        }
    }

    #[test]
    fn a_later_delete_only_shortens_the_grace_period() {
        let DeletePlan::Mark(terminating) =
            plan_delete(pods(), &pod("n1", "Running", Some(30)), &grace(30), now())
        else {
            panic!("graceful");
        };
        // Without a period, or with a longer or equal one: nothing changes.
        for opts in [DeleteOptions::default(), grace(30), grace(60)] {
            assert_eq!(
                plan_delete(pods(), &terminating, &opts, at("2026-01-01T00:00:10Z")),
                DeletePlan::Pending
            );
        }
        // Shorter: the deadline moves back by the difference.
        let DeletePlan::Mark(shorter) =
            plan_delete(pods(), &terminating, &grace(20), at("2026-01-01T00:00:05Z"))
        else {
            panic!("shortened");
        };
        assert_eq!(
            shorter["metadata"]["deletionTimestamp"],
            "2026-01-01T00:00:20Z"
        );
        assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 20);
        // Never into the past: a period already spent becomes 1 s from now.
        let DeletePlan::Mark(spent) =
            plan_delete(pods(), &terminating, &grace(5), at("2026-01-01T00:00:25Z"))
        else {
            panic!("shortened");
        };
        assert_eq!(
            spent["metadata"]["deletionTimestamp"],
            "2026-01-01T00:00:25Z"
        );
        assert_eq!(spent["metadata"]["deletionGracePeriodSeconds"], 1);
        // 0, the kubelet's final delete: gone, unless a finalizer holds it.
        assert_eq!(
            plan_delete(pods(), &terminating, &grace(0), now()),
            DeletePlan::Delete
        );
        let mut held = terminating.clone();
        held["metadata"]["finalizers"] = json!(["x/y"]);
        let DeletePlan::Mark(zero) = plan_delete(pods(), &held, &grace(0), now()) else {
            panic!("held by its finalizer");
        };
        assert_eq!(zero["metadata"]["deletionGracePeriodSeconds"], 0);
        // Removing that finalizer then deletes it.
        let mut released = zero.clone();
        released["metadata"]["finalizers"] = json!([]);
        assert_eq!(
            check_update(pods(), "p", &zero, &released).ok(),
            Some(UpdateEffect::Delete)
        );
    }
}

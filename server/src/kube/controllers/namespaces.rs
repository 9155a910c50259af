//! The namespace controller: a terminating namespace (deleted once, so
//! `deletionTimestamp` set and phase `Terminating`) has every object of
//! every served namespaced type in it deleted (in the background, each
//! guarded by the uid and revision seen), and once none is left, its
//! `kubernetes` finalizer removed, and the namespace with it.
//!
//! Why "none left" stays true: a create in a namespace is guarded by the
//! revision of the namespace it read, so none can commit after the write
//! that made it terminating; objects held by finalizers of their own keep
//! the namespace until they go, and each of their deletions brings the
//! namespace back to be looked at.

use futures::future::{BoxFuture, FutureExt};
use futures::stream::{self, StreamExt};

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::kube::admission::UpdateScope;
use crate::kube::cache::WatchCache;
use crate::kube::deletion::{self, FINALIZER_NAMESPACE};
use crate::kube::error::KubeError;
use crate::kube::object;
use crate::kube::options::{DeleteOptions, DryRun, Propagation};
use crate::kube::resources::{self, ResourceType};
use crate::kube::store::KubeStore;

use super::actions;

/// Deletes in flight at once while emptying a namespace.
const CONCURRENT_DELETES: usize = 16;

/// Moves the terminating namespace `name` towards its end.
#[tracing::instrument(level = "debug", skip(kube, cache))]
pub async fn finish(kube: &KubeStore, cache: &WatchCache, name: &str) -> Result<(), KubeError> {
    let rt = resources::namespaces();
    let Some(ns) = super::lookup(cache, rt, &rt.key(None, name)) else {
        return Ok(());
    };
    let ns_value = ns.to_value();
    let Some(obj) = ns_value.as_object() else {
        return Ok(());
    };
    if !deletion::is_being_deleted(obj) {
        return Ok(());
    }
    if !deletion::namespace_finalizers(obj)
        .iter()
        .any(|f| f == FINALIZER_NAMESPACE)
    {
        // Not (or no longer) this controller's to empty: it goes once
        // every other finalizer is gone.
        if deletion::namespace_finalizers(obj).is_empty() && deletion::finalizers(obj).is_empty() {
            return match kube.delete(rt, None, name, &DeleteOptions::default()).await {
                Ok(_) | Err(KubeError::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            };
        }
        return Ok(());
    }
    let mut left = 0usize;
    let mut remaining = Remaining::default();
    let mut to_delete = Vec::new();
    for member in super::one_per_prefix(&cache.types())
        .into_iter()
        .filter(|r| r.namespaced)
    {
        let prefix = member.collection_prefix(Some(name));
        let (objects, _) = cache.current(member);
        for (_, o) in objects
            .range::<_, str>((
                std::ops::Bound::Included(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(&prefix))
        {
            left += 1;
            let value = o.to_value();
            let Some(item) = value.as_object() else {
                continue;
            };
            remaining.count(member, item);
            if !deletion::is_being_deleted(item) {
                to_delete.push((member, o.clone()));
            }
        }
    }
    if left == 0 {
        tracing::info!(namespace = name, "namespace empty: removing its finalizer");
        return kube.finalize_namespace(name).await;
    }
    if to_delete.is_empty() {
        // Everything left waits on finalizers of its own: say so in the
        // namespace's conditions, as kube's namespace controller does.
        let wanted = remaining.conditions(&object::now_rfc3339());
        if !same_conditions(obj.get("status").and_then(|s| s.get("conditions")), &wanted) {
            return set_conditions(kube, name, wanted).await;
        }
        return Ok(());
    }
    tracing::info!(
        namespace = name,
        left,
        deleting = to_delete.len(),
        "deleting the contents of a terminating namespace"
    );
    // Boxed as `Send` futures with owned inputs: unboxed, the unordered
    // stream's future is not provably `Send` for every lifetime (a known
    // limit of the compiler), which the controllers' spawned task needs.
    let deletes: Vec<BoxFuture<'static, Result<(), KubeError>>> = to_delete
        .into_iter()
        .map(|(member, o)| {
            let kube = kube.clone();
            async move {
                actions::delete_seen(&kube, member, &o, Some(Propagation::Background)).await
            }
            .boxed()
        })
        .collect();
    let results: Vec<Result<(), KubeError>> = stream::iter(deletes)
        .buffer_unordered(CONCURRENT_DELETES)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(())
}

/// What is left in a terminating namespace: objects by resource, and
/// objects by finalizer.
#[derive(Debug, Default)]
struct Remaining {
    by_resource: BTreeMap<String, usize>,
    by_finalizer: BTreeMap<String, usize>,
}

impl Remaining {
    fn count(&mut self, rt: &ResourceType, obj: &Map<String, Value>) {
        // kube's `<resource>.<group>`, core types with the trailing dot.
        *self
            .by_resource
            .entry(format!("{}.{}", rt.plural, rt.group))
            .or_default() += 1;
        for f in deletion::finalizers(obj) {
            *self.by_finalizer.entry(f).or_default() += 1;
        }
    }

    /// kube's `NamespaceContentRemaining` and `NamespaceFinalizersRemaining`
    /// conditions (its wording), stamped `now`.
    fn conditions(&self, now: &str) -> Vec<Value> {
        let mut out = Vec::new();
        if !self.by_resource.is_empty() {
            let items: Vec<String> = self
                .by_resource
                .iter()
                .map(|(r, n)| format!("{r} has {n} resource instances"))
                .collect();
            out.push(json!({
                "type": "NamespaceContentRemaining", "status": "True",
                "lastTransitionTime": now, "reason": "SomeResourcesRemain",
                "message": format!("Some resources are remaining: {}", items.join(", ")),
            }));
        }
        if !self.by_finalizer.is_empty() {
            let items: Vec<String> = self
                .by_finalizer
                .iter()
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect();
            out.push(json!({
                "type": "NamespaceFinalizersRemaining", "status": "True",
                "lastTransitionTime": now, "reason": "SomeFinalizersRemain",
                "message": format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    items.join(", ")
                ),
            }));
        }
        out
    }
}

/// Whether the stored conditions say what `wanted` says (times aside).
fn same_conditions(stored: Option<&Value>, wanted: &[Value]) -> bool {
    let key = |c: &Value| {
        ["type", "status", "reason", "message"].map(|f| c.get(f).cloned().unwrap_or(Value::Null))
    };
    let stored: Vec<_> = stored
        .and_then(Value::as_array)
        .map(|cs| cs.iter().map(key).collect())
        .unwrap_or_default();
    stored == wanted.iter().map(key).collect::<Vec<_>>()
}

/// Writes the namespace's status conditions (a guarded status update).
async fn set_conditions(
    kube: &KubeStore,
    name: &str,
    conditions: Vec<Value>,
) -> Result<(), KubeError> {
    let rt = resources::namespaces();
    let result = kube
        .update_with(
            rt,
            None,
            name,
            UpdateScope::Status,
            8,
            DryRun::No,
            |current| {
                let Some(Value::Object(mut ns)) = current.object() else {
                    return Err(KubeError::not_found(rt, name));
                };
                object::metadata_mut(&mut ns).remove("resourceVersion");
                let status = ns.entry("status").or_insert_with(|| json!({}));
                if !status.is_object() {
                    *status = json!({});
                }
                status["conditions"] = Value::Array(conditions.clone());
                Ok(ns)
            },
        )
        .await;
    match result {
        Ok(_) | Err(KubeError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_remains_is_worded_as_kube_words_it() {
        let mut r = Remaining::default();
        let cms = resources::find("", "v1", "configmaps").expect("configmaps");
        let deps = resources::find("apps", "v1", "deployments").expect("deployments");
        let Value::Object(held) = json!({"metadata": {"finalizers": ["example.com/hold"]}}) else {
            unreachable!("an object")
        };
        r.count(cms, &held);
        r.count(cms, &held);
        r.count(deps, &held);
        let conditions = r.conditions("t");
        assert_eq!(
            conditions[0]["message"],
            "Some resources are remaining: configmaps. has 2 resource instances, deployments.apps has 1 resource instances"
        );
        assert_eq!(conditions[0]["reason"], "SomeResourcesRemain");
        assert_eq!(
            conditions[1]["message"],
            "Some content in the namespace has finalizers remaining: example.com/hold in 3 resource instances"
        );
        assert!(same_conditions(
            Some(&Value::Array(r.conditions("later"))),
            &conditions
        ));
        assert!(!same_conditions(None, &conditions));
    }
}

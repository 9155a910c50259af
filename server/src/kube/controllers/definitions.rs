//! The CustomResourceDefinition cleanup controller: a definition being
//! deleted keeps kube's cleanup finalizer until every object of its type
//! is gone, as kube's `finalizer` controller in apiextensions does it:
//! the `Terminating` condition set, every object deleted (each as its own
//! finalizers say), then the finalizer removed, which deletes the
//! definition and stops its type being served on every node.

use futures::stream::{self, StreamExt};
use serde_json::{Map, Value};

use super::actions;
use crate::kube::admission::UpdateScope;
use crate::kube::cache::WatchCache;
use crate::kube::crd::{self, CLEANUP_FINALIZER};
use crate::kube::deletion;
use crate::kube::error::KubeError;
use crate::kube::options::{DryRun, Propagation};
use crate::kube::resources;
use crate::kube::store::KubeStore;

/// Deletes in flight at once while emptying a definition's type.
const CONCURRENT_DELETES: usize = 16;

/// Whether a definition is being deleted and still has its objects to
/// delete.
pub fn is_cleaning_up(def: &Map<String, Value>) -> bool {
    deletion::is_being_deleted(def)
        && deletion::finalizers(def)
            .iter()
            .any(|f| f == CLEANUP_FINALIZER)
}

/// Moves the deletion of the definition `name` on.
#[tracing::instrument(level = "debug", skip(kube, cache))]
pub async fn finish(kube: &KubeStore, cache: &WatchCache, name: &str) -> Result<(), KubeError> {
    let rt = resources::custom_resource_definitions();
    let Some(seen) = super::lookup(cache, rt, &rt.key(None, name)) else {
        return Ok(());
    };
    let seen_value = seen.to_value();
    let Some(def) = seen_value.as_object() else {
        return Ok(());
    };
    if !is_cleaning_up(def) {
        return Ok(());
    }
    if !crd::condition_true(&seen_value, "Terminating") {
        kube.update_with(
            rt,
            None,
            name,
            UpdateScope::Status,
            8,
            DryRun::No,
            |current| -> Result<_, KubeError> {
                let mut obj = current.stored().clone();
                crd::admission::mark_terminating(&mut obj);
                Ok(obj)
            },
        )
        .await?;
    }
    // Every object of the type, under its one etcd prefix, read through
    // whichever of its versions is served.
    let uid = def
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(member) = super::one_per_prefix(&cache.types()).into_iter().find(|t| {
        t.custom
            .is_some_and(|c| c.definition == name && c.uid == uid)
    }) else {
        // Not served (never established): nothing of its type was stored.
        tracing::info!(
            definition = name,
            "no objects left: removing the cleanup finalizer"
        );
        return actions::remove_finalizer(kube, rt, &seen, CLEANUP_FINALIZER).await;
    };
    let (objects, _) = cache.current(member);
    if objects.is_empty() {
        tracing::info!(
            definition = name,
            "no objects left: removing the cleanup finalizer"
        );
        return actions::remove_finalizer(kube, rt, &seen, CLEANUP_FINALIZER).await;
    }
    let to_delete: Vec<_> = objects
        .values()
        .filter(|o| {
            !o.to_value()
                .as_object()
                .is_some_and(deletion::is_being_deleted)
        })
        .cloned()
        .collect();
    tracing::info!(
        definition = name,
        left = objects.len(),
        deleting = to_delete.len(),
        "deleting the objects of a definition being deleted"
    );
    let results: Vec<Result<(), KubeError>> =
        stream::iter(to_delete)
            .map(|o| {
                let kube = kube.clone();
                async move {
                    actions::delete_seen(&kube, member, &o, Some(Propagation::Background)).await
                }
            })
            .buffer_unordered(CONCURRENT_DELETES)
            .collect()
            .await;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    // The deletes are followed as events: this work runs again when the
    // objects are gone (an object's delete touches the definition's type,
    // which re-queues the definition; see `Controllers::gone`).
    Ok(())
}

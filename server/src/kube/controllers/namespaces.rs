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

use crate::kube::cache::WatchCache;
use crate::kube::deletion::{self, FINALIZER_NAMESPACE};
use crate::kube::error::KubeError;
use crate::kube::options::{DeleteOptions, Propagation};
use crate::kube::resources::{self, RESOURCES};
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
    let Some(obj) = ns.object.as_object() else {
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
    let mut to_delete = Vec::new();
    for member in RESOURCES.iter().filter(|r| r.namespaced) {
        let prefix = member.collection_prefix(Some(name));
        let (objects, _) = cache.current(member);
        for (_, o) in objects
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
        {
            left += 1;
            let being_deleted = o.object.as_object().is_some_and(deletion::is_being_deleted);
            if !being_deleted {
                to_delete.push((member, o.clone()));
            }
        }
    }
    if left == 0 {
        tracing::info!(namespace = name, "namespace empty: removing its finalizer");
        return kube.finalize_namespace(name).await;
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

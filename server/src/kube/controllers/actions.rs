//! The writes the controllers make, each a normal guarded write of the
//! store, made on the state a decision was taken on: a delete carries the
//! uid and resourceVersion seen, an update is computed again on the state
//! its guard holds. An object that changed or went meanwhile is not an
//! error: its event brings it back to be decided again.

use serde_json::{json, Value};

use crate::kube::admission::UpdateScope;
use crate::kube::cache::CachedObject;
use crate::kube::error::KubeError;
use crate::kube::object;
use crate::kube::options::{DeleteOptions, DryRun, Preconditions, Propagation};
use crate::kube::resources::ResourceType;
use crate::kube::store::KubeStore;

/// How many times a controller's update retries a lost race.
const RETRIES: usize = 8;

/// The name, namespace and uid of the object `seen` shows.
fn identity(seen: &CachedObject) -> (String, Option<String>, Option<String>) {
    let object = seen.to_value();
    let s = |f: &str| {
        object
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    (s("name").unwrap_or_default(), s("namespace"), s("uid"))
}

/// Whether a failed write only means the object moved on (changed or
/// gone) since it was seen.
fn moved_on(e: &KubeError) -> bool {
    matches!(e, KubeError::NotFound { .. } | KubeError::Conflict { .. })
}

/// Deletes `seen` as it was seen (uid and resourceVersion as
/// preconditions) with `policy` (`None`: as its finalizers say).
pub async fn delete_seen(
    kube: &KubeStore,
    rt: &ResourceType,
    seen: &CachedObject,
    policy: Option<Propagation>,
) -> Result<(), KubeError> {
    let opts = DeleteOptions {
        propagation: policy,
        ..DeleteOptions::default()
    };
    delete_seen_with(kube, rt, seen, opts).await
}

/// Deletes `seen` as it was seen, with a grace period of 0: what a
/// kubelet does once a pod has stopped.
pub async fn delete_seen_now(
    kube: &KubeStore,
    rt: &ResourceType,
    seen: &CachedObject,
) -> Result<(), KubeError> {
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    delete_seen_with(kube, rt, seen, opts).await
}

async fn delete_seen_with(
    kube: &KubeStore,
    rt: &ResourceType,
    seen: &CachedObject,
    mut opts: DeleteOptions,
) -> Result<(), KubeError> {
    let (name, ns, uid) = identity(seen);
    opts.preconditions = Preconditions {
        uid,
        resource_version: Some(seen.revision),
    };
    match kube.delete(rt, ns.as_deref(), &name, &opts).await {
        Ok(_) => Ok(()),
        Err(e) if moved_on(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the owner references to `uids` from the object `seen` names
/// (the same object: its uid must still be the one seen).
pub async fn drop_owner_refs(
    kube: &KubeStore,
    rt: &ResourceType,
    seen: &CachedObject,
    uids: &[String],
) -> Result<(), KubeError> {
    edit_metadata(kube, rt, seen, |meta| {
        if let Some(Value::Array(refs)) = meta.get_mut("ownerReferences") {
            refs.retain(|r| {
                !r.get("uid")
                    .and_then(Value::as_str)
                    .is_some_and(|u| uids.iter().any(|x| x == u))
            });
            if refs.is_empty() {
                meta.remove("ownerReferences");
            }
        }
    })
    .await
}

/// Removes `finalizer` from the object `seen` names (an update: the one
/// that removes the last finalizer of an object being deleted deletes it).
pub async fn remove_finalizer(
    kube: &KubeStore,
    rt: &ResourceType,
    seen: &CachedObject,
    finalizer: &str,
) -> Result<(), KubeError> {
    edit_metadata(kube, rt, seen, |meta| {
        let left: Vec<Value> = meta
            .get("finalizers")
            .and_then(Value::as_array)
            .map(|f| {
                f.iter()
                    .filter(|x| x.as_str() != Some(finalizer))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        meta.insert("finalizers".into(), json!(left));
    })
    .await
}

/// Updates the metadata of the object `seen` names with `edit`, if it is
/// still that object (same uid); an object gone or replaced meanwhile is
/// no error: the controller has nothing left to do for it.
async fn edit_metadata(
    kube: &KubeStore,
    rt: &ResourceType,
    seen: &CachedObject,
    mut edit: impl FnMut(&mut serde_json::Map<String, Value>),
) -> Result<(), KubeError> {
    let (name, ns, uid) = identity(seen);
    let uid = uid.map(Value::String);
    let result = kube
        .update_with(
            rt,
            ns.as_deref(),
            &name,
            UpdateScope::Object,
            RETRIES,
            DryRun::No,
            |current| {
                let mut obj = same_object(rt, &name, current.object(), &uid)?;
                let meta = object::metadata_mut(&mut obj);
                meta.remove("resourceVersion");
                edit(meta);
                Ok::<_, KubeError>(obj)
            },
        )
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(e) if moved_on(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The current object as a map, if it is still the one seen (same uid);
/// another object under the same name is `NotFound` for the controller.
fn same_object(
    rt: &ResourceType,
    name: &str,
    current: Option<Value>,
    uid: &Option<Value>,
) -> Result<serde_json::Map<String, Value>, KubeError> {
    match current {
        Some(Value::Object(obj))
            if obj.get("metadata").and_then(|m| m.get("uid")) == uid.as_ref() =>
        {
            Ok(obj)
        }
        _ => Err(KubeError::not_found(rt, name)),
    }
}

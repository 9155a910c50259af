//! PATCH: JSON Patch (RFC 6902) and JSON Merge Patch (RFC 7386), applied
//! to the current object and written back with the current revision as the
//! precondition, retried when another writer got in between.
//!
//! Uses the `json-patch` crate for both formats. Strategic merge patch and
//! server-side apply are not served yet: those content types get `415`.

use serde_json::Value;

use crate::http::handlers::PatchKind;
use crate::http::status::{ApiError, FieldCause};
use crate::http::AppState;
use crate::kube::object::{self, UpdateScope};
use crate::kube::resources::ResourceType;
use crate::kube::store::Freshness;

/// How many times a patch without its own precondition is re-applied when
/// another writer changed the object in between.
const PATCH_RETRIES: usize = 5;

/// Applies a patch to one object (or, with [`UpdateScope::Status`], to its
/// status subresource: only the patched status is kept) and returns the
/// stored result.
pub async fn apply(
    state: &AppState,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    kind: PatchKind,
    body: &[u8],
    scope: UpdateScope,
) -> Result<Value, ApiError> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let current = state
            .kube
            .get(rt, ns, name, Freshness::MostRecent)
            .await?
            .0
            .object
            .clone();
        let (obj, own_precondition) = patch_object(rt, ns, name, current, kind, &patch)?;
        match state.kube.update_in(rt, ns, name, obj, scope).await {
            Err(ApiError::Conflict { .. }) if !own_precondition && attempt < PATCH_RETRIES => {
                continue
            }
            other => return other,
        }
    }
}

/// Applies the patch to `current`. Returns the object to store and whether
/// the patch itself set `metadata.resourceVersion` (its own precondition);
/// otherwise the version that was patched becomes the precondition.
fn patch_object(
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    current: Value,
    kind: PatchKind,
    patch: &Value,
) -> Result<(serde_json::Map<String, Value>, bool), ApiError> {
    let current_rv = current
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut patched = current;
    if let Some(meta) = patched.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(|e| {
                ApiError::BadRequest(format!(
                    "the server rejected our request due to an error in our request: {e}"
                ))
            })?;
            json_patch::patch(&mut patched, &ops).map_err(|e| {
                ApiError::invalid(
                    rt,
                    name,
                    vec![FieldCause::invalid("patch", "", &format!("json patch {e}"))],
                )
            })?;
        }
        PatchKind::Merge => json_patch::merge(&mut patched, patch),
    }
    let Value::Object(mut obj) = patched else {
        return Err(ApiError::BadRequest(
            "the patched object is not a JSON object".into(),
        ));
    };
    let meta = object::metadata_mut(&mut obj);
    let own_precondition = meta
        .get("resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|rv| !rv.is_empty());
    if !own_precondition {
        meta.insert("resourceVersion".into(), Value::String(current_rv));
    }
    let patched_ns = object::meta_str(&obj, "namespace").filter(|n| !n.is_empty());
    if rt.namespaced && patched_ns != ns {
        return Err(ApiError::invalid(
            rt,
            name,
            vec![FieldCause::invalid(
                "metadata.namespace",
                patched_ns.unwrap_or(""),
                "field is immutable",
            )],
        ));
    }
    if object::meta_str(&obj, "name") != Some(name) {
        return Err(ApiError::invalid(
            rt,
            name,
            vec![FieldCause::invalid(
                "metadata.name",
                object::meta_str(&obj, "name").unwrap_or(""),
                "field is immutable",
            )],
        ));
    }
    obj.insert("kind".into(), Value::String(rt.kind.into()));
    obj.insert("apiVersion".into(), Value::String(rt.api_version()));
    Ok((obj, own_precondition))
}

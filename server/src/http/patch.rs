//! PATCH: JSON Patch (RFC 6902), JSON Merge Patch (RFC 7386), strategic
//! merge patch and server-side apply, applied to the current object and
//! written back with the current revision as the precondition, retried
//! when another writer got in between.
//!
//! Uses the `json-patch` crate for the first two; strategic merge patch is
//! `kube::strategic`, driven by the built-in types' schemas
//! (`kube::types`): a type without one (a custom resource) gets `415` as
//! in kube. Server-side apply
//! (`application/apply-patch+yaml`, a YAML or JSON body, read with
//! `serde_norway`, the maintained fork of `serde_yaml`) is `kube::apply`:
//! an absent object is created (`201`), conflicts are `409`, and every
//! other patch is recorded in `managedFields` as an `Update` by its
//! manager. Unknown fields of the patched object and keys the patch
//! repeats are warned about or refused as `fieldValidation` says
//! (`kube::fieldvalidation`; `422` under `Strict`, as kube answers a
//! patch).

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::http::state::AppState;
use crate::http::status::ApiError;
use crate::http::write_options::WriteOptions;
use crate::kube::admission::{self, UpdateScope};
use crate::kube::apply::{self, Manager, Target};
use crate::kube::error::{FieldCause, KubeError};
use crate::kube::fieldvalidation::{parse_json, unknown_fields, Problems, WriteVerb};
use crate::kube::object;
use crate::kube::options::DryRun;
use crate::kube::resources::ResourceType;
use crate::kube::strategic;
use crate::kube::types::{Schema, TypeDef};

/// The patch formats kubestore applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    /// `application/strategic-merge-patch+json`, for built-in types.
    Strategic,
    /// `application/apply-patch+yaml`: server-side apply.
    Apply,
}

/// The PATCH media types kube accepts for a built-in type, in kube's order
/// (its `415` lists them).
pub const BUILTIN_PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// The PATCH media types kube accepts for a custom resource: no strategic
/// merge patch, which needs the type's Go struct tags.
pub const CUSTOM_PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

/// How many times a patch without its own precondition is applied in all
/// when another writer changed the object in between.
const PATCH_RETRIES: usize = 5;

/// What a PATCH did: the stored object, whether an apply created it, and
/// the field-validation warnings.
#[derive(Debug)]
pub struct Patched {
    pub object: Value,
    pub created: bool,
    pub warnings: Vec<String>,
}

/// Applies a patch to one object (or, with [`UpdateScope::Status`], to its
/// status subresource: only the patched status is kept) and returns the
/// stored result. The patch is applied to the current object inside the
/// store's guarded read-modify-write: a patch that sets
/// `metadata.resourceVersion` is guarded by it (`409` on mismatch), any
/// other by the version it was applied to, and re-applied to the newer
/// object when another writer got in between. A server-side apply of an
/// object that does not exist creates it. A dry run (`dry_run`) is applied
/// the same way and not written.
#[allow(clippy::too_many_arguments)] // the request's parts, each distinct
pub async fn apply(
    state: &AppState,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    kind: PatchKind,
    body: &[u8],
    scope: UpdateScope,
    opts: &WriteOptions,
    dry_run: DryRun,
) -> Result<Patched, ApiError> {
    let (patch, duplicate) = match kind {
        PatchKind::Apply => parse_apply_body(body)?,
        _ => parse_json(body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?,
    };
    let patch = Patch::parse(kind, patch, rt)?;
    let manager = opts.manager_for(rt, scope == UpdateScope::Status);
    let ctx = Context {
        rt,
        ns,
        name,
        opts,
        manager: &manager,
        duplicate: &duplicate,
        copy_limit: state.max_body_bytes,
    };
    // Every patch but an apply is an `Update` of its manager.
    let track = (kind != PatchKind::Apply).then_some(&manager);
    // An apply racing another create of the same object: at most a few
    // rounds of "update, absent; create, exists".
    for _ in 0..3 {
        let mut warnings = Vec::new();
        let updated = state
            .kube
            .update_managed(
                rt,
                ns,
                name,
                scope,
                PATCH_RETRIES,
                dry_run,
                track,
                |current| {
                    // A stored value that is not an object (written through the
                    // etcd API) is not served as an object: not found.
                    let current = current
                        .object()
                        .ok_or_else(|| KubeError::not_found(rt, name))?;
                    let (obj, w) = ctx.patch(Some(current), &patch)?;
                    warnings = w;
                    Ok::<_, ApiError>(obj)
                },
            )
            .await;
        match updated {
            // An apply creates an absent object, unless it carries a
            // resourceVersion: a precondition no absent object meets.
            Err(ApiError::Kube(KubeError::NotFound { .. }))
                if scope == UpdateScope::Object && patch.creates() => {}
            other => {
                return other.map(|object| Patched {
                    object,
                    created: false,
                    warnings,
                })
            }
        }
        let (obj, warnings) = ctx.patch(None, &patch)?;
        let admitted = admission::admit_create_object(rt, ns, obj)?;
        match state.kube.create(rt, admitted, dry_run).await {
            Ok(object) => {
                return Ok(Patched {
                    object,
                    created: true,
                    warnings,
                })
            }
            Err(KubeError::AlreadyExists { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(KubeError::conflict(rt, name).into())
}

/// Applies a JSON, merge or strategic merge patch `body` to `current`, an
/// object of the type `rt` (a subresource's view, such as the `Scale` of
/// `kube::scale::scale_type`), named `name` in `ns`, and returns the
/// patched object. Its `metadata.resourceVersion` is set only when the
/// patch set one. A server-side apply is not a patch of a view: `415`,
/// naming the patch types that are (a `Scale`'s apply is the scale
/// handler's own, `handlers::apply_scale`).
pub fn patch_view(
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    kind: PatchKind,
    body: &[u8],
    current: Value,
    copy_limit: usize,
) -> Result<Map<String, Value>, ApiError> {
    if kind == PatchKind::Apply {
        return Err(ApiError::UnsupportedPatchType(VIEW_PATCH_TYPES));
    }
    let (patch, _) =
        parse_json(body).map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
    let patch = Patch::parse(kind, patch, rt)?;
    patch_object(rt, ns, name, current, &patch, copy_limit)
}

/// The PATCH media types of a subresource's view ([`patch_view`]).
pub const VIEW_PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

/// An apply body: JSON (what kubectl and client-go send; its repeated
/// keys are noted), else YAML.
pub fn parse_apply_body(body: &[u8]) -> Result<(Value, Vec<String>), ApiError> {
    if let Ok(parsed) = parse_json(body) {
        return Ok(parsed);
    }
    let value: Value = serde_norway::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
    Ok((value, Vec::new()))
}

/// What a patch of one object needs besides the object and the patch.
struct Context<'a> {
    rt: &'a ResourceType,
    ns: Option<&'a str>,
    name: &'a str,
    opts: &'a WriteOptions,
    manager: &'a Manager,
    /// Keys the patch body repeats.
    duplicate: &'a [String],
    copy_limit: usize,
}

impl Context<'_> {
    /// The patched object (`current` is `None` for an apply that creates)
    /// and the field-validation warnings, or the `Strict` refusal.
    fn patch(
        &self,
        current: Option<Value>,
        patch: &Patch,
    ) -> Result<(Map<String, Value>, Vec<String>), ApiError> {
        let rt = self.rt;
        let problems = |unknown: Vec<String>, obj: &Map<String, Value>| {
            Problems {
                unknown,
                duplicate: self.duplicate.to_vec(),
            }
            .outcome(self.opts.validation, rt, WriteVerb::Patch, Some(obj))
        };
        if let Patch::Apply(config) = patch {
            let mut config = config.clone();
            check_apply_type(rt, &config)?;
            let unknown = unknown_fields(rt, &mut config, true);
            let live = match current {
                Some(Value::Object(mut live)) => {
                    object::metadata_mut(&mut live).remove("resourceVersion");
                    live
                }
                _ => {
                    // A create: the object named as the URL says.
                    let mut live = Map::new();
                    let meta = object::metadata_mut(&mut live);
                    meta.insert("name".into(), Value::String(self.name.into()));
                    if let Some(ns) = self.ns.filter(|_| rt.namespaced) {
                        meta.insert("namespace".into(), Value::String(ns.into()));
                    }
                    live
                }
            };
            let merged = apply::apply(
                &Target::of(rt),
                self.manager,
                Some(&live),
                config,
                self.opts.force,
                &object::now_rfc3339(),
            )
            .map_err(KubeError::from)?;
            let warnings = problems(unknown, &merged)?;
            return Ok((finish(rt, self.ns, self.name, merged)?, warnings));
        }
        let current = current.unwrap_or_else(|| Value::Object(Map::new()));
        let mut before = match &current {
            Value::Object(m) => m.clone(),
            _ => Map::new(),
        };
        let known: HashSet<String> = unknown_fields(rt, &mut before, false).into_iter().collect();
        let mut obj = patch_object(rt, self.ns, self.name, current, patch, self.copy_limit)?;
        let unknown: Vec<String> = unknown_fields(rt, &mut obj, false)
            .into_iter()
            .filter(|f| !known.contains(f))
            .collect();
        let warnings = problems(unknown, &obj)?;
        unknown_fields(rt, &mut obj, true);
        Ok((obj, warnings))
    }
}

/// An applied configuration must name the URL's type: kube's `400`s.
pub fn check_apply_type(rt: &ResourceType, config: &Map<String, Value>) -> Result<(), ApiError> {
    let api_version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if api_version != rt.api_version() {
        return Err(ApiError::BadRequest(format!(
            "Incorrect version specified in apply patch. Specified patch version: {api_version}, expected: {}",
            rt.api_version()
        )));
    }
    let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != rt.kind {
        return Err(ApiError::BadRequest(format!(
            "Incorrect kind specified in apply patch. Specified patch kind: {kind}, expected: {}",
            rt.kind
        )));
    }
    Ok(())
}

/// kube-apiserver's cap on the operations of one JSON Patch.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// A decoded patch body.
#[derive(Debug)]
enum Patch {
    Json(json_patch::Patch),
    Merge(Value),
    /// A strategic merge patch and the root type of the patched kind.
    Strategic {
        patch: serde_json::Map<String, Value>,
        root: &'static TypeDef,
    },
    /// A server-side apply's configuration.
    Apply(Map<String, Value>),
}

impl Patch {
    /// Whether the patch creates the object when it is absent: an apply
    /// without `metadata.resourceVersion`.
    fn creates(&self) -> bool {
        match self {
            Patch::Apply(config) => {
                object::meta_str(config, "resourceVersion").is_none_or(str::is_empty)
            }
            _ => false,
        }
    }

    /// Decodes a patch of `kind` for an object of the type `rt`; a JSON
    /// Patch of more than [`MAX_JSON_PATCH_OPERATIONS`] operations is
    /// refused (413) before any of it runs, a strategic merge patch of a
    /// type without a schema is `415`.
    fn parse(kind: PatchKind, patch: Value, rt: &ResourceType) -> Result<Self, ApiError> {
        match kind {
            PatchKind::Merge => Ok(Patch::Merge(patch)),
            PatchKind::Apply => match patch {
                Value::Object(config) => Ok(Patch::Apply(config)),
                _ => Err(ApiError::BadRequest(
                    "error decoding patch: an applied configuration must be an object".into(),
                )),
            },
            PatchKind::Strategic => {
                let root = Schema::builtin()
                    .for_kind(rt.group, rt.version, rt.kind)
                    .ok_or(ApiError::UnsupportedPatchType(CUSTOM_PATCH_TYPES))?;
                let Value::Object(patch) = patch else {
                    return Err(ApiError::BadRequest(
                        "error decoding patch: a strategic merge patch must be a JSON object"
                            .into(),
                    ));
                };
                Ok(Patch::Strategic { patch, root })
            }
            PatchKind::Json => {
                let ops: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
                    ApiError::BadRequest(format!(
                        "the server rejected our request due to an error in our request: {e}"
                    ))
                })?;
                if ops.len() > MAX_JSON_PATCH_OPERATIONS {
                    return Err(ApiError::EntityTooLarge(format!(
                        "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                        ops.len()
                    )));
                }
                Ok(Patch::Json(ops))
            }
        }
    }
}

/// Applies a JSON Patch one operation at a time, refusing it once the
/// values its `copy` operations duplicate add up to more than `copy_limit`
/// bytes (as kube-apiserver bounds them by its request size: a few
/// operations copying a copy would otherwise double the object each time).
/// `doc` is a scratch copy: on an error the caller drops it.
fn apply_json_patch(
    doc: &mut Value,
    ops: &json_patch::Patch,
    copy_limit: usize,
) -> Result<(), String> {
    let mut copied = 0usize;
    for op in ops.iter() {
        if let json_patch::PatchOperation::Copy(copy) = op {
            let size = doc
                .pointer(copy.from.as_str())
                .map_or(0, |v| serde_json::to_vec(v).map_or(0, |b| b.len()));
            copied = copied.saturating_add(size);
            if copied > copy_limit {
                return Err(format!(
                    "the values copied by the patch add up to more than {copy_limit} bytes"
                ));
            }
        }
        json_patch::patch(doc, std::slice::from_ref(op)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Applies the patch to `current` (as clients see it). Returns the object
/// to store; its `metadata.resourceVersion` is set only when the patch set
/// one (its own precondition).
fn patch_object(
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    current: Value,
    patch: &Patch,
    copy_limit: usize,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let mut patched = current;
    if let Some(meta) = patched.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    match patch {
        Patch::Json(ops) => {
            apply_json_patch(&mut patched, ops, copy_limit).map_err(|e| {
                ApiError::invalid(
                    rt,
                    name,
                    vec![FieldCause::invalid("patch", "", &format!("json patch {e}"))],
                )
            })?;
        }
        Patch::Merge(merge) => json_patch::merge(&mut patched, merge),
        Patch::Strategic { patch, root } => {
            let Value::Object(current) = patched else {
                return Err(ApiError::BadRequest(
                    "the stored object is not a JSON object".into(),
                ));
            };
            let merged = strategic::apply(Schema::builtin(), root, current, patch.clone())
                .map_err(|e| e.into_kube(rt, name))?;
            patched = Value::Object(merged);
        }
        Patch::Apply(_) => {
            return Err(ApiError::BadRequest(
                "an apply is not a patch of the current object".into(),
            ))
        }
    }
    let Value::Object(obj) = patched else {
        return Err(ApiError::BadRequest(
            "the patched object is not a JSON object".into(),
        ));
    };
    finish(rt, ns, name, obj)
}

/// The patched object named as the URL names it: a cluster-scoped object
/// without a namespace, a namespaced one in the URL's, the URL's name,
/// `kind` and `apiVersion` of the URL's type.
fn finish(
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    mut obj: Map<String, Value>,
) -> Result<Map<String, Value>, ApiError> {
    if !rt.namespaced {
        // As for an update (and in kube): a cluster-scoped object has no
        // namespace, whatever the patch wrote.
        object::metadata_mut(&mut obj).remove("namespace");
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
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kube::resources;

    fn cm() -> &'static ResourceType {
        resources::find("", "v1", "configmaps").expect("configmaps")
    }

    #[test]
    fn a_strategic_patch_of_a_type_without_a_schema_is_unsupported_as_in_kube() {
        // A custom resource's type: no built-in schema.
        let widget = ResourceType {
            group: "example.com",
            kind: "Widget",
            plural: "widgets",
            singular: "widget",
            ..*cm()
        };
        let err = Patch::parse(PatchKind::Strategic, serde_json::json!({}), &widget)
            .expect_err("no schema");
        let status = err.to_status();
        assert_eq!(status["code"], 415);
        assert_eq!(status["reason"], "UnsupportedMediaType");
        assert_eq!(
            status["message"],
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        );
        // Built-in types take it.
        assert!(Patch::parse(PatchKind::Strategic, serde_json::json!({}), cm()).is_ok());
        // A body that is not an object is the client's mistake.
        let err = Patch::parse(PatchKind::Strategic, serde_json::json!([1]), cm())
            .expect_err("not an object");
        assert_eq!(err.code(), axum::http::StatusCode::BAD_REQUEST);
    }

    #[test]
    fn the_content_type_chooses_the_patch_kind() {
        use axum::http::{header, HeaderMap, HeaderValue};
        let kind = |ct: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            crate::http::body::patch_kind(&h)
        };
        assert_eq!(
            kind("application/strategic-merge-patch+json; charset=utf-8").ok(),
            Some(PatchKind::Strategic)
        );
        assert_eq!(
            kind("application/merge-patch+json").ok(),
            Some(PatchKind::Merge)
        );
        let err = kind("application/json").expect_err("not a patch type");
        assert_eq!(
            err.to_string(),
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, \
             application/strategic-merge-patch+json, application/apply-patch+yaml"
        );
    }

    #[test]
    fn a_strategic_patch_that_cannot_apply_is_a_client_error() {
        let dep = resources::find("apps", "v1", "deployments").expect("deployments");
        let current = serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": "3"},
            "spec": {"template": {"spec": {"containers": [{"name": "app"}]}}},
        });
        let apply = |patch: Value| {
            let patch = Patch::parse(PatchKind::Strategic, patch, dep).expect("parses");
            patch_object(dep, Some("default"), "web", current.clone(), &patch, 1024)
        };
        let missing_key =
            serde_json::json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        let err = apply(missing_key).expect_err("no merge key");
        assert_eq!(err.code(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        let bad_order = serde_json::json!({"metadata": {"$setElementOrder/finalizers": 1}});
        let err = apply(bad_order).expect_err("malformed directive");
        assert_eq!(err.code(), axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(
            err.to_string(),
            "invalid patch format of setElementOrder list"
        );

        let ok = apply(serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "v2"}]}}}}))
            .expect("applies");
        assert_eq!(
            ok["spec"]["template"]["spec"]["containers"],
            serde_json::json!([{"name": "app", "image": "v2"}])
        );
        assert_eq!(ok["kind"], "Deployment");
        assert_eq!(ok["apiVersion"], "apps/v1");
        assert!(ok["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn a_json_patch_of_more_than_ten_thousand_operations_is_too_large() {
        let op = json!({"op": "test", "path": "/a", "value": 1});
        let at_limit = Value::Array(vec![op.clone(); MAX_JSON_PATCH_OPERATIONS]);
        assert!(Patch::parse(PatchKind::Json, at_limit, cm()).is_ok());
        let over = Value::Array(vec![op; MAX_JSON_PATCH_OPERATIONS + 1]);
        match Patch::parse(PatchKind::Json, over, cm()) {
            Err(e @ ApiError::EntityTooLarge(_)) => {
                assert_eq!(e.code(), axum::http::StatusCode::PAYLOAD_TOO_LARGE);
                assert!(e.to_string().contains("got 10001"), "{e}");
            }
            other => panic!("expected 413, got {other:?}"),
        }
    }

    #[test]
    fn copies_that_double_the_object_stop_at_the_copy_limit() {
        let mut doc = json!({"a": "x".repeat(1_000)});
        // Each copy duplicates everything copied so far.
        let mut ops = Vec::new();
        for i in 0..20 {
            ops.push(json!({"op": "copy", "from": "", "path": format!("/c{i}")}));
        }
        let Ok(Patch::Json(ops)) = Patch::parse(PatchKind::Json, Value::Array(ops), cm()) else {
            panic!("a valid patch");
        };
        let err = apply_json_patch(&mut doc, &ops, 64 * 1024).expect_err("bounded");
        assert!(err.contains("more than 65536 bytes"), "{err}");

        let mut small = json!({"a": 1});
        let ok = json!([{"op": "copy", "from": "/a", "path": "/b"}]);
        let Ok(Patch::Json(ok)) = Patch::parse(PatchKind::Json, ok, cm()) else {
            panic!("a valid patch");
        };
        apply_json_patch(&mut small, &ok, 64 * 1024).expect("within the limit");
        assert_eq!(small, json!({"a": 1, "b": 1}));
    }
}

/// Property tests: any JSON, merge or strategic patch of any stored object gives an
/// object to store or a client error, never a panic or a `5xx`; the name,
/// namespace and kind of what it gives are the URL's.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::fuzz;
    use crate::kube::resources;

    /// JSON pointers into a Kubernetes object, valid or not.
    fn pointer() -> impl Strategy<Value = String> {
        prop_oneof![
            proptest::sample::select(
                &[
                    "",
                    "/",
                    "/metadata",
                    "/metadata/name",
                    "/metadata/namespace",
                    "/metadata/resourceVersion",
                    "/metadata/labels/a",
                    "/data",
                    "/data/v",
                    "/data/-",
                    "/spec/0",
                    "/spec/-",
                    "/a~1b",
                    "/a~2",
                    "/status",
                    "metadata",
                ][..]
            )
            .prop_map(str::to_string),
            fuzz::text(),
        ]
    }

    /// One JSON Patch operation; sometimes misspelt or missing fields.
    fn operation() -> impl Strategy<Value = Value> {
        (
            proptest::sample::select(
                &["add", "remove", "replace", "move", "copy", "test", "nope"][..],
            ),
            pointer(),
            pointer(),
            fuzz::json_value(),
            0..4u8,
        )
            .prop_map(|(op, path, from, value, drop)| {
                let mut o = json!({"op": op, "path": path, "from": from, "value": value});
                if let Some(m) = o.as_object_mut() {
                    match drop {
                        0 => m.remove("path"),
                        1 => m.remove("value"),
                        _ => None,
                    };
                }
                o
            })
    }

    fn patch_document() -> impl Strategy<Value = (PatchKind, Value)> {
        prop_oneof![
            proptest::collection::vec(operation(), 0..6)
                .prop_map(|ops| (PatchKind::Json, Value::Array(ops))),
            fuzz::json_value().prop_map(|v| (PatchKind::Json, v)),
            fuzz::object_value().prop_map(|v| (PatchKind::Merge, v)),
            fuzz::json_value().prop_map(|v| (PatchKind::Merge, v)),
        ]
    }

    /// Found by `any_patch_of_any_object_is_applied_or_refused`: a patch
    /// of a cluster-scoped object kept the namespace it wrote (or one the
    /// stored object carried), which an update drops.
    #[test]
    fn a_patched_cluster_scoped_object_has_no_namespace() {
        let rt = resources::namespaces();
        for (stored, merge) in [
            (
                json!({"metadata": {"name": "a", "namespace": "default"}}),
                json!({}),
            ),
            (
                json!({"metadata": {"name": "a"}}),
                json!({"metadata": {"namespace": "x"}}),
            ),
        ] {
            let patch = Patch::parse(PatchKind::Merge, merge, rt).expect("a merge patch");
            let obj = patch_object(rt, None, "a", stored, &patch, 1024).expect("applies");
            assert_eq!(object::meta_str(&obj, "namespace"), None, "{obj:?}");
        }
    }

    /// Applies a patch to a stored object as the store hands it over (its
    /// own name, namespace and resourceVersion, anything else as
    /// generated) and checks the outcome: an object named as the URL says,
    /// or a client error.
    fn check(
        kind: PatchKind,
        doc: Value,
        stored: Value,
        namespaced: bool,
    ) -> Result<(), TestCaseError> {
        let rt = if namespaced {
            resources::find("", "v1", "configmaps").expect("configmaps")
        } else {
            resources::namespaces()
        };
        let ns = namespaced.then_some("default");
        // The object as the store hands it over: its own name,
        // namespace and resourceVersion, anything else as generated.
        let mut current = stored;
        if let Some(obj) = current.as_object_mut() {
            let meta = object::metadata_mut(obj);
            meta.insert("name".into(), json!("a"));
            meta.insert("resourceVersion".into(), json!("5"));
            if let Some(ns) = ns {
                meta.insert("namespace".into(), json!(ns));
            }
        }
        let patched = Patch::parse(kind, doc, rt)
            .and_then(|p| patch_object(rt, ns, "a", current, &p, 64 * 1024));
        match patched {
            Ok(obj) => {
                prop_assert_eq!(object::meta_str(&obj, "name"), Some("a"));
                prop_assert_eq!(
                    object::meta_str(&obj, "namespace").filter(|n| !n.is_empty()),
                    ns
                );
                prop_assert_eq!(&obj["kind"], rt.kind);
            }
            Err(e) => prop_assert!(!e.code().is_server_error(), "{e:?}"),
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_patch_of_any_object_is_applied_or_refused(
            (kind, doc) in patch_document(),
            stored in fuzz::object_value(),
            namespaced in any::<bool>(),
        ) {
            check(kind, doc, stored, namespaced)?;
        }

        /// Apart from the others: one more arm in `patch_document`'s union
        /// overflows a test thread's stack while proptest builds values
        /// (debug build).
        #[test]
        fn any_strategic_patch_of_any_object_is_applied_or_refused(
            doc in fuzz::object_value(),
            stored in fuzz::object_value(),
            namespaced in any::<bool>(),
        ) {
            check(PatchKind::Strategic, doc, stored, namespaced)?;
        }
    }
}

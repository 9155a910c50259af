//! The `scale` subresource as a view of its parent: an `autoscaling/v1`
//! `Scale` read from a deployment, replica set, stateful set or
//! replication controller, and a `Scale` a client wrote turned back into
//! the parent it changes. Pure: the handler reads and writes the parent
//! through the store's one guarded update, with this module's conversions
//! inside it.
//!
//! As kube's `ScaleREST` of each type (`pkg/registry/apps/deployment/
//! storage/storage.go` and its siblings):
//!
//! - a `Scale`'s metadata is the parent's name, namespace, uid,
//!   `resourceVersion` and `creationTimestamp`; `spec.replicas` is the
//!   parent's (`omitempty`: a zero is left out); `status.replicas` the
//!   parent's status, `status.selector` the parent's label selector as
//!   kube prints one (`app=web,tier in (a,b)`; a replication
//!   controller's map selector as `k=v` pairs);
//! - a written `Scale` changes nothing but the parent's `spec.replicas`;
//!   its `metadata.resourceVersion` is the parent write's precondition
//!   (`409` on a mismatch) and its `metadata.uid` one too (kube's
//!   "Precondition failed: UID in precondition" conflict), and replicas
//!   below zero are kube's `422` on `Scale.autoscaling`;
//! - a server-side apply of a `Scale` is applied to the `Scale` with the
//!   managed fields kube's scale handler gives it (the parent's managers
//!   of its replicas, [`managed_fields_to_scale`]), so it conflicts with
//!   them as kube's does, and the result is mapped back onto the parent's
//!   managed fields ([`managed_fields_to_parent`]).

use serde_json::{json, Map, Value};

use crate::kube::apply::fieldpath::{FieldSet, Pe};
use crate::kube::apply::Entry;
use crate::kube::error::{FieldCause, KubeError};
use crate::kube::object;
use crate::kube::resources::ResourceType;

/// The group of a `Scale`.
pub const GROUP: &str = "autoscaling";
/// The version of a `Scale`.
pub const VERSION: &str = "v1";
/// The kind of a `Scale`.
pub const KIND: &str = "Scale";

/// What the replicas of a workload are when its spec leaves them out:
/// kube's defaulting of every scalable type (`SetDefaults_Deployment`
/// and its siblings) stores 1.
const DEFAULT_REPLICAS: i64 = 1;

/// The `Scale` of `rt` as a type: `autoscaling/v1` `Scale`, scoped as its
/// parent. What a patch of a `Scale` is applied as, and what its errors
/// name (`Scale.autoscaling "web" is invalid`).
pub fn scale_type(rt: &ResourceType) -> ResourceType {
    ResourceType {
        group: GROUP,
        version: VERSION,
        kind: KIND,
        custom: None,
        ..*rt
    }
}

/// The group resource kube names a scale by in its own errors
/// (`deployments/scale.apps`, `replicationcontrollers/scale`).
pub fn group_resource(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        format!("{}/scale", rt.plural)
    } else {
        format!("{}/scale.{}", rt.plural, rt.group)
    }
}

/// The `404` of a scale written for a parent that does not exist, as kube
/// words it (`deployments/scale.apps "web" not found`); any other error
/// stays as it is.
pub fn not_found_as_scale(rt: &ResourceType, name: &str, e: KubeError) -> KubeError {
    match e {
        KubeError::NotFound { resource, name: n }
            if resource == rt.group_resource() && n == name =>
        {
            KubeError::NotFound {
                resource: group_resource(rt),
                name: n,
            }
        }
        other => other,
    }
}

/// The `Scale` of `parent` (an object of `rt` as clients see it, with its
/// `resourceVersion`). A selector kube cannot print (an unknown operator)
/// is `400`, as kube answers it.
pub fn scale_of(rt: &ResourceType, parent: &Value) -> Result<Value, KubeError> {
    let meta = parent.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut metadata = Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(field).filter(|v| !v.is_null()) {
            metadata.insert(field.into(), v.clone());
        }
    }
    let paths = rt.custom.and_then(|c| c.scale.as_ref());
    let spec_replicas = paths.map_or("/spec/replicas".to_string(), |p| pointer(&p.spec_replicas));
    let status_replicas = paths.map_or("/status/replicas".to_string(), |p| {
        pointer(&p.status_replicas)
    });
    // A custom type's replicas default to nothing (0), a built-in's to
    // kube's default.
    let default = if paths.is_some() { 0 } else { DEFAULT_REPLICAS };
    let replicas = parent
        .pointer(&spec_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(default);
    let mut spec = Map::new();
    if replicas != 0 {
        spec.insert("replicas".into(), json!(replicas));
    }
    let mut status = Map::new();
    status.insert(
        "replicas".into(),
        json!(parent
            .pointer(&status_replicas)
            .and_then(Value::as_i64)
            .unwrap_or(0)),
    );
    let selector = match paths {
        // A custom type's selector is a string already, where its
        // definition says.
        Some(p) => p
            .label_selector
            .as_deref()
            .and_then(|path| parent.pointer(&pointer(path)))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        None => selector_string(parent.pointer("/spec/selector"))?,
    };
    if !selector.is_empty() {
        status.insert("selector".into(), json!(selector));
    }
    Ok(json!({
        "kind": KIND,
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }))
}

/// A workload's selector as kube's `labels.Selector` prints it:
/// requirements sorted by key, `k=v` for `matchLabels`, `k in (a,b)`,
/// `k notin (a,b)`, `k`, `!k` for `matchExpressions` (values sorted), joined
/// by commas; a replication controller's map selector as `k=v` pairs; an
/// absent or empty selector as nothing.
pub fn selector_string(selector: Option<&Value>) -> Result<String, KubeError> {
    let Some(Value::Object(sel)) = selector else {
        return Ok(String::new());
    };
    let is_label_selector = sel.contains_key("matchLabels") || sel.contains_key("matchExpressions");
    let labels = if is_label_selector {
        sel.get("matchLabels").and_then(Value::as_object)
    } else {
        // A replication controller's selector is the label map itself.
        Some(sel)
    };
    let mut requirements: Vec<(String, String)> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))))
        .collect();
    let expressions = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for expr in expressions {
        let key = expr.get("key").and_then(Value::as_str).unwrap_or("");
        let op = expr.get("operator").and_then(Value::as_str).unwrap_or("");
        let mut values: Vec<&str> = expr
            .get("values")
            .and_then(Value::as_array)
            .map(|vs| vs.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        values.sort_unstable();
        let set = || format!("({})", values.join(","));
        let text = match op {
            "In" | "NotIn" if values.is_empty() => {
                return Err(KubeError::BadRequest(
                    "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
                        .into(),
                ))
            }
            "In" => format!("{key} in {}", set()),
            "NotIn" => format!("{key} notin {}", set()),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(KubeError::BadRequest(
                    "values: Invalid value: values set must be empty for exists and does not exist"
                        .into(),
                ))
            }
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            other => {
                return Err(KubeError::BadRequest(format!(
                    "{} is not a valid label selector operator",
                    json!(other)
                )))
            }
        };
        requirements.push((key.to_string(), text));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    let parts: Vec<String> = requirements.into_iter().map(|(_, text)| text).collect();
    Ok(parts.join(","))
}

/// What a written `Scale` asks of its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleWrite {
    /// The parent's new `spec.replicas`.
    pub replicas: i64,
    /// `metadata.resourceVersion`: the write's precondition.
    pub resource_version: Option<String>,
    /// `metadata.uid`: a precondition too.
    pub uid: Option<String>,
}

/// The `Scale` a client wrote (a `PUT` body, or a `Scale` as a patch left
/// it) for the scale of `rt`'s `name` in `ns`: `kind` and `apiVersion`, when
/// given, are `Scale` and `autoscaling/v1`; the name is the URL's and the
/// namespace too (kube's `400`s); `spec.replicas` an integer (`400`) not
/// below zero (`422`).
pub fn decode(
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    scale: &Map<String, Value>,
) -> Result<ScaleWrite, KubeError> {
    let cannot = |why: &str| {
        KubeError::BadRequest(format!(
            "{KIND} in version \"{VERSION}\" cannot be handled as a {KIND}: {why}"
        ))
    };
    match scale.get("apiVersion") {
        None => {}
        Some(Value::String(v)) if v == &format!("{GROUP}/{VERSION}") => {}
        Some(other) => {
            return Err(KubeError::BadRequest(format!(
                "the API version in the data ({}) does not match the expected API version ({GROUP}/{VERSION})",
                other.as_str().unwrap_or("<not a string>")
            )))
        }
    }
    match scale.get("kind") {
        None => {}
        Some(Value::String(k)) if k == KIND => {}
        Some(other) => {
            return Err(cannot(&format!(
                "the kind in the data ({}) does not match the expected kind ({KIND})",
                other.as_str().unwrap_or("<not a string>")
            )))
        }
    }
    let meta = match scale.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(cannot("metadata must be an object")),
    };
    let text = |field: &str| -> Result<Option<String>, KubeError> {
        match meta.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(cannot(&format!("metadata.{field} must be a string"))),
        }
    };
    let body_name = text("name")?.unwrap_or_default();
    if body_name != name {
        return Err(KubeError::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if let (Some(body_ns), Some(url_ns)) = (text("namespace")?, ns.filter(|_| rt.namespaced)) {
        if body_ns != url_ns {
            return Err(KubeError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
                    .into(),
            ));
        }
    }
    let replicas = match scale.get("spec").and_then(|s| s.get("replicas")) {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n
            .as_i64()
            .filter(|r| i32::try_from(*r).is_ok())
            .ok_or_else(|| cannot("spec.replicas must be a 32-bit integer"))?,
        Some(_) => return Err(cannot("spec.replicas must be a 32-bit integer")),
    };
    if replicas < 0 {
        return Err(KubeError::invalid(
            &scale_type(rt),
            name,
            vec![FieldCause {
                reason: "FieldValueInvalid",
                field: "spec.replicas".into(),
                message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            }],
        ));
    }
    Ok(ScaleWrite {
        replicas,
        resource_version: text("resourceVersion")?,
        uid: text("uid")?,
    })
}

/// The parent (`current`, as stored or as clients see it) with `write`
/// applied: its `spec.replicas` set and its `metadata.resourceVersion`
/// the scale's (the guarded write's precondition; none: the write applies
/// to what is current). A `uid` that is not the parent's is kube's `409`.
pub fn write_to_parent(
    rt: &ResourceType,
    name: &str,
    mut current: Map<String, Value>,
    write: &ScaleWrite,
) -> Result<Map<String, Value>, KubeError> {
    if let Some(uid) = &write.uid {
        let actual = object::meta_str(&current, "uid").unwrap_or("");
        if actual != uid {
            return Err(KubeError::Conflict {
                resource: group_resource(rt),
                name: name.to_string(),
                detail: format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                ),
            });
        }
    }
    let path = rt
        .custom
        .and_then(|c| c.scale.as_ref())
        .map_or_else(|| ".spec.replicas".to_string(), |p| p.spec_replicas.clone());
    set_path(&mut current, &path, json!(write.replicas));
    let meta = object::metadata_mut(&mut current);
    match &write.resource_version {
        Some(rv) => meta.insert("resourceVersion".into(), json!(rv)),
        None => meta.remove("resourceVersion"),
    };
    Ok(current)
}

/// The path of the parent's replicas as managed fields name it
/// (`spec.replicas`, or a custom type's `specReplicasPath`).
fn replicas_path(rt: &ResourceType) -> Vec<Pe> {
    let path = rt
        .custom
        .and_then(|c| c.scale.as_ref())
        .map_or(".spec.replicas", |p| p.spec_replicas.as_str());
    path.trim_start_matches('.')
        .split('.')
        .map(Pe::field)
        .collect()
}

/// `spec.replicas` of a `Scale`.
fn scale_replicas() -> Vec<Pe> {
    vec![Pe::field("spec"), Pe::field("replicas")]
}

fn entries(managed: Option<&Value>) -> Vec<Entry> {
    managed
        .and_then(Value::as_array)
        .map(|es| es.iter().filter_map(Entry::from_json).collect())
        .unwrap_or_default()
}

/// Whether two entries are the same manager's (name, operation and
/// subresource: the `Scale` view changes the apiVersion).
fn same_manager(a: &Entry, b: &Entry) -> bool {
    a.manager == b.manager && a.operation == b.operation && a.subresource == b.subresource
}

/// The managed fields of `rt`'s `Scale` of `parent`, as kube's scale
/// handler makes them for a server-side apply of the scale: every entry
/// of the parent that owns its replicas, as an `autoscaling/v1` entry
/// owning `spec.replicas`.
pub fn managed_fields_to_scale(rt: &ResourceType, parent: &Map<String, Value>) -> Value {
    let path = replicas_path(rt);
    let managed = parent.get("metadata").and_then(|m| m.get("managedFields"));
    let out: Vec<Value> = entries(managed)
        .into_iter()
        .filter(|e| e.fields.has(&path))
        .map(|mut e| {
            let mut fields = FieldSet::new();
            fields.insert(&scale_replicas());
            e.fields = fields;
            e.api_version = format!("{GROUP}/{VERSION}");
            e.to_json()
        })
        .collect();
    Value::Array(out)
}

/// The parent's managed fields after a server-side apply of its `Scale`
/// left the scale's as `scale_managed` (kube's scale handler): a manager
/// of the parent's replicas that no longer owns the scale's loses them
/// (its entry goes if nothing is left), one that still does keeps its
/// entry as it was, and a manager that came to own the scale's replicas
/// gets an entry of the parent's apiVersion owning them.
pub fn managed_fields_to_parent(
    rt: &ResourceType,
    parent: &Map<String, Value>,
    scale_managed: Option<&Value>,
) -> Value {
    let path = replicas_path(rt);
    let mut scale: Vec<Entry> = entries(scale_managed)
        .into_iter()
        .filter(|e| e.fields.has(&scale_replicas()))
        .collect();
    let managed = parent.get("metadata").and_then(|m| m.get("managedFields"));
    let mut out: Vec<Value> = Vec::new();
    for mut e in entries(managed) {
        if !e.fields.has(&path) {
            out.push(e.to_json());
            continue;
        }
        match scale.iter().position(|s| same_manager(s, &e)) {
            Some(i) => {
                scale.remove(i);
                out.push(e.to_json());
            }
            None => {
                let mut gone = FieldSet::new();
                gone.insert(&path);
                e.fields = e.fields.difference(&gone);
                if !e.fields.is_empty() {
                    out.push(e.to_json());
                }
            }
        }
    }
    for mut e in scale {
        let mut fields = FieldSet::new();
        fields.insert(&path);
        e.fields = fields;
        e.api_version = rt.api_version();
        out.push(e.to_json());
    }
    Value::Array(out)
}

/// The JSON pointer of a simple JSON path (`.spec.replicas` → `/spec/replicas`).
fn pointer(path: &str) -> String {
    path.trim_start_matches('.')
        .split('.')
        .fold(String::new(), |p, f| format!("{p}/{f}"))
}

/// Sets the field a simple JSON path names, making the objects on its way.
fn set_path(obj: &mut Map<String, Value>, path: &str, value: Value) {
    let fields: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let Some((last, parents)) = fields.split_last() else {
        return;
    };
    let mut at = obj;
    for f in parents {
        let next = at.entry(f.to_string()).or_insert_with(|| json!({}));
        if !next.is_object() {
            *next = json!({});
        }
        let Value::Object(next) = next else {
            return;
        };
        at = next;
    }
    at.insert(last.to_string(), value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    pub(super) fn deployments() -> &'static ResourceType {
        resources::find("apps", "v1", "deployments").expect("deployments")
    }

    fn web() -> Value {
        json!({
            "kind": "Deployment", "apiVersion": "apps/v1",
            "metadata": {"name": "web", "namespace": "d", "uid": "u-1", "resourceVersion": "42",
                         "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"x": "y"},
                         "generation": 3},
            "spec": {"replicas": 2, "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                    {"key": "canary", "operator": "DoesNotExist"},
                    {"key": "zone", "operator": "NotIn", "values": ["z"]},
                    {"key": "env", "operator": "Exists"}]},
                "template": {"metadata": {"labels": {"app": "web"}}}},
            "status": {"replicas": 1, "readyReplicas": 1},
        })
    }

    #[test]
    fn a_scale_is_its_parents_name_replicas_and_selector() {
        let scale = scale_of(deployments(), &web()).expect("a scale");
        assert_eq!(
            scale,
            json!({
                "kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "web", "namespace": "d", "uid": "u-1", "resourceVersion": "42",
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"replicas": 2},
                "status": {"replicas": 1,
                           "selector": "app=web,!canary,env,tier in (be,fe),zone notin (z)"},
            })
        );
        // Zero replicas are left out of the spec (`omitempty`), a status
        // without replicas says 0, an absent selector is left out, and a
        // spec without replicas has kube's default.
        let idle = json!({"metadata": {"name": "idle"}, "spec": {"replicas": 0}});
        assert_eq!(
            scale_of(deployments(), &idle).expect("a scale"),
            json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": "idle"},
                   "spec": {}, "status": {"replicas": 0}})
        );
        let defaulted = json!({"metadata": {"name": "d"}, "spec": {}});
        assert_eq!(
            scale_of(deployments(), &defaulted).expect("a scale")["spec"]["replicas"],
            1
        );
    }

    #[test]
    fn a_replication_controllers_selector_is_its_label_map() {
        let rc = json!({"metadata": {"name": "rc"},
                        "spec": {"replicas": 3, "selector": {"b": "2", "a": "1"}}});
        assert_eq!(
            scale_of(deployments(), &rc).expect("a scale")["status"]["selector"],
            "a=1,b=2"
        );
    }

    #[test]
    fn a_selector_kube_cannot_print_is_a_bad_request() {
        let mut bad = web();
        bad["spec"]["selector"] = json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        assert_eq!(
            scale_of(deployments(), &bad).map_err(|e| e.to_string()),
            Err("\"Near\" is not a valid label selector operator".to_string())
        );
        bad["spec"]["selector"] = json!({"matchExpressions": [{"key": "a", "operator": "In"}]});
        assert!(matches!(
            scale_of(deployments(), &bad),
            Err(KubeError::BadRequest(_))
        ));
    }

    #[test]
    fn a_written_scale_changes_only_the_parents_replicas() {
        let dep = deployments();
        let body = obj(json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
                              "metadata": {"name": "web", "namespace": "d", "resourceVersion": "42"},
                              "spec": {"replicas": 5}, "status": {"replicas": 99}}));
        let write = decode(dep, Some("d"), "web", &body).expect("a valid scale");
        assert_eq!(
            write,
            ScaleWrite {
                replicas: 5,
                resource_version: Some("42".into()),
                uid: None
            }
        );
        let before = obj(web());
        let after = write_to_parent(dep, "web", before.clone(), &write).expect("written");
        assert_eq!(after["spec"]["replicas"], 5);
        assert_eq!(
            after["metadata"]["resourceVersion"], "42",
            "the precondition"
        );
        assert_eq!(
            after["status"], before["status"],
            "the status is the parent's"
        );
        assert_eq!(after["spec"]["selector"], before["spec"]["selector"]);
        assert_eq!(after["metadata"]["labels"], before["metadata"]["labels"]);
        // Without a resourceVersion the write is unconditional.
        let blind = decode(
            dep,
            Some("d"),
            "web",
            &obj(json!({"metadata": {"name": "web"},
                                                             "spec": {"replicas": 0}})),
        )
        .expect("valid");
        let after = write_to_parent(dep, "web", before, &blind).expect("written");
        assert!(after["metadata"].get("resourceVersion").is_none());
        assert_eq!(after["spec"]["replicas"], 0);
    }

    #[test]
    fn a_written_scale_is_checked_as_kube_checks_it() {
        let dep = deployments();
        let decoded = |v: Value| decode(dep, Some("d"), "web", &obj(v)).map_err(|e| e.to_string());
        let negative = decode(
            dep,
            Some("d"),
            "web",
            &obj(json!({"metadata": {"name": "web"}, "spec": {"replicas": -1}})),
        );
        match negative {
            Err(KubeError::Invalid {
                kind, name, causes, ..
            }) => {
                assert_eq!((kind.as_str(), name.as_str()), ("Scale.autoscaling", "web"));
                assert_eq!(causes[0].field, "spec.replicas");
                assert_eq!(
                    causes[0].message,
                    "Invalid value: -1: must be greater than or equal to 0"
                );
            }
            other => panic!("expected 422, got {other:?}"),
        }
        assert_eq!(
            decoded(json!({"metadata": {"name": "other"}})),
            Err("the name of the object (other) does not match the name on the URL (web)".into())
        );
        assert!(decoded(json!({"metadata": {"name": "web", "namespace": "e"}})).is_err());
        assert!(decoded(json!({"kind": "Deployment", "metadata": {"name": "web"}})).is_err());
        assert!(decoded(json!({"apiVersion": "apps/v1", "metadata": {"name": "web"}})).is_err());
        assert!(decoded(json!({"metadata": {"name": "web"}, "spec": {"replicas": "3"}})).is_err());
        assert!(decoded(
            json!({"metadata": {"name": "web"}, "spec": {"replicas": 3_000_000_000_i64}})
        )
        .is_err());
        // A uid that is not the parent's is kube's conflict on the scale.
        let write = decode(
            dep,
            Some("d"),
            "web",
            &obj(json!({"metadata": {"name": "web", "uid": "u-2"},
                                                              "spec": {"replicas": 1}})),
        )
        .expect("valid");
        match write_to_parent(dep, "web", obj(web()), &write) {
            Err(e @ KubeError::Conflict { .. }) => {
                let KubeError::Conflict {
                    resource, detail, ..
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!(resource, "deployments/scale.apps");
                assert_eq!(
                    detail,
                    "Precondition failed: UID in precondition: u-2, UID in object meta: u-1"
                );
            }
            other => panic!("expected 409, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_parent_is_named_as_kube_names_its_scale() {
        let dep = deployments();
        let e = not_found_as_scale(dep, "web", KubeError::not_found(dep, "web"));
        assert_eq!(e.to_string(), "deployments/scale.apps \"web\" not found");
        let rc = resources::find("", "v1", "replicationcontrollers").expect("rc");
        let e = not_found_as_scale(rc, "a", KubeError::not_found(rc, "a"));
        assert_eq!(
            e.to_string(),
            "replicationcontrollers/scale \"a\" not found"
        );
        // Another object's 404 (a namespace) stays as it was.
        let ns = resources::namespaces();
        let e = not_found_as_scale(dep, "web", KubeError::not_found(ns, "d"));
        assert_eq!(e.to_string(), "namespaces \"d\" not found");
    }
}

/// Property tests: any parent gives a `Scale` or a client error, and any
/// written `Scale` is decoded and applied to any parent, or refused as the
/// client's mistake; a write never changes more than `spec.replicas` and
/// the precondition.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz::{self, assert_client_error};
    use crate::kube::resources;

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_parent_has_a_scale_or_is_a_bad_request(
            parent in fuzz::object_value(),
            selector in fuzz::json_value(),
        ) {
            let mut parent = parent;
            if let Some(spec) = parent.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("selector".into(), selector);
            }
            match scale_of(super::tests::deployments(), &parent) {
                Ok(scale) => {
                    prop_assert_eq!(&scale["kind"], "Scale");
                    prop_assert!(scale["status"]["replicas"].is_i64());
                }
                Err(e) => assert_client_error(&e)?,
            }
        }

        #[test]
        fn any_written_scale_is_applied_or_refused(
            body in fuzz::object_value(),
            parent in fuzz::object_value(),
        ) {
            let rt = resources::find("apps", "v1", "statefulsets").expect("statefulsets");
            let Value::Object(body) = body else { return Ok(()) };
            let Value::Object(parent) = parent else { return Ok(()) };
            let write = match decode(rt, Some("default"), "a", &body) {
                Ok(w) => w,
                Err(e) => return assert_client_error(&e),
            };
            prop_assert!(write.replicas >= 0);
            match write_to_parent(rt, "a", parent.clone(), &write) {
                Ok(after) => {
                    prop_assert_eq!(&after["spec"]["replicas"], &json!(write.replicas));
                    for (k, v) in &parent {
                        if k != "spec" && k != "metadata" {
                            prop_assert_eq!(after.get(k), Some(v));
                        }
                    }
                }
                Err(e) => assert_client_error(&e)?,
            }
        }
    }
}

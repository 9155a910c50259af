//! `metadata`: what every object's metadata must be on a create and on
//! an update, as apimachinery's `api/validation/objectmeta.go` and the
//! apiserver's `rest.BeforeUpdate` decide it, for every served type.
//!
//! - create ([`validate_create`], `ValidateObjectMetaAccessor`): the name
//!   (or `generateName`) by the type's rule, the namespace, labels (keys
//!   qualified names, values label values), annotations (keys qualified
//!   names ignoring case, 256 KiB in all), owner references, finalizers;
//!   one cause per problem, worded as kube words them;
//! - update ([`before_update`], then [`validate_update`],
//!   `ValidateObjectMetaAccessorUpdate`): the server's own fields carried
//!   from the stored object first, as `rest.BeforeUpdate` does: an empty
//!   `uid` is the stored one, `creationTimestamp` is always the stored one
//!   (kube silently ignores a changed one: it never reaches validation),
//!   a set `deletionTimestamp` stays, an absent
//!   `deletionGracePeriodSeconds` is the stored one. What is left to
//!   differ is refused: a different `uid`, a `deletionTimestamp` or
//!   `deletionGracePeriodSeconds` a live object did not have or another
//!   value of it (`field is immutable`); labels, annotations, owner
//!   references and finalizers are checked as on a create (kube's
//!   `validateCommonFields` runs the create rules too).
//!
//! A `PUT` whose body names a `uid` makes it a precondition (a `409`,
//! decided against the stored object by the store) before any of this
//! runs, as kube's update handler does; a patch that changes the `uid`
//! meets the `422` here.

use serde_json::{json, Map, Value};

use crate::kube::error::{BadValue, FieldCause};
use crate::kube::names;
use crate::kube::names::{name_errors, NameRule};

/// kube's `TotalAnnotationSizeLimitB`: the keys and values of an object's
/// annotations, 256 KiB in all.
pub const TOTAL_ANNOTATION_SIZE: usize = 256 * 1024;

/// kube's `FieldImmutableErrorMsg`.
pub const FIELD_IMMUTABLE: &str = "field is immutable";

const FINALIZER_ORPHAN: &str = "orphan";
const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// The object's `metadata` (present after `object::decode_body`).
pub fn metadata_mut(obj: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

fn meta(obj: &Map<String, Value>) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_str<'a>(m: Option<&'a Map<String, Value>>, field: &str) -> &'a str {
    m.and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// What metadata validation needs to know of a type: the rule for its
/// objects' names and whether they live in a namespace
/// (`ResourceType::name_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameScope {
    pub rule: NameRule,
    pub namespaced: bool,
}

/// `ValidateObjectMetaAccessor`: the metadata of an object about to be
/// created under `name` and `namespace` (already resolved by admission).
pub fn validate_create(
    scope: NameScope,
    obj: &Map<String, Value>,
    name: &str,
    namespace: Option<&str>,
) -> Vec<FieldCause> {
    let m = meta(obj);
    let mut causes = Vec::new();
    let generate_name = meta_str(m, "generateName");
    if !generate_name.is_empty() {
        for msg in name_errors(scope.rule, generate_name, true) {
            causes.push(FieldCause::invalid(
                "metadata.generateName",
                generate_name,
                &msg,
            ));
        }
    }
    causes.extend(name_and_namespace(scope, name, namespace));
    causes.extend(labels_annotations_and_references(m));
    causes.extend(finalizers(m));
    causes
}

/// The name by the type's rule and the namespace (required for a
/// namespaced type, a DNS label).
pub fn name_and_namespace(
    scope: NameScope,
    name: &str,
    namespace: Option<&str>,
) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(FieldCause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for msg in name_errors(scope.rule, name, false) {
            causes.push(FieldCause::invalid("metadata.name", name, &msg));
        }
    }
    if scope.namespaced {
        match namespace {
            None | Some("") => causes.push(FieldCause::required("metadata.namespace", "")),
            Some(ns) => {
                for msg in names::dns1123_label(ns) {
                    causes.push(FieldCause::invalid("metadata.namespace", ns, &msg));
                }
            }
        }
    }
    causes
}

/// `rest.BeforeUpdate`'s part of the metadata: the fields the server owns,
/// carried from the stored object `old` into `new` before it is validated.
pub fn before_update(old: &Map<String, Value>, new: &mut Map<String, Value>) {
    let empty = Map::new();
    let old_meta = meta(old).unwrap_or(&empty);
    let meta = metadata_mut(new);
    if meta_str(Some(meta), "uid").is_empty() {
        match old_meta.get("uid") {
            Some(uid) => meta.insert("uid".into(), uid.clone()),
            None => meta.remove("uid"),
        };
    }
    // As kube: a changed creationTimestamp is ignored, not refused.
    match old_meta.get("creationTimestamp") {
        Some(t) if !t.is_null() => meta.insert("creationTimestamp".into(), t.clone()),
        _ => meta.remove("creationTimestamp"),
    };
    if let Some(t) = old_meta.get("deletionTimestamp").filter(|t| !t.is_null()) {
        meta.insert("deletionTimestamp".into(), t.clone());
    }
    let new_grace = meta
        .get("deletionGracePeriodSeconds")
        .is_some_and(|v| !v.is_null());
    if let Some(g) = old_meta
        .get("deletionGracePeriodSeconds")
        .filter(|g| !g.is_null())
    {
        if !new_grace {
            meta.insert("deletionGracePeriodSeconds".into(), g.clone());
        }
    }
}

/// `ValidateObjectMetaAccessorUpdate` (after [`before_update`]): what the
/// update may not change, and the labels, annotations, owner references
/// and finalizers as on a create.
pub fn validate_update(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<FieldCause> {
    let (old_m, new_m) = (meta(old), meta(new));
    let mut causes = Vec::new();
    let field = |m: Option<&Map<String, Value>>, f: &str| -> Option<Value> {
        m.and_then(|m| m.get(f)).filter(|v| !v.is_null()).cloned()
    };
    for f in [
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        let (before, after) = (field(old_m, f), field(new_m, f));
        if before != after {
            let shown = match &after {
                Some(v) if f.ends_with("Timestamp") => BadValue::Go(go_time(v)),
                Some(v) => BadValue::of_json(v),
                // A nil pointer, or an empty string.
                None if f == "namespace" || f == "uid" => BadValue::Str(String::new()),
                None => BadValue::Str("null".into()),
            };
            causes.push(FieldCause::invalid_value(
                &format!("metadata.{f}"),
                shown,
                FIELD_IMMUTABLE,
            ));
        }
    }
    causes.extend(labels_annotations_and_references(new_m));
    causes.extend(finalizers(new_m));
    causes
}

/// A timestamp as Go prints a `metav1.Time` (`time.Time.String()`):
/// `2024-01-02 03:04:05 +0000 UTC`.
fn go_time(v: &Value) -> String {
    match v
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
    {
        Some(t) => t
            .with_timezone(&chrono::Utc)
            .format("%Y-%m-%d %H:%M:%S +0000 UTC")
            .to_string(),
        None => v.to_string(),
    }
}

/// Labels, annotations and owner references, on a create and an update.
fn labels_annotations_and_references(m: Option<&Map<String, Value>>) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if let Some(labels) = m.and_then(|m| m.get("labels")).and_then(Value::as_object) {
        causes.extend(validate_labels(labels, "metadata.labels"));
    }
    if let Some(annotations) = m
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        causes.extend(validate_annotations(annotations, "metadata.annotations"));
    }
    if let Some(refs) = m
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
    {
        causes.extend(owner_references(refs));
    }
    causes
}

/// `ValidateLabels`: each key a qualified name, each value a label value;
/// every cause names `field` (kube's path is the map's, not the key's).
pub fn validate_labels(labels: &Map<String, Value>, field: &str) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    for (k, v) in labels {
        for msg in names::qualified_name(k) {
            causes.push(FieldCause::invalid(field, k, &msg));
        }
        let value = v.as_str().unwrap_or("");
        for msg in names::label_value(value) {
            causes.push(FieldCause::invalid(field, value, &msg));
        }
    }
    causes
}

/// `ValidateAnnotations`: each key a qualified name (case ignored), all
/// keys and values 256 KiB at most.
pub fn validate_annotations(annotations: &Map<String, Value>, field: &str) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let mut total = 0usize;
    for (k, v) in annotations {
        for msg in names::qualified_name(&k.to_lowercase()) {
            causes.push(FieldCause::invalid(field, k, &msg));
        }
        total = total
            .saturating_add(k.len())
            .saturating_add(v.as_str().map_or(0, str::len));
    }
    if total > TOTAL_ANNOTATION_SIZE {
        causes.push(FieldCause::too_long(field, TOTAL_ANNOTATION_SIZE));
    }
    causes
}

/// `ValidateOwnerReferences`: each names an apiVersion with a version, a
/// kind, a name and a uid; an `Event` is never an owner; at most one is
/// the controller.
fn owner_references(refs: &[Value]) -> Vec<FieldCause> {
    let path = "metadata.ownerReferences";
    let mut causes = Vec::new();
    let mut controller: Option<String> = None;
    for r in refs {
        let text = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
        let api_version = text("apiVersion");
        // `ParseGroupVersion`: `v1`, `apps/v1`; more slashes parse as
        // nothing.
        let (group, version) = match api_version.split('/').collect::<Vec<_>>()[..] {
            [version] => ("", version),
            [group, version] => (group, version),
            _ => ("", ""),
        };
        if version.is_empty() {
            causes.push(FieldCause::invalid(
                &format!("{path}.apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        if text("kind").is_empty() {
            causes.push(FieldCause::invalid(
                &format!("{path}.kind"),
                "",
                "kind must not be empty",
            ));
        }
        if text("name").is_empty() {
            causes.push(FieldCause::invalid(
                &format!("{path}.name"),
                "",
                "name must not be empty",
            ));
        }
        if text("uid").is_empty() {
            causes.push(FieldCause::invalid(
                &format!("{path}.uid"),
                "",
                "uid must not be empty",
            ));
        }
        if group.is_empty() && version == "v1" && text("kind") == "Event" {
            causes.push(FieldCause::invalid_value(
                path,
                BadValue::Go(r.to_string()),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let this = format!("{}/{}", text("kind"), text("name"));
            match &controller {
                Some(first) => causes.push(FieldCause::invalid_value(
                    path,
                    BadValue::Go(Value::Array(refs.to_vec()).to_string()),
                    &format!("Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"),
                )),
                None => controller = Some(this),
            }
        }
    }
    causes
}

/// `ValidateFinalizers` (a create's): each a qualified name, and not both
/// `orphan` and `foregroundDeletion`.
fn finalizers(m: Option<&Map<String, Value>>) -> Vec<FieldCause> {
    let path = "metadata.finalizers";
    let Some(list) = m
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    for f in &names {
        for msg in names::qualified_name(f) {
            causes.push(FieldCause::invalid(path, f, &msg));
        }
    }
    if names.contains(&FINALIZER_ORPHAN) && names.contains(&FINALIZER_FOREGROUND) {
        causes.push(FieldCause::invalid_value(
            path,
            BadValue::Go(format!(
                "[]string{{{}}}",
                names
                    .iter()
                    .map(|f| crate::kube::error::go_quote(f))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kube::resources;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object literal"),
        }
    }

    fn cm() -> &'static crate::kube::resources::ResourceType {
        resources::find("", "v1", "configmaps").expect("configmaps")
    }

    fn messages(causes: &[FieldCause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn labels_are_checked_key_and_value_with_kubes_words() {
        let o = obj(json!({"metadata": {"name": "a", "labels": {
            "app": "web", "example.com/tier": "", "bad key": "x", "ok": "bad value!"
        }}}));
        let causes = validate_create(cm().name_scope(), &o, "a", Some("default"));
        let m = messages(&causes);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].starts_with("metadata.labels: Invalid value: \"bad key\": name part must consist of alphanumeric characters"), "{m:?}");
        assert!(m[1].starts_with("metadata.labels: Invalid value: \"bad value!\": a valid label must be an empty string"), "{m:?}");
        assert!(causes.iter().all(|c| c.reason == "FieldValueInvalid"));
    }

    #[test]
    fn annotations_ignore_case_and_are_bounded_in_all() {
        let ok = obj(json!({"metadata": {"annotations": {"Example.COM/Key": "v"}}}));
        assert!(validate_create(cm().name_scope(), &ok, "a", Some("default")).is_empty());
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE);
        let o = obj(json!({"metadata": {"annotations": {"a": big}}}));
        let causes = validate_create(cm().name_scope(), &o, "a", Some("default"));
        assert_eq!(
            messages(&causes),
            ["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
        assert_eq!(causes[0].reason, "FieldValueTooLong");
    }

    #[test]
    fn names_generate_names_and_namespaces() {
        let o = obj(json!({"metadata": {"generateName": "web-"}}));
        assert!(validate_create(cm().name_scope(), &o, "web-abcde", Some("default")).is_empty());
        let o = obj(json!({"metadata": {"generateName": "Web-"}}));
        let m = messages(&validate_create(
            cm().name_scope(),
            &o,
            "Web-abcde",
            Some("default"),
        ));
        assert!(
            m[0].starts_with(
                "metadata.generateName: Invalid value: \"Web-\": a lowercase RFC 1123 subdomain"
            ),
            "{m:?}"
        );
        assert!(
            m[1].starts_with("metadata.name: Invalid value: \"Web-abcde\""),
            "{m:?}"
        );
        let m = messages(&name_and_namespace(cm().name_scope(), "a", None));
        assert_eq!(m, ["metadata.namespace: Required value"]);
        let events = resources::find("", "v1", "events").expect("events");
        let m = messages(&name_and_namespace(
            events.name_scope(),
            "a/%",
            Some("default"),
        ));
        assert_eq!(
            m,
            [
                "metadata.name: Invalid value: \"a/%\": may not contain '/'",
                "metadata.name: Invalid value: \"a/%\": may not contain '%'"
            ]
        );
    }

    #[test]
    fn owner_references_and_finalizers() {
        let o = obj(json!({"metadata": {
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true},
                {"apiVersion": "apps/", "kind": "", "name": "", "uid": "", "controller": true}
            ],
            "finalizers": ["orphan", "foregroundDeletion", "bad/fin/alizer"]
        }}));
        let m = messages(&validate_create(
            cm().name_scope(),
            &o,
            "a",
            Some("default"),
        ));
        assert_eq!(m[0], "metadata.ownerReferences.apiVersion: Invalid value: \"apps/\": version must not be empty");
        assert_eq!(
            m[1],
            "metadata.ownerReferences.kind: Invalid value: \"\": kind must not be empty"
        );
        assert!(m[4].contains("Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/r and /"), "{m:?}");
        assert!(
            m[5].starts_with(
                "metadata.finalizers: Invalid value: \"bad/fin/alizer\": a qualified name"
            ),
            "{m:?}"
        );
        assert_eq!(m[6], "metadata.finalizers: Invalid value: []string{\"orphan\", \"foregroundDeletion\", \"bad/fin/alizer\"}: finalizer orphan and foregroundDeletion cannot be both set");
    }

    #[test]
    fn an_update_keeps_server_fields_and_refuses_a_changed_uid() {
        let old = obj(
            json!({"metadata": {"name": "a", "uid": "u1", "creationTimestamp": "2024-01-02T03:04:05Z"}}),
        );
        // No uid: the stored one. Another creationTimestamp: ignored.
        let mut new =
            obj(json!({"metadata": {"name": "a", "creationTimestamp": "2030-01-01T00:00:00Z"}}));
        before_update(&old, &mut new);
        assert_eq!(new["metadata"]["uid"], "u1");
        assert_eq!(new["metadata"]["creationTimestamp"], "2024-01-02T03:04:05Z");
        assert!(validate_update(&old, &new).is_empty());
        // Another uid: 422.
        let mut forged = obj(json!({"metadata": {"name": "a", "uid": "u2"}}));
        before_update(&old, &mut forged);
        let causes = validate_update(&old, &forged);
        assert_eq!(
            messages(&causes),
            ["metadata.uid: Invalid value: \"u2\": field is immutable"]
        );
        // A live object cannot be given a deletionTimestamp by an update.
        let mut deleting = obj(
            json!({"metadata": {"name": "a", "deletionTimestamp": "2024-05-06T07:08:09Z", "deletionGracePeriodSeconds": 30}}),
        );
        before_update(&old, &mut deleting);
        assert_eq!(
            messages(&validate_update(&old, &deleting)),
            [
                "metadata.deletionTimestamp: Invalid value: 2024-05-06 07:08:09 +0000 UTC: field is immutable",
                "metadata.deletionGracePeriodSeconds: Invalid value: 30: field is immutable"
            ]
        );
        // One being deleted keeps its timestamp and grace period.
        let dying = obj(
            json!({"metadata": {"name": "a", "uid": "u1", "deletionTimestamp": "2024-05-06T07:08:09Z", "deletionGracePeriodSeconds": 0}}),
        );
        let mut cleared = obj(json!({"metadata": {"name": "a"}}));
        before_update(&dying, &mut cleared);
        assert_eq!(
            cleared["metadata"]["deletionTimestamp"],
            "2024-05-06T07:08:09Z"
        );
        assert_eq!(cleared["metadata"]["deletionGracePeriodSeconds"], 0);
        assert!(validate_update(&dying, &cleared).is_empty());
        // Labels are checked on an update too.
        let mut labelled = obj(json!({"metadata": {"name": "a", "labels": {"-x": "y"}}}));
        before_update(&old, &mut labelled);
        assert_eq!(validate_update(&old, &labelled)[0].field, "metadata.labels");
    }
}

//! What a CustomResourceDefinition may be, and the status kube's
//! controllers would give it, set in the write that stores it.
//!
//! - [`prepare_create`] and [`prepare_update`]: kube's defaults
//!   (`singular` and `listKind` from the kind, `conversion: None`), the
//!   cleanup finalizer on a new definition, and `status.storedVersions`
//!   (every version ever stored in, the storage version added);
//! - [`validate`]: kube's `ValidateCustomResourceDefinition` rules that
//!   matter to a client: the name is `<plural>.<group>`, the group a
//!   domain, the names DNS labels, the scope known, exactly one storage
//!   version among unique, DNS-label versions, a `None` conversion, and
//!   the immutable group, plural and scope;
//! - [`accept_names`]: the naming controller's verdict, against the types
//!   the node serves: `NamesAccepted` and `Established` true (the
//!   definition is served from this revision on), or false with the name
//!   already in use, as kube words it.

use serde_json::{json, Map, Value};

use crate::kube::builtin::path::Path;
use crate::kube::crd::CLEANUP_FINALIZER;
use crate::kube::error::{BadValue, FieldCause};
use crate::kube::names;
use crate::kube::object;
use crate::kube::resources::TypeSet;
use crate::kube::structural::StructuralSchema;

/// A new definition: defaults, the cleanup finalizer, its stored version.
pub fn prepare_create(obj: &mut Map<String, Value>) {
    apply_defaults(obj);
    let meta = object::metadata_mut(obj);
    let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Value::Array(fs) = finalizers {
        if !fs.iter().any(|f| f == CLEANUP_FINALIZER) {
            fs.push(json!(CLEANUP_FINALIZER));
        }
    }
    obj.insert(
        "status".into(),
        json!({ "acceptedNames": { "kind": "", "plural": "" }, "conditions": [], "storedVersions": [] }),
    );
    add_stored_version(obj);
}

/// An update of a stored definition: defaults, and the stored versions
/// kept and grown (its status is the server's: kept from `old` by the
/// status subresource's rules).
pub fn prepare_update(old: &Map<String, Value>, new: &mut Map<String, Value>) {
    apply_defaults(new);
    if let Some(stored) = old.get("status").and_then(|s| s.get("storedVersions")) {
        let status = new.entry("status").or_insert_with(|| json!({}));
        if let Value::Object(status) = status {
            status
                .entry("storedVersions")
                .or_insert_with(|| stored.clone());
        }
    }
    add_stored_version(new);
}

fn apply_defaults(obj: &mut Map<String, Value>) {
    let Some(Value::Object(spec)) = obj.get_mut("spec") else {
        return;
    };
    if let Some(Value::Object(names)) = spec.get_mut("names") {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if names
            .get("singular")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if names
            .get("listKind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
            && !kind.is_empty()
        {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    spec.entry("conversion")
        .or_insert_with(|| json!({ "strategy": "None" }));
    if let Some(Value::Array(versions)) = spec.get_mut("versions") {
        for v in versions.iter_mut().filter_map(Value::as_object_mut) {
            v.entry("served").or_insert(json!(false));
            v.entry("storage").or_insert(json!(false));
        }
    }
}

/// Adds the storage version to `status.storedVersions`, once.
fn add_stored_version(obj: &mut Map<String, Value>) {
    let storage = obj
        .get("spec")
        .and_then(|s| s.get("versions"))
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .and_then(|v| v["name"].as_str())
        .map(str::to_string);
    let Some(storage) = storage else {
        return;
    };
    let status = obj.entry("status").or_insert_with(|| json!({}));
    let Value::Object(status) = status else {
        return;
    };
    let stored = status.entry("storedVersions").or_insert_with(|| json!([]));
    if let Value::Array(list) = stored {
        if !list.iter().any(|v| v == storage.as_str()) {
            list.push(json!(storage));
        }
    } else {
        *stored = json!([storage]);
    }
}

/// kube's rules for a definition (`name` is its `metadata.name`).
pub fn validate(obj: &Map<String, Value>, name: &str) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let sp = Path::new("spec");
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec
        .pointer("/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(FieldCause::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        causes.push(FieldCause::required(sp.child("group").as_str(), ""));
    } else {
        let errs = names::dns1123_subdomain(group);
        if !errs.is_empty() {
            causes.push(FieldCause::invalid(
                sp.child("group").as_str(),
                group,
                &errs.join(","),
            ));
        } else if !group.contains('.') {
            causes.push(FieldCause::invalid(
                sp.child("group").as_str(),
                group,
                "should be a domain with at least one dot",
            ));
        }
    }
    match spec["scope"].as_str().unwrap_or("") {
        "Namespaced" | "Cluster" => {}
        "" => causes.push(FieldCause::required(sp.child("scope").as_str(), "")),
        other => causes.push(FieldCause::not_supported(
            sp.child("scope").as_str(),
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    validate_names(&spec["names"], &sp.child("names"), &mut causes);
    validate_versions(&spec, &sp, &mut causes);
    let strategy = spec
        .pointer("/conversion/strategy")
        .and_then(Value::as_str)
        .unwrap_or("None");
    if strategy != "None" {
        causes.push(FieldCause::not_supported(
            sp.at(&["conversion", "strategy"]).as_str(),
            strategy,
            &["None"],
        ));
    }
    causes
}

/// The rules an update adds: group, plural and scope stay as they were.
pub fn validate_update(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    for (pointer, field) in [
        ("/spec/group", "spec.group"),
        ("/spec/names/plural", "spec.names.plural"),
        ("/spec/scope", "spec.scope"),
    ] {
        let get = |o: &Map<String, Value>| {
            Value::Object(o.clone())
                .pointer(pointer)
                .cloned()
                .unwrap_or(Value::Null)
        };
        let (before, after) = (get(old), get(new));
        if before != after {
            causes.push(FieldCause::invalid_value(
                field,
                BadValue::of_json(&after),
                "field is immutable",
            ));
        }
    }
    causes
}

fn validate_names(names: &Value, at: &Path, causes: &mut Vec<FieldCause>) {
    for (field, lower) in [
        ("plural", false),
        ("singular", false),
        ("kind", true),
        ("listKind", true),
    ] {
        let value = names[field].as_str().unwrap_or("");
        let p = at.child(field);
        if value.is_empty() {
            if field != "singular" {
                causes.push(FieldCause::required(p.as_str(), ""));
            }
            continue;
        }
        let checked = if lower {
            value.to_lowercase()
        } else {
            value.to_string()
        };
        let errs = names::dns1035_label(&checked);
        if !errs.is_empty() {
            causes.push(FieldCause::invalid(p.as_str(), value, &errs.join(",")));
        }
    }
    if let Some(shorts) = names["shortNames"].as_array() {
        for (i, s) in shorts.iter().enumerate() {
            let s = s.as_str().unwrap_or("");
            let errs = names::dns1035_label(s);
            if !errs.is_empty() {
                causes.push(FieldCause::invalid(
                    at.child("shortNames").index(i).as_str(),
                    s,
                    &errs.join(","),
                ));
            }
        }
    }
}

fn validate_versions(spec: &Value, at: &Path, causes: &mut Vec<FieldCause>) {
    let vp = at.child("versions");
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(FieldCause::required(
            vp.as_str(),
            "must have at least one version",
        ));
        return;
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let schema_at = vp.index(i).at(&["schema", "openAPIV3Schema"]);
        match v.pointer("/schema/openAPIV3Schema") {
            None | Some(Value::Null) => causes.push(FieldCause::required(
                schema_at.as_str(),
                "schemas are required",
            )),
            Some(schema) => {
                if let Err(found) = StructuralSchema::new(schema, schema_at.as_str()) {
                    causes.extend(found);
                }
            }
        }
        let name = v["name"].as_str().unwrap_or("");
        let p = vp.index(i).child("name");
        if name.is_empty() {
            causes.push(FieldCause::required(p.as_str(), ""));
            continue;
        }
        let errs = names::dns1035_label(name);
        if !errs.is_empty() {
            causes.push(FieldCause::invalid(p.as_str(), name, &errs.join(",")));
        }
        if seen.contains(&name) {
            causes.push(FieldCause::duplicate(
                p.as_str(),
                BadValue::Str(name.into()),
            ));
        }
        seen.push(name);
    }
    let storage = versions.iter().filter(|v| v["storage"] == true).count();
    if storage != 1 {
        causes.push(FieldCause::invalid_value(
            vp.as_str(),
            BadValue::of_json(&spec["versions"]),
            "must have exactly one version marked as storage version",
        ));
    }
}

/// Sets `status.acceptedNames` and the `NamesAccepted` and `Established`
/// conditions of a definition about to be written, against the types
/// `served` (without this definition's own): true when its plural, kind
/// and short names are free in its group, else false with the name
/// already in use.
pub fn accept_names(obj: &mut Map<String, Value>, served: &TypeSet) {
    let name = object::meta_str(obj, "name").unwrap_or("").to_string();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let group = spec["group"].as_str().unwrap_or("");
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("");
    let kind = names["kind"].as_str().unwrap_or("");
    let others: Vec<_> = served
        .iter()
        .filter(|rt| rt.group == group)
        .filter(|rt| rt.custom.is_none_or(|c| c.definition != name))
        .collect();
    let conflict = if others.iter().any(|rt| rt.plural == plural) {
        Some(("PluralConflict", format!("{plural:?} is already in use")))
    } else if others.iter().any(|rt| rt.kind == kind) {
        Some(("KindConflict", format!("{kind:?} is already in use")))
    } else {
        names["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|s| others.iter().any(|rt| rt.short_names.contains(s)))
            .map(|s| ("ShortNamesConflict", format!("{s:?} is already in use")))
    };
    let now = object::now_rfc3339();
    let old_conditions = obj
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let condition = |kind: &str, ok: bool, reason: &str, message: &str| {
        // The transition time moves only when the status does.
        let since = old_conditions
            .iter()
            .find(|c| c["type"] == kind && c["status"] == if ok { "True" } else { "False" })
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map(str::to_string)
            .unwrap_or_else(|| now.clone());
        json!({
            "type": kind,
            "status": if ok { "True" } else { "False" },
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        })
    };
    let (accepted, established) = match &conflict {
        None => (
            condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
            condition(
                "Established",
                true,
                "InitialNamesAccepted",
                "the initial names have been accepted",
            ),
        ),
        Some((reason, message)) => (
            condition("NamesAccepted", false, reason, message),
            condition(
                "Established",
                false,
                "NotAccepted",
                "not all names are accepted",
            ),
        ),
    };
    let mut conditions: Vec<Value> = old_conditions
        .into_iter()
        .filter(|c| c["type"] != "NamesAccepted" && c["type"] != "Established")
        .collect();
    conditions.insert(0, established);
    conditions.insert(0, accepted);
    let status = obj.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    if conflict.is_none() {
        let mut accepted_names = names.clone();
        if let Value::Object(n) = &mut accepted_names {
            n.retain(|k, _| {
                [
                    "plural",
                    "singular",
                    "shortNames",
                    "kind",
                    "listKind",
                    "categories",
                ]
                .contains(&k.as_str())
            });
        }
        status["acceptedNames"] = accepted_names;
    }
    status["conditions"] = Value::Array(conditions);
}

/// A definition being deleted: its `Terminating` condition, as kube's
/// finalizer controller sets it while it deletes the objects.
pub fn mark_terminating(obj: &mut Map<String, Value>) {
    let status = obj.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let mut conditions: Vec<Value> = status["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["type"] != "Terminating")
        .collect();
    conditions.push(json!({
        "type": "Terminating",
        "status": "True",
        "lastTransitionTime": object::now_rfc3339(),
        "reason": "InstanceDeletionInProgress",
        "message": "CustomResource deletion is in progress",
    }));
    status["conditions"] = Value::Array(conditions);
}

//! Kubernetes objects as JSON: decoding request bodies, validating names,
//! and the fields the server sets (uid, creationTimestamp, generation,
//! generateName, resourceVersion on read).

use serde_json::{json, Map, Value};

use crate::kube::error::{FieldCause, KubeError};
use crate::kube::resources::{NameRule, ResourceType};

const GENERATE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const GENERATE_SUFFIX_LEN: usize = 5;
const MAX_NAME_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

/// Parses a request body into a JSON object of the type `rt`, checking
/// `kind`/`apiVersion` when present (kube defaults them from the URL).
pub fn decode_body(rt: &ResourceType, body: &[u8]) -> Result<Map<String, Value>, KubeError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        KubeError::BadRequest(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let Value::Object(mut obj) = value else {
        return Err(KubeError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: the body is not a JSON object",
            rt.kind, rt.version, rt.kind
        )));
    };
    match obj.get("apiVersion") {
        None => {}
        Some(Value::String(v)) if *v == rt.api_version() => {}
        Some(other) => {
            return Err(KubeError::BadRequest(format!(
                "the API version in the data ({}) does not match the expected API version ({})",
                other.as_str().unwrap_or("<not a string>"),
                rt.api_version()
            )))
        }
    }
    match obj.get("kind") {
        None => {}
        Some(Value::String(k)) if k == rt.kind => {}
        Some(other) => {
            return Err(KubeError::BadRequest(format!(
                "{} in version \"{}\" cannot be handled as a {}: the kind in the data ({}) does not match the expected kind ({})",
                rt.kind,
                rt.version,
                rt.kind,
                other.as_str().unwrap_or("<not a string>"),
                rt.kind
            )))
        }
    }
    match obj.get("metadata") {
        None => {
            obj.insert("metadata".into(), json!({}));
        }
        Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(KubeError::BadRequest(format!(
                "{} in version \"{}\" cannot be handled as a {}: metadata must be an object",
                rt.kind, rt.version, rt.kind
            )))
        }
    }
    obj.insert("kind".into(), json!(rt.kind));
    obj.insert("apiVersion".into(), json!(rt.api_version()));
    Ok(obj)
}

/// The object's `metadata` (present after [`decode_body`]).
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

pub fn meta_str<'a>(obj: &'a Map<String, Value>, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// A `generateName` with a random suffix, as kube builds it.
pub fn generate_name(base: &str) -> String {
    let base: String = base
        .chars()
        .take(MAX_NAME_LEN - GENERATE_SUFFIX_LEN)
        .collect();
    let suffix: String = (0..GENERATE_SUFFIX_LEN)
        .map(|_| GENERATE_ALPHABET[rand::random_range(0..GENERATE_ALPHABET.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

fn is_label(s: &str, first_may_be_digit: bool) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_LABEL_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && (bytes[0].is_ascii_lowercase() || (first_may_be_digit && bytes[0].is_ascii_digit()))
        && bytes[bytes.len() - 1] != b'-'
}

/// Checks a name against the type's rule; the messages are kube's.
pub fn validate_name(rule: NameRule, name: &str) -> Result<(), String> {
    match rule {
        NameRule::Subdomain => {
            if name.len() > MAX_NAME_LEN {
                return Err(format!("must be no more than {MAX_NAME_LEN} characters"));
            }
            if !name.split('.').all(|part| is_label(part, true)) {
                return Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
            }
            Ok(())
        }
        NameRule::Label => {
            if name.len() > MAX_LABEL_LEN {
                return Err(format!("must be no more than {MAX_LABEL_LEN} characters"));
            }
            if !is_label(name, true) {
                return Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into());
            }
            Ok(())
        }
        NameRule::Rfc1035Label => {
            if name.len() > MAX_LABEL_LEN {
                return Err(format!("must be no more than {MAX_LABEL_LEN} characters"));
            }
            if !is_label(name, false) {
                return Err("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into());
            }
            Ok(())
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                return Err(format!("may not be '{name}'"));
            }
            if name.contains('/') || name.contains('%') {
                return Err("may not contain '/' or '%'".into());
            }
            Ok(())
        }
    }
}

/// Validates the name (and namespace) of an object about to be written.
pub fn validate_object_meta(
    rt: &ResourceType,
    name: &str,
    namespace: Option<&str>,
) -> Result<(), KubeError> {
    let mut causes = Vec::new();
    if let Err(detail) = validate_name(rt.name_rule, name) {
        causes.push(FieldCause::invalid("metadata.name", name, &detail));
    }
    if rt.namespaced {
        match namespace {
            None | Some("") => causes.push(FieldCause::required("metadata.namespace", "")),
            Some(ns) => {
                if let Err(detail) = validate_name(NameRule::Label, ns) {
                    causes.push(FieldCause::invalid("metadata.namespace", ns, &detail));
                }
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(KubeError::invalid(rt, name, causes))
    }
}

/// Now, as kube writes timestamps (RFC 3339, seconds, UTC).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Prepares a new object for storage: server-set fields in, resourceVersion
/// out (it is the revision, filled in on read).
pub fn prepare_create(rt: &ResourceType, obj: &mut Map<String, Value>) {
    let meta = metadata_mut(obj);
    meta.remove("resourceVersion");
    meta.remove("selfLink");
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
    if rt.tracks_generation {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if rt.plural == "namespaces" {
        let spec = obj.entry("spec").or_insert_with(|| json!({}));
        if !spec.is_object() {
            *spec = json!({});
        }
        if spec.get("finalizers").is_none() {
            spec["finalizers"] = json!(["kubernetes"]);
        }
        obj.insert("status".into(), json!({ "phase": "Active" }));
    }
}

/// Carries the immutable and server-owned fields of `old` into an update,
/// and bumps `generation` when `spec` changed.
/// Which part of an object an update writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateScope {
    /// The object (`PUT <name>`): for a type with a status subresource,
    /// the stored status is kept.
    Object,
    /// Only its status (`PUT <name>/status`): everything else is kept.
    Status,
}

/// Turns the body of an update into the object to store, from the stored
/// one (`old`) and what `scope` lets the update change.
pub fn prepare_update_in(
    rt: &ResourceType,
    scope: UpdateScope,
    old: &Map<String, Value>,
    new: &mut Map<String, Value>,
) {
    match scope {
        UpdateScope::Status => {
            let status = new.remove("status");
            let mut kept = old.clone();
            match status {
                Some(status) => kept.insert("status".into(), status),
                None => kept.remove("status"),
            };
            *new = kept;
            metadata_mut(new).remove("resourceVersion");
        }
        UpdateScope::Object => {
            prepare_update(rt, old, new);
            if rt.has_status_subresource() {
                match old.get("status") {
                    Some(status) => new.insert("status".into(), status.clone()),
                    None => new.remove("status"),
                };
            }
        }
    }
}

pub fn prepare_update(rt: &ResourceType, old: &Map<String, Value>, new: &mut Map<String, Value>) {
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let spec_changed = old.get("spec") != new.get("spec");
    let meta = metadata_mut(new);
    meta.remove("resourceVersion");
    meta.remove("selfLink");
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "generateName",
    ] {
        match old_meta.and_then(|m| m.get(field)) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    if rt.tracks_generation {
        let old_gen = old_meta
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        // Saturating: the stored generation is whatever was written,
        // through the etcd API too, up to `i64::MAX`.
        let generation = if spec_changed {
            old_gen.saturating_add(1)
        } else {
            old_gen
        };
        meta.insert("generation".into(), json!(generation));
    } else {
        meta.remove("generation");
    }
    if rt.plural == "namespaces" {
        // Namespace status is owned by the server.
        if let Some(status) = old.get("status") {
            new.insert("status".into(), status.clone());
        }
    }
}

/// Decodes a stored value into an object as clients see it: `kind`,
/// `apiVersion` and `metadata.resourceVersion` filled in. `None` (with a
/// warning) for a value that is not a JSON object, e.g. one written through
/// the etcd API.
pub fn from_stored(rt: &ResourceType, key: &[u8], value: &[u8], revision: u64) -> Option<Value> {
    match serde_json::from_slice::<Value>(value) {
        Ok(Value::Object(mut obj)) => {
            obj.insert("kind".into(), json!(rt.kind));
            obj.insert("apiVersion".into(), json!(rt.api_version()));
            metadata_mut(&mut obj).insert("resourceVersion".into(), json!(revision.to_string()));
            Some(Value::Object(obj))
        }
        _ => {
            tracing::warn!(key = %String::from_utf8_lossy(key), "skipping a stored value that is not a JSON object");
            None
        }
    }
}

/// The bytes stored for an object: its JSON without `resourceVersion`.
pub fn to_stored(obj: &Map<String, Value>) -> Vec<u8> {
    let mut obj = obj.clone();
    metadata_mut(&mut obj).remove("resourceVersion");
    serde_json::to_vec(&obj).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    #[test]
    fn names_follow_dns_rules() {
        assert!(validate_name(NameRule::Subdomain, "a.b-c.d").is_ok());
        assert!(validate_name(NameRule::Subdomain, "Bad_Name").is_err());
        assert!(validate_name(NameRule::Subdomain, "-a").is_err());
        assert!(validate_name(NameRule::Subdomain, &"a".repeat(254)).is_err());
        assert!(validate_name(NameRule::Label, "a.b").is_err());
        assert!(validate_name(NameRule::Label, "123-abc").is_ok());
        assert!(validate_name(NameRule::Rfc1035Label, "1abc").is_err());
        assert!(validate_name(NameRule::Rfc1035Label, "abc-1").is_ok());
    }

    #[test]
    fn body_kind_and_api_version_must_match_the_url() {
        let cm = resources::find("", "v1", "configmaps").expect("cm");
        assert!(decode_body(cm, br#"{"metadata":{"name":"a"}}"#).is_ok());
        assert!(matches!(
            decode_body(cm, br#"{"kind":"Pod","metadata":{}}"#),
            Err(KubeError::BadRequest(_))
        ));
        assert!(matches!(
            decode_body(cm, br#"{"apiVersion":"apps/v1"}"#),
            Err(KubeError::BadRequest(_))
        ));
        assert!(matches!(
            decode_body(cm, b"{not json"),
            Err(KubeError::BadRequest(_))
        ));
        assert!(matches!(
            decode_body(cm, b"[1]"),
            Err(KubeError::BadRequest(_))
        ));
    }

    #[test]
    fn generation_bumps_only_when_spec_changes() {
        let dep = resources::find("apps", "v1", "deployments").expect("deployments");
        let mut old = decode_body(dep, br#"{"metadata":{"name":"a"},"spec":{"replicas":1}}"#)
            .expect("decode");
        prepare_create(dep, &mut old);
        assert_eq!(old["metadata"]["generation"], 1);
        let mut same = old.clone();
        same.insert("status".into(), json!({"x": 1}));
        prepare_update(dep, &old, &mut same);
        assert_eq!(same["metadata"]["generation"], 1);
        let mut changed = old.clone();
        changed.insert("spec".into(), json!({"replicas": 2}));
        prepare_update(dep, &old, &mut changed);
        assert_eq!(changed["metadata"]["generation"], 2);
        assert_eq!(changed["metadata"]["uid"], old["metadata"]["uid"]);
    }

    #[test]
    fn generated_names_keep_the_prefix() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9, "{n}");
    }
}

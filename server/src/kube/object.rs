//! Kubernetes objects as JSON: decoding a request body into an object of
//! its type, the object's metadata, and the bytes stored for it (the
//! object without `resourceVersion`, which is filled in on read from the
//! key's revision). What the server sets or checks on a create or an
//! update is `kube::admission`'s.

use serde_json::{json, Map, Value};

use crate::kube::error::KubeError;
pub use crate::kube::objectmeta::metadata_mut;
use crate::kube::resources::ResourceType;

/// Parses a request body into a JSON object of the type `rt`, checking
/// `kind`/`apiVersion` when present (kube defaults them from the URL).
pub fn decode_body(rt: &ResourceType, body: &[u8]) -> Result<Map<String, Value>, KubeError> {
    let value: Value = serde_json::from_slice(body).map_err(json_error)?;
    decode_value(rt, value)
}

/// The `400` of a body that is not JSON.
pub fn json_error(e: serde_json::Error) -> KubeError {
    KubeError::BadRequest(format!("couldn't get version/kind; json parse error: {e}"))
}

/// [`decode_body`] of a body already parsed.
pub fn decode_value(rt: &ResourceType, value: Value) -> Result<Map<String, Value>, KubeError> {
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

pub fn meta_str<'a>(obj: &'a Map<String, Value>, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// Now, as kube writes timestamps (RFC 3339, seconds, UTC).
pub fn now_rfc3339() -> String {
    format_time(chrono::Utc::now())
}

/// A time as kube writes timestamps: RFC 3339, whole seconds, UTC.
pub fn format_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
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
}

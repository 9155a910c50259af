//! Kubernetes objects as JSON: decoding a request body into an object of
//! its type, the object's metadata, and the bytes stored for it (the
//! object without `resourceVersion`, which is filled in on read from the
//! key's revision). What the server sets or checks on a create or an
//! update is `kube::admission`'s.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
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
    // The fixed RFC 3339 writer, not a strftime pattern parsed per call.
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Decodes a stored value into an object as clients see it: `kind`,
/// `apiVersion` and `metadata.resourceVersion` filled in. `None` (with a
/// warning) for a value that is not a JSON object, e.g. one written through
/// the etcd API.
pub fn from_stored(rt: &ResourceType, key: &[u8], value: &[u8], revision: u64) -> Option<Value> {
    match serde_json::from_slice::<Value>(value) {
        Ok(Value::Object(obj)) => Some(to_client(rt, obj, revision)),
        _ => {
            not_an_object(key);
            None
        }
    }
}

/// A stored object as clients see it: `kind`, `apiVersion` and
/// `metadata.resourceVersion` (`revision`) filled in.
pub fn to_client(rt: &ResourceType, mut obj: Map<String, Value>, revision: u64) -> Value {
    obj.insert("kind".into(), json!(rt.kind));
    obj.insert("apiVersion".into(), json!(rt.api_version()));
    metadata_mut(&mut obj).insert("resourceVersion".into(), json!(revision.to_string()));
    Value::Object(obj)
}

/// Logs a stored value under `key` skipped for not being a JSON object.
pub fn not_an_object(key: &[u8]) {
    tracing::warn!(key = %String::from_utf8_lossy(key), "skipping a stored value that is not a JSON object");
}

/// The members of a stored object that [`write_client_json`] parses for
/// its caller: top-level ones, and `metadata`'s own.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub members: &'a [&'a str],
    pub metadata: &'a [&'a str],
}

/// One member's value as [`write_client_json`] writes it.
enum Piece<'a> {
    /// Copied as stored.
    Raw(&'a RawValue),
    /// A string set by the server.
    Text(&'a str),
    /// An object of pieces (`metadata`), in key order.
    Object(BTreeMap<&'a str, Piece<'a>>),
}

impl Piece<'_> {
    fn write(&self, out: &mut Vec<u8>) -> Option<()> {
        match self {
            Piece::Raw(raw) => out.extend_from_slice(raw.get().as_bytes()),
            Piece::Text(text) => serde_json::to_writer(&mut *out, text).ok()?,
            Piece::Object(members) => {
                out.push(b'{');
                for (i, (key, piece)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, key).ok()?;
                    out.push(b':');
                    piece.write(out)?;
                }
                out.push(b'}');
            }
        }
        Some(())
    }
}

/// Writes the client form of a stored object (what [`from_stored`]
/// makes: `kind`, `apiVersion` and `metadata.resourceVersion` set) as
/// JSON onto `out`, copying every other member as stored instead of
/// parsing and printing it again: the watch cache decodes every write on
/// every node this way. Returns an object of the members `wanted` names,
/// parsed (what the caller must read, such as selectors' attributes).
///
/// Stored objects are written by serde_json ([`to_stored`]): compact, with
/// their keys in order, so these bytes equal those of printing
/// [`from_stored`]'s tree. `None`, with `out` unchanged, for what cannot be
/// copied that way (not an object, `metadata` not an object, or a line
/// break, which a value written through the etcd API may hold and a watch
/// line must not): the caller then takes [`from_stored`]'s path.
pub fn write_client_json(
    rt: &ResourceType,
    value: &[u8],
    revision: u64,
    wanted: Wanted<'_>,
    out: &mut Vec<u8>,
) -> Option<Value> {
    // memchr's vectorised search: this check reads every byte of every
    // write on every node.
    if memchr::memchr2(b'\n', b'\r', value).is_some() {
        return None;
    }
    let stored: BTreeMap<String, &RawValue> = serde_json::from_slice(value).ok()?;
    let meta: BTreeMap<String, &RawValue> = match stored.get("metadata") {
        Some(raw) => serde_json::from_str(raw.get()).ok()?,
        None => BTreeMap::new(),
    };
    let parse = |raw: &RawValue| serde_json::from_str::<Value>(raw.get()).ok();
    let mut parsed = Map::new();
    for member in wanted.members.iter().filter(|m| **m != "metadata") {
        if let Some(raw) = stored.get(*member) {
            parsed.insert((*member).to_string(), parse(raw)?);
        }
    }
    let mut parsed_meta = Map::new();
    for member in wanted.metadata {
        if let Some(raw) = meta.get(*member) {
            parsed_meta.insert((*member).to_string(), parse(raw)?);
        }
    }
    parsed.insert("metadata".into(), Value::Object(parsed_meta));

    let version = revision.to_string();
    let mut meta_pieces: BTreeMap<&str, Piece> = meta
        .iter()
        .map(|(k, v)| (k.as_str(), Piece::Raw(v)))
        .collect();
    meta_pieces.insert("resourceVersion", Piece::Text(&version));
    let api_version = rt.api_version();
    let mut pieces: BTreeMap<&str, Piece> = stored
        .iter()
        .map(|(k, v)| (k.as_str(), Piece::Raw(v)))
        .collect();
    pieces.insert("kind", Piece::Text(rt.kind));
    pieces.insert("apiVersion", Piece::Text(&api_version));
    pieces.insert("metadata", Piece::Object(meta_pieces));
    let start = out.len();
    if Piece::Object(pieces).write(out).is_none() {
        out.truncate(start);
        return None;
    }
    Some(Value::Object(parsed))
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

    #[test]
    fn times_are_written_as_kube_writes_them() {
        use chrono::TimeZone;
        let t = chrono::Utc
            .with_ymd_and_hms(2026, 1, 2, 3, 4, 5)
            .single()
            .expect("a valid time")
            + chrono::Duration::milliseconds(678);
        // Whole seconds (the fraction dropped), UTC as `Z`.
        assert_eq!(format_time(t), "2026-01-02T03:04:05Z");
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z'), "{now}");
    }

    #[test]
    fn client_json_copied_from_stored_bytes_equals_the_parsed_objects() {
        use crate::kube::selectors::Attrs;
        let cm = resources::find("", "v1", "configmaps").expect("cm");
        let pods = resources::find("", "v1", "pods").expect("pods");
        let cases = [
            (
                cm,
                json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "é\"x"},
                    "managedFields": [{"manager": "m", "fieldsV1": {"f:data": {}}}]},
                    "data": {"k": "line\nbreak \u{1} \\ /", "n": "1"}, "immutable": true}),
            ),
            (
                cm,
                json!({"data": {"z": "1"}, "binaryData": {}, "kind": "Wrong", "apiVersion": "v0"}),
            ),
            (
                pods,
                json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                        "hostNetwork": true, "priority": -5, "overhead": {"cpu": 0.25}},
                    "status": {"phase": "Running", "podIP": "10.0.0.1"}}),
            ),
        ];
        for (rt, obj) in cases {
            let Value::Object(obj) = obj else {
                unreachable!("an object");
            };
            let stored = to_stored(&obj);
            let (members, metadata) = Attrs::reads(rt).expect("plain paths");
            let wanted = Wanted {
                members: &members,
                metadata: &metadata,
            };
            let mut out = b"prefix".to_vec();
            let read =
                write_client_json(rt, &stored, 42, wanted, &mut out).expect("copied as stored");
            let parsed = from_stored(rt, b"k", &stored, 42).expect("an object");
            let mut expected = b"prefix".to_vec();
            expected.extend(serde_json::to_vec(&parsed).expect("printed"));
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&expected)
            );
            for pointer in [
                "/metadata/name",
                "/metadata/namespace",
                "/metadata/labels",
                "/spec/nodeName",
                "/spec/hostNetwork",
                "/status/phase",
            ] {
                if members.contains(&pointer.split('/').nth(1).unwrap_or_default())
                    || metadata.contains(&pointer.split('/').nth(2).unwrap_or_default())
                {
                    assert_eq!(read.pointer(pointer), parsed.pointer(pointer), "{pointer}");
                }
            }
        }
        // What cannot be copied is refused, and nothing is written.
        for value in [
            &b"[1]"[..],
            br#"{"metadata":"x"}"#,
            b"{\"data\":\n{}}",
            b"{\"a\":1",
        ] {
            let mut out = Vec::new();
            let wanted = Wanted {
                members: &["metadata"],
                metadata: &["labels"],
            };
            assert!(write_client_json(cm, value, 1, wanted, &mut out).is_none());
            assert!(out.is_empty());
        }
    }
}

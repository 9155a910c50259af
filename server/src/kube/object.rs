//! Kubernetes objects as JSON: decoding a request body into an object of
//! its type, the object's metadata, and the bytes stored for it (the
//! object without `resourceVersion`, which is filled in on read from the
//! key's revision). What the server sets or checks on a create or an
//! update is `kube::admission`'s.

use std::borrow::Cow;

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

/// The client form of an object of type `rt` under `key` that holds its
/// name, namespace and `resourceVersion` alone: what the watch cache shows
/// for a stored value that starts like a JSON object and does not parse
/// as one (written through the etcd API; logged here).
pub fn named_only(rt: &ResourceType, key: &str, revision: u64) -> Value {
    tracing::warn!(%key, "a stored value that does not parse as a JSON object is shown with its name alone");
    let rest = key
        .strip_prefix(rt.etcd_prefix)
        .and_then(|k| k.strip_prefix('/'))
        .unwrap_or(key);
    let mut metadata = Map::new();
    match rest.split_once('/').filter(|_| rt.namespaced) {
        Some((namespace, name)) => {
            metadata.insert("name".into(), json!(name));
            metadata.insert("namespace".into(), json!(namespace));
        }
        None => {
            metadata.insert("name".into(), json!(rest));
        }
    }
    to_client(
        rt,
        Map::from_iter([("metadata".into(), Value::Object(metadata))]),
        revision,
    )
}

/// The members of a stored object that [`write_client_json`] parses for
/// its caller: top-level ones, and `metadata`'s own.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub members: &'a [&'a str],
    pub metadata: &'a [&'a str],
}

/// A JSON object's members in key order, each key unique (the last one
/// of a name, as a parse into a map keeps), its values unparsed. Keys are
/// borrowed from the JSON unless they hold an escape.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Members<'a> {
    fn parse(json: &'a [u8]) -> Option<Self> {
        serde_json::from_slice(json).ok().map(Self::in_order)
    }

    /// [`Members::parse`] of JSON known to be UTF-8 (no second check).
    fn parse_str(json: &'a str) -> Option<Self> {
        serde_json::from_str(json).ok().map(Self::in_order)
    }

    fn in_order(mut members: Self) -> Self {
        // Stored objects are written by serde_json, sorted and unique;
        // a value written through the etcd API may be neither.
        if !members.0.windows(2).all(|w| w[0].0 < w[1].0) {
            members.0.sort_by(|a, b| a.0.cmp(&b.0));
            members.0.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    std::mem::swap(later, kept);
                }
                same
            });
        }
        members
    }

    fn get(&self, name: &str) -> Option<&'a RawValue> {
        let i = self.0.binary_search_by(|(k, _)| (**k).cmp(name)).ok()?;
        Some(self.0[i].1)
    }
}

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Key(key)) = map.next_key()? {
                    members.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// A member name, borrowed from the JSON when it has no escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// Writes one member's value onto the output.
type WriteMember<'a> = &'a mut dyn FnMut(&mut Vec<u8>) -> Option<()>;

/// Writes `members` as a JSON object, with `set`'s members (sorted by
/// name) in their places among them, each replacing a member of its name:
/// one pass over both, no map built.
fn write_merged(
    out: &mut Vec<u8>,
    members: &Members<'_>,
    set: &mut [(&str, WriteMember<'_>)],
) -> Option<()> {
    out.push(b'{');
    let (mut i, mut j) = (0, 0);
    while i < members.0.len() || j < set.len() {
        if i + j > 0 {
            out.push(b',');
        }
        let from_set = match (members.0.get(i), set.get(j)) {
            (Some((name, _)), Some((set_name, _))) => {
                if *set_name == &**name {
                    i += 1;
                }
                *set_name <= &**name
            }
            (None, _) => true,
            (Some(_), None) => false,
        };
        if from_set {
            let (name, write) = &mut set[j];
            serde_json::to_writer(&mut *out, name).ok()?;
            out.push(b':');
            write(out)?;
            j += 1;
        } else {
            let (name, raw) = &members.0[i];
            serde_json::to_writer(&mut *out, name).ok()?;
            out.push(b':');
            out.extend_from_slice(raw.get().as_bytes());
            i += 1;
        }
    }
    out.push(b'}');
    Some(())
}

/// Writes `text` as a JSON string.
fn write_text(out: &mut Vec<u8>, text: &str) -> Option<()> {
    serde_json::to_writer(out, text).ok()
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
    let stored = Members::parse(value)?;
    let meta = match stored.get("metadata") {
        Some(raw) => Members::parse_str(raw.get())?,
        None => Members(Vec::new()),
    };
    let parse = |raw: &RawValue| serde_json::from_str::<Value>(raw.get()).ok();
    let mut parsed = Map::new();
    for member in wanted.members.iter().filter(|m| **m != "metadata") {
        if let Some(raw) = stored.get(member) {
            parsed.insert((*member).to_string(), parse(raw)?);
        }
    }
    let mut parsed_meta = Map::new();
    for member in wanted.metadata {
        if let Some(raw) = meta.get(member) {
            parsed_meta.insert((*member).to_string(), parse(raw)?);
        }
    }
    parsed.insert("metadata".into(), Value::Object(parsed_meta));

    let version = revision.to_string();
    let api_version = rt.api_version();
    let start = out.len();
    // The members the client form sets, in key order.
    let written = write_merged(
        out,
        &stored,
        &mut [
            ("apiVersion", &mut |out: &mut Vec<u8>| {
                write_text(out, &api_version)
            }),
            ("kind", &mut |out: &mut Vec<u8>| write_text(out, rt.kind)),
            ("metadata", &mut |out: &mut Vec<u8>| {
                let mut version = |out: &mut Vec<u8>| write_text(out, &version);
                write_merged(out, &meta, &mut [("resourceVersion", &mut version)])
            }),
        ],
    );
    if written.is_none() {
        out.truncate(start);
        return None;
    }
    Some(Value::Object(parsed))
}

/// The bytes stored for an object: its JSON without `resourceVersion`.
///
/// Written straight from `obj`, skipping that one member: the same bytes
/// as printing a copy with it removed (both maps iterate in key order),
/// without the copy of every member a write used to make.
pub fn to_stored(obj: &Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    // Writing a tree of JSON values into memory cannot fail.
    let _ = serde_json::to_writer(&mut out, &Stored(obj));
    out
}

/// An object as [`to_stored`] writes it: `metadata` without
/// `resourceVersion` (and `{}` for a `metadata` that is not an object,
/// as [`metadata_mut`] would have made it); every other member as is.
struct Stored<'a>(&'a Map<String, Value>);

/// A map written without the members named in `.1`.
struct Without<'a>(&'a Map<String, Value>, &'a str);

impl serde::Serialize for Stored<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let empty = Map::new();
        let metadata = match self.0.get("metadata") {
            Some(Value::Object(m)) => m,
            _ => &empty,
        };
        let has_metadata = self.0.contains_key("metadata");
        let len = self.0.len() + usize::from(!has_metadata);
        let mut map = serializer.serialize_map(Some(len))?;
        let mut metadata_written = false;
        for (key, value) in self.0 {
            if !metadata_written && key.as_str() > "metadata" {
                map.serialize_entry("metadata", &Without(metadata, "resourceVersion"))?;
                metadata_written = true;
            }
            if key == "metadata" {
                map.serialize_entry(key, &Without(metadata, "resourceVersion"))?;
                metadata_written = true;
            } else {
                map.serialize_entry(key, value)?;
            }
        }
        if !metadata_written {
            map.serialize_entry("metadata", &Without(metadata, "resourceVersion"))?;
        }
        map.end()
    }
}

impl serde::Serialize for Without<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let len = self.0.len() - usize::from(self.0.contains_key(self.1));
        let mut map = serializer.serialize_map(Some(len))?;
        for (key, value) in self.0.iter().filter(|(k, _)| k.as_str() != self.1) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
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
    fn stored_bytes_are_the_object_printed_without_its_resource_version() {
        // What a copy with the member removed prints.
        let copied = |obj: &Map<String, Value>| {
            let mut obj = obj.clone();
            metadata_mut(&mut obj).remove("resourceVersion");
            serde_json::to_vec(&obj).expect("printable")
        };
        let cases = [
            json!({"apiVersion": "v1", "data": {"a": "1"}, "kind": "ConfigMap",
                "metadata": {"name": "a", "resourceVersion": "7", "uid": "u"}}),
            json!({"metadata": {"resourceVersion": "7"}}),
            json!({"metadata": {"name": "a"}, "zeta": [1, {"resourceVersion": "x"}]}),
            // No metadata, or one that is not an object: stored as `{}`,
            // in its place among the members.
            json!({"data": {"a": "1"}}),
            json!({"apiVersion": "v1", "spec": {}}),
            json!({"zzz": true}),
            json!({}),
            json!({"kind": "Pod", "metadata": "not an object", "status": null}),
        ];
        for case in cases {
            let Value::Object(obj) = case else {
                unreachable!("an object");
            };
            assert_eq!(
                String::from_utf8(to_stored(&obj)).expect("utf-8"),
                String::from_utf8(copied(&obj)).expect("utf-8"),
            );
        }
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

    /// Values written through the etcd API need not be serde_json's own
    /// print: members out of order, a name twice (the last one counts, as
    /// in a parse), escaped names, the server's members already present.
    /// The copy still equals the parsed object printed. (Members below
    /// `metadata`'s own are copied as they are, so here they are in order.)
    #[test]
    fn client_json_of_any_stored_object_equals_the_parsed_object() {
        let cm = resources::find("", "v1", "configmaps").expect("cm");
        let values: [&[u8]; 6] = [
            br#"{"metadata":{"name":"a","uid":"u"},"data":{"k":"v"},"apiVersion":"x"}"#,
            br#"{"data":{"k":"1"},"data":{"k":"2"},"metadata":{"name":"a","name":"b"}}"#,
            br#"{"d\u0061ta":{"k":"v"},"metadata":{"n\"ame":"a","resourceVersion":"9"}}"#,
            br#"{"kind":"Other","zz":1,"metadata":{"labels":{"a":"2","b":"1"}},"a":0}"#,
            br#"{"metadata":{}}"#,
            br#"{}"#,
        ];
        for value in values {
            let (members, metadata) = crate::kube::selectors::Attrs::reads(cm).expect("plain");
            let wanted = Wanted {
                members: &members,
                metadata: &metadata,
            };
            let mut out = Vec::new();
            let read = write_client_json(cm, value, 7, wanted, &mut out)
                .unwrap_or_else(|| panic!("not copied: {}", String::from_utf8_lossy(value)));
            let parsed = from_stored(cm, b"k", value, 7).expect("an object");
            assert_eq!(
                String::from_utf8_lossy(&out),
                serde_json::to_string(&parsed).expect("printed"),
                "{}",
                String::from_utf8_lossy(value)
            );
            assert_eq!(
                read.pointer("/metadata/name"),
                parsed.pointer("/metadata/name")
            );
            assert_eq!(
                read.pointer("/metadata/labels"),
                parsed.pointer("/metadata/labels")
            );
        }
    }
}

//! Kubernetes' protobuf wire form (`application/vnd.kubernetes.protobuf`)
//! for every built-in kind: request bodies decoded into the JSON kubestore
//! stores, and objects, lists and watch events encoded for clients that
//! ask for it (client-go's typed clients, as kube's own components and
//! helm's storage driver configure them).
//!
//! A body is the magic `k8s\0` and a `runtime.Unknown` envelope whose
//! `typeMeta` names the kind and whose `raw` is the kind's own message.
//! A watch stream is a sequence of `WatchEvent` messages, each behind its
//! 4-byte big-endian length, whose `object.raw` is such an envelope.
//!
//! Messages are read through the descriptors of `schema` (generated from
//! `k8s-pb`); `transcode` maps them to and from kube's JSON. Custom
//! resources have no protobuf form (kube serves them as JSON only): a
//! protobuf body for one is `415`.

pub mod schema;
pub mod transcode;

use std::sync::Arc;

use bytes::Bytes;
use prost::Message as _;
use prost_reflect::{DynamicMessage, MessageDescriptor, Value as Pb};
use serde_json::{Map, Value};

use crate::http::status::ApiError;
use crate::kube::cache::CachedObject;
use crate::kube::resources::ResourceType;
use schema::{names, Schema};
use transcode::{bytes_field, string_field, TranscodeError};

pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The content type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
pub(crate) const MAGIC: &[u8] = b"k8s\x00";

/// A protobuf body that cannot be read, or an object that cannot be
/// written as protobuf.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("the body does not start with the protobuf magic")]
    NoMagic,
    #[error("{0}")]
    Decode(#[from] prost::DecodeError),
    #[error("no protobuf message for kind {kind:?} in version {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
    #[error("the descriptor set has no message {0}")]
    MissingMessage(&'static str),
    #[error("{0}")]
    Transcode(#[from] TranscodeError),
}

/// One of the meta messages the wire form is built of.
fn named(full_name: &'static str) -> Result<MessageDescriptor, ProtobufError> {
    Schema::get()
        .message(full_name)
        .ok_or(ProtobufError::MissingMessage(full_name))
}

/// The message of a kind.
fn message_of(api_version: &str, kind: &str) -> Result<MessageDescriptor, ProtobufError> {
    Schema::get()
        .kind(api_version, kind)
        .ok_or_else(|| ProtobufError::UnknownKind {
            api_version: api_version.into(),
            kind: kind.into(),
        })
}

/// The kind's `apiVersion` and `kind`, and its message's `raw` bytes,
/// from a `k8s\0` body.
fn open_envelope(body: &[u8]) -> Result<(String, String, Bytes), ProtobufError> {
    let inner = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let unknown = DynamicMessage::decode(named(names::UNKNOWN)?, inner)?;
    let (api_version, kind) = match unknown.get_field_by_name("typeMeta").as_deref() {
        Some(Pb::Message(tm)) => (string_field(tm, "apiVersion"), string_field(tm, "kind")),
        _ => (String::new(), String::new()),
    };
    Ok((api_version, kind, bytes_field(&unknown, "raw")))
}

/// The JSON object of a protobuf body, with its `apiVersion` and `kind`.
/// An envelope without a type takes `expected`'s (`apiVersion`, `kind`).
pub fn decode_object(body: &[u8], expected: Option<(&str, &str)>) -> Result<Value, ProtobufError> {
    let (mut api_version, mut kind, raw) = open_envelope(body)?;
    if let (true, Some((v, k))) = (kind.is_empty(), expected) {
        api_version = v.to_string();
        kind = k.to_string();
    }
    let desc = message_of(&api_version, &kind)?;
    let msg = DynamicMessage::decode(desc, raw)?;
    let mut object = match transcode::to_json(&msg)? {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    // `apiVersion` and `kind` first, as kube writes them.
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    out.append(&mut object);
    Ok(Value::Object(out))
}

/// Decodes a protobuf object body of `rt` into the equivalent JSON bytes.
/// Custom resources have no protobuf form (`415`).
pub fn to_json(rt: &ResourceType, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    if rt.custom.is_some() {
        return Err(ApiError::UnsupportedMediaType);
    }
    let object = decode_object(body, Some((&rt.api_version(), rt.kind))).map_err(|e| {
        ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            rt.kind, rt.version, rt.kind
        ))
    })?;
    Ok(object.to_string().into_bytes())
}

/// Decodes a protobuf `DeleteOptions` body into its JSON fields.
pub fn delete_options_to_json(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let bad = |e: &dyn std::fmt::Display| {
        ApiError::BadRequest(format!("couldn't decode DeleteOptions: {e}"))
    };
    let (_, _, raw) = open_envelope(body).map_err(|e| bad(&e))?;
    let desc = named(names::DELETE_OPTIONS).map_err(|e| bad(&e))?;
    let msg = DynamicMessage::decode(desc, raw).map_err(|e| bad(&e))?;
    match transcode::to_json(&msg).map_err(|e| bad(&e))? {
        Value::Object(fields) => Ok(fields),
        _ => Ok(Map::new()),
    }
}

fn envelope(api_version: &str, kind: &str, raw: Bytes) -> Result<Vec<u8>, ProtobufError> {
    let mut type_meta = DynamicMessage::new(named(names::TYPE_META)?);
    type_meta.set_field_by_name("apiVersion", Pb::String(api_version.into()));
    type_meta.set_field_by_name("kind", Pb::String(kind.into()));
    let mut unknown = DynamicMessage::new(named(names::UNKNOWN)?);
    unknown.set_field_by_name("typeMeta", Pb::Message(type_meta));
    unknown.set_field_by_name("raw", Pb::Bytes(raw));
    unknown.set_field_by_name("contentEncoding", Pb::String(String::new()));
    unknown.set_field_by_name("contentType", Pb::String(String::new()));
    let mut body = MAGIC.to_vec();
    body.extend_from_slice(&unknown.encode_to_vec());
    Ok(body)
}

/// The protobuf body of a JSON object, by its own `apiVersion` and `kind`.
pub fn encode_object(object: &Value) -> Result<Vec<u8>, ProtobufError> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let msg = transcode::from_json(&message_of(api_version, kind)?, object)?;
    envelope(api_version, kind, msg.encode_to_vec().into())
}

/// The protobuf body of a list of `rt`: its `metadata` (a `ListMeta`'s
/// JSON) and items, each item's message encoded once per cached object
/// ([`CachedObject::encoded_with`]).
pub fn encode_list(
    rt: &ResourceType,
    metadata: &Value,
    items: &[Arc<CachedObject>],
) -> Result<Vec<u8>, ProtobufError> {
    let api_version = rt.api_version();
    let list_kind = rt.list_kind();
    let list = message_of(&api_version, &list_kind)?;
    let item = message_of(&api_version, rt.kind)?;
    let mut msg = DynamicMessage::new(list.clone());
    if let Some(field) = list.get_field_by_name("metadata") {
        if let prost_reflect::Kind::Message(meta) = field.kind() {
            msg.set_field(&field, Pb::Message(transcode::from_json(&meta, metadata)?));
        }
    }
    let mut body = msg.encode_to_vec();
    if let Some(field) = list.get_field_by_name("items") {
        // Each item is a length-delimited field `items`, so the list is its
        // metadata followed by every item's own encoding, made once per
        // object and kept in the watch cache.
        for o in items {
            let encoded = cached_message(&item, o)?;
            prost::encoding::encode_key(
                field.number(),
                prost::encoding::WireType::LengthDelimited,
                &mut body,
            );
            prost::encoding::encode_varint(encoded.len() as u64, &mut body);
            body.extend_from_slice(&encoded);
        }
    }
    envelope(&api_version, &list_kind, body.into())
}

/// The message of a cached object (of type `item`), encoded on first use
/// and kept with the object ([`CachedObject::encoded_with`]).
fn cached_message(item: &MessageDescriptor, o: &CachedObject) -> Result<Bytes, ProtobufError> {
    Ok(o.encoded_with(|object| {
        transcode::from_json(item, object).map(|m| Bytes::from(m.encode_to_vec()))
    })?)
}

/// One frame of a protobuf watch stream: the `WatchEvent` of an event
/// type and object, behind its length.
pub fn watch_frame(event_type: &str, object: &Value) -> Result<Bytes, ProtobufError> {
    frame(event_type, encode_object(object)?)
}

/// The same for a cached object of `rt`, from its message encoded once
/// and kept with it: every protobuf watcher (client-go's informers) that
/// sends the event shares that encoding instead of encoding it again.
pub fn watch_frame_of(
    event_type: &str,
    rt: &ResourceType,
    o: &CachedObject,
) -> Result<Bytes, ProtobufError> {
    let api_version = rt.api_version();
    let message = cached_message(&message_of(&api_version, rt.kind)?, o)?;
    frame(event_type, envelope(&api_version, rt.kind, message)?)
}

/// A `WatchEvent` of `event_type` around an enveloped object, behind its
/// length.
fn frame(event_type: &str, object: Vec<u8>) -> Result<Bytes, ProtobufError> {
    let mut raw = DynamicMessage::new(named(names::RAW_EXTENSION)?);
    raw.set_field_by_name("raw", Pb::Bytes(object.into()));
    let mut event = DynamicMessage::new(named(names::WATCH_EVENT)?);
    event.set_field_by_name("type", Pb::String(event_type.into()));
    event.set_field_by_name("object", Pb::Message(raw));
    let message = event.encode_to_vec();
    let mut frame = Vec::with_capacity(4 + message.len());
    frame.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    frame.extend_from_slice(&message);
    Ok(Bytes::from(frame))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;
    use serde_json::json;

    #[test]
    fn an_object_goes_to_protobuf_and_back() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "foo", "labels": {"app": "x"}},
            "data": {"a": "b"}, "binaryData": {"bin": "AAE="}});
        let body = encode_object(&cm).expect("encodes");
        assert!(body.starts_with(MAGIC));
        let rt = resources::find("", "v1", "configmaps").expect("cm");
        let back: Value =
            serde_json::from_slice(&to_json(rt, &body).expect("decodes")).expect("json");
        assert_eq!(back, cm);
        assert!(to_json(rt, b"garbage").is_err());
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"}, "spec": {"replicas": 2}});
        let body = encode_object(&deployment).expect("encodes");
        // The envelope names the kind; the route's type only fills a gap.
        assert_eq!(
            decode_object(&body, Some(("v1", "ConfigMap"))).expect("decodes"),
            deployment
        );
    }

    #[test]
    fn a_list_is_its_metadata_and_each_items_encoding_made_once_per_object() {
        let rt = resources::find("", "v1", "configmaps").expect("cm");
        let items: Vec<Arc<CachedObject>> = ["a", "b"]
            .iter()
            .map(|name| {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "resourceVersion": "7"}, "data": {"k": name}});
                Arc::new(CachedObject::from_value(rt, &cm).expect("an object"))
            })
            .collect();
        let meta = json!({"resourceVersion": "9", "continue": "c"});
        let body = encode_list(rt, &meta, &items).expect("encodes");
        // The reference: the whole list built as one message.
        let list = message_of("v1", "ConfigMapList").expect("list message");
        let item = message_of("v1", "ConfigMap").expect("item message");
        let mut whole = DynamicMessage::new(list.clone());
        let meta_desc = match list.get_field_by_name("metadata").expect("metadata").kind() {
            prost_reflect::Kind::Message(m) => m,
            other => panic!("metadata is a message, not {other:?}"),
        };
        whole.set_field_by_name(
            "metadata",
            Pb::Message(transcode::from_json(&meta_desc, &meta).expect("meta")),
        );
        whole.set_field_by_name(
            "items",
            Pb::List(
                items
                    .iter()
                    .map(|o| Pb::Message(transcode::from_json(&item, &o.to_value()).expect("item")))
                    .collect(),
            ),
        );
        let reference =
            envelope("v1", "ConfigMapList", whole.encode_to_vec().into()).expect("reference");
        assert_eq!(body, reference);
        // A second list splices the kept encodings: the same bytes.
        // Each item's encoding is kept: asked again, the encoder is not called.
        assert!(items.iter().all(|o| o.encoded_with(|_| Err(())).is_ok()));
        assert_eq!(encode_list(rt, &meta, &items).expect("encodes"), reference);
    }

    #[test]
    fn a_cached_objects_watch_frame_is_the_objects_own() {
        let rt = resources::find("apps", "v1", "deployments").expect("deployments");
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": "7",
                         "labels": {"app": "web"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let cached = CachedObject::from_value(rt, &deployment).expect("an object");
        for event in ["ADDED", "MODIFIED", "DELETED"] {
            assert_eq!(
                watch_frame_of(event, rt, &cached).expect("encodes"),
                watch_frame(event, &deployment).expect("encodes"),
                "{event}"
            );
        }
        // The object's message was encoded once and kept.
        assert!(cached.encoded_with(|_| Err(())).is_ok());
    }

    #[test]
    fn protobuf_delete_options_become_their_json_fields() {
        let opts = json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions",
            "gracePeriodSeconds": 0, "preconditions": {"uid": "u1"},
            "propagationPolicy": "Foreground", "dryRun": ["All"]});
        let desc = Schema::get()
            .message(names::DELETE_OPTIONS)
            .expect("message");
        let raw = transcode::from_json(&desc, &opts)
            .expect("encodes")
            .encode_to_vec();
        let body = envelope("meta.k8s.io/v1", "DeleteOptions", raw.into()).expect("envelope");
        let fields = delete_options_to_json(&body).expect("decoded");
        assert_eq!(
            Value::Object(fields),
            json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "u1"},
                   "propagationPolicy": "Foreground", "dryRun": ["All"]})
        );
        assert!(matches!(
            delete_options_to_json(b"not protobuf"),
            Err(ApiError::BadRequest(_))
        ));
    }

    #[test]
    fn a_watch_frame_is_a_length_and_a_watch_event_around_an_envelope() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let frame = watch_frame("ADDED", &pod).expect("frame");
        let len = u32::from_be_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
        assert_eq!(len, frame.len() - 4);
        let desc = Schema::get()
            .message(names::WATCH_EVENT)
            .expect("WatchEvent");
        let event = DynamicMessage::decode(desc, &frame[4..]).expect("decodes");
        assert_eq!(string_field(&event, "type"), "ADDED");
        let Some(Pb::Message(object)) = event.get_field_by_name("object").as_deref().cloned()
        else {
            panic!("an object")
        };
        let Some(Pb::Bytes(raw)) = object.get_field_by_name("raw").as_deref().cloned() else {
            panic!("raw bytes")
        };
        assert_eq!(decode_object(&raw, None).expect("decodes"), pod);
    }
}

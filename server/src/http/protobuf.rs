//! Protobuf request bodies for the types kubectl's typed clients send as
//! protobuf (`kubectl create configmap|secret|namespace`): the `k8s\0`
//! envelope (`runtime.Unknown`) around the object, decoded into the JSON
//! kubestore stores.
//!
//! `DeleteOptions` are read from protobuf too (client-go's typed clients
//! send them so with a protobuf content type).
//!
//! Only these three types are modelled (the messages below mirror the
//! field numbers of `k8s.io/api` and `k8s.io/apimachinery`); a protobuf
//! body for any other type is answered `415`, and clients fall back to
//! JSON. Responses are always JSON, which client-go accepts.

use std::collections::BTreeMap;

use base64::Engine as _;
use prost::Message;
use serde_json::{json, Map, Value};

use crate::http::status::ApiError;
use crate::kube::resources::ResourceType;

pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\x00";

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ConfigMap {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: BTreeMap<String, String>,
    #[prost(btree_map = "string, bytes", tag = "3")]
    binary_data: BTreeMap<String, Vec<u8>>,
    #[prost(bool, optional, tag = "4")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct Secret {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, bytes", tag = "2")]
    data: BTreeMap<String, Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    r#type: Option<String>,
    #[prost(btree_map = "string, string", tag = "4")]
    string_data: BTreeMap<String, String>,
    #[prost(bool, optional, tag = "5")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct NamespaceSpec {
    #[prost(string, repeated, tag = "1")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Namespace {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NamespaceSpec>,
}

fn meta_json(m: Option<ObjectMeta>) -> Value {
    let m = m.unwrap_or_default();
    let mut out = Map::new();
    let mut put = |k: &str, v: Value| {
        out.insert(k.into(), v);
    };
    if let Some(v) = m.name.filter(|s| !s.is_empty()) {
        put("name", json!(v));
    }
    if let Some(v) = m.generate_name.filter(|s| !s.is_empty()) {
        put("generateName", json!(v));
    }
    if let Some(v) = m.namespace.filter(|s| !s.is_empty()) {
        put("namespace", json!(v));
    }
    if let Some(v) = m.resource_version.filter(|s| !s.is_empty()) {
        put("resourceVersion", json!(v));
    }
    if !m.labels.is_empty() {
        put("labels", json!(m.labels));
    }
    if !m.annotations.is_empty() {
        put("annotations", json!(m.annotations));
    }
    if !m.finalizers.is_empty() {
        put("finalizers", json!(m.finalizers));
    }
    Value::Object(out)
}

fn b64_map(m: BTreeMap<String, Vec<u8>>) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    Value::Object(
        m.into_iter()
            .map(|(k, v)| (k, json!(engine.encode(v))))
            .collect(),
    )
}

/// `metav1.Preconditions`.
#[derive(Clone, PartialEq, Message)]
struct Preconditions {
    #[prost(string, optional, tag = "1")]
    uid: Option<String>,
    #[prost(string, optional, tag = "2")]
    resource_version: Option<String>,
}

/// `metav1.DeleteOptions`, as client-go's typed clients send it over
/// protobuf (helm's storage driver deletes its release secrets so).
#[derive(Clone, PartialEq, Message)]
struct DeleteOptions {
    #[prost(int64, optional, tag = "1")]
    grace_period_seconds: Option<i64>,
    #[prost(message, optional, tag = "2")]
    preconditions: Option<Preconditions>,
    #[prost(bool, optional, tag = "3")]
    orphan_dependents: Option<bool>,
    #[prost(string, optional, tag = "4")]
    propagation_policy: Option<String>,
    #[prost(string, repeated, tag = "5")]
    dry_run: Vec<String>,
}

/// Decodes a protobuf `DeleteOptions` body into its JSON fields.
pub fn delete_options_to_json(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let bad = |e: &dyn std::fmt::Display| {
        ApiError::BadRequest(format!("couldn't decode DeleteOptions: {e}"))
    };
    let inner = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad(&"the body does not start with the protobuf magic"))?;
    let unknown = Unknown::decode(inner).map_err(|e| bad(&e))?;
    let raw = unknown.raw.unwrap_or_default();
    let opts = DeleteOptions::decode(raw.as_slice()).map_err(|e| bad(&e))?;
    let mut fields = Map::new();
    if let Some(g) = opts.grace_period_seconds {
        fields.insert("gracePeriodSeconds".into(), json!(g));
    }
    if let Some(p) = opts.preconditions {
        let mut pre = Map::new();
        if let Some(uid) = p.uid {
            pre.insert("uid".into(), json!(uid));
        }
        if let Some(rv) = p.resource_version {
            pre.insert("resourceVersion".into(), json!(rv));
        }
        fields.insert("preconditions".into(), Value::Object(pre));
    }
    if let Some(o) = opts.orphan_dependents {
        fields.insert("orphanDependents".into(), json!(o));
    }
    if let Some(p) = opts.propagation_policy {
        fields.insert("propagationPolicy".into(), json!(p));
    }
    if !opts.dry_run.is_empty() {
        fields.insert("dryRun".into(), json!(opts.dry_run));
    }
    Ok(fields)
}

fn bad(rt: &ResourceType, e: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!(
        "{} in version \"{}\" cannot be handled as a {}: {e}",
        rt.kind, rt.version, rt.kind
    ))
}

/// Decodes a protobuf body into the equivalent JSON bytes.
pub fn to_json(rt: &ResourceType, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let inner = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad(rt, "the body does not start with the protobuf magic"))?;
    let unknown = Unknown::decode(inner).map_err(|e| bad(rt, e))?;
    let tm = unknown.type_meta.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let mut obj = match rt.plural {
        "configmaps" => {
            let cm = ConfigMap::decode(raw.as_slice()).map_err(|e| bad(rt, e))?;
            let mut o = json!({ "metadata": meta_json(cm.metadata) });
            if !cm.data.is_empty() {
                o["data"] = json!(cm.data);
            }
            if !cm.binary_data.is_empty() {
                o["binaryData"] = b64_map(cm.binary_data);
            }
            if let Some(i) = cm.immutable {
                o["immutable"] = json!(i);
            }
            o
        }
        "secrets" => {
            let s = Secret::decode(raw.as_slice()).map_err(|e| bad(rt, e))?;
            let mut data = s.data;
            // stringData is write-only convenience: merged into data, as kube does.
            for (k, v) in s.string_data {
                data.insert(k, v.into_bytes());
            }
            let mut o = json!({ "metadata": meta_json(s.metadata) });
            if !data.is_empty() {
                o["data"] = b64_map(data);
            }
            if let Some(t) = s.r#type.filter(|t| !t.is_empty()) {
                o["type"] = json!(t);
            }
            if let Some(i) = s.immutable {
                o["immutable"] = json!(i);
            }
            o
        }
        "namespaces" => {
            let ns = Namespace::decode(raw.as_slice()).map_err(|e| bad(rt, e))?;
            let mut o = json!({ "metadata": meta_json(ns.metadata) });
            if let Some(spec) = ns.spec.filter(|s| !s.finalizers.is_empty()) {
                o["spec"] = json!({ "finalizers": spec.finalizers });
            }
            o
        }
        _ => return Err(ApiError::UnsupportedMediaType),
    };
    if let Some(v) = tm.api_version.filter(|s| !s.is_empty()) {
        obj["apiVersion"] = json!(v);
    }
    if let Some(k) = tm.kind.filter(|s| !s.is_empty()) {
        obj["kind"] = json!(k);
    }
    Ok(obj.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    #[test]
    fn protobuf_delete_options_become_their_json_fields() {
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some("u1".into()),
                resource_version: None,
            }),
            orphan_dependents: None,
            propagation_policy: Some("Foreground".into()),
            dry_run: vec!["All".into()],
        };
        let env = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("meta.k8s.io/v1".into()),
                kind: Some("DeleteOptions".into()),
            }),
            raw: Some(opts.encode_to_vec()),
        };
        let mut body = MAGIC.to_vec();
        body.extend(env.encode_to_vec());
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
    fn a_protobuf_configmap_becomes_json() {
        let cm = ConfigMap {
            metadata: Some(ObjectMeta {
                name: Some("foo".into()),
                labels: BTreeMap::from([("app".into(), "x".into())]),
                ..ObjectMeta::default()
            }),
            data: BTreeMap::from([("a".into(), "b".into())]),
            binary_data: BTreeMap::from([("bin".into(), vec![0, 1])]),
            immutable: None,
        };
        let env = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("ConfigMap".into()),
            }),
            raw: Some(cm.encode_to_vec()),
        };
        let mut body = MAGIC.to_vec();
        body.extend(env.encode_to_vec());
        let rt = resources::find("", "v1", "configmaps").expect("cm");
        let v: Value = serde_json::from_slice(&to_json(rt, &body).expect("decode")).expect("json");
        assert_eq!(v["metadata"]["name"], "foo");
        assert_eq!(v["metadata"]["labels"]["app"], "x");
        assert_eq!(v["data"]["a"], "b");
        assert_eq!(v["binaryData"]["bin"], "AAE=");
        assert_eq!(v["kind"], "ConfigMap");
        let pods = resources::find("", "v1", "pods").expect("pods");
        assert!(matches!(
            to_json(pods, &body),
            Err(ApiError::UnsupportedMediaType)
        ));
        assert!(to_json(rt, b"garbage").is_err());
    }
}

//! Builds the OpenAPI documents from a list of served types
//! ([`ServedApi`]): one OpenAPI 3.0 document per group version
//! (`/openapi/v3/...`) and one swagger 2.0 document of everything
//! (`/openapi/v2`), shaped as kube-apiserver's: a path per collection,
//! object and served subresource with the operations the verbs give, each
//! with its `x-kubernetes-action`, `x-kubernetes-group-version-kind` and
//! the upstream query parameters; the schemas the kinds need, with their
//! descriptions and extensions. A schema reference with siblings is
//! `allOf: [{$ref}]` plus the siblings in v3 (3.0 ignores a `$ref`'s
//! siblings), as kube writes it.
//!
//! [`documents`] caches the set for one served set ([`fingerprint`]); the
//! v2 document and its protobuf form are made on first request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha512};

use super::data::{self, Data};
use super::gnostic;
use super::served::{fingerprint, Gvk, ServedApi};

mod paths;

use paths::{all_paths, Body, Op};

/// The Kubernetes version the documents describe.
const INFO_VERSION: &str = "v1.33.0";

const PATCH_TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// The patch media types an operation takes: all four, or, for a custom
/// type, all but strategic merge patch (kube's `415` for it), which is
/// how kubectl knows to send a merge patch instead.
fn patch_types(strategic: bool) -> Vec<&'static str> {
    PATCH_TYPES
        .into_iter()
        .filter(|t| strategic || *t != "application/strategic-merge-patch+json")
        .collect()
}

/// An encoded document and its content hash (uppercase hex SHA-512, as
/// kube's).
#[derive(Debug, Clone)]
pub struct Encoded {
    pub body: Bytes,
    pub hash: String,
}

impl Encoded {
    fn of(doc: &Value) -> Encoded {
        let body = Bytes::from(doc.to_string());
        let hash = hex_upper(&Sha512::digest(&body));
        Encoded { body, hash }
    }
}

fn hex_upper(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02X}");
        s
    })
}

/// The documents of one served set.
#[derive(Debug)]
pub struct Documents {
    /// v3 documents by index key (`api/v1`, `apis/apps/v1`).
    pub groups: BTreeMap<String, Encoded>,
    apis: Vec<ServedApi>,
    /// `/openapi/v2` as JSON and as protobuf, made together on first use
    /// (the document is built once for both).
    v2: OnceLock<(Encoded, Bytes)>,
}

impl Documents {
    pub fn build(apis: Vec<ServedApi>) -> Documents {
        let mut by_gv: BTreeMap<String, Vec<&ServedApi>> = BTreeMap::new();
        for api in &apis {
            by_gv
                .entry(gv_key(&api.group, &api.version))
                .or_default()
                .push(api);
        }
        let groups = by_gv
            .into_iter()
            .map(|(key, members)| (key, Encoded::of(&v3_document(&members))))
            .collect();
        Documents {
            groups,
            apis,
            v2: OnceLock::new(),
        }
    }

    fn v2_both(&self) -> &(Encoded, Bytes) {
        self.v2.get_or_init(|| {
            let all: Vec<&ServedApi> = self.apis.iter().collect();
            let doc = v2_document(&all);
            (Encoded::of(&doc), Bytes::from(gnostic::encode(&doc)))
        })
    }

    /// `/openapi/v2` as JSON, with the hash of that JSON (the ETag of
    /// both forms, as kube's).
    pub fn v2(&self) -> &Encoded {
        &self.v2_both().0
    }

    /// `/openapi/v2` as gnostic protobuf.
    pub fn v2_protobuf(&self) -> &Bytes {
        &self.v2_both().1
    }
}

/// The documents of what is served now: cached while the served set
/// stays the same, built again when it changes. Blocking (a build takes
/// tens of milliseconds): call it off the async workers.
pub fn documents(apis: Vec<ServedApi>) -> Arc<Documents> {
    static CACHE: Mutex<Option<(u64, Arc<Documents>)>> = Mutex::new(None);
    let key = fingerprint(&apis);
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((k, docs)) = cache.as_ref() {
        if *k == key {
            return docs.clone();
        }
    }
    let docs = Arc::new(Documents::build(apis));
    *cache = Some((key, docs.clone()));
    docs
}

/// The index key and URL path of a group version: `api/v1`,
/// `apis/apps/v1`.
pub fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The schemas a set of types needs: their roots, lists and
/// subresources' kinds, the meta types, and everything those reference.
fn schemas(apis: &[&ServedApi]) -> BTreeMap<String, Value> {
    let data = Data::get();
    let lookup = |name: &str| -> Option<&Value> {
        apis.iter()
            .find_map(|a| a.schemas.get(name))
            .or_else(|| data.definitions.get(name))
    };
    let mut todo: Vec<String> = [
        data::STATUS,
        data::DELETE_OPTIONS,
        data::PATCH,
        data::WATCH_EVENT,
        data::API_RESOURCE_LIST,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for api in apis {
        todo.push(api.root.clone());
        todo.push(api.list.clone());
        todo.extend(api.subresources.iter().map(|s| s.schema.clone()));
    }
    let mut out = BTreeMap::new();
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(schema) = lookup(&name) else {
            tracing::error!(schema = %name, "OpenAPI schema referenced but not known");
            continue;
        };
        refs(schema, &mut |r| {
            if !out.contains_key(r) {
                todo.push(r.to_string());
            }
        });
        out.insert(name, schema.clone());
    }
    out
}

const V2_REF: &str = "#/definitions/";
const V3_REF: &str = "#/components/schemas/";

/// Calls `f` with every `#/definitions/` name referenced inside `v`.
fn refs(v: &Value, f: &mut impl FnMut(&str)) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("$ref", Value::String(r)) => {
                        if let Some(name) = r.strip_prefix(V2_REF) {
                            f(name);
                        }
                    }
                    _ => refs(x, f),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, f)),
        _ => {}
    }
}

/// A swagger 2.0 schema as OpenAPI 3.0: references into
/// `#/components/schemas/`, a reference with siblings as `allOf`.
fn v3_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            let mut reference = None;
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("$ref", Value::String(r)) => {
                        let name = r.strip_prefix(V2_REF).unwrap_or(r);
                        reference = Some(json!({ "$ref": format!("{V3_REF}{name}") }));
                    }
                    // Property names are names, whatever they look like
                    // (JSONSchemaProps has one called
                    // `x-kubernetes-validations`): each value is a schema.
                    ("properties", Value::Object(props)) => {
                        let props: Map<String, Value> = props
                            .iter()
                            .map(|(name, p)| (name.clone(), v3_schema(p)))
                            .collect();
                        out.insert(k.clone(), Value::Object(props));
                    }
                    // Extensions are values, not schemas.
                    (k, x) if k.starts_with("x-") => {
                        out.insert(k.to_string(), x.clone());
                    }
                    _ => {
                        out.insert(k.clone(), v3_schema(x));
                    }
                }
            }
            match reference {
                Some(r) if out.is_empty() => r,
                Some(r) => {
                    out.insert("allOf".into(), json!([r]));
                    Value::Object(out)
                }
                None => Value::Object(out),
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(v3_schema).collect()),
        other => other.clone(),
    }
}

/// A swagger 2.0 query or path parameter as OpenAPI 3.0.
fn v3_param(p: &Value) -> Value {
    let mut out = Map::new();
    let mut schema = Map::new();
    if let Value::Object(m) = p {
        for (k, x) in m {
            match k.as_str() {
                "name" | "in" | "description" | "required" => {
                    out.insert(k.clone(), x.clone());
                }
                _ => {
                    schema.insert(k.clone(), x.clone());
                }
            }
        }
    }
    out.insert("schema".into(), Value::Object(schema));
    Value::Object(out)
}

fn gvk_value(gvk: &Gvk) -> Value {
    json!({ "group": gvk.group, "version": gvk.version, "kind": gvk.kind })
}

fn v3_op(op: &Op) -> Value {
    let mut o = json!({
        "tags": [op.tag],
        "description": op.description,
        "operationId": op.id,
    });
    if !op.query.is_empty() {
        o["parameters"] = op.query.iter().map(v3_param).collect();
    }
    let reference = |name: &str| json!({ "schema": { "$ref": format!("{V3_REF}{name}") } });
    match &op.body {
        Some(Body::Object(schema)) => {
            o["requestBody"] = json!({ "content": { "*/*": reference(schema) }, "required": true })
        }
        Some(Body::Delete) => {
            o["requestBody"] = json!({ "content": { "*/*": reference(data::DELETE_OPTIONS) } })
        }
        Some(Body::Patch { strategic }) => {
            let content: Map<String, Value> = patch_types(*strategic)
                .into_iter()
                .map(|t| (t.to_string(), reference(data::PATCH)))
                .collect();
            o["requestBody"] = json!({ "content": content, "required": true });
        }
        None => {}
    }
    let mut responses = Map::new();
    for (code, description, schema) in &op.responses {
        let mut content = Map::new();
        content.insert("application/json".into(), reference(schema));
        if op.action == "list" {
            content.insert("application/json;stream=watch".into(), reference(schema));
        }
        responses.insert(
            code.to_string(),
            json!({ "description": description, "content": content }),
        );
    }
    responses.insert("401".into(), json!({ "description": "Unauthorized" }));
    o["responses"] = Value::Object(responses);
    if !op.action.is_empty() {
        o["x-kubernetes-action"] = json!(op.action);
        o["x-kubernetes-group-version-kind"] = gvk_value(&op.gvk);
    }
    o
}

fn v2_op(op: &Op) -> Value {
    let mut o = json!({
        "tags": [op.tag],
        "description": op.description,
        "operationId": op.id,
        "consumes": ["*/*"],
        "produces": ["application/json"],
        "schemes": ["https"],
    });
    let reference = |name: &str| json!({ "$ref": format!("{V2_REF}{name}") });
    let mut params: Vec<Value> = Vec::new();
    match &op.body {
        Some(Body::Object(schema)) => params.push(
            json!({ "in": "body", "name": "body", "required": true, "schema": reference(schema) }),
        ),
        Some(Body::Delete) => params.push(
            json!({ "in": "body", "name": "body", "schema": reference(data::DELETE_OPTIONS) }),
        ),
        Some(Body::Patch { strategic }) => {
            o["consumes"] = json!(patch_types(*strategic));
            params.push(
                json!({ "in": "body", "name": "body", "required": true, "schema": reference(data::PATCH) }),
            );
        }
        None => {}
    }
    params.extend(op.query.iter().cloned());
    if !params.is_empty() {
        o["parameters"] = Value::Array(params);
    }
    let mut responses = Map::new();
    for (code, description, schema) in &op.responses {
        responses.insert(
            code.to_string(),
            json!({ "description": description, "schema": reference(schema) }),
        );
    }
    responses.insert("401".into(), json!({ "description": "Unauthorized" }));
    o["responses"] = Value::Object(responses);
    if !op.action.is_empty() {
        o["x-kubernetes-action"] = json!(op.action);
        o["x-kubernetes-group-version-kind"] = gvk_value(&op.gvk);
    }
    o
}

/// The OpenAPI 3.0 document of one group version's types.
fn v3_document(apis: &[&ServedApi]) -> Value {
    let mut paths = Map::new();
    for item in all_paths(apis) {
        let mut p = Map::new();
        for op in &item.ops {
            p.insert(op.method.into(), v3_op(op));
        }
        if !item.params.is_empty() {
            p.insert(
                "parameters".into(),
                item.params.iter().map(v3_param).collect(),
            );
        }
        paths.insert(item.path, Value::Object(p));
    }
    let schemas: Map<String, Value> = schemas(apis)
        .iter()
        .map(|(name, s)| (name.clone(), v3_schema(s)))
        .collect();
    json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": INFO_VERSION },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": { "BearerToken": {
                "type": "apiKey", "description": "Bearer Token authentication",
                "name": "authorization", "in": "header" } },
        },
        "security": [{ "BearerToken": [] }],
    })
}

/// The swagger 2.0 document of every served type.
fn v2_document(apis: &[&ServedApi]) -> Value {
    let mut paths = Map::new();
    for item in all_paths(apis) {
        let mut p = Map::new();
        for op in &item.ops {
            p.insert(op.method.into(), v2_op(op));
        }
        if !item.params.is_empty() {
            p.insert("parameters".into(), Value::Array(item.params));
        }
        paths.insert(item.path, Value::Object(p));
    }
    let definitions: Map<String, Value> = schemas(apis).into_iter().collect();
    json!({
        "swagger": "2.0",
        "info": { "title": "Kubernetes", "version": INFO_VERSION },
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": { "BearerToken": {
            "type": "apiKey", "description": "Bearer Token authentication",
            "name": "authorization", "in": "header" } },
        "security": [{ "BearerToken": [] }],
    })
}

#[cfg(test)]
mod tests;

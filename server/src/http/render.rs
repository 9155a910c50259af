//! Rendering of resource responses: objects and lists as JSON (lists
//! streamed in chunks of pre-encoded items), as a `meta.k8s.io` Table, as
//! kube's protobuf or as YAML, and the `X-Kubestore-Read` header saying
//! how a read was served.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::http::negotiate::Rendering;
use crate::http::{metrics, protobuf, table};
use crate::kube::cache::CachedObject;
use crate::kube::resources::ResourceType;
use crate::kube::store::{Listed, ReadPath};

pub fn with_read_path(mut resp: Response, served: ReadPath) -> Response {
    resp.headers_mut().insert(
        metrics::READ_HEADER,
        HeaderValue::from_static(served.as_str()),
    );
    resp
}

pub fn json_response(status: StatusCode, body: &Value) -> Response {
    // Serialized straight into bytes: `Value`'s `Display` goes through a
    // `fmt::Write` adapter, one call per string fragment, which was about
    // 1% of a REST update's CPU. A `Value` always serializes (its keys are
    // strings); the `Display` fallback is there only so no case panics.
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| body.to_string().into_bytes());
    bytes_response(status, "application/json", bytes)
}

pub fn json_bytes_response(status: StatusCode, body: bytes::Bytes) -> Response {
    bytes_response(status, "application/json", body)
}

/// A whole body with its content type.
fn bytes_response(
    status: StatusCode,
    content_type: &'static str,
    body: impl IntoResponse,
) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// An object or list as YAML, as kube writes it for `Accept:
/// application/yaml`.
fn yaml_response(status: StatusCode, body: &Value) -> Response {
    match serde_norway::to_string(body) {
        Ok(text) => bytes_response(status, "application/yaml", text.into_bytes()),
        Err(e) => {
            tracing::warn!(error = %e, "a response could not be written as YAML; sent as JSON");
            json_response(status, body)
        }
    }
}

/// A protobuf body, or the JSON one if the object has no protobuf form
/// (a field of a kind newer than the descriptors, say): every client that
/// asks for protobuf also reads JSON by the response's content type.
fn protobuf_response(
    status: StatusCode,
    encoded: Result<Vec<u8>, protobuf::ProtobufError>,
    json: impl FnOnce() -> Response,
) -> Response {
    match encoded {
        Ok(body) => bytes_response(status, protobuf::MEDIA_TYPE, body),
        Err(e) => {
            tracing::warn!(error = %e, "a response could not be written as protobuf; sent as JSON");
            json()
        }
    }
}

/// Items per chunk of a streamed list body.
const LIST_CHUNK_ITEMS: usize = 128;

/// A JSON list written to the socket in chunks of pre-encoded items: the
/// whole list is never encoded into one buffer.
fn streamed_json_list(rt: &ResourceType, meta: &Value, items: Vec<Arc<CachedObject>>) -> Response {
    let head = format!(
        r#"{{"kind":{},"apiVersion":{},"metadata":{},"items":["#,
        Value::from(rt.list_kind()),
        Value::from(rt.api_version()),
        meta
    );
    // The exact length, known before the first byte: the head, each item
    // with the comma before it (none before the first), and `]}`.
    let length = head.len()
        + items.iter().map(|o| o.json().len()).sum::<usize>()
        + items.len().saturating_sub(1)
        + 2;
    let items = Arc::new(items);
    let chunks = items.len().div_ceil(LIST_CHUNK_ITEMS);
    let body = std::iter::once(bytes::Bytes::from(head))
        .chain((0..chunks).map(move |c| {
            let from = c * LIST_CHUNK_ITEMS;
            let part = &items[from..(from + LIST_CHUNK_ITEMS).min(items.len())];
            let mut buf = Vec::with_capacity(part.iter().map(|o| o.json().len() + 1).sum());
            for (i, obj) in part.iter().enumerate() {
                if from + i > 0 {
                    buf.push(b',');
                }
                buf.extend_from_slice(obj.json());
            }
            bytes::Bytes::from(buf)
        }))
        .chain(std::iter::once(bytes::Bytes::from_static(b"]}")))
        .map(Ok::<_, std::convert::Infallible>);
    let mut resp = Response::new(Body::from_stream(futures::stream::iter(body)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Lets HTTP/1.1 frame it without chunking, and `compression` see
    // that it is large.
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    resp
}

/// An object (by its own `apiVersion` and `kind`) as JSON, YAML or
/// protobuf; a Table rendering is answered as JSON.
pub fn render_value(status: StatusCode, obj: &Value, rendering: Rendering) -> Response {
    match rendering {
        Rendering::Json | Rendering::Table => json_response(status, obj),
        Rendering::Yaml => yaml_response(status, obj),
        Rendering::Protobuf { .. } => {
            protobuf_response(status, protobuf::encode_object(obj), || {
                json_response(status, obj)
            })
        }
    }
}

pub fn render_object(
    rt: &ResourceType,
    obj: Value,
    status: StatusCode,
    rendering: Rendering,
    q: &HashMap<String, String>,
) -> Response {
    match rendering {
        Rendering::Json | Rendering::Yaml | Rendering::Protobuf { .. } => {
            render_value(status, &obj, rendering)
        }
        Rendering::Table => {
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match table::render(rt, std::slice::from_ref(&obj), &rv, q) {
                Ok(t) => json_response(status, &t),
                Err(e) => e.into_response(),
            }
        }
    }
}

pub fn render_list(
    rt: &ResourceType,
    listed: Listed,
    rendering: Rendering,
    q: &HashMap<String, String>,
) -> Response {
    let rv = listed.revision.0.to_string();
    let mut meta = json!({ "resourceVersion": rv });
    if let Some(token) = &listed.continue_token {
        meta["continue"] = json!(token);
    }
    if let Some(n) = listed.remaining {
        meta["remainingItemCount"] = json!(n);
    }
    match rendering {
        Rendering::Json => streamed_json_list(rt, &meta, listed.items),
        Rendering::Protobuf { .. } => protobuf_response(
            StatusCode::OK,
            protobuf::encode_list(rt, &meta, &listed.items),
            || streamed_json_list(rt, &meta, listed.items.clone()),
        ),
        Rendering::Yaml => yaml_response(
            StatusCode::OK,
            &json!({
                "kind": rt.list_kind(),
                "apiVersion": rt.api_version(),
                "metadata": meta,
                "items": listed.items.iter().map(|o| o.to_value()).collect::<Vec<_>>(),
            }),
        ),
        Rendering::Table => match table::render_list(rt, &listed.items, &meta, q) {
            Ok(table) => json_bytes_response(StatusCode::OK, table.into()),
            Err(e) => e.into_response(),
        },
    }
}

//! OpenAPI: `/openapi/v3` (the index of group versions, each entry's URL
//! carrying its document's content hash), `/openapi/v3/api/v1` and
//! `/openapi/v3/apis/<g>/<v>` (OpenAPI 3.0, JSON), and `/openapi/v2`
//! (swagger 2.0, as JSON or as gnostic protobuf), answered as
//! kube-apiserver's kube-openapi handlers answer them: `ETag`,
//! `If-None-Match` → `304`, `Cache-Control: public, immutable` for a URL
//! whose hash is current, a `301` to the current URL for a stale hash,
//! `406` when no served media type is acceptable.
//!
//! Layout: `data` (the generated definitions and parameters,
//! `scripts/gen-openapi.py`), `served` (the served types as the documents
//! see them: the seam custom resources plug into), `document` (building
//! and caching the documents), `gnostic` (the v2 document as protobuf).

pub mod data;
pub mod document;
pub mod gnostic;
pub mod served;

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{json, Map};

use crate::http::AppState;
use document::{gv_key, Documents};

/// Media type of the v2 document as protobuf (what client-go asks for).
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The older spelling kube-openapi also answers, and the `Content-Type`
/// of either: Go's `mime.ParseMediaType`, which client-go runs on every
/// response, refuses the `@` ("unexpected content after media subtype").
const V2_PROTOBUF_LEGACY: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// What the OpenAPI handlers fail with.
#[derive(Debug, thiserror::Error)]
pub enum OpenApiError {
    /// No document of that group version is served.
    #[error("404 page not found")]
    NotFound,
    /// The client accepts none of the media types served.
    #[error("406 Not Acceptable")]
    NotAcceptable,
    /// Building the documents failed (a panic in the builder).
    #[error("building the OpenAPI documents failed: {0}")]
    Build(String),
}

impl IntoResponse for OpenApiError {
    fn into_response(self) -> Response {
        let code = match self {
            OpenApiError::NotFound => StatusCode::NOT_FOUND,
            OpenApiError::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            OpenApiError::Build(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut resp = (code, format!("{self}\n")).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp
    }
}

/// The documents of what this node serves now (cached per served set).
async fn current(state: &AppState) -> Result<Arc<Documents>, OpenApiError> {
    let types = state.kube.cache().types();
    tokio::task::spawn_blocking(move || document::documents(served::served(&types)))
        .await
        .map_err(|e| OpenApiError::Build(e.to_string()))
}

/// The media types of an `Accept` header, in the client's order, without
/// parameters; `*/*` when there is none.
fn accepted(headers: &HeaderMap) -> Vec<String> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    if accept.is_empty() {
        return vec!["*/*".into()];
    }
    accept
        .split(',')
        .filter_map(|m| m.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Whether a media range of the client's covers `media`.
fn covers(range: &str, media: &str) -> bool {
    range == media
        || range == "*/*"
        || range
            .strip_suffix("/*")
            .is_some_and(|t| media.split('/').next() == Some(t))
}

/// The first of `served` the client accepts, in the client's order.
fn negotiate(headers: &HeaderMap, served: &[&'static str]) -> Result<&'static str, OpenApiError> {
    accepted(headers)
        .iter()
        .find_map(|range| served.iter().find(|m| covers(range, m)).copied())
        .ok_or(OpenApiError::NotAcceptable)
}

/// A body with its content type and quoted ETag, or `304` when the
/// client's `If-None-Match` names the ETag.
fn content(headers: &HeaderMap, body: Bytes, media: &'static str, hash: &str) -> Response {
    let etag = format!("\"{hash}\"");
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| matches!(t.trim(), "*") || t.trim() == etag)
        });
    let mut resp = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, body).into_response()
    };
    let h = resp.headers_mut();
    if !not_modified {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    resp
}

/// `GET /openapi/v3`: every served group version's document URL, with
/// the document's hash.
pub async fn index(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let span = tracing::info_span!("openapi", node = state.node.id(), path = "/openapi/v3");
    let result = tracing::Instrument::instrument(current(&state), span).await;
    let docs = match result {
        Ok(docs) => docs,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = negotiate(&headers, &["application/json"]) {
        return e.into_response();
    }
    let paths: Map<String, serde_json::Value> = docs
        .groups
        .iter()
        .map(|(key, doc)| {
            (
                key.clone(),
                json!({ "serverRelativeURL": format!("/openapi/v3/{key}?hash={}", doc.hash) }),
            )
        })
        .collect();
    let body = Bytes::from(json!({ "paths": paths }).to_string());
    let hash = {
        use sha2::{Digest, Sha512};
        let digest = Sha512::digest(&body);
        digest
            .iter()
            .take(16)
            .map(|b| format!("{b:02X}"))
            .collect::<String>()
    };
    content(&headers, body, "application/json", &hash)
}

/// `GET /openapi/v3/api/<version>`.
pub async fn core(
    State(state): State<AppState>,
    Path(version): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    group_version(state, gv_key("", &version), query, headers).await
}

/// `GET /openapi/v3/apis/<group>/<version>`.
pub async fn group(
    State(state): State<AppState>,
    Path((group, version)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    group_version(state, gv_key(&group, &version), query, headers).await
}

async fn group_version(
    state: AppState,
    key: String,
    query: Option<String>,
    headers: HeaderMap,
) -> Response {
    let span = tracing::info_span!("openapi", node = state.node.id(), path = %key);
    let result = tracing::Instrument::instrument(current(&state), span).await;
    match result.and_then(|docs| gv_response(&docs, &key, query.as_deref(), &headers)) {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

/// One group version's document, as kube-openapi's `HandleGroupVersion`.
fn gv_response(
    docs: &Documents,
    key: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<Response, OpenApiError> {
    let doc = docs.groups.get(key).ok_or(OpenApiError::NotFound)?;
    let media = negotiate(headers, &["application/json"])?;
    let asked = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("hash="));
    let cache_control = match asked {
        Some(hash) if hash != doc.hash => {
            let mut resp = StatusCode::MOVED_PERMANENTLY.into_response();
            let url = format!("/openapi/v3/{key}?hash={}", doc.hash);
            if let Ok(v) = HeaderValue::from_str(&url) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            return Ok(resp);
        }
        Some(_) => Some(()),
        None => None,
    };
    let mut resp = content(headers, doc.body.clone(), media, &doc.hash);
    if cache_control.is_some() {
        let h = resp.headers_mut();
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, immutable"),
        );
        let expires = (chrono::Utc::now() + chrono::Duration::days(365))
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        if let Ok(v) = HeaderValue::from_str(&expires) {
            h.insert(header::EXPIRES, v);
        }
    }
    Ok(resp)
}

/// `GET /openapi/v2`: the whole swagger 2.0 document, as JSON or as
/// gnostic protobuf.
pub async fn v2(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let span = tracing::info_span!("openapi", node = state.node.id(), path = "/openapi/v2");
    let work = async move {
        let docs = current(&state).await?;
        tokio::task::spawn_blocking(move || v2_response(&docs, &headers))
            .await
            .map_err(|e| OpenApiError::Build(e.to_string()))?
    };
    match tracing::Instrument::instrument(work, span).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

/// The v2 document in the form the client asks for. Blocking: the first
/// call builds and encodes it.
fn v2_response(docs: &Documents, headers: &HeaderMap) -> Result<Response, OpenApiError> {
    let media = negotiate(
        headers,
        &["application/json", V2_PROTOBUF, V2_PROTOBUF_LEGACY],
    )?;
    let json = docs.v2();
    Ok(if media == "application/json" {
        content(headers, json.body.clone(), media, &json.hash)
    } else {
        let body = docs.v2_protobuf().clone();
        content(headers, body, V2_PROTOBUF_LEGACY, &json.hash)
    })
}

#[cfg(test)]
mod tests;

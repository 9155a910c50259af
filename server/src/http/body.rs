//! Request bodies: read under the size limit (`413` past it), the media
//! type of a body (`415` for one not served), object bodies decoded from
//! JSON or protobuf to JSON, and `DeleteOptions` (body or query).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap};
use serde_json::Value;

use crate::http::patch::PatchKind;
use crate::http::protobuf;
use crate::http::state::AppState;
use crate::http::status::ApiError;
use crate::kube::options::DeleteOptions;
use crate::kube::resources::ResourceType;

/// The `DeleteOptions` of a DELETE: its query parameters
/// (`propagationPolicy`, `gracePeriodSeconds`, `orphanDependents`,
/// `dryRun`), overridden by the fields of a body if it has one: JSON (with
/// or without `kind`/`apiVersion`, as kube accepts it) or, with the
/// protobuf media type, protobuf.
pub fn delete_options(
    body: &[u8],
    media: &str,
    q: &std::collections::HashMap<String, String>,
) -> Result<DeleteOptions, ApiError> {
    let mut fields = serde_json::Map::new();
    for key in [
        "propagationPolicy",
        "gracePeriodSeconds",
        "orphanDependents",
        "dryRun",
    ] {
        if let Some(v) = q.get(key) {
            fields.insert(key.into(), Value::String(v.clone()));
        }
    }
    if media == protobuf::MEDIA_TYPE && !body.is_empty() {
        fields.extend(protobuf::delete_options_to_json(body)?);
    } else if !body.iter().all(u8::is_ascii_whitespace) {
        let opts: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("couldn't decode DeleteOptions: {e}")))?;
        let Value::Object(opts) = opts else {
            return Err(ApiError::BadRequest(
                "couldn't decode DeleteOptions: the body is not a JSON object".into(),
            ));
        };
        fields.extend(opts);
    }
    Ok(DeleteOptions::decode(&fields)?)
}

/// The request's media type without parameters, lower-cased ("" if none).
pub fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

pub fn patch_kind(headers: &HeaderMap) -> Result<PatchKind, ApiError> {
    match media_type(headers).as_str() {
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
        "application/apply-patch+yaml" => Ok(PatchKind::Apply),
        _ => Err(ApiError::UnsupportedPatchType(
            crate::http::patch::BUILTIN_PATCH_TYPES,
        )),
    }
}

/// Bodies larger than the limit are still read (and dropped) up to this
/// many times the limit, so the client gets its 413 instead of a reset
/// connection while it is still sending.
const OVERSIZED_DRAIN_FACTOR: usize = 16;

pub async fn read_body(state: &AppState, req: Request) -> Result<Vec<u8>, ApiError> {
    use http_body_util::BodyExt;
    let limit = state.max_body_bytes;
    let mut body: Body = req.into_body();
    let mut buf = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::BadRequest(format!("failed to read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len();
        if seen <= limit {
            buf.extend_from_slice(&data);
        } else if seen > limit.saturating_mul(OVERSIZED_DRAIN_FACTOR) {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::RequestEntityTooLarge(limit));
    }
    Ok(buf)
}

/// Reads an object body as JSON: JSON as is, protobuf (a built-in kind)
/// or YAML converted; another content type is a 415.
pub async fn read_json_body(
    state: &AppState,
    rt: &ResourceType,
    req: Request,
) -> Result<Vec<u8>, ApiError> {
    match media_type(req.headers()).as_str() {
        "" | "application/json" => read_body(state, req).await,
        protobuf::MEDIA_TYPE => protobuf::to_json(rt, &read_body(state, req).await?),
        "application/yaml" => yaml_to_json(&read_body(state, req).await?),
        _ => Err(ApiError::UnsupportedMediaType),
    }
}

/// A YAML object body as JSON bytes (kube's words for one that is not).
pub fn yaml_to_json(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let value: Value = serde_norway::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}")))?;
    serde_json::to_vec(&value)
        .map_err(|e| ApiError::BadRequest(format!("error converting YAML to JSON: {e}")))
}

/// Property tests: whatever body or content type a client sends, it is
/// read or refused as the client's mistake (`4xx`), never a panic or a
/// `5xx`.
#[cfg(test)]
mod proptests {
    use axum::http::{HeaderValue, StatusCode};
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz::{self, assert_client_error};
    use crate::http::negotiate;
    use crate::kube::resources;

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_delete_options_are_read_or_refused(body in fuzz::body(), q in fuzz::query()) {
            if let Err(e) = delete_options(&body, "", &q) {
                assert_client_error(&e)?;
            }
        }

        #[test]
        fn any_content_type_or_accept_header_is_read_or_refused(value in "[ -~]{0,48}") {
            let mut headers = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert(header::CONTENT_TYPE, v.clone());
                headers.insert(header::ACCEPT, v);
            }
            if let Err(e) = patch_kind(&headers) {
                prop_assert_eq!(e.code(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
            }
            if let Err(e) = negotiate::rendering(&headers) {
                assert_client_error(&e)?;
            }
        }

        #[test]
        fn any_protobuf_body_converts_or_is_refused(
            tail in proptest::collection::vec(any::<u8>(), 0..96),
            plural in proptest::sample::select(&["configmaps", "secrets", "namespaces", "pods"][..]),
        ) {
            let rt = resources::RESOURCES
                .iter()
                .find(|r| r.plural == plural)
                .expect("a served type");
            let mut body = b"k8s\0".to_vec();
            body.extend_from_slice(&tail);
            for candidate in [&body[..], &tail[..]] {
                if let Err(e) = protobuf::to_json(rt, candidate) {
                    assert_client_error(&e)?;
                }
            }
        }
    }
}

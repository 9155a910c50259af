//! The one place where errors become Kubernetes `Status` objects on the
//! wire: code, reason, message and details exactly as kube words them.
//!
//! [`ApiError`] is the answer as sent: the domain's errors
//! ([`KubeError`], and through it storage's and Raft's) plus the ones only
//! HTTP has (no such path, method, media type, body size, the in-flight
//! limit). `From<KubeError>` is the one mapping from the domain; Raft's
//! errors map by class (retryable: 503, outcome unknown: 504, fatal: 500).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::kube::error::{FieldCause, KubeError};
use crate::kube::resources::ResourceType;

/// Every error the Kubernetes front end answers with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{} \"{name}\" not found", .resource)]
    NotFound { resource: String, name: String },
    #[error("{} \"{name}\" already exists", .resource)]
    AlreadyExists { resource: String, name: String },
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {detail}")]
    Conflict {
        resource: String,
        name: String,
        detail: String,
    },
    #[error("{kind} \"{name}\" is invalid: {}", join_causes(.causes))]
    Invalid {
        kind: String,
        group: String,
        name: String,
        causes: Vec<FieldCause>,
    },
    /// A path under `/api` or `/apis` that names no served resource.
    #[error("the server could not find the requested resource")]
    NoSuchResource,
    #[error("{0}")]
    BadRequest(String),
    #[error("{message}")]
    Forbidden {
        resource: String,
        name: String,
        message: String,
    },
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("the body of the request was in an unknown format - accepted media types include: application/json")]
    UnsupportedMediaType,
    #[error("only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io")]
    NotAcceptable,
    #[error("Request entity too large: limit is {0}")]
    RequestEntityTooLarge(usize),
    /// A request too large in another way than its bytes (413).
    #[error("Request entity too large: {0}")]
    EntityTooLarge(String),
    /// A resourceVersion older than the retained history (410).
    #[error("{0}")]
    Expired(String),
    /// A continue token whose revision was compacted (410), with a fresh
    /// token that continues at the latest revision.
    #[error("{message}")]
    ExpiredContinue {
        message: String,
        token: Option<String>,
    },
    /// A read for a revision this node did not reach in time (504).
    #[error("Timeout: Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion { requested: u64, current: u64 },
    #[error("{0}")]
    ServiceUnavailable(String),
    /// Over the node's limit of requests in flight (429).
    #[error("Too many requests, please try again later.")]
    TooManyRequests,
    #[error("Timeout: {0}")]
    Timeout(String),
    #[error("Internal error occurred: {0}")]
    Internal(String),
}

fn join_causes(causes: &[FieldCause]) -> String {
    let parts: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

impl ApiError {
    pub fn invalid(rt: &ResourceType, name: &str, causes: Vec<FieldCause>) -> Self {
        KubeError::invalid(rt, name, causes).into()
    }

    /// kube's 422 for invalid list/watch options (kind `ListOptions`).
    pub fn invalid_list_options(causes: Vec<FieldCause>) -> Self {
        KubeError::invalid_list_options(causes).into()
    }

    pub fn code(&self) -> StatusCode {
        match self {
            ApiError::NotFound { .. } | ApiError::NoSuchResource => StatusCode::NOT_FOUND,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            ApiError::RequestEntityTooLarge(_) | ApiError::EntityTooLarge(_) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::Expired(_) | ApiError::ExpiredContinue { .. } => StatusCode::GONE,
            ApiError::ServiceUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Timeout(_) | ApiError::TooLargeResourceVersion { .. } => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } | ApiError::NoSuchResource => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::MethodNotAllowed(_) => "MethodNotAllowed",
            ApiError::UnsupportedMediaType => "UnsupportedMediaType",
            ApiError::NotAcceptable => "NotAcceptable",
            ApiError::RequestEntityTooLarge(_) | ApiError::EntityTooLarge(_) => {
                "RequestEntityTooLarge"
            }
            ApiError::Expired(_) | ApiError::ExpiredContinue { .. } => "Expired",
            ApiError::ServiceUnavailable(_) => "ServiceUnavailable",
            ApiError::TooManyRequests => "TooManyRequests",
            ApiError::Timeout(_) | ApiError::TooLargeResourceVersion { .. } => "Timeout",
            ApiError::Internal(_) => "InternalError",
        }
    }

    /// Seconds a client should wait before retrying, when that is the point.
    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::ServiceUnavailable(_)
            | ApiError::TooManyRequests
            | ApiError::Timeout(_)
            | ApiError::TooLargeResourceVersion { .. } => Some(1),
            _ => None,
        }
    }

    fn details(&self) -> Option<Value> {
        let mut details = match self {
            ApiError::NotFound { resource, name }
            | ApiError::AlreadyExists { resource, name }
            | ApiError::Conflict { resource, name, .. }
            | ApiError::Forbidden { resource, name, .. } => {
                let (kind, group) = match resource.split_once('.') {
                    Some((k, g)) => (k, g),
                    None => (resource.as_str(), ""),
                };
                let mut d = json!({ "name": name, "kind": kind });
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                d
            }
            ApiError::Invalid {
                kind,
                group,
                name,
                causes,
            } => {
                let kind = kind.split('.').next().unwrap_or(kind);
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
                    .collect();
                let mut d = json!({ "name": name, "kind": kind, "causes": causes });
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                d
            }
            ApiError::Internal(msg) => json!({ "causes": [{ "message": msg }] }),
            ApiError::TooLargeResourceVersion { .. } => json!({
                "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }]
            }),
            _ => json!({}),
        };
        if let Some(secs) = self.retry_after() {
            details["retryAfterSeconds"] = json!(secs);
        }
        if details.as_object().is_some_and(|o| o.is_empty()) {
            None
        } else {
            Some(details)
        }
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": match self {
                ApiError::Forbidden { message, .. } => message.clone(),
                other => other.to_string(),
            },
            "reason": self.reason(),
            "code": self.code().as_u16(),
        });
        if let Some(details) = self.details() {
            status["details"] = details;
        }
        if let ApiError::ExpiredContinue { token: Some(t), .. } = self {
            status["metadata"] = json!({ "continue": t });
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.code().is_server_error() {
            tracing::warn!(error = %self, code = self.code().as_u16(), "request failed");
        } else {
            tracing::debug!(error = %self, code = self.code().as_u16(), "request refused");
        }
        let body = self.to_status().to_string();
        let mut resp = (self.code(), body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after() {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

/// Unknown non-resource paths: plain text, not a `Status`, as kube answers
/// them.
pub async fn page_not_found() -> Response {
    let mut resp = (StatusCode::NOT_FOUND, "404 page not found\n").into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// The one mapping of the Kubernetes layer's errors to the wire.
impl From<KubeError> for ApiError {
    fn from(e: KubeError) -> Self {
        match e {
            KubeError::NotFound { resource, name } => ApiError::NotFound { resource, name },
            KubeError::AlreadyExists { resource, name } => {
                ApiError::AlreadyExists { resource, name }
            }
            KubeError::Conflict {
                resource,
                name,
                detail,
            } => ApiError::Conflict {
                resource,
                name,
                detail,
            },
            KubeError::Invalid {
                kind,
                group,
                name,
                causes,
            } => ApiError::Invalid {
                kind,
                group,
                name,
                causes,
            },
            KubeError::BadRequest(message) => ApiError::BadRequest(message),
            KubeError::Forbidden {
                resource,
                name,
                message,
            } => ApiError::Forbidden {
                resource,
                name,
                message,
            },
            KubeError::Expired(message) => ApiError::Expired(message),
            KubeError::ExpiredContinue { message, token } => {
                ApiError::ExpiredContinue { message, token }
            }
            KubeError::TooLargeResourceVersion { requested, current } => {
                ApiError::TooLargeResourceVersion { requested, current }
            }
            KubeError::Unavailable(message) => ApiError::ServiceUnavailable(message),
            KubeError::Raft(e) => ApiError::from(e),
            KubeError::Internal(message) => ApiError::Internal(message),
        }
    }
}

/// Raft's errors by class: retryable is `503`, an unknown outcome `504`, a
/// command over the limits `413`/`400`, anything fatal `500`.
impl From<kubestore_raft::RaftNodeError> for ApiError {
    fn from(e: kubestore_raft::RaftNodeError) -> Self {
        use kubestore_raft::RaftNodeError as E;
        match e {
            e if e.is_retryable() => {
                ApiError::ServiceUnavailable(format!("the store is unavailable: {e}"))
            }
            E::Indeterminate(detail) => ApiError::Timeout(format!(
                "the request may or may not have been applied: {detail}"
            )),
            E::Timeout(what) => ApiError::Timeout(format!(
                "request did not complete within the allowed duration (waiting for {what})"
            )),
            E::InvalidCommand(kubestore_storage::InvalidCommand::TooLarge { max, .. }) => {
                ApiError::RequestEntityTooLarge(max)
            }
            E::InvalidCommand(invalid) => ApiError::BadRequest(invalid.to_string()),
            fatal => ApiError::Internal(fatal.to_string()),
        }
    }
}

/// A compaction asked for on `/debug/compact`: a revision out of range is
/// the caller's mistake (400).
impl From<crate::compaction::CompactError> for ApiError {
    fn from(e: crate::compaction::CompactError) -> Self {
        use crate::compaction::CompactError as E;
        match e {
            E::Raft(e) => ApiError::from(e),
            e @ (E::FutureRevision(_) | E::AlreadyCompacted { .. }) => {
                ApiError::BadRequest(e.to_string())
            }
            e => ApiError::Internal(e.to_string()),
        }
    }
}

/// A storage error outside the Kubernetes layer (a watch's catch-up read):
/// mapped as the Kubernetes layer maps it.
impl From<kubestore_storage::StoreError> for ApiError {
    fn from(e: kubestore_storage::StoreError) -> Self {
        KubeError::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    #[test]
    fn not_found_matches_kube() {
        let rt = resources::find("apps", "v1", "deployments").expect("deployments");
        let s = ApiError::from(KubeError::not_found(rt, "web")).to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "deployments.apps \"web\" not found");
        assert_eq!(
            s["details"],
            json!({"name": "web", "kind": "deployments", "group": "apps"})
        );
    }

    #[test]
    fn invalid_lists_its_causes() {
        let rt = resources::find("", "v1", "configmaps").expect("configmaps");
        let err = ApiError::invalid(
            rt,
            "Bad",
            vec![FieldCause::invalid(
                "metadata.name",
                "Bad",
                "must be lower case",
            )],
        );
        let s = err.to_status();
        assert_eq!(s["code"], 422);
        assert_eq!(
            s["message"],
            "ConfigMap \"Bad\" is invalid: metadata.name: Invalid value: \"Bad\": must be lower case"
        );
        assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueInvalid");
        assert_eq!(s["details"]["kind"], "ConfigMap");
    }

    #[test]
    fn a_compacted_read_is_gone_wherever_it_happens() {
        let e = kubestore_storage::StoreError::Compacted {
            requested: kubestore_storage::Revision(3),
            compacted: kubestore_storage::Revision(5),
        };
        let s = ApiError::from(KubeError::from(e)).to_status();
        assert_eq!(s["code"], 410);
        assert_eq!(s["reason"], "Expired");
    }

    #[test]
    fn raft_errors_map_by_class() {
        use kubestore_raft::{RaftNodeError, UnknownOutcome};
        let code = |e: RaftNodeError| ApiError::from(KubeError::from(e)).code().as_u16();
        assert_eq!(code(RaftNodeError::NoLeader), 503);
        assert_eq!(code(RaftNodeError::ShuttingDown), 503);
        assert_eq!(code(RaftNodeError::Timeout("a read index")), 504);
        assert_eq!(
            code(RaftNodeError::Indeterminate(UnknownOutcome::Leader(
                "x".into()
            ))),
            504
        );
    }

    #[test]
    fn unavailable_carries_retry_after() {
        let s = ApiError::ServiceUnavailable("x".into()).to_status();
        assert_eq!(s["details"]["retryAfterSeconds"], 1);
        assert_eq!(s["code"], 503);
    }
}

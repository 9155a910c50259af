//! The one place where errors become Kubernetes `Status` objects on the
//! wire: code, reason, message and details exactly as kube words them.
//!
//! [`ApiError`] is what a handler fails with: a domain error
//! ([`KubeError`], and through it storage's and Raft's), mapped here
//! straight to its `Status` ([`kube_failure`]; Raft's errors by class:
//! retryable `503`, outcome unknown `504`, over the limits `413`/`400`,
//! fatal `500`), or one of the errors only HTTP has: no such path, a
//! malformed query parameter, header or body, a method, media type or
//! body size not served, the in-flight limit.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::kube::error::{FieldCause, KubeError};
use crate::kube::resources::ResourceType;

/// Every error the Kubernetes front end answers with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// A domain error: what a verb, a read or an input check of the
    /// Kubernetes layer failed with.
    #[error("{}", kube_failure(.0).message)]
    Kube(#[from] KubeError),
    /// A path under `/api` or `/apis` that names no served resource.
    #[error("the server could not find the requested resource")]
    NoSuchResource,
    /// A malformed query parameter, header or body that HTTP alone reads.
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("the body of the request was in an unknown format - accepted media types include: application/json")]
    UnsupportedMediaType,
    /// A PATCH body of a media type not served for the type: the types
    /// that are, as kube lists them.
    #[error("the body of the request was in an unknown format - accepted media types include: {}", .0.join(", "))]
    UnsupportedPatchType(&'static [&'static str]),
    #[error("only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io")]
    NotAcceptable,
    /// A body over the node's limit (413).
    #[error("Request entity too large: limit is {0}")]
    RequestEntityTooLarge(usize),
    /// A request too large in another way than its bytes (413).
    #[error("Request entity too large: {0}")]
    EntityTooLarge(String),
    /// Over the node's limit of requests in flight (429).
    #[error("Too many requests, please try again later.")]
    TooManyRequests,
}

/// A failure as a `metav1.Status` carries it.
#[derive(Debug, Clone)]
struct Failure {
    code: StatusCode,
    reason: &'static str,
    message: String,
    /// `details`, before `retryAfterSeconds` is added.
    details: Value,
    /// `metadata.continue` of an expired continue token.
    continue_token: Option<String>,
}

impl Failure {
    fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: json!({}),
            continue_token: None,
        }
    }

    /// Details naming the object: `resource` is the group resource.
    fn about(mut self, resource: &str, name: &str) -> Self {
        let (kind, group) = match resource.split_once('.') {
            Some((k, g)) => (k, g),
            None => (resource, ""),
        };
        self.details = json!({ "name": name, "kind": kind });
        if !group.is_empty() {
            self.details["group"] = json!(group);
        }
        self
    }

    fn internal(message: &str) -> Self {
        let mut f = Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            format!("Internal error occurred: {message}"),
        );
        f.details = json!({ "causes": [{ "message": message }] });
        f
    }

    fn timeout(message: impl std::fmt::Display) -> Self {
        Failure::new(
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            format!("Timeout: {message}"),
        )
    }
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

/// The one mapping of the Kubernetes layer's errors to the wire.
fn kube_failure(e: &KubeError) -> Failure {
    match e {
        KubeError::NotFound { resource, name } => {
            Failure::new(StatusCode::NOT_FOUND, "NotFound", e.to_string()).about(resource, name)
        }
        KubeError::AlreadyExists { resource, name } => {
            Failure::new(StatusCode::CONFLICT, "AlreadyExists", e.to_string()).about(resource, name)
        }
        KubeError::GeneratedNameConflict { resource, name } => {
            let mut f = Failure::new(StatusCode::CONFLICT, "AlreadyExists", e.to_string())
                .about(resource, name);
            f.details["retryAfterSeconds"] = json!(1);
            f
        }
        KubeError::Conflict {
            resource,
            name,
            detail,
        } => Failure::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {detail}"),
        )
        .about(resource, name),
        KubeError::ApplyConflict { message, causes } => {
            let mut f = Failure::new(StatusCode::CONFLICT, "Conflict", message.clone());
            let causes: Vec<Value> = causes
                .iter()
                .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
                .collect();
            f.details = json!({ "causes": causes });
            f
        }
        KubeError::Invalid {
            kind,
            group,
            name,
            causes,
        } => {
            let mut f = Failure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!("{kind} \"{name}\" is invalid: {}", join_causes(causes)),
            );
            let kind = kind.split('.').next().unwrap_or(kind);
            let causes: Vec<Value> = causes
                .iter()
                .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
                .collect();
            f.details = json!({ "name": name, "kind": kind, "causes": causes });
            if !group.is_empty() {
                f.details["group"] = json!(group);
            }
            f
        }
        KubeError::BadRequest(message) => {
            Failure::new(StatusCode::BAD_REQUEST, "BadRequest", message.clone())
        }
        KubeError::Forbidden {
            resource,
            name,
            message,
        } => {
            Failure::new(StatusCode::FORBIDDEN, "Forbidden", message.clone()).about(resource, name)
        }
        KubeError::NamespaceTerminating {
            resource,
            name,
            namespace,
        } => {
            let mut f = Failure::new(StatusCode::FORBIDDEN, "Forbidden", e.to_string())
                .about(resource, name);
            f.details["causes"] = json!([{
                "reason": "NamespaceTerminating",
                "message": format!("namespace {namespace} is being terminated"),
                "field": "metadata.namespace",
            }]);
            f
        }
        KubeError::MethodNotAllowed(message) => Failure::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            message.clone(),
        ),
        KubeError::Expired(message) => Failure::new(StatusCode::GONE, "Expired", message.clone()),
        KubeError::ExpiredContinue { message, token } => {
            let mut f = Failure::new(StatusCode::GONE, "Expired", message.clone());
            f.continue_token = token.clone();
            f
        }
        KubeError::TooLargeResourceVersion { requested, current } => {
            let mut f = Failure::timeout(format!(
                "Too large resource version: {requested}, current: {current}"
            ));
            f.details = json!({
                "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }]
            });
            f
        }
        KubeError::Unavailable(message) => Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            message.clone(),
        ),
        KubeError::Raft(e) => raft_failure(e),
        KubeError::Internal(message) => Failure::internal(message),
    }
}

/// Raft's errors by class: retryable is `503`, an unknown outcome `504`, a
/// command over the limits `413`/`400`, anything fatal `500`.
fn raft_failure(e: &kubestore_raft::RaftNodeError) -> Failure {
    use kubestore_raft::RaftNodeError as E;
    match e {
        e if e.is_retryable() => Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("the store is unavailable: {e}"),
        ),
        E::Indeterminate(detail) => Failure::timeout(format!(
            "the request may or may not have been applied: {detail}"
        )),
        E::Timeout(what) => Failure::timeout(format!(
            "request did not complete within the allowed duration (waiting for {what})"
        )),
        E::InvalidCommand(kubestore_storage::InvalidCommand::TooLarge { max, .. }) => {
            http_failure(&ApiError::RequestEntityTooLarge(*max))
        }
        E::InvalidCommand(invalid) => {
            Failure::new(StatusCode::BAD_REQUEST, "BadRequest", invalid.to_string())
        }
        fatal => Failure::internal(&fatal.to_string()),
    }
}

/// The errors only HTTP has.
fn http_failure(e: &ApiError) -> Failure {
    let (code, reason) = match e {
        ApiError::Kube(e) => return kube_failure(e),
        ApiError::NoSuchResource => (StatusCode::NOT_FOUND, "NotFound"),
        ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
        ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        ApiError::UnsupportedMediaType | ApiError::UnsupportedPatchType(_) => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType")
        }
        ApiError::NotAcceptable => (StatusCode::NOT_ACCEPTABLE, "NotAcceptable"),
        ApiError::RequestEntityTooLarge(_) | ApiError::EntityTooLarge(_) => {
            (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge")
        }
        ApiError::TooManyRequests => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
    };
    Failure::new(code, reason, e.to_string())
}

impl ApiError {
    pub fn invalid(rt: &ResourceType, name: &str, causes: Vec<FieldCause>) -> Self {
        KubeError::invalid(rt, name, causes).into()
    }

    /// kube's 422 for invalid list/watch options (kind `ListOptions`).
    pub fn invalid_list_options(causes: Vec<FieldCause>) -> Self {
        KubeError::invalid_list_options(causes).into()
    }

    fn failure(&self) -> Failure {
        http_failure(self)
    }

    pub fn code(&self) -> StatusCode {
        self.failure().code
    }

    pub fn reason(&self) -> &'static str {
        self.failure().reason
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        status_body(&self.failure())
    }
}

/// Seconds a client should wait before retrying, when that is the point:
/// the store unavailable, too many requests, a timeout.
fn retry_after(code: StatusCode) -> Option<u64> {
    matches!(
        code,
        StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::TOO_MANY_REQUESTS
            | StatusCode::GATEWAY_TIMEOUT
    )
    .then_some(1)
}

fn status_body(f: &Failure) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f.message,
        "reason": f.reason,
        "code": f.code.as_u16(),
    });
    let mut details = f.details.clone();
    if let Some(secs) = retry_after(f.code) {
        details["retryAfterSeconds"] = json!(secs);
    }
    if details.as_object().is_some_and(|o| !o.is_empty()) {
        status["details"] = details;
    }
    if let Some(t) = &f.continue_token {
        status["metadata"] = json!({ "continue": t });
    }
    status
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let f = self.failure();
        if f.code.is_server_error() {
            tracing::warn!(error = %f.message, code = f.code.as_u16(), "request failed");
        } else {
            tracing::debug!(error = %f.message, code = f.code.as_u16(), "request refused");
        }
        let body = status_body(&f).to_string();
        let mut resp = (f.code, body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = retry_after(f.code) {
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

/// Raft's errors, outside a Kubernetes verb (`/debug/cluster`), map as
/// inside one.
impl From<kubestore_raft::RaftNodeError> for ApiError {
    fn from(e: kubestore_raft::RaftNodeError) -> Self {
        ApiError::Kube(KubeError::Raft(e))
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
            e => ApiError::Kube(KubeError::Internal(e.to_string())),
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

/// The answer to a request served in `span`: its response, or its error
/// as a `Status`. The error is logged as it becomes one (a 5xx at warn),
/// inside the request's span, so the line says which request failed.
pub(crate) fn answer_in(span: &tracing::Span, result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(|e| span.in_scope(|| e.into_response()))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;
    use tracing_subscriber::Layer;

    use super::*;
    use crate::kube::resources;

    /// An event's level and the name of the span it was logged in.
    type Logged = (tracing::Level, Option<String>);

    /// Records every event as [`Logged`].
    struct Events(Arc<Mutex<Vec<Logged>>>);

    impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Events {
        fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
            let span = ctx.event_span(event).map(|s| s.name().to_string());
            self.0
                .lock()
                .expect("events")
                .push((*event.metadata().level(), span));
        }
    }

    #[test]
    fn a_failed_request_is_logged_in_its_span_and_an_answer_is_not_logged() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Events(events.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("kube_request", path = "/api/v1/namespaces");
            let failed = answer_in(
                &span,
                Err(KubeError::Internal("the disk is gone".into()).into()),
            );
            assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let answered = answer_in(&span, Ok(StatusCode::OK.into_response()));
            assert_eq!(answered.status(), StatusCode::OK);
        });
        assert_eq!(
            *events.lock().expect("events"),
            vec![(tracing::Level::WARN, Some("kube_request".to_string()))]
        );
    }

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
        let s = ApiError::from(KubeError::Unavailable("x".into())).to_status();
        assert_eq!(s["details"]["retryAfterSeconds"], 1);
        assert_eq!(s["code"], 503);
    }
}

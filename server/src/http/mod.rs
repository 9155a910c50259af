//! The Kubernetes REST front end (axum): routing, discovery, health, the
//! verbs, and the one mapping of errors to `Status` objects.
//!
//! Dependencies run one way: this file (the router table) uses every
//! handler module; `handlers` (the verbs) uses `routing` (what a path
//! names), `query` (query-parameter rules), `body` (reading request
//! bodies), `render` (building responses), `patch`, `watch` and
//! `discovery`; `openapi` (the OpenAPI documents) is routed here alone; those use `negotiate`, `table`, `protobuf`, `state` (the
//! [`AppState`] handlers share), `metrics` and `status`; `metrics` and
//! `status` use nothing else of `http`; `compression` (when a response is
//! gzipped) wraps the router. Nothing in `kube` imports `http`.

pub mod authorization;
pub mod body;
pub mod compression;
pub mod discovery;
pub mod faults;
pub mod handlers;
pub mod health;
pub mod metrics;
pub mod negotiate;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod pull_stream;
pub mod query;
pub mod render;
pub mod routing;
pub mod serve;
pub mod state;
pub mod status;
pub mod table;
pub mod watch;
pub mod write_options;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

use crate::limits::RequestClass;

pub use state::{AppState, SharedState};

/// The whole REST surface of a node.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/version", get(discovery::version))
        .route("/livez", get(health::livez))
        .route("/livez/{check}", get(health::livez_check))
        .route("/readyz", get(health::readyz))
        .route("/readyz/{check}", get(health::readyz_check))
        .route("/healthz", get(health::healthz))
        .route("/debug/cluster", get(debug_cluster))
        .route("/metrics", get(serve_metrics))
        .route("/debug/compact", axum::routing::post(debug_compact))
        .route("/debug/faults", get(faults::current).post(faults::inject))
        .route("/openapi/v2", get(openapi::v2))
        .route("/openapi/v3", get(openapi::index))
        .route("/openapi/v3/api/{version}", get(openapi::core))
        .route("/openapi/v3/apis/{group}/{version}", get(openapi::group))
        .route(authorization::PATH, any(authorization::serve))
        .route("/api", any(handlers::api))
        .route("/api/{*rest}", any(handlers::api))
        .route("/apis", any(handlers::api))
        .route("/apis/{*rest}", any(handlers::api))
        .fallback(status::page_not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), admit))
        .layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            metrics::track,
        ))
        .layer(compression::layer())
        .with_state(state)
}

/// Which in-flight budget an API request draws from; `None` for watches
/// (long-running) and everything outside `/api` and `/apis`.
fn request_class(req: &axum::extract::Request) -> Option<RequestClass> {
    let path = req.uri().path();
    if !(path == "/api"
        || path.starts_with("/api/")
        || path == "/apis"
        || path.starts_with("/apis/"))
    {
        return None;
    }
    let is_watch = path.split('/').any(|segment| segment == "watch")
        || req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|pair| matches!(pair, "watch=1" | "watch=true" | "watch"))
        });
    match *req.method() {
        _ if is_watch => None,
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS => {
            Some(RequestClass::ReadOnly)
        }
        _ => Some(RequestClass::Mutating),
    }
}

/// Refuses an API request over its in-flight limit with `429`.
async fn admit(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(class) = request_class(&req) else {
        return next.run(req).await;
    };
    match state.limits.admit(class) {
        Ok(_admitted) => next.run(req).await,
        Err(_) => status::ApiError::TooManyRequests.into_response(),
    }
}

/// `GET /metrics`.
async fn serve_metrics(State(state): State<AppState>) -> Response {
    metrics::render(&state.metrics, &state.node, &state.kube, &state.limits)
}

/// `POST /debug/compact?revision=N`: compact history to `N` on every node,
/// through the log (an operator's and the tests' on-demand compaction).
async fn debug_compact(
    State(state): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    use crate::compaction;
    let revision = match q.get("revision").map(|r| r.parse::<u64>()) {
        Some(Ok(r)) => r,
        _ => {
            return status::ApiError::BadRequest(
                "revision=N (an unsigned integer) is required".into(),
            )
            .into_response()
        }
    };
    match compaction::compact(&state.node, revision).await {
        Ok(()) => {
            let body = serde_json::json!({ "compacted": revision }).to_string();
            let mut resp = (StatusCode::OK, body).into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        Err(e) => status::ApiError::from(e).into_response(),
    }
}

/// `GET /debug/cluster`: this node's Raft view, for benchmarks and fault tests.
async fn debug_cluster(State(state): State<AppState>) -> Response {
    match state.node.status().await {
        Ok(status) => {
            let mut resp = (
                StatusCode::OK,
                serde_json::to_string(&status).unwrap_or_default(),
            )
                .into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        Err(e) => status::ApiError::from(e).into_response(),
    }
}

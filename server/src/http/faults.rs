//! `/debug/faults`: fault injection for the fault-schedule checker
//! (`kubestore-chaos`) and the cluster tests, served only when the node was
//! started with `--fault-injection` (404 otherwise, like any unknown path).
//!
//! `POST` a JSON object with any of `isolated` (cut off from every peer:
//! no Raft or forwarding RPC in or out, while clients still reach the
//! node), `fsync_delay_ms` (a slow disk: every log fsync takes that much
//! longer), `apply_delay_ms` (a slow state machine) and
//! `install_delay_ms` (a slow snapshot install); fields left out
//! keep their value. `GET` (and every `POST`) answers the faults in force.

use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::http::state::AppState;
use crate::http::status::{self, ApiError};

/// The faults a node is under; in a `POST`, the ones to change.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSettings {
    pub isolated: Option<bool>,
    pub fsync_delay_ms: Option<u64>,
    pub apply_delay_ms: Option<u64>,
    pub install_delay_ms: Option<u64>,
}

/// `GET /debug/faults`.
pub async fn current(State(state): State<AppState>) -> Response {
    if !state.fault_injection {
        return status::page_not_found().await;
    }
    in_force(&state)
}

/// `POST /debug/faults`.
pub async fn inject(State(state): State<AppState>, body: axum::body::Bytes) -> Response {
    if !state.fault_injection {
        return status::page_not_found().await;
    }
    let change: FaultSettings = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => {
            return ApiError::BadRequest(format!("a fault setting object is expected: {e}"))
                .into_response()
        }
    };
    let disk = state.node.store().faults();
    if let Some(isolated) = change.isolated {
        tracing::warn!(isolated, "fault injection: peer isolation");
        state.node.faults().set_isolated(isolated);
    }
    if let Some(ms) = change.fsync_delay_ms {
        tracing::warn!(ms, "fault injection: log fsync delay");
        disk.set_fsync_delay(Duration::from_millis(ms));
    }
    if let Some(ms) = change.apply_delay_ms {
        tracing::warn!(ms, "fault injection: apply delay");
        disk.set_apply_delay(Duration::from_millis(ms));
    }
    if let Some(ms) = change.install_delay_ms {
        tracing::warn!(ms, "fault injection: snapshot install delay");
        disk.set_install_delay(Duration::from_millis(ms));
    }
    in_force(&state)
}

fn in_force(state: &AppState) -> Response {
    let disk = state.node.store().faults();
    let settings = FaultSettings {
        isolated: Some(state.node.faults().is_isolated()),
        fsync_delay_ms: Some(duration_ms(disk.fsync_delay())),
        apply_delay_ms: Some(duration_ms(disk.apply_delay())),
        install_delay_ms: Some(duration_ms(disk.install_delay())),
    };
    let mut resp = (
        StatusCode::OK,
        serde_json::to_string(&settings).unwrap_or_default(),
    )
        .into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

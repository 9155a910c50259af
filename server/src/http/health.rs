//! `/livez`, `/readyz`, `/healthz` in kube's format: `ok`, or with
//! `?verbose` one line per check; a failing check answers `500`.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::http::AppState;

struct Check {
    name: &'static str,
    ok: bool,
}

fn checks(state: &AppState, ready: bool) -> Vec<Check> {
    let mut out = vec![Check {
        name: "ping",
        ok: true,
    }];
    if ready {
        // Ready = this node knows a leader, so it can serve writes and
        // linearizable reads.
        out.push(Check {
            name: "raft-leader",
            ok: state.node.current_leader().is_some(),
        });
    }
    out
}

fn report(endpoint: &str, checks: Vec<Check>, query: &HashMap<String, String>) -> Response {
    let failed = checks.iter().any(|c| !c.ok);
    let verbose = query.contains_key("verbose") || failed;
    let body = if verbose {
        let mut lines: Vec<String> = checks
            .iter()
            .map(|c| {
                if c.ok {
                    format!("[+]{} ok", c.name)
                } else {
                    format!("[-]{} failed: reason withheld", c.name)
                }
            })
            .collect();
        lines.push(format!(
            "{endpoint} check {}",
            if failed { "failed" } else { "passed" }
        ));
        lines.join("\n") + "\n"
    } else {
        "ok".to_string()
    };
    let code = if failed {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    let mut resp = (code, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

pub async fn livez(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    report("livez", checks(&state, false), &q)
}

pub async fn readyz(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    report("readyz", checks(&state, true), &q)
}

pub async fn healthz(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    report("healthz", checks(&state, true), &q)
}

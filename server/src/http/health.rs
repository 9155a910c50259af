//! `/livez`, `/readyz`, `/healthz` in kube-apiserver's format.
//!
//! Each endpoint runs a list of named checks and answers `ok` (200), or,
//! when a check fails or `?verbose` is given, one line per check
//! (`[+]name ok`, `[-]name failed: reason withheld`) and a last line
//! `<endpoint> check passed|failed`; a failing check answers `500`.
//! `?exclude=<check>` (repeatable) skips checks; `/<endpoint>/<check>` runs
//! one check alone.
//!
//! - liveness (`/livez`): `ping`; `storage`: the database takes a synced
//!   write within 5 s; `raft`: the Raft core runs (openraft stops it for
//!   good on a storage error, and `serve` then exits). A node that fails
//!   one should be restarted.
//! - readiness (`/readyz`, and `/healthz`): liveness's checks, plus
//!   `raft-leader`: a leader is known and in touch (a leader cut off from
//!   its quorum, or a follower that lost its leader, is not ready);
//!   `raft-applied`: the state machine is within [`MAX_APPLY_LAG`] entries
//!   of the commit index (not catching up far behind); `watch-cache`: the
//!   cache that serves reads has reached within [`MAX_CACHE_LAG`]
//!   revisions of what storage applied. A node that fails one serves
//!   neither writes nor linearizable reads promptly, so a load balancer
//!   should send clients elsewhere.
//!
//! Failing checks are logged with their reason (the response withholds
//! it, as kube-apiserver's does).

use std::collections::HashSet;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::http::state::AppState;

/// Most committed entries a ready node may still have to apply.
pub const MAX_APPLY_LAG: u64 = 1_000;
/// Most revisions a ready node's watch cache may trail storage by.
pub const MAX_CACHE_LAG: u64 = 1_000;
/// How long the storage probe may take before the node counts as not live.
const STORAGE_PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the Raft core may take to report its commit index.
const RAFT_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A check's name and what it found (`Err` carries the reason).
struct Outcome {
    name: &'static str,
    result: Result<(), String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Livez,
    Readyz,
    Healthz,
}

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
            Endpoint::Healthz => "healthz",
        }
    }

    fn checks(self) -> &'static [&'static str] {
        match self {
            Endpoint::Livez => &["ping", "storage", "raft"],
            Endpoint::Readyz | Endpoint::Healthz => &[
                "ping",
                "storage",
                "raft",
                "raft-leader",
                "raft-applied",
                "watch-cache",
            ],
        }
    }
}

async fn run_check(state: &AppState, name: &'static str) -> Outcome {
    let result = match name {
        "ping" => Ok(()),
        "storage" => storage_writable(state).await,
        "raft" => match state.node.core_stopped() {
            None => Ok(()),
            Some(reason) => Err(format!("the raft core stopped: {reason}")),
        },
        "raft-leader" => state.node.leader_contact().map(|_| ()),
        "raft-applied" => apply_caught_up(state).await,
        "watch-cache" => cache_synced(state),
        other => Err(format!("unknown check {other}")),
    };
    if let Err(reason) = &result {
        tracing::warn!(check = name, %reason, "health check failed");
    }
    Outcome { name, result }
}

async fn storage_writable(state: &AppState) -> Result<(), String> {
    let store = state.node.store().clone();
    let probe = tokio::task::spawn_blocking(move || store.check_writable());
    match tokio::time::timeout(STORAGE_PROBE_TIMEOUT, probe).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(format!("storage write failed: {e}")),
        Ok(Err(e)) => Err(format!("storage probe did not finish: {e}")),
        Err(_) => Err(format!(
            "storage write took longer than {STORAGE_PROBE_TIMEOUT:?}"
        )),
    }
}

async fn apply_caught_up(state: &AppState) -> Result<(), String> {
    match tokio::time::timeout(RAFT_PROBE_TIMEOUT, state.node.apply_lag()).await {
        Ok(Ok(lag)) if lag <= MAX_APPLY_LAG => Ok(()),
        Ok(Ok(lag)) => Err(format!("{lag} committed entries not applied yet")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "the raft core did not report its commit index within {RAFT_PROBE_TIMEOUT:?}"
        )),
    }
}

fn cache_synced(state: &AppState) -> Result<(), String> {
    let applied = state.node.store().applied().revision.0;
    let cached = state.kube.cache().revision();
    if cached + MAX_CACHE_LAG >= applied {
        Ok(())
    } else {
        Err(format!(
            "the watch cache is at revision {cached}, storage at {applied}"
        ))
    }
}

/// The `exclude` values of a raw query string (kube repeats the parameter).
fn excluded(query: Option<&str>) -> (HashSet<String>, bool) {
    let mut names = HashSet::new();
    let mut verbose = false;
    for pair in query.unwrap_or_default().split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "exclude" => {
                names.insert(value.to_string());
            }
            "verbose" => verbose = true,
            _ => {}
        }
    }
    (names, verbose)
}

async fn report(state: &AppState, endpoint: Endpoint, query: Option<&str>) -> Response {
    let (exclude, verbose) = excluded(query);
    let mut outcomes = Vec::new();
    for name in endpoint.checks() {
        if !exclude.contains(*name) {
            outcomes.push(run_check(state, name).await);
        }
    }
    let failed = outcomes.iter().any(|o| o.result.is_err());
    let body = if verbose || failed {
        let mut lines: Vec<String> = outcomes
            .iter()
            .map(|o| match o.result {
                Ok(()) => format!("[+]{} ok", o.name),
                Err(_) => format!("[-]{} failed: reason withheld", o.name),
            })
            .collect();
        for name in &exclude {
            if endpoint.checks().contains(&name.as_str()) {
                lines.push(format!("[+]{name} excluded: ok"));
            }
        }
        lines.push(format!(
            "{} check {}",
            endpoint.name(),
            if failed { "failed" } else { "passed" }
        ));
        lines.join("\n") + "\n"
    } else {
        "ok".to_string()
    };
    text(
        if failed {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        },
        body,
    )
}

/// `/<endpoint>/<check>`: one check alone.
async fn single(state: &AppState, endpoint: Endpoint, check: &str) -> Response {
    let Some(name) = endpoint.checks().iter().find(|c| **c == check) else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    };
    match run_check(state, name).await.result {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(_) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {name} check failed\n"),
        ),
    }
}

fn text(code: StatusCode, body: String) -> Response {
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

pub async fn livez(State(state): State<AppState>, RawQuery(q): RawQuery) -> Response {
    report(&state, Endpoint::Livez, q.as_deref()).await
}

pub async fn readyz(State(state): State<AppState>, RawQuery(q): RawQuery) -> Response {
    report(&state, Endpoint::Readyz, q.as_deref()).await
}

pub async fn healthz(State(state): State<AppState>, RawQuery(q): RawQuery) -> Response {
    report(&state, Endpoint::Healthz, q.as_deref()).await
}

pub async fn livez_check(State(state): State<AppState>, Path(check): Path<String>) -> Response {
    single(&state, Endpoint::Livez, &check).await
}

pub async fn readyz_check(State(state): State<AppState>, Path(check): Path<String>) -> Response {
    single(&state, Endpoint::Readyz, &check).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclude_repeats_and_verbose_is_a_flag() {
        let (names, verbose) = excluded(Some("exclude=storage&verbose&exclude=raft-leader"));
        assert!(verbose);
        assert_eq!(
            names,
            HashSet::from(["storage".to_string(), "raft-leader".to_string()])
        );
        let (names, verbose) = excluded(None);
        assert!(names.is_empty() && !verbose);
    }

    #[test]
    fn liveness_checks_are_a_subset_of_readiness() {
        for c in Endpoint::Livez.checks() {
            assert!(Endpoint::Readyz.checks().contains(c), "{c}");
        }
    }
}

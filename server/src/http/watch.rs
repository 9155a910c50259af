//! `?watch=1`: a stream of `WatchEvent`s, one JSON object per line.
//!
//! Each watcher follows the node's revision-ordered event log (the same on
//! every node) from its start revision, woken by the applied-state channel
//! rather than polling. It reads history at its own pace through a bounded
//! channel to the socket, so a slow watcher only delays itself; it is cut
//! off (an `ERROR` event with `410 Expired`) only when compaction removed
//! the history it still needs. A watch resumed on another node from the
//! last revision it saw therefore misses and repeats nothing.
//!
//! Start: `resourceVersion` unset = the current state at a linearizable
//! revision as synthetic `ADDED` events, then changes; `"0"` = the same
//! from this node's state; `N` = only changes after `N`. A streaming list
//! (`sendInitialEvents=true&resourceVersionMatch=NotOlderThan`) sends the
//! state (at least at `N`) in key order, then a `BOOKMARK` annotated
//! `k8s.io/initial-events-end: "true"` (when bookmarks are allowed), then
//! changes.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use kubestore_storage::{Event, EventKind, KeyRange, RangeRequest, Revision};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::http::negotiate::Rendering;
use crate::http::status::{ApiError, FieldCause};
use crate::http::{table, AppState};
use crate::kube::object;
use crate::kube::resources::ResourceType;
use crate::kube::selectors::Selectors;

/// Revisions read from the event log per step.
const EVENT_BATCH: usize = 256;
/// Encoded events buffered per watcher before its producer waits.
const WATCHER_QUEUE: usize = 128;
/// kube's default `--min-request-timeout`: a watch without `timeoutSeconds`
/// lasts between one and two of these.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Current state as ADDED events: linearizable (`true`), local, or
    /// local once this node reached a revision (`at_least`). A streaming
    /// list (`sendInitialEvents`) ends the state with an
    /// initial-events-end bookmark.
    State {
        linearizable: bool,
        at_least: Option<u64>,
        streaming: bool,
    },
    /// Changes after this revision.
    After(u64),
}

/// The parsed watch parameters.
#[derive(Debug)]
struct WatchParams {
    start: Start,
    timeout: Duration,
    bookmarks: bool,
}

fn parse(q: &HashMap<String, String>) -> Result<WatchParams, ApiError> {
    let forbidden = |field: &str, detail: &str| {
        ApiError::invalid_list_options(vec![FieldCause::forbidden(field, detail)])
    };
    let send_initial = q
        .get("sendInitialEvents")
        .map(|v| !(v == "0" || v.eq_ignore_ascii_case("false")));
    let matching = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .filter(|m| !m.is_empty());
    if q.get("continue").is_some_and(|c| !c.is_empty()) && matching.is_some() {
        return Err(forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    match (send_initial, matching) {
        (None, Some(_)) => {
            return Err(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ))
        }
        (Some(_), Some(m)) if m != "NotOlderThan" => {
            return Err(ApiError::invalid_list_options(vec![
                FieldCause::not_supported("resourceVersionMatch", m, &["NotOlderThan"]),
            ]))
        }
        (Some(_), None) => {
            return Err(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ))
        }
        _ => {}
    }
    let rv = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv:?}")))?,
        ),
    };
    let start = match (send_initial, rv) {
        // A streaming list: the state (at least at rv), then a bookmark, then changes.
        (Some(true), rv) => Start::State {
            linearizable: rv.is_none(),
            at_least: rv.filter(|n| *n > 0),
            streaming: true,
        },
        (_, None) => Start::State {
            linearizable: true,
            at_least: None,
            streaming: false,
        },
        (_, Some(0)) => Start::State {
            linearizable: false,
            at_least: None,
            streaming: false,
        },
        (_, Some(n)) => Start::After(n),
    };
    let timeout = match q.get("timeoutSeconds") {
        Some(s) => Duration::from_secs(s.parse().map_err(|_| {
            ApiError::BadRequest(format!(
                "invalid timeoutSeconds {s:?}: must be a whole number of seconds"
            ))
        })?),
        None => MIN_REQUEST_TIMEOUT + MIN_REQUEST_TIMEOUT.mul_f64(rand::random::<f64>()),
    };
    let bookmarks = q
        .get("allowWatchBookmarks")
        .is_some_and(|v| !(v == "0" || v.eq_ignore_ascii_case("false")));
    Ok(WatchParams {
        start,
        timeout,
        bookmarks,
    })
}

/// The context a watcher needs to turn stored events into watch events.
struct Watcher {
    state: AppState,
    rt: &'static ResourceType,
    prefix: Vec<u8>,
    selectors: Selectors,
    rendering: Rendering,
    /// The client allows `BOOKMARK` events.
    bookmarks: bool,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
}

/// Starts a watch and returns the streaming response. Errors in the
/// parameters are HTTP errors; errors once the stream runs (too old, too
/// large) are `ERROR` events, as kube sends them.
pub async fn serve(
    state: AppState,
    rt: &'static ResourceType,
    ns: Option<&str>,
    q: &HashMap<String, String>,
    selectors: Selectors,
    rendering: Rendering,
) -> Result<Response, ApiError> {
    let params = parse(q)?;
    let (tx, rx) = mpsc::channel(WATCHER_QUEUE);
    let watcher = Watcher {
        state,
        rt,
        prefix: rt.collection_prefix(ns).into_bytes(),
        selectors,
        rendering,
        bookmarks: params.bookmarks,
        tx,
    };
    let span = tracing::info_span!("watch", resource = rt.plural, start = ?params.start);
    tokio::spawn(tracing::Instrument::instrument(watcher.run(params), span));
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

impl Watcher {
    /// Sends one event line; `false` once the client is gone.
    async fn send(&self, event_type: &str, object: Value) -> bool {
        let object = match (self.rendering, event_type) {
            (Rendering::Table, "ADDED" | "MODIFIED" | "DELETED") => {
                let rv = object
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                table::render(self.rt, std::slice::from_ref(&object), &rv, &HashMap::new())
                    .unwrap_or(object)
            }
            _ => object,
        };
        let mut line = json!({ "type": event_type, "object": object }).to_string();
        line.push('\n');
        self.tx.send(Ok(Bytes::from(line))).await.is_ok()
    }

    async fn send_error(&self, err: ApiError) {
        self.send("ERROR", err.to_status()).await;
    }

    fn bookmark(&self, revision: u64) -> Value {
        json!({
            "kind": self.rt.kind,
            "apiVersion": self.rt.api_version(),
            "metadata": { "resourceVersion": revision.to_string() },
        })
    }

    async fn run(self, params: WatchParams) {
        let deadline = tokio::time::Instant::now() + params.timeout;
        let Some(mut last) = self.initial(params.start).await else {
            return;
        };
        let mut applied = self.state.node.store().subscribe();
        let bookmark_every = self.state.bookmark_interval;
        let mut next_bookmark = tokio::time::Instant::now() + bookmark_every;
        // kube sends a last bookmark shortly before the deadline.
        let final_bookmark = deadline.checked_sub(Duration::from_secs(2));
        loop {
            // Drain everything already applied before waiting.
            loop {
                match self
                    .state
                    .node
                    .store()
                    .events_after(Revision(last), EVENT_BATCH)
                {
                    Ok(batch) if batch.is_empty() => break,
                    Ok(batch) => {
                        for (rev, events) in batch {
                            for event in &events {
                                if !self.deliver(event).await {
                                    return;
                                }
                            }
                            last = rev.0;
                        }
                    }
                    Err(kubestore_storage::StoreError::Compacted { compacted, .. }) => {
                        return self.send_error(too_old(last, compacted.0)).await;
                    }
                    Err(kubestore_storage::StoreError::Installing) => break,
                    Err(e) => return self.send_error(ApiError::from(e)).await,
                }
            }
            let bookmark_at = match final_bookmark {
                Some(f) if f > tokio::time::Instant::now() => next_bookmark.min(f),
                _ => next_bookmark,
            };
            tokio::select! {
                changed = applied.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(bookmark_at), if self.bookmarks => {
                    // `last` is the newest revision this stream has fully
                    // delivered (quiet types included): never ahead of an event.
                    if !self.send("BOOKMARK", self.bookmark(last)).await {
                        return;
                    }
                    next_bookmark = tokio::time::Instant::now() + bookmark_every;
                }
                _ = tokio::time::sleep_until(deadline) => return,
                _ = self.tx.closed() => return,
            }
        }
    }

    /// Sends the initial state if asked for; returns the revision to follow
    /// from, or `None` if the watch ended.
    async fn initial(&self, start: Start) -> Option<u64> {
        let store = self.state.node.store();
        match start {
            Start::After(rv) => {
                if let Err(e) = self.state.kube.wait_for_revision(rv).await {
                    self.send_error(e).await;
                    return None;
                }
                Some(rv)
            }
            Start::State {
                linearizable,
                at_least,
                streaming,
            } => {
                if let Some(rv) = at_least {
                    if let Err(e) = self.state.kube.wait_for_revision(rv).await {
                        self.send_error(e).await;
                        return None;
                    }
                }
                if linearizable {
                    if let Err(e) = self.state.node.linearizable_barrier().await {
                        self.send_error(e.into()).await;
                        return None;
                    }
                }
                let listed = store.range(&RangeRequest {
                    range: KeyRange::prefix(self.prefix.clone()),
                    ..RangeRequest::default()
                });
                let listed = match listed {
                    Ok(l) => l,
                    Err(e) => {
                        self.send_error(e.into()).await;
                        return None;
                    }
                };
                for kv in &listed.kvs {
                    if let Some(obj) =
                        object::from_stored(self.rt, &kv.key, &kv.value, kv.mod_revision.0)
                    {
                        if self.selectors.matches(&obj) && !self.send("ADDED", obj).await {
                            return None;
                        }
                    }
                }
                if streaming && self.bookmarks {
                    let mut end = self.bookmark(listed.revision.0);
                    end["metadata"]["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
                    if !self.send("BOOKMARK", end).await {
                        return None;
                    }
                }
                Some(listed.revision.0)
            }
        }
    }

    /// Turns one stored event into at most one watch event, applying the
    /// selectors' transitions as kube does. `false` once the client is gone.
    async fn deliver(&self, event: &Event) -> bool {
        if !event.kv.key.starts_with(&self.prefix) {
            return true;
        }
        let rev = event.kv.mod_revision.0;
        let old = event
            .prev_kv
            .as_ref()
            .and_then(|p| object::from_stored(self.rt, &p.key, &p.value, rev))
            .filter(|o| self.selectors.matches(o));
        let new = match event.kind {
            EventKind::Put => object::from_stored(self.rt, &event.kv.key, &event.kv.value, rev)
                .filter(|o| self.selectors.matches(o)),
            EventKind::Delete => None,
        };
        match (old, new) {
            (None, Some(new)) => self.send("ADDED", new).await,
            (Some(_), Some(new)) => self.send("MODIFIED", new).await,
            // The last matching state, with the revision that removed it.
            (Some(old), None) => self.send("DELETED", old).await,
            (None, None) => true,
        }
    }
}

fn too_old(requested: u64, compacted: u64) -> ApiError {
    ApiError::Expired(format!(
        "too old resource version: {requested} ({compacted})"
    ))
}

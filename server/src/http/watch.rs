//! `?watch=1`: a stream of `WatchEvent`s, one JSON object per line.
//!
//! Each watcher keeps only a cursor (the last revision it delivered) and
//! pulls events after it from the watch cache's ring, woken by the cache's
//! revision channel rather than polling; behind the ring, it reads the
//! node's revision-ordered event log in storage (the same on every node)
//! through storage's event cursor (`Store::events`), one batch per step,
//! until it reaches the ring again. The cursor reports compaction as an
//! outcome of its own, which ends the watch with `410 Expired`. What a
//! watcher sends of a change (its namespace and selectors) is decided by
//! its [`Scope`], alike for cached and stored events. An event's line is
//! encoded once per object in the cache and shared by every watcher that
//! sends it; whatever one drain yields goes to the socket as one chunk, so
//! a burst costs one write. The watcher is the response body itself (a [`PullStream`]): it
//! runs on the task hyper already has for the connection or HTTP/2
//! stream, only when the client can take more, with no task or channel of
//! its own, and it ends when the client goes away. A slow watcher only
//! delays itself and holds at most one chunk; it is cut off (an `ERROR`
//! event with `410 Expired`) only when compaction removed the history it
//! still needs.
//! A watch resumed on another node from the last revision it saw therefore
//! misses and repeats nothing.
//!
//! Start: `resourceVersion` unset = the current state at a linearizable
//! revision as synthetic `ADDED` events, then changes; `"0"` = the same
//! from this node's state; `N` = only changes after `N`. A streaming list
//! (`sendInitialEvents=true&resourceVersionMatch=NotOlderThan`) sends the
//! state (at least at `N`) in key order, then a `BOOKMARK` annotated
//! `k8s.io/initial-events-end: "true"` (when bookmarks are allowed), then
//! changes.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use kubestore_storage::{Event, EventKind, EventStep, Revision, StoreError, EVENT_BATCH};
use serde_json::{json, Value};

use crate::http::negotiate::Rendering;
use crate::http::protobuf;
use crate::http::pull_stream::{Outbox, PullStream};
use crate::http::state::AppState;
use crate::http::status::ApiError;
use crate::http::table;
use crate::kube::cache::{BehindRing, CachedEvent, CachedObject, WatchEventType};
use crate::kube::error::{FieldCause, KubeError};
use crate::kube::resources::ResourceType;
use crate::kube::selectors::Selectors;

/// The longest a watch runs, whatever `timeoutSeconds` asks (a week; the
/// client re-watches from its last revision, as after any timeout).
const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

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
        // Capped: a deadline beyond the clock's range would overflow.
        Some(s) => Duration::from_secs(s.parse::<u64>().map_err(|_| {
            ApiError::BadRequest(format!(
                "invalid timeoutSeconds {s:?}: must be a whole number of seconds"
            ))
        })?)
        .min(MAX_WATCH_TIMEOUT),
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

/// What a watcher sends: the objects of one type under one key prefix (a
/// namespace, or all of them) that its selectors match. It decides, from
/// an event's states on either side, which watch event the client sees.
struct Scope {
    rt: &'static ResourceType,
    prefix: Vec<u8>,
    selectors: Selectors,
}

/// The context a watcher needs to turn stored events into watch events.
struct Watcher {
    state: AppState,
    scope: Scope,
    rendering: Rendering,
    /// The client allows `BOOKMARK` events.
    bookmarks: bool,
    outbox: Outbox,
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
    if rendering == Rendering::Yaml {
        // YAML has no stream framing; kube serves no YAML watch either.
        return Err(ApiError::NotAcceptable);
    }
    // Debug level, like tower-http's request spans: an enabled span lives
    // as long as the watch, and at info level it was a quarter of an idle
    // watcher's memory (`bench watch`).
    let span = tracing::debug_span!("watch", resource = rt.plural, start = ?params.start);
    let prefix = rt.collection_prefix(ns).into_bytes();
    let body = Body::from_stream(PullStream::new(move |outbox| {
        let watcher = Watcher {
            state,
            scope: Scope {
                rt,
                prefix,
                selectors,
            },
            rendering,
            bookmarks: params.bookmarks,
            outbox,
        };
        tracing::Instrument::instrument(watcher.run(params), span)
    }));
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    let content_type = match rendering {
        Rendering::Protobuf { .. } => protobuf::WATCH_MEDIA_TYPE,
        _ => "application/json",
    };
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(resp)
}

impl Watcher {
    /// Sends one line; returns once the client can take more.
    async fn send_line(&self, line: Bytes) {
        self.outbox.send(line).await
    }

    /// Sends one event of a freshly built object (bookmarks, errors).
    async fn send(&self, event_type: &str, object: Value) {
        let line = match self.rendering {
            Rendering::Protobuf { .. } => {
                protobuf_frame(protobuf::watch_frame(event_type, &object))
            }
            _ => event_line(event_type, object),
        };
        self.send_line(line).await
    }

    /// The event line of a cached object: its shared, already encoded
    /// line, or a Table row for kubectl.
    fn object_line(&self, event: WatchEventType, obj: &CachedObject) -> Bytes {
        match self.rendering {
            Rendering::Table => {
                let object = obj.to_value();
                let row = table::render(
                    self.scope.rt,
                    std::slice::from_ref(&object),
                    &obj.revision.to_string(),
                    &HashMap::new(),
                )
                .unwrap_or(object);
                event_line(event.as_str(), row)
            }
            Rendering::Protobuf { .. } => {
                protobuf_frame(protobuf::watch_frame_of(event.as_str(), self.scope.rt, obj))
            }
            Rendering::Json | Rendering::Yaml => obj.watch_line(event),
        }
    }

    /// Sends the lines gathered from one drain of the cache or the event
    /// log as one chunk, so a burst of events costs one write on the
    /// socket. The vector is taken, not drained: a watcher that goes idle
    /// after a burst keeps none of the burst's capacity.
    async fn flush(&self, lines: &mut Vec<Bytes>) {
        let mut lines = std::mem::take(lines);
        let chunk = match lines.len() {
            0 => return,
            1 => lines.pop().unwrap_or_default(),
            _ => {
                let mut chunk = bytes::BytesMut::with_capacity(lines.iter().map(Bytes::len).sum());
                for line in &lines {
                    chunk.extend_from_slice(line);
                }
                chunk.freeze()
            }
        };
        drop(lines);
        self.send_line(chunk).await
    }

    async fn send_error(&self, err: impl Into<ApiError>) {
        self.send("ERROR", err.into().to_status()).await;
    }

    async fn run(self, params: WatchParams) {
        let deadline = tokio::time::Instant::now() + params.timeout;
        // Boxed: the start (a read-index round through the leader, the
        // initial state) is the largest state of this future, and an
        // unboxed await would size every idle watcher for it for the
        // watch's whole life. The box is freed once the start is sent.
        let Some(mut last) = Box::pin(self.initial(params.start)).await else {
            return;
        };
        let cache = self.state.kube.cache().clone();
        // Woken only by revisions with events under this watch's prefix
        // (and by rebuilds): writes elsewhere do not wake it.
        let mut cache_revision = cache.subscribe_scope(&self.scope.prefix);
        let stopped = shutting_down(self.state.stop.clone());
        tokio::pin!(stopped);
        let bookmark_every = self.state.bookmark_interval;
        // kube sends a last bookmark shortly before the deadline.
        let final_bookmark = deadline.checked_sub(Duration::from_secs(2));
        let bookmark_at = |next: tokio::time::Instant| match final_bookmark {
            Some(f) if f > tokio::time::Instant::now() => next.min(f),
            _ => next,
        };
        // Both timers live as long as the watch and are reset only when
        // they fire, so a wake-up for new events touches no timer. (Making
        // them anew on every wake-up cost no CPU that `bench watch` could
        // measure; this is simply the plainer loop.)
        let bookmark_timer =
            tokio::time::sleep_until(bookmark_at(tokio::time::Instant::now() + bookmark_every));
        let deadline_timer = tokio::time::sleep_until(deadline);
        tokio::pin!(bookmark_timer, deadline_timer);
        let mut lines: Vec<Bytes> = Vec::new();
        let mut bookmark_due = false;
        loop {
            // Drain everything the cache (or, behind its ring, storage) has.
            loop {
                match cache.events_after(self.scope.rt, last, EVENT_BATCH) {
                    Ok((events, upto)) => {
                        let empty = events.is_empty();
                        for event in &events {
                            if let Some((event_type, obj)) = self.scope.cached(event) {
                                lines.push(self.object_line(event_type, &obj));
                            }
                        }
                        self.flush(&mut lines).await;
                        last = last.max(upto);
                        if empty {
                            break;
                        }
                    }
                    Err(BehindRing { .. }) => match self.catch_up_from_history(last).await {
                        Ok(Some(next)) => last = next,
                        Ok(None) => break,
                        Err(e) => return self.send_error(e).await,
                    },
                }
            }
            if bookmark_due {
                // `last` is the newest revision this stream has fully
                // delivered, quiet types and namespaces included (the
                // drain above just moved it to the cache's revision):
                // never ahead of an event.
                self.send("BOOKMARK", self.scope.bookmark(last)).await;
                let next = bookmark_at(tokio::time::Instant::now() + bookmark_every);
                bookmark_timer.as_mut().reset(next);
                bookmark_due = false;
            }
            tokio::select! {
                changed = cache_revision.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                // Drained first: a quiet watch is not woken by the writes
                // it cannot see, so its `last` moves only when it drains.
                () = &mut bookmark_timer, if self.bookmarks => bookmark_due = true,
                () = &mut deadline_timer => return,
                () = &mut stopped => return,
            }
        }
    }

    /// One batch of events after `last` from storage history (the event
    /// cursor), for a watcher older than the cache's ring. The revision
    /// delivered up to, or `None` when storage has nothing newer yet (or is
    /// installing a snapshot: the cache's revision moves when it is done).
    async fn catch_up_from_history(&self, last: u64) -> Result<Option<u64>, ApiError> {
        let mut cursor = self.state.node.store().events(Revision(last));
        match cursor.next().await {
            Ok(EventStep::Events(batch)) => {
                let mut lines = Vec::new();
                for event in batch.iter().flat_map(|(_, events)| events.iter()) {
                    if let Some((event_type, obj)) = self.scope.stored(event) {
                        lines.push(self.object_line(event_type, &obj));
                    }
                }
                self.flush(&mut lines).await;
                Ok(Some(cursor.after().0))
            }
            Ok(EventStep::CaughtUp { .. }) | Err(StoreError::Installing) => Ok(None),
            Ok(EventStep::Compacted { compacted, .. }) => Err(too_old(last, compacted.0)),
            Err(e) => Err(ApiError::from(e)),
        }
    }

    /// Sends the initial state if asked for; returns the revision to follow
    /// from, or `None` if the watch ended.
    async fn initial(&self, start: Start) -> Option<u64> {
        let kube = &self.state.kube;
        match start {
            Start::After(rv) => {
                if let Err(e) = kube.wait_for_revision(rv).await {
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
                    if let Err(e) = kube.wait_for_revision(rv).await {
                        self.send_error(e).await;
                        return None;
                    }
                }
                if linearizable {
                    if let Err(e) = kube.quorum_revision().await {
                        self.send_error(e).await;
                        return None;
                    }
                }
                let (objects, revision) = kube.cache().current(self.scope.rt);
                let prefix = String::from_utf8_lossy(&self.scope.prefix).into_owned();
                let in_scope = || {
                    objects
                        .range::<_, str>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                        .take_while(|(k, _)| k.starts_with(&prefix))
                        .map(|(_, o)| o)
                };
                // Every object in scope is written or matched: rendered
                // off the worker if many are not yet.
                CachedObject::render_all(in_scope()).await;
                let matching = in_scope().filter(|o| o.matches(&self.scope.selectors));
                let mut lines = Vec::new();
                for obj in matching {
                    lines.push(self.object_line(WatchEventType::Added, obj));
                    if lines.len() >= EVENT_BATCH {
                        self.flush(&mut lines).await;
                    }
                }
                self.flush(&mut lines).await;
                if streaming && self.bookmarks {
                    self.send("BOOKMARK", self.scope.initial_events_end(revision))
                        .await;
                }
                Some(revision)
            }
        }
    }
}

impl Scope {
    /// The watch event one cached event is for this watcher, if any: kube's
    /// transitions through the selectors (an object that starts matching is
    /// `ADDED`, one that stops is `DELETED` showing its last matching state
    /// at the revision of the change; a deletion shows its tombstone).
    fn cached(&self, event: &CachedEvent) -> Option<(WatchEventType, Arc<CachedObject>)> {
        let in_scope = |o: &&Arc<CachedObject>| o.key.as_bytes().starts_with(&self.prefix);
        let matches = |o: &&Arc<CachedObject>| o.matches(&self.selectors);
        let old = event.prev.as_ref().filter(in_scope).filter(matches);
        let new = match event.kind {
            EventKind::Put => event.object.as_ref().filter(in_scope).filter(matches),
            EventKind::Delete => None,
        };
        match (old, new) {
            (None, Some(new)) => Some((WatchEventType::Added, new.clone())),
            (Some(_), Some(new)) => Some((WatchEventType::Modified, new.clone())),
            // The last matching state, with the revision that removed it.
            (Some(old), None) => {
                let shown = match (event.kind, &event.object) {
                    (EventKind::Delete, Some(tombstone)) => tombstone.clone(),
                    _ => Arc::new(old.at_revision(event.revision)?),
                };
                Some((WatchEventType::Deleted, shown))
            }
            (None, None) => None,
        }
    }

    /// The same for an event read from storage history: both states are
    /// decoded at the event's revision.
    fn stored(&self, event: &Event) -> Option<(WatchEventType, CachedObject)> {
        if !event.kv.key.starts_with(&self.prefix) {
            return None;
        }
        let rev = event.kv.mod_revision.0;
        let decode = |kv: &kubestore_storage::KeyValue, line| {
            CachedObject::decode(self.rt, &kv.key, &kv.value, rev, line)
                .filter(|o| o.matches(&self.selectors))
        };
        let old = event
            .prev_kv
            .as_ref()
            .and_then(|kv| decode(kv, WatchEventType::Deleted));
        let new = match (event.kind, &old) {
            (EventKind::Put, Some(_)) => decode(&event.kv, WatchEventType::Modified),
            (EventKind::Put, None) => decode(&event.kv, WatchEventType::Added),
            (EventKind::Delete, _) => None,
        };
        match (old, new) {
            (None, Some(new)) => Some((WatchEventType::Added, new)),
            (Some(_), Some(new)) => Some((WatchEventType::Modified, new)),
            (Some(old), None) => Some((WatchEventType::Deleted, old)),
            (None, None) => None,
        }
    }

    /// A `BOOKMARK`'s object: the type and a revision, nothing else.
    fn bookmark(&self, revision: u64) -> Value {
        json!({
            "kind": self.rt.kind,
            "apiVersion": self.rt.api_version(),
            "metadata": { "resourceVersion": revision.to_string() },
        })
    }

    /// The bookmark that ends a streaming list's initial state.
    fn initial_events_end(&self, revision: u64) -> Value {
        let mut end = self.bookmark(revision);
        end["metadata"]["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        end
    }
}

/// One watch event line: `{"type":..,"object":..}` and a newline.
fn event_line(event_type: &str, object: Value) -> Bytes {
    let mut line = json!({ "type": event_type, "object": object }).to_string();
    line.push('\n');
    Bytes::from(line)
}

/// One protobuf watch frame. An object with no protobuf form (a field
/// newer than the descriptors) is logged and sent as an `ERROR` event,
/// which ends the client's watch: it lists and watches again.
fn protobuf_frame(frame: Result<Bytes, protobuf::ProtobufError>) -> Bytes {
    match frame {
        Ok(frame) => frame,
        Err(e) => {
            tracing::warn!(error = %e, "a watch event could not be written as protobuf");
            let status = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "reason": "InternalError", "code": 500,
                "message": format!("the event's object has no protobuf form: {e}"),
            });
            protobuf::watch_frame("ERROR", &status).unwrap_or_default()
        }
    }
}

/// Resolves once the node is shutting down.
async fn shutting_down(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn too_old(requested: u64, compacted: u64) -> ApiError {
    KubeError::Expired(format!(
        "too old resource version: {requested} ({compacted})"
    ))
    .into()
}

/// Property tests: any watch query is parsed or refused as the client's
/// mistake, and the deadline it asks for is capped.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz;

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_watch_query_is_parsed_or_refused(q in fuzz::query()) {
            match parse(&q) {
                Ok(p) => {
                    prop_assert!(p.timeout <= MAX_WATCH_TIMEOUT);
                    if let Start::State { at_least: Some(n), .. } = p.start {
                        prop_assert!(n > 0);
                    }
                }
                Err(e) => prop_assert!(!e.code().is_server_error(), "{e:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kubestore_storage::{KeyValue, LeaseId};

    use super::*;
    use crate::kube::resources;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn configmaps() -> &'static ResourceType {
        resources::find("", "v1", "configmaps").expect("configmaps")
    }

    /// Configmaps in namespace `default` labelled `app=web`.
    fn scope() -> Scope {
        let rt = configmaps();
        Scope {
            rt,
            prefix: rt.collection_prefix(Some("default")).into_bytes(),
            selectors: Selectors::parse(rt, Some("app=web"), None).expect("selector"),
        }
    }

    /// The stored value of configmap `ns/name` labelled `app`.
    fn value(ns: &str, name: &str, app: &str) -> Vec<u8> {
        json!({"metadata": {"name": name, "namespace": ns, "labels": {"app": app}}})
            .to_string()
            .into_bytes()
    }

    fn cached(ns: &str, name: &str, app: &str, revision: u64) -> Arc<CachedObject> {
        let key = configmaps().key(Some(ns), name);
        Arc::new(
            CachedObject::decode(
                configmaps(),
                key.as_bytes(),
                &value(ns, name, app),
                revision,
                WatchEventType::Added,
            )
            .expect("an object"),
        )
    }

    /// A put of `ns/name` at revision 5 from `before` (the previous label,
    /// if it existed) to `after`.
    fn cached_put(ns: &str, name: &str, before: Option<&str>, after: &str) -> CachedEvent {
        CachedEvent {
            revision: 5,
            kind: EventKind::Put,
            object: Some(cached(ns, name, after, 5)),
            prev: before.map(|app| cached(ns, name, app, 3)),
        }
    }

    /// What a scope makes of an event: its type, the object's name and
    /// the resourceVersion shown.
    fn seen(
        found: Option<(WatchEventType, impl std::ops::Deref<Target = CachedObject>)>,
    ) -> Option<(&'static str, String, String)> {
        found.map(|(event_type, obj)| {
            let object = obj.to_value();
            let meta = &object["metadata"];
            (
                event_type.as_str(),
                meta["name"].as_str().unwrap_or("").to_string(),
                meta["resourceVersion"].as_str().unwrap_or("").to_string(),
            )
        })
    }

    fn stored_kv(ns: &str, name: &str, app: &str, revision: u64) -> KeyValue {
        KeyValue {
            key: configmaps().key(Some(ns), name).into_bytes().into(),
            create_revision: Revision(3),
            mod_revision: Revision(revision),
            version: 1,
            value: value(ns, name, app).into(),
            lease: LeaseId::NONE,
        }
    }

    fn stored_put(ns: &str, name: &str, before: Option<&str>, after: &str) -> Event {
        Event {
            kind: EventKind::Put,
            kv: stored_kv(ns, name, after, 5),
            prev_kv: before.map(|app| stored_kv(ns, name, app, 3)),
        }
    }

    fn s(v: &str) -> String {
        v.to_string()
    }

    #[test]
    fn the_start_follows_resource_version_and_send_initial_events() {
        let start = |pairs: &[(&str, &str)]| parse(&query(pairs)).map(|p| p.start);
        assert_eq!(
            start(&[]).ok(),
            Some(Start::State {
                linearizable: true,
                at_least: None,
                streaming: false
            }),
            "unset: the state at a linearizable revision"
        );
        assert_eq!(
            start(&[("resourceVersion", "0")]).ok(),
            Some(Start::State {
                linearizable: false,
                at_least: None,
                streaming: false
            }),
            "0: this node's state"
        );
        assert_eq!(
            start(&[("resourceVersion", "7")]).ok(),
            Some(Start::After(7))
        );
        assert_eq!(
            start(&[
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "NotOlderThan"),
                ("resourceVersion", "7"),
            ])
            .ok(),
            Some(Start::State {
                linearizable: false,
                at_least: Some(7),
                streaming: true
            })
        );
        assert_eq!(
            start(&[
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "NotOlderThan"),
            ])
            .ok(),
            Some(Start::State {
                linearizable: true,
                at_least: None,
                streaming: true
            })
        );
    }

    #[test]
    fn inconsistent_watch_options_are_the_clients_mistake() {
        let code = |pairs: &[(&str, &str)]| parse(&query(pairs)).err().map(|e| e.code());
        assert_eq!(
            code(&[("resourceVersionMatch", "NotOlderThan")]),
            Some(StatusCode::UNPROCESSABLE_ENTITY),
            "a match without sendInitialEvents"
        );
        assert_eq!(
            code(&[("sendInitialEvents", "true")]),
            Some(StatusCode::UNPROCESSABLE_ENTITY),
            "sendInitialEvents without NotOlderThan"
        );
        assert_eq!(
            code(&[
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "Exact")
            ]),
            Some(StatusCode::UNPROCESSABLE_ENTITY)
        );
        assert_eq!(
            code(&[("resourceVersion", "x")]),
            Some(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            code(&[("timeoutSeconds", "-1")]),
            Some(StatusCode::BAD_REQUEST)
        );
    }

    #[test]
    fn timeouts_are_capped_and_bookmarks_are_opt_in() {
        let p = parse(&query(&[("timeoutSeconds", "10")])).expect("parse");
        assert_eq!(p.timeout, Duration::from_secs(10));
        assert!(!p.bookmarks);
        let p = parse(&query(&[("timeoutSeconds", "99999999999")])).expect("parse");
        assert_eq!(p.timeout, MAX_WATCH_TIMEOUT);
        let p = parse(&query(&[])).expect("parse");
        assert!(p.timeout >= MIN_REQUEST_TIMEOUT && p.timeout <= 2 * MIN_REQUEST_TIMEOUT);
        let p = parse(&query(&[("allowWatchBookmarks", "true")])).expect("parse");
        assert!(p.bookmarks);
        let p = parse(&query(&[("allowWatchBookmarks", "false")])).expect("parse");
        assert!(!p.bookmarks);
    }

    #[test]
    fn a_cached_change_is_seen_through_the_selectors() {
        let scope = scope();
        assert_eq!(
            seen(scope.cached(&cached_put("default", "a", None, "web"))),
            Some(("ADDED", s("a"), s("5")))
        );
        assert_eq!(
            seen(scope.cached(&cached_put("default", "a", Some("web"), "web"))),
            Some(("MODIFIED", s("a"), s("5")))
        );
        assert_eq!(
            seen(scope.cached(&cached_put("default", "a", Some("db"), "web"))),
            Some(("ADDED", s("a"), s("5"))),
            "starts matching"
        );
        assert_eq!(
            seen(scope.cached(&cached_put("default", "a", Some("web"), "db"))),
            Some(("DELETED", s("a"), s("5"))),
            "stops matching: the last matching state at the change's revision"
        );
        assert_eq!(
            seen(scope.cached(&cached_put("default", "a", Some("db"), "db"))),
            None
        );
        assert_eq!(
            seen(scope.cached(&cached_put("other", "a", None, "web"))),
            None,
            "another namespace"
        );
    }

    #[test]
    fn a_cached_deletion_shows_its_tombstone() {
        let scope = scope();
        let deletion = |app: &str| CachedEvent {
            revision: 6,
            kind: EventKind::Delete,
            object: Some(cached("default", "a", app, 6)),
            prev: Some(cached("default", "a", app, 5)),
        };
        assert_eq!(
            seen(scope.cached(&deletion("web"))),
            Some(("DELETED", s("a"), s("6")))
        );
        assert_eq!(seen(scope.cached(&deletion("db"))), None, "never matched");
    }

    #[test]
    fn a_stored_change_is_seen_as_the_cached_one_would_be() {
        let scope = scope();
        let both = |ns: &str, before: Option<&str>, after: &str| {
            (
                seen(
                    scope
                        .stored(&stored_put(ns, "a", before, after))
                        .map(|(t, o)| (t, Box::new(o))),
                ),
                seen(scope.cached(&cached_put(ns, "a", before, after))),
            )
        };
        for (ns, before, after) in [
            ("default", None, "web"),
            ("default", Some("web"), "web"),
            ("default", Some("db"), "web"),
            ("default", Some("web"), "db"),
            ("default", Some("db"), "db"),
            ("other", None, "web"),
        ] {
            let (stored, cached) = both(ns, before, after);
            assert_eq!(stored, cached, "{ns} {before:?} -> {after}");
        }

        let deletion = Event {
            kind: EventKind::Delete,
            kv: KeyValue {
                value: bytes::Bytes::new(),
                ..stored_kv("default", "a", "web", 6)
            },
            prev_kv: Some(stored_kv("default", "a", "web", 5)),
        };
        assert_eq!(
            seen(scope.stored(&deletion).map(|(t, o)| (t, Box::new(o)))),
            Some(("DELETED", s("a"), s("6"))),
            "the last state, at the deletion's revision"
        );
    }

    #[test]
    fn bookmarks_carry_only_the_type_and_a_revision() {
        let scope = scope();
        assert_eq!(
            scope.bookmark(42),
            json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}})
        );
        let end = scope.initial_events_end(42);
        assert_eq!(end["metadata"]["resourceVersion"], "42");
        assert_eq!(
            end["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
    }

    #[test]
    fn a_compacted_start_is_an_expired_error_event() {
        let line = event_line("ERROR", too_old(3, 7).to_status());
        assert!(line.ends_with(b"\n"), "one event per line");
        let event: Value = serde_json::from_slice(&line).expect("json");
        assert_eq!(event["type"], "ERROR");
        assert_eq!(event["object"]["kind"], "Status");
        assert_eq!(event["object"]["code"], 410);
        assert_eq!(event["object"]["reason"], "Expired");
        assert_eq!(
            event["object"]["message"],
            "too old resource version: 3 (7)"
        );
    }
}

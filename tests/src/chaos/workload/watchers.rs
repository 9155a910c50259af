//! The watchers: one per API (and one for the custom registers) that
//! follows every change across reconnects to other nodes, resuming from
//! the last revision seen, and logs what it saw for the revision
//! contract.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::Rng;
use rand::SeedableRng;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::watch;

use super::super::history::{WatchEvent, WatchLog};
use super::{header_revision, register_state, send, Endpoint, Recorder, RestKind, ETCD_PREFIX};

/// How long a watch may stay silent (no event, bookmark or progress
/// notification, which come every second) before it is taken for dead and
/// resumed on another node.
const WATCH_SILENCE: Duration = Duration::from_secs(5);

/// A watcher's progress, shared with the runner so it can wait until the
/// watcher has caught up with the final revision.
#[derive(Debug)]
pub struct WatchProgress {
    logs: Mutex<Vec<WatchLog>>,
    covered: watch::Sender<u64>,
}

impl Default for WatchProgress {
    fn default() -> Self {
        Self {
            logs: Mutex::new(Vec::new()),
            covered: watch::Sender::new(0),
        }
    }
}

impl WatchProgress {
    /// Waits until the current log has received everything up to
    /// `revision`; `false` if `timeout` passed first.
    pub async fn caught_up(&self, revision: u64, timeout: Duration) -> bool {
        let mut covered = self.covered.subscribe();
        let reached = tokio::time::timeout(timeout, covered.wait_for(|c| *c >= revision)).await;
        matches!(reached, Ok(Ok(_)))
    }

    fn set_covered(&self, revision: u64) {
        self.covered.send_replace(revision);
    }

    pub fn take(&self) -> Vec<WatchLog> {
        std::mem::take(&mut *self.logs.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn push(&self, log: WatchLog) {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(log);
    }
}

/// One watcher's current log and where it resumes.
struct Follow {
    log: WatchLog,
}

impl Follow {
    fn event(
        &mut self,
        node: u64,
        key: String,
        revision: u64,
        value: Option<String>,
        received: Duration,
    ) {
        self.log.events.push(WatchEvent {
            watcher: self.log.watcher,
            node,
            key,
            revision,
            value,
            received,
        });
        self.log.covered_until = self.log.covered_until.max(revision);
    }

    fn resume_from(&self) -> u64 {
        self.log.covered_until
    }
}

/// Follows every REST register of kind `rk` with `watch=1` across nodes
/// until `stop`: each reconnect resumes after the last revision received,
/// on a node picked at random. A `410` starts a new log from a fresh list.
pub async fn rest_watcher(
    watcher: u32,
    rk: RestKind,
    seed: u64,
    recorder: Arc<Recorder>,
    endpoints: Vec<Endpoint>,
    progress: Arc<WatchProgress>,
    mut stop: watch::Receiver<bool>,
) {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap_or_default();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5741_5443 ^ u64::from(watcher));
    let mut follow: Option<Follow> = None;
    while !*stop.borrow_and_update() {
        let node = endpoints[rng.random_range(0..endpoints.len())].clone();
        let Some(f) = follow.as_mut() else {
            // Start (again): the list's revision is where the log begins.
            let url = rk.collection(&node);
            if let Ok((StatusCode::OK, body)) = send(http.get(url).timeout(WATCH_SILENCE)).await {
                if let Some(rv) = body
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok())
                {
                    follow = Some(new_follow(watcher, rk.prefix(), rv));
                    progress.set_covered(rv);
                }
            }
            continue;
        };
        let url = format!(
            "{}?watch=1&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds=60",
            rk.collection(&node),
            f.resume_from()
        );
        let Ok(resp) = http.get(url).send().await else {
            f.log.reconnects += 1;
            continue;
        };
        if resp.status() != StatusCode::OK {
            f.log.reconnects += 1;
            continue;
        }
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        let expired = loop {
            let next = tokio::select! {
                next = tokio::time::timeout(WATCH_SILENCE, body.next()) => next,
                _ = stop.changed() => break false,
            };
            let Ok(Some(Ok(chunk))) = next else {
                break false;
            };
            buf.extend_from_slice(&chunk);
            let mut gone = false;
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                gone |= rest_watch_event(f, rk, node.id, &event, recorder.now());
            }
            progress.set_covered(f.log.covered_until);
            if gone {
                break true;
            }
        };
        end_of_stream(&mut follow, &progress, expired);
    }
    if let Some(f) = follow {
        progress.push(f.log);
    }
}

/// After a watch stream ended: an expired log (`410`, compacted) is
/// finished and the watcher starts a new one from a fresh read; otherwise
/// the same log resumes on a reconnect.
fn end_of_stream(follow: &mut Option<Follow>, progress: &WatchProgress, expired: bool) {
    if expired {
        if let Some(f) = follow.take() {
            progress.push(f.log);
        }
    } else if let Some(f) = follow.as_mut() {
        f.log.reconnects += 1;
    }
}

fn new_follow(watcher: u32, prefix: &str, start: u64) -> Follow {
    Follow {
        log: WatchLog {
            watcher,
            prefix: prefix.to_string(),
            start_revision: start,
            covered_until: start,
            events: Vec::new(),
            reconnects: 0,
        },
    }
}

/// Takes one watch event line; `true` when the watch expired (`410`).
fn rest_watch_event(
    f: &mut Follow,
    rk: RestKind,
    node: u64,
    event: &Value,
    received: Duration,
) -> bool {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let obj = event.get("object").cloned().unwrap_or(Value::Null);
    let (value, rv) = register_state(&obj);
    match kind {
        "ADDED" | "MODIFIED" | "DELETED" => {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if let Some(rv) = rv {
                let value = if kind == "DELETED" { None } else { value };
                f.event(node, format!("{}{name}", rk.prefix()), rv, value, received);
            }
            false
        }
        "BOOKMARK" => {
            if let Some(rv) = rv {
                f.log.covered_until = f.log.covered_until.max(rv);
            }
            false
        }
        _ => obj.get("code").and_then(Value::as_u64) == Some(410),
    }
}

/// Follows the etcd registers with a prefix watch across nodes until
/// `stop`, resuming after the last revision received (progress
/// notifications count as received).
pub async fn etcd_watcher(
    watcher: u32,
    seed: u64,
    recorder: Arc<Recorder>,
    endpoints: Vec<Endpoint>,
    progress: Arc<WatchProgress>,
    mut stop: watch::Receiver<bool>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x4554_4344);
    let mut follow: Option<Follow> = None;
    while !*stop.borrow_and_update() {
        let node = endpoints[rng.random_range(0..endpoints.len())].clone();
        let options =
            etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(1));
        let connect = etcd_client::Client::connect([node.etcd_url.clone()], Some(options));
        let Ok(Ok(mut client)) = tokio::time::timeout(WATCH_SILENCE, connect).await else {
            continue;
        };
        let Some(f) = follow.as_mut() else {
            let get = client.get(
                ETCD_PREFIX,
                Some(GetOptions::new().with_prefix().with_count_only()),
            );
            if let Ok(Ok(resp)) = tokio::time::timeout(WATCH_SILENCE, get).await {
                if let Some(rev) = header_revision(resp.header()) {
                    follow = Some(new_follow(watcher, ETCD_PREFIX, rev));
                    progress.set_covered(rev);
                }
            }
            continue;
        };
        let start = i64::try_from(f.resume_from() + 1).unwrap_or(i64::MAX);
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(start)
            .with_progress_notify();
        let Ok(Ok(mut stream)) =
            tokio::time::timeout(WATCH_SILENCE, client.watch(ETCD_PREFIX, Some(options))).await
        else {
            f.log.reconnects += 1;
            continue;
        };
        let expired = loop {
            let next = tokio::select! {
                next = tokio::time::timeout(WATCH_SILENCE, stream.message()) => next,
                _ = stop.changed() => break false,
            };
            let Ok(Ok(Some(resp))) = next else {
                break false;
            };
            if resp.compact_revision() > 0 || (resp.canceled() && !resp.created()) {
                break resp.compact_revision() > 0;
            }
            let now = recorder.now();
            for e in resp.events() {
                let Some(kv) = e.kv() else { continue };
                let Ok(revision) = u64::try_from(kv.mod_revision()) else {
                    continue;
                };
                let value = match e.event_type() {
                    EventType::Put => Some(String::from_utf8_lossy(kv.value()).into_owned()),
                    EventType::Delete => None,
                };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                f.event(node.id, key, revision, value, now);
            }
            if resp.events().is_empty() {
                if let Some(rev) = header_revision(resp.header()) {
                    f.log.covered_until = f.log.covered_until.max(rev);
                }
            }
            progress.set_covered(f.log.covered_until);
        };
        end_of_stream(&mut follow, &progress, expired);
    }
    if let Some(f) = follow {
        progress.push(f.log);
    }
}

//! The per-node watches of `bench mixed` and their accounting of every
//! acknowledged status update (delivered once, lost, duplicated, misrouted).

use super::seed::open_watch;
use super::*;

/// How a watch stream ended.
pub(super) enum StreamEnd {
    /// Asked to stop.
    Stopped,
    /// Closed or broken: reopen after the last revision seen.
    Closed,
    /// The server cannot resume it (410): the rest is lost.
    Gone,
}

/// Node `n`'s watch: reads its events until told to stop, reopening it
/// after the last revision seen if the stream ends.
pub(super) async fn watcher(
    shared: Arc<Shared>,
    http: reqwest::Client,
    n: u64,
    from: u64,
    first: reqwest::Response,
    mut stop: watch::Receiver<bool>,
) {
    let node = node_name(n);
    let endpoint = shared.endpoint(n).to_string();
    let mut last = from;
    let mut hist = latency_histogram().ok();
    let mut resp = Some(first);
    loop {
        let r = match resp.take() {
            Some(r) => r,
            None => match open_watch(&http, &endpoint, &node, last).await {
                Ok(r) => r,
                Err(e) => {
                    shared.delivery.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "reopening the watch failed");
                    tokio::select! {
                        _ = tokio::time::sleep(REWATCH_DELAY) => continue,
                        _ = stop.wait_for(|s| *s) => break,
                    }
                }
            },
        };
        match read_stream(&shared, &node, r, &mut last, &mut hist, &mut stop).await {
            StreamEnd::Stopped | StreamEnd::Gone => break,
            StreamEnd::Closed => {
                shared.delivery.reconnects.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(last, "watch closed: reopening");
            }
        }
        if *stop.borrow() {
            break;
        }
    }
    if let Some(h) = hist {
        shared.watch_latency.add_latencies(&h);
    }
}

async fn read_stream(
    shared: &Shared,
    node: &str,
    resp: reqwest::Response,
    last: &mut u64,
    hist: &mut Option<Histogram<u64>>,
    stop: &mut watch::Receiver<bool>,
) -> StreamEnd {
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            next = body.next() => match next {
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "watch stream broke");
                    return StreamEnd::Closed;
                }
                None => return StreamEnd::Closed,
            },
            _ = stop.wait_for(|s| *s) => return StreamEnd::Stopped,
        };
        buf.extend_from_slice(&chunk);
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let now_us = shared.start.elapsed().as_micros() as u64;
            if let Some(end) = on_event(shared, node, &line, now_us, last, hist) {
                return end;
            }
        }
    }
}

/// Accounts for one watch event; `Some` if the stream must end.
fn on_event(
    shared: &Shared,
    node: &str,
    line: &[u8],
    now_us: u64,
    last: &mut u64,
    hist: &mut Option<Histogram<u64>>,
) -> Option<StreamEnd> {
    let d = &shared.delivery;
    let Ok(event) = serde_json::from_slice::<Value>(line) else {
        d.errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("unreadable watch event");
        return None;
    };
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    let obj = event.get("object").unwrap_or(&Value::Null);
    let rv = resource_version(obj);
    match kind {
        "BOOKMARK" => {
            *last = (*last).max(rv.unwrap_or(0));
            None
        }
        "ERROR" => {
            d.errors.fetch_add(1, Ordering::Relaxed);
            let code = obj.get("code").and_then(Value::as_u64);
            tracing::warn!(?code, message = ?obj.get("message"), "watch ERROR event");
            Some(if code == Some(410) {
                StreamEnd::Gone
            } else {
                StreamEnd::Closed
            })
        }
        "ADDED" | "MODIFIED" | "DELETED" => {
            *last = (*last).max(rv.unwrap_or(0));
            if obj.pointer("/spec/nodeName").and_then(Value::as_str) != Some(node) {
                d.misrouted.fetch_add(1, Ordering::Relaxed);
            }
            if let (Some(sent_us), Some(rv)) = (shared.stamp_of(obj), rv) {
                d.received.fetch_add(1, Ordering::Relaxed);
                if let Some(h) = hist.as_mut() {
                    let _ = h.record(now_us.saturating_sub(sent_us).max(1));
                }
                if !lock(&d.seen).insert(rv) {
                    d.duplicated.fetch_add(1, Ordering::Relaxed);
                }
            }
            None
        }
        other => {
            d.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(kind = other, "unknown watch event type");
            None
        }
    }
}

//! `/metrics` in the Prometheus text format: request counters and latency
//! histograms per verb and read path, guarded writes whose guard failed,
//! and the node's Raft and store gauges.
//!
//! Hand-written: the exposition format is a few lines of text and the set
//! of series is small and fixed, so a registry crate would add more code
//! (and build time) than it saves.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use kubestore_raft::RaftNode;

use crate::histogram::Histogram;
use crate::kube::store::{GuardedWrite, KubeStore};
use crate::limits::{InflightLimits, RequestClass};

/// The `X-Kubestore-Read` header: how a read was served
/// (`kube::store::ReadPath`), so benchmarks and tests can tell. Handlers
/// set it; the metrics layer reads it as a label.
pub const READ_HEADER: &str = "x-kubestore-read";

/// The verb a handler served, attached to its response for the metrics layer.
#[derive(Debug, Clone, Copy)]
pub struct Verb(pub &'static str);

/// (verb, read path) → latency; (verb, read path, code) → count.
#[derive(Debug, Default)]
struct Series {
    latency: BTreeMap<(&'static str, String), Histogram>,
    requests: BTreeMap<(&'static str, String, u16), u64>,
}

/// The node's request metrics. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    series: Arc<Mutex<Series>>,
}

impl Metrics {
    fn record(&self, verb: &'static str, read: String, code: u16, secs: f64) {
        let mut s = self.series.lock().unwrap_or_else(|p| p.into_inner());
        s.latency
            .entry((verb, read.clone()))
            .or_default()
            .observe(secs);
        *s.requests.entry((verb, read, code)).or_default() += 1;
    }

    fn render(&self, out: &mut String) {
        let s = self.series.lock().unwrap_or_else(|p| p.into_inner());
        out.push_str("# HELP kubestore_http_requests_total Kubernetes API requests by verb, read path and status code.\n");
        out.push_str("# TYPE kubestore_http_requests_total counter\n");
        for ((verb, read, code), n) in &s.requests {
            let _ = writeln!(out, "kubestore_http_requests_total{{verb=\"{verb}\",read=\"{read}\",code=\"{code}\"}} {n}");
        }
        out.push_str("# HELP kubestore_http_request_duration_seconds Time to the response headers (for watches: to the stream's start).\n");
        out.push_str("# TYPE kubestore_http_request_duration_seconds histogram\n");
        for ((verb, read), h) in &s.latency {
            h.render(
                out,
                "kubestore_http_request_duration_seconds",
                &format!("verb=\"{verb}\",read=\"{read}\""),
            );
        }
    }
}

/// The layer that times every request and counts it under the verb its
/// handler reported (`other` for non-resource paths).
pub async fn track(State(metrics): State<Metrics>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let resp = next.run(req).await;
    let verb = resp.extensions().get::<Verb>().map_or("other", |v| v.0);
    let read = resp
        .headers()
        .get(READ_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_string();
    metrics.record(
        verb,
        read,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
}

/// Each write-path stage's runs and total seconds on this node
/// (`kubestore_storage::timings`): a stage's mean is the rate of the one
/// over the rate of the other.
fn write_stage_times(out: &mut String, node: &RaftNode) {
    let totals = node.store().timings().read();
    let (seconds, runs) = ("kubestore_stage_seconds_total", "kubestore_stage_total");
    let _ = writeln!(
        out,
        "# HELP {seconds} Time spent in each stage of the write path on this node.\n# TYPE {seconds} counter"
    );
    for t in &totals {
        let _ = writeln!(
            out,
            "{seconds}{{stage=\"{}\"}} {}",
            t.stage.name(),
            t.total.as_secs_f64()
        );
    }
    let _ = writeln!(
        out,
        "# HELP {runs} Runs of each stage of the write path on this node.\n# TYPE {runs} counter"
    );
    for t in &totals {
        let _ = writeln!(out, "{runs}{{stage=\"{}\"}} {}", t.stage.name(), t.count);
    }
}

/// The `/metrics` page: the request series, the guarded writes whose
/// guard failed, then the node's Raft, store and in-flight gauges.
pub fn render(
    metrics: &Metrics,
    node: &RaftNode,
    kube: &KubeStore,
    limits: &InflightLimits,
) -> Response {
    let mut out = String::new();
    metrics.render(&mut out);
    write_family(
        &mut out,
        "kubestore_guarded_write_conflicts_total",
        "Guarded Kubernetes writes this node proposed whose guard failed (the state they were decided on had moved), each decided again: by write (update covers every change of one object, deletions included).",
        "counter",
        "write",
        GuardedWrite::ALL
            .map(|kind| (kind.label(), kube.guard_failures(kind))),
    );
    let applied = node.store().applied();
    let leader = node.current_leader();
    let gauges = [
        (
            "kubestore_store_revision",
            "The store's current revision.",
            applied.revision.0 as f64,
        ),
        (
            "kubestore_store_compacted_revision",
            "The revision history is compacted to.",
            applied.compacted.0 as f64,
        ),
        (
            "kubestore_store_purged_revision",
            "The revision compacted history is physically deleted up to (the purge runs behind the compaction).",
            node.store().purged().0 as f64,
        ),
        (
            "kubestore_raft_applied_index",
            "The last log index applied to the state machine.",
            applied.log_index.0 as f64,
        ),
        (
            "kubestore_raft_is_leader",
            "1 if this node is the Raft leader.",
            f64::from(u8::from(leader == Some(node.id()))),
        ),
        (
            "kubestore_raft_has_leader",
            "1 if this node knows a leader.",
            f64::from(u8::from(leader.is_some())),
        ),
        (
            "kubestore_store_size_bytes",
            "Approximate size of the database on disk.",
            node.store().size_on_disk() as f64,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
    write_stage_times(&mut out, node);
    write_per_class(
        &mut out,
        "kubestore_requests_rejected_total",
        "API requests (REST and etcd) refused over the in-flight limit.",
        "counter",
        |class| limits.rejected(class),
    );
    write_per_class(
        &mut out,
        "kubestore_requests_inflight",
        "API requests (REST and etcd, watches exempt) being served now.",
        "gauge",
        |class| u64::try_from(limits.in_flight(class)).unwrap_or(u64::MAX),
    );
    let held = "kubestore_admitted_request_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {held} Time an admitted API request (REST and etcd, watches exempt) held its in-flight slot: from admission to its answer.\n# TYPE {held} histogram"
    );
    for (class, label) in CLASSES {
        limits
            .held(class)
            .render(&mut out, held, &format!("class=\"{label}\""));
    }
    let mut resp = (StatusCode::OK, out).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

/// The request classes and their label values.
const CLASSES: [(RequestClass, &str); 2] = [
    (RequestClass::ReadOnly, "read-only"),
    (RequestClass::Mutating, "mutating"),
];

/// One metric family with a sample per request class.
fn write_per_class(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    value: impl Fn(RequestClass) -> u64,
) {
    let samples = CLASSES.map(|(class, label)| (label, value(class)));
    write_family(out, name, help, kind, "class", samples);
}

/// One metric family with a sample per value of one label.
fn write_family<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    label: &str,
    samples: impl IntoIterator<Item = (&'a str, u64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (value, n) in samples {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
    }
}

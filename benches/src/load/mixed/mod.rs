//! `kubestore bench mixed`: the traffic of a small Kubernetes control plane,
//! run for a fixed time (`--seconds`) against running kubestore REST
//! endpoints.
//!
//! Seeding comes first and is not timed: the namespaces `kube-node-lease`
//! and `bench-mixed`, one Lease per simulated node, and `--pods` pods in
//! `bench-mixed` spread round-robin over the nodes (`spec.nodeName`; pods
//! of an earlier run are deleted first). Then, all at once:
//!
//! - **lease_renew**: each of `--nodes` simulated kubelets renews its own
//!   `coordination.k8s.io/v1` Lease every `--lease-period-ms` (kubelet's node
//!   heartbeat is every 10 s; time is compressed here): a GET, then a PUT
//!   with a new `spec.renewTime`. One latency covers both.
//! - **pod_status_update**: `--status-writers` clients, each in a closed
//!   loop, PUT the status of a random pod, guarded by the resourceVersion
//!   they last saw of it. A 409 conflict is counted apart from errors (not
//!   in `requests`) and answered by re-reading the pod and trying again. One
//!   latency is one PUT.
//! - **list_pods_quorum** / **list_pods_any**: `--listers` clients list
//!   every pod in the cluster (`/api/v1/pods`, as informers do), alternately
//!   with resourceVersion unset (most recent) and `0` (any), recording how
//!   the server says it served each (`X-Kubestore-Read`).
//! - **watch_delivery**: one watch per node on its own pods
//!   (`fieldSelector=spec.nodeName=<node>`, as a kubelet watches), spread
//!   over the endpoints, from the resourceVersion of the seeded list. Each
//!   status update carries its send time in `status.message`; latency runs
//!   from the PUT being sent to the watcher reading its event. Every
//!   acknowledged update must reach its node's watch exactly once: lost,
//!   duplicated and misrouted events are counted (lost must be 0).
//!
//! The status goes to the pods' `status` subresource. A one-off probe before
//! the timed part checks that the server serves it; if it answers 404, the
//! updates PUT the whole pod instead, with a warning, and `results.json`
//! says so (`mixed.pod_status_path`).
//!
//! Results: one row per operation kind in the terminal table and in
//! `results.json` (`runs`, as for `bench rest`; `mixed` holds the
//! conflicts, the watch accounting and the parameters), and the two plots.

//!
//! Parts: `seed.rs` (the untimed seeding and the probes), `clients.rs`
//! (lease renewers, status writers, listers), `watchers.rs` (the per-node
//! watches and their accounting of every status update), `report.rs` (the
//! rows, the table and `results.json`), `driver.rs` (the timed run, which
//! drives them all); this file holds the arguments, the request helpers and
//! the state the parts share, and depends on none of them.

mod clients;
pub(super) mod driver;
mod report;
mod seed;
mod watchers;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use reqwest::StatusCode;
use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tracing::Instrument;

use super::record::{latency_histogram, lock, progress, Recorder};

/// The namespace of the pods.
const NAMESPACE: &str = "bench-mixed";
/// Where kubelets keep their node leases.
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The label of the bench's pods (and the selector that deletes them).
const POD_LABEL: (&str, &str) = ("app", "bench-mixed");
/// Seeding requests in flight at once.
const SEED_IN_FLIGHT: usize = 16;
/// Conflicts on one update before a status writer gives up on it.
const CONFLICT_RETRIES: usize = 5;
/// Timeout of every request but the watches.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the last events may take to arrive after the timed part.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause before a watch is reopened.
const REWATCH_DELAY: Duration = Duration::from_millis(200);
/// First word of the send-time stamp in `status.message`.
const STAMP: &str = "kubestore-bench";

#[derive(Debug, Args)]
pub struct MixedArgs {
    /// Comma-separated REST base URLs; every kind of client spreads over them.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:8080")]
    pub endpoints: Vec<String>,
    /// Seconds of the timed mix (seeding comes before and is not timed).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub seconds: u64,
    /// Simulated nodes: each renews its Lease and watches its own pods.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..100_000))]
    pub nodes: u64,
    /// Milliseconds between two renewals of a node's Lease (kubelet: 10,000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub lease_period_ms: u64,
    /// Pods, spread round-robin over the nodes.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..1_000_000))]
    pub pods: u64,
    /// Clients updating random pods' status, each in a closed loop.
    #[arg(long, default_value_t = 16)]
    pub status_writers: usize,
    /// Clients listing all pods, alternately most recent and rv=0.
    #[arg(long, default_value_t = 4)]
    pub listers: usize,
    /// Where results.json and the plots go.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// No progress bar (for logs and tests).
    #[arg(long)]
    pub no_progress: bool,
}

/// Why one operation failed.
#[derive(Debug, thiserror::Error)]
enum OpError {
    #[error("{what}: {source}")]
    Transport {
        what: &'static str,
        #[source]
        source: reqwest::Error,
    },
    #[error("{what}: 409 Conflict")]
    Conflict { what: &'static str },
    #[error("{what}: HTTP {status}")]
    Status {
        what: &'static str,
        status: StatusCode,
    },
    #[error("{what}: the response has no {field}")]
    Malformed {
        what: &'static str,
        field: &'static str,
    },
    #[error("pod status update: {CONFLICT_RETRIES} conflicts in a row")]
    TooManyConflicts,
}

/// Sends a request; a non-2xx answer is an error, 409 its own.
async fn send(
    what: &'static str,
    req: reqwest::RequestBuilder,
) -> Result<reqwest::Response, OpError> {
    let r = req
        .send()
        .await
        .map_err(|source| OpError::Transport { what, source })?;
    match r.status() {
        s if s.is_success() => Ok(r),
        StatusCode::CONFLICT => Err(OpError::Conflict { what }),
        status => Err(OpError::Status { what, status }),
    }
}

async fn json_of(what: &'static str, r: reqwest::Response) -> Result<Value, OpError> {
    r.json()
        .await
        .map_err(|source| OpError::Transport { what, source })
}

/// Reads and drops a body, so the connection goes back to the pool.
async fn drain(what: &'static str, r: reqwest::Response) -> Result<(), OpError> {
    r.bytes()
        .await
        .map(drop)
        .map_err(|source| OpError::Transport { what, source })
}

fn resource_version(obj: &Value) -> Option<u64> {
    obj.pointer("/metadata/resourceVersion")?
        .as_str()?
        .parse()
        .ok()
}

/// The object's fields, or `Malformed` if it is not a JSON object.
fn fields_mut<'a>(
    what: &'static str,
    obj: &'a mut Value,
) -> Result<&'a mut Map<String, Value>, OpError> {
    obj.as_object_mut().ok_or(OpError::Malformed {
        what,
        field: "object",
    })
}

/// Sets `obj.<outer>.<field>`, creating `<outer>` if it is missing.
fn set_nested(
    what: &'static str,
    obj: &mut Value,
    outer: &'static str,
    field: &str,
    value: Value,
) -> Result<(), OpError> {
    let inner = fields_mut(what, obj)?
        .entry(outer)
        .or_insert_with(|| json!({}));
    fields_mut(what, inner)
        .map_err(|_| OpError::Malformed { what, field: outer })?
        .insert(field.to_string(), value);
    Ok(())
}

fn node_name(n: u64) -> String {
    format!("bench-node-{n:04}")
}

fn pod_name(i: u64) -> String {
    format!("pod-{i:06}")
}

fn pods_url(endpoint: &str) -> String {
    format!("{endpoint}/api/v1/namespaces/{NAMESPACE}/pods")
}

fn lease_url(endpoint: &str, node: &str) -> String {
    format!("{endpoint}/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{node}")
}

/// Now as a Kubernetes MicroTime (Lease `renewTime`).
fn micro_time_now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Now as a Kubernetes Time (seconds).
fn time_now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Where pod status updates go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatusPath {
    /// `PUT .../pods/<name>/status`, as kubelets do.
    Subresource,
    /// `PUT .../pods/<name>`: the server does not serve `pods/status`.
    WholeObject,
}

impl StatusPath {
    fn url(self, endpoint: &str, name: &str) -> String {
        match self {
            StatusPath::Subresource => format!("{}/{name}/status", pods_url(endpoint)),
            StatusPath::WholeObject => format!("{}/{name}", pods_url(endpoint)),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            StatusPath::Subresource => "pods/status",
            StatusPath::WholeObject => "pods (pods/status answered 404)",
        }
    }
}

/// The watches' accounting of status-update events.
#[derive(Default)]
struct Delivery {
    /// Stamped events of this run read by any watch.
    received: AtomicU64,
    duplicated: AtomicU64,
    /// Events of a pod on another node than the watch's.
    misrouted: AtomicU64,
    /// ERROR events, unreadable lines, watches that failed to (re)open.
    errors: AtomicU64,
    reconnects: AtomicU64,
    /// Revisions of the stamped events seen.
    seen: Mutex<HashSet<u64>>,
}

/// Everything the clients of the timed part share.
struct Shared {
    http: reqwest::Client,
    endpoints: Vec<String>,
    pods: u64,
    /// The clock of the send stamps, and the start of the timed part.
    start: Instant,
    deadline: Instant,
    /// Tells this run's stamps from any other's.
    run: String,
    status_path: StatusPath,
    /// The newest state of each pod a writer has seen.
    pod_state: Vec<Mutex<Value>>,
    /// Revisions of the acknowledged status updates.
    acked: Mutex<Vec<u64>>,
    leases: Recorder,
    status: Recorder,
    list_quorum: Recorder,
    list_any: Recorder,
    watch_latency: Recorder,
    delivery: Delivery,
}

impl Shared {
    fn endpoint(&self, i: u64) -> &str {
        &self.endpoints[(i % self.endpoints.len() as u64) as usize]
    }

    fn stamp(&self, sent_us: u64) -> String {
        format!("{STAMP} {} {sent_us}", self.run)
    }

    /// The send time (µs since `start`) in an event's object, if the
    /// object carries a stamp of this run.
    fn stamp_of(&self, obj: &Value) -> Option<u64> {
        let message = obj.pointer("/status/message")?.as_str()?;
        let mut words = message.split(' ');
        if words.next()? != STAMP || words.next()? != self.run {
            return None;
        }
        words.next()?.parse().ok()
    }

    /// Keeps `obj` as pod `i`'s state if it is newer than the one kept.
    fn remember(&self, i: usize, obj: Value) {
        let Some(slot) = self.pod_state.get(i) else {
            return;
        };
        let mut kept = lock(slot);
        if resource_version(&obj) > resource_version(&kept) {
            *kept = obj;
        }
    }
}

/// A pod's status as a kubelet reports a running pod, with the send stamp.
fn pod_status(stamp: String) -> Value {
    let now = time_now();
    json!({
        "phase": "Running",
        "conditions": [
            { "type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": now },
            { "type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": now },
            { "type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": now },
            { "type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now },
        ],
        "containerStatuses": [{
            "name": "app",
            "image": "pause:3.10",
            "imageID": "",
            "ready": true,
            "started": true,
            "restartCount": 0,
            "state": { "running": { "startedAt": now } },
        }],
        "message": stamp,
    })
}

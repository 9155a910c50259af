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

/// Creates a namespace unless it exists.
async fn ensure_namespace(http: &reqwest::Client, base: &str, name: &str) -> anyhow::Result<()> {
    let r = http
        .post(format!("{base}/api/v1/namespaces"))
        .json(&json!({ "metadata": { "name": name } }))
        .send()
        .await?;
    if !(r.status().is_success() || r.status() == StatusCode::CONFLICT) {
        bail!("creating namespace {name}: HTTP {}", r.status());
    }
    Ok(())
}

/// The untimed part: namespaces, a Lease per node (kept if it exists),
/// and the pods (those of an earlier run deleted first).
async fn seed(args: &MixedArgs, http: &reqwest::Client) -> anyhow::Result<()> {
    let base = args.endpoints[0].as_str();
    ensure_namespace(http, base, LEASE_NAMESPACE).await?;
    ensure_namespace(http, base, NAMESPACE).await?;
    // At once (grace period 0), as a kube-apiserver would not otherwise
    // delete a pod bound to a node until its kubelet confirmed.
    let r = http
        .delete(pods_url(base))
        .query(&[
            ("labelSelector", format!("{}={}", POD_LABEL.0, POD_LABEL.1)),
            ("gracePeriodSeconds", "0".to_string()),
        ])
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("deleting the pods of an earlier run: HTTP {}", r.status());
    }
    let bar = progress(
        args.nodes + args.pods,
        "seeding leases and pods",
        "{prefix:>28} [{bar:30}] {pos}/{len}",
        args.no_progress,
    );
    let leases = format!("{base}/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases");
    let lease_seconds = (args.lease_period_ms * 4).div_ceil(1000).max(1);
    let mut created = futures::stream::iter(0..args.nodes)
        .map(|n| {
            let node = node_name(n);
            let body = json!({
                "metadata": { "name": node },
                "spec": {
                    "holderIdentity": node,
                    "leaseDurationSeconds": lease_seconds,
                    "renewTime": micro_time_now(),
                },
            });
            let req = http.post(&leases).json(&body);
            async move { (node, req.send().await) }
        })
        .buffer_unordered(SEED_IN_FLIGHT);
    while let Some((node, r)) = created.next().await {
        let status = r
            .with_context(|| format!("creating lease {node}"))?
            .status();
        if !(status.is_success() || status == StatusCode::CONFLICT) {
            bail!("creating lease {node}: HTTP {status}");
        }
        bar.inc(1);
    }
    let pods = pods_url(base);
    let mut created = futures::stream::iter(0..args.pods)
        .map(|i| {
            let name = pod_name(i);
            let body = json!({
                "metadata": { "name": name, "labels": { POD_LABEL.0: POD_LABEL.1 } },
                "spec": {
                    "nodeName": node_name(i % args.nodes),
                    "containers": [{ "name": "app", "image": "pause:3.10" }],
                },
                "status": { "phase": "Pending" },
            });
            let req = http.post(&pods).json(&body);
            async move { (name, req.send().await) }
        })
        .buffer_unordered(SEED_IN_FLIGHT);
    while let Some((name, r)) = created.next().await {
        let status = r.with_context(|| format!("creating pod {name}"))?.status();
        if !status.is_success() {
            bail!("creating pod {name}: HTTP {status}");
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

/// Whether the server serves `pods/status`: one status PUT on the first pod.
async fn probe_status_path(http: &reqwest::Client, base: &str) -> anyhow::Result<StatusPath> {
    let name = pod_name(0);
    let mut pod: Value = http
        .get(format!("{}/{name}", pods_url(base)))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    set_nested("probe", &mut pod, "status", "phase", json!("Running"))?;
    let r = http
        .put(StatusPath::Subresource.url(base, &name))
        .json(&pod)
        .send()
        .await?;
    match r.status() {
        s if s.is_success() => Ok(StatusPath::Subresource),
        StatusCode::NOT_FOUND => {
            eprintln!(
                "warning: {base} answers 404 to PUT pods/{name}/status: the pod status \
                 updates PUT the whole pod instead"
            );
            Ok(StatusPath::WholeObject)
        }
        s => bail!("probing pods/{name}/status: HTTP {s}"),
    }
}

/// The seeded pods, in index order, and the revision they were listed at.
async fn list_seeded(
    http: &reqwest::Client,
    base: &str,
    pods: u64,
) -> anyhow::Result<(u64, Vec<Value>)> {
    let list: Value = http
        .get(pods_url(base))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let revision = resource_version(&list).context("the pod list has no resourceVersion")?;
    let mut by_index: Vec<Option<Value>> = vec![None; pods as usize];
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .context("the pod list has no items")?;
    for item in items {
        let index = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .and_then(|n| n.strip_prefix("pod-"))
            .and_then(|n| n.parse::<usize>().ok());
        if let Some(slot) = index.and_then(|i| by_index.get_mut(i)) {
            *slot = Some(item.clone());
        }
    }
    let seeded: Vec<Value> = by_index.into_iter().flatten().collect();
    if seeded.len() as u64 != pods {
        bail!(
            "listed {} of the {pods} seeded pods in {NAMESPACE}",
            seeded.len()
        );
    }
    Ok((revision, seeded))
}

/// Opens node `n`'s watch on its pods, after revision `from`.
async fn open_watch(
    http: &reqwest::Client,
    endpoint: &str,
    node: &str,
    from: u64,
) -> Result<reqwest::Response, OpError> {
    send(
        "watch",
        http.get(pods_url(endpoint)).query(&[
            ("watch", "1".to_string()),
            ("allowWatchBookmarks", "true".to_string()),
            ("fieldSelector", format!("spec.nodeName={node}")),
            ("resourceVersion", from.to_string()),
        ]),
    )
    .await
}

/// Runs `kubestore bench mixed`.
pub async fn run(args: MixedArgs) -> anyhow::Result<()> {
    if args.endpoints.is_empty() {
        bail!("--endpoints is empty");
    }
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .timeout(REQUEST_TIMEOUT)
        .build()?;
    // Watches last the whole run: no overall timeout.
    let watch_http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(REQUEST_TIMEOUT)
        .build()?;
    let base = args.endpoints[0].clone();
    seed(&args, &http)
        .instrument(tracing::info_span!(
            "seed",
            nodes = args.nodes,
            pods = args.pods
        ))
        .await?;
    let status_path = probe_status_path(&http, &base).await?;
    let (from, seeded) = list_seeded(&http, &base, args.pods).await?;

    let mut opened = Vec::new();
    for n in 0..args.nodes {
        let endpoint = &args.endpoints[(n % args.endpoints.len() as u64) as usize];
        let resp = open_watch(&watch_http, endpoint, &node_name(n), from)
            .await
            .with_context(|| format!("opening the watch of {}", node_name(n)))?;
        opened.push(resp);
    }

    let start = Instant::now();
    let shared = Arc::new(Shared {
        http,
        endpoints: args.endpoints.clone(),
        pods: args.pods,
        start,
        deadline: start + Duration::from_secs(args.seconds),
        run: format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
        ),
        status_path,
        pod_state: seeded.into_iter().map(Mutex::new).collect(),
        acked: Mutex::new(Vec::new()),
        leases: Recorder::new()?,
        status: Recorder::new()?,
        list_quorum: Recorder::new()?,
        list_any: Recorder::new()?,
        watch_latency: Recorder::new()?,
        delivery: Delivery::default(),
    });
    let span = tracing::info_span!("mixed", seconds = args.seconds, run = %shared.run);
    let (stop_tx, stop_rx) = watch::channel(false);

    let mut watchers = Vec::new();
    for (n, resp) in (0..args.nodes).zip(opened) {
        let task = watcher(
            shared.clone(),
            watch_http.clone(),
            n,
            from,
            resp,
            stop_rx.clone(),
        );
        watchers.push(tokio::spawn(task.instrument(tracing::info_span!(
            parent: &span,
            "watcher",
            node = n
        ))));
    }
    let mut workers = Vec::new();
    let period = Duration::from_millis(args.lease_period_ms);
    for n in 0..args.nodes {
        // First renewals spread over one period, as kubelets' are.
        let offset = period.mul_f64(n as f64 / args.nodes as f64);
        workers.push(tokio::spawn(
            lease_renewer(shared.clone(), n, period, offset)
                .instrument(tracing::info_span!(parent: &span, "lease_renewer", node = n)),
        ));
    }
    for w in 0..args.status_writers {
        workers.push(tokio::spawn(
            status_writer(shared.clone(), w as u64)
                .instrument(tracing::info_span!(parent: &span, "status_writer", writer = w)),
        ));
    }
    for l in 0..args.listers {
        workers.push(tokio::spawn(lister(shared.clone(), l as u64).instrument(
            tracing::info_span!(parent: &span, "lister", lister = l),
        )));
    }
    let bar = progress(
        args.seconds,
        "mixed",
        "{prefix:>8} [{bar:30}] {pos}/{len} s  {msg}",
        args.no_progress,
    );
    let ticker = tokio::spawn(show_progress(shared.clone(), bar.clone()));
    for w in workers {
        w.await?;
    }
    let seconds = start.elapsed().as_secs_f64();
    ticker.abort();
    bar.finish_and_clear();

    // The last events may still be on their way: wait (bounded) for them.
    let drain_deadline = Instant::now() + DRAIN_TIMEOUT;
    while !all_delivered(&shared) && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_tx.send_replace(true);
    for w in watchers {
        w.await?;
    }
    report(&args, &shared, seconds)
}

/// Whether every acknowledged status update reached a watch.
fn all_delivered(shared: &Shared) -> bool {
    let acked = lock(&shared.acked);
    let seen = lock(&shared.delivery.seen);
    acked.iter().all(|rv| seen.contains(rv))
}

/// Updates the timed bar with seconds elapsed and operations so far.
async fn show_progress(shared: Arc<Shared>, bar: ProgressBar) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        bar.set_position(shared.start.elapsed().as_secs());
        bar.set_message(format!(
            "leases {}  status {} ({} conflicts)  lists {}  events {}",
            shared.leases.count(),
            shared.status.count(),
            shared.status.conflicts(),
            shared.list_quorum.count() + shared.list_any.count(),
            shared.delivery.received.load(Ordering::Relaxed),
        ));
    }
}

/// One simulated kubelet's lease heartbeat, until the deadline.
async fn lease_renewer(shared: Arc<Shared>, n: u64, period: Duration, offset: Duration) {
    let node = node_name(n);
    let url = lease_url(shared.endpoint(n), &node);
    let deadline = tokio::time::Instant::from_std(shared.deadline);
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::from_std(shared.start) + offset,
        period,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::time::sleep_until(deadline) => return,
        }
        let t = Instant::now();
        match renew_lease(&shared.http, &url, &node).await {
            Ok(()) => shared.leases.ok(t, None),
            Err(OpError::Conflict { .. }) => shared.leases.conflict(),
            Err(e) => shared.leases.err(&e),
        }
    }
}

/// GET the lease, PUT it back with a new renewTime.
async fn renew_lease(http: &reqwest::Client, url: &str, node: &str) -> Result<(), OpError> {
    const WHAT: &str = "lease renew";
    let mut lease = json_of(WHAT, send(WHAT, http.get(url)).await?).await?;
    set_nested(
        WHAT,
        &mut lease,
        "spec",
        "renewTime",
        json!(micro_time_now()),
    )?;
    set_nested(WHAT, &mut lease, "spec", "holderIdentity", json!(node))?;
    drain(WHAT, send(WHAT, http.put(url).json(&lease)).await?).await
}

/// One status-writing client, until the deadline.
async fn status_writer(shared: Arc<Shared>, w: u64) {
    let endpoint = shared.endpoint(w).to_string();
    while Instant::now() < shared.deadline {
        let i = rand::random_range(0..shared.pods) as usize;
        if let Err(e) = update_status(&shared, &endpoint, i).await {
            shared.status.err(&e);
        }
    }
}

/// Puts a new status on pod `i`, re-reading it after each conflict.
async fn update_status(shared: &Shared, endpoint: &str, i: usize) -> Result<(), OpError> {
    const WHAT: &str = "pod status update";
    let name = pod_name(i as u64);
    let mut pod = shared
        .pod_state
        .get(i)
        .map(|p| lock(p).clone())
        .ok_or(OpError::Malformed {
            what: WHAT,
            field: "seeded pod",
        })?;
    for _ in 0..CONFLICT_RETRIES {
        let t = Instant::now();
        let sent_us = shared.start.elapsed().as_micros() as u64;
        fields_mut(WHAT, &mut pod)?.insert("status".into(), pod_status(shared.stamp(sent_us)));
        let put = shared
            .http
            .put(shared.status_path.url(endpoint, &name))
            .json(&pod);
        match send(WHAT, put).await {
            Ok(r) => {
                let updated = json_of(WHAT, r).await?;
                let rv = resource_version(&updated).ok_or(OpError::Malformed {
                    what: WHAT,
                    field: "metadata.resourceVersion",
                })?;
                shared.status.ok(t, None);
                lock(&shared.acked).push(rv);
                shared.remember(i, updated);
                return Ok(());
            }
            Err(OpError::Conflict { .. }) => {
                shared.status.conflict();
                const REREAD: &str = "pod re-read after a conflict";
                let get = shared.http.get(format!("{}/{name}", pods_url(endpoint)));
                pod = json_of(REREAD, send(REREAD, get).await?).await?;
                shared.remember(i, pod.clone());
            }
            Err(e) => return Err(e),
        }
    }
    Err(OpError::TooManyConflicts)
}

/// One listing client, alternating most recent and rv=0, until the deadline.
async fn lister(shared: Arc<Shared>, l: u64) {
    const WHAT: &str = "list pods";
    let url = format!("{}/api/v1/pods", shared.endpoint(l));
    let mut quorum = l.is_multiple_of(2);
    while Instant::now() < shared.deadline {
        let (rec, req) = if quorum {
            (&shared.list_quorum, shared.http.get(&url))
        } else {
            (
                &shared.list_any,
                shared.http.get(&url).query(&[("resourceVersion", "0")]),
            )
        };
        let t = Instant::now();
        let result = async {
            let r = send(WHAT, req).await?;
            let served = r
                .headers()
                .get(kubestore_server::http::metrics::READ_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            drain(WHAT, r).await?;
            Ok::<_, OpError>(served)
        }
        .await;
        match result {
            Ok(served) => rec.ok(t, served),
            Err(e) => rec.err(&e),
        }
        quorum = !quorum;
    }
}

/// How a watch stream ended.
enum StreamEnd {
    /// Asked to stop.
    Stopped,
    /// Closed or broken: reopen after the last revision seen.
    Closed,
    /// The server cannot resume it (410): the rest is lost.
    Gone,
}

/// Node `n`'s watch: reads its events until told to stop, reopening it
/// after the last revision seen if the stream ends.
async fn watcher(
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

/// The rows, the watch accounting, the table, results.json and plots.
fn report(args: &MixedArgs, shared: &Shared, seconds: f64) -> anyhow::Result<()> {
    let acked = lock(&shared.acked).clone();
    let seen = lock(&shared.delivery.seen).clone();
    let acked_set: HashSet<u64> = acked.iter().copied().collect();
    let expected = acked.len() as u64;
    let lost = acked.iter().filter(|rv| !seen.contains(rv)).count() as u64;
    let unexpected = seen.iter().filter(|rv| !acked_set.contains(rv)).count() as u64;
    let d = &shared.delivery;
    let nodes = args.nodes as usize;
    let runs = vec![
        shared.leases.result("lease_renew", nodes, seconds),
        shared
            .status
            .result("pod_status_update", args.status_writers, seconds),
        shared
            .list_quorum
            .result("list_pods_quorum", args.listers, seconds),
        shared
            .list_any
            .result("list_pods_any", args.listers, seconds),
        shared
            .watch_latency
            .result_with("watch_delivery", nodes, expected, lost, seconds),
    ];
    let watch = json!({
        "events_expected": expected,
        "events_received": d.received.load(Ordering::Relaxed),
        "events_lost": lost,
        "events_unexpected": unexpected,
        "events_duplicated": d.duplicated.load(Ordering::Relaxed),
        "events_misrouted": d.misrouted.load(Ordering::Relaxed),
        "errors": d.errors.load(Ordering::Relaxed),
        "reconnects": d.reconnects.load(Ordering::Relaxed),
    });
    let conflicts = json!({
        "lease_renew": shared.leases.conflicts(),
        "pod_status_update": shared.status.conflicts(),
    });
    let mut extra = Map::new();
    extra.insert(
        "mixed".into(),
        json!({
            "endpoints": args.endpoints,
            "seconds": args.seconds,
            "nodes": args.nodes,
            "pods": args.pods,
            "lease_period_ms": args.lease_period_ms,
            "status_writers": args.status_writers,
            "listers": args.listers,
            "pod_status_path": shared.status_path.describe(),
            "conflicts": conflicts,
            "watch": watch,
        }),
    );
    let title = format!(
        "mixed: {} nodes, {} pods, {} s",
        args.nodes, args.pods, args.seconds
    );
    super::report_with(&title, &runs, &args.out, extra)?;
    println!(
        "pod status updates via {}: {} conflicts (re-read and retried)",
        shared.status_path.describe(),
        shared.status.conflicts()
    );
    println!(
        "watch: {} of {expected} acknowledged updates delivered, {lost} lost, {} duplicated, \
         {} misrouted, {unexpected} from unacknowledged writes, {} errors, {} reconnects",
        expected - lost,
        d.duplicated.load(Ordering::Relaxed),
        d.misrouted.load(Ordering::Relaxed),
        d.errors.load(Ordering::Relaxed),
        d.reconnects.load(Ordering::Relaxed),
    );
    if lost > 0 {
        eprintln!("LOST EVENTS: {lost} acknowledged status updates never reached their watch");
    }
    Ok(())
}

//! `kubestore bench scale`: what the store costs as it grows.
//!
//! For each kind (ConfigMaps, pods) it starts a fresh 3-node kubestore and
//! grows one namespace to each `--objects` count in turn, creating objects
//! of about `--size` bytes of JSON through the REST API with `--clients`
//! clients. At each count it measures, on the same cluster:
//!
//! - **memory**: each node's RSS, and per stored object the growth over
//!   the empty cluster's RSS, against the object's own JSON size;
//! - **disk**: each node's data directory, per object;
//! - **full LIST**: the whole collection as a quorum read and with
//!   `resourceVersion=0`, one client, the median and slowest of
//!   `--samples`;
//! - **paginated LIST**: the first page of 500 (median of `4 × --samples`)
//!   and a whole traversal page by page (time per page);
//! - **compaction**: all history up to the current revision, through one
//!   etcd API physical Compact (until its history is purged), and the
//!   slowest of one client's back-to-back puts meanwhile (a write would
//!   wait for a compaction done inside the apply);
//! - **cold start**: a follower killed (SIGKILL) and started again on its
//!   data: to `/readyz`, and to its watch cache serving every object;
//! - **snapshot catch-up**: the same follower stopped while the cluster
//!   takes `--catch-up-writes` updates, enough for the leader to purge
//!   the log the follower misses, then started: to serving the last
//!   update, and the size and install time of the snapshot it received
//!   (from its log).
//!
//! Results go to `scale-results.json` and three SVG plots, the nodes'
//! logs to `logs/<kind>/` (bytes per
//! object, LIST latency, recovery times, each against the object count on
//! log axes). A kind that an error stops keeps the counts measured before
//! it, with the error beside them, and the command then exits non-zero. Polling the restarted process every 10 ms is the
//! measurement itself (there is no event to await in another process), so
//! the recovery figures carry up to 10 ms of polling granularity.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use kubestore_proto::etcd::etcdserverpb::kv_client::KvClient;
use kubestore_proto::etcd::etcdserverpb::{CompactionRequest, PutRequest, RangeRequest};
use plotters::prelude::*;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::process::Child;

use super::compare::{fresh_data_dir, kubestore_specs, wait_ready, NodeSpec};
use super::cpu::rss_bytes;
use super::record::{progress, WORKLOAD_BAR};
use super::restart::{dir_bytes, is_ready, leader_of};

/// The namespace the objects are created in.
const NAMESPACE: &str = "scale";
/// The page size of the paginated LIST.
const PAGE: u64 = 500;
/// The longest a restarted node may take to serve again.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(300);
/// Polling interval of the recovery measurements.
const POLL: Duration = Duration::from_millis(10);
/// The key the writer probing the compaction writes to.
const COMPACTION_PROBE_KEY: &[u8] = b"/kubestore-bench/compaction-probe";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Configmaps,
    Pods,
}

impl Kind {
    fn plural(self) -> &'static str {
        match self {
            Kind::Configmaps => "configmaps",
            Kind::Pods => "pods",
        }
    }

    /// The name of object `i`: `configmap-0000042`, `pod-0000042`.
    fn name(self, i: u64) -> String {
        let singular = self.plural().trim_end_matches('s');
        format!("{singular}-{i:07}")
    }

    /// Object `i`, with about `size` bytes of JSON once stored.
    fn object(self, i: u64, size: usize) -> Value {
        let name = self.name(i);
        match self {
            // Stored with kind, apiVersion and metadata (uid, timestamps,
            // resourceVersion, managed fields): about 400 bytes over the
            // payload.
            Kind::Configmaps => json!({
                "metadata": { "name": name },
                "data": { "value": "x".repeat(size.saturating_sub(400)) },
            }),
            // Stored with the defaults admission adds (restart policy, DNS
            // policy, pull policy, tolerations, status...): about 1,240
            // bytes over the pad, so a pod is never smaller than that.
            Kind::Pods => json!({
                "metadata": { "name": name, "labels": { "app": "scale" } },
                "spec": { "containers": [{
                    "name": "app",
                    "image": "registry.local/app:1.0",
                    "env": [{ "name": "PAD", "value": "x".repeat(size.saturating_sub(1240)) }],
                }] },
            }),
        }
    }
}

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Object counts to measure at, ascending: the cluster grows to each.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub objects: Vec<u64>,
    /// Kinds to grow, one fresh cluster each.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "configmaps,pods"
    )]
    pub kinds: Vec<Kind>,
    /// Bytes of JSON per stored object, about.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Concurrent creating clients.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Timed repetitions of each full LIST (first pages: four times as many).
    #[arg(long, default_value_t = 5)]
    pub samples: usize,
    /// Most updates made while a follower is down: the cluster writes in
    /// rounds until the leader has purged its log past the follower (so
    /// only a snapshot can catch it up) or this many are made.
    #[arg(long, default_value_t = 400_000)]
    pub catch_up_writes: u64,
    /// The nodes' `--snapshot-after-entries`.
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_after_entries: u64,
    /// The nodes' `--snapshot-catch-up-entries`.
    #[arg(long, default_value_t = kubestore_server::config::DEFAULT_SNAPSHOT_CATCH_UP_ENTRIES)]
    pub snapshot_catch_up_entries: u64,
    /// Where scale-results.json, the plots, logs and (while running) data go.
    #[arg(long, default_value = "bench-scale")]
    pub out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// Median and slowest of some timings, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
struct Timing {
    median_ms: f64,
    max_ms: f64,
}

impl Timing {
    fn of(mut ms: Vec<f64>) -> Self {
        ms.sort_by(f64::total_cmp);
        Self {
            median_ms: ms.get(ms.len() / 2).copied().unwrap_or(0.0),
            max_ms: ms.last().copied().unwrap_or(0.0),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
struct Recovery {
    node: u64,
    /// Spawn to `/readyz` 200.
    ready_seconds: f64,
    /// Spawn to the node's own cache (`resourceVersion=0`) serving every
    /// object, or the last update (catch-up).
    serving_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
struct CatchUp {
    #[serde(flatten)]
    recovery: Recovery,
    /// Updates made while it was down.
    writes: u64,
    /// Whether the leader had purged its log past the follower by then.
    log_purged_past_follower: bool,
    /// Whether the follower caught up through a snapshot (its log says
    /// `snapshot installed`), and that snapshot's size and install time.
    snapshot_installed: bool,
    snapshot_bytes: Option<u64>,
    snapshot_install_ms: Option<u64>,
}

/// Everything measured at one object count.
#[derive(Debug, Clone, Serialize)]
struct Point {
    objects: u64,
    create_per_second: f64,
    /// The full list's bytes over its items: one object's JSON.
    json_bytes_per_object: f64,
    rss_bytes: Vec<u64>,
    /// Mean RSS growth over the empty cluster, per object.
    memory_bytes_per_object: f64,
    /// `memory_bytes_per_object / json_bytes_per_object`.
    memory_to_json: f64,
    disk_bytes: Vec<u64>,
    disk_bytes_per_object: f64,
    list_quorum: Timing,
    list_any: Timing,
    first_page_quorum: Timing,
    first_page_any: Timing,
    /// A whole `limit=500` traversal: its pages and mean time per page.
    paginated_pages: u64,
    paginated_ms_per_page: f64,
    compacted_revisions: u64,
    /// From the Compact request to its history purged on the node asked.
    compaction_seconds: f64,
    /// The slowest of one client's back-to-back puts during the
    /// compaction: how long a write waited for it.
    compaction_slowest_write_ms: f64,
    cold_start: Recovery,
    catch_up: CatchUp,
}

/// One kind's cluster and how to reach it.
struct Grown {
    kind: Kind,
    size: usize,
    specs: Vec<NodeSpec>,
    children: Vec<Child>,
    http: reqwest::Client,
    /// Objects created so far (named 0..created).
    created: u64,
    /// Updates made so far (for distinct annotation values).
    updated: u64,
    compacted: i64,
    baseline_rss: f64,
}

impl Grown {
    fn collection(&self, at: usize) -> String {
        format!(
            "http://{}/api/v1/namespaces/{NAMESPACE}/{}",
            self.specs[at].rest,
            self.kind.plural()
        )
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().filter_map(Child::id).collect()
    }

    fn rss(&self) -> Vec<u64> {
        self.pids().into_iter().filter_map(rss_bytes).collect()
    }

    /// Creates objects `created..to` with `clients` clients over every node.
    async fn grow(&mut self, to: u64, clients: usize, hidden: bool) -> anyhow::Result<f64> {
        let from = self.created;
        let next = Arc::new(AtomicU64::new(from));
        let bar = progress(to - from, "creating", WORKLOAD_BAR, hidden);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..clients.max(1) {
            let (next, bar, http) = (next.clone(), bar.clone(), self.http.clone());
            let (url, kind, size) = (self.collection(c % self.specs.len()), self.kind, self.size);
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= to {
                        return anyhow::Ok(());
                    }
                    let r = http.post(&url).json(&kind.object(i, size)).send().await?;
                    // 409: a retried create whose first attempt landed.
                    if !(r.status().is_success() || r.status().as_u16() == 409) {
                        bail!("creating object {i}: {}", r.status());
                    }
                    bar.inc(1);
                }
            }));
        }
        for t in tasks {
            t.await??;
        }
        bar.finish_and_clear();
        self.created = to;
        Ok((to - from) as f64 / started.elapsed().as_secs_f64())
    }

    /// Merge-patches `writes` objects (round robin) through the nodes other
    /// than `skip`, `clients` at a time; returns the newest revision.
    async fn update(&mut self, writes: u64, skip: usize, clients: usize) -> anyhow::Result<u64> {
        let urls: Vec<String> = (0..self.specs.len())
            .filter(|i| *i != skip)
            .map(|i| self.collection(i))
            .collect();
        let (created, base) = (self.created.max(1), self.updated);
        let next = Arc::new(AtomicU64::new(0));
        let last = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for c in 0..clients.max(1) {
            let (next, last, http) = (next.clone(), last.clone(), self.http.clone());
            let (url, kind) = (urls[c % urls.len()].clone(), self.kind);
            tasks.push(tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= writes {
                        return anyhow::Ok(());
                    }
                    let i = (base + n) % created;
                    let name = kind.name(i);
                    let r = http
                        .patch(format!("{url}/{name}"))
                        .header("content-type", "application/merge-patch+json")
                        .body(json!({"metadata": {"annotations": {"scale/n": (base + n).to_string()}}}).to_string())
                        .send()
                        .await?;
                    if !r.status().is_success() {
                        bail!("updating {name}: {}", r.status());
                    }
                    let obj: Value = r.json().await?;
                    let rv = obj["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    last.fetch_max(rv, Ordering::Relaxed);
                }
            }));
        }
        for t in tasks {
            t.await??;
        }
        self.updated += writes;
        Ok(last.load(Ordering::Relaxed))
    }

    /// One GET; its time and body.
    async fn timed_get(&self, url: &str) -> anyhow::Result<(f64, bytes::Bytes)> {
        let started = Instant::now();
        let r = self.http.get(url).send().await?;
        if !r.status().is_success() {
            bail!("GET {url}: {}", r.status());
        }
        let body = r.bytes().await?;
        Ok((started.elapsed().as_secs_f64() * 1e3, body))
    }

    /// `samples` GETs of `first` and of `second`, alternated so that the
    /// work the cluster still does after the growth (snapshots, RocksDB
    /// compactions) weighs on both alike: their timings, and the last
    /// body of `first`.
    async fn timing_pair(
        &self,
        first: &str,
        second: &str,
        samples: usize,
    ) -> anyhow::Result<(Timing, Timing, bytes::Bytes)> {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut last = bytes::Bytes::new();
        for _ in 0..samples.max(1) {
            let (t, body) = self.timed_get(first).await?;
            a.push(t);
            last = body;
            b.push(self.timed_get(second).await?.0);
        }
        Ok((Timing::of(a), Timing::of(b), last))
    }

    /// A whole `limit=500` traversal on node 0: pages and ms per page.
    async fn traverse(&self) -> anyhow::Result<(u64, f64)> {
        let base = self.collection(0);
        let started = Instant::now();
        let (mut pages, mut items, mut token) = (0u64, 0u64, None::<String>);
        loop {
            let url = match &token {
                Some(t) => format!("{base}?limit={PAGE}&continue={t}"),
                None => format!("{base}?limit={PAGE}"),
            };
            let (_, body) = self.timed_get(&url).await?;
            let page: Value = serde_json::from_slice(&body)?;
            pages += 1;
            items += page["items"].as_array().map_or(0, |a| a.len() as u64);
            match page["metadata"]["continue"].as_str() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        if items != self.created {
            bail!(
                "a paginated LIST returned {items} items, expected {}",
                self.created
            );
        }
        Ok((pages, started.elapsed().as_secs_f64() * 1e3 / pages as f64))
    }

    /// Compacts all history up to the current revision with one physical
    /// Compact request while one client writes a key in a loop (etcd puts,
    /// one at a time): the revisions compacted, the seconds until they were
    /// purged, and the slowest write meanwhile, in milliseconds (a write
    /// would wait for a compaction done inside the apply).
    async fn compact(&mut self) -> anyhow::Result<(u64, f64, f64)> {
        let channel =
            tonic::transport::Channel::from_shared(format!("http://{}", self.specs[0].grpc))?
                .connect()
                .await?;
        let mut kv = KvClient::new(channel.clone());
        let revision = kv
            .range(RangeRequest {
                key: b"scale".to_vec(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .header
            .map_or(0, |h| h.revision);
        let done = Arc::new(AtomicBool::new(false));
        let writer = tokio::spawn(write_until(KvClient::new(channel), done.clone()));
        let started = Instant::now();
        let compacted = kv
            .compact(CompactionRequest {
                revision,
                physical: true,
            })
            .await;
        let seconds = started.elapsed().as_secs_f64();
        done.store(true, Ordering::Release);
        let slowest_write = writer.await.context("the writer task failed")??;
        match compacted {
            Ok(_) => {}
            // The nodes' own compaction (five minutes of history kept) got
            // there first.
            Err(e) if e.message().contains("compacted") => {}
            Err(e) => return Err(e).with_context(|| format!("compacting to revision {revision}")),
        }
        let revisions = (revision - self.compacted).max(0) as u64;
        self.compacted = revision;
        Ok((revisions, seconds, slowest_write.as_secs_f64() * 1e3))
    }

    /// The follower to restart: the node after the leader.
    async fn follower(&self) -> anyhow::Result<usize> {
        let leader = leader_of(&self.http, &self.specs[0]).await?;
        let at = self
            .specs
            .iter()
            .position(|s| s.id == leader)
            .context("the leader is not a member")?;
        Ok((at + 1) % self.specs.len())
    }

    /// Starts node `at` again and times it to ready and to its cache
    /// serving at least `objects` objects at revision `revision` or later.
    async fn recover(
        &mut self,
        at: usize,
        objects: u64,
        revision: u64,
    ) -> anyhow::Result<Recovery> {
        let started = Instant::now();
        self.children[at] =
            self.specs[at].spawn_with_log("warn,kubestore_storage=info,kubestore_raft=info")?;
        let spec = &self.specs[at];
        let probe = format!("{}?resourceVersion=0&limit=1", self.collection(at));
        let mut ready = None;
        loop {
            if started.elapsed() > RECOVERY_DEADLINE {
                bail!("node {} was not back within {RECOVERY_DEADLINE:?}", spec.id);
            }
            if let Some(status) = self.children[at].try_wait()? {
                bail!(
                    "node {} exited ({status}) while recovering: see its log",
                    spec.id
                );
            }
            if ready.is_none() && is_ready(&self.http, spec).await {
                ready = Some(started.elapsed());
            }
            if ready.is_some() && serves(&self.http, &probe, objects, revision).await {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(Recovery {
            node: spec.id,
            ready_seconds: ready.unwrap_or_default().as_secs_f64(),
            serving_seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Kills a follower, starts it again: the cold start.
    async fn cold_start(&mut self) -> anyhow::Result<Recovery> {
        let at = self.follower().await?;
        self.children[at].kill().await?;
        let r = self.recover(at, self.created, 0).await?;
        self.wait_ready().await?;
        Ok(r)
    }

    /// A node's `/debug/cluster` figure `field`.
    async fn raft_index(&self, at: usize, field: &str) -> anyhow::Result<Option<u64>> {
        let status: Value = self
            .http
            .get(format!("http://{}/debug/cluster", self.specs[at].rest))
            .send()
            .await?
            .json()
            .await?;
        Ok(status[field].as_u64())
    }

    /// Stops a follower, updates objects in rounds until the leader has
    /// purged its log past it (at most `max_writes`), starts it again.
    async fn catch_up(&mut self, max_writes: u64, clients: usize) -> anyhow::Result<CatchUp> {
        let at = self.follower().await?;
        let leader = (at + self.specs.len() - 1) % self.specs.len();
        let stopped_at = self.raft_index(at, "applied_index").await?.unwrap_or(0);
        self.children[at].kill().await?;
        let log = self.specs[at]
            .log_dir
            .join(format!("kubestore-{}.log", self.specs[at].id));
        let log_from = std::fs::metadata(&log).map_or(0, |m| m.len());
        let (mut writes, mut revision, mut purged) = (0, 0, false);
        let round = (clients as u64 * 50).max(500);
        while !purged && writes < max_writes {
            let n = round.min(max_writes - writes);
            revision = self.update(n, at, clients).await?;
            writes += n;
            purged = self
                .raft_index(leader, "purged_index")
                .await?
                .is_some_and(|p| p > stopped_at);
        }
        let recovery = self.recover(at, self.created, revision).await?;
        self.wait_ready().await?;
        let installed = installed_snapshot(&log, log_from)?;
        Ok(CatchUp {
            recovery,
            writes,
            log_purged_past_follower: purged,
            snapshot_installed: installed.is_some(),
            snapshot_bytes: installed.map(|(b, _)| b),
            snapshot_install_ms: installed.map(|(_, ms)| ms),
        })
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let grpc: Vec<String> = self.specs.iter().map(|s| s.grpc.clone()).collect();
        wait_ready("kubestore", &grpc, &mut self.children).await
    }

    /// Everything at the current count.
    async fn measure(&mut self, args: &ScaleArgs, rate: f64) -> anyhow::Result<Point> {
        let (n, samples) = (self.created, args.samples);
        let rss = self.rss();
        let mean_rss = rss.iter().sum::<u64>() as f64 / rss.len().max(1) as f64;
        let disk: Vec<u64> = self.specs.iter().map(|s| dir_bytes(&s.data_dir)).collect();
        let base = self.collection(0);
        // Each pair begins with the quorum list: after the first, node
        // 0's cache holds every create, so the `resourceVersion=0` lists
        // are complete too.
        let (list_quorum, list_any, body) = self
            .timing_pair(&base, &format!("{base}?resourceVersion=0"), samples)
            .await?;
        let listed: Value = serde_json::from_slice(&body)?;
        let items = listed["items"].as_array().map_or(0, Vec::len) as u64;
        if items != n {
            bail!("a full LIST returned {items} items, expected {n}");
        }
        let (first_page_quorum, first_page_any, _) = self
            .timing_pair(
                &format!("{base}?limit={PAGE}"),
                &format!("{base}?limit={PAGE}&resourceVersion=0"),
                4 * samples,
            )
            .await?;
        let (pages, ms_per_page) = self.traverse().await?;
        let (compacted_revisions, compaction_seconds, compaction_slowest_write_ms) =
            self.compact().await?;
        let cold_start = self.cold_start().await?;
        let catch_up = self.catch_up(args.catch_up_writes, args.clients).await?;
        let json_bytes = body.len() as f64 / n.max(1) as f64;
        let memory = (mean_rss - self.baseline_rss).max(0.0) / n.max(1) as f64;
        Ok(Point {
            objects: n,
            create_per_second: rate,
            json_bytes_per_object: json_bytes,
            rss_bytes: rss,
            memory_bytes_per_object: memory,
            memory_to_json: memory / json_bytes.max(1.0),
            disk_bytes_per_object: disk.iter().sum::<u64>() as f64
                / disk.len().max(1) as f64
                / n.max(1) as f64,
            disk_bytes: disk,
            list_quorum,
            list_any,
            first_page_quorum,
            first_page_any,
            paginated_pages: pages,
            paginated_ms_per_page: ms_per_page,
            compacted_revisions,
            compaction_seconds,
            compaction_slowest_write_ms,
            cold_start,
            catch_up,
        })
    }
}

/// Whether the node's cache (`probe`: a `resourceVersion=0`, `limit=1`
/// list) holds at least `objects` objects at `revision` or later.
async fn serves(http: &reqwest::Client, probe: &str, objects: u64, revision: u64) -> bool {
    let Ok(r) = http.get(probe).send().await else {
        return false;
    };
    if !r.status().is_success() {
        return false;
    }
    let Ok(page) = r.json::<Value>().await else {
        return false;
    };
    let listed = page["items"].as_array().map_or(0, |a| a.len() as u64)
        + page["metadata"]["remainingItemCount"].as_u64().unwrap_or(0);
    let rv: u64 = page["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    listed >= objects && rv >= revision
}

/// The last `snapshot installed` line of `log` after byte `from`: its
/// `bytes` and `total_ms`.
fn installed_snapshot(log: &Path, from: u64) -> anyhow::Result<Option<(u64, u64)>> {
    let text = std::fs::read(log).with_context(|| format!("reading {}", log.display()))?;
    let tail = String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default());
    let plain = strip_ansi(&tail);
    Ok(plain
        .lines()
        .rfind(|l| l.contains("snapshot installed"))
        .and_then(|l| Some((field(l, "bytes")?, field(l, "total_ms")?))))
}

/// A `name=<u64>` field of a log line.
fn field(line: &str, name: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.trim_end_matches(',').parse().ok())
}

/// `text` without terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Grows one kind's cluster through every count.
/// Grows one kind through every count: the points measured, and the error
/// that stopped it early, if one did (the points before it still count).
async fn grow_kind(
    args: &ScaleArgs,
    kind: Kind,
    data: &Path,
) -> anyhow::Result<(Vec<Point>, Option<anyhow::Error>)> {
    let dir = data.join(kind.plural());
    let logs = args.out.join("logs").join(kind.plural());
    std::fs::create_dir_all(&dir)?;
    std::fs::create_dir_all(&logs)?;
    let mut specs = kubestore_specs(&dir, kubestore_server::config::DEFAULT_READ_LEASE_MS)?;
    for s in &mut specs {
        s.log_dir = logs.clone();
        s.snapshot_after_entries = Some(args.snapshot_after_entries);
        s.snapshot_catch_up_entries = Some(args.snapshot_catch_up_entries);
    }
    let children = specs
        .iter()
        .map(NodeSpec::spawn)
        .collect::<Result<Vec<_>, _>>()?;
    let mut grown = Grown {
        kind,
        size: args.size,
        specs,
        children,
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(args.clients)
            .tcp_nodelay(true)
            .build()?,
        created: 0,
        updated: 0,
        compacted: 0,
        baseline_rss: 0.0,
    };
    let mut points = Vec::new();
    let outcome = async {
        grown.wait_ready().await?;
        let r = grown
            .http
            .post(format!("http://{}/api/v1/namespaces", grown.specs[0].rest))
            .json(&json!({ "metadata": { "name": NAMESPACE } }))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("creating namespace {NAMESPACE}: {}", r.status());
        }
        let rss = grown.rss();
        grown.baseline_rss = rss.iter().sum::<u64>() as f64 / rss.len().max(1) as f64;
        for &n in &args.objects {
            if n <= grown.created {
                bail!("--objects must be ascending: {n} after {}", grown.created);
            }
            let rate = grown.grow(n, args.clients, args.no_progress).await?;
            let p = grown.measure(args, rate).await?;
            println!("{}", summary(kind, &p));
            points.push(p);
        }
        anyhow::Ok(())
    }
    .await;
    for c in &mut grown.children {
        let _ = c.kill().await;
    }
    // Measured: its data goes, so a run's disk peaks at one kind's (a
    // million objects are several GB per node).
    std::fs::remove_dir_all(&dir).ok();
    Ok((points, outcome.err()))
}

/// Puts one key back to back until `done` is set, finishing the put in
/// flight (the slowest one may be the last): the slowest put.
async fn write_until(
    mut kv: KvClient<tonic::transport::Channel>,
    done: Arc<AtomicBool>,
) -> anyhow::Result<Duration> {
    let mut slowest = Duration::ZERO;
    for i in 0u64.. {
        let started = Instant::now();
        kv.put(PutRequest {
            key: COMPACTION_PROBE_KEY.to_vec(),
            value: i.to_be_bytes().to_vec(),
            ..Default::default()
        })
        .await
        .context("a put during the compaction")?;
        slowest = slowest.max(started.elapsed());
        if done.load(Ordering::Acquire) {
            break;
        }
    }
    Ok(slowest)
}

/// One line per count for the terminal.
fn summary(kind: Kind, p: &Point) -> String {
    format!(
        "{:>10} {:>8}: create {:>6.0}/s | {:>6.0} B/object in memory ({:.1}x its {:.0} B of JSON), {:>6.0} B on disk | \
         LIST quorum {:.0} ms, rv=0 {:.0} ms | first page of {PAGE} quorum {:.1} ms, rv=0 {:.1} ms, {:.1} ms/page over {} pages | \
         compaction of {} revisions {:.2} s (slowest write meanwhile {:.1} ms) | cold start ready {:.2} s, serving {:.2} s | catch-up after {} writes {:.2} s{}",
        kind.plural(),
        p.objects,
        p.create_per_second,
        p.memory_bytes_per_object,
        p.memory_to_json,
        p.json_bytes_per_object,
        p.disk_bytes_per_object,
        p.list_quorum.median_ms,
        p.list_any.median_ms,
        p.first_page_quorum.median_ms,
        p.first_page_any.median_ms,
        p.paginated_ms_per_page,
        p.paginated_pages,
        p.compacted_revisions,
        p.compaction_seconds,
        p.compaction_slowest_write_ms,
        p.cold_start.ready_seconds,
        p.cold_start.serving_seconds,
        p.catch_up.writes,
        p.catch_up.recovery.serving_seconds,
        match p.catch_up.snapshot_bytes {
            Some(b) => format!(" (snapshot of {:.1} MB)", b as f64 / 1e6),
            None => " (from the log)".into(),
        },
    )
}

/// One line of a plot: a label and (object count, value) points.
type Series = (String, Vec<(f64, f64)>);

/// Values against object count, both axes logarithmic.
fn plot(path: &Path, title: &str, y_desc: &str, series: &[Series]) -> anyhow::Result<()> {
    let points = || series.iter().flat_map(|(_, p)| p.iter());
    let (x_min, x_max) =
        points().fold((f64::MAX, 1.0f64), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let (y_min, y_max) = points().fold((f64::MAX, 1e-3f64), |(lo, hi), p| {
        (lo.min(p.1), hi.max(p.1))
    });
    let x_min = if x_min == f64::MAX { 1.0 } else { x_min };
    let y_min = if y_min == f64::MAX {
        1e-3
    } else {
        y_min.max(1e-3)
    };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = super::plot::frame(&root, title.to_string()).build_cartesian_2d(
        (x_min * 0.8..x_max * 1.25).log_scale(),
        (y_min * 0.5..y_max * 2.0).log_scale(),
    )?;
    chart
        .configure_mesh()
        .x_labels(6)
        .y_labels(8)
        .x_label_formatter(&|x| count_label(*x))
        .y_label_formatter(&|y| format!("{y}"))
        .x_desc("objects (log)")
        .y_desc(y_desc)
        .draw()?;
    for (i, (label, pts)) in series.iter().enumerate() {
        let c = super::plot::color(i);
        let pts: Vec<(f64, f64)> = pts.iter().map(|&(x, y)| (x, y.max(1e-3))).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))?;
    }
    super::plot::legend(&mut chart)?;
    root.present()?;
    Ok(())
}

/// An object count as an axis label: `10k`, `1M`.
fn count_label(x: f64) -> String {
    match x {
        x if x >= 1e6 => format!("{}M", x / 1e6),
        x if x >= 1e3 => format!("{}k", x / 1e3),
        x => format!("{x}"),
    }
}

/// The three plots of a run.
fn plots(out: &Path, runs: &[(Kind, Vec<Point>)]) -> anyhow::Result<()> {
    let series = |name: &str, f: &dyn Fn(&Point) -> f64| -> Vec<Series> {
        runs.iter()
            .map(|(k, pts)| {
                (
                    format!("{} {name}", k.plural()),
                    pts.iter().map(|p| (p.objects as f64, f(p))).collect(),
                )
            })
            .collect()
    };
    let mut bytes = series("memory", &|p| p.memory_bytes_per_object);
    bytes.extend(series("disk", &|p| p.disk_bytes_per_object));
    bytes.extend(series("JSON", &|p| p.json_bytes_per_object));
    plot(
        &out.join("scale-bytes-per-object.svg"),
        "bytes per stored object",
        "bytes (log)",
        &bytes,
    )?;
    let mut lists = series("LIST quorum", &|p| p.list_quorum.median_ms);
    lists.extend(series("LIST rv=0", &|p| p.list_any.median_ms));
    lists.extend(series("first page of 500", &|p| {
        p.first_page_quorum.median_ms
    }));
    lists.extend(series("page of 500 (traversal)", &|p| {
        p.paginated_ms_per_page
    }));
    plot(
        &out.join("scale-list-latency.svg"),
        "LIST latency, one client",
        "ms (log)",
        &lists,
    )?;
    let mut recovery = series("cold start to serving", &|p| p.cold_start.serving_seconds);
    recovery.extend(series("snapshot catch-up", &|p| {
        p.catch_up.recovery.serving_seconds
    }));
    recovery.extend(series("compaction", &|p| p.compaction_seconds));
    plot(
        &out.join("scale-recovery.svg"),
        "recovery and compaction",
        "seconds (log)",
        &recovery,
    )?;
    Ok(())
}

pub async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    let data = fresh_data_dir(&args.out)?;
    let mut runs = Vec::new();
    let mut errors = Vec::new();
    for &kind in &args.kinds {
        let (points, error) = grow_kind(&args, kind, &data).await?;
        if let Some(e) = error {
            eprintln!("{}: stopped early: {e:#}", kind.plural());
            errors.push((kind, format!("{e:#}")));
        }
        runs.push((kind, points));
    }
    let results = json!({
        "size": args.size,
        "clients": args.clients,
        "page": PAGE,
        "catch_up_writes": args.catch_up_writes,
        "snapshot_after_entries": args.snapshot_after_entries,
        "snapshot_catch_up_entries": args.snapshot_catch_up_entries,
        "kinds": runs.iter().map(|(k, pts)| json!({
            "kind": k,
            "points": pts,
            "error": errors.iter().find(|(e, _)| e == k).map(|(_, e)| e),
        })).collect::<Vec<_>>(),
    });
    std::fs::write(
        args.out.join("scale-results.json"),
        serde_json::to_vec_pretty(&results)?,
    )?;
    if runs.iter().any(|(_, points)| !points.is_empty()) {
        plots(&args.out, &runs)?;
    }
    std::fs::remove_dir_all(&data).ok();
    println!("results and plots in {}", args.out.display());
    if let Some((kind, e)) = errors.first() {
        bail!(
            "{} stopped early ({e}); the counts measured before are in {}",
            kind.plural(),
            args.out.join("scale-results.json").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_install_line_is_found_through_colour_codes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("node.log");
        let old = "INFO snapshot installed bytes=1 staged_ms=1 total_ms=1\n";
        let new = "\u{1b}[32m INFO\u{1b}[0m \u{1b}[2mkubestore_storage\u{1b}[0m: snapshot installed \
                   \u{1b}[3mbytes\u{1b}[0m\u{1b}[2m=\u{1b}[0m123456 \u{1b}[3mstaged_ms\u{1b}[0m\u{1b}[2m=\u{1b}[0m7 \
                   \u{1b}[3mtotal_ms\u{1b}[0m\u{1b}[2m=\u{1b}[0m89\n";
        std::fs::write(&log, format!("{old}{new}")).expect("write");
        assert_eq!(
            installed_snapshot(&log, old.len() as u64).expect("read"),
            Some((123_456, 89))
        );
        assert_eq!(
            installed_snapshot(&log, (old.len() + new.len()) as u64).expect("read"),
            None
        );
    }

    #[test]
    fn a_plot_draws_every_series_on_log_axes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.svg");
        let series = vec![
            (
                "configmaps memory".to_string(),
                vec![(1e4, 15_516.0), (1e5, 10_195.0)],
            ),
            (
                "pods memory".to_string(),
                vec![(1e4, 22_923.0), (1e5, 16_611.0)],
            ),
        ];
        plot(&path, "bytes per stored object", "bytes (log)", &series).expect("plotted");
        let svg = std::fs::read_to_string(&path).expect("written");
        for text in ["configmaps memory", "pods memory", "10k", "100k"] {
            assert!(svg.contains(text), "{text}");
        }
    }

    #[test]
    fn objects_are_named_by_kind_and_number_and_carry_that_name() {
        assert_eq!(Kind::Configmaps.name(42), "configmap-0000042");
        assert_eq!(Kind::Pods.name(7), "pod-0000007");
        assert_eq!(
            Kind::Pods.object(7, 1024)["metadata"]["name"],
            "pod-0000007"
        );
    }

    #[test]
    fn counts_are_labelled_in_thousands_and_millions() {
        assert_eq!(
            [150.0, 10_000.0, 250_000.0, 1_000_000.0].map(count_label),
            ["150", "10k", "250k", "1M"]
        );
    }

    #[test]
    fn timings_report_the_median_and_the_slowest() {
        let t = Timing::of(vec![5.0, 1.0, 9.0, 3.0, 4.0]);
        assert_eq!((t.median_ms, t.max_ms), (4.0, 9.0));
    }
}

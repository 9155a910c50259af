//! The fault-schedule checker: a 3-node cluster of real `kubestore serve`
//! processes, concurrent clients on both APIs through every node, a
//! nemesis injecting one fault at a time on a seeded schedule, and checks
//! of the recorded history.
//!
//! A run:
//! 1. starts the cluster (`--fault-injection`, bookmarks and etcd progress
//!    notifications every second, frequent snapshots with little log kept
//!    behind them, so catch-up by snapshot happens);
//! 2. runs REST clients (create, update, strategic merge patch,
//!    server-side apply and delete guarded by `resourceVersion`, a JSON
//!    patch whose `test` guards on the value, a blind server-side apply as
//!    a put, dry-run writes that must leave no trace, quorum GET and
//!    LIST, LIST at an exact past revision), etcd clients (Put, Get
//!    linearizable, serializable and at an exact past revision, Txn
//!    compare-and-set) and one watcher
//!    per API that resumes across nodes, all recording into one history
//!    ([`workload`]), a lease client that keeps leases alive through
//!    every node ([`leases`]), and a poller of every node's `/readyz`
//!    ([`readiness`]);
//! 3. meanwhile the [`nemesis`] kills, pauses, isolates and slows nodes
//!    (an action that fails is recorded and the schedule goes on);
//! 4. heals everything, checks that every node runs and answers again (a
//!    node that does not is a failure of the run, with the reason),
//!    reads every key back from every node that answers, waits until the
//!    watchers have received everything up to the final revision;
//! 5. checks the history: per-key linearizability ([`linearizability`]),
//!    the revision contract ([`contract`]) and that no kept-alive lease
//!    lost its key early ([`leases`]); the nodes' final states must agree;
//!    readiness must agree with service ([`readiness`], reported apart);
//! 6. writes `report.json`, `history.json`, `timeline.svg` and the nodes'
//!    logs to the output directory ([`report`]), whatever happened after
//!    the cluster started.
//!
//! `kubestore-chaos` (this crate's binary) is the command line; the test
//! `tests/tests/chaos.rs` runs a short seeded schedule.

pub mod contract;
pub mod history;
pub mod leases;
pub mod linearizability;
pub mod nemesis;
pub mod readiness;
pub mod report;
pub mod synthetic;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use tokio::sync::watch;

use crate::{ClusterOptions, TestCluster};
use history::{History, Violation};
use nemesis::{FaultKind, Nemesis};
use report::ChaosReport;
use workload::{Endpoint, Recorder, RestKind, WatchProgress};

/// What a run does.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// Seeds the nemesis schedule and every client's choices.
    pub seed: u64,
    /// How long clients run under faults.
    pub duration: Duration,
    /// Clients per API (REST and etcd each get this many).
    pub clients_per_api: usize,
    /// Registers per API.
    pub keys: usize,
    /// The fault kinds the nemesis draws from (empty: no faults).
    pub faults: Vec<FaultKind>,
    /// Where the report, history, plot and logs go.
    pub out: PathBuf,
    /// A client gives up on an answer after this long (a write it gave up
    /// on has an unknown outcome).
    pub op_timeout: Duration,
    /// How long readiness may disagree with service before it is reported
    /// (see [`readiness`]).
    pub readiness_slack: Duration,
    /// Readiness disagreements fail the run. Off by default: readiness
    /// is a hint to load balancers decided from heartbeats and probes
    /// that lag by design, so a disagreement breaks no promise about data
    /// the way a violation does; it is reported on its own.
    pub strict_readiness: bool,
}

impl ChaosConfig {
    /// Every fault kind, 5 registers per API and 6 clients per API (two
    /// per node).
    pub fn new(seed: u64, duration: Duration, out: PathBuf) -> Self {
        Self {
            seed,
            duration,
            clients_per_api: 6,
            keys: 5,
            faults: FaultKind::ALL.to_vec(),
            out,
            op_timeout: Duration::from_secs(5),
            readiness_slack: readiness::DEFAULT_SLACK,
            strict_readiness: false,
        }
    }
}

/// Runs the whole schedule and its checks; the report says whether it
/// passed. `Err` only when the harness itself could not run: the cluster
/// did not start, or the output could not be written. Once the cluster
/// started, `report.json`, `history.json`, `timeline.svg` and the nodes'
/// logs are written whatever the run found.
pub async fn run(config: &ChaosConfig) -> anyhow::Result<ChaosReport> {
    std::fs::create_dir_all(&config.out)
        .with_context(|| format!("creating {}", config.out.display()))?;
    let options = ClusterOptions {
        fault_injection: true,
        watch_bookmark_interval_seconds: 1,
        etcd_progress_notify_seconds: 1,
        // Snapshots every 2,000 entries (a few seconds of this load) with
        // 1,000 entries kept behind each, where a default node keeps
        // 5,000: a follower back from most faults is caught up by a
        // snapshot install, so installs meet every other fault.
        snapshot_after_entries: 2_000,
        snapshot_catch_up_entries: 1_000,
        // 30 s of history, checked every 5 s: the leader compacts all
        // through the run, so compactions, and the background purges
        // that follow them on every node, meet every fault and every
        // snapshot install (and watches resume into compacted history).
        history_retention_seconds: 30,
        compaction_interval_seconds: 5,
        ..ClusterOptions::default()
    };
    let mut cluster = TestCluster::spawn(3, options).await?;
    let report = run_on(&mut cluster, config).await;
    if let Err(e) = cluster.save_logs(&config.out) {
        tracing::warn!(error = %e, "could not save the nodes' logs");
    }
    cluster.shutdown().await;
    report.write(&config.out)?;
    Ok(report)
}

async fn run_on(cluster: &mut TestCluster, config: &ChaosConfig) -> ChaosReport {
    let endpoints: Vec<Endpoint> = cluster
        .ids()
        .into_iter()
        .map(|id| Endpoint {
            id,
            rest_url: cluster.rest_url(id),
            etcd_url: cluster.etcd_endpoint(id),
        })
        .collect();
    let recorder = Arc::new(Recorder::new(Instant::now()));
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let (stop_clients, clients_stop) = watch::channel(false);
    let (stop_watchers, watchers_stop) = watch::channel(false);
    // Everything that made the run fail other than a violation.
    let mut failures: Vec<String> = Vec::new();

    let readiness_log = Arc::new(readiness::ReadinessLog::default());
    let pollers: Vec<_> = endpoints
        .iter()
        .map(|e| {
            tokio::spawn(readiness::poll(
                e.clone(),
                recorder.clone(),
                readiness_log.clone(),
                watchers_stop.clone(),
            ))
        })
        .collect();

    // The custom registers' type, defined before any client starts.
    if let Err(e) = define_registers(&endpoints).await {
        failures.push(format!("the registers' CustomResourceDefinition: {e:#}"));
    }
    let watch_progress = [
        Arc::new(WatchProgress::default()),
        Arc::new(WatchProgress::default()),
        Arc::new(WatchProgress::default()),
    ];
    let watchers = [
        tokio::spawn(workload::rest_watcher(
            0,
            RestKind::ConfigMap,
            config.seed,
            recorder.clone(),
            endpoints.clone(),
            watch_progress[0].clone(),
            watchers_stop.clone(),
        )),
        tokio::spawn(workload::etcd_watcher(
            1,
            config.seed,
            recorder.clone(),
            endpoints.clone(),
            watch_progress[1].clone(),
            watchers_stop.clone(),
        )),
        tokio::spawn(workload::rest_watcher(
            2,
            RestKind::Register,
            config.seed,
            recorder.clone(),
            endpoints.clone(),
            watch_progress[2].clone(),
            watchers_stop.clone(),
        )),
    ];

    let lease_history = Arc::new(leases::LeaseHistory::default());
    let mut clients = vec![tokio::spawn(leases::lease_client(
        recorder.clone(),
        endpoints.clone(),
        config.op_timeout,
        lease_history.clone(),
        clients_stop.clone(),
    ))];
    for i in 0..config.clients_per_api {
        let rest_id = u32::try_from(2 * i).unwrap_or(u32::MAX);
        clients.push(tokio::spawn(workload::rest_client(
            rest_id,
            config.seed,
            recorder.clone(),
            endpoints.clone(),
            config.keys,
            config.op_timeout,
            clients_stop.clone(),
        )));
        clients.push(tokio::spawn(workload::etcd_client(
            rest_id + 1,
            config.seed,
            recorder.clone(),
            endpoints.clone(),
            config.keys,
            config.op_timeout,
            clients_stop.clone(),
        )));
    }

    let (faults, nemesis_errors) = match Nemesis::new(cluster, config.seed, config.faults.clone()) {
        Ok(mut nemesis) => {
            let faults = nemesis.run(&recorder, config.duration).await;
            nemesis.heal_all(&recorder).await;
            (faults, nemesis.errors().to_vec())
        }
        Err(e) => {
            failures.push(format!("the nemesis could not start: {e:#}"));
            (Vec::new(), Vec::new())
        }
    };
    stop_clients.send_replace(true);
    for c in clients {
        if let Err(e) = c.await {
            failures.push(format!("a client task failed: {e}"));
        }
    }

    failures.extend(cluster_whole_again(cluster).await);
    let answering: Vec<Endpoint> = {
        let mut up = Vec::new();
        for e in &endpoints {
            if cluster.running(e.id) && cluster.status(e.id).await.is_some() {
                up.push(e.clone());
            }
        }
        up
    };
    let final_read = final_states(&answering, config.keys).await;
    let read_back = final_read.is_ok();
    let (final_state, final_revision, divergence) = final_read.unwrap_or_else(|e| {
        failures.push(format!("the final reads failed: {e:#}"));
        (FinalState::new(), 0, Vec::new())
    });
    for progress in &watch_progress {
        // A watcher that does not catch up is caught by the completeness check.
        progress
            .caught_up(final_revision, Duration::from_secs(30))
            .await;
    }
    stop_watchers.send_replace(true);
    for task in watchers.into_iter().chain(pollers) {
        if let Err(e) = task.await {
            failures.push(format!("a watcher or readiness poller failed: {e}"));
        }
    }
    let history = History {
        ops: recorder.take(),
        watches: watch_progress.iter().flat_map(|p| p.take()).collect(),
        final_state,
        readiness: readiness_log.take(),
    };
    let lease_logs = lease_history.take();
    let mut violations = Vec::new();
    if read_back {
        // Without a final state the checks would report every write as
        // lost; the failures already say why there is none.
        violations.extend(linearizability::check(&history));
        violations.extend(contract::check(&history));
    }
    violations.extend(leases::check(&lease_logs));
    violations.extend(divergence);
    let mut report = ChaosReport::new(config, history, faults, violations, recorder.now());
    report.started_unix_ms = started_unix_ms;
    report.leases = report::LeaseSummary::of(&lease_logs);
    report.nemesis_errors = nemesis_errors;
    report.failures = failures;
    report
}

/// After healing: every node must run and answer, one leader, the same
/// applied state. Returns what is wrong, naming each node that is not
/// back and why (a node that exited after its restart is a crash loop; its
/// log is in the output directory).
pub async fn cluster_whole_again(cluster: &mut TestCluster) -> Vec<String> {
    let mut failures = Vec::new();
    let settled = match cluster.wait_for_leader(Duration::from_secs(60)).await {
        Ok(_) => cluster
            .wait_converged(Duration::from_secs(60))
            .await
            .context("the nodes did not converge after healing"),
        Err(e) => Err(e).context("no leader after healing"),
    };
    for id in cluster.ids() {
        if let Some(status) = cluster.exit_status(id) {
            failures.push(format!(
                "node {id} is down at the end: it exited ({status}) after the faults were healed; see node-{id}.log"
            ));
        } else if !cluster.running(id) {
            failures.push(format!(
                "node {id} is down at the end: it could not be started again (see the nemesis errors and node-{id}.log)"
            ));
        } else if cluster.status(id).await.is_none() {
            failures.push(format!(
                "node {id} does not answer at the end (/debug/cluster); see node-{id}.log"
            ));
        }
    }
    if let Err(e) = settled {
        failures.push(format!("{e:#}"));
    }
    failures
}

/// Key → (value, mod revision) of every register, read linearizably.
type FinalState = BTreeMap<String, Option<(String, u64)>>;

/// Reads every register from every node (after healing): the first
/// node's answers are the final state; any node that disagrees is a
/// violation. Also returns the highest revision seen.
async fn final_states(
    endpoints: &[Endpoint],
    keys: usize,
) -> anyhow::Result<(FinalState, u64, Vec<Violation>)> {
    let mut states = Vec::new();
    let mut revision = 0;
    for e in endpoints {
        let (state, rev) = read_all(e, keys).await?;
        revision = revision.max(rev);
        states.push((e.id, state));
    }
    let mut violations = Vec::new();
    let (first_id, first) = states.first().cloned().context("no nodes")?;
    for (id, state) in &states[1..] {
        for (key, value) in state {
            if first.get(key) != Some(value) {
                violations.push(Violation {
                    check: "final-divergence".into(),
                    key: Some(key.clone()),
                    message: format!(
                        "node {id} ends with {value:?}, node {first_id} with {:?}",
                        first.get(key)
                    ),
                    ops: Vec::new(),
                });
            }
        }
    }
    Ok((first, revision, violations))
}

/// Creates the custom registers' CustomResourceDefinition through the
/// first node that takes it (the cluster is whole: no fault yet), within
/// 30 s; an existing one from an earlier run on the same cluster is
/// fine.
async fn define_registers(endpoints: &[Endpoint]) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        for e in endpoints {
            let url = format!(
                "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                e.rest_url
            );
            match http
                .post(url)
                .json(&workload::register_definition())
                .send()
                .await
            {
                Ok(r) if r.status().is_success() || r.status() == reqwest::StatusCode::CONFLICT => {
                    return Ok(());
                }
                Ok(r) => last = format!("node {} answered {}", e.id, r.status()),
                Err(err) => last = format!("node {}: {err}", e.id),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("not created within 30 s: {last}")
}

/// Every register of both APIs as one node answers a linearizable read.
async fn read_all(e: &Endpoint, keys: usize) -> anyhow::Result<(FinalState, u64)> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()?;
    let mut etcd = etcd_client::Client::connect([e.etcd_url.clone()], None).await?;
    let mut state = FinalState::new();
    let mut revision = 0u64;
    for i in 0..keys {
        let (key, name) = workload::rest_key(i);
        let url = RestKind::of(i).object(e, &name);
        let resp = http.get(url).send().await?;
        let value = match resp.status() {
            reqwest::StatusCode::NOT_FOUND => None,
            reqwest::StatusCode::OK => {
                let body: Value = resp.json().await?;
                let v = body
                    .pointer("/data/v")
                    .and_then(Value::as_str)
                    .context("a configmap without data.v")?
                    .to_string();
                let rv = body
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok())
                    .context("a configmap without resourceVersion")?;
                Some((v, rv))
            }
            s => anyhow::bail!("final read of {name} on node {}: {s}", e.id),
        };
        state.insert(key, value);

        let key = workload::etcd_key(i);
        let resp = etcd.get(key.clone(), None).await?;
        if let Some(h) = resp.header() {
            revision = revision.max(u64::try_from(h.revision()).unwrap_or(0));
        }
        let value = resp.kvs().first().map(|kv| {
            (
                String::from_utf8_lossy(kv.value()).into_owned(),
                u64::try_from(kv.mod_revision()).unwrap_or(0),
            )
        });
        state.insert(key, value);
    }
    Ok((state, revision))
}

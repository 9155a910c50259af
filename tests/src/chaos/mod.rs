//! The fault-schedule checker: a 3-node cluster of real `kubestore serve`
//! processes, concurrent clients on both APIs through every node, a
//! nemesis injecting one fault at a time on a seeded schedule, and checks
//! of the recorded history.
//!
//! A run:
//! 1. starts the cluster (`--fault-injection`, bookmarks and etcd progress
//!    notifications every second, small snapshots so catch-up by snapshot
//!    happens);
//! 2. runs REST clients (create, update and delete guarded by
//!    `resourceVersion`, quorum GET and LIST), etcd clients (Put, Get
//!    linearizable and serializable, Txn compare-and-set) and one watcher
//!    per API that resumes across nodes, all recording into one history
//!    ([`workload`]), and a lease client that keeps leases alive through
//!    every node ([`leases`]);
//! 3. meanwhile the [`nemesis`] kills, pauses, isolates and slows nodes;
//! 4. heals everything, reads every key back from every node, waits until
//!    the watchers have received everything up to the final revision;
//! 5. checks the history: per-key linearizability ([`linearizability`]),
//!    the revision contract ([`contract`]) and that no kept-alive lease
//!    lost its key early ([`leases`]); the nodes' final states must agree;
//! 6. writes `report.json`, `history.json`, `timeline.svg` and the nodes'
//!    logs to the output directory ([`report`]).
//!
//! `kubestore-chaos` (this crate's binary) is the command line; the test
//! `tests/tests/chaos.rs` runs a short seeded schedule.

pub mod contract;
pub mod history;
pub mod leases;
pub mod linearizability;
pub mod nemesis;
pub mod report;
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
use workload::{Endpoint, Recorder, WatchProgress};

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
        }
    }
}

/// Runs the whole schedule and its checks; the report says whether it
/// passed. `Err` only when the harness itself could not run.
pub async fn run(config: &ChaosConfig) -> anyhow::Result<ChaosReport> {
    std::fs::create_dir_all(&config.out)
        .with_context(|| format!("creating {}", config.out.display()))?;
    let options = ClusterOptions {
        fault_injection: true,
        watch_bookmark_interval_seconds: 1,
        etcd_progress_notify_seconds: 1,
        snapshot_after_entries: 2_000,
        ..ClusterOptions::default()
    };
    let mut cluster = TestCluster::spawn(3, options).await?;
    let outcome = run_on(&mut cluster, config).await;
    if let Err(e) = cluster.save_logs(&config.out) {
        tracing::warn!(error = %e, "could not save the nodes' logs");
    }
    cluster.shutdown().await;
    let report = outcome?;
    report.write(&config.out)?;
    Ok(report)
}

async fn run_on(cluster: &mut TestCluster, config: &ChaosConfig) -> anyhow::Result<ChaosReport> {
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
    let (stop_clients, clients_stop) = watch::channel(false);
    let (stop_watchers, watchers_stop) = watch::channel(false);

    let watch_progress = [
        Arc::new(WatchProgress::default()),
        Arc::new(WatchProgress::default()),
    ];
    let watchers = [
        tokio::spawn(workload::rest_watcher(
            0,
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

    let mut nemesis = Nemesis::new(cluster, config.seed, config.faults.clone())?;
    let faults = nemesis.run(&recorder, config.duration).await;
    let healed = nemesis.heal_all().await;
    stop_clients.send_replace(true);
    for c in clients {
        c.await.context("a client task panicked")?;
    }
    let faults = faults?;
    healed?;

    cluster
        .wait_for_leader(Duration::from_secs(60))
        .await
        .context("no leader after healing")?;
    cluster
        .wait_converged(Duration::from_secs(60))
        .await
        .context("the nodes did not converge after healing")?;
    let (final_state, final_revision, divergence) = final_states(&endpoints, config.keys).await?;
    for progress in &watch_progress {
        // A watcher that does not catch up is caught by the completeness check.
        progress
            .caught_up(final_revision, Duration::from_secs(30))
            .await;
    }
    stop_watchers.send_replace(true);
    for w in watchers {
        w.await.context("a watcher task panicked")?;
    }
    let history = History {
        ops: recorder.take(),
        watches: watch_progress.iter().flat_map(|p| p.take()).collect(),
        final_state,
    };
    let lease_logs = lease_history.take();
    let mut violations = linearizability::check(&history);
    violations.extend(contract::check(&history));
    violations.extend(leases::check(&lease_logs));
    violations.extend(divergence);
    let mut report = ChaosReport::new(config, history, faults, violations, recorder.now());
    report.leases = report::LeaseSummary::of(&lease_logs);
    Ok(report)
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
        let url = format!(
            "{}/api/v1/namespaces/{}/configmaps/{name}",
            e.rest_url,
            workload::NAMESPACE
        );
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

//! The nemesis: one fault at a time, on a seeded random schedule.
//!
//! Each round waits a healthy while (1.5–3 s), then picks a fault kind
//! among those enabled and a target (the leader half of the time, else
//! any node), injects it, holds it, and heals it:
//! - `kill`: SIGKILL, down 1–3 s, restarted with the same command line;
//! - `pause`: SIGSTOP for 1.5–4 s (longer than the election timeout), SIGCONT;
//! - `isolate`: the node's peer transport drops every Raft and forwarding
//!   RPC in and out for 2–6 s, while clients still reach it (with the
//!   leader as target, the leader is cut off from the majority);
//! - `slow-disk`: every log fsync of the node takes 20–150 ms longer for 3–6 s.
//!
//! The same seed gives the same schedule of kinds, targets and durations
//! (which node leads at a given moment depends on the run).
//!
//! A fault action that fails (a node that cannot be reached to isolate it,
//! a restart that cannot spawn) does not stop the run: it is recorded as a
//! [`NemesisError`] and the schedule goes on; so is a node found to have
//! exited on its own (a crash), which is restarted. Whether the cluster is
//! whole again at the end is the runner's check, not the nemesis's.

use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::workload::Recorder;
use crate::TestCluster;

/// A kind of fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    Kill,
    Pause,
    Isolate,
    SlowDisk,
}

impl FaultKind {
    pub const ALL: [FaultKind; 4] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::Isolate,
        FaultKind::SlowDisk,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Isolate => "isolate",
            FaultKind::SlowDisk => "slow-disk",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One fault as it happened.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub node: u64,
    /// The target led the cluster when the fault began.
    pub was_leader: bool,
    /// Since the start of the run.
    pub started: Duration,
    pub healed: Duration,
}

/// What the nemesis tried and could not do, or found broken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NemesisError {
    /// Since the start of the run.
    pub at: Duration,
    pub node: u64,
    /// `inject kill`, `heal isolate`, `heal-all`, `crashed`, ...
    pub action: String,
    pub message: String,
}

/// Injects faults into `cluster` until `duration` has passed since the run
/// began, then heals everything.
pub struct Nemesis<'c> {
    cluster: &'c mut TestCluster,
    http: reqwest::Client,
    rng: StdRng,
    kinds: Vec<FaultKind>,
    /// Every action that failed, in order.
    errors: Vec<NemesisError>,
}

impl<'c> Nemesis<'c> {
    pub fn new(
        cluster: &'c mut TestCluster,
        seed: u64,
        kinds: Vec<FaultKind>,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        Ok(Self {
            cluster,
            http,
            rng: StdRng::seed_from_u64(seed),
            kinds,
            errors: Vec::new(),
        })
    }

    /// Runs the schedule until `until` (run time) and returns the faults
    /// it injected. A failed action is recorded (see [`Nemesis::errors`])
    /// and the schedule goes on.
    pub async fn run(&mut self, recorder: &Recorder, until: Duration) -> Vec<FaultRecord> {
        let mut faults = Vec::new();
        if self.kinds.is_empty() {
            tokio::time::sleep(until.saturating_sub(recorder.now())).await;
            return faults;
        }
        loop {
            let healthy = Duration::from_millis(self.rng.random_range(1_500..3_000));
            tokio::time::sleep(healthy).await;
            self.restart_crashed(recorder).await;
            if recorder.now() >= until {
                break;
            }
            let kind = self.kinds[self.rng.random_range(0..self.kinds.len())];
            let target_leader = self.rng.random_bool(0.5);
            let any_node = self.rng.random_range(1..=3u64);
            let leader = self.find_leader().await;
            let node = match leader {
                Some(l) if target_leader => l,
                _ => any_node,
            };
            let hold = self.hold_for(kind);
            let was_leader = leader == Some(node);
            faults.extend(self.fault(recorder, kind, node, was_leader, hold).await);
        }
        faults
    }

    /// One fault: injects `kind` into `node`, holds it for `hold`, heals
    /// it. A failed injection or heal is recorded (see
    /// [`Nemesis::errors`]); the fault is returned only if it was injected.
    pub async fn fault(
        &mut self,
        recorder: &Recorder,
        kind: FaultKind,
        node: u64,
        was_leader: bool,
        hold: Duration,
    ) -> Option<FaultRecord> {
        let started = recorder.now();
        tracing::info!(kind = kind.name(), node, ?hold, "nemesis: fault");
        let injected = self.inject(kind, node).await;
        if let Err(e) = &injected {
            self.record_error(recorder, node, format!("inject {}", kind.name()), e);
        }
        tokio::time::sleep(hold).await;
        // Healed even when the injection failed: it may have half happened
        // (a restart that failed after the kill).
        if let Err(e) = self.heal(kind, node).await {
            self.record_error(recorder, node, format!("heal {}", kind.name()), &e);
        }
        tracing::info!(kind = kind.name(), node, "nemesis: healed");
        injected.is_ok().then(|| FaultRecord {
            kind,
            node,
            was_leader,
            started,
            healed: recorder.now(),
        })
    }

    /// The actions that failed so far.
    pub fn errors(&self) -> &[NemesisError] {
        &self.errors
    }

    fn record_error(&mut self, recorder: &Recorder, node: u64, action: String, e: &anyhow::Error) {
        let message = format!("{e:#}");
        tracing::warn!(node, %action, %message, "nemesis: action failed");
        self.errors.push(NemesisError {
            at: recorder.now(),
            node,
            action,
            message,
        });
    }

    /// Restarts every node whose process exited on its own (a crash: the
    /// nemesis restarts what it kills itself), and records it.
    async fn restart_crashed(&mut self, recorder: &Recorder) {
        for id in self.cluster.ids() {
            let Some(status) = self.cluster.exit_status(id) else {
                continue;
            };
            let crashed = anyhow::anyhow!("node {id} exited on its own ({status}); restarting it");
            self.record_error(recorder, id, "crashed".into(), &crashed);
            if let Err(e) = self.cluster.restart(id).await {
                self.record_error(recorder, id, "restart after crash".into(), &e);
            }
        }
    }

    fn hold_for(&mut self, kind: FaultKind) -> Duration {
        let ms = match kind {
            FaultKind::Kill => self.rng.random_range(1_000..3_000),
            FaultKind::Pause => self.rng.random_range(1_500..4_000),
            FaultKind::Isolate => self.rng.random_range(2_000..6_000),
            FaultKind::SlowDisk => self.rng.random_range(3_000..6_000),
        };
        Duration::from_millis(ms)
    }

    async fn inject(&mut self, kind: FaultKind, node: u64) -> anyhow::Result<()> {
        match kind {
            FaultKind::Kill => self.cluster.kill(node).await,
            FaultKind::Pause => self.cluster.signal(node, Signal::SIGSTOP),
            FaultKind::Isolate => self.set_faults(node, json!({"isolated": true})).await,
            FaultKind::SlowDisk => {
                let ms: u64 = self.rng.random_range(20..150);
                self.set_faults(node, json!({"fsync_delay_ms": ms})).await
            }
        }
    }

    async fn heal(&mut self, kind: FaultKind, node: u64) -> anyhow::Result<()> {
        match kind {
            FaultKind::Kill => self.cluster.restart(node).await,
            FaultKind::Pause => self.cluster.signal(node, Signal::SIGCONT),
            FaultKind::Isolate => self.set_faults(node, json!({"isolated": false})).await,
            FaultKind::SlowDisk => self.set_faults(node, json!({"fsync_delay_ms": 0})).await,
        }
    }

    /// `POST /debug/faults` on `node`, retried briefly (the node may be busy).
    async fn set_faults(&self, node: u64, settings: Value) -> anyhow::Result<()> {
        let mut last = None;
        for _ in 0..20 {
            match self.cluster.inject_faults(node, &settings).await {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(anyhow::anyhow!("{last:?}"))
            .with_context(|| format!("setting {settings} on node {node}"))
    }

    /// The node a majority of the reachable nodes name as leader, if any.
    async fn find_leader(&self) -> Option<u64> {
        let mut votes = std::collections::HashMap::new();
        for id in self.cluster.ids() {
            if !self.cluster.running(id) {
                continue;
            }
            let url = format!("{}/debug/cluster", self.cluster.rest_url(id));
            let Ok(resp) = self.http.get(url).send().await else {
                continue;
            };
            let Ok(status) = resp.json::<Value>().await else {
                continue;
            };
            if let Some(l) = status["leader_id"].as_u64() {
                *votes.entry(l).or_insert(0) += 1;
            }
        }
        votes.into_iter().max_by_key(|(_, n)| *n).map(|(l, _)| l)
    }

    /// Heals whatever a failed round may have left behind: every node
    /// runs (one that exited is started again), none is paused, isolated
    /// or slowed. What cannot be healed is recorded, not returned: the
    /// runner finds out whether the nodes answer.
    pub async fn heal_all(&mut self, recorder: &Recorder) {
        for id in self.cluster.ids() {
            if let Some(status) = self.cluster.exit_status(id) {
                let crashed = anyhow::anyhow!("node {id} exited on its own ({status})");
                self.record_error(recorder, id, "crashed".into(), &crashed);
            }
            let healed = if self.cluster.running(id) {
                self.cluster.signal(id, Signal::SIGCONT)
            } else {
                self.cluster.restart(id).await
            };
            if let Err(e) = healed {
                self.record_error(recorder, id, "heal-all".into(), &e);
            }
        }
        for id in self.cluster.ids() {
            let cleared = self
                .set_faults(
                    id,
                    json!({"isolated": false, "fsync_delay_ms": 0, "apply_delay_ms": 0}),
                )
                .await;
            if let Err(e) = cleared {
                self.record_error(recorder, id, "heal-all".into(), &e);
            }
        }
    }
}

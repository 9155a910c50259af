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

/// Injects faults into `cluster` until `duration` has passed since the run
/// began, then heals everything.
pub struct Nemesis<'c> {
    cluster: &'c mut TestCluster,
    http: reqwest::Client,
    rng: StdRng,
    kinds: Vec<FaultKind>,
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
        })
    }

    /// Runs the schedule until `until` (run time) and returns what it did.
    pub async fn run(
        &mut self,
        recorder: &Recorder,
        until: Duration,
    ) -> anyhow::Result<Vec<FaultRecord>> {
        let mut faults = Vec::new();
        if self.kinds.is_empty() {
            tokio::time::sleep(until.saturating_sub(recorder.now())).await;
            return Ok(faults);
        }
        loop {
            let healthy = Duration::from_millis(self.rng.random_range(1_500..3_000));
            tokio::time::sleep(healthy).await;
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
            let started = recorder.now();
            tracing::info!(kind = kind.name(), node, ?hold, "nemesis: fault");
            self.inject(kind, node).await?;
            tokio::time::sleep(hold).await;
            self.heal(kind, node).await?;
            let healed = recorder.now();
            tracing::info!(kind = kind.name(), node, "nemesis: healed");
            faults.push(FaultRecord {
                kind,
                node,
                was_leader: leader == Some(node),
                started,
                healed,
            });
        }
        Ok(faults)
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
        let url = format!("{}/debug/faults", self.cluster.rest_url(node));
        let mut last = None;
        for _ in 0..20 {
            match self.http.post(&url).json(&settings).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = Some(format!("status {}", r.status())),
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
    /// runs, none is paused, isolated or slowed.
    pub async fn heal_all(&mut self) -> anyhow::Result<()> {
        for id in self.cluster.ids() {
            if self.cluster.running(id) {
                self.cluster.signal(id, Signal::SIGCONT)?;
            } else {
                self.cluster.restart(id).await?;
            }
        }
        for id in self.cluster.ids() {
            self.set_faults(
                id,
                json!({"isolated": false, "fsync_delay_ms": 0, "apply_delay_ms": 0}),
            )
            .await?;
        }
        Ok(())
    }
}

//! Where a workload's writes spent their time on each kubestore node:
//! `kubestore_stage_seconds_total` and `kubestore_stage_total` from every
//! node's `/metrics`, read before and after the workload, give each
//! stage's runs and mean time over that workload alone, for the leader and
//! for the followers (`kubestore_storage::timings` says what each stage
//! covers).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context;
use serde_json::json;

/// Each node's stage totals at one moment: `stage -> (seconds, runs)`,
/// and whether the node was the leader.
#[derive(Debug, Clone)]
pub(super) struct StageSample {
    nodes: Vec<NodeStages>,
}

#[derive(Debug, Clone, Default)]
struct NodeStages {
    leader: bool,
    stages: BTreeMap<String, (f64, u64)>,
}

/// The stage totals in one `/metrics` page.
fn parse(text: &str) -> NodeStages {
    let mut node = NodeStages::default();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if series == "kubestore_raft_is_leader" {
            node.leader = value == "1";
        }
        let stage_of = |prefix: &str| {
            series
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix("{stage=\""))
                .and_then(|rest| rest.strip_suffix("\"}"))
                .map(str::to_string)
        };
        if let Some(stage) = stage_of("kubestore_stage_seconds_total") {
            node.stages.entry(stage).or_default().0 = value.parse().unwrap_or(0.0);
        } else if let Some(stage) = stage_of("kubestore_stage_total") {
            node.stages.entry(stage).or_default().1 = value.parse().unwrap_or(0);
        }
    }
    node
}

impl StageSample {
    /// Reads every node's `/metrics` (`rest`: the nodes' REST base URLs).
    pub(super) async fn take(rest: &[String]) -> anyhow::Result<Self> {
        let http = reqwest::Client::new();
        let mut nodes = Vec::with_capacity(rest.len());
        for base in rest {
            let text = http
                .get(format!("{base}/metrics"))
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .with_context(|| format!("GET {base}/metrics"))?
                .text()
                .await?;
            nodes.push(parse(&text));
        }
        Ok(Self { nodes })
    }

    /// What each stage did between `self` and `after`, per role: for the
    /// leader and for the followers together, each stage's runs per write
    /// and mean microseconds per run, over `writes` acknowledged writes.
    pub(super) fn until(&self, after: &StageSample, writes: u64) -> StageBreakdown {
        let mut roles: BTreeMap<&str, BTreeMap<String, (f64, u64)>> = BTreeMap::new();
        for (before, after) in self.nodes.iter().zip(&after.nodes) {
            let role = if after.leader { "leader" } else { "followers" };
            let totals = roles.entry(role).or_default();
            for (stage, (seconds, runs)) in &after.stages {
                let (s0, r0) = before.stages.get(stage).copied().unwrap_or_default();
                let t = totals.entry(stage.clone()).or_default();
                t.0 += seconds - s0;
                t.1 += runs.saturating_sub(r0);
            }
        }
        StageBreakdown { roles, writes }
    }
}

/// Stage totals over one workload, per role.
#[derive(Debug, Clone)]
pub(super) struct StageBreakdown {
    roles: BTreeMap<&'static str, BTreeMap<String, (f64, u64)>>,
    writes: u64,
}

impl StageBreakdown {
    /// `{role: {stage: {runs_per_write, mean_us}}}`, stages that ran only.
    pub(super) fn json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for (role, stages) in &self.roles {
            let mut per_stage = serde_json::Map::new();
            for (stage, (seconds, runs)) in stages {
                if *runs == 0 {
                    continue;
                }
                per_stage.insert(
                    stage.clone(),
                    json!({
                        "runs_per_write": *runs as f64 / self.writes.max(1) as f64,
                        "mean_us": seconds * 1e6 / *runs as f64,
                    }),
                );
            }
            out.insert((*role).to_string(), per_stage.into());
        }
        out.into()
    }

    /// A table: one row per stage that ran, the leader's and the
    /// followers' runs per write and mean time.
    pub(super) fn table(&self, title: &str) -> String {
        let mut out = format!(
            "{title}\n  {:<24} {:>16} {:>12} {:>16} {:>12}\n",
            "stage", "leader runs/wr", "leader µs", "follower runs/wr", "follower µs"
        );
        let mut stages: Vec<&String> = self.roles.values().flat_map(|s| s.keys()).collect();
        stages.sort_by(|a, b| (stage_order(a), a).cmp(&(stage_order(b), b)));
        stages.dedup();
        let cell = |role: &str, stage: &str| match self.roles.get(role).and_then(|s| s.get(stage)) {
            Some((seconds, runs)) if *runs > 0 => (
                format!("{:.3}", *runs as f64 / self.writes.max(1) as f64),
                format!("{:.1}", seconds * 1e6 / *runs as f64),
            ),
            _ => ("-".into(), "-".into()),
        };
        for stage in stages {
            let (lr, lt) = cell("leader", stage);
            let (fr, ft) = cell("followers", stage);
            if lr == "-" && fr == "-" {
                continue;
            }
            let _ = writeln!(out, "  {stage:<24} {lr:>16} {lt:>12} {fr:>16} {ft:>12}");
        }
        out
    }
}

/// The write path's order, for the table.
fn stage_order(stage: &str) -> usize {
    kubestore_storage::Stage::ALL
        .iter()
        .position(|s| s.name() == stage)
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(leader: bool, fsync: (f64, u64), apply: (f64, u64)) -> String {
        format!(
            "# TYPE kubestore_raft_is_leader gauge\nkubestore_raft_is_leader {}\n\
             kubestore_stage_seconds_total{{stage=\"log_fsync\"}} {}\n\
             kubestore_stage_seconds_total{{stage=\"apply\"}} {}\n\
             kubestore_stage_total{{stage=\"log_fsync\"}} {}\n\
             kubestore_stage_total{{stage=\"apply\"}} {}\n",
            u8::from(leader),
            fsync.0,
            apply.0,
            fsync.1,
            apply.1
        )
    }

    #[test]
    fn a_breakdown_is_per_role_over_the_workload_alone() {
        let before = StageSample {
            nodes: vec![
                parse(&page(true, (1.0, 100), (0.5, 100))),
                parse(&page(false, (1.0, 100), (0.5, 100))),
                parse(&page(false, (2.0, 200), (1.0, 200))),
            ],
        };
        let after = StageSample {
            nodes: vec![
                parse(&page(true, (1.2, 200), (0.6, 150))),
                parse(&page(false, (1.3, 200), (0.6, 150))),
                parse(&page(false, (2.1, 300), (1.1, 250))),
            ],
        };
        let b = before.until(&after, 1000).json();
        let close =
            |v: &serde_json::Value, want: f64| v.as_f64().is_some_and(|x| (x - want).abs() < 1e-6);
        // The leader: 100 fsyncs of 2 ms for 1,000 writes.
        assert!(
            close(&b["leader"]["log_fsync"]["runs_per_write"], 0.1),
            "{b}"
        );
        assert!(close(&b["leader"]["log_fsync"]["mean_us"], 2000.0), "{b}");
        // The followers together: 200 fsyncs in 0.4 s.
        assert!(
            close(&b["followers"]["log_fsync"]["runs_per_write"], 0.2),
            "{b}"
        );
        assert!(
            close(&b["followers"]["log_fsync"]["mean_us"], 2000.0),
            "{b}"
        );
        assert!(close(&b["followers"]["apply"]["mean_us"], 2000.0), "{b}");
    }
}

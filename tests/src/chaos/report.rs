//! What a run found, as `report.json`, `history.json` and `timeline.svg`.
//!
//! Besides the violations (each with the operations it names), the report
//! counts operations by API, kind (`read`, `serializable-read`,
//! `exact-read`, `put`, `create`, `cas`, `delete`) and outcome, and
//! measures availability:
//! after each fault, how long every node took to complete both a write and
//! a linearizable read invoked after the fault began (for the faulted node
//! of a kill or pause: after it was healed). It has its own sections for
//! readiness (every node's `/readyz` answers and their disagreements with
//! service, see [`readiness`](super::readiness)), for the nemesis's failed
//! actions, and for failures of the run that are not violations (a node
//! down at the end). The timeline plots successes and failures per second
//! per node with the faults shaded, and a readiness band per node.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use plotters::prelude::*;
use serde::Serialize;

use super::history::Readiness;
use super::history::{Api, History, Op, OpKind, Outcome, Violation};
use super::leases::LeaseLog;
use super::nemesis::{FaultKind, FaultRecord, NemesisError};
use super::readiness::ReadinessReport;
use super::ChaosConfig;

/// Counts of operations by outcome.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub ok: u64,
    pub failed: u64,
    pub unknown: u64,
}

impl Counts {
    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Unknown => self.unknown += 1,
        }
    }

    pub fn total(&self) -> u64 {
        self.ok + self.failed + self.unknown
    }
}

/// A violation with the operations it names, in full.
#[derive(Debug, Clone, Serialize)]
pub struct ViolationReport {
    #[serde(flatten)]
    pub violation: Violation,
    pub operations: Vec<Op>,
}

/// One fault and how long each node took to serve again.
#[derive(Debug, Clone, Serialize)]
pub struct FaultReport {
    #[serde(flatten)]
    pub fault: FaultRecord,
    /// Node → milliseconds until it completed a write and a linearizable
    /// read invoked after the fault began (the faulted node of a kill or
    /// pause: after it was healed); `null`: not before the next fault.
    pub recovery_ms: BTreeMap<u64, Option<u64>>,
}

/// Recovery of the nodes a fault did not hit, over one kind of fault.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoverySummary {
    pub faults: usize,
    pub p99_ms: Option<u64>,
    pub max_ms: Option<u64>,
    /// Surviving nodes that did not serve again before the next fault.
    pub not_recovered: usize,
}

/// One watcher over the whole run.
#[derive(Debug, Clone, Serialize)]
pub struct WatchSummary {
    pub watcher: u32,
    pub prefix: String,
    /// Logs: a new one starts after a `410`.
    pub logs: usize,
    pub events: usize,
    pub reconnects: u32,
}

/// What the lease client did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LeaseSummary {
    pub leases: usize,
    /// Leases whose attached key was written.
    pub attached: usize,
    /// Acknowledged keep-alives.
    pub renewals: usize,
    /// Reads that found a leased key present.
    pub reads_present: u64,
    /// Leases found expired (key gone) while the client still held them.
    pub expired: usize,
}

impl LeaseSummary {
    pub fn of(logs: &[LeaseLog]) -> Self {
        Self {
            leases: logs.len(),
            attached: logs.iter().filter(|l| l.attached.is_some()).count(),
            renewals: logs.iter().map(|l| l.renewed.len()).sum(),
            reads_present: logs.iter().map(|l| u64::from(l.found)).sum(),
            expired: logs.iter().filter(|l| !l.found_gone.is_empty()).count(),
        }
    }
}

/// The whole result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    /// Wall-clock time of the run's time zero (milliseconds since the Unix
    /// epoch), to line its times up with the nodes' logs.
    pub started_unix_ms: u64,
    pub duration_seconds: f64,
    pub clients_per_api: usize,
    pub keys_per_api: usize,
    pub fault_kinds: Vec<FaultKind>,
    pub operations: Counts,
    /// `<api> <kind>` → counts.
    pub operations_by_kind: BTreeMap<String, Counts>,
    /// Share of all operations that succeeded.
    pub ok_fraction: f64,
    pub violations: Vec<ViolationReport>,
    pub faults: Vec<FaultReport>,
    /// Fault kind (`leader-kill`, `leader-pause`, ... for faults of the
    /// leader) → recovery of the other nodes.
    pub recovery: BTreeMap<String, RecoverySummary>,
    pub watches: Vec<WatchSummary>,
    pub leases: LeaseSummary,
    /// `/readyz` per node and where it disagreed with service.
    pub readiness: ReadinessReport,
    /// Fault actions that failed (the schedule went on without them).
    pub nemesis_errors: Vec<NemesisError>,
    /// What made the run fail besides violations: a node down or not
    /// answering at the end, a client task that died, final reads that
    /// could not be made.
    pub failures: Vec<String>,
    #[serde(skip)]
    pub history: History,
}

impl ChaosReport {
    pub fn new(
        config: &ChaosConfig,
        history: History,
        faults: Vec<FaultRecord>,
        violations: Vec<Violation>,
        elapsed: Duration,
    ) -> Self {
        let mut operations = Counts::default();
        let mut operations_by_kind: BTreeMap<String, Counts> = BTreeMap::new();
        for op in &history.ops {
            operations.add(op.outcome);
            operations_by_kind
                .entry(kind_name(op))
                .or_default()
                .add(op.outcome);
        }
        let by_id: HashMap<u64, &Op> = history.ops.iter().map(|o| (o.id, o)).collect();
        let violations = violations
            .into_iter()
            .map(|v| ViolationReport {
                operations: v
                    .ops
                    .iter()
                    .filter_map(|id| by_id.get(id).map(|o| (*o).clone()))
                    .collect(),
                violation: v,
            })
            .collect();
        let faults = fault_reports(&history.ops, faults, elapsed);
        let recovery = recovery_summaries(&faults);
        let watches = history
            .watches
            .iter()
            .fold(BTreeMap::<u32, WatchSummary>::new(), |mut acc, log| {
                let s = acc.entry(log.watcher).or_insert_with(|| WatchSummary {
                    watcher: log.watcher,
                    prefix: log.prefix.clone(),
                    logs: 0,
                    events: 0,
                    reconnects: 0,
                });
                s.logs += 1;
                s.events += log.events.len();
                s.reconnects += log.reconnects;
                acc
            })
            .into_values()
            .collect();
        let ok_fraction = if operations.total() == 0 {
            0.0
        } else {
            operations.ok as f64 / operations.total() as f64
        };
        let readiness = ReadinessReport::new(
            &history.readiness,
            &history.ops,
            config.readiness_slack,
            config.strict_readiness,
        );
        Self {
            seed: config.seed,
            started_unix_ms: 0,
            duration_seconds: elapsed.as_secs_f64(),
            clients_per_api: config.clients_per_api,
            keys_per_api: config.keys,
            fault_kinds: config.faults.clone(),
            operations,
            operations_by_kind,
            ok_fraction,
            violations,
            faults,
            recovery,
            watches,
            leases: LeaseSummary::default(),
            readiness,
            nemesis_errors: Vec::new(),
            failures: Vec::new(),
            history,
        }
    }

    /// No violation of any check, no failure of the run, and (when strict)
    /// no readiness disagreement. Nemesis errors alone do not fail it:
    /// what they leave broken shows as a failure at the end.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
            && self.failures.is_empty()
            && (!self.readiness.strict || self.readiness.disagreements.is_empty())
    }

    /// `report.json` (with `passed`), `history.json` and `timeline.svg`
    /// in `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let mut out = serde_json::to_value(self)?;
        out["passed"] = serde_json::Value::Bool(self.passed());
        std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(&out)?)
            .context("writing report.json")?;
        std::fs::write(dir.join("history.json"), serde_json::to_vec(&self.history)?)
            .context("writing history.json")?;
        plot_timeline(self, &dir.join("timeline.svg")).context("plotting timeline.svg")?;
        Ok(())
    }

    /// A few lines for a terminal.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "seed {} · {:.0} s · {} operations: {} ok, {} failed, {} unknown ({:.1}% ok) · {} faults · {} violations\n",
            self.seed,
            self.duration_seconds,
            self.operations.total(),
            self.operations.ok,
            self.operations.failed,
            self.operations.unknown,
            100.0 * self.ok_fraction,
            self.faults.len(),
            self.violations.len()
        );
        for (kind, r) in &self.recovery {
            out.push_str(&format!(
                "  recovery of the other nodes after {kind} ({} faults): p99 {} ms, max {} ms, {} not recovered\n",
                r.faults,
                r.p99_ms.map_or("-".into(), |v| v.to_string()),
                r.max_ms.map_or("-".into(), |v| v.to_string()),
                r.not_recovered
            ));
        }
        for api in ["rest", "etcd"] {
            if let Some(c) = self.operations_by_kind.get(&format!("{api} exact-read")) {
                out.push_str(&format!(
                    "  {api} reads at an exact revision: {} answered, {} refused (compacted or not reached), {} unknown\n",
                    c.ok, c.failed, c.unknown
                ));
            }
        }
        out.push_str(&format!(
            "  leases: {} granted, {} renewals acknowledged, {} reads found the leased key, {} expired while held\n",
            self.leases.leases, self.leases.renewals, self.leases.reads_present, self.leases.expired
        ));
        for (node, r) in &self.readiness.nodes {
            out.push_str(&format!(
                "  readiness of node {node}: {} probes, {} ready, {} not ready, {} silent; longest unready {} ms\n",
                r.samples, r.ready, r.not_ready, r.silent, r.longest_unready_ms
            ));
        }
        out.push_str(&format!(
            "  readiness disagreements (slack {} ms{}): {}\n",
            self.readiness.slack_ms,
            if self.readiness.strict {
                ", strict"
            } else {
                ", reported only"
            },
            self.readiness.disagreements.len()
        ));
        for d in self.readiness.disagreements.iter().take(10) {
            out.push_str(&format!("    {}\n", d.message));
        }
        for e in self.nemesis_errors.iter().take(10) {
            out.push_str(&format!(
                "  NEMESIS ERROR at {:.1} s, node {}, {}: {}\n",
                e.at.as_secs_f64(),
                e.node,
                e.action,
                e.message
            ));
        }
        for f in &self.failures {
            out.push_str(&format!("  FAILURE {f}\n"));
        }
        for v in self.violations.iter().take(20) {
            out.push_str(&format!(
                "  VIOLATION {} {}: {}\n",
                v.violation.check,
                v.violation.key.as_deref().unwrap_or("-"),
                v.violation.message
            ));
        }
        out
    }
}

fn kind_name(op: &Op) -> String {
    let api = match op.api {
        Api::Rest => "rest",
        Api::Etcd => "etcd",
    };
    let kind = match &op.kind {
        OpKind::Read { linearizable: true } => "read",
        OpKind::Read {
            linearizable: false,
        } => "serializable-read",
        OpKind::ReadAt { .. } => "exact-read",
        OpKind::Put { .. } => "put",
        OpKind::Cas { expect: None, .. } => "create",
        OpKind::Cas { value: None, .. } => "delete",
        OpKind::Cas { .. } => "cas",
    };
    format!("{api} {kind}")
}

fn is_ok_write(op: &Op) -> bool {
    op.outcome == Outcome::Ok && op.is_write()
}

fn is_ok_linearizable_read(op: &Op) -> bool {
    op.outcome == Outcome::Ok && matches!(op.kind, OpKind::Read { linearizable: true })
}

/// Per fault, per node: the time until the node served again.
fn fault_reports(ops: &[Op], faults: Vec<FaultRecord>, end: Duration) -> Vec<FaultReport> {
    let nodes: Vec<u64> = {
        let mut n: Vec<u64> = ops.iter().map(|o| o.node).collect();
        n.sort_unstable();
        n.dedup();
        n
    };
    let starts: Vec<Duration> = faults.iter().map(|f| f.started).collect();
    faults
        .into_iter()
        .enumerate()
        .map(|(i, fault)| {
            let horizon = starts.get(i + 1).copied().unwrap_or(end);
            let recovery_ms = nodes
                .iter()
                .map(|&node| {
                    let hit = node == fault.node
                        && matches!(fault.kind, FaultKind::Kill | FaultKind::Pause);
                    let from = if hit { fault.healed } else { fault.started };
                    (node, recovery(ops, node, from, horizon))
                })
                .collect();
            FaultReport { fault, recovery_ms }
        })
        .collect()
}

/// Milliseconds from `from` until `node` completed both a write and a
/// linearizable read invoked at or after `from` (and before `horizon`).
fn recovery(ops: &[Op], node: u64, from: Duration, horizon: Duration) -> Option<u64> {
    let first = |pred: fn(&Op) -> bool| {
        ops.iter()
            .filter(|o| o.node == node && o.invoked >= from && o.invoked < horizon && pred(o))
            .map(|o| o.completed)
            .min()
    };
    let served = first(is_ok_write)?.max(first(is_ok_linearizable_read)?);
    Some(u64::try_from(served.saturating_sub(from).as_millis()).unwrap_or(u64::MAX))
}

fn recovery_summaries(faults: &[FaultReport]) -> BTreeMap<String, RecoverySummary> {
    let mut samples: BTreeMap<String, (usize, Vec<u64>, usize)> = BTreeMap::new();
    for f in faults {
        let name = if f.fault.was_leader {
            format!("leader-{}", f.fault.kind.name())
        } else {
            f.fault.kind.name().to_string()
        };
        let entry = samples.entry(name).or_default();
        entry.0 += 1;
        for (node, ms) in &f.recovery_ms {
            if *node == f.fault.node {
                continue;
            }
            match ms {
                Some(ms) => entry.1.push(*ms),
                None => entry.2 += 1,
            }
        }
    }
    samples
        .into_iter()
        .map(|(name, (faults, mut ms, not_recovered))| {
            ms.sort_unstable();
            let p99 = (!ms.is_empty()).then(|| {
                let rank = (ms.len() as f64 * 0.99).ceil() as usize;
                ms[rank.clamp(1, ms.len()) - 1]
            });
            (
                name,
                RecoverySummary {
                    faults,
                    p99_ms: p99,
                    max_ms: ms.last().copied(),
                    not_recovered,
                },
            )
        })
        .collect()
}

const NODE_COLORS: [RGBColor; 3] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

fn fault_color(kind: FaultKind) -> RGBAColor {
    match kind {
        FaultKind::Kill => RGBColor(220, 50, 50).mix(0.18),
        FaultKind::Pause => RGBColor(230, 160, 20).mix(0.18),
        FaultKind::Isolate => RGBColor(120, 60, 200).mix(0.18),
        FaultKind::SlowDisk => RGBColor(90, 90, 90).mix(0.18),
    }
}

/// Successes (top) and failures (bottom) per second per node, faults shaded.
fn plot_timeline(report: &ChaosReport, path: &Path) -> anyhow::Result<()> {
    let seconds = report.duration_seconds.ceil().max(1.0) as usize;
    let mut per_node: BTreeMap<u64, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
    for op in &report.history.ops {
        let s = (op.completed.as_secs() as usize).min(seconds - 1);
        let (ok, bad) = per_node
            .entry(op.node)
            .or_insert_with(|| (vec![0; seconds], vec![0; seconds]));
        if op.outcome == Outcome::Ok {
            ok[s] += 1;
        } else {
            bad[s] += 1;
        }
    }
    let root = SVGBackend::new(path, (1200, 860)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(400);
    let (bottom, band) = rest.split_vertically(300);
    let panels = [
        (top, "successful operations per second", true),
        (bottom, "failed or unknown per second", false),
    ];
    for (area, title, ok) in panels {
        let max = per_node
            .values()
            .flat_map(|(o, b)| if ok { o.iter() } else { b.iter() })
            .copied()
            .max()
            .unwrap_or(1)
            .max(1);
        let mut chart = ChartBuilder::on(&area)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..seconds as f64, 0f64..f64::from(max) * 1.1)?;
        chart.configure_mesh().x_desc("seconds").draw()?;
        for f in &report.faults {
            let color = fault_color(f.fault.kind);
            chart.draw_series(std::iter::once(Rectangle::new(
                [
                    (f.fault.started.as_secs_f64(), 0.0),
                    (f.fault.healed.as_secs_f64(), f64::from(max) * 1.1),
                ],
                color.filled(),
            )))?;
        }
        for (i, (node, (okv, badv))) in per_node.iter().enumerate() {
            let series = if ok { okv } else { badv };
            let color = NODE_COLORS[i % NODE_COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    series
                        .iter()
                        .enumerate()
                        .map(|(s, n)| (s as f64 + 0.5, f64::from(*n))),
                    color.stroke_width(2),
                ))?
                .label(format!("node {node}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    plot_readiness(report, &band, seconds)?;
    root.present()?;
    Ok(())
}

fn readiness_color(r: Readiness) -> RGBColor {
    match r {
        Readiness::Ready => RGBColor(80, 170, 80),
        Readiness::NotReady => RGBColor(220, 60, 50),
        Readiness::Silent => RGBColor(150, 150, 150),
    }
}

/// A band per node: each `/readyz` probe colours the time until the next
/// one (green ready, red not ready, grey no answer); faults shaded behind.
fn plot_readiness<DB: DrawingBackend>(
    report: &ChaosReport,
    area: &DrawingArea<DB, plotters::coord::Shift>,
    seconds: usize,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let mut per_node: BTreeMap<u64, Vec<(Duration, Readiness)>> = BTreeMap::new();
    for s in &report.history.readiness {
        per_node
            .entry(s.node)
            .or_default()
            .push((s.at, s.readiness));
    }
    let rows: Vec<u64> = per_node.keys().copied().collect();
    let height = rows.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "/readyz per node (green ready, red not ready, grey no answer)",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(25)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..seconds as f64, 0f64..height)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        // Labels every half row; only those at a row's middle are named.
        .y_labels(2 * rows.len().max(1) + 1)
        .y_label_formatter(&|y| {
            let halves = (y * 2.0).round() as i64;
            if halves % 2 == 1 {
                rows.get(usize::try_from(halves / 2).unwrap_or(usize::MAX))
                    .map_or(String::new(), |n| format!("node {n}"))
            } else {
                String::new()
            }
        })
        .draw()?;
    for f in &report.faults {
        let color = fault_color(f.fault.kind);
        chart.draw_series(std::iter::once(Rectangle::new(
            [
                (f.fault.started.as_secs_f64(), 0.0),
                (f.fault.healed.as_secs_f64(), height),
            ],
            color.filled(),
        )))?;
    }
    for (row, samples) in per_node.values_mut().enumerate() {
        samples.sort_by_key(|(at, _)| *at);
        let y = row as f64;
        let next_at = samples
            .iter()
            .skip(1)
            .map(|(at, _)| *at)
            .chain(std::iter::once(Duration::MAX));
        let bars: Vec<_> = samples
            .iter()
            .zip(next_at)
            .map(|((at, r), next)| {
                let until = next.min(*at + super::readiness::POLL_INTERVAL * 2);
                Rectangle::new(
                    [(at.as_secs_f64(), y + 0.2), (until.as_secs_f64(), y + 0.8)],
                    readiness_color(*r).filled(),
                )
            })
            .collect();
        chart.draw_series(bars)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::fixtures::{put, read, read_at};
    use crate::chaos::history::ReadinessSample;

    fn config(out: &Path) -> ChaosConfig {
        ChaosConfig::new(7, Duration::from_secs(10), out.to_path_buf())
    }

    #[test]
    fn a_failed_run_still_writes_every_file_and_says_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        let history = History {
            ops: vec![put(1, "k", (0, 10), "v")],
            readiness: vec![ReadinessSample {
                node: 1,
                at: Duration::from_millis(5),
                readiness: Readiness::Ready,
            }],
            ..History::default()
        };
        let mut report = ChaosReport::new(
            &config(dir.path()),
            history,
            Vec::new(),
            Vec::new(),
            Duration::from_secs(1),
        );
        assert!(report.passed());
        report.nemesis_errors.push(NemesisError {
            at: Duration::from_secs(1),
            node: 3,
            action: "inject isolate".into(),
            message: "connection refused".into(),
        });
        assert!(
            report.passed(),
            "a nemesis error alone does not fail the run"
        );
        report
            .failures
            .push("node 3 is down at the end: it exited".into());
        assert!(!report.passed());
        report.write(dir.path()).expect("written");
        let json: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("report.json")).expect("report.json"),
        )
        .expect("json");
        assert_eq!(json["passed"], false);
        assert_eq!(json["failures"][0], "node 3 is down at the end: it exited");
        assert_eq!(json["nemesis_errors"][0]["action"], "inject isolate");
        assert_eq!(json["readiness"]["nodes"]["1"]["ready"], 1);
        assert!(dir.path().join("history.json").exists());
        assert!(dir.path().join("timeline.svg").exists());
        let summary = report.summary();
        assert!(summary.contains("FAILURE node 3"), "{summary}");
        assert!(summary.contains("NEMESIS ERROR"), "{summary}");
    }

    #[test]
    fn exact_reads_are_counted_apart_and_serve_as_no_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let history = History {
            ops: vec![
                read(1, "k", (0, 10), None),
                read_at(2, "k", (0, 10), 3, None),
                read_at(3, "k", (20, 30), 3, None).failed(),
                put(4, "k", (40, 50), "v"),
            ],
            ..History::default()
        };
        let fault = FaultRecord {
            kind: FaultKind::Isolate,
            node: 2,
            was_leader: false,
            started: Duration::ZERO,
            healed: Duration::from_millis(1),
        };
        let report = ChaosReport::new(
            &config(dir.path()),
            history,
            vec![fault],
            Vec::new(),
            Duration::from_secs(1),
        );
        let exact = &report.operations_by_kind["etcd exact-read"];
        assert_eq!((exact.ok, exact.failed), (1, 1));
        assert_eq!(report.operations_by_kind["etcd read"].ok, 1);
        // Node 1 served a write and a linearizable read only once the put
        // completed, at 50 ms: the exact read before it is no write.
        assert_eq!(report.faults[0].recovery_ms[&1], Some(50));
        let summary = report.summary();
        assert!(
            summary.contains("etcd reads at an exact revision: 1 answered, 1 refused"),
            "{summary}"
        );
    }

    #[test]
    fn readiness_disagreements_fail_the_run_only_when_strict() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Ready for 20 s while every write through the node times out.
        let history = History {
            ops: (0..20u64)
                .map(|i| put(i, "k", (i * 1_000, i * 1_000 + 900), "x").unknown())
                .collect(),
            readiness: (0..100u64)
                .map(|i| ReadinessSample {
                    node: 1,
                    at: Duration::from_millis(i * 200),
                    readiness: Readiness::Ready,
                })
                .collect(),
            ..History::default()
        };
        let mut cfg = config(dir.path());
        let lenient = ChaosReport::new(&cfg, history.clone(), vec![], vec![], Duration::ZERO);
        assert_eq!(lenient.readiness.disagreements.len(), 1);
        assert!(lenient.passed());
        cfg.strict_readiness = true;
        let strict = ChaosReport::new(&cfg, history, vec![], vec![], Duration::ZERO);
        assert!(!strict.passed());
    }
}

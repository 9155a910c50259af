//! Readiness beside availability: every node's `/readyz` is polled through
//! the run, and the checker compares what a node said about itself with
//! whether it served its clients.
//!
//! A poller per node asks `GET /readyz` every [`POLL_INTERVAL`] and records
//! a [`ReadinessSample`]: ready (`200`), not ready (any other answer), or
//! silent (no answer within [`PROBE_TIMEOUT`]: the node is down or paused).
//!
//! [`check`] then looks for two kinds of disagreement on each node, each
//! only when it lasts longer than a slack (a few seconds), because
//! readiness is decided from heartbeats and probes that lag the truth a
//! little (a follower still trusts a leader for an election timeout after
//! it was paused; the leader's own checks run on a timer):
//! - **ready but not serving**: the node answered ready throughout a
//!   window in which none of the quorum operations (writes, linearizable
//!   reads; not reads at an exact revision) its clients sent through it
//!   succeeded, and at least one of them failed or timed out. Such an
//!   outage runs from the completion of the last success before the
//!   failure to the completion of the next success; its overlap with an
//!   unbroken run of ready answers must not exceed the slack.
//! - **not ready but serving**: the node answered not ready (a definite
//!   non-200, not silence) throughout a window in which every quorum
//!   operation through it succeeded, a write among them. Such a serving
//!   run spans consecutive successful completions; its overlap with an
//!   unbroken run of not-ready answers must not exceed the slack.
//!
//! A disagreement is not a linearizability or revision-contract violation
//! (no promise about data was broken): it is its own section of the
//! report, and it fails the run only when asked (`--strict-readiness`),
//! see [`crate::chaos::ChaosConfig::strict_readiness`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::history::{Op, OpKind, Outcome, Readiness, ReadinessSample};
use super::workload::{Endpoint, Recorder};

/// How often each node's `/readyz` is asked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// How long a probe waits for an answer before the node counts as silent.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The default slack of [`check`]: longer than a leader election and the
/// first retries after it (the other nodes recover within about 4 s after
/// a leader fault, see the README), shorter than any outage that matters
/// to a load balancer.
pub const DEFAULT_SLACK: Duration = Duration::from_secs(5);

/// The samples of every node, in the order they were taken.
#[derive(Debug, Default)]
pub struct ReadinessLog {
    samples: Mutex<Vec<ReadinessSample>>,
}

impl ReadinessLog {
    fn push(&self, sample: ReadinessSample) {
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sample);
    }

    /// Everything recorded so far.
    pub fn take(&self) -> Vec<ReadinessSample> {
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Polls `node`'s `/readyz` every [`POLL_INTERVAL`] until `stop`.
pub async fn poll(
    node: Endpoint,
    recorder: Arc<Recorder>,
    log: Arc<ReadinessLog>,
    mut stop: watch::Receiver<bool>,
) {
    let http = match reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .connect_timeout(PROBE_TIMEOUT)
        .build()
    {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the readiness client");
            return;
        }
    };
    let url = format!("{}/readyz", node.rest_url);
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let at = recorder.now();
        let readiness = match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => Readiness::Ready,
            Ok(_) => Readiness::NotReady,
            Err(_) => Readiness::Silent,
        };
        log.push(ReadinessSample {
            node: node.id,
            at,
            readiness,
        });
    }
}

/// The two ways readiness can disagree with service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DisagreementKind {
    /// Said ready while none of its quorum operations succeeded.
    ReadyButNotServing,
    /// Said not ready while its quorum operations, writes included, succeeded.
    NotReadyButServing,
}

/// One disagreement: the window in which both held, and the operations
/// that show what the node did (by id, in the history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disagreement {
    pub node: u64,
    pub kind: DisagreementKind,
    /// Since the start of the run.
    pub from: Duration,
    pub until: Duration,
    pub message: String,
    pub ops: Vec<u64>,
}

/// An unbroken run of one readiness answer: from its first sample to its
/// last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Streak {
    readiness: Readiness,
    from: Duration,
    until: Duration,
}

/// Consecutive samples of one node with the same answer, merged.
fn streaks(samples: &[ReadinessSample]) -> Vec<Streak> {
    let mut out: Vec<Streak> = Vec::new();
    for s in samples {
        match out.last_mut() {
            Some(last) if last.readiness == s.readiness => last.until = s.at,
            _ => out.push(Streak {
                readiness: s.readiness,
                from: s.at,
                until: s.at,
            }),
        }
    }
    out
}

/// A window of the node's service: an outage (no success, a failure
/// inside) or a serving run (only successes, a write inside).
#[derive(Debug, Clone)]
struct Window {
    from: Duration,
    until: Duration,
    ops: Vec<u64>,
}

/// Operations that need the quorum: writes and linearizable reads. Reads
/// at an exact revision are left out: a healthy node refuses them when
/// the revision was compacted, which says nothing about its service.
fn is_quorum(op: &Op) -> bool {
    !matches!(
        op.kind,
        OpKind::Read {
            linearizable: false
        } | OpKind::ReadAt { .. }
    )
}

/// Outages and serving runs of one node, from its quorum operations sorted
/// by completion. An outage runs from the completion of the last success
/// before a failure (or the failure's invocation, if none came before) to
/// the completion of the next success (or the last failure's completion).
fn service_windows(ops: &[&Op]) -> (Vec<Window>, Vec<Window>) {
    let mut outages = Vec::new();
    let mut serving = Vec::new();
    let mut last_success: Option<Duration> = None;
    let mut outage: Option<Window> = None;
    let mut run: Option<(Window, bool)> = None;
    for op in ops {
        if op.outcome == Outcome::Ok {
            if let Some(mut o) = outage.take() {
                o.until = op.completed;
                o.ops.push(op.id);
                outages.push(o);
            }
            let entry = run.get_or_insert_with(|| {
                (
                    Window {
                        from: op.completed,
                        until: op.completed,
                        ops: Vec::new(),
                    },
                    false,
                )
            });
            entry.0.until = op.completed;
            entry.0.ops.push(op.id);
            entry.1 |= op.is_write();
            last_success = Some(op.completed);
        } else {
            if let Some((w, wrote)) = run.take() {
                if wrote {
                    serving.push(w);
                }
            }
            let o = outage.get_or_insert_with(|| Window {
                from: last_success.unwrap_or(op.invoked),
                until: op.completed,
                ops: Vec::new(),
            });
            o.until = o.until.max(op.completed);
            o.ops.push(op.id);
        }
    }
    outages.extend(outage);
    if let Some((w, true)) = run {
        serving.push(w);
    }
    (outages, serving)
}

/// The overlap of `[a, b]` and `[c, d]`, if any.
fn overlap(a: Duration, b: Duration, c: Duration, d: Duration) -> Option<(Duration, Duration)> {
    let (from, until) = (a.max(c), b.min(d));
    (from < until).then_some((from, until))
}

/// Disagreements between what each node said (`samples`) and what it did
/// (`ops`), longer than `slack`.
pub fn check(samples: &[ReadinessSample], ops: &[Op], slack: Duration) -> Vec<Disagreement> {
    let mut by_node: BTreeMap<u64, (Vec<ReadinessSample>, Vec<&Op>)> = BTreeMap::new();
    for s in samples {
        by_node.entry(s.node).or_default().0.push(*s);
    }
    for op in ops.iter().filter(|o| is_quorum(o)) {
        by_node.entry(op.node).or_default().1.push(op);
    }
    let mut out = Vec::new();
    for (node, (mut samples, mut ops)) in by_node {
        samples.sort_by_key(|s| s.at);
        ops.sort_by_key(|o| o.completed);
        let streaks = streaks(&samples);
        let (outages, serving) = service_windows(&ops);
        let cases = [
            (
                Readiness::Ready,
                &outages,
                DisagreementKind::ReadyButNotServing,
                "said ready while none of its quorum operations succeeded",
            ),
            (
                Readiness::NotReady,
                &serving,
                DisagreementKind::NotReadyButServing,
                "said not ready while its quorum operations (writes among them) succeeded",
            ),
        ];
        for (readiness, windows, kind, what) in cases {
            for streak in streaks.iter().filter(|s| s.readiness == readiness) {
                for w in windows.iter() {
                    let Some((from, until)) = overlap(streak.from, streak.until, w.from, w.until)
                    else {
                        continue;
                    };
                    if until - from > slack {
                        out.push(Disagreement {
                            node,
                            kind,
                            from,
                            until,
                            message: format!(
                                "node {node} {what} for {:.1} s ({:.1}–{:.1} s), more than the {:.1} s slack",
                                (until - from).as_secs_f64(),
                                from.as_secs_f64(),
                                until.as_secs_f64(),
                                slack.as_secs_f64()
                            ),
                            ops: w.ops.clone(),
                        });
                    }
                }
            }
        }
    }
    out.sort_by_key(|d| (d.from, d.node));
    out
}

/// One node's readiness over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeReadiness {
    pub samples: usize,
    pub ready: usize,
    pub not_ready: usize,
    pub silent: usize,
    /// Unbroken runs of not-ready or silent answers.
    pub unready_windows: usize,
    /// The longest such run, in milliseconds.
    pub longest_unready_ms: u64,
}

/// The report's readiness section.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReadinessReport {
    pub poll_interval_ms: u64,
    pub slack_ms: u64,
    /// Whether disagreements fail the run.
    pub strict: bool,
    pub nodes: BTreeMap<u64, NodeReadiness>,
    pub disagreements: Vec<Disagreement>,
}

impl ReadinessReport {
    pub fn new(samples: &[ReadinessSample], ops: &[Op], slack: Duration, strict: bool) -> Self {
        let mut per_node: BTreeMap<u64, Vec<ReadinessSample>> = BTreeMap::new();
        for s in samples {
            per_node.entry(s.node).or_default().push(*s);
        }
        let nodes = per_node
            .into_iter()
            .map(|(node, mut samples)| {
                samples.sort_by_key(|s| s.at);
                let count = |r| samples.iter().filter(|s| s.readiness == r).count();
                let mut summary = NodeReadiness {
                    samples: samples.len(),
                    ready: count(Readiness::Ready),
                    not_ready: count(Readiness::NotReady),
                    silent: count(Readiness::Silent),
                    ..NodeReadiness::default()
                };
                // Not ready and silent together: the node was not usable.
                let usable: Vec<ReadinessSample> = samples
                    .iter()
                    .map(|s| ReadinessSample {
                        readiness: match s.readiness {
                            Readiness::Ready => Readiness::Ready,
                            _ => Readiness::NotReady,
                        },
                        ..*s
                    })
                    .collect();
                for s in streaks(&usable)
                    .iter()
                    .filter(|s| s.readiness != Readiness::Ready)
                {
                    summary.unready_windows += 1;
                    let ms = u64::try_from((s.until - s.from).as_millis()).unwrap_or(u64::MAX);
                    summary.longest_unready_ms = summary.longest_unready_ms.max(ms);
                }
                (node, summary)
            })
            .collect();
        Self {
            poll_interval_ms: u64::try_from(POLL_INTERVAL.as_millis()).unwrap_or(u64::MAX),
            slack_ms: u64::try_from(slack.as_millis()).unwrap_or(u64::MAX),
            strict,
            nodes,
            disagreements: check(samples, ops, slack),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::fixtures::{put, read};

    const SLACK: Duration = Duration::from_secs(3);

    /// A sample of node 1 every 200 ms over `[from_ms, until_ms)`.
    fn said(readiness: Readiness, from_ms: u64, until_ms: u64) -> Vec<ReadinessSample> {
        (from_ms..until_ms)
            .step_by(200)
            .map(|ms| ReadinessSample {
                node: 1,
                at: Duration::from_millis(ms),
                readiness,
            })
            .collect()
    }

    /// Successful quorum operations on node 1, alternating writes and
    /// reads, one every 100 ms over `[from_ms, until_ms)`, ids from `id`.
    fn serving(id: u64, from_ms: u64, until_ms: u64) -> Vec<Op> {
        (from_ms..until_ms)
            .step_by(100)
            .enumerate()
            .map(|(i, ms)| {
                let id = id + i as u64;
                if i % 2 == 0 {
                    put(id, "k", (ms, ms + 50), &format!("v{id}"))
                } else {
                    read(id, "k", (ms, ms + 50), None)
                }
            })
            .collect()
    }

    /// Quorum writes on node 1 that time out: invoked every second over
    /// `[from_ms, until_ms)`, each given up on after 900 ms.
    fn failing(id: u64, from_ms: u64, until_ms: u64) -> Vec<Op> {
        (from_ms..until_ms)
            .step_by(1_000)
            .enumerate()
            .map(|(i, ms)| put(id + i as u64, "k", (ms, ms + 900), "x").unknown())
            .collect()
    }

    #[test]
    fn a_node_that_is_ready_while_serving_and_unready_while_down_agrees() {
        let mut samples = said(Readiness::Ready, 0, 10_000);
        samples.extend(said(Readiness::NotReady, 10_000, 20_000));
        samples.extend(said(Readiness::Ready, 20_000, 30_000));
        let mut ops = serving(1, 0, 10_000);
        ops.extend(failing(1_000, 10_000, 20_000));
        ops.extend(serving(2_000, 20_000, 30_000));
        assert_eq!(check(&samples, &ops, SLACK), Vec::new());
    }

    #[test]
    fn readiness_that_lags_by_less_than_the_slack_is_no_disagreement() {
        // The outage begins at 10 s; /readyz notices 2 s later and says
        // ready again 2 s before service is back.
        let mut samples = said(Readiness::Ready, 0, 12_000);
        samples.extend(said(Readiness::NotReady, 12_000, 18_000));
        samples.extend(said(Readiness::Ready, 18_000, 30_000));
        let mut ops = serving(1, 0, 10_000);
        ops.extend(failing(1_000, 10_000, 20_000));
        ops.extend(serving(2_000, 20_000, 30_000));
        assert_eq!(check(&samples, &ops, SLACK), Vec::new());
    }

    #[test]
    fn ready_through_an_outage_longer_than_the_slack_is_reported() {
        let samples = said(Readiness::Ready, 0, 30_000);
        let mut ops = serving(1, 0, 10_000);
        ops.extend(failing(1_000, 10_000, 20_000));
        ops.extend(serving(2_000, 20_000, 30_000));
        let found = check(&samples, &ops, SLACK);
        assert_eq!(found.len(), 1, "{found:?}");
        let d = &found[0];
        assert_eq!(d.kind, DisagreementKind::ReadyButNotServing);
        assert_eq!(d.node, 1);
        // From the last success before the failures to the first after.
        assert_eq!(d.from, Duration::from_millis(9_950));
        assert_eq!(d.until, Duration::from_millis(20_050));
        assert!(d.ops.contains(&1_000) && d.ops.contains(&2_000), "{d:?}");
    }

    #[test]
    fn not_ready_while_serving_writes_longer_than_the_slack_is_reported() {
        let mut samples = said(Readiness::Ready, 0, 10_000);
        samples.extend(said(Readiness::NotReady, 10_000, 20_000));
        let ops = serving(1, 0, 20_000);
        let found = check(&samples, &ops, SLACK);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, DisagreementKind::NotReadyButServing);
        assert_eq!(found[0].from, Duration::from_millis(10_000));
    }

    #[test]
    fn silence_is_never_a_disagreement_and_reads_alone_are_not_serving_writes() {
        // A paused node answers nothing: silent, whatever its clients saw.
        let samples = said(Readiness::Silent, 0, 20_000);
        let mut ops = failing(1, 0, 20_000);
        ops.extend(serving(100, 0, 20_000));
        assert_eq!(check(&samples, &ops, SLACK), Vec::new());
        // Not ready while only reads succeed: no write was served.
        let samples = said(Readiness::NotReady, 0, 20_000);
        let reads: Vec<Op> = (0..100)
            .map(|i| read(i, "k", (i * 200, i * 200 + 50), None))
            .collect();
        assert_eq!(check(&samples, &reads, SLACK), Vec::new());
    }

    #[test]
    fn the_report_counts_answers_and_unready_windows() {
        let mut samples = said(Readiness::Ready, 0, 1_000);
        samples.extend(said(Readiness::Silent, 1_000, 2_000));
        samples.extend(said(Readiness::NotReady, 2_000, 3_000));
        samples.extend(said(Readiness::Ready, 3_000, 4_000));
        let r = ReadinessReport::new(&samples, &[], SLACK, false);
        let n = &r.nodes[&1];
        assert_eq!((n.samples, n.ready, n.silent, n.not_ready), (20, 10, 5, 5));
        assert_eq!(n.unready_windows, 1);
        assert_eq!(n.longest_unready_ms, 1_800);
        assert!(r.disagreements.is_empty());
    }
}

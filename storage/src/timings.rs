//! Where a node's write time goes, stage by stage: for each [`Stage`] a
//! count and a total, two relaxed atomic adds per measurement, cheap
//! enough to keep on for every write. `/metrics` exposes them
//! (`kubestore_stage_seconds_total` and `kubestore_stage_total`, by
//! `stage`); `kubestore bench compare` reads them before and after its put
//! workload and reports each stage's mean per write.
//!
//! The stages overlap in time (a batch's fsync and apply run beside the
//! next batch's queueing): each is a mean over its own occurrences, not a
//! slice of one write's latency, and they do not add up to it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A timed stage of the write path. The storage crate times the log and
/// the apply; the Raft layer the proposals and replication; the server
/// the watch cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A write waiting in its node's proposal queue until its batch leaves.
    ProposeQueue,
    /// A leader's batch from its proposal to its applied answer (append,
    /// fsync, replication, commit and apply).
    Commit,
    /// A follower's batch forwarded to the leader, sent to answered.
    Forward,
    /// Writing an append's entries to the WAL and memtable, unsynced.
    LogAppend,
    /// One fsync of the log, covering every append queued behind the last.
    LogFsync,
    /// One AppendEntries RPC of the leader, sent to answered.
    ReplicationRpc,
    /// A follower's handling of one AppendEntries, its append and fsync
    /// included.
    AppendEntriesHandled,
    /// Applying one batch of log entries to the state machine.
    Apply,
    /// The watch cache taking in one batch of events.
    CacheFeed,
}

impl Stage {
    /// Every stage, in write-path order.
    pub const ALL: [Stage; 9] = [
        Stage::ProposeQueue,
        Stage::Commit,
        Stage::Forward,
        Stage::LogAppend,
        Stage::LogFsync,
        Stage::ReplicationRpc,
        Stage::AppendEntriesHandled,
        Stage::Apply,
        Stage::CacheFeed,
    ];

    /// The stage's label in `/metrics` and benchmark results.
    pub fn name(self) -> &'static str {
        match self {
            Stage::ProposeQueue => "propose_queue",
            Stage::Commit => "commit",
            Stage::Forward => "forward",
            Stage::LogAppend => "log_append",
            Stage::LogFsync => "log_fsync",
            Stage::ReplicationRpc => "replication_rpc",
            Stage::AppendEntriesHandled => "append_entries_handled",
            Stage::Apply => "apply",
            Stage::CacheFeed => "cache_feed",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One stage's count and total time, in nanoseconds.
#[derive(Debug, Default)]
struct Total {
    count: AtomicU64,
    nanos: AtomicU64,
}

/// The stage totals of one node (shared by its log, state machine, Raft
/// node and server).
#[derive(Debug, Default)]
pub struct StageTimes {
    totals: [Total; Stage::ALL.len()],
}

/// One stage's totals as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageTotal {
    /// The stage.
    pub stage: Stage,
    /// How many times it ran.
    pub count: u64,
    /// How long it took, all runs together.
    pub total: Duration,
}

impl StageTimes {
    /// Counts one run of `stage` that took `elapsed`.
    pub fn record(&self, stage: Stage, elapsed: Duration) {
        let total = &self.totals[stage.index()];
        total.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        total.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Counts one run of `stage` that started at `started`.
    pub fn record_since(&self, stage: Stage, started: Instant) {
        self.record(stage, started.elapsed());
    }

    /// Every stage's totals so far, in [`Stage::ALL`]'s order.
    pub fn read(&self) -> Vec<StageTotal> {
        Stage::ALL
            .iter()
            .map(|&stage| {
                let total = &self.totals[stage.index()];
                StageTotal {
                    stage,
                    count: total.count.load(Ordering::Relaxed),
                    total: Duration::from_nanos(total.nanos.load(Ordering::Relaxed)),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_counts_its_own_runs_and_time() {
        let times = StageTimes::default();
        times.record(Stage::LogFsync, Duration::from_millis(2));
        times.record(Stage::LogFsync, Duration::from_millis(3));
        times.record(Stage::Apply, Duration::from_micros(40));
        let read = times.read();
        assert_eq!(read.len(), Stage::ALL.len());
        let of = |stage| {
            read.iter()
                .find(|t| t.stage == stage)
                .map(|t| (t.count, t.total))
        };
        assert_eq!(of(Stage::LogFsync), Some((2, Duration::from_millis(5))));
        assert_eq!(of(Stage::Apply), Some((1, Duration::from_micros(40))));
        assert_eq!(of(Stage::Commit), Some((0, Duration::ZERO)));
        let names: std::collections::HashSet<_> = Stage::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names.len(), Stage::ALL.len(), "names are distinct");
    }
}

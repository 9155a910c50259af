//! History compaction, proposed by the leader through the log so every
//! node drops the same history. It is what makes requests for revisions
//! older than the retained window answer `410 Gone` (`Expired`).
//!
//! Policy: keep at least `retention` of history (default 5 minutes) and at
//! most `max_revisions` revisions (whichever keeps less). The compactor
//! samples `(time, revision)` every `interval`; on the leader it compacts to
//! the newest revision sampled at least `retention` ago, or further when the
//! count bound requires it.

use std::collections::VecDeque;
use std::time::Duration;

use kubestore_raft::RaftNode;
use kubestore_storage::{ApplyError, Revision};
use tokio::sync::watch;

use crate::write::{self, WriteError};

/// How much history the compactor keeps.
#[derive(Debug, Clone, Copy)]
pub struct CompactionPolicy {
    pub retention: Duration,
    pub max_revisions: u64,
    pub interval: Duration,
}

/// Why a compaction request failed.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error("compaction to {0}: the revision is in the future")]
    FutureRevision(u64),
    #[error("compaction to {requested}: history is already compacted to {compacted}")]
    AlreadyCompacted { requested: u64, compacted: u64 },
    #[error(transparent)]
    Raft(#[from] kubestore_raft::RaftNodeError),
    #[error("unexpected answer from the state machine: {0}")]
    Unexpected(String),
}

/// Proposes `Compact { revision }` through the log and returns once every
/// node will apply it at the same place.
pub async fn compact(node: &RaftNode, revision: u64) -> Result<(), CompactError> {
    match write::compact(node, Revision(revision)).await {
        Ok(()) => Ok(()),
        Err(WriteError::Raft(e)) => Err(CompactError::Raft(e)),
        Err(WriteError::Apply {
            error: ApplyError::FutureRevision,
            ..
        }) => Err(CompactError::FutureRevision(revision)),
        Err(WriteError::Apply {
            error: ApplyError::Compacted,
            ..
        }) => Err(CompactError::AlreadyCompacted {
            requested: revision,
            compacted: node.store().applied().compacted.0,
        }),
        Err(WriteError::Apply { error, .. }) => Err(CompactError::Unexpected(error.to_string())),
        Err(unexpected @ WriteError::Unexpected(_)) => {
            Err(CompactError::Unexpected(unexpected.to_string()))
        }
    }
}

/// The revision to compact to, given samples (oldest first) of when each
/// revision was current.
fn target(
    samples: &VecDeque<(tokio::time::Instant, u64)>,
    now: tokio::time::Instant,
    current: u64,
    policy: &CompactionPolicy,
) -> u64 {
    let by_time = samples
        .iter()
        .rev()
        .find(|(at, _)| now.saturating_duration_since(*at) >= policy.retention)
        .map_or(0, |(_, rev)| *rev);
    let by_count = current.saturating_sub(policy.max_revisions);
    by_time.max(by_count)
}

/// Runs until `stop` turns true: samples revisions on every node, compacts
/// on the leader.
pub async fn run(node: RaftNode, policy: CompactionPolicy, mut stop: watch::Receiver<bool>) {
    let mut samples: VecDeque<(tokio::time::Instant, u64)> = VecDeque::new();
    let mut tick = tokio::time::interval(policy.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let now = tokio::time::Instant::now();
        let applied = node.store().applied();
        samples.push_back((now, applied.revision.0));
        // Keep one sample older than the retention window, drop the rest.
        while samples.len() > 1 && now.saturating_duration_since(samples[1].0) >= policy.retention {
            samples.pop_front();
        }
        if node.current_leader() != Some(node.id()) {
            continue;
        }
        let to = target(&samples, now, applied.revision.0, &policy);
        if to > applied.compacted.0 {
            let span = tracing::info_span!("compaction", node = node.id(), to);
            match tracing::Instrument::instrument(compact(&node, to), span).await {
                Ok(()) => tracing::info!(to, "proposed compaction"),
                Err(e) => tracing::warn!(error = %e, "compaction failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_keeps_the_retention_window_and_the_count_bound() {
        let now = tokio::time::Instant::now();
        let policy = CompactionPolicy {
            retention: Duration::from_secs(300),
            max_revisions: 1000,
            interval: Duration::from_secs(60),
        };
        let samples: VecDeque<_> = [(400, 10), (310, 50), (200, 90), (10, 120)]
            .into_iter()
            .map(|(ago, rev)| (now - Duration::from_secs(ago), rev))
            .collect();
        assert_eq!(
            target(&samples, now, 130, &policy),
            50,
            "newest revision at least 5 minutes old"
        );
        assert_eq!(
            target(&samples, now, 5000, &policy),
            4000,
            "the count bound wins when it keeps less"
        );
        assert_eq!(target(&VecDeque::new(), now, 10, &policy), 0);
    }
}

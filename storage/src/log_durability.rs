//! How far this node's Raft log is on disk, for a leader that counts its
//! own appends before their fsync.
//!
//! openraft 0.9 waits on its core task for the leader's own append to be
//! flushed before it sends the entries to the followers, so the leader's
//! fsync runs in series with the followers'. etcd's leader writes its WAL
//! while the followers write theirs. [`crate::LogStore`] gets the same
//! overlap within openraft 0.9: for the leader's own entries it tells
//! openraft "flushed" as soon as they are written (readable, and queued for
//! the flusher's fsync), and openraft replicates at once. That alone would
//! let a commit count the leader's unsynced copy, so the leader keeps
//! everything a commit exposes behind its own fsync:
//!
//! - **apply** of an entry waits until the entries reported early up to
//!   it are synced here ([`LogDurability::wait_synced`]), so no client is
//!   answered, and no read sees them, from the leader before its own copy
//!   is on disk (entries reported after their fsync never wait);
//! - **the commit index the followers are told** is held at what is synced
//!   here ([`LogDurability::clamp_commit`]), so no follower applies an
//!   entry before the leader's copy is on disk either; when the fsync
//!   catches up, [`LogDurability::released`] asks for a heartbeat that
//!   tells them the rest.
//!
//! An entry some node applied is therefore on the leader's disk and on the
//! disk of every follower whose acknowledgement committed it: a majority,
//! as Raft needs. If the leader dies before its fsync, the entries it
//! counted early were never applied or answered anywhere, and a new leader
//! may drop them like any uncommitted entry.
//!
//! Followers never acknowledge early: their appends complete only after the
//! fsync, as before.

use std::sync::Arc;

use openraft::LogId;
use tokio::sync::{watch, Notify};

use crate::error::StoreError;
use crate::ids::NodeId;

/// Shared by the log store (which moves it), the state machine (which
/// waits on it) and the network (which clamps the commit index with it).
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct LogDurability {
    state: Arc<watch::Sender<Synced>>,
    released: Arc<Notify>,
}

/// What the last completed fsync covers.
#[derive(Debug, Clone, Default)]
struct Synced {
    /// The last log id on disk. Entries are ordered by log id (term, then
    /// index), and an entry at or below it that is still in the log is
    /// synced: the log at one term and index always holds the same entry.
    upto: Option<LogId<NodeId>>,
    /// Bumped by each truncation, which also resets `upto`: an fsync queued
    /// before a truncation says nothing about the entries after it.
    generation: u64,
    /// A commit index the followers were told less of, released once
    /// `upto` reaches it.
    held_back: Option<LogId<NodeId>>,
    /// The last entry reported flushed before its fsync: apply waits for
    /// the fsync of nothing else.
    reported_early: Option<LogId<NodeId>>,
    /// Set when an fsync failed: nothing after it can be trusted.
    failed: Option<String>,
}

impl LogDurability {
    /// Everything up to `last` (the log's last entry at open) is on disk.
    pub(crate) fn new(last: Option<LogId<NodeId>>) -> Self {
        Self {
            state: Arc::new(watch::Sender::new(Synced {
                upto: last,
                ..Synced::default()
            })),
            released: Arc::new(Notify::new()),
        }
    }

    /// The truncation generation an append queued now belongs to.
    pub(crate) fn generation(&self) -> u64 {
        self.state.borrow().generation
    }

    /// An fsync covering an append of `generation` whose last entry is
    /// `last` completed (or failed, with `error`).
    pub(crate) fn synced(&self, last: LogId<NodeId>, generation: u64, error: Option<&str>) {
        let mut release = false;
        self.state.send_if_modified(|s| {
            if let Some(e) = error {
                s.failed.get_or_insert_with(|| e.to_string());
                return true;
            }
            if s.generation != generation || s.upto >= Some(last) {
                return false;
            }
            s.upto = Some(last);
            if s.held_back.is_some_and(|held| Some(held) <= s.upto) {
                s.held_back = None;
                release = true;
            }
            true
        });
        if release {
            self.released.notify_one();
        }
    }

    /// The log was cut back to end at `last`, with a synced write (which
    /// synced everything before it too).
    pub(crate) fn truncated(&self, last: Option<LogId<NodeId>>) {
        self.state.send_modify(|s| {
            s.generation += 1;
            s.upto = last;
            s.held_back = None;
            s.reported_early = None;
        });
    }

    /// The entries up to `last` were reported flushed before their fsync.
    pub(crate) fn reported_early(&self, last: LogId<NodeId>) {
        self.state.send_if_modified(|s| {
            s.reported_early = s.reported_early.max(Some(last));
            false
        });
    }

    /// The commit index to tell a follower: `commit`, or less when this
    /// node's own copy of the entries up to it is not on disk yet (then
    /// [`LogDurability::released`] fires once it is).
    pub fn clamp_commit(&self, commit: Option<LogId<NodeId>>) -> Option<LogId<NodeId>> {
        let mut clamped = commit;
        self.state.send_if_modified(|s| {
            if commit <= s.upto {
                return false;
            }
            clamped = s.upto;
            s.held_back = s.held_back.max(commit);
            false
        });
        clamped
    }

    /// Waits until a commit index held back by
    /// [`LogDurability::clamp_commit`] is synced, so the followers can be
    /// told it.
    pub async fn released(&self) {
        self.released.notified().await;
    }

    /// Waits until the entries up to `log_id` that were reported flushed
    /// early are on this node's disk (every other entry was synced before
    /// openraft learned of it); an error if an fsync failed first.
    pub(crate) async fn wait_synced(&self, log_id: LogId<NodeId>) -> Result<(), StoreError> {
        let mut seen = self.state.subscribe();
        let synced = seen
            .wait_for(|s| s.failed.is_some() || s.covers(log_id))
            .await
            .map_err(|_| StoreError::LogSync("the log store was dropped".into()))?;
        match &synced.failed {
            Some(e) => Err(StoreError::LogSync(e.clone())),
            None => Ok(()),
        }
    }

    /// The index of the last entry on this node's disk.
    pub fn synced_index(&self) -> u64 {
        self.state.borrow().upto.map_or(0, |l| l.index)
    }

    /// Whether the entries up to `log_id` that were reported flushed early
    /// are on this node's disk.
    pub(crate) fn is_synced(&self, log_id: LogId<NodeId>) -> bool {
        let s = self.state.borrow();
        s.failed.is_none() && s.covers(log_id)
    }
}

impl Synced {
    /// Whether every entry up to `log_id` reported early is synced.
    fn covers(&self, log_id: LogId<NodeId>) -> bool {
        match self.reported_early {
            None => true,
            Some(early) => Some(log_id.min(early)) <= self.upto,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use openraft::CommittedLeaderId;

    use super::*;

    fn id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    #[test]
    fn a_commit_beyond_the_synced_log_is_held_back_and_released_by_its_fsync() {
        let d = LogDurability::new(Some(id(1, 10)));
        assert_eq!(d.clamp_commit(Some(id(1, 9))), Some(id(1, 9)));
        assert_eq!(d.clamp_commit(Some(id(1, 14))), Some(id(1, 10)));
        let released = d.released();
        tokio::pin!(released);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(released.as_mut().poll(&mut cx).is_pending());
        d.synced(id(1, 12), d.generation(), None);
        assert!(released.as_mut().poll(&mut cx).is_pending(), "12 < 14");
        d.synced(id(1, 14), d.generation(), None);
        assert!(released.as_mut().poll(&mut cx).is_ready());
        assert_eq!(d.clamp_commit(Some(id(1, 14))), Some(id(1, 14)));
    }

    #[test]
    fn an_fsync_queued_before_a_truncation_does_not_cover_what_followed_it() {
        let d = LogDurability::new(Some(id(1, 10)));
        let before = d.generation();
        d.truncated(Some(id(1, 8)));
        d.reported_early(id(2, 10));
        d.synced(id(1, 12), before, None);
        assert!(!d.is_synced(id(2, 9)));
        assert!(d.is_synced(id(1, 8)));
        d.synced(id(2, 9), d.generation(), None);
        assert!(d.is_synced(id(2, 9)));
        assert!(!d.is_synced(id(2, 10)));
    }

    #[test]
    fn apply_waits_only_for_entries_reported_before_their_fsync() {
        let d = LogDurability::new(Some(id(1, 10)));
        assert!(d.is_synced(id(1, 12)), "nothing reported early");
        d.reported_early(id(2, 14));
        assert!(d.is_synced(id(1, 10)));
        assert!(!d.is_synced(id(2, 11)));
        d.synced(id(2, 14), d.generation(), None);
        assert!(d.is_synced(id(2, 20)), "beyond what was reported early");
    }

    #[tokio::test]
    async fn a_failed_fsync_fails_the_waiters() {
        let d = LogDurability::new(None);
        d.reported_early(id(1, 1));
        let waiting = tokio::spawn({
            let d = d.clone();
            async move { d.wait_synced(id(1, 1)).await }
        });
        d.synced(id(1, 1), d.generation(), Some("disk gone"));
        let waited = waiting.await.expect("join");
        assert!(matches!(waited, Err(StoreError::LogSync(e)) if e == "disk gone"));
    }
}

//! The purge horizon: the log is never purged past what the current
//! snapshot file durably covers.
//!
//! openraft 0.9 purges the log the moment it *queues* a snapshot install:
//! its `PurgeLog` command is not conditioned on the install finishing. Done
//! as asked, a crash or a failed install in between leaves a log purged past
//! the snapshot on disk (`current.snap` still the older one), and every
//! restart then fails openraft's `purge_upto <= snapshot_last_log_id` check:
//! the node crash-loops and can never rejoin. The fault-schedule checker
//! found exactly that (a follower isolated twice while the leader streamed
//! it a snapshot).
//!
//! So while a snapshot is being received or installed,
//! [`crate::LogStore::purge`] purges only as far as the current snapshot
//! file covers and records the rest; the state machine, once it has durably
//! put the new snapshot in place, moves the horizon and finishes the purge.
//! Entries kept a little longer are harmless: openraft never reads below
//! what it believes purged, and at the next open the log simply starts
//! lower. Outside an install openraft only asks to purge what its own
//! snapshot covers (its policy keeps the purge behind the snapshot), and a
//! purge is done as asked.
//!
//! The state machine's rows skip the WAL, so a crash takes the state back
//! to its last flush and the restart re-applies the log from there: the
//! log must still hold those entries. A snapshot build flushes the state
//! before its file moves the horizon, so a purge within what a snapshot
//! covers needs nothing more; a purge past it (openraft never asks one
//! outside an install, its storage test suite does) flushes the state
//! first.
//!
//! Invariants: while a snapshot install may be pending, the `last_purged`
//! id on disk is `<=` the last log id of the snapshot file on disk; and
//! the state on disk (its last flush) is never behind the purged log.

use std::sync::{Arc, Mutex, MutexGuard};

use openraft::LogId;

use crate::engine::Engine;
use crate::error::StoreError;
use crate::ids::NodeId;
use crate::schema::{self, Cf};
use crate::segment_log::LogSegments;

/// Shared by the log store (which asks for purges) and the state machine
/// (which says what the current snapshot covers). Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct PurgeHorizon {
    engine: Engine,
    /// The log's entries, whose segments a purge removes.
    log: LogSegments,
    state: Arc<Mutex<Horizon>>,
}

#[derive(Debug, Default)]
struct Horizon {
    /// The last log id the current snapshot file covers.
    covered: Option<LogId<NodeId>>,
    /// The furthest purge openraft asked for.
    wanted: Option<LogId<NodeId>>,
    /// A snapshot is being received or installed: purges wait for it.
    receiving: bool,
    /// The last purged log id, as on disk.
    purged: Option<LogId<NodeId>>,
}

impl PurgeHorizon {
    /// The horizon of a store whose current snapshot covers `covered`.
    pub(crate) fn open(
        engine: Engine,
        log: LogSegments,
        covered: Option<LogId<NodeId>>,
    ) -> Result<Self, StoreError> {
        let purged = read_last_purged(&engine)?;
        Ok(Self {
            engine,
            log,
            state: Arc::new(Mutex::new(Horizon {
                covered,
                wanted: purged,
                receiving: false,
                purged,
            })),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Horizon> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last purged log id, as on disk.
    pub(crate) fn purged(&self) -> Option<LogId<NodeId>> {
        self.lock().purged
    }

    /// A snapshot stream has begun: until an install completes, purges go
    /// no further than the current snapshot file.
    pub(crate) fn receiving(&self) {
        self.lock().receiving = true;
    }

    /// openraft asks for the log up to `upto` to be purged. While a
    /// snapshot is incoming, purges as far as the current snapshot covers
    /// now and the rest once the install is in place.
    pub(crate) fn request(&self, upto: LogId<NodeId>) -> Result<(), StoreError> {
        let mut h = self.lock();
        h.wanted = h.wanted.max(Some(upto));
        if h.receiving && h.wanted > h.covered {
            tracing::info!(
                wanted = ?h.wanted,
                covered = ?h.covered,
                "log purge deferred until a snapshot covers it"
            );
        }
        self.catch_up(&mut h)
    }

    /// A snapshot covering `covered` is now the current snapshot file, its
    /// rename is durable, and so is the state it was read from (flushed).
    /// `installed` ends an incoming snapshot: any purge that waited for it
    /// is finished.
    pub(crate) fn advance(
        &self,
        covered: Option<LogId<NodeId>>,
        installed: bool,
    ) -> Result<(), StoreError> {
        let mut h = self.lock();
        h.covered = h.covered.max(covered);
        if installed {
            h.receiving = false;
        }
        self.catch_up(&mut h)
    }

    fn catch_up(&self, h: &mut Horizon) -> Result<(), StoreError> {
        let allowed = match h.receiving {
            true => h.wanted.min(h.covered),
            false => h.wanted,
        };
        let Some(target) = allowed else {
            return Ok(());
        };
        if Some(target) <= h.purged {
            return Ok(());
        }
        if Some(target) > h.covered {
            // No snapshot's flush covers it: make the state durable
            // through everything applied (openraft purges only applied
            // entries) before the entries behind it go.
            self.engine.flush_all()?;
        }
        let mut batch = self.engine.batch();
        batch.put(
            Cf::RaftMeta,
            schema::RAFT_LAST_PURGED,
            &bincode::serialize(&target)?,
        )?;
        // Synced before any segment goes: at open, the segments the purge
        // point covers are removed unread, and the log starts after it.
        self.engine.write(batch, true)?;
        self.log.purge_upto(target.index)?;
        h.purged = Some(target);
        Ok(())
    }
}

/// The last purged log id on disk.
pub(crate) fn read_last_purged(engine: &Engine) -> Result<Option<LogId<NodeId>>, StoreError> {
    match engine.get(Cf::RaftMeta, schema::RAFT_LAST_PURGED)? {
        Some(bytes) => Ok(Some(bincode::deserialize::<LogId<NodeId>>(&bytes)?)),
        None => Ok(None),
    }
}

/// A snapshot install racing openraft's log purge, in openraft's order:
/// the purge up to an incoming snapshot comes before the install (which a
/// crash may prevent). The log on disk must never be purged past the
/// snapshot on disk, and the purge is finished once the install is.
#[cfg(test)]
mod tests {
    use openraft::storage::{RaftLogReader, RaftLogStorage, RaftStateMachine, Snapshot};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, RaftSnapshotBuilder};

    use super::*;
    use crate::command::{Command, Op, PutRequest, Txn};
    use crate::{LogStore, StateMachine, TypeConfig};

    fn log_id(index: u64) -> LogId<u64> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    fn put(i: u64) -> Command {
        Command::Txn(Txn {
            success: vec![Op::Put(PutRequest::new(format!("k/{i}"), i.to_string()))],
            ..Txn::default()
        })
    }

    fn entries(range: std::ops::RangeInclusive<u64>) -> Vec<Entry<TypeConfig>> {
        range
            .map(|i| Entry {
                log_id: log_id(i),
                payload: EntryPayload::Normal(put(i).into()),
            })
            .collect()
    }

    /// Appends `entries` to the log, synced.
    fn append(log: &LogStore, entries: Vec<Entry<TypeConfig>>) {
        log.append_synced(entries).expect("append");
    }

    /// A leader's snapshot of entries `1..=n`.
    async fn leader_snapshot(dir: &std::path::Path, n: u64) -> Snapshot<TypeConfig> {
        let (_log, mut sm, _store) = crate::open(dir).expect("open leader");
        sm.apply(entries(1..=n)).await.expect("apply");
        let mut builder = sm.get_snapshot_builder().await;
        builder.build_snapshot().await.expect("build")
    }

    /// A follower that has applied `1..=applied`, built its own snapshot there,
    /// and holds `1..=logged` in its log.
    async fn follower(
        dir: &std::path::Path,
        applied: u64,
        logged: u64,
    ) -> (LogStore, StateMachine) {
        let (log, mut sm, _store) = crate::open(dir).expect("open follower");
        append(&log, entries(1..=logged));
        sm.apply(entries(1..=applied)).await.expect("apply");
        let own = sm.get_snapshot_builder().await.build_snapshot().await;
        assert_eq!(
            own.expect("own snapshot").meta.last_log_id,
            Some(log_id(applied))
        );
        (log, sm)
    }

    /// Streams `snapshot` into `sm` the way openraft's receiver does.
    async fn receive(
        sm: &mut StateMachine,
        snapshot: Snapshot<TypeConfig>,
    ) -> Box<tokio::fs::File> {
        let mut incoming = sm.begin_receiving_snapshot().await.expect("receive");
        let mut source = snapshot.snapshot;
        tokio::io::copy(&mut source, &mut *incoming)
            .await
            .expect("copy");
        incoming
    }

    async fn purged(log: &mut LogStore) -> Option<LogId<u64>> {
        log.get_log_state()
            .await
            .expect("log state")
            .last_purged_log_id
    }

    async fn current_snapshot(sm: &mut StateMachine) -> Option<LogId<u64>> {
        sm.get_current_snapshot()
            .await
            .expect("current snapshot")
            .and_then(|s| s.meta.last_log_id)
    }

    #[tokio::test]
    async fn a_crash_between_openrafts_purge_and_the_install_leaves_a_restartable_node() {
        let dir = tempfile::tempdir().expect("tempdir");
        let snapshot = leader_snapshot(&dir.path().join("leader"), 40).await;
        let node = dir.path().join("follower");
        {
            let (mut log, mut sm) = follower(&node, 10, 12).await;
            let _incoming = receive(&mut sm, snapshot).await;
            // openraft's order: the purge up to the incoming snapshot comes
            // before the install, which the crash below never runs.
            log.purge(log_id(40)).await.expect("purge");
            assert!(purged(&mut log).await <= current_snapshot(&mut sm).await);
        }
        // The restart: the log is purged no further than the snapshot on disk
        // (openraft refuses to start otherwise), and the entries after it are
        // still there to catch up from.
        let (mut log, mut sm, _store) = crate::open(&node).expect("reopen");
        let snapshot_at = current_snapshot(&mut sm).await;
        assert_eq!(snapshot_at, Some(log_id(10)));
        assert!(purged(&mut log).await <= snapshot_at);
        let kept = log.try_get_log_entries(11..13).await.expect("read log");
        assert_eq!(kept.len(), 2, "entries 11 and 12 survive the crash");
    }

    #[tokio::test]
    async fn a_completed_install_finishes_the_purge_openraft_asked_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let snapshot = leader_snapshot(&dir.path().join("leader"), 40).await;
        let node = dir.path().join("follower");
        let meta = snapshot.meta.clone();
        {
            let (mut log, mut sm) = follower(&node, 10, 12).await;
            let incoming = receive(&mut sm, snapshot).await;
            log.purge(log_id(40)).await.expect("purge");
            assert!(purged(&mut log).await <= Some(log_id(10)), "deferred");
            sm.install_snapshot(&meta, incoming).await.expect("install");
            assert_eq!(current_snapshot(&mut sm).await, Some(log_id(40)));
            assert_eq!(purged(&mut log).await, Some(log_id(40)), "finished");
            let left = log.try_get_log_entries(0..100).await.expect("read log");
            assert!(
                left.is_empty(),
                "nothing left before the snapshot: {left:?}"
            );
        }
        let (mut log, mut sm, _store) = crate::open(&node).expect("reopen");
        assert_eq!(current_snapshot(&mut sm).await, Some(log_id(40)));
        assert_eq!(purged(&mut log).await, Some(log_id(40)));
    }

    /// Every file under `dir` with its length, in name order.
    fn listing(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64)> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let entry = entry.expect("entry");
            if entry.file_type().expect("type").is_dir() {
                files.extend(listing(&entry.path()));
            } else if let Ok(meta) = entry.metadata() {
                files.push((entry.path(), meta.len()));
            }
        }
        files.sort();
        files
    }

    /// Copies the store under `from` to `to` as a crash would leave it:
    /// the files on disk, none of the memtables. RocksDB may still be
    /// finishing background work (a flush's table files, a deletion of
    /// obsolete ones), so the copy is taken again until no file appeared,
    /// went or grew while it was made.
    fn crash_image(from: &std::path::Path, to: &std::path::Path) {
        loop {
            let before = listing(from);
            let _ = std::fs::remove_dir_all(to);
            let copied = before.iter().all(|(path, _)| {
                let rel = path.strip_prefix(from).expect("under from");
                let target = to.join(rel);
                std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
                rel.file_name().is_some_and(|n| n == "LOCK") || std::fs::copy(path, &target).is_ok()
            });
            if copied && listing(from) == before {
                return;
            }
        }
    }

    /// Applies `1..=30` with the log holding `1..=40`, purges the log up
    /// to `purge` (after a snapshot at 30 if `snapshot`), applies the rest
    /// and takes a crash image; then restarts it as a node does and checks
    /// that everything comes back. The applied index the restart found
    /// before openraft's start re-applied the log.
    async fn restart_after_a_crash(snapshot: bool, purge: u64) -> u64 {
        use openraft::storage::StorageHelper;
        let dir = tempfile::tempdir().expect("tempdir");
        let (live, crashed) = (dir.path().join("live"), dir.path().join("crashed"));
        {
            let (mut log, mut sm, _store) = crate::open(&live).expect("open");
            append(&log, entries(1..=40));
            log.save_committed(Some(log_id(40)))
                .await
                .expect("committed");
            sm.apply(entries(1..=30)).await.expect("apply");
            if snapshot {
                let built = sm.get_snapshot_builder().await.build_snapshot().await;
                assert_eq!(built.expect("build").meta.last_log_id, Some(log_id(30)));
            }
            log.purge(log_id(purge)).await.expect("purge");
            sm.apply(entries(31..=40)).await.expect("apply");
            crash_image(&live, &crashed);
        }
        let (mut log, mut sm, store) = crate::open(&crashed).expect("reopen");
        let found = sm.applied_state().await.expect("applied").0;
        assert_eq!(
            store.applied().revision.0,
            found.map_or(0, |l| l.index),
            "data and last-applied agree"
        );
        assert_eq!(purged(&mut log).await, Some(log_id(purge)));
        StorageHelper::new(&mut log, &mut sm)
            .get_initial_state()
            .await
            .expect("start");
        assert_eq!(
            sm.applied_state().await.expect("applied").0,
            Some(log_id(40))
        );
        assert_eq!(store.applied().revision.0, 40);
        found.map_or(0, |l| l.index)
    }

    /// The state machine's rows skip the WAL, so a crash takes the state
    /// back to its last flush. A snapshot build flushes before the log
    /// behind it may go (openraft's order: snapshot, then a purge behind
    /// it), so a restart finds the log it must re-apply from.
    #[tokio::test]
    async fn a_crash_after_a_purge_behind_a_snapshot_finds_the_log_to_re_apply_from() {
        let found = restart_after_a_crash(true, 25).await;
        assert_eq!(found, 30, "the state as the snapshot's flush left it");
    }

    /// A purge that no snapshot covers (openraft's storage suite asks for
    /// them) flushes the state first, for the same reason.
    #[tokio::test]
    async fn a_crash_after_a_purge_without_a_snapshot_finds_the_log_to_re_apply_from() {
        let found = restart_after_a_crash(false, 25).await;
        assert_eq!(found, 30, "the state as the purge's flush left it");
    }

    #[tokio::test]
    async fn a_store_whose_log_was_purged_past_its_snapshot_is_repaired_at_open() {
        // What the crash loop left on disk before the purge horizon existed:
        // the state machine applied up to 30, the log purged up to 30, the
        // snapshot file at 10.
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut log, mut sm) = follower(dir.path(), 10, 30).await;
            sm.apply(entries(11..=30)).await.expect("apply");
            // No snapshot incoming, so the purge is done as asked.
            log.purge(log_id(30)).await.expect("purge");
            assert_eq!(purged(&mut log).await, Some(log_id(30)));
            assert_eq!(current_snapshot(&mut sm).await, Some(log_id(10)));
        }
        let (mut log, mut sm, _store) = crate::open(dir.path()).expect("reopen");
        assert_eq!(current_snapshot(&mut sm).await, Some(log_id(30)));
        assert_eq!(purged(&mut log).await, Some(log_id(30)));
    }

    #[tokio::test]
    async fn a_log_purged_past_both_snapshot_and_state_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut log, _sm) = follower(dir.path(), 10, 30).await;
            log.purge(log_id(30)).await.expect("purge");
        }
        let err = crate::open(dir.path()).expect_err("refused");
        let message = err.to_string();
        assert!(
            message.contains("remove its data directory"),
            "unexpected error: {message}"
        );
    }
}

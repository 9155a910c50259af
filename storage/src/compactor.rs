//! Physical compaction: deleting, in the background and in bounded steps,
//! the history rows and events a compaction made unreadable.
//!
//! A [`Command::Compact`](crate::Command::Compact) is applied *logically*:
//! the apply only moves the compaction point (`SM_COMPACTED`), one row, so
//! no apply (and no write queued behind it) waits for history to be
//! deleted, however much there is. From that moment reads and watches
//! below the point fail ([`StoreError::Compacted`]), and a read at or above
//! it never needs a row the purge removes: the rows still waiting to go
//! are unreachable. The compactor then removes them, one step of at most
//! `max_revisions` revisions at a time ([`Compactor::step`]), as etcd's
//! scheduled compaction does.
//!
//! # Invariants
//!
//! - **Progress lives in the data.** The events of revisions below the
//!   lowest `events` row are gone, and so is every history row only they
//!   could reach. A step deletes one revision range's history rows and its
//!   events in one atomic batch, so a crash between steps (or inside one)
//!   resumes exactly where the last completed step left off, and a
//!   snapshot carries the rows still to purge, which its installer purges.
//! - **Steps change nothing a read can see.** A step to `to` (at most the
//!   compaction point) removes what a compaction to `to` would, which is
//!   nothing a read at or above the compaction point reaches; and splitting
//!   a purge into steps leaves exactly the rows one whole step would (each
//!   step re-reads the events of its own lower bound).
//! - **A purged key keeps at most one history row below the purge point**
//!   (its last state, or the previous state an event at the point refers
//!   to). A step relies on it: it reads each key it touches backwards from
//!   its end and stops at that row, so its cost does not grow with what
//!   earlier steps deleted.
//! - **Steps and applies never touch the same rows.** A step removes only
//!   rows at revisions at or below the compaction point, which no later
//!   apply writes.
//! - **No step runs during a snapshot install.** A step's deletions are
//!   computed from the rows an install replaces, so the install holds the
//!   purge lock for its whole length ([`Compactor::exclusive`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{watch, Notify};

use crate::command::Revision;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::mvcc;
use crate::schema::{self, Cf};

/// Revisions purged per step by [`Compactor::run`]: about 40 ms of work
/// for 2,000 creates on a 2-core machine, about 100 ms when the keys have
/// long histories (`bench scale`, BENCHMARKS.md), so a purge never holds
/// the disk or a core for long, while a backlog of 100,000 creates still
/// clears in about 2 s.
pub const PURGE_STEP_REVISIONS: u64 = 2_000;

/// What one purge step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeStep {
    /// History is purged up to the compaction point: nothing left to do.
    Done {
        /// The compaction point, now physical.
        purged: Revision,
    },
    /// History is purged up to `purged`, below the compaction point.
    More {
        /// How far history is physically purged now.
        purged: Revision,
    },
}

/// The physical compactor of one store; shared by the store's read handle
/// (which runs the purge), and the state machine (which wakes it after a
/// compaction and holds it off during an install). Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Compactor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Told when a compaction or an install may have left rows to purge.
    wake: Notify,
    /// How far history is physically purged.
    purged: watch::Sender<Revision>,
    /// Held by each step and by each snapshot install.
    lock: Mutex<()>,
    /// Set when the state machine is gone: the purge task ends.
    closed: AtomicBool,
}

impl Compactor {
    /// A compactor for `engine` as it is now (an interrupted purge is
    /// picked up where it stopped).
    pub(crate) fn open(engine: &Engine) -> Result<Self, StoreError> {
        let purged = purged_to(engine, mvcc::read_revision(engine, schema::SM_COMPACTED)?)?;
        Ok(Self {
            inner: Arc::new(Inner {
                wake: Notify::new(),
                purged: watch::Sender::new(purged),
                lock: Mutex::new(()),
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// Asks the purge task to look for rows to purge.
    pub(crate) fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// Ends the purge task (the state machine, and so the store, is closing).
    pub(crate) fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_one();
    }

    /// Holds every purge step off while the guard lives (a snapshot install
    /// replaces the rows a step reads and deletes).
    pub(crate) fn exclusive(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data: a panic while it was held leaves
        // nothing inconsistent to protect.
        self.inner
            .lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How far history is physically purged (at most the compaction point).
    pub(crate) fn purged(&self) -> Revision {
        *self.inner.purged.borrow()
    }

    /// A receiver of [`Compactor::purged`].
    pub(crate) fn subscribe(&self) -> watch::Receiver<Revision> {
        self.inner.purged.subscribe()
    }

    /// Purges at most `max_revisions` revisions of history below the
    /// compaction point, in one atomic batch. Blocking (RocksDB scans).
    pub(crate) fn step(
        &self,
        engine: &Engine,
        max_revisions: u64,
    ) -> Result<PurgeStep, StoreError> {
        let _held = self.exclusive();
        let compacted = mvcc::read_revision(engine, schema::SM_COMPACTED)?;
        let from = purged_to(engine, compacted)?;
        if from >= compacted {
            self.inner.purged.send_replace(compacted);
            return Ok(PurgeStep::Done { purged: compacted });
        }
        let to = Revision(compacted.0.min(from.0.saturating_add(max_revisions.max(1))));
        let mut batch = engine.batch();
        let keys = mvcc::stage_purge(engine, &mut batch, from, to)?;
        // Without the WAL, like the apply that set the compaction point:
        // a crash takes both back to the same flush, and a purge lost in
        // it is redone from the events it had not yet deleted.
        engine.write_unlogged(batch)?;
        self.inner.purged.send_replace(to);
        tracing::debug!(from = from.0, to = to.0, keys, "purged compacted history");
        Ok(if to >= compacted {
            PurgeStep::Done { purged: to }
        } else {
            PurgeStep::More { purged: to }
        })
    }

    /// Purges in steps of [`PURGE_STEP_REVISIONS`] whenever woken, until
    /// [`Compactor::close`]. Each step runs on tokio's blocking pool.
    pub(crate) async fn run(self, engine: Engine) {
        loop {
            if self.inner.closed.load(Ordering::Acquire) {
                return;
            }
            let (compactor, db) = (self.clone(), engine.clone());
            let span = tracing::Span::current();
            let step = tokio::task::spawn_blocking(move || {
                span.in_scope(|| compactor.step(&db, PURGE_STEP_REVISIONS))
            })
            .await;
            match step {
                Ok(Ok(PurgeStep::More { .. })) => continue,
                Ok(Ok(PurgeStep::Done { purged })) => {
                    tracing::debug!(purged = purged.0, "compacted history purged");
                }
                // The rows stay, unreachable; the next wake tries again.
                Ok(Err(e)) => tracing::warn!(error = %e, "purging compacted history failed"),
                Err(e) => tracing::warn!(error = %e, "the purge task failed"),
            }
            self.inner.wake.notified().await;
        }
    }
}

/// How far history is physically purged, given the compaction point: the
/// lowest revision that still has events, or `compacted` when none is
/// below it.
fn purged_to(engine: &Engine, compacted: Revision) -> Result<Revision, StoreError> {
    let lowest = match engine.scan(Cf::Events, &[], None)?.next() {
        Some(row) => {
            let (k, _) = row?;
            schema::decode_u64(&k)
                .ok_or_else(|| StoreError::Corrupt("event key is not 8 bytes".into()))?
        }
        None => return Ok(compacted),
    };
    Ok(Revision(lowest.min(compacted.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixture::{delete, put, Fixture};

    /// A row: its column family, key and value.
    type Row = (Cf, Box<[u8]>, Box<[u8]>);

    /// Every row of the MVCC column families.
    fn mvcc_rows(f: &Fixture) -> Vec<Row> {
        let mut rows = Vec::new();
        for cf in [Cf::Kv, Cf::History, Cf::Events] {
            for row in f.store.engine.scan(cf, &[], None).expect("scan") {
                let (k, v) = row.expect("row");
                rows.push((cf, k, v));
            }
        }
        rows
    }

    /// A history of puts, overwrites and deletes over a few keys.
    async fn churn(f: &mut Fixture) {
        for i in 0..40u32 {
            let key = format!("k{}", i % 7);
            if i % 5 == 4 {
                f.txn(vec![delete(&key)]).await;
            } else {
                f.txn(vec![put(&key, &i.to_string()), put("hot", &i.to_string())])
                    .await;
            }
        }
    }

    #[tokio::test]
    async fn a_compaction_is_logical_until_purged_and_reads_see_no_difference() {
        let mut f = Fixture::new();
        churn(&mut f).await;
        let before = mvcc_rows(&f);
        f.compact_logically(30).await;
        assert_eq!(f.store.applied().compacted, Revision(30));
        assert_eq!(mvcc_rows(&f), before, "the apply deleted nothing");
        assert!(f.store.purged() < Revision(30));
        let read = |f: &Fixture| {
            f.store
                .range(&crate::RangeRequest {
                    range: crate::KeyRange::prefix(""),
                    revision: Some(Revision(30)),
                    ..crate::RangeRequest::default()
                })
                .expect("range at the compaction point")
                .kvs
        };
        let logical = read(&f);
        assert!(matches!(
            f.store.events_after(Revision(10), 10),
            Err(StoreError::Compacted { .. })
        ));
        let events = f.store.events_after(Revision(29), 100).expect("events");

        f.store.purge_compacted_history(u64::MAX).expect("purge");
        assert_eq!(f.store.purged(), Revision(30));
        assert!(mvcc_rows(&f).len() < before.len(), "the purge deleted rows");
        assert_eq!(read(&f), logical, "the same read after the purge");
        assert_eq!(
            f.store.events_after(Revision(29), 100).expect("events"),
            events,
            "the same events after the purge"
        );
    }

    #[tokio::test]
    async fn a_purge_in_small_steps_leaves_exactly_the_rows_of_one_step() {
        let (mut whole, mut stepped) = (Fixture::new(), Fixture::new());
        for f in [&mut whole, &mut stepped] {
            churn(f).await;
            f.compact_logically(17).await;
            f.compact_logically(33).await;
        }
        assert_eq!(
            whole
                .store
                .compactor
                .step(&whole.store.engine, u64::MAX)
                .expect("one step"),
            PurgeStep::Done {
                purged: Revision(33)
            }
        );
        let mut steps = 0;
        while let PurgeStep::More { purged } = stepped
            .store
            .compactor
            .step(&stepped.store.engine, 3)
            .expect("step")
        {
            assert!(purged < Revision(33));
            steps += 1;
        }
        assert!(steps >= 10, "{steps} steps");
        assert_eq!(mvcc_rows(&stepped), mvcc_rows(&whole));
    }

    /// What the purge's backward read relies on: once purged to a
    /// revision, no key has more than one history row below it.
    #[tokio::test]
    async fn a_purged_key_keeps_at_most_one_row_below_the_purge_point() {
        for step in 1..=4 {
            let mut f = Fixture::new();
            churn(&mut f).await;
            f.compact_logically(33).await;
            loop {
                let done = f.store.compactor.step(&f.store.engine, step).expect("step");
                let purged = f.store.purged();
                let mut below: std::collections::HashMap<Vec<u8>, usize> = Default::default();
                for row in f.store.engine.scan(Cf::History, &[], None).expect("scan") {
                    let (k, _) = row.expect("row");
                    let (key, revision) = schema::split_history_key(&k).expect("history key");
                    if revision < purged.0 {
                        *below.entry(key).or_default() += 1;
                    }
                }
                assert!(
                    below.values().all(|n| *n <= 1),
                    "steps of {step}, purged to {purged}: {below:?}"
                );
                if matches!(done, PurgeStep::Done { .. }) {
                    break;
                }
            }
        }
    }

    #[tokio::test]
    async fn an_interrupted_purge_resumes_after_a_reopen() {
        let mut f = Fixture::new();
        churn(&mut f).await;
        f.compact_logically(35).await;
        assert!(matches!(
            f.store.compactor.step(&f.store.engine, 5),
            Ok(PurgeStep::More { .. })
        ));
        let mut f = f.reopen();
        let resumed = f.store.purged();
        assert!(
            resumed > Revision(1) && resumed < Revision(35),
            "picks up where it stopped: {resumed}"
        );
        f.store.purge_compacted_history(u64::MAX).expect("purge");
        assert_eq!(f.store.purged(), Revision(35));
        f.txn(vec![put("after", "1")]).await;
    }

    #[tokio::test]
    async fn the_purge_task_follows_compactions_and_ends_with_the_state_machine() {
        let mut f = Fixture::new();
        churn(&mut f).await;
        let task = tokio::spawn(f.store.compactor.clone().run(f.store.engine.clone()));
        let mut purged = f.store.compactor.subscribe();
        f.compact_logically(25).await;
        purged
            .wait_for(|p| *p >= Revision(25))
            .await
            .expect("purged to 25");
        drop(f);
        task.await
            .expect("the task ends once the state machine is dropped");
    }
}

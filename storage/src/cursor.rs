//! The event cursor: the one reader of the revision-ordered event log for
//! everything that follows it (the watch cache's feed, the etcd watch, and
//! the REST watch once it is behind the watch cache's ring).
//!
//! A cursor stands after a revision and reads forward in batches: each
//! step reads the events of at most [`EVENT_BATCH`] revisions, whole
//! revisions only, from one consistent view, and moves past them. What a
//! step finds is one [`EventStep`]:
//!
//! - [`EventStep::Events`]: the next revisions' events, ascending;
//! - [`EventStep::CaughtUp`]: nothing after the cursor yet;
//! - [`EventStep::Compacted`]: the cursor's next revision is older than the
//!   compaction point, so the events it needs are gone. This is an outcome,
//!   not an error: each follower has its own answer (the watch cache
//!   rebuilds, the etcd watch is canceled with `compact_revision`, the
//!   REST watch ends with `410 Expired`), and none of them has to recognise
//!   [`StoreError::Compacted`] itself.
//!
//! Errors are the store's read errors; [`StoreError::Installing`] means a
//! snapshot install replaced the state mid-read, and the step can be
//! retried once the install is done (the applied-state channel moves).
//!
//! A step the ring of recent events holds reads no storage
//! ([`EventCursor::next_in_memory`]), and [`EventCursor::next`] serves it
//! on the calling task. Any other step scans RocksDB: [`EventCursor::next`]
//! runs it on the blocking pool ([`Store::run_blocking`]),
//! [`EventCursor::next_blocking`] on the calling thread (for code already
//! on the blocking pool).

use crate::command::{Revision, RevisionEvents};
use crate::error::StoreError;
use crate::Store;

/// Revisions a cursor reads per step. Followers use the same number for
/// their own batches (events per drain of the watch cache's ring, objects
/// per chunk of a watch's initial state), so a burst is handled in steps
/// of one size everywhere.
pub const EVENT_BATCH: usize = 256;

/// What one step of an [`EventCursor`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventStep {
    /// The events of the next revisions after the cursor, ascending by
    /// revision, at most [`EVENT_BATCH`] revisions and never part of one;
    /// never empty. The cursor now stands at the last revision.
    Events(Vec<RevisionEvents>),
    /// The log holds nothing after the cursor. `revision` is where the
    /// cursor stands now: the store's applied revision as of just before
    /// the read (every revision up to it was already in the log, so there
    /// is nothing up to it left to follow), or the cursor's own position if
    /// that is further on.
    CaughtUp {
        /// Where the cursor stands now.
        revision: Revision,
    },
    /// The cursor's next revision, `requested`, is older than the
    /// compaction point `compacted`: its events are gone. The cursor does
    /// not move.
    Compacted {
        /// The first revision the cursor still needed.
        requested: Revision,
        /// The store's compaction point; nothing before it is kept.
        compacted: Revision,
    },
}

/// A position in the event log, read forward in batches
/// ([`Store::events`]). Cheap to make; it holds a [`Store`] handle and a
/// revision, and no events between steps.
#[derive(Debug, Clone)]
pub struct EventCursor {
    store: Store,
    after: Revision,
    batch: usize,
}

impl EventCursor {
    pub(crate) fn new(store: Store, after: Revision) -> Self {
        Self {
            store,
            after,
            batch: EVENT_BATCH,
        }
    }

    /// A cursor reading `batch` revisions per step (tests of batching).
    #[cfg(test)]
    fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// The revision the cursor stands after: every event up to it has been
    /// read (or was never asked for).
    pub fn after(&self) -> Revision {
        self.after
    }

    /// The next step: on this task when the ring of recent events holds
    /// it ([`EventCursor::next_in_memory`]), else read on tokio's blocking
    /// pool.
    pub async fn next(&mut self) -> Result<EventStep, StoreError> {
        if let Some(step) = self.next_in_memory() {
            // A follower far behind may take many steps from memory in a
            // row without another await: it yields once its task has used
            // up its turn, as it would on an I/O resource.
            tokio::task::coop::consume_budget().await;
            return step;
        }
        let (after, batch) = (self.after, self.batch);
        let step = self
            .store
            .run_blocking(move |store| step(store, after, batch))
            .await?;
        self.advance(&step);
        Ok(step)
    }

    /// The next step if it needs no storage read: the ring of recent
    /// events holds every revision after the cursor up to the applied one
    /// ([`Store::events_after_in_memory`]). Cheap enough for an async
    /// worker; a follower that keeps up with the log is served here every
    /// time. `None`, and the cursor does not move, when the step must read
    /// RocksDB (it is behind the ring, or behind the compaction point).
    pub fn next_in_memory(&mut self) -> Option<Result<EventStep, StoreError>> {
        let applied = self.store.applied().revision;
        let step = match self.store.events_after_in_memory(self.after, self.batch)? {
            Ok(events) => found(self.after, applied, events),
            Err(e) => return Some(Err(e)),
        };
        self.advance(&step);
        Some(Ok(step))
    }

    /// The next step, read on this thread (blocking: a RocksDB scan).
    pub fn next_blocking(&mut self) -> Result<EventStep, StoreError> {
        let step = step(&self.store, self.after, self.batch)?;
        self.advance(&step);
        Ok(step)
    }

    fn advance(&mut self, step: &EventStep) {
        match step {
            EventStep::Events(events) => {
                if let Some((last, _)) = events.last() {
                    self.after = *last;
                }
            }
            EventStep::CaughtUp { revision } => self.after = *revision,
            EventStep::Compacted { .. } => {}
        }
    }
}

/// One step from `after`: the only place the event log's compaction error
/// becomes an outcome.
fn step(store: &Store, after: Revision, batch: usize) -> Result<EventStep, StoreError> {
    // Taken before the read: every revision up to it is in the view the
    // read takes, so an empty read proves there is nothing up to it.
    let applied = store.applied().revision;
    match store.events_after(after, batch) {
        Ok(events) => Ok(found(after, applied, events)),
        Err(StoreError::Compacted {
            requested,
            compacted,
        }) => Ok(EventStep::Compacted {
            requested,
            compacted,
        }),
        Err(e) => Err(e),
    }
}

/// The step that read `events` after `after`, `applied` being the applied
/// revision taken before the read.
fn found(after: Revision, applied: Revision, events: Vec<RevisionEvents>) -> EventStep {
    if events.is_empty() {
        EventStep::CaughtUp {
            revision: after.max(applied),
        }
    } else {
        EventStep::Events(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::EventKind;
    use crate::test_fixture::{delete, put, Fixture};

    /// A step's revisions and, per revision, its events' kinds and keys.
    fn summary(step: &EventStep) -> Vec<(u64, Vec<(EventKind, String)>)> {
        let EventStep::Events(events) = step else {
            panic!("expected events, got {step:?}");
        };
        events
            .iter()
            .map(|(rev, events)| {
                let events = events
                    .iter()
                    .map(|e| {
                        assert_eq!(e.kv.mod_revision, *rev, "an event carries its revision");
                        (e.kind, String::from_utf8_lossy(&e.kv.key).into_owned())
                    })
                    .collect();
                (rev.0, events)
            })
            .collect()
    }

    #[tokio::test]
    async fn an_empty_log_is_caught_up_at_zero() {
        let f = Fixture::new();
        let mut cursor = f.store.events(Revision::ZERO);
        assert_eq!(
            cursor.next_blocking().expect("step"),
            EventStep::CaughtUp {
                revision: Revision::ZERO
            }
        );
        assert_eq!(cursor.after(), Revision::ZERO);
    }

    #[tokio::test]
    async fn steps_read_whole_revisions_in_batches_in_order_then_catch_up() {
        let mut f = Fixture::new();
        f.txn(vec![put("a", "1")]).await; // 1
        f.txn(vec![put("b", "1"), put("c", "1")]).await; // 2: two events
        f.txn(vec![delete("a")]).await; // 3
        f.txn(vec![put("a", "2")]).await; // 4
        f.txn(vec![put("d", "1"), delete("b")]).await; // 5: two events
        use EventKind::{Delete, Put};
        let s = |k: &str| k.to_string();

        let mut cursor = f.store.events(Revision::ZERO).with_batch(2);
        let first = cursor.next_blocking().expect("step 1");
        assert_eq!(
            summary(&first),
            vec![
                (1, vec![(Put, s("a"))]),
                (2, vec![(Put, s("b")), (Put, s("c"))])
            ]
        );
        assert_eq!(cursor.after(), Revision(2));
        let second = cursor.next_blocking().expect("step 2");
        assert_eq!(
            summary(&second),
            vec![(3, vec![(Delete, s("a"))]), (4, vec![(Put, s("a"))])]
        );
        let third = cursor.next_blocking().expect("step 3");
        assert_eq!(
            summary(&third),
            vec![(5, vec![(Put, s("d")), (Delete, s("b"))])],
            "a revision's events stay together even past the batch's end"
        );
        assert_eq!(cursor.after(), Revision(5));
        assert_eq!(
            cursor.next_blocking().expect("step 4"),
            EventStep::CaughtUp {
                revision: Revision(5)
            }
        );

        // New writes are found from where the cursor stands.
        f.txn(vec![put("e", "1")]).await; // 6
        assert_eq!(
            summary(&cursor.next_blocking().expect("step 5")),
            vec![(6, vec![(Put, s("e"))])]
        );
    }

    #[tokio::test]
    async fn a_full_batch_is_event_batch_revisions() {
        let mut f = Fixture::new();
        for i in 0..EVENT_BATCH + 3 {
            f.txn(vec![put(&format!("k{i}"), "v")]).await;
        }
        let mut cursor = f.store.events(Revision::ZERO);
        let EventStep::Events(first) = cursor.next_blocking().expect("step") else {
            panic!("expected events");
        };
        assert_eq!(first.len(), EVENT_BATCH);
        assert_eq!(cursor.after(), Revision(EVENT_BATCH as u64));
        let EventStep::Events(rest) = cursor.next_blocking().expect("step") else {
            panic!("expected events");
        };
        let revisions: Vec<u64> = rest.iter().map(|(r, _)| r.0).collect();
        let expected: Vec<u64> = (EVENT_BATCH as u64 + 1..=EVENT_BATCH as u64 + 3).collect();
        assert_eq!(revisions, expected);
    }

    #[tokio::test]
    async fn a_step_the_ring_holds_is_read_from_memory_and_equals_the_log() {
        let mut f = Fixture::new();
        for i in 0..5 {
            f.txn(vec![put(&format!("k{i}"), "v")]).await; // 1..=5
        }
        let mut memory = f.store.events(Revision(1)).with_batch(3);
        let mut log = f.store.events(Revision(1)).with_batch(3);
        let from_memory = memory.next_in_memory().expect("held").expect("step");
        assert_eq!(from_memory, log.next_blocking().expect("step"));
        assert_eq!(summary(&from_memory).len(), 3);
        assert_eq!(memory.after(), Revision(4));
        let rest = memory.next_in_memory().expect("held").expect("step");
        assert_eq!(rest, log.next_blocking().expect("step"));
        assert_eq!(
            memory.next_in_memory().expect("held").expect("step"),
            EventStep::CaughtUp {
                revision: Revision(5)
            }
        );

        // After a restart the ring starts empty: the step needs the log,
        // and the cursor does not move until it is read there.
        drop((memory, log)); // their store handles keep the database open
        let mut f = f.reopen();
        let mut behind = f.store.events(Revision(2));
        assert!(behind.next_in_memory().is_none());
        assert_eq!(behind.after(), Revision(2));
        assert_eq!(
            summary(&behind.next().await.expect("step")),
            summary(&f.store.events(Revision(2)).next_blocking().expect("step"))
        );
        // From the first revision the ring holds again, memory serves.
        f.txn(vec![put("k5", "v")]).await; // 6
        let mut caught_up = f.store.events(Revision(5));
        let step = caught_up.next_in_memory().expect("held").expect("step");
        assert_eq!(summary(&step).first().map(|(r, _)| *r), Some(6));

        // Below the compaction point memory never answers: the log's
        // outcome is `Compacted`.
        f.compact(4).await;
        let mut compacted = f.store.events(Revision(2));
        assert!(compacted.next_in_memory().is_none());
        assert!(matches!(
            compacted.next().await.expect("step"),
            EventStep::Compacted { .. }
        ));
    }

    #[tokio::test]
    async fn compaction_is_an_outcome_at_the_boundary_and_the_cursor_stays() {
        let mut f = Fixture::new();
        for i in 0..5 {
            f.txn(vec![put("a", &i.to_string())]).await; // 1..=5
        }
        f.compact(3).await;

        // Next revision 2 is older than the compaction point 3.
        let mut behind = f.store.events(Revision(1));
        let outcome = EventStep::Compacted {
            requested: Revision(2),
            compacted: Revision(3),
        };
        assert_eq!(behind.next_blocking().expect("step"), outcome);
        assert_eq!(behind.after(), Revision(1), "a compacted cursor stays");
        assert_eq!(behind.next_blocking().expect("again"), outcome);

        // Next revision 3 is the compaction point: compaction keeps its
        // events (and the previous state they point at).
        let mut at = f.store.events(Revision(2));
        let step = at.next_blocking().expect("step");
        assert_eq!(summary(&step).first().map(|(r, _)| *r), Some(3));
        let EventStep::Events(events) = step else {
            unreachable!()
        };
        let prev = events[0].1[0]
            .prev_kv
            .as_ref()
            .expect("prev_kv of revision 3");
        assert_eq!(prev.value, b"1".to_vec());
        assert_eq!(at.after(), Revision(5));
    }

    #[tokio::test]
    async fn a_cursor_ahead_of_the_store_stays_where_it_is() {
        let mut f = Fixture::new();
        f.txn(vec![put("a", "1")]).await; // 1
        let mut ahead = f.store.events(Revision(10));
        assert_eq!(
            ahead.next_blocking().expect("step"),
            EventStep::CaughtUp {
                revision: Revision(10)
            }
        );
    }

    /// The ring holds every revision here, so `next` steps from memory;
    /// `a_step_the_ring_holds_is_read_from_memory_and_equals_the_log`
    /// covers its reads on the blocking pool after a restart.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn next_steps_like_next_blocking() {
        let mut f = Fixture::new();
        f.txn(vec![put("a", "1")]).await; // 1
        f.txn(vec![put("b", "1")]).await; // 2
        let mut cursor = f.store.events(Revision::ZERO).with_batch(1);
        assert_eq!(
            summary(&cursor.next().await.expect("step")),
            vec![(1, vec![(EventKind::Put, "a".to_string())])]
        );
        assert_eq!(
            summary(&cursor.next().await.expect("step")),
            vec![(2, vec![(EventKind::Put, "b".to_string())])]
        );
        assert_eq!(
            cursor.next().await.expect("step"),
            EventStep::CaughtUp {
                revision: Revision(2)
            }
        );
    }
}

//! The latest applied revisions' events, kept in memory as the state
//! machine applied them.
//!
//! Everything that follows the event log (the watch cache's feed on every
//! node, etcd watches) reads the newest revisions right after they are
//! applied. From RocksDB each such read is a scan of `events` and, per
//! event, a read of its states from `history`; from here it is a shared
//! handle on the revision's events: every reader gets the same ones, and
//! copies only what it keeps.
//!
//! Invariant: [`RecentEvents`] holds every revision from its first to its
//! last, each with exactly the events the `events` row of that revision
//! loads to, and its last is the newest revision the state machine wrote.
//! The state machine pushes each revision once its batch is written; a
//! revision that does not follow the last (the first after a restart)
//! starts the run again; a snapshot install empties it. At most
//! [`RECENT_EVENT_BYTES`] of values are kept, oldest revisions dropped
//! first. A read is served from here only when the run holds the
//! revision it starts at; anything older reads RocksDB.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::command::{Event, KeyValue, RevisionEvents};
use crate::ids::Revision;
use crate::recent::RecentRun;

/// How many bytes of keys and values the ring keeps: a few thousand
/// revisions of 1 KiB objects, more than a follower of the log lags by
/// under load.
const RECENT_EVENT_BYTES: usize = 16 << 20;

/// The ring, shared by the state machine (which pushes) and every
/// [`crate::Store`] handle (which reads). Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct RecentEvents {
    ring: Arc<Mutex<RecentRun<Arc<[Event]>>>>,
}

impl Default for RecentEvents {
    fn default() -> Self {
        Self {
            ring: Arc::new(Mutex::new(RecentRun::new(RECENT_EVENT_BYTES))),
        }
    }
}

fn held_bytes(events: &[Event]) -> usize {
    let kv = |kv: &KeyValue| kv.key.len() + kv.value.len();
    events
        .iter()
        .map(|e| kv(&e.kv) + e.prev_kv.as_ref().map_or(0, kv))
        .sum()
}

impl RecentEvents {
    fn ring(&self) -> MutexGuard<'_, RecentRun<Arc<[Event]>>> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `revision`'s events, written to storage just now.
    pub(crate) fn push(&self, revision: Revision, events: Vec<Event>) {
        let bytes = held_bytes(&events);
        self.ring().push(revision.0, events.into(), bytes);
    }

    /// Forgets everything (the whole state is being replaced).
    pub(crate) fn clear(&self) {
        self.ring().clear();
    }

    /// The events of the revisions after `after`, at most `limit`
    /// revisions, if the ring holds the revision after `after` (or `after`
    /// is its last) and reaches at least `through`, the store's applied
    /// revision when the read began; `None` otherwise.
    pub(crate) fn after(
        &self,
        after: Revision,
        limit: usize,
        through: Revision,
    ) -> Option<Vec<RevisionEvents>> {
        let ring = self.ring();
        if ring.last()? < through.0 {
            return None;
        }
        let read = ring.range(after.next().0, None)?;
        Some(
            read.take(limit)
                .map(|(revision, events)| (Revision(revision), Arc::clone(events)))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::command::EventKind;

    use super::*;

    fn put(revision: u64, bytes: usize) -> Vec<Event> {
        vec![Event {
            kind: EventKind::Put,
            kv: KeyValue {
                value: vec![b'v'; bytes].into(),
                create_revision: Revision(1),
                version: 1,
                ..KeyValue::deleted(bytes::Bytes::from_static(b"k"), Revision(revision))
            },
            prev_kv: None,
        }]
    }

    fn revisions(read: Option<Vec<RevisionEvents>>) -> Option<Vec<u64>> {
        read.map(|r| r.iter().map(|(rev, _)| rev.0).collect())
    }

    #[test]
    fn the_ring_serves_a_contiguous_run_that_reaches_the_applied_revision() {
        let recent = RecentEvents::default();
        assert_eq!(revisions(recent.after(Revision(0), 10, Revision(0))), None);
        for r in 5..=9 {
            recent.push(Revision(r), put(r, 10));
        }
        let read = recent.after(Revision(5), 2, Revision(9));
        assert_eq!(revisions(read.clone()), Some(vec![6, 7]));
        assert_eq!(read.map(|r| r[0].1.to_vec()), Some(put(6, 10)));
        // Every reader of a revision shares its events: nothing is copied.
        let (first, second) = (
            recent.after(Revision(5), 1, Revision(9)).expect("held"),
            recent.after(Revision(5), 1, Revision(9)).expect("held"),
        );
        assert!(Arc::ptr_eq(&first[0].1, &second[0].1));
        assert_eq!(
            revisions(recent.after(Revision(4), 10, Revision(9))),
            Some(vec![5, 6, 7, 8, 9])
        );
        assert_eq!(
            revisions(recent.after(Revision(9), 10, Revision(9))),
            Some(vec![])
        );
        // Older than the run, past it, or behind the applied revision: no.
        assert_eq!(revisions(recent.after(Revision(3), 10, Revision(9))), None);
        assert_eq!(revisions(recent.after(Revision(10), 10, Revision(9))), None);
        assert_eq!(revisions(recent.after(Revision(6), 10, Revision(10))), None);
        // A revision that does not follow starts the run again.
        recent.push(Revision(20), put(20, 10));
        assert_eq!(revisions(recent.after(Revision(8), 10, Revision(20))), None);
        assert_eq!(
            revisions(recent.after(Revision(19), 10, Revision(20))),
            Some(vec![20])
        );
        recent.clear();
        assert_eq!(
            revisions(recent.after(Revision(19), 10, Revision(20))),
            None
        );
    }

    /// What the log in RocksDB gives for the revisions after `after`.
    fn from_rocksdb(store: &crate::Store, after: u64) -> Vec<RevisionEvents> {
        store
            .engine
            .with_snapshot(|view| {
                crate::mvcc::MvccReader::new(view)?.events_after(Revision(after), 3)
            })
            .expect("read the log")
    }

    #[tokio::test]
    async fn reads_from_the_ring_equal_the_log_in_rocksdb() {
        use crate::command::{DeleteRequest, KeyRange, Op};
        use crate::test_fixture::{delete, put, Fixture};
        let mut f = Fixture::new();
        f.txn(vec![put("a", "1")]).await;
        f.txn(vec![put("b", "1"), put("a", "2")]).await;
        f.txn(vec![put("c", "1"), delete("b")]).await;
        f.txn(vec![put("c", "2"), put("b", "2")]).await;
        f.txn(vec![Op::Delete(DeleteRequest {
            range: KeyRange::prefix(b"".to_vec()),
            prev_kv: true,
        })])
        .await;
        f.txn(vec![put("a", "4")]).await;
        let current = f.store.applied().revision.0;
        assert_eq!(current, 6);
        for after in 0..=current {
            let read = f.store.events_after(Revision(after), 3).expect("events");
            assert_eq!(read, from_rocksdb(&f.store, after), "after {after}");
            assert_eq!(
                revisions(f.store.recent.after(Revision(after), 3, Revision(current))),
                Some(read.iter().map(|(r, _)| r.0).collect()),
                "served from the ring after {after}"
            );
        }
        // After a restart the ring starts empty: the log serves, and the
        // ring takes over from the next revision on.
        let mut f = f.reopen();
        assert_eq!(
            f.store.events_after(Revision(2), 3).expect("events"),
            from_rocksdb(&f.store, 2)
        );
        assert!(f.store.recent.after(Revision(2), 3, Revision(6)).is_none());
        f.txn(vec![put("d", "1")]).await;
        assert_eq!(
            revisions(f.store.recent.after(Revision(6), 3, Revision(7))),
            Some(vec![7])
        );
        assert_eq!(
            f.store.events_after(Revision(5), 3).expect("events"),
            from_rocksdb(&f.store, 5)
        );
        // Below the compaction point the read is refused, ring or not.
        f.compact_logically(7).await;
        assert!(matches!(
            f.store.events_after(Revision(5), 3),
            Err(crate::error::StoreError::Compacted { .. })
        ));
    }

    #[test]
    fn the_ring_drops_its_oldest_revisions_past_its_byte_budget() {
        let recent = RecentEvents::default();
        let value = RECENT_EVENT_BYTES / 4;
        for r in 1..=6 {
            recent.push(Revision(r), put(r, value));
        }
        // Each revision holds its value and a one-byte key.
        assert_eq!(
            revisions(recent.after(Revision(3), 10, Revision(6))),
            Some(vec![4, 5, 6])
        );
        assert_eq!(revisions(recent.after(Revision(2), 10, Revision(6))), None);
    }
}

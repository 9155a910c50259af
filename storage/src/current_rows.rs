//! The current state of the keys the latest entries wrote, in memory, so
//! that apply reads a key it (or a recent entry) just wrote without a
//! RocksDB lookup ([`CurrentRows`]; apply reads them through
//! [`crate::session_table::MirroredView`]). The store's one-key reads
//! ([`crate::Store::get`], the read before every guarded Kubernetes
//! write) answer from it too ([`SharedRows`]).
//!
//! Nearly every write reads its key's current row first: a put for the
//! key's create revision and version, a guarded write (every Kubernetes
//! update) for the revision it compares. Under a steady write load those
//! rows sit in RocksDB's memtables, and a memtable lookup walks a skip
//! list, one cache miss per level: about 6% of the nodes' CPU under puts
//! (BENCHMARKS.md, "Current rows in memory"). A key written by a recent
//! entry is answered from here instead; any other key is read from the
//! store as before.
//!
//! Invariant: every key held here is held with exactly the state its `kv`
//! row has in the engine (`None`: no row, the key was deleted). Only the
//! state machine's apply writes `kv` rows outside an install, and it
//! tells [`CurrentRows::record`] each entry's writes once they are
//! written; an install replaces the rows wholesale, and the state
//! machine [`CurrentRows::clear`]s this before it begins one. Debug builds
//! check every answer apply gets against the engine. For readers on
//! other threads the engine's rows and these change together: the state
//! machine writes an entry's rows and records its states under the write
//! lock, and a reader holds the read lock across its lookup here and, on
//! a miss, its read of the engine ([`SharedRows::get_or_read`]), so it
//! sees the entry's writes in both or in neither, never a state older
//! than one another reader already saw in the engine.
//!
//! Bounded by bytes, in two generations: writes go to the young one, and
//! when it holds [`GENERATION_BYTES`] it becomes the old one (the old one
//! is dropped). A lookup tries the young generation, then the old one. No
//! recency is tracked per read: a key read for a write is written at once,
//! which puts it in the young generation anyway.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;

use crate::command::KeyValue;
use crate::error::StoreError;

/// The bytes one generation holds before it is aged: keys, values and a
/// fixed [`ENTRY_OVERHEAD`] each. Two generations, so at most twice this
/// (plus the map's slack) stays in memory: the key states of about the
/// last 16 MiB of writes, which covers a working set of about 14,000
/// keys of 1 KiB.
pub(crate) const GENERATION_BYTES: usize = 16 << 20;

/// What an entry costs beyond its key and value bytes: the map's slot, the
/// key's and the state's headers.
const ENTRY_OVERHEAD: usize = 96;

/// The current state of recently written keys.
#[derive(Debug)]
pub(crate) struct CurrentRows {
    young: HashMap<Bytes, Option<KeyValue>>,
    old: HashMap<Bytes, Option<KeyValue>>,
    /// What `young` holds, counted as [`CurrentRows::cost`] counts.
    young_bytes: usize,
    /// Cap on a generation's bytes: [`GENERATION_BYTES`] but in tests.
    generation_bytes: usize,
}

impl CurrentRows {
    pub(crate) fn new() -> Self {
        Self::with_generation_bytes(GENERATION_BYTES)
    }

    fn with_generation_bytes(generation_bytes: usize) -> Self {
        Self {
            young: HashMap::new(),
            old: HashMap::new(),
            young_bytes: 0,
            generation_bytes,
        }
    }

    /// The state of `key` if held: `Some(None)` for a key known deleted,
    /// `None` for a key not held (read the store).
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Option<KeyValue>> {
        self.young.get(key).or_else(|| self.old.get(key))
    }

    /// Holds the states an entry's apply has just written, in the order it
    /// wrote them (a later state of a key replaces an earlier one).
    pub(crate) fn record(&mut self, writes: impl IntoIterator<Item = (Bytes, Option<KeyValue>)>) {
        for (key, state) in writes {
            let key_len = key.len();
            self.young_bytes += Self::cost(&key, &state);
            if let Some(replaced) = self.young.insert(key, state) {
                // The key's earlier entry, counted when it went in.
                self.young_bytes = self
                    .young_bytes
                    .saturating_sub(key_len + Self::cost_of_state(&replaced) + ENTRY_OVERHEAD);
            }
        }
        if self.young_bytes >= self.generation_bytes {
            self.old = std::mem::take(&mut self.young);
            self.young_bytes = 0;
        }
    }

    /// Forgets everything: the engine's rows are about to be replaced.
    pub(crate) fn clear(&mut self) {
        self.young.clear();
        self.old.clear();
        self.young_bytes = 0;
    }

    fn cost(key: &[u8], state: &Option<KeyValue>) -> usize {
        key.len() + Self::cost_of_state(state) + ENTRY_OVERHEAD
    }

    /// A state's own bytes: its value. Its key shares the map key's bytes
    /// (apply builds both from one [`Bytes`]).
    fn cost_of_state(state: &Option<KeyValue>) -> usize {
        state.as_ref().map_or(0, |kv| kv.value.len())
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.young.len() + self.old.len()
    }
}

/// [`CurrentRows`] shared by the state machine, which records and reads
/// them while it applies, and the store's readers. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct SharedRows(Arc<RwLock<CurrentRows>>);

impl SharedRows {
    pub(crate) fn new() -> Self {
        Self(Arc::new(RwLock::new(CurrentRows::new())))
    }

    /// The rows, to read (apply holds this while it decides an entry).
    /// Only the state machine takes them this way: a panic that poisoned
    /// the lock was its own, and stopped it.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, CurrentRows> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rows, to record an entry's writes or clear them; held across
    /// the engine's write of those rows.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, CurrentRows> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current state of `key`: held here, or else as `read` reads it
    /// from the engine, with no entry written in between.
    pub(crate) fn get_or_read(
        &self,
        key: &[u8],
        read: impl FnOnce() -> Result<Option<KeyValue>, StoreError>,
    ) -> Result<Option<KeyValue>, StoreError> {
        match self.0.read() {
            Ok(rows) => match rows.get(key) {
                Some(held) => Ok(held.clone()),
                None => read(),
            },
            // The state machine panicked while it held the write lock, maybe
            // between an entry's rows and their states: trust the engine,
            // which it no longer writes.
            Err(_) => read(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Revision;
    use crate::ids::LeaseId;

    fn kv(key: &str, revision: u64, value: &str) -> KeyValue {
        KeyValue {
            key: Bytes::copy_from_slice(key.as_bytes()),
            create_revision: Revision(1),
            mod_revision: Revision(revision),
            version: revision as i64,
            value: bytes::Bytes::copy_from_slice(value.as_bytes()),
            lease: LeaseId::NONE,
        }
    }

    fn write(rows: &mut CurrentRows, key: &str, state: Option<KeyValue>) {
        rows.record([(Bytes::copy_from_slice(key.as_bytes()), state)]);
    }

    #[test]
    fn the_latest_write_of_a_key_wins_and_a_deletion_is_held_as_absent() {
        let mut rows = CurrentRows::new();
        assert_eq!(rows.get(b"a"), None, "nothing written: read the store");
        rows.record([
            (Bytes::from_static(b"a"), Some(kv("a", 2, "one"))),
            (Bytes::from_static(b"a"), Some(kv("a", 3, "two"))),
        ]);
        assert_eq!(rows.get(b"a"), Some(&Some(kv("a", 3, "two"))));
        write(&mut rows, "a", None);
        assert_eq!(rows.get(b"a"), Some(&None), "deleted: known absent");
        assert_eq!(rows.get(b"b"), None);
    }

    #[test]
    fn a_full_generation_ages_and_the_one_before_it_is_dropped() {
        let value = "v".repeat(100);
        let per_key = CurrentRows::cost(b"k000", &Some(kv("k000", 1, &value)));
        // Room for ten keys a generation.
        let mut rows = CurrentRows::with_generation_bytes(per_key * 10);
        for i in 0..10 {
            let key = format!("k{i:03}");
            write(&mut rows, &key, Some(kv(&key, 1, &value)));
        }
        assert_eq!(rows.young.len(), 0, "the tenth key filled the generation");
        assert_eq!(rows.old.len(), 10);
        // Rewriting one key does not grow the young generation twice.
        write(&mut rows, "k000", Some(kv("k000", 2, &value)));
        write(&mut rows, "k000", Some(kv("k000", 3, &value)));
        assert_eq!(rows.young_bytes, per_key);
        assert_eq!(rows.get(b"k000"), Some(&Some(kv("k000", 3, &value))));
        assert_eq!(
            rows.get(b"k005"),
            Some(&Some(kv("k005", 1, &value))),
            "the old generation still answers"
        );
        for i in 10..19 {
            let key = format!("k{i:03}");
            write(&mut rows, &key, Some(kv(&key, 1, &value)));
        }
        assert_eq!(rows.get(b"k005"), None, "two generations on: forgotten");
        assert_eq!(rows.get(b"k000"), Some(&Some(kv("k000", 3, &value))));
        assert_eq!(rows.held(), 10);
        rows.clear();
        assert_eq!(rows.held(), 0);
        assert_eq!(rows.get(b"k000"), None);
    }
}

//! The state machine's revision and compaction point, as a point-in-time
//! view of the store holds them, without reading their rows.
//!
//! Every read of the MVCC store opens a RocksDB snapshot and needs the
//! revision and compaction point that snapshot holds: until now, two reads
//! of `sm_meta` rows per read, more than a one-key range itself costs. The
//! state machine is their only writer, so it can say what they are, if a
//! reader can tell that no write of them ran while its snapshot was taken.
//!
//! A sequence lock does that. The state machine **opens** the seal before
//! it writes an entry's rows and **seals** it with the values those rows
//! hold once they are written; an install keeps it open from its start
//! until its state has been read back. The generation counts those steps:
//! odd while open, even while sealed. A reader notes the generation, takes
//! its snapshot, then reads the values and the generation again. If it was
//! even and unchanged, no write of those rows began or ended in between,
//! so the snapshot holds exactly the values read ([`SealedState::since`]);
//! otherwise the reader reads the rows from its snapshot, as before. Debug
//! builds check every answer against the rows.
//!
//! A write that fails leaves the seal open: readers then read the rows,
//! which is always right.

use std::sync::atomic::{fence, AtomicU64, Ordering::SeqCst};

use crate::ids::Revision;

/// The revision and compaction point the state machine last wrote, and
/// whether a write of them may be under way. Shared by the state machine
/// (the one writer) and the store's readers.
#[derive(Debug)]
pub(crate) struct SealedState {
    /// Odd while open (a write of the rows may be under way), even while
    /// the values below are those the rows hold.
    generation: AtomicU64,
    revision: AtomicU64,
    compacted: AtomicU64,
}

impl Default for SealedState {
    /// Open: nothing has been read from the store yet.
    fn default() -> Self {
        Self {
            generation: AtomicU64::new(1),
            revision: AtomicU64::new(0),
            compacted: AtomicU64::new(0),
        }
    }
}

impl SealedState {
    /// Before the rows change: readers read them from here on. Opening an
    /// open seal changes nothing (a failed write or install left it open).
    pub(crate) fn open(&self) {
        self.generation.fetch_or(1, SeqCst);
    }

    /// Once the rows hold `revision` and `compacted` (written, or read back
    /// after an install): readers may take them from here. Called only by
    /// the state machine, after [`SealedState::open`].
    pub(crate) fn seal(&self, revision: Revision, compacted: Revision) {
        self.revision.store(revision.0, SeqCst);
        self.compacted.store(compacted.0, SeqCst);
        let generation = self.generation.load(SeqCst);
        if generation % 2 == 1 {
            self.generation.store(generation + 1, SeqCst);
        }
    }

    /// The generation to pass to [`SealedState::since`]: read it before
    /// taking the snapshot.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(SeqCst)
    }

    /// The revision and compaction point of a snapshot taken after
    /// [`SealedState::generation`] returned `before`, if no write of them
    /// ran meanwhile; `None`: read them from the snapshot.
    pub(crate) fn since(&self, before: u64) -> Option<(Revision, Revision)> {
        // The snapshot was taken before this point; the loads below come
        // after it.
        fence(SeqCst);
        if before % 2 == 1 {
            return None;
        }
        let revision = Revision(self.revision.load(SeqCst));
        let compacted = Revision(self.compacted.load(SeqCst));
        (self.generation.load(SeqCst) == before).then_some((revision, compacted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_takes_the_values_only_between_a_seal_and_the_next_open() {
        let seal = SealedState::default();
        let before = seal.generation();
        assert_eq!(seal.since(before), None, "open until first sealed");

        seal.open();
        seal.seal(Revision(7), Revision(2));
        let before = seal.generation();
        assert_eq!(seal.since(before), Some((Revision(7), Revision(2))));

        // A write begins after the generation was noted: the snapshot may
        // or may not hold it.
        seal.open();
        assert_eq!(seal.since(before), None);
        let during = seal.generation();
        assert_eq!(seal.since(during), None, "open: the rows may be moving");

        // Sealed again: a generation noted before the write no longer holds.
        seal.seal(Revision(8), Revision(2));
        assert_eq!(seal.since(before), None);
        assert_eq!(seal.since(during), None);
        let after = seal.generation();
        assert_eq!(seal.since(after), Some((Revision(8), Revision(2))));
    }

    #[test]
    fn opening_an_open_seal_keeps_it_open_until_sealed() {
        let seal = SealedState::default();
        seal.open();
        seal.seal(Revision(3), Revision(0));
        // A failed write: opened, never sealed; the next write opens again.
        seal.open();
        seal.open();
        let before = seal.generation();
        assert_eq!(seal.since(before), None);
        seal.seal(Revision(4), Revision(0));
        let after = seal.generation();
        assert_eq!(after % 2, 0);
        assert_eq!(seal.since(after), Some((Revision(4), Revision(0))));
    }
}

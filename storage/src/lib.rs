//! kubestore's storage: the MVCC revision store and the replicated state
//! machine in one RocksDB instance, and the Raft log store in segment files
//! beside it (the log is the state machine's WAL: its rows skip RocksDB's).
//!
//! Its one job is to turn an ordered stream of committed [`Command`]s into
//! a revision history that can be read at any uncompacted revision. It knows
//! nothing of HTTP, gRPC servers, Kubernetes kinds or the network.
//!
//! # Invariants
//!
//! - **One revision log.** Every applied command that writes gets exactly the
//!   next revision; all writes of one transaction share it. Reads and
//!   refused commands do not advance the revision.
//! - **Deterministic apply.** Preconditions are checked inside [`apply`], from
//!   the replicated state only, so every node reaches the same verdict.
//! - **Atomic apply.** One entry's key writes, history rows, events and the
//!   last-applied log id are one write batch. A [`Command::Batch`] entry
//!   (group commit) applies its commands in order, each with its own
//!   revision and verdict, exactly as if each were its own entry, and all
//!   of them in that one write batch.
//! - **Durability.** Log appends are synced (group-committed: one fsync for
//!   every append queued behind the last) before openraft is told, except
//!   the leader's own, which are told at once so replication overlaps the
//!   fsync; then no entry is applied, and no follower is told it is
//!   committed, before it is synced here ([`LogDurability`]). The
//!   state machine's rows skip the WAL: the log is their durable record.
//!   Every column family flushes together, so a crash leaves the state as
//!   of one flush, last-applied id included, and openraft re-applies the
//!   committed entries after it at the next start.
//! - **The log is never purged past the snapshot on disk**, nor past the
//!   flushed state (a snapshot build flushes it; a purge past every
//!   snapshot flushes first), whatever order openraft asks in, so a crash or a failed install at any point leaves a
//!   node that restarts and catches up.
//! - **Leases** are state-machine data too: grants, renewals and revokes
//!   are log entries, and a revoke deletes its keys in one revision. An
//!   expiry is conditional on the renewals its proposer saw, decided in
//!   apply, so a stale view never expires a renewed lease.
//! - **Exactly once.** A [`Command::Tagged`] proposal is applied at most
//!   once however many copies of it are committed: the replicated session
//!   table ([`session`]) decides inside apply, and is written in the same
//!   batch as the entry's data.
//! - **A read answers with its own snapshot's revision**, never an older
//!   or newer one: the revision and compaction point come from the
//!   snapshot's rows, or from the state machine's sealed copy of them
//!   when no write of them ran while the snapshot was taken.
//! - **Compaction** runs through the log, so every node drops the same
//!   history; a read below the compaction point is [`StoreError::Compacted`].
//!   Events point into `history` for their values, so compaction keeps
//!   every row an event at or after the compaction point points at.
//!
//! # Layout
//!
//! In dependency order: each module imports only from those above it
//! (no import cycles; this file, the facade and [`Store`], from any).
//!
//! - [`ids`]: revisions, log indexes, lease ids and member ids, the
//!   numbers at the crate's boundary, each its own type.
//! - [`command`]: the replicated command, its response and watch events.
//! - [`error`]: [`StoreError`], the crate's one error type.
//! - [`schema`]: column families, key encodings, format version (the only
//!   place that knows the on-disk layout).
//! - [`validate`]: checks of a command on its own (op counts, nesting,
//!   sizes, lease TTLs), run before it is proposed.
//! - `log_durability`: how far the log is on disk ([`LogDurability`]),
//!   which apply and the commit index told to followers wait for.
//! - `engine`: the only module that names RocksDB (and `Source`: rows read
//!   from the live engine or a point-in-time view).
//! - [`timings`]: where a node's write time goes, per stage ([`StageTimes`]).
//! - [`faults`]: disk fault injection (slow fsync, apply, install) for the
//!   fault-schedule checker; off unless a test or `/debug/faults` sets it.
//! - [`session`]: the rules and rows of the proposal session table behind
//!   exactly-once apply.
//! - [`view`]: [`view::MvccRead`], the read view apply decides against.
//! - [`apply`]: pure apply of a command against a read view; inside it
//!   `txn` (a transaction's operations over its pending writes), then the
//!   command apply itself, then `batch` (a whole log entry, a group-commit
//!   batch command by command).
//! - `current_rows`: the current state of the keys recent entries wrote,
//!   which apply and [`Store::get`] read instead of the engine's `kv` rows.
//! - `session_table`: the state machine's in-memory mirror of the session
//!   table, and the view apply sees it and the current rows through.
//! - [`mvcc`]: ranges at a revision, the event log, staging writes, and
//!   the rows a compaction deletes.
//! - `sealed_state`: the revision and compaction point a point-in-time
//!   view holds, told by the state machine (a sequence lock) so that a
//!   read need not read their rows.
//! - `compactor`: physical compaction, in bounded background steps.
//! - `recent`: the newest items of a gapless log within a byte budget
//!   (`RecentRun`), behind the two caches below and in [`log_store`].
//! - `recent_events`: the newest revisions' events in memory, as applied,
//!   which serve the event log's readers while they keep up, shared
//!   ([`RevisionEvents`]) rather than copied per reader.
//! - [`cursor`]: the event cursor ([`Store::events`]), the one reader of the
//!   event log for watches and the watch cache: batched, and reporting
//!   compaction as an outcome of its own.
//! - [`raft_types`]: openraft's type configuration ([`TypeConfig`]) and
//!   the membership the state machine stores.
//! - `purge`: the purge horizon, which keeps the log from being purged past
//!   the snapshot on disk (openraft 0.9 purges before an install finishes).
//! - `snapshot`: the snapshot file: its format, building, reading and
//!   installing one, and the files of the snapshot directory.
//! - [`log_store`] / [`state_machine`]: the openraft storage traits.

#![warn(missing_docs)]

pub mod apply;
pub mod command;
mod compactor;
mod current_rows;
pub mod cursor;
mod engine;
pub mod error;
pub mod faults;
pub mod ids;
mod log_durability;
pub mod log_store;
pub mod mvcc;
mod purge;
pub mod raft_types;
mod recent;
mod recent_events;
pub mod schema;
mod sealed_state;
mod segment_log;
pub mod session;
mod session_table;
mod snapshot;
pub mod state_machine;
#[cfg(test)]
mod test_fixture;
pub mod timings;
pub mod validate;
pub mod view;

use std::path::Path;

use tokio::sync::watch;

pub use command::{
    prefix_end, ApplyError, Command, CommandResult, Compare, CompareOp, CompareTarget,
    DeleteRequest, DeleteResponse, Event, EventKind, KeyRange, KeyValue, LeaseRecord, Op,
    OpResponse, ProposalId, PutRequest, RangeRequest, RangeResponse, Response, Revision,
    RevisionEvents, Txn, TxnResponse, MAX_TXN_DEPTH,
};
pub use compactor::{PurgeStep, PURGE_STEP_REVISIONS};
pub use cursor::{EventCursor, EventStep, EVENT_BATCH};
pub use error::StoreError;
pub use faults::DiskFaults;
pub use ids::{LeaseId, LogIndex, NodeId};
pub use log_durability::LogDurability;
pub use log_store::LogStore;
pub use raft_types::{Entry, Node, SharedCommand, TypeConfig};
pub use state_machine::{AppliedState, StateMachine};
pub use timings::{Stage, StageTimes, StageTotal};
pub use validate::{InvalidCommand, Limits, MAX_LEASE_TTL, MIN_LEASE_TTL};

/// A lease and the keys attached to it, in key order.
pub type LeaseWithKeys = (LeaseRecord, Vec<Vec<u8>>);

/// A cheap, cloneable read handle on the store, for the front ends.
#[derive(Clone)]
pub struct Store {
    engine: engine::Engine,
    applied: watch::Receiver<AppliedState>,
    installs: state_machine::InstallGeneration,
    /// The revision and compaction point, as the state machine last wrote
    /// them ([`Store::with_reader`]).
    sealed: std::sync::Arc<sealed_state::SealedState>,
    faults: DiskFaults,
    boot_epoch: u64,
    compactor: compactor::Compactor,
    timings: std::sync::Arc<StageTimes>,
    /// The newest revisions' events, as the state machine applied them.
    recent: recent_events::RecentEvents,
    /// The keys recent entries wrote, as the state machine recorded them.
    current_rows: current_rows::SharedRows,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("applied", &*self.applied.borrow())
            .field("boot_epoch", &self.boot_epoch)
            .finish()
    }
}

impl Store {
    /// A range read from one consistent point in time; see [`mvcc`] for the
    /// revision rules and errors.
    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        use view::MvccRead;
        self.consistent(|| self.with_reader(|reader| reader.range(req)))
    }

    /// Runs `read` on a reader of a new point-in-time view of the store,
    /// with the revision and compaction point the state machine says the
    /// view holds (the generation is noted before the view is taken), or
    /// read from the view when a write of them may have run meanwhile.
    fn with_reader<T, E: From<StoreError>>(
        &self,
        read: impl FnOnce(mvcc::MvccReader<'_, dyn engine::Source + '_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let sealed = self.sealed.generation();
        self.engine.with_snapshot(|view| {
            let src: &dyn engine::Source = view;
            let reader = match self.sealed.since(sealed) {
                Some((current, compacted)) => {
                    #[cfg(debug_assertions)]
                    {
                        use view::MvccRead;
                        let stored = mvcc::MvccReader::new(src)?;
                        debug_assert_eq!(
                            (stored.current_revision(), stored.compacted_revision()),
                            (current, compacted),
                            "the sealed state left the snapshot's rows"
                        );
                    }
                    mvcc::MvccReader::at(src, current, compacted)
                }
                None => mvcc::MvccReader::new(src)?,
            };
            read(reader)
        })
    }

    /// The current key-value of `key`, if it exists: one read of its
    /// current-state row, atomic on its own, so no point-in-time view and
    /// no revision header are needed (the key-value's `mod_revision` says
    /// how recent it is). Half the reads of a one-key [`Store::range`]: the
    /// read of every guarded Kubernetes write. A key a recent entry wrote
    /// is answered from the state machine's current rows in memory, at
    /// least as new as the last entry published as applied.
    pub fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        self.consistent(|| {
            self.current_rows
                .get_or_read(key, || mvcc::read_current(&self.engine, key))
        })
    }

    /// Runs `read` against one consistent point-in-time view of the store,
    /// for reads that stream or take more than one pass (hashes, etcd
    /// snapshots); fails with [`StoreError::Installing`] if a snapshot
    /// install ran at any point during it. Blocking (RocksDB scans): call
    /// it from a blocking thread ([`Store::run_blocking`]).
    pub fn read_view<T, E: From<StoreError>>(
        &self,
        read: impl FnOnce(&ReadView<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let before = self.installs.stable().ok_or(StoreError::Installing)?;
        let result = self.with_reader(|reader| read(&ReadView { reader }))?;
        if self.installs.stable() != Some(before) {
            return Err(StoreError::Installing.into());
        }
        Ok(result)
    }

    /// Runs `read` on this store on tokio's blocking pool, so a RocksDB
    /// scan never occupies an async worker (they also drive Raft
    /// heartbeats and every other request).
    pub async fn run_blocking<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = self.clone();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || span.in_scope(|| read(&store)))
            .await
            .map_err(|e| StoreError::ReadTask(e.to_string()))?
    }

    /// Runs a read, failing it with [`StoreError::Installing`] if a snapshot
    /// install ran at any point during it (it may have seen a partial state).
    fn consistent<T>(&self, read: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        let before = self.installs.stable().ok_or(StoreError::Installing)?;
        let result = read()?;
        if self.installs.stable() != Some(before) {
            return Err(StoreError::Installing);
        }
        Ok(result)
    }

    /// A cursor on the event log after `after`, read in batches of whole
    /// revisions; the way to follow the log (see [`cursor`]).
    pub fn events(&self, after: Revision) -> EventCursor {
        EventCursor::new(self.clone(), after)
    }

    /// The events of revisions after `after`, at most `limit` revisions;
    /// [`StoreError::Compacted`] if `after + 1` is below the compaction
    /// point. One read; [`Store::events`] follows the log.
    pub fn events_after(
        &self,
        after: Revision,
        limit: usize,
    ) -> Result<Vec<RevisionEvents>, StoreError> {
        self.consistent(|| {
            // The newest revisions come from memory when it holds them all
            // (see `recent_events`), anything else from the log.
            match self.recent_events_after(after, limit) {
                Some(events) => Ok(events),
                None => self.with_reader(|reader| reader.events_after(after, limit)),
            }
        })
    }

    /// What [`Store::events_after`] reads, if the ring of recent events
    /// holds all of it (see `recent_events`): read without storage, so an
    /// async worker may call it. `None` when storage would have to be read
    /// (the ring does not reach back to `after`, or `after + 1` is below
    /// the compaction point).
    pub fn events_after_in_memory(
        &self,
        after: Revision,
        limit: usize,
    ) -> Option<Result<Vec<RevisionEvents>, StoreError>> {
        self.consistent(|| Ok(self.recent_events_after(after, limit)))
            .transpose()
    }

    fn recent_events_after(&self, after: Revision, limit: usize) -> Option<Vec<RevisionEvents>> {
        let applied = self.applied();
        if after.next() < applied.compacted {
            return None;
        }
        self.recent.after(after, limit.max(1), applied.revision)
    }

    /// Every lease, by id.
    pub fn leases(&self) -> Result<Vec<LeaseRecord>, StoreError> {
        self.consistent(|| self.with_reader(|reader| reader.leases()))
    }

    /// Lease `id` and the keys attached to it, if it exists.
    pub fn lease(&self, id: LeaseId) -> Result<Option<LeaseWithKeys>, StoreError> {
        use view::MvccRead;
        self.consistent(|| {
            self.with_reader(|reader| match reader.lease(id)? {
                Some(l) => Ok(Some((l, reader.lease_keys(id)?))),
                None => Ok(None),
            })
        })
    }

    /// Where the state machine stands now.
    pub fn applied(&self) -> AppliedState {
        *self.applied.borrow()
    }

    /// A receiver that changes whenever entries are applied.
    pub fn subscribe(&self) -> watch::Receiver<AppliedState> {
        self.applied.clone()
    }

    /// Proves the database still takes durable writes: one synced write of
    /// a local (never replicated) probe row. Blocks for an fsync.
    pub fn check_writable(&self) -> Result<(), StoreError> {
        let mut batch = self.engine.batch();
        batch.put(
            schema::Cf::RaftMeta,
            schema::RAFT_LIVENESS_PROBE,
            &self.applied().log_index.0.to_be_bytes(),
        )?;
        self.engine.write(batch, true)
    }

    /// A receiver of whether a snapshot install is replacing the state
    /// machine now, changed as an install starts and as it ends.
    pub fn subscribe_installing(&self) -> watch::Receiver<bool> {
        self.installs.subscribe()
    }

    /// The disk faults this store's log flusher and state machine obey.
    pub fn faults(&self) -> &DiskFaults {
        &self.faults
    }

    /// This process's boot epoch: greater than that of every earlier
    /// process on this data directory (raised, and synced, by [`open`]).
    /// The `epoch` of the [`ProposalId`]s this node hands out.
    pub fn boot_epoch(&self) -> u64 {
        self.boot_epoch
    }

    /// How far compacted history is physically deleted: at most
    /// [`AppliedState::compacted`], below it while a purge is under way.
    pub fn purged(&self) -> Revision {
        self.compactor.purged()
    }

    /// Waits until compacted history is physically deleted up to
    /// `revision` (etcd's `physical` compaction: this node applied a
    /// compaction to at least `revision` and purged it), for as long as
    /// the purge keeps moving: `false` once it has not moved for `stall`.
    pub async fn wait_purged(&self, revision: Revision, stall: std::time::Duration) -> bool {
        let mut purged = self.compactor.subscribe();
        loop {
            if *purged.borrow_and_update() >= revision {
                return true;
            }
            match tokio::time::timeout(stall, purged.changed()).await {
                Ok(Ok(())) => {}
                // The sender lives as long as the compactor: never closed.
                Ok(Err(_)) | Err(_) => return false,
            }
        }
    }

    /// One step of the physical compaction: deletes the history of at most
    /// `max_revisions` revisions below the compaction point. Blocking
    /// (RocksDB scans); [`Store::run_compactor`] runs it in the background.
    pub fn purge_compacted_history(&self, max_revisions: u64) -> Result<PurgeStep, StoreError> {
        self.compactor.step(&self.engine, max_revisions)
    }

    /// Ends [`Store::run_compactor`] after the step it is in, if any.
    pub fn stop_compactor(&self) {
        self.compactor.close();
    }

    /// Runs the physical compaction for as long as the state machine lives:
    /// whenever a compaction is applied (or a snapshot installed), purges
    /// what it left in steps of [`PURGE_STEP_REVISIONS`] revisions, each
    /// its own atomic batch, until [`Store::stop_compactor`] (or the state
    /// machine's drop). Spawn it once per opened store; it holds the
    /// database open until it ends.
    pub async fn run_compactor(self) {
        self.compactor.clone().run(self.engine.clone()).await
    }

    /// Where this node's write time goes, stage by stage: the log and the
    /// apply time themselves here; the Raft node and the server add theirs.
    pub fn timings(&self) -> &std::sync::Arc<StageTimes> {
        &self.timings
    }

    /// Approximate bytes the database takes on disk.
    pub fn size_on_disk(&self) -> u64 {
        self.engine.approximate_size()
    }
}

/// One consistent point-in-time view of the store ([`Store::read_view`]).
pub struct ReadView<'a> {
    reader: mvcc::MvccReader<'a, dyn engine::Source + 'a>,
}

impl ReadView<'_> {
    /// The revision the view is current at.
    pub fn revision(&self) -> Revision {
        view::MvccRead::current_revision(&self.reader)
    }

    /// The compaction point of the view.
    pub fn compacted(&self) -> Revision {
        view::MvccRead::compacted_revision(&self.reader)
    }

    /// Visits the key-values of `range` at `at` (`None`: the view's
    /// revision), ascending by key, until `visit` breaks; the revision read
    /// at. Errors as [`Store::range`]'s. Holds one key-value at a time.
    pub fn scan(
        &self,
        range: &KeyRange,
        at: Option<Revision>,
        mut visit: impl FnMut(KeyValue) -> Result<std::ops::ControlFlow<()>, StoreError>,
    ) -> Result<Revision, StoreError> {
        view::MvccRead::scan(&self.reader, range, at, &mut visit)
    }
}

/// Opens the node's storage under `dir`: the log store and state machine for
/// openraft, and a [`Store`] read handle for everything else. Each open
/// starts a new boot epoch ([`Store::boot_epoch`]).
pub fn open(dir: &Path) -> Result<(LogStore, StateMachine, Store), StoreError> {
    open_with_faults(dir, DiskFaults::default())
}

/// [`open`], with the disk faults the store obeys from its first moment
/// (tests that need a fault in place before the node can be reached).
pub fn open_with_faults(
    dir: &Path,
    faults: DiskFaults,
) -> Result<(LogStore, StateMachine, Store), StoreError> {
    let engine = engine::Engine::open(&dir.join("db"))?;
    let purged = purge::read_last_purged(&engine)?;
    let segments = segment_log::LogSegments::open(&dir.join("log"), purged.map(|p| p.index))?;
    let installs = state_machine::InstallGeneration::default();
    let sealed = std::sync::Arc::new(sealed_state::SealedState::default());
    let compactor = compactor::Compactor::open(&engine)?;
    let (sm, applied) = StateMachine::open(
        engine.clone(),
        dir.join("snapshots"),
        installs.clone(),
        sealed.clone(),
        compactor.clone(),
        segments.clone(),
    )?;
    // The directory's format is known good now: a log still in RocksDB
    // (formats 3 and 4) moves to the segments before anything reads it.
    log_store::move_log_from_rocksdb(&engine, &segments, sm.purge_horizon().purged())?;
    let boot_epoch = session::raise_boot_epoch(&engine)?;
    let timings = std::sync::Arc::new(StageTimes::default());
    let recent = sm.recent_events();
    let current_rows = sm.current_rows();
    let log = LogStore::new(
        engine.clone(),
        segments,
        faults.clone(),
        sm.purge_horizon(),
        timings.clone(),
    )?;
    let sm = sm
        .with_faults(faults.clone())
        .with_timings(timings.clone())
        .with_log_durability(log.durability().clone());
    Ok((
        log,
        sm,
        Store {
            engine,
            applied,
            installs,
            sealed,
            faults,
            boot_epoch,
            compactor,
            timings,
            recent,
            current_rows,
        },
    ))
}

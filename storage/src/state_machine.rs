//! openraft's state machine: applies committed entries to the MVCC store,
//! one atomic write batch per entry (data, history, events, proposal
//! sessions and the last applied log id together), publishes where it
//! stands ([`AppliedState`]), and answers openraft's snapshot calls (build,
//! receive, install, current) with the snapshot file of `snapshot` (its
//! format, and how it is built and installed, are described there). It
//! keeps the in-memory mirror of the session table ([`crate::session`]),
//! loaded at open and after every install.

use std::io::Seek;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StoredMembership,
};
use tokio::sync::watch;
use tracing::{instrument, Instrument};

use crate::apply::apply_entry;
use crate::command::{Response, Revision};
use crate::compactor::Compactor;
use crate::current_rows::SharedRows;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::faults::DiskFaults;
use crate::ids::{LogIndex, NodeId};
use crate::log_durability::LogDurability;
use crate::mvcc::{self, MvccReader};
use crate::purge::PurgeHorizon;
pub use crate::raft_types::SmMembership;
use crate::raft_types::{Entry, Node, TypeConfig};
use crate::recent_events::RecentEvents;
use crate::schema::{self, Cf};
use crate::sealed_state::SealedState;
use crate::segment_log::LogSegments;
use crate::session_table::{MirroredView, SessionTable};
use crate::snapshot::{
    build_snapshot_file, finish_install, install_from_file, io_err, open_horizon,
    read_snapshot_meta, remove_incoming, snapshot_header, stage_received, unique_suffix,
    SnapshotFiles, CURRENT_SNAPSHOT, INCOMING_PREFIX, STAGED_SNAPSHOT,
};
use crate::timings::{Stage, StageTimes};

/// Where the state machine stands, published after every applied batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AppliedState {
    /// Index of the last applied log entry (0 before any).
    pub log_index: LogIndex,
    /// The store's current revision.
    pub revision: Revision,
    /// The revision history is compacted to.
    pub compacted: Revision,
    /// Bumped whenever a snapshot replaced the whole state, so caches built
    /// from the event stream know to rebuild.
    pub resets: u64,
}

/// The state machine. openraft owns it; readers use [`crate::Store`].
pub struct StateMachine {
    engine: Engine,
    snapshot_dir: PathBuf,
    last_applied: Option<LogId<NodeId>>,
    membership: SmMembership,
    applied_tx: watch::Sender<AppliedState>,
    installs: InstallGeneration,
    /// Sealed with the revision and compaction point after every write of
    /// them, so readers need not read their rows.
    sealed: Arc<SealedState>,
    files: SnapshotFiles,
    faults: DiskFaults,
    /// The mirror of the `sessions` column family.
    sessions: SessionTable,
    /// The `kv` rows of the keys recent entries wrote, which apply (and
    /// [`crate::Store::get`]) read instead of the engine's.
    current_rows: SharedRows,
    /// Told whenever a newer snapshot file is in place.
    horizon: PurgeHorizon,
    /// The file of the snapshot stream begun last, which its install
    /// renames into place instead of copying.
    receiving: Option<PathBuf>,
    /// Purges what compactions leave behind; woken by every compaction
    /// and install, held off during an install, closed with this.
    compactor: Compactor,
    /// Where the node's write time goes ([`Stage::Apply`] is timed here).
    timings: Arc<StageTimes>,
    /// Each revision's events once written, for the log's readers.
    recent: RecentEvents,
    /// Where it stands, as last published: read from the store at open
    /// and after an install, kept up to date by apply, so that neither
    /// an apply nor a publish reads the revision rows back.
    state: AppliedState,
    /// How far this node's log is on disk: an entry is applied only once
    /// it is there (the leader reports its own entries written before
    /// their fsync; see `crate::log_durability`). `None` in tests that
    /// apply without a log.
    log_durability: Option<LogDurability>,
}

impl Drop for StateMachine {
    fn drop(&mut self) {
        self.compactor.close();
    }
}

impl std::fmt::Debug for StateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine")
            .field("last_applied", &self.last_applied)
            .finish()
    }
}

fn sm_err(e: StoreError, verb: ErrorVerb) -> StorageError<NodeId> {
    e.into_raft(ErrorSubject::StateMachine, verb)
}

fn snap_err(e: StoreError, verb: ErrorVerb) -> StorageError<NodeId> {
    e.into_raft(ErrorSubject::Snapshot(None), verb)
}

impl StateMachine {
    /// Opens the state machine, finishing an interrupted snapshot install.
    pub(crate) fn open(
        engine: Engine,
        snapshot_dir: PathBuf,
        installs: InstallGeneration,
        sealed: Arc<SealedState>,
        compactor: Compactor,
        log: LogSegments,
    ) -> Result<(Self, watch::Receiver<AppliedState>), StoreError> {
        std::fs::create_dir_all(&snapshot_dir)
            .map_err(|e| StoreError::Io(snapshot_dir.display().to_string(), e))?;
        let found = match engine.get(Cf::SmMeta, schema::SM_FORMAT_VERSION)? {
            Some(v) => Some(bincode::deserialize::<u32>(&v)?),
            None => None,
        };
        if let Some(found) = found.filter(|f| !schema::READABLE_FORMATS.contains(f)) {
            return Err(StoreError::FormatVersion {
                found,
                expected: schema::FORMAT_VERSION,
            });
        }
        // A new directory, or one of an older format this build reads: from
        // now on it holds rows that format's builds misread, so it is marked
        // before the first of them is written.
        if found != Some(schema::FORMAT_VERSION) {
            if let Some(from) = found {
                tracing::info!(
                    from,
                    to = schema::FORMAT_VERSION,
                    "upgrading the data directory's storage format"
                );
            }
            let mut batch = engine.batch();
            batch.put(
                Cf::SmMeta,
                schema::SM_FORMAT_VERSION,
                &bincode::serialize(&schema::FORMAT_VERSION)?,
            )?;
            engine.write(batch, true)?;
        }
        let files = SnapshotFiles::default();
        if engine.get(Cf::SmMeta, schema::SM_INSTALLING)?.is_some() {
            let staged = snapshot_dir.join(STAGED_SNAPSHOT);
            if staged.exists() {
                tracing::warn!(file = %staged.display(), "redoing an interrupted snapshot install");
                let meta = read_snapshot_meta(&staged)?;
                install_from_file(&engine, &staged, &meta)?;
            }
            finish_install(&engine, &snapshot_dir, &files)?;
        }
        remove_incoming(&snapshot_dir)?;
        let last_applied = get_bincode(&engine, schema::SM_LAST_APPLIED)?.flatten();
        let horizon = open_horizon(&engine, log, &snapshot_dir, &files, last_applied)?;
        let membership = get_bincode(&engine, schema::SM_MEMBERSHIP)?.unwrap_or_default();
        let state = read_applied_state(&engine, last_applied, 0)?;
        sealed.open();
        sealed.seal(state.revision, state.compacted);
        let sessions = SessionTable::load(&engine)?;
        let (applied_tx, applied_rx) = watch::channel(state);
        Ok((
            Self {
                engine,
                snapshot_dir,
                last_applied,
                membership,
                applied_tx,
                installs,
                sealed,
                files,
                faults: DiskFaults::default(),
                sessions,
                current_rows: SharedRows::new(),
                horizon,
                receiving: None,
                compactor,
                timings: Arc::default(),
                recent: RecentEvents::default(),
                state,
                log_durability: None,
            },
            applied_rx,
        ))
    }

    /// The current rows it records; the store's one-key reads answer from
    /// them.
    pub(crate) fn current_rows(&self) -> SharedRows {
        self.current_rows.clone()
    }

    /// The ring of the newest revisions' events it fills; the store's
    /// readers read it.
    pub(crate) fn recent_events(&self) -> RecentEvents {
        self.recent.clone()
    }

    /// The purge horizon this state machine moves; the log store purges
    /// through it.
    pub(crate) fn purge_horizon(&self) -> PurgeHorizon {
        self.horizon.clone()
    }

    /// Times its applies into `timings` from now on.
    pub(crate) fn with_timings(mut self, timings: Arc<StageTimes>) -> Self {
        self.timings = timings;
        self
    }

    /// Applies each entry only once `durability` says it is on disk.
    pub(crate) fn with_log_durability(mut self, durability: LogDurability) -> Self {
        self.log_durability = Some(durability);
        self
    }

    /// Obeys `faults` (a slow state machine) from now on.
    pub(crate) fn with_faults(mut self, faults: DiskFaults) -> Self {
        self.faults = faults;
        self
    }

    /// Publishes where it stands. After an install (`reset`) that is read
    /// from the store; otherwise apply kept it (debug builds check it
    /// against the store).
    fn publish(&mut self, reset: bool) -> Result<(), StoreError> {
        if reset {
            let resets = self.state.resets + 1;
            self.state = read_applied_state(&self.engine, self.last_applied, resets)?;
            // Opened when the install began.
            self.sealed.seal(self.state.revision, self.state.compacted);
        } else {
            self.state.log_index = LogIndex(self.last_applied.map_or(0, |l| l.index));
            #[cfg(debug_assertions)]
            {
                let stored =
                    read_applied_state(&self.engine, self.last_applied, self.state.resets)?;
                debug_assert_eq!(self.state, stored, "apply's account left the store's");
            }
        }
        self.applied_tx.send_replace(self.state);
        Ok(())
    }

    fn apply_entry(&mut self, entry: &Entry) -> Result<Response, StoreError> {
        let mut session_changes = Vec::new();
        // The revision and compaction point the entry leaves, exactly as
        // `stage_applied` writes them: the last command's that set one.
        let (mut revision, mut compacted) = (None, None);
        let mut revisions = Vec::new();
        let mut written = Vec::new();
        let (response, mut batch) = match &entry.payload {
            EntryPayload::Blank => (Response::default(), self.engine.batch()),
            EntryPayload::Normal(cmd) => {
                let reader =
                    MvccReader::at(&self.engine, self.state.revision, self.state.compacted);
                let rows = self.current_rows.read();
                let view = MirroredView::new(&reader, &self.sessions, &rows);
                let (response, applied) = apply_entry(&view, cmd)?;
                let mut batch = self
                    .engine
                    .batch_with_capacity(mvcc::staged_bytes(&applied));
                mvcc::stage_applied(&mut batch, &applied)?;
                session_changes = self.sessions.stage(&mut batch, &applied)?;
                revision = applied
                    .iter()
                    .rev()
                    .find(|one| !one.writes.is_empty())
                    .map(|one| one.response.revision);
                compacted = applied.iter().rev().find_map(|one| one.compact_to);
                for one in applied {
                    // Exactly the revisions `stage_applied` wrote events for.
                    if !one.writes.is_empty() {
                        revisions.push((one.response.revision, one.events));
                        written.extend(one.writes);
                    }
                }
                tracing::debug!(index = entry.log_id.index, revision = response.revision.0, %cmd, "applied");
                (response, batch)
            }
            EntryPayload::Membership(m) => {
                self.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                let mut batch = self.engine.batch();
                batch.put(
                    Cf::SmMeta,
                    schema::SM_MEMBERSHIP,
                    &bincode::serialize(&self.membership)?,
                )?;
                (Response::default(), batch)
            }
        };
        batch.put(
            Cf::SmMeta,
            schema::SM_LAST_APPLIED,
            &bincode::serialize(&Some(entry.log_id))?,
        )?;
        // Without the WAL: the Raft log is the durable record. A restart
        // finds the state as of the last flush (every column family at one
        // point, the last-applied id with them) and openraft re-applies the
        // committed entries after it; a snapshot flushes before the log
        // behind it may be purged (see `crate::purge`).
        // The current rows change with the engine's, under their write
        // lock: a one-key read sees both before the entry or both after.
        let mut rows = self.current_rows.write();
        self.sealed.open();
        self.engine.write_unlogged(batch)?;
        rows.record(written);
        drop(rows);
        self.last_applied = Some(entry.log_id);
        self.state.revision = revision.unwrap_or(self.state.revision);
        if let Some(to) = compacted {
            self.state.compacted = to;
            self.compactor.wake();
        }
        self.sealed.seal(self.state.revision, self.state.compacted);
        for (revision, events) in revisions {
            self.recent.push(revision, events);
        }
        // Now that they are written.
        for change in &session_changes {
            self.sessions.absorb(change);
        }
        Ok(response)
    }
}

fn get_bincode<T: serde::de::DeserializeOwned>(
    engine: &Engine,
    key: &[u8],
) -> Result<Option<T>, StoreError> {
    match engine.get(Cf::SmMeta, key)? {
        Some(v) => Ok(Some(bincode::deserialize(&v)?)),
        None => Ok(None),
    }
}

fn read_applied_state(
    engine: &Engine,
    last_applied: Option<LogId<NodeId>>,
    resets: u64,
) -> Result<AppliedState, StoreError> {
    Ok(AppliedState {
        log_index: LogIndex(last_applied.map_or(0, |l| l.index)),
        revision: mvcc::read_revision(engine, schema::SM_REVISION)?,
        compacted: mvcc::read_revision(engine, schema::SM_COMPACTED)?,
        resets,
    })
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, SmMembership), StorageError<NodeId>> {
        Ok((self.last_applied, self.membership.clone()))
    }

    #[instrument(level = "debug", skip_all)]
    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let slow_apply = self.faults.apply_delay();
        if !slow_apply.is_zero() {
            tokio::time::sleep(slow_apply).await;
        }
        let entries: Vec<Entry> = entries.into_iter().collect();
        if let (Some(durability), Some(last)) = (&self.log_durability, entries.last()) {
            // On the leader the last entries may still be in the flusher's
            // fsync, which the followers' appends overlapped.
            if !durability.is_synced(last.log_id) {
                durability
                    .wait_synced(last.log_id)
                    .instrument(tracing::debug_span!("apply_waits_for_log_fsync"))
                    .await
                    .map_err(|e| sm_err(e, ErrorVerb::Write))?;
            }
        }
        let started = Instant::now();
        let scans = entries
            .iter()
            .any(|e| matches!(&e.payload, EntryPayload::Normal(cmd) if cmd.may_scan()));
        let mut apply_all = || {
            let mut responses = Vec::with_capacity(entries.len());
            for entry in &entries {
                let _span = tracing::debug_span!("apply", index = entry.log_id.index).entered();
                responses.push(self.apply_entry(entry)?);
            }
            Ok::<_, StoreError>(responses)
        };
        // A scan (a compaction, a multi-key txn) must not hold an async
        // worker, which also drives Raft heartbeats: give the worker's
        // other tasks to another thread meanwhile. Point reads and writes
        // (every Kubernetes verb) stay inline, where a hand-off would cost
        // more than the apply. A current-thread runtime (some tests) has no
        // other worker to hand off to.
        let multi_thread = tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread;
        let responses = if scans && multi_thread {
            tokio::task::block_in_place(apply_all)
        } else {
            apply_all()
        }
        .map_err(|e| sm_err(e, ErrorVerb::Write))?;
        self.publish(false)
            .map_err(|e| sm_err(e, ErrorVerb::Read))?;
        self.timings.record_since(Stage::Apply, started);
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            engine: self.engine.clone(),
            snapshot_dir: self.snapshot_dir.clone(),
            files: self.files.clone(),
            horizon: self.horizon.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<tokio::fs::File>, StorageError<NodeId>> {
        // A new file for every stream. The previous stream's file (openraft
        // abandons a stream when another snapshot starts) is unlinked, not
        // truncated: a write of it still in flight lands in its own inode.
        remove_incoming(&self.snapshot_dir).map_err(|e| snap_err(e, ErrorVerb::Write))?;
        self.horizon.receiving();
        let path = self
            .snapshot_dir
            .join(format!("{INCOMING_PREFIX}-{}.snap", unique_suffix()));
        // Read and write: openraft writes the chunks, install reads them back.
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(|e| {
                snap_err(
                    StoreError::Io(path.display().to_string(), e),
                    ErrorVerb::Write,
                )
            })?;
        self.receiving = Some(path);
        Ok(Box::new(file))
    }

    #[instrument(level = "info", skip_all, fields(last_log_id = ?meta.last_log_id))]
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Node>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError<NodeId>> {
        use tokio::io::AsyncWriteExt;
        let started = std::time::Instant::now();
        // The whole state is replaced: no revision before it follows, and
        // no row held in memory stays true.
        self.recent.clear();
        self.current_rows.write().clear();
        let staged = self.snapshot_dir.join(STAGED_SNAPSHOT);
        let received = self.receiving.take();
        let dir = self.snapshot_dir.clone();
        let stage = async {
            let mut file = snapshot;
            file.flush()
                .await
                .map_err(|e| StoreError::Io(staged.display().to_string(), e))?;
            let file = file.into_std().await;
            tokio::task::spawn_blocking(move || stage_received(file, received.as_deref(), &dir))
                .await
                .map_err(|e| StoreError::Corrupt(format!("staging task failed: {e}")))?
        };
        let bytes = stage.await.map_err(|e| snap_err(e, ErrorVerb::Write))?;
        let staged_after = started.elapsed();
        // Refused before anything is cleared: a snapshot of another
        // storage format (or not a snapshot), or one whose own metadata is
        // not what the leader announced, leaves this store as it was.
        // openraft 0.9 treats any install error as fatal: its Raft stops
        // and the server exits for its supervisor to restart it. The purge
        // horizon has kept the log this node had, so it restarts cleanly
        // and the leader sends the snapshot again.
        let own = read_snapshot_meta(&staged).map_err(|e| snap_err(e, ErrorVerb::Read))?;
        if own.last_log_id != meta.last_log_id || own.snapshot_id != meta.snapshot_id {
            return Err(snap_err(
                StoreError::Corrupt(format!(
                    "snapshot {} describes itself as {} up to {:?}, announced as up to {:?}",
                    meta.snapshot_id, own.snapshot_id, own.last_log_id, meta.last_log_id
                )),
                ErrorVerb::Read,
            ));
        }
        let engine = self.engine.clone();
        let dir = self.snapshot_dir.clone();
        // What the file says it holds is what gets recorded as applied.
        let meta_owned = own.clone();
        let (installs, files) = (self.installs.clone(), self.files.clone());
        let horizon = self.horizon.clone();
        // Readers read the revision rows until the installed state is read
        // back (`publish`), whether the install succeeds or not.
        self.sealed.open();
        let compactor = self.compactor.clone();
        let slow_install = self.faults.install_delay();
        tokio::task::spawn_blocking(move || -> Result<(), StoreError> {
            // No purge step may run on the rows this replaces.
            let _no_purge = compactor.exclusive();
            let mut marker = engine.batch();
            marker.put(Cf::SmMeta, schema::SM_INSTALLING, b"1")?;
            engine.write(marker, true)?;
            installs.bump();
            if !slow_install.is_zero() {
                std::thread::sleep(slow_install);
            }
            let installed = install_from_file(&engine, &dir.join(STAGED_SNAPSHOT), &meta_owned)
                .and_then(|()| finish_install(&engine, &dir, &files));
            installs.bump();
            installed?;
            remove_incoming(&dir)?;
            // Only now may the log go: the snapshot that covers it is in place.
            horizon.advance(meta_owned.last_log_id, true)
        })
        .await
        .map_err(|e| {
            snap_err(
                StoreError::Corrupt(format!("install task failed: {e}")),
                ErrorVerb::Write,
            )
        })?
        .map_err(|e| snap_err(e, ErrorVerb::Write))?;
        self.last_applied = own.last_log_id;
        self.membership = own.last_membership.clone();
        self.sessions = SessionTable::load(&self.engine).map_err(|e| sm_err(e, ErrorVerb::Read))?;
        self.publish(true).map_err(|e| sm_err(e, ErrorVerb::Read))?;
        // The snapshot may carry history its builder had not purged yet.
        self.compactor.wake();
        tracing::info!(
            bytes,
            staged_ms = staged_after.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "snapshot installed"
        );
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let path = self.snapshot_dir.join(CURRENT_SNAPSHOT);
        // One open file for both the metadata and the data: a build or an
        // install that renames another snapshot into place meanwhile
        // replaces the name, not the file this handle reads.
        let opened = tokio::task::spawn_blocking(move || {
            let file = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(StoreError::Io(path.display().to_string(), e)),
            };
            let (input, meta) = snapshot_header(file, &path)?;
            let mut file = input.into_inner();
            file.seek(std::io::SeekFrom::Start(0))
                .map_err(io_err(&path))?;
            Ok(Some((meta, file)))
        })
        .await
        .map_err(|e| {
            snap_err(
                StoreError::Corrupt(format!("snapshot task failed: {e}")),
                ErrorVerb::Read,
            )
        })?
        .map_err(|e| snap_err(e, ErrorVerb::Read))?;
        Ok(opened.map(|(meta, file)| Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        }))
    }
}

/// Builds a snapshot from a consistent RocksDB view, off the apply path.
#[derive(Debug)]
pub struct SnapshotBuilder {
    engine: Engine,
    snapshot_dir: PathBuf,
    files: SnapshotFiles,
    horizon: PurgeHorizon,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    #[instrument(level = "info", skip_all)]
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let engine = self.engine.clone();
        let dir = self.snapshot_dir.clone();
        let files = self.files.clone();
        let horizon = self.horizon.clone();
        let started = std::time::Instant::now();
        let (meta, file) = tokio::task::spawn_blocking(move || {
            build_snapshot_file(&engine, &dir, &files, &horizon)
        })
        .await
        .map_err(|e| {
            snap_err(
                StoreError::Corrupt(format!("snapshot task failed: {e}")),
                ErrorVerb::Write,
            )
        })?
        .map_err(|e| snap_err(e, ErrorVerb::Write))?;
        let bytes = file.metadata().map_or(0, |m| m.len());
        tracing::info!(
            snapshot_id = %meta.snapshot_id,
            bytes,
            ms = started.elapsed().as_millis() as u64,
            "snapshot built"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        })
    }
}

/// Counts snapshot installs: odd while one is running. Readers compare it
/// before and after a read so they never return a half-installed state;
/// [`InstallGeneration::subscribe`] tells when an install starts and ends.
#[derive(Debug, Clone)]
pub(crate) struct InstallGeneration {
    count: Arc<AtomicU64>,
    installing: Arc<watch::Sender<bool>>,
}

impl Default for InstallGeneration {
    fn default() -> Self {
        Self {
            count: Arc::default(),
            installing: Arc::new(watch::Sender::new(false)),
        }
    }
}

impl InstallGeneration {
    /// The current generation, or `None` while an install runs.
    pub(crate) fn stable(&self) -> Option<u64> {
        let g = self.count.load(Ordering::Acquire);
        g.is_multiple_of(2).then_some(g)
    }

    /// A receiver of whether an install runs, changed as one starts and ends.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.installing.subscribe()
    }

    fn bump(&self) {
        let g = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        self.installing.send_replace(!g.is_multiple_of(2));
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::command::{ApplyError, Command, CommandResult, Op, PutRequest, Txn};
    use crate::ProposalId;

    fn tagged(epoch: u64, seq: u64, floor: u64, key: &str) -> Command {
        Command::Tagged {
            id: ProposalId {
                origin: 1,
                epoch,
                seq,
            },
            floor,
            cmd: Box::new(Command::Txn(Txn {
                success: vec![Op::Put(PutRequest::new(key, "v"))],
                ..Txn::default()
            })),
        }
    }

    /// Every session change reaches the mirror exactly as it reaches the
    /// disk: records made, made and evicted in one entry, evicted later,
    /// and dropped when a new epoch replaces the session.
    #[tokio::test]
    async fn the_session_mirror_always_equals_the_stored_table() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_log, mut sm, _store) = crate::open(dir.path()).expect("open");
        let entries = [
            tagged(1, 1, 1, "a"),
            Command::Batch(vec![
                tagged(1, 2, 1, "b"),
                tagged(1, 3, 3, "c"),
                tagged(1, 2, 1, "b"),
            ]),
            tagged(1, 2, 1, "b"),
            Command::Batch(vec![tagged(1, 4, 4, "d"), tagged(1, 5, 4, "e")]),
            tagged(2, 1, 1, "f"),
            Command::Batch(vec![tagged(2, 2, 1, "g"), tagged(1, 6, 6, "stale")]),
        ];
        for (i, cmd) in entries.into_iter().enumerate() {
            let entry = Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), i as u64 + 1),
                payload: EntryPayload::Normal(cmd.into()),
            };
            sm.apply(vec![entry]).await.expect("apply");
            assert_eq!(
                sm.sessions,
                SessionTable::load(&sm.engine).expect("load"),
                "after entry {}",
                i + 1
            );
        }
        let stored: Vec<u64> = crate::session::read_records(&sm.engine, 1)
            .expect("records")
            .into_iter()
            .flat_map(|(_, records)| records.into_iter().map(|(seq, _)| seq))
            .collect();
        assert_eq!(stored, vec![1, 2], "epoch 2's two writes");
    }

    /// A data directory of format 3 opens and is marked with this build's
    /// format (format 4 reads its rows); one of an older format is refused.
    #[tokio::test]
    async fn a_format_3_directory_is_upgraded_and_an_older_one_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mark = |format: u32| {
            let (_log, sm, _store) = crate::open(dir.path()).expect("open");
            let mut batch = sm.engine.batch();
            batch
                .put(
                    Cf::SmMeta,
                    schema::SM_FORMAT_VERSION,
                    &bincode::serialize(&format).expect("encode"),
                )
                .expect("stage");
            sm.engine.write(batch, true).expect("write");
        };
        mark(3);
        let (log, sm, store) = crate::open(dir.path()).expect("format 3 opens");
        let stored = sm
            .engine
            .get(Cf::SmMeta, schema::SM_FORMAT_VERSION)
            .expect("read")
            .expect("a format row");
        assert_eq!(
            bincode::deserialize::<u32>(&stored).expect("decode"),
            schema::FORMAT_VERSION
        );
        drop((log, sm, store));
        mark(2);
        match crate::open(dir.path()) {
            Err(StoreError::FormatVersion { found: 2, expected }) => {
                assert_eq!(expected, schema::FORMAT_VERSION)
            }
            Err(e) => panic!("refused for another reason: {e}"),
            Ok(_) => panic!("a format-2 directory opened"),
        }
    }

    /// An entry's records of one origin are one row, whatever the number
    /// of its proposals; the row stays while any of its seqs is at or above
    /// the floor and goes in one delete once the floor passes them all. A
    /// copy is answered from its row, and so from a format-3 row of one
    /// record, which goes the same way.
    #[tokio::test]
    async fn an_entry_records_one_row_per_origin_and_the_floor_drops_it_whole() {
        use crate::schema::SessionRecordRow;

        let dir = tempfile::tempdir().expect("tempdir");
        let (_log, mut sm, _store) = crate::open(dir.path()).expect("open");
        // Applies `cmd` as the next entry; the mirror must equal the disk.
        async fn apply(sm: &mut StateMachine, cmd: Command) -> Response {
            let index = sm.last_applied.map_or(0, |l| l.index) + 1;
            let entry = Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
                payload: EntryPayload::Normal(cmd.into()),
            };
            let mut responses = sm.apply(vec![entry]).await.expect("apply");
            assert_eq!(
                sm.sessions,
                SessionTable::load(&sm.engine).expect("load"),
                "after entry {index}"
            );
            responses.pop().expect("one response")
        }
        let rows = |sm: &StateMachine| -> Vec<(SessionRecordRow, Vec<u64>)> {
            crate::session::read_records(&sm.engine, 1)
                .expect("records")
                .into_iter()
                .map(|(row, records)| (row, records.into_iter().map(|(seq, _)| seq).collect()))
                .collect()
        };
        let group = |first| SessionRecordRow { first, group: true };

        let first = apply(
            &mut sm,
            Command::Batch(vec![
                tagged(1, 1, 1, "a"),
                tagged(1, 3, 1, "b"),
                tagged(1, 2, 1, "c"),
            ]),
        )
        .await;
        let Ok(CommandResult::Batch(answers)) = first.result else {
            panic!("a batch's answers: {first:?}");
        };
        assert_eq!(rows(&sm), vec![(group(1), vec![1, 3, 2])]);

        // The floor passes 1 and 2, not 3: the row stays.
        apply(&mut sm, tagged(1, 4, 3, "d")).await;
        assert_eq!(
            rows(&sm),
            vec![(group(1), vec![1, 3, 2]), (group(4), vec![4])]
        );
        // A copy of 3 is answered from the row, as first answered.
        let copy = apply(&mut sm, tagged(1, 3, 3, "b")).await;
        assert_eq!(copy, answers[1]);
        // A copy of 2 is below the floor: refused, though its row stays.
        let late = apply(&mut sm, tagged(1, 2, 3, "c")).await;
        assert_eq!(late.result, Err(ApplyError::StaleProposal));

        // The floor passes 3 as well: the first row goes.
        apply(&mut sm, tagged(1, 5, 4, "e")).await;
        assert_eq!(rows(&sm), vec![(group(4), vec![4]), (group(5), vec![5])]);

        // A row of one record, as format 3 wrote them, is read as well.
        let recorded = crate::session::Recorded::Response(answers[0].clone());
        let mut batch = sm.engine.batch();
        batch
            .put(
                Cf::Sessions,
                &schema::session_record_key(1, 9),
                &bincode::serialize(&recorded).expect("encode"),
            )
            .expect("stage");
        sm.engine.write(batch, true).expect("write");
        sm.sessions = SessionTable::load(&sm.engine).expect("load");
        let copy = apply(&mut sm, tagged(1, 9, 4, "z")).await;
        assert_eq!(copy, answers[0]);
        apply(&mut sm, tagged(1, 10, 6, "f")).await;
        assert_eq!(
            rows(&sm),
            vec![
                (
                    SessionRecordRow {
                        first: 9,
                        group: false
                    },
                    vec![9]
                ),
                (group(10), vec![10])
            ]
        );
        apply(&mut sm, tagged(1, 11, 10, "g")).await;
        assert_eq!(
            rows(&sm),
            vec![(group(10), vec![10]), (group(11), vec![11])]
        );
    }

    /// Ranges read while entries are applied answer with the revision their
    /// own snapshot holds (debug builds check the sealed state against the
    /// snapshot's rows on every read): never older than a key they return,
    /// never going back, and the last one exactly where apply ended.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ranges_during_applies_answer_the_revision_their_snapshot_holds() {
        use std::sync::atomic::AtomicBool;

        use crate::command::{KeyRange, RangeRequest};

        let dir = tempfile::tempdir().expect("tempdir");
        let (_log, mut sm, store) = crate::open(dir.path()).expect("open");
        let all = RangeRequest {
            range: KeyRange::prefix("k"),
            ..RangeRequest::default()
        };
        let stop = Arc::new(AtomicBool::new(false));
        // The writes start once the reader has read: on a loaded machine
        // the thread may otherwise start after the last of them.
        let (first_read, reading) = tokio::sync::oneshot::channel();
        let reader = {
            let (store, stop, all) = (store.clone(), stop.clone(), all.clone());
            std::thread::spawn(move || {
                let (mut reads, mut last) = (0u64, Revision::ZERO);
                let mut first_read = Some(first_read);
                while !stop.load(Ordering::SeqCst) {
                    let read = store.range(&all).expect("range");
                    let newest = read.kvs.iter().map(|kv| kv.mod_revision).max();
                    assert!(
                        newest.is_none_or(|newest| newest <= read.revision),
                        "a key at {newest:?} read at {:?}",
                        read.revision
                    );
                    assert!(read.revision >= last, "{:?} after {last:?}", read.revision);
                    last = read.revision;
                    reads += 1;
                    if let Some(first_read) = first_read.take() {
                        let _ = first_read.send(());
                    }
                }
                reads
            })
        };
        reading.await.expect("the reader read");
        let writes = 300u64;
        for i in 0..writes {
            let put = Command::Txn(Txn {
                success: vec![Op::Put(PutRequest::new(format!("k{}", i % 7), "v"))],
                ..Txn::default()
            });
            let entry = Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), i + 1),
                payload: EntryPayload::Normal(put.into()),
            };
            sm.apply(vec![entry]).await.expect("apply");
        }
        stop.store(true, Ordering::SeqCst);
        let reads = reader.join().expect("reader");
        assert!(reads > 0, "the reader ran");
        let last = store.range(&all).expect("range");
        assert_eq!(last.revision, Revision(writes));
        assert_eq!(last.kvs.len(), 7);
    }
}

//! The Raft log, in segment files of its own (`crate::segment_log`), and
//! the vote, in the `raft_meta` column family.
//!
//! Group commit: an append writes its entries to the active segment without
//! waiting and returns, so openraft goes on (replicating the same entries
//! to the followers meanwhile); one flusher thread then fsyncs the segments
//! once for every append that queued up behind the previous fsync and only
//! then tells openraft those entries are durable, in order. Under load many
//! appends share one fsync. The log is the state machine's durable record:
//! the state machine's rows skip RocksDB's WAL (see `crate::purge`).
//!
//! The leader's own entries are the exception: openraft 0.9 waits for an
//! append's flush before it replicates, so for them the append reports
//! "flushed" as soon as they are written and the fsync follows, overlapping
//! the followers' (see `crate::log_durability` for what keeps that safe).
//!
//! The latest appended entries are also kept decoded in memory
//! ([`RecentEntries`]): openraft reads each entry back soon after the
//! append (to apply it, and on the leader once per follower to send it),
//! and those reads are served without a RocksDB scan and a decode.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Instant;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogId, StorageError, Vote};
use tracing::instrument;

use crate::engine::Engine;
use crate::error::StoreError;
use crate::faults::DiskFaults;
use crate::ids::NodeId;
use crate::log_durability::LogDurability;
use crate::purge::PurgeHorizon;
use crate::raft_types::{Entry, TypeConfig};
use crate::recent::RecentRun;
use crate::schema::{self, Cf};
use crate::segment_log::{LogSegments, RecordBatch};
use crate::timings::{Stage, StageTimes};

/// openraft's log store over its segment files (the entries) and the
/// shared engine (the vote). Cheap to clone: openraft
/// takes one clone as the reader used by replication.
#[derive(Debug, Clone)]
pub struct LogStore {
    /// The vote and the commit index, in `raft_meta`.
    engine: Engine,
    /// The entries.
    segments: LogSegments,
    flusher: Arc<Flusher>,
    /// Purges go through it: never past what the current snapshot covers.
    horizon: PurgeHorizon,
    /// [`Stage::LogAppend`] and [`Stage::LogFsync`] are timed here.
    timings: Arc<StageTimes>,
    /// The latest entries, shared by the clones (the reader too).
    recent: Arc<Mutex<RecentEntries>>,
    /// How far the log is on disk.
    durability: LogDurability,
    /// This node's id, once [`LogStore::leading_as`] told it: only then are
    /// the leader's own appends reported flushed before their fsync.
    own_id: Option<NodeId>,
    /// The vote as last saved, to tell the leader's own appends.
    vote: Arc<Mutex<Option<Vote<NodeId>>>>,
}

/// How many bytes of encoded entries [`RecentEntries`] keeps: under load
/// a few hundred batched entries, more than replication and apply lag by.
const RECENT_ENTRY_BYTES: usize = 8 << 20;

/// The latest appended entries, decoded, exactly as the log holds them.
///
/// Invariant: its run ends at the log's last entry (an append not
/// following it replaces the run; a truncation cuts it back with the
/// log). A read is served from here only when every entry it asks for is
/// here and above the purge point; anything else reads RocksDB.
type RecentEntries = RecentRun<Entry>;

fn index(entry: &Entry) -> u64 {
    entry.get_log_id().index
}

/// The flusher thread's queue and handle, shared by the clones. Dropping
/// the last clone closes the queue and waits for the thread to finish its
/// last fsync and let go of the engine, so the database never outlives its
/// owners on a thread nobody waits for (at process exit that raced
/// RocksDB's own teardown).
#[derive(Debug)]
struct Flusher {
    queue: Option<mpsc::Sender<QueuedAppend>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the log flusher thread panicked");
            }
        }
    }
}

/// An append waiting for the flusher's fsync.
struct QueuedAppend {
    /// openraft's callback; `None` for the leader's own entries, which were
    /// reported flushed when written.
    callback: Option<LogFlushed<TypeConfig>>,
    /// Its last entry (`None` for an empty append).
    last: Option<LogId<NodeId>>,
    /// The truncation generation it was written in.
    generation: u64,
}

/// The flusher thread: waits for an append to be queued, takes every other
/// queued append with it, fsyncs once, and completes them all in order
/// ([`complete_synced`]). It ends when every [`LogStore`] clone is dropped.
fn run_flusher(
    segments: LogSegments,
    faults: DiskFaults,
    timings: Arc<StageTimes>,
    durability: LogDurability,
    queue: mpsc::Receiver<QueuedAppend>,
) {
    while let Ok(first) = queue.recv() {
        let mut done = vec![first];
        done.extend(queue.try_iter());
        let started = Instant::now();
        let slow_disk = faults.fsync_delay();
        if !slow_disk.is_zero() {
            std::thread::sleep(slow_disk);
        }
        let synced = segments.sync();
        timings.record_since(Stage::LogFsync, started);
        tracing::trace!(appends = done.len(), ok = synced.is_ok(), "log fsync");
        complete_synced(&durability, done, synced.as_ref().err());
    }
}

/// Completes `done`, appends one fsync covered (or failed with `error`):
/// first tells `durability`, so nothing learns of a flush before it is
/// visible there, then openraft's callbacks, in order.
fn complete_synced(
    durability: &LogDurability,
    done: Vec<QueuedAppend>,
    error: Option<&StoreError>,
) {
    let error = error.map(|e| e.to_string());
    if let Some(e) = &error {
        tracing::error!(error = %e, "the log's fsync failed");
    }
    for append in &done {
        if let Some(last) = append.last {
            durability.synced(last, append.generation, error.as_deref());
        }
    }
    for append in done {
        if let Some(callback) = append.callback {
            match &error {
                None => callback.log_io_completed(Ok(())),
                Some(e) => callback.log_io_completed(Err(std::io::Error::other(e.clone()))),
            }
        }
    }
}

impl LogStore {
    /// The log store over `segments`, its vote in `engine`; everything the
    /// log holds at open is on disk (what a crash lost is not there to
    /// hold).
    pub(crate) fn new(
        engine: Engine,
        segments: LogSegments,
        faults: DiskFaults,
        horizon: PurgeHorizon,
        timings: Arc<StageTimes>,
    ) -> Result<Self, StoreError> {
        let last = last_entry_id(&segments)?.or(horizon.purged());
        let durability = LogDurability::new(last);
        let vote = Arc::new(Mutex::new(None));
        let (tx, queue) = mpsc::channel();
        let (flushing, flush_timings, flush_durability) =
            (segments.clone(), timings.clone(), durability.clone());
        // A plain thread: fsync blocks, and it must not hold an async worker.
        let thread = std::thread::Builder::new()
            .name("kubestore-log-fsync".into())
            .spawn(move || run_flusher(flushing, faults, flush_timings, flush_durability, queue))
            .map_err(|e| tracing::error!(error = %e, "cannot start the log flusher"))
            .ok();
        let store = Self {
            engine,
            segments,
            flusher: Arc::new(Flusher {
                queue: Some(tx),
                thread,
            }),
            horizon,
            timings,
            recent: Arc::new(Mutex::new(RecentRun::new(RECENT_ENTRY_BYTES))),
            durability,
            own_id: None,
            vote,
        };
        *store.vote.lock().unwrap_or_else(PoisonError::into_inner) =
            store.get_meta(schema::RAFT_VOTE)?;
        Ok(store)
    }

    /// Reports this node's own entries, while it leads, flushed before
    /// their fsync (see `crate::log_durability`). Without it every append
    /// waits for its fsync.
    pub fn leading_as(mut self, id: NodeId) -> Self {
        self.own_id = Some(id);
        self
    }

    /// How far the log is on disk, for the network to clamp the commit
    /// index it tells followers with.
    pub fn durability(&self) -> &LogDurability {
        &self.durability
    }

    /// Whether `first` (the first of an append's entries) is this node's
    /// own, written while it leads: the saved vote is this node's,
    /// committed (it won the election), and of the entry's term.
    fn is_own_entry(&self, first: &LogId<NodeId>) -> bool {
        let Some(own) = self.own_id else {
            return false;
        };
        let vote = self.vote.lock().unwrap_or_else(PoisonError::into_inner);
        vote.as_ref().is_some_and(|v| {
            v.is_committed()
                && v.leader_id().voted_for() == Some(own)
                && first.leader_id.voted_for() == Some(own)
                && first.leader_id.get_term() == v.leader_id().get_term()
        })
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, RecentEntries> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get_meta<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        match self.engine.get(Cf::RaftMeta, key)? {
            Some(bytes) => Ok(Some(bincode::deserialize(&bytes)?)),
            None => Ok(None),
        }
    }

    fn put_meta<T: serde::Serialize>(
        &self,
        key: &[u8],
        value: &T,
        sync: bool,
    ) -> Result<(), StoreError> {
        let mut batch = self.engine.batch();
        batch.put(Cf::RaftMeta, key, &bincode::serialize(value)?)?;
        self.engine.write(batch, sync)
    }

    fn read_entries(&self, range: impl RangeBounds<u64>) -> Result<Vec<Entry>, StoreError> {
        let start = match range.start_bound() {
            Bound::Included(&n) => n,
            Bound::Excluded(&n) => n.saturating_add(1),
            Bound::Unbounded => 0,
        };
        // What the purge point covers is gone, though a segment holding
        // later entries too may still hold it.
        let floor = self
            .horizon
            .purged()
            .map_or(0, |p| p.index.saturating_add(1));
        let start = start.max(floor);
        let end = match range.end_bound() {
            Bound::Included(&n) => n.checked_add(1),
            Bound::Excluded(&n) => Some(n),
            Bound::Unbounded => None,
        };
        if end.is_some_and(|end| end <= start) {
            return Ok(Vec::new());
        }
        if let Some(entries) = self.recent().range(start, end) {
            return Ok(entries.map(|(_, e)| e.clone()).collect());
        }
        self.segments
            .read(start, end)?
            .iter()
            .map(|bytes| Ok(bincode::deserialize(bytes)?))
            .collect()
    }

    /// Appends `entries` and syncs, outside openraft (tests build logs
    /// with it; openraft's own append callback cannot be made outside it).
    #[cfg(test)]
    pub(crate) fn append_synced(&self, entries: Vec<Entry>) -> Result<(), StoreError> {
        let (batch, appended) = self.stage_entries(entries)?;
        let generation = self.durability.generation();
        self.segments.append(&batch)?;
        self.segments.sync()?;
        if let Some((last, _)) = appended.last() {
            self.durability.synced(*last.get_log_id(), generation, None);
        }
        self.remember(appended);
        Ok(())
    }

    /// `entries`' records, each entry encoded once, straight into the
    /// buffer the segment is written from, and the entries with their
    /// encoded sizes, for [`LogStore::remember`] once it is written.
    fn stage_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<StagedEntries, StoreError> {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let bytes = entries
            .iter()
            .map(|e| bincode::serialized_size(e).map(|n| n as usize))
            .sum::<Result<usize, _>>()?;
        let mut batch = RecordBatch::with_capacity(entries.len(), bytes);
        let mut appended = Vec::with_capacity(entries.len());
        for entry in entries {
            let size = batch.push(index(&entry), |buf| {
                Ok(bincode::serialize_into(buf, &entry)?)
            })?;
            appended.push((entry, size));
        }
        Ok((batch, appended))
    }

    /// Keeps entries just written in [`RecentEntries`]. openraft appends
    /// after the last entry (a conflict is truncated first); should an
    /// append not follow the run, the run is kept only if the appended
    /// entries are the log's last, so it never ends short of the log (a
    /// failed read of the last entry empties it: the run is only a cache).
    fn remember(&self, appended: Vec<(Entry, usize)>) {
        let Some(first) = appended.first().map(|(e, _)| index(e)) else {
            return;
        };
        let follows = self.recent().follows(first);
        let last_appended = appended.last().map(|(e, _)| *e.get_log_id());
        if !follows && self.last_entry_id().ok().flatten() != last_appended {
            self.recent().clear();
            return;
        }
        let mut recent = self.recent();
        for (entry, size) in appended {
            recent.push(index(&entry), entry, size);
        }
    }

    fn last_entry_id(&self) -> Result<Option<LogId<NodeId>>, StoreError> {
        last_entry_id(&self.segments)
    }
}

/// Moves the log of a directory of format 3 or 4 out of the `raft_log`
/// column family into `segments`, skipping what `purged` covers; how many
/// entries moved. The rows go only once the segments holding them are
/// synced, so a crash in between leaves the rows, and the next open moves
/// them again over whatever segments the first try wrote.
pub(crate) fn move_log_from_rocksdb(
    engine: &Engine,
    segments: &LogSegments,
    purged: Option<LogId<NodeId>>,
) -> Result<u64, StoreError> {
    let Some((last_key, _)) = engine.last(Cf::RaftLog)? else {
        return Ok(0);
    };
    segments.truncate_from(0)?;
    let floor = purged.map_or(0, |p| p.index.saturating_add(1));
    let mut moved = 0;
    let mut batch = RecordBatch::with_capacity(0, 0);
    let mut previous: Option<u64> = None;
    let mut batched_bytes = 0;
    for row in engine.scan(Cf::RaftLog, &schema::u64_key(floor), None)? {
        let (key, value) = row?;
        let index = schema::decode_u64(&key)
            .ok_or_else(|| StoreError::Corrupt(format!("raft_log key {key:?}")))?;
        // A batch's records follow one another; a gap starts another.
        if previous.is_some_and(|p| p.checked_add(1) != Some(index)) || batched_bytes > 8 << 20 {
            segments.append(&batch)?;
            batch = RecordBatch::with_capacity(0, 0);
            batched_bytes = 0;
        }
        batched_bytes += batch.push(index, |buf| {
            buf.extend_from_slice(&value);
            Ok(())
        })?;
        previous = Some(index);
        moved += 1;
    }
    segments.append(&batch)?;
    segments.sync()?;
    let mut end = last_key.to_vec();
    end.push(0);
    let mut rows = engine.batch();
    rows.delete_range(Cf::RaftLog, &schema::u64_key(0), &end)?;
    engine.write(rows, true)?;
    tracing::info!(moved, "moved the Raft log from RocksDB into segment files");
    Ok(moved)
}

/// The log id of the last entry in `segments`.
fn last_entry_id(segments: &LogSegments) -> Result<Option<LogId<NodeId>>, StoreError> {
    let Some((_, last)) = segments.bounds() else {
        return Ok(None);
    };
    match segments.read(last, last.checked_add(1))?.first() {
        Some(bytes) => {
            let entry: Entry = bincode::deserialize(bytes)?;
            Ok(Some(*entry.get_log_id()))
        }
        None => Err(StoreError::Corrupt(format!(
            "the log's last entry {last} does not read back"
        ))),
    }
}

/// The first and last log ids of an append.
type AppendedSpan = (LogId<NodeId>, LogId<NodeId>);

/// A batch of log entries' records, and the entries with their encoded
/// sizes.
type StagedEntries = (RecordBatch, Vec<(Entry, usize)>);

fn log_err(e: StoreError, verb: ErrorVerb) -> StorageError<NodeId> {
    e.into_raft(ErrorSubject::Logs, verb)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        self.read_entries(range)
            .map_err(|e| log_err(e, ErrorVerb::Read))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let last_purged = self.horizon.purged();
        let last = self
            .last_entry_id()
            .map_err(|e| log_err(e, ErrorVerb::Read))?;
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last.or(last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    #[instrument(level = "debug", skip(self))]
    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        // Every append written before it is synced first: when a node stops
        // leading (or starts), every entry it reported early is on disk.
        self.segments
            .sync()
            .map_err(|e| e.into_raft(ErrorSubject::Vote, ErrorVerb::Write))?;
        self.put_meta(schema::RAFT_VOTE, vote, true)
            .map_err(|e| e.into_raft(ErrorSubject::Vote, ErrorVerb::Write))?;
        *self.vote.lock().unwrap_or_else(PoisonError::into_inner) = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        let vote = self
            .get_meta(schema::RAFT_VOTE)
            .map_err(|e| e.into_raft(ErrorSubject::Vote, ErrorVerb::Read))?;
        *self.vote.lock().unwrap_or_else(PoisonError::into_inner) = vote;
        Ok(vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        // Not synced: losing it only means re-learning the commit index from
        // the leader.
        self.put_meta(schema::RAFT_COMMITTED, &committed, false)
            .map_err(|e| log_err(e, ErrorVerb::Write))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self
            .get_meta::<Option<LogId<NodeId>>>(schema::RAFT_COMMITTED)
            .map_err(|e| log_err(e, ErrorVerb::Read))?
            .flatten())
    }

    #[instrument(level = "debug", skip_all)]
    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = Instant::now();
        let generation = self.durability.generation();
        let write = || -> Result<Option<AppendedSpan>, StoreError> {
            let (batch, appended) = self.stage_entries(entries)?;
            let span = appended
                .first()
                .zip(appended.last())
                .map(|((first, _), (last, _))| (*first.get_log_id(), *last.get_log_id()));
            // Not synced here: the flusher's fsync makes it durable.
            self.segments.append(&batch)?;
            self.remember(appended);
            Ok(span)
        };
        match write() {
            Ok(span) => {
                self.timings.record_since(Stage::LogAppend, started);
                // The leader's own entries are reported now, and replicated
                // while the flusher syncs them; a follower's wait for it.
                let own = span.is_some_and(|(first, _)| self.is_own_entry(&first));
                let (early, callback) = match own {
                    true => (Some(callback), None),
                    false => (None, Some(callback)),
                };
                let last = span.map(|(_, last)| last);
                tracing::trace!(?last, early = own, "log appended; fsync queued");
                let append = QueuedAppend {
                    callback,
                    last,
                    generation,
                };
                let queued = match &self.flusher.queue {
                    Some(queue) => queue.send(append),
                    None => Err(mpsc::SendError(append)),
                };
                if let Err(mpsc::SendError(append)) = queued {
                    // No flusher (it could not start): sync here instead.
                    let synced = self.segments.sync();
                    complete_synced(&self.durability, vec![append], synced.as_ref().err());
                    synced.map_err(|e| log_err(e, ErrorVerb::Write))?;
                }
                if let Some(callback) = early {
                    if let Some(last) = last {
                        self.durability.reported_early(last);
                    }
                    callback.log_io_completed(Ok(()));
                }
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(log_err(e, ErrorVerb::Write))
            }
        }
    }

    #[instrument(level = "debug", skip(self))]
    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.recent().truncate_from(log_id.index);
        // Durable before anything is appended over it.
        self.segments
            .truncate_from(log_id.index)
            .map_err(|e| log_err(e, ErrorVerb::Delete))?;
        let last = self
            .last_entry_id()
            .map_err(|e| log_err(e, ErrorVerb::Read))?
            .or(self.horizon.purged());
        self.durability.truncated(last);
        Ok(())
    }

    /// Purges through the `PurgeHorizon`: at once as far as the current
    /// snapshot covers, the rest when a newer snapshot is in place (see
    /// `crate::purge` for why openraft's request cannot be done as asked).
    #[instrument(level = "debug", skip(self))]
    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.horizon
            .request(log_id)
            .map_err(|e| log_err(e, ErrorVerb::Delete))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    /// The indexes of what `recent` serves for `start..end`.
    fn get(recent: &RecentEntries, start: u64, end: Option<u64>) -> Option<Vec<u64>> {
        recent
            .range(start, end)
            .map(|r| r.map(|(_, e)| index(e)).collect())
    }

    #[test]
    fn recent_entries_serve_only_a_whole_contiguous_range_and_follow_the_log() {
        let mut recent = RecentEntries::new(RECENT_ENTRY_BYTES);
        assert_eq!(get(&recent, 1, None), None);
        for i in 5..=9 {
            recent.push(i, entry(i), 10);
        }
        assert_eq!(get(&recent, 5, Some(8)), Some(vec![5, 6, 7]));
        assert_eq!(get(&recent, 7, None), Some(vec![7, 8, 9]));
        assert_eq!(get(&recent, 10, None), Some(vec![]));
        // Partly below the run, or past its end: not here.
        assert_eq!(get(&recent, 4, Some(6)), None);
        assert_eq!(get(&recent, 8, Some(11)), None);

        // A truncation cuts the run back with the log; appends follow on.
        recent.truncate_from(8);
        assert_eq!(get(&recent, 5, None), Some(vec![5, 6, 7]));
        recent.push(8, entry(8), 10);
        assert_eq!(get(&recent, 7, None), Some(vec![7, 8]));

        // An append that does not follow (after a snapshot's purge)
        // replaces the run.
        recent.push(20, entry(20), 10);
        assert_eq!(get(&recent, 5, None), None);
        assert_eq!(get(&recent, 20, None), Some(vec![20]));
    }

    /// A directory of format 4 keeps its log in the `raft_log` column
    /// family: opening it moves the entries into segment files, empties
    /// the column family and marks the directory 5.
    #[tokio::test]
    async fn a_log_in_rocksdb_moves_to_segments_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (log, _sm, _store) = crate::open(dir.path()).expect("open");
            let mut batch = log.engine.batch();
            for i in 1..=5 {
                let bytes = bincode::serialize(&entry(i)).expect("encode");
                batch
                    .put(Cf::RaftLog, &schema::u64_key(i), &bytes)
                    .expect("stage");
            }
            batch
                .put(
                    Cf::SmMeta,
                    schema::SM_FORMAT_VERSION,
                    &bincode::serialize(&4u32).expect("encode"),
                )
                .expect("stage");
            log.engine.write(batch, true).expect("write");
        }
        let (mut log, sm, store) = crate::open(dir.path()).expect("format 4 opens");
        assert_eq!(log.engine.last(Cf::RaftLog).expect("read"), None);
        let state = log.get_log_state().await.expect("log state");
        assert_eq!(state.last_log_id.map(|id| id.index), Some(5));
        let moved = log.try_get_log_entries(1..=5).await.expect("read");
        assert_eq!(
            moved.iter().map(index).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        let format = log
            .engine
            .get(Cf::SmMeta, schema::SM_FORMAT_VERSION)
            .expect("read")
            .expect("a format row");
        assert_eq!(
            bincode::deserialize::<u32>(&format).expect("decode"),
            schema::FORMAT_VERSION
        );
        drop((log, sm, store));
        // Reopened, nothing moves again and the entries stay.
        let (mut log, _sm, _store) = crate::open(dir.path()).expect("reopen");
        let kept = log.try_get_log_entries(1..=5).await.expect("read");
        assert_eq!(kept.len(), 5);
    }

    #[test]
    fn recent_entries_drop_the_oldest_past_their_byte_budget() {
        let mut recent = RecentEntries::new(RECENT_ENTRY_BYTES);
        let size = RECENT_ENTRY_BYTES / 4;
        for i in 1..=6 {
            recent.push(i, entry(i), size);
        }
        assert_eq!(get(&recent, 3, None), Some(vec![3, 4, 5, 6]));
        assert_eq!(get(&recent, 2, None), None);
        assert_eq!(recent.bytes(), 4 * size);
        // One entry larger than the budget is still kept, alone.
        recent.push(7, entry(7), 2 * RECENT_ENTRY_BYTES);
        assert_eq!(get(&recent, 7, None), Some(vec![7]));
        assert_eq!(get(&recent, 6, None), None);
    }
}

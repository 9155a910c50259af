//! The Raft log's entries in segment files of their own, as etcd keeps its
//! WAL: each append is one write at the end of the active segment, each
//! fsync one `fdatasync` of it, and nothing of the log passes through
//! RocksDB's memtables, flushes or compactions.
//!
//! A segment is a file `DIR/<first index, 20 digits>.seg`: a header (magic,
//! the index of its first entry, flags), then one record per entry:
//! `len: u32 | crc32: u32 | index: u64 | payload`, little-endian, the CRC
//! over the index and the payload. The active segment is the last one; a new
//! one starts when it passes [`SEGMENT_BYTES`], or when an append does not
//! follow the last entry (openraft appends past a gap only after a snapshot
//! install made everything before it purged; such a segment says so in its
//! header).
//!
//! Invariants:
//!
//! - **Entries in order.** Within a segment the records are the entries
//!   `first, first + 1, ...` without a gap; across segments the indexes
//!   rise, contiguously unless the later segment is marked as starting
//!   after a gap.
//! - **Nothing written after an invalid byte counts.** Everything before a
//!   record is synced before it is reported durable (rotated segments
//!   first, then the active one, then the directory when it gained a
//!   file), so at open the first torn or corrupt record, or the first break
//!   in the order, ends the log: that file is cut there and every later
//!   segment removed. What is cut was never reported durable. (A segment
//!   that lost its last records whole, leaving zeros, is caught by the
//!   next segment, which then does not start where it ended.)
//! - **A truncation is durable before anything is appended over it**: the
//!   segment is cut and synced, the later ones removed and the directory
//!   synced, so a crash never brings back an entry a truncation removed
//!   behind a newer one.
//! - **Written over, not appended.** A background thread keeps the active
//!   segment zero-filled, and synced, [`ZERO_AHEAD`] bytes past its last
//!   record, so an append writes over blocks the file already has and its
//!   `fdatasync` commits no new size or block to the journal: on ext4 here
//!   that is about a third less CPU and half again the rate (see
//!   BENCHMARKS.md, "The Raft log in segment files of its own"). The
//!   filler never writes below a record: it starts at the zero-filled
//!   mark, which an append past it moves first. A segment's log therefore
//!   ends at its first record that is not the next entry; zeros after it
//!   are the filled space.
//! - **A purge removes whole segments** whose entries are all at or below
//!   the purge point; the purge point itself is recorded elsewhere
//!   (`crate::purge`), synced, before any file goes, and at open the
//!   segments it covers are removed, so a purge a crash interrupted is
//!   finished then. Reads below the purge point are the log store's to
//!   refuse: a segment that also holds later entries stays whole.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};

use crate::error::StoreError;

/// A segment is closed, and the next append starts a new one, once it
/// holds this many bytes (etcd's WAL segments are the same size).
pub(crate) const SEGMENT_BYTES: u64 = 64 << 20;

const MAGIC: &[u8; 8] = b"KSRAFT01";
/// Magic, first index, flags.
const HEADER_BYTES: u64 = 24;
/// Length, CRC, index.
const RECORD_HEADER_BYTES: usize = 16;
/// Header flag: this segment's first entry does not follow the previous
/// segment's last (an append after a snapshot install).
const AFTER_GAP: u64 = 1;
const SUFFIX: &str = ".seg";

/// A read of the log reads at most about this much in one `pread`.
const READ_SPAN_BYTES: u64 = 1 << 20;

/// How far past its last record the active segment is kept zero-filled.
pub(crate) const ZERO_AHEAD: u64 = 4 << 20;
/// What the filler writes, and syncs, at a time: small, because the log's
/// own fsync of the segment also writes out whatever zeros are still
/// dirty when it runs (4 MiB at a time raised the puts' p99 about 8%).
const ZERO_STEP: u64 = 512 << 10;

/// The segment files of one node's log. Cheap to clone: the log store's
/// clones, its flusher thread and the purge horizon share one.
#[derive(Debug, Clone)]
pub(crate) struct LogSegments {
    inner: Arc<Mutex<Segments>>,
}

/// How far a segment file is zero-filled (or holds records): the filler
/// writes only from here on, and an append that goes past it moves it
/// first, holding `busy`, which the filler holds while it writes.
#[derive(Debug)]
struct Filled {
    upto: AtomicU64,
    busy: Mutex<()>,
    /// A fill is queued or running.
    asked: AtomicBool,
}

impl Filled {
    fn new(upto: u64) -> Arc<Self> {
        Arc::new(Self {
            upto: AtomicU64::new(upto),
            busy: Mutex::new(()),
            asked: AtomicBool::new(false),
        })
    }

    fn busy(&self) -> MutexGuard<'_, ()> {
        self.busy.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A request to the filler thread: zero-fill [`ZERO_STEP`] more bytes of
/// `file` past where it is filled now.
struct Fill {
    file: Arc<File>,
    path: PathBuf,
    filled: Arc<Filled>,
}

/// The filler thread: zero-fills what it is asked to, then syncs it, so
/// the appends that later write over it commit no new blocks. Ends when
/// the segments are dropped.
fn run_filler(queue: mpsc::Receiver<Fill>) {
    let zeros = vec![0u8; ZERO_STEP as usize];
    while let Ok(fill) = queue.recv() {
        let result = (|| -> std::io::Result<()> {
            {
                let _busy = fill.filled.busy();
                let from = fill.filled.upto.load(Ordering::Acquire);
                fill.file.write_all_at(&zeros, from)?;
                fill.filled.upto.store(from + ZERO_STEP, Ordering::Release);
            }
            fill.file.sync_data()
        })();
        fill.filled.asked.store(false, Ordering::Release);
        if let Err(e) = result {
            // Only a cost: appends extend the file themselves.
            tracing::warn!(file = %fill.path.display(), error = %e, "zero-filling a log segment failed");
        }
    }
}

#[derive(Debug)]
struct Segments {
    dir: PathBuf,
    /// By first index; the last is the active one.
    files: BTreeMap<u64, Segment>,
    /// Segment files written since the last sync, the active one aside
    /// (which every sync covers).
    unsynced: Vec<Arc<File>>,
    /// The directory gained or lost a file since its last sync.
    dir_unsynced: bool,
    /// Bumped by every truncation, the one change to what lies at an
    /// offset a read may have planned ([`LogSegments::read`]).
    generation: u64,
    segment_bytes: u64,
    /// The filler thread's queue.
    filler: Option<mpsc::Sender<Fill>>,
    filler_thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Segments {
    /// Closes the filler's queue and waits for its last fill: a filler that
    /// outlived its segments could write zeros over the records of a log
    /// reopened in the same process.
    fn drop(&mut self) {
        self.filler.take();
        if let Some(thread) = self.filler_thread.take() {
            if thread.join().is_err() {
                tracing::error!("the log's filler thread panicked");
            }
        }
    }
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    file: Arc<File>,
    first: u64,
    /// Where each record starts and how long it is, entry `first + i` at
    /// `records[i]`.
    records: Vec<(u64, u32)>,
    /// Where the next record goes.
    end: u64,
    filled: Arc<Filled>,
}

impl Segment {
    /// The index after the last entry.
    fn next(&self) -> u64 {
        self.first + self.records.len() as u64
    }
}

/// Records for one append, encoded in place in one buffer: the bytes
/// written to the segment as they are.
#[derive(Debug)]
pub(crate) struct RecordBatch {
    buf: Vec<u8>,
    /// Each record's index, where it starts in `buf`, and its length.
    records: Vec<(u64, usize, u32)>,
}

impl RecordBatch {
    /// An empty batch for about `bytes` of payloads in `records` records.
    pub(crate) fn with_capacity(records: usize, bytes: usize) -> Self {
        Self {
            buf: Vec::with_capacity(bytes + records * RECORD_HEADER_BYTES),
            records: Vec::with_capacity(records),
        }
    }

    /// Adds the record of entry `index`, whose payload `encode` appends to
    /// the buffer it is given; the payload's length. Indexes must ascend
    /// without gaps.
    pub(crate) fn push(
        &mut self,
        index: u64,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(), StoreError>,
    ) -> Result<usize, StoreError> {
        let start = self.buf.len();
        self.buf.resize(start + RECORD_HEADER_BYTES, 0);
        encode(&mut self.buf)?;
        let payload = &self.buf[start + RECORD_HEADER_BYTES..];
        let len = payload.len();
        let len32 = u32::try_from(len)
            .map_err(|_| StoreError::Corrupt(format!("log entry {index} is over 4 GiB")))?;
        let crc = record_crc(index, payload);
        self.buf[start..start + 4].copy_from_slice(&len32.to_le_bytes());
        self.buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        self.buf[start + 8..start + 16].copy_from_slice(&index.to_le_bytes());
        let record = u32::try_from(self.buf.len() - start)
            .map_err(|_| StoreError::Corrupt(format!("log entry {index} is over 4 GiB")))?;
        self.records.push((index, start, record));
        Ok(len)
    }
}

/// What one sync must cover, taken under the lock and run outside it so
/// appends go on meanwhile.
#[derive(Debug)]
pub(crate) struct SyncWork {
    files: Vec<Arc<File>>,
    dir: Option<PathBuf>,
}

impl SyncWork {
    /// Syncs every file written since the last sync, then the directory if
    /// it changed: everything appended before the work was taken is on
    /// disk once it returns.
    pub(crate) fn run(self) -> Result<(), StoreError> {
        for file in &self.files {
            file.sync_data()
                .map_err(|e| StoreError::Io("log segment".into(), e))?;
        }
        if let Some(dir) = self.dir {
            sync_dir(&dir)?;
        }
        Ok(())
    }
}

fn io_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(path.display().to_string(), e)
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(dir, e))
}

fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}{SUFFIX}"))
}

fn record_crc(index: u64, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&index.to_le_bytes());
    crc.update(payload);
    crc.finalize()
}

impl LogSegments {
    /// Opens (or creates) the log in `dir`, recovering it as the module
    /// says; segments wholly at or below `purged` are removed.
    pub(crate) fn open(dir: &Path, purged: Option<u64>) -> Result<Self, StoreError> {
        Self::open_with(dir, purged, SEGMENT_BYTES)
    }

    /// [`LogSegments::open`], closing segments at `segment_bytes` (tests
    /// rotate small segments).
    pub(crate) fn open_with(
        dir: &Path,
        purged: Option<u64>,
        segment_bytes: u64,
    ) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let (tx, queue) = mpsc::channel();
        let filler_thread = std::thread::Builder::new()
            .name("kubestore-log-zero".into())
            .spawn(move || run_filler(queue))
            .map_err(
                |e| tracing::warn!(error = %e, "cannot start the log's filler; appends extend"),
            )
            .ok();
        let mut segments = Segments {
            dir: dir.to_path_buf(),
            files: BTreeMap::new(),
            unsynced: Vec::new(),
            dir_unsynced: false,
            generation: 0,
            segment_bytes,
            filler: filler_thread.as_ref().map(|_| tx),
            filler_thread,
        };
        segments.recover(purged)?;
        Ok(Self {
            inner: Arc::new(Mutex::new(segments)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Segments> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The first and last index held, if any.
    pub(crate) fn bounds(&self) -> Option<(u64, u64)> {
        let s = self.lock();
        let first = s.files.values().find(|seg| !seg.records.is_empty())?.first;
        let last = s
            .files
            .values()
            .rev()
            .find(|seg| !seg.records.is_empty())?
            .next()
            .checked_sub(1)?;
        Some((first, last))
    }

    /// Writes `batch` after the log's last entry, or in a new segment if it
    /// does not follow it: one write. Not synced: see
    /// [`LogSegments::sync_work`].
    pub(crate) fn append(&self, batch: &RecordBatch) -> Result<(), StoreError> {
        let Some(&(first, _, _)) = batch.records.first() else {
            return Ok(());
        };
        let mut s = self.lock();
        s.writable_at(first)?;
        let s = &mut *s;
        let segment = s
            .files
            .values_mut()
            .next_back()
            .ok_or_else(|| StoreError::Corrupt("no active log segment".into()))?;
        let base = segment.end;
        let end = base + batch.buf.len() as u64;
        let write = |segment: &Segment| {
            segment
                .file
                .write_all_at(&batch.buf, base)
                .map_err(|e| io_err(&segment.path, e))
        };
        if end <= segment.filled.upto.load(Ordering::Acquire) {
            write(segment)?;
        } else {
            // Past the filled space: the filler must not write over it.
            let _busy = segment.filled.busy();
            write(segment)?;
            segment.filled.upto.fetch_max(end, Ordering::AcqRel);
        }
        for &(_, offset, len) in &batch.records {
            segment.records.push((base + offset as u64, len));
        }
        segment.end = end;
        let left = segment
            .filled
            .upto
            .load(Ordering::Acquire)
            .saturating_sub(end);
        if left + ZERO_STEP <= ZERO_AHEAD && !segment.filled.asked.swap(true, Ordering::AcqRel) {
            let fill = Fill {
                file: segment.file.clone(),
                path: segment.path.clone(),
                filled: segment.filled.clone(),
            };
            if s.filler.as_ref().is_none_or(|f| f.send(fill).is_err()) {
                segment.filled.asked.store(false, Ordering::Release);
            }
        }
        Ok(())
    }

    /// The encoded entries the log holds in `start..end` (`None`: to the
    /// last), in order; a range reaching below the first entry, or across
    /// a gap, gets those there are.
    ///
    /// The lock is held only to find where the records lie, not for the
    /// reads, so a lagging follower's catch-up does not hold appends for
    /// its reads: records below a segment's end never change, and a purge
    /// removes files the reads keep open. Only a truncation changes what
    /// lies at an offset; it bumps the segments' generation, and a read
    /// that a truncation overlapped is read again holding the lock, so
    /// every read returns what one read under the lock would.
    pub(crate) fn read(&self, start: u64, end: Option<u64>) -> Result<Vec<Vec<u8>>, StoreError> {
        let (spans, generation) = {
            let s = self.lock();
            (s.spans(start, end), s.generation)
        };
        let unlocked = read_spans(&spans);
        let s = self.lock();
        match unlocked {
            Ok(out) if s.generation == generation => Ok(out),
            // Overlapped by a truncation, or failed: again, under the lock.
            _ => read_spans(&s.spans(start, end)),
        }
    }

    /// Removes every entry from `index` on, durably (see the module).
    pub(crate) fn truncate_from(&self, index: u64) -> Result<(), StoreError> {
        let mut s = self.lock();
        // Before anything moves: reads planned earlier are read again.
        s.generation += 1;
        let doomed: Vec<u64> = s.files.range(index..).map(|(k, _)| *k).collect();
        for first in doomed {
            if let Some(segment) = s.files.remove(&first) {
                remove_file(&segment.path)?;
            }
        }
        if let Some(segment) = s.files.values_mut().next_back() {
            if let Some(&(offset, _)) = usize::try_from(index.saturating_sub(segment.first))
                .ok()
                .and_then(|i| segment.records.get(i))
            {
                let _busy = segment.filled.busy();
                segment
                    .file
                    .set_len(offset)
                    .and_then(|()| segment.file.sync_all())
                    .map_err(|e| io_err(&segment.path, e))?;
                segment.filled.upto.store(offset, Ordering::Release);
                segment.records.truncate((index - segment.first) as usize);
                segment.end = offset;
            }
        }
        sync_dir(&s.dir)?;
        s.dir_unsynced = false;
        Ok(())
    }

    /// Removes the segments whose entries are all at or below `upto` (the
    /// active one too: the next append starts a new one). A segment that
    /// also holds later entries stays whole.
    pub(crate) fn purge_upto(&self, upto: u64) -> Result<(), StoreError> {
        let mut s = self.lock();
        let removed = s.remove_covered(upto)?;
        if removed > 0 {
            s.dir_unsynced = true;
            tracing::debug!(upto, removed, "log segments purged");
        }
        Ok(())
    }

    /// What a sync must do for everything appended so far to be durable.
    pub(crate) fn sync_work(&self) -> SyncWork {
        let mut s = self.lock();
        let mut files = std::mem::take(&mut s.unsynced);
        if let Some(active) = s.files.values().next_back() {
            files.push(active.file.clone());
        }
        let dir = std::mem::take(&mut s.dir_unsynced).then(|| s.dir.clone());
        SyncWork { files, dir }
    }

    /// Syncs everything appended so far, here and now.
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        self.sync_work().run()
    }
}

impl Segments {
    /// Where the records of the entries in `start..end` lie: runs of
    /// consecutive records, each within one segment and at most
    /// [`READ_SPAN_BYTES`] long (one more record when a single one is
    /// longer).
    fn spans(&self, start: u64, end: Option<u64>) -> Vec<Span> {
        let mut spans = Vec::new();
        let from = self
            .files
            .range(..=start)
            .next_back()
            .map_or(start, |(k, _)| *k);
        for segment in self.files.range(from..).map(|(_, seg)| seg) {
            if end.is_some_and(|e| segment.first >= e) {
                break;
            }
            let lo = start.max(segment.first);
            let hi = end.map_or(segment.next(), |e| e.min(segment.next()));
            let (Ok(lo_at), Ok(hi_at)) = (
                usize::try_from(lo.saturating_sub(segment.first)),
                usize::try_from(hi.saturating_sub(segment.first)),
            ) else {
                continue;
            };
            let Some(records) = segment.records.get(lo_at..hi_at.max(lo_at)) else {
                continue;
            };
            let (mut first, mut run_start) = (lo, 0);
            for i in 1..=records.len() {
                let ends_run = records.get(i).is_none_or(|&(offset, len)| {
                    let (prev_offset, prev_len) = records[i - 1];
                    let contiguous = offset == prev_offset + u64::from(prev_len);
                    let span = offset + u64::from(len) - records[run_start].0;
                    !contiguous || span > READ_SPAN_BYTES
                });
                if ends_run {
                    spans.push(Span {
                        file: segment.file.clone(),
                        path: segment.path.clone(),
                        first,
                        records: records[run_start..i].to_vec(),
                    });
                    first += (i - run_start) as u64;
                    run_start = i;
                }
            }
        }
        spans
    }

    /// Makes the active segment the one an append starting at `first` goes
    /// to: a new one if there is none, if `first` does not follow its last
    /// entry, or if it is full.
    fn writable_at(&mut self, first: u64) -> Result<(), StoreError> {
        let (follows, full) = match self.files.values().next_back() {
            Some(active) => (active.next() == first, active.end >= self.segment_bytes),
            None => (true, true),
        };
        if follows && !full {
            return Ok(());
        }
        let after_gap = !follows;
        if after_gap {
            tracing::info!(first, "log append after a gap starts a new segment");
        }
        let path = segment_path(&self.dir, first);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| io_err(&path, e))?;
        let mut header = Vec::with_capacity(HEADER_BYTES as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&first.to_le_bytes());
        header.extend_from_slice(&(if after_gap { AFTER_GAP } else { 0 }).to_le_bytes());
        file.write_all_at(&header, 0)
            .map_err(|e| io_err(&path, e))?;
        if let Some(previous) = self.files.values().next_back() {
            self.unsynced.push(previous.file.clone());
        }
        // An empty active segment is replaced, not kept behind the new one.
        if let Some((&key, _)) = self
            .files
            .iter()
            .next_back()
            .filter(|(_, seg)| seg.records.is_empty())
        {
            if let Some(empty) = self.files.remove(&key) {
                if empty.path != path {
                    remove_file(&empty.path)?;
                }
            }
        }
        self.files.insert(
            first,
            Segment {
                path,
                file: Arc::new(file),
                first,
                records: Vec::new(),
                end: HEADER_BYTES,
                filled: Filled::new(HEADER_BYTES),
            },
        );
        self.dir_unsynced = true;
        Ok(())
    }

    /// Removes the segments wholly at or below `upto`; how many went.
    fn remove_covered(&mut self, upto: u64) -> Result<usize, StoreError> {
        let covered: Vec<u64> = self
            .files
            .iter()
            .filter(|(_, seg)| seg.next() <= upto.saturating_add(1))
            .map(|(k, _)| *k)
            .collect();
        for first in &covered {
            if let Some(segment) = self.files.remove(first) {
                remove_file(&segment.path)?;
            }
        }
        Ok(covered.len())
    }

    /// Reads every segment in order, cutting the log at the first thing
    /// out of place (see the module), then drops what `purged` covers.
    fn recover(&mut self, purged: Option<u64>) -> Result<(), StoreError> {
        let mut found = Vec::new();
        for dirent in std::fs::read_dir(&self.dir).map_err(|e| io_err(&self.dir, e))? {
            let dirent = dirent.map_err(|e| io_err(&self.dir, e))?;
            let name = dirent.file_name();
            let Some(first) = name
                .to_str()
                .and_then(|n| n.strip_suffix(SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            found.push((first, dirent.path()));
        }
        found.sort();
        // Segments before the last one starting at or below the purge
        // point hold only purged entries: they go unread (a purge a crash
        // interrupted left them, and they need not follow one another).
        let start = purged.and_then(|upto| {
            found
                .iter()
                .rposition(|(first, _)| *first <= upto.saturating_add(1))
        });
        let mut cut = false;
        for (i, (first, path)) in found.into_iter().enumerate() {
            if start.is_some_and(|start| i < start) {
                remove_file(&path)?;
                continue;
            }
            if cut {
                tracing::warn!(file = %path.display(), "removing a log segment after the log's end");
                remove_file(&path)?;
                continue;
            }
            let expected = self.files.values().next_back().map(Segment::next);
            let (segment, clean) = read_segment(&path, first, expected)?;
            cut = !clean;
            match segment {
                Some(segment) if !segment.records.is_empty() => {
                    self.files.insert(first, segment);
                }
                _ => remove_file(&path)?,
            }
        }
        if let Some(upto) = purged {
            self.remove_covered(upto)?;
        }
        sync_dir(&self.dir)
    }
}

/// A run of consecutive records of one segment, to read in one `pread`.
struct Span {
    file: Arc<File>,
    path: PathBuf,
    /// The index of the first record.
    first: u64,
    /// Each record's offset and length, in order.
    records: Vec<(u64, u32)>,
}

/// The payloads of `spans`' records, in order: one read per span, each
/// record's index and CRC checked.
fn read_spans(spans: &[Span]) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut out = Vec::with_capacity(spans.iter().map(|s| s.records.len()).sum());
    for span in spans {
        let (Some(&(from, _)), Some(&(last, last_len))) =
            (span.records.first(), span.records.last())
        else {
            continue;
        };
        let mut bytes = vec![0; (last + u64::from(last_len) - from) as usize];
        span.file
            .read_exact_at(&mut bytes, from)
            .map_err(|e| io_err(&span.path, e))?;
        for (i, &(offset, len)) in span.records.iter().enumerate() {
            let index = span.first + i as u64;
            let at = (offset - from) as usize;
            let record = bytes.get(at..at + len as usize);
            match record.and_then(parse_record) {
                Some((found, payload)) if found == index => out.push(payload.to_vec()),
                _ => {
                    return Err(StoreError::Corrupt(format!(
                        "log entry {index} in {} does not read back",
                        span.path.display()
                    )))
                }
            }
        }
    }
    Ok(out)
}

fn remove_file(path: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path, e)),
    }
}

/// A record's index and payload, if `bytes` starts with a whole, intact one.
fn parse_record(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let index = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    let payload = bytes.get(RECORD_HEADER_BYTES..RECORD_HEADER_BYTES.checked_add(len)?)?;
    (record_crc(index, payload) == crc).then_some((index, payload))
}

/// Reads the segment at `path` named for `first`; `expected` is the index
/// the previous segment ends before. The segment as far as it is valid (cut
/// there on disk), `None` if not even its header is, and whether it was
/// valid to its end.
fn read_segment(
    path: &Path,
    first: u64,
    expected: Option<u64>,
) -> Result<(Option<Segment>, bool), StoreError> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let header = bytes.get(..HEADER_BYTES as usize);
    let flags = header.and_then(|h| {
        let magic_ok = &h[0..8] == MAGIC;
        let named = u64::from_le_bytes(h[8..16].try_into().ok()?);
        let flags = u64::from_le_bytes(h[16..24].try_into().ok()?);
        (magic_ok && named == first).then_some(flags)
    });
    let Some(flags) = flags else {
        return Ok((None, false));
    };
    // A segment that claims to follow the previous one must start where it
    // ended; otherwise the previous one lost its tail.
    if flags & AFTER_GAP == 0 && expected.is_some_and(|e| e != first) {
        tracing::warn!(
            file = %path.display(),
            ?expected,
            "log segment does not follow the one before it"
        );
        return Ok((None, false));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io_err(path, e))?;
    let mut records = Vec::new();
    let mut at = HEADER_BYTES as usize;
    let mut clean = true;
    while at < bytes.len() {
        let want = first + records.len() as u64;
        match parse_record(&bytes[at..]) {
            Some((index, payload)) if index == want => {
                let len = RECORD_HEADER_BYTES + payload.len();
                records.push((at as u64, len as u32));
                at += len;
            }
            _ => {
                // Zeros to the end are the filled space; anything else is
                // a torn or stray write.
                clean = bytes[at..].iter().all(|&b| b == 0);
                break;
            }
        }
    }
    if !clean {
        tracing::warn!(
            file = %path.display(),
            offset = at,
            valid_entries = records.len(),
            "the log ends in a torn or invalid record; cutting it there"
        );
        file.set_len(at as u64)
            .and_then(|()| file.sync_all())
            .map_err(|e| io_err(path, e))?;
    }
    let filled = match clean {
        true => bytes.len() as u64,
        false => at as u64,
    };
    Ok((
        Some(Segment {
            path: path.to_path_buf(),
            file: Arc::new(file),
            first,
            records,
            end: at as u64,
            filled: Filled::new(filled),
        }),
        clean,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(index: u64) -> Vec<u8> {
        format!("entry {index} {}", "x".repeat((index % 7) as usize)).into_bytes()
    }

    fn batch_of(items: impl IntoIterator<Item = (u64, Vec<u8>)>) -> RecordBatch {
        let mut batch = RecordBatch::with_capacity(0, 0);
        for (index, bytes) in items {
            batch
                .push(index, |buf| {
                    buf.extend_from_slice(&bytes);
                    Ok(())
                })
                .expect("push");
        }
        batch
    }

    fn records(range: std::ops::RangeInclusive<u64>) -> RecordBatch {
        batch_of(range.map(|i| (i, payload(i))))
    }

    /// A log of 200-byte segments holding entries `1..=last`, appended one
    /// at a time (so it rotates every few entries).
    fn small_segments_holding(dir: &Path, last: u64) -> LogSegments {
        let log = LogSegments::open_with(dir, None, 200).expect("open");
        for i in 1..=last {
            log.append(&records(i..=i)).expect("append");
        }
        log
    }

    /// The active segment's file and where its records end.
    fn active_segment_end(log: &LogSegments) -> (PathBuf, u64) {
        let s = log.lock();
        let active = s.files.values().next_back().expect("a segment");
        (active.path.clone(), active.end)
    }

    fn read_all(log: &LogSegments, start: u64) -> Vec<Vec<u8>> {
        log.read(start, None).expect("read")
    }

    fn expect(range: std::ops::RangeInclusive<u64>) -> Vec<Vec<u8>> {
        range.map(payload).collect()
    }

    fn segment_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| {
                e.expect("dirent")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_long_read_goes_in_spans_of_at_most_a_mebibyte_and_reads_every_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = LogSegments::open(dir.path(), None).expect("open");
        let big = |i: u64| format!("{i:08}").repeat(2_000).into_bytes(); // 16 KB
        log.append(&batch_of((1..=200).map(|i| (i, big(i)))))
            .expect("append");
        let spans = log.lock().spans(3, Some(190));
        assert!(
            spans.len() > 2,
            "3.0 MB of records in {} spans",
            spans.len()
        );
        for span in &spans {
            let (first, last) = (span.records[0], span.records[span.records.len() - 1]);
            assert!(last.0 + u64::from(last.1) - first.0 <= READ_SPAN_BYTES);
        }
        let read = log.read(3, Some(190)).expect("read");
        assert_eq!(read, (3..190).map(big).collect::<Vec<_>>());
    }

    #[test]
    fn reads_racing_appends_and_truncations_see_one_state_of_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = LogSegments::open_with(dir.path(), None, 4 << 10).expect("open");
        // Entry `i` written in round `round`; a truncation rewrites the
        // tail in the next round.
        let entry = |i: u64, round: u64| format!("{i}:{round}:{}", "y".repeat(64)).into_bytes();
        log.append(&batch_of((1..=20).map(|i| (i, entry(i, 0)))))
            .expect("append");
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (log, done) = (log.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(Ordering::Acquire) || reads < 10 {
                    let read = log.read(1, None).expect("a read never fails");
                    let rounds: Vec<u64> = read
                        .iter()
                        .enumerate()
                        .map(|(i, e)| {
                            let text = String::from_utf8_lossy(e);
                            let mut parts = text.split(':');
                            let index: u64 =
                                parts.next().and_then(|p| p.parse().ok()).expect("index");
                            assert_eq!(index, i as u64 + 1, "entries in order, none missing");
                            parts.next().and_then(|p| p.parse().ok()).expect("round")
                        })
                        .collect();
                    // Every state of the log has its rounds non-decreasing
                    // along the entries (a truncation rewrites a tail).
                    assert!(rounds.windows(2).all(|w| w[0] <= w[1]), "{rounds:?}");
                    reads += 1;
                }
            })
        };
        let mut last = 20;
        for round in 1..=400u64 {
            let cut = last - 5;
            log.truncate_from(cut).expect("truncate");
            last = cut + 9;
            log.append(&batch_of((cut..=last).map(|i| (i, entry(i, round)))))
                .expect("append");
        }
        done.store(true, Ordering::Release);
        reader.join().expect("the reader's checks hold");
        assert_eq!(read_all(&log, 1).len() as u64, last);
    }

    #[test]
    fn appends_read_back_across_segments_and_after_reopening() {
        let dir = tempfile::tempdir().expect("dir");
        let log = small_segments_holding(dir.path(), 40);
        log.append(&records(41..=45)).expect("append");
        log.sync().expect("sync");
        assert!(segment_files(dir.path()).len() > 3, "small segments rotate");
        assert_eq!(log.bounds(), Some((1, 45)));
        assert_eq!(read_all(&log, 1), expect(1..=45));
        assert_eq!(log.read(10, Some(13)).expect("read"), expect(10..=12));
        assert_eq!(log.read(46, None).expect("read"), Vec::<Vec<u8>>::new());
        drop(log);

        let log = LogSegments::open_with(dir.path(), None, 200).expect("reopen");
        assert_eq!(log.bounds(), Some((1, 45)));
        assert_eq!(read_all(&log, 7), expect(7..=45));
        log.append(&records(46..=46)).expect("append after reopen");
        assert_eq!(read_all(&log, 44), expect(44..=46));
    }

    #[test]
    fn a_truncation_cuts_across_segments_and_stays_cut() {
        let dir = tempfile::tempdir().expect("dir");
        let log = small_segments_holding(dir.path(), 30);
        log.truncate_from(12).expect("truncate");
        assert_eq!(log.bounds(), Some((1, 11)));
        let rewritten = batch_of((12..=14).map(|i| (i, b"new".to_vec())));
        log.append(&rewritten).expect("append over");
        log.sync().expect("sync");
        drop(log);

        let log = LogSegments::open_with(dir.path(), None, 200).expect("reopen");
        assert_eq!(log.bounds(), Some((1, 14)));
        let mut want = expect(1..=11);
        want.extend((12..=14).map(|_| b"new".to_vec()));
        assert_eq!(read_all(&log, 1), want);

        log.truncate_from(1).expect("truncate everything");
        assert_eq!(log.bounds(), None);
        log.append(&records(1..=2)).expect("append to an empty log");
        assert_eq!(read_all(&log, 1), expect(1..=2));
    }

    #[test]
    fn a_purge_removes_whole_segments_below_it_and_reopening_finishes_it() {
        let dir = tempfile::tempdir().expect("dir");
        let log = small_segments_holding(dir.path(), 30);
        let before = segment_files(dir.path()).len();
        log.purge_upto(20).expect("purge");
        let after = segment_files(dir.path()).len();
        assert!(after < before, "{after} segments left of {before}");
        let (first, last) = log.bounds().expect("bounds");
        assert!(first <= 21 && last == 30, "{first}..{last}");
        assert_eq!(read_all(&log, 21), expect(21..=30));
        drop(log);

        // A purge whose files a crash left: reopening removes them.
        let log = LogSegments::open_with(dir.path(), Some(26), 200).expect("reopen");
        let (first, last) = log.bounds().expect("bounds");
        assert!(first <= 27 && last == 30, "{first}..{last}");
        assert!(segment_files(dir.path()).len() < after);

        // Everything purged, the active segment too.
        log.purge_upto(30).expect("purge all");
        assert_eq!(log.bounds(), None);
        assert!(segment_files(dir.path()).is_empty());
        log.append(&records(31..=32))
            .expect("append after the purge");
        assert_eq!(read_all(&log, 31), expect(31..=32));
    }

    #[test]
    fn an_append_after_a_gap_starts_a_segment_that_survives_reopening() {
        let dir = tempfile::tempdir().expect("dir");
        let log = LogSegments::open_with(dir.path(), None, 1 << 20).expect("open");
        log.append(&records(1..=5)).expect("append");
        log.append(&records(100..=102))
            .expect("append after a snapshot");
        log.sync().expect("sync");
        drop(log);
        let log = LogSegments::open_with(dir.path(), None, 1 << 20).expect("reopen");
        assert_eq!(read_all(&log, 100), expect(100..=102));
        let mut both = expect(1..=5);
        both.extend(expect(100..=102));
        assert_eq!(
            read_all(&log, 1),
            both,
            "a read gets what is on both sides of the gap"
        );
        assert_eq!(
            log.read(0, Some(3)).expect("read"),
            expect(1..=2),
            "from below the first"
        );
    }

    /// Zeros after the last record are the space the filler prepared:
    /// the log ends there, nothing is cut, and appends go on over them.
    #[test]
    fn zeros_after_the_last_record_end_the_log_cleanly() {
        let dir = tempfile::tempdir().expect("dir");
        let log = LogSegments::open_with(dir.path(), None, 1 << 20).expect("open");
        log.append(&records(1..=3)).expect("append");
        log.sync().expect("sync");
        let (path, end) = active_segment_end(&log);
        drop(log);
        let file = OpenOptions::new().write(true).open(&path).expect("open");
        file.set_len(end + 10_000).expect("extend with zeros");
        file.write_all_at(&[0; 4096], end).expect("zero-fill");

        let log = LogSegments::open_with(dir.path(), None, 1 << 20).expect("reopen");
        assert_eq!(log.bounds(), Some((1, 3)));
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            end + 10_000,
            "the filled space is kept"
        );
        log.append(&records(4..=5)).expect("append over the zeros");
        log.sync().expect("sync");
        drop(log);
        let log = LogSegments::open_with(dir.path(), None, 1 << 20).expect("reopen");
        assert_eq!(read_all(&log, 1), expect(1..=5));
    }

    #[test]
    fn a_torn_tail_is_cut_and_later_segments_removed() {
        let dir = tempfile::tempdir().expect("dir");
        let log = small_segments_holding(dir.path(), 30);
        log.sync().expect("sync");
        drop(log);
        // Corrupt one byte of entry 12's payload, in whichever segment holds it.
        let names = segment_files(dir.path());
        let holder = names
            .iter()
            .rev()
            .find(|n| n.trim_end_matches(SUFFIX).parse::<u64>().expect("name") <= 12)
            .expect("a segment holds entry 12");
        let path = dir.path().join(holder);
        let mut bytes = std::fs::read(&path).expect("read");
        let needle = payload(12);
        let at = bytes
            .windows(needle.len())
            .position(|w| w == needle.as_slice())
            .expect("entry 12 is in it");
        bytes[at] ^= 0xff;
        std::fs::write(&path, &bytes).expect("write");

        let log = LogSegments::open_with(dir.path(), None, 200).expect("reopen");
        assert_eq!(log.bounds(), Some((1, 11)));
        assert_eq!(read_all(&log, 1), expect(1..=11));
        let kept = segment_files(dir.path());
        assert!(
            kept.iter().all(|name| name <= holder),
            "later segments are gone: {kept:?}"
        );
        log.append(&records(12..=13)).expect("append after the cut");
        assert_eq!(read_all(&log, 10), expect(10..=13));

        // A half-written record at the end is cut the same way.
        let (path, end) = active_segment_end(&log);
        drop(log);
        let file = OpenOptions::new().write(true).open(&path).expect("open");
        file.set_len(end - 3).expect("tear");
        let log = LogSegments::open_with(dir.path(), None, 200).expect("reopen");
        assert_eq!(log.bounds(), Some((1, 12)));
    }

    /// Where [`child_appends_until_killed`] keeps its log; set only in the
    /// child process [`a_log_killed_mid_append_keeps_every_synced_entry`]
    /// starts.
    const CRASH_DIR: &str = "KUBESTORE_TEST_SEGMENT_CRASH_DIR";

    /// The child of the kill test: appends to the log in `CRASH_DIR` (small
    /// segments, so it rotates often) and prints each index once synced,
    /// until killed. Does nothing in a normal test run.
    #[test]
    fn child_appends_until_killed() {
        let Ok(dir) = std::env::var(CRASH_DIR) else {
            return;
        };
        let log = LogSegments::open_with(Path::new(&dir), None, 4 << 10).expect("open");
        let mut next = log.bounds().map_or(1, |(_, last)| last + 1);
        loop {
            log.append(&records(next..=next + 4)).expect("append");
            log.sync().expect("sync");
            println!("synced {}", next + 4);
            next += 5;
        }
    }

    /// A process killed with SIGKILL anywhere in an append, a rotation, a
    /// sync or a fill leaves a log that opens with every entry it reported
    /// synced, each intact and in order, and takes appends after them.
    #[test]
    fn a_log_killed_mid_append_keeps_every_synced_entry() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        if std::env::var(CRASH_DIR).is_ok() {
            return;
        }
        let dir = tempfile::tempdir().expect("dir");
        for round in 0..3 {
            let mut child = Command::new(std::env::current_exe().expect("exe"))
                .args([
                    "--exact",
                    "segment_log::tests::child_appends_until_killed",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CRASH_DIR, dir.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn the child");
            let stdout = child.stdout.take().expect("stdout");
            let mut reported = 0;
            let mut seen = 0;
            for line in BufReader::new(stdout).lines() {
                let line = line.expect("a line");
                if let Some(index) = line.strip_prefix("synced ") {
                    reported = index.parse::<u64>().expect("an index");
                    seen += 1;
                    if seen == 300 + round * 37 {
                        break;
                    }
                }
            }
            child.kill().expect("kill");
            child.wait().expect("wait");
            assert!(reported > 0, "round {round}: the child reported nothing");

            let log = LogSegments::open_with(dir.path(), None, 4 << 10).expect("reopen");
            let (first, last) = log.bounds().expect("a log");
            assert_eq!(first, 1);
            assert!(
                last >= reported,
                "round {round}: {reported} was synced before the kill, the log ends at {last}"
            );
            assert_eq!(read_all(&log, 1), expect(1..=last), "round {round}");
            log.append(&records(last + 1..=last + 1))
                .expect("append after the kill");
            assert_eq!(log.bounds(), Some((1, last + 1)));
        }
    }
}

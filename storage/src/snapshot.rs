//! The snapshot file: its format, building one from a consistent view of
//! the store, reading its metadata, installing one into the store, and the
//! files of the snapshot directory (`<data>/snapshots`). The state machine
//! ([`crate::state_machine`]) answers openraft's snapshot calls with these;
//! nothing here knows openraft's storage traits.
//!
//! Snapshot file format (`<data>/snapshots/current.snap`): the magic
//! `KSSNAPSH`, the snapshot format version (u32, big-endian; see
//! [`schema::SNAPSHOT_FORMAT`]), a length-prefixed bincode `SnapshotMeta`,
//! then records
//! `(cf tag u8, key len u32, key, value len u32, value)` of the state
//! machine's column families ([`Cf::STATE_MACHINE`]: MVCC, leases,
//! sessions) and the revision rows, ended by the tag `0xFF`.
//!
//! # Invariants
//!
//! - **Atomic replacement.** `current.snap` only ever changes by a rename of
//!   a complete, synced file (a build's `<id>.tmp`, an install's
//!   `staged.snap`), followed by an fsync of the directory, before the purge
//!   horizon moves: the log is purged only behind a snapshot that a crash
//!   cannot take back. A build and an install change the files one at a
//!   time (`SnapshotFiles`), and a build never replaces a newer snapshot.
//! - **Self-describing.** A file carries its own format version and
//!   metadata; both are read from the same open file as its rows, and a
//!   file of another format is refused before anything is cleared.
//! - **One incoming file per stream.** Every received snapshot gets a file
//!   of its own (`incoming-<nanos>.snap`); an abandoned stream's file is
//!   unlinked, never truncated, so a write still in flight cannot land in
//!   the next stream's data.
//! - **Durable state behind every snapshot.** A build flushes the state
//!   machine (whose rows skip the WAL) before its file may move the purge
//!   horizon, so the state a restart finds is never older than the end of
//!   the purged log: the log always holds what the restart re-applies.
//! - **Redone after a crash.** An install is staged (`staged.snap`) and
//!   marked in the store before the state machine is cleared, so an install
//!   a crash interrupts is redone from the staged file at the next open.
//!   That is also why an install's rows may skip the WAL: they are flushed
//!   to table files before the install is recorded as applied.

use std::io::{BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::{LogId, SnapshotMeta};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::ids::NodeId;
use crate::purge::PurgeHorizon;
use crate::raft_types::{Node, SmMembership};
use crate::schema::{self, Cf};
use crate::segment_log::LogSegments;

const SNAPSHOT_MAGIC: &[u8; 8] = b"KSSNAPSH";
/// The magic of snapshots of storage format 1, which had no version field.
const SNAPSHOT_MAGIC_FORMAT_1: &[u8; 8] = b"KSSNAP01";
const END_TAG: u8 = 0xFF;
pub(crate) const CURRENT_SNAPSHOT: &str = "current.snap";
/// The prefix of a snapshot being received: one file per stream, so a
/// write still in flight from an abandoned stream can never land in the
/// next one's file.
pub(crate) const INCOMING_PREFIX: &str = "incoming";
/// A snapshot being installed; kept until the install completes so that an
/// install interrupted by a crash is redone from it at the next open.
pub(crate) const STAGED_SNAPSHOT: &str = "staged.snap";
/// Rows written per batch while installing a snapshot.
const INSTALL_BATCH_ROWS: usize = 10_000;

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |e| StoreError::Io(path.display().to_string(), e)
}

/// Writes a snapshot of the current state and makes it `current.snap`,
/// unless an install meanwhile put a newer one there. Returns the meta and
/// an open handle of whichever file is current.
pub(crate) fn build_snapshot_file(
    engine: &Engine,
    dir: &Path,
    files: &SnapshotFiles,
    horizon: &PurgeHorizon,
) -> Result<(SnapshotMeta<NodeId, Node>, std::fs::File), StoreError> {
    engine.with_snapshot(|view| {
        let last_applied: Option<LogId<NodeId>> =
            match view.get(Cf::SmMeta, schema::SM_LAST_APPLIED)? {
                Some(v) => bincode::deserialize(&v)?,
                None => None,
            };
        let membership: SmMembership = match view.get(Cf::SmMeta, schema::SM_MEMBERSHIP)? {
            Some(v) => bincode::deserialize(&v)?,
            None => SmMembership::default(),
        };
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, unique_suffix()),
            None => format!("0-0-{}", unique_suffix()),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let tmp = dir.join(format!("{}.tmp", meta.snapshot_id));
        let file = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
        let mut out = BufWriter::new(file);
        let meta_bytes = bincode::serialize(&meta)?;
        out.write_all(SNAPSHOT_MAGIC).map_err(io_err(&tmp))?;
        out.write_all(&schema::SNAPSHOT_FORMAT.to_be_bytes())
            .map_err(io_err(&tmp))?;
        out.write_all(&(meta_bytes.len() as u32).to_be_bytes())
            .map_err(io_err(&tmp))?;
        out.write_all(&meta_bytes).map_err(io_err(&tmp))?;
        let mut write_row = |cf: Cf, k: &[u8], v: &[u8]| -> std::io::Result<()> {
            out.write_all(&[cf.tag()])?;
            out.write_all(&(k.len() as u32).to_be_bytes())?;
            out.write_all(k)?;
            out.write_all(&(v.len() as u32).to_be_bytes())?;
            out.write_all(v)
        };
        for cf in Cf::STATE_MACHINE {
            for row in view.scan(cf, &[], None)? {
                let (k, v) = row?;
                write_row(cf, &k, &v).map_err(io_err(&tmp))?;
            }
        }
        for key in [schema::SM_REVISION, schema::SM_COMPACTED] {
            if let Some(v) = view.get(Cf::SmMeta, key)? {
                write_row(Cf::SmMeta, key, &v).map_err(io_err(&tmp))?;
            }
        }
        out.write_all(&[END_TAG]).map_err(io_err(&tmp))?;
        let file = out
            .into_inner()
            .map_err(|e| StoreError::Io(tmp.display().to_string(), e.into_error()))?;
        file.sync_all().map_err(io_err(&tmp))?;
        // The state machine's rows skip the WAL: the state this snapshot
        // was read from (and everything applied since) is made durable
        // before the snapshot may let the log go, so a crash can never
        // leave a state older than the purged log's end.
        engine.flush_all()?;
        let current = dir.join(CURRENT_SNAPSHOT);
        let _files = files.lock();
        let existing = current
            .exists()
            .then(|| read_snapshot_meta(&current))
            .transpose()?;
        let meta = match existing {
            Some(newer) if newer.last_log_id > meta.last_log_id => {
                std::fs::remove_file(&tmp).map_err(io_err(&tmp))?;
                newer
            }
            _ => {
                std::fs::rename(&tmp, &current).map_err(io_err(&current))?;
                sync_dir(dir)?;
                horizon.advance(meta.last_log_id, false)?;
                meta
            }
        };
        let file = std::fs::File::open(&current).map_err(io_err(&current))?;
        Ok((meta, file))
    })
}

pub(crate) fn unique_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn open_snapshot(
    path: &Path,
) -> Result<(BufReader<std::fs::File>, SnapshotMeta<NodeId, Node>), StoreError> {
    let file = std::fs::File::open(path).map_err(io_err(path))?;
    snapshot_header(file, path)
}

/// Reads the header (format and metadata) of the snapshot open as `file`,
/// leaving the reader at its first row. The metadata comes from the same
/// open file as the rows, so the two always describe one snapshot.
pub(crate) fn snapshot_header(
    file: std::fs::File,
    path: &Path,
) -> Result<(BufReader<std::fs::File>, SnapshotMeta<NodeId, Node>), StoreError> {
    let mut input = BufReader::new(file);
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic).map_err(io_err(path))?;
    let found = if &magic == SNAPSHOT_MAGIC {
        let mut version = [0u8; 4];
        input.read_exact(&mut version).map_err(io_err(path))?;
        u32::from_be_bytes(version)
    } else if &magic == SNAPSHOT_MAGIC_FORMAT_1 {
        1
    } else {
        return Err(StoreError::Corrupt(format!(
            "{} is not a kubestore snapshot",
            path.display()
        )));
    };
    // A snapshot is rows of the state machine's column families as this
    // format encodes them: installing one of another format would leave
    // rows this build misreads (an events row of format 1 holds whole
    // values where format 2 expects pointers into history). Format 3's
    // rows are format 4's less its grouped session records.
    if !schema::READABLE_SNAPSHOT_FORMATS.contains(&found) {
        return Err(StoreError::SnapshotFormatVersion {
            path: path.display().to_string(),
            found,
            expected: schema::SNAPSHOT_FORMAT,
        });
    }
    let meta_bytes = read_chunk(&mut input).map_err(io_err(path))?;
    Ok((input, bincode::deserialize(&meta_bytes)?))
}

pub(crate) fn read_snapshot_meta(path: &Path) -> Result<SnapshotMeta<NodeId, Node>, StoreError> {
    open_snapshot(path).map(|(_, meta)| meta)
}

/// The largest key, value or metadata chunk a snapshot may hold: far above
/// any row this store writes (a value is at most a request's size), so a
/// corrupt or forged length cannot make an install allocate gigabytes.
const MAX_SNAPSHOT_CHUNK: usize = 64 * 1024 * 1024;

fn read_chunk(input: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_SNAPSHOT_CHUNK {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a snapshot chunk of {len} bytes (at most {MAX_SNAPSHOT_CHUNK})"),
        ));
    }
    let mut buf = vec![0u8; len];
    input.read_exact(&mut buf)?;
    Ok(buf)
}

/// Replaces the whole state machine with the snapshot in `path`. The rows
/// go in without the WAL and are flushed to table files before the final,
/// synced batch records the new last-applied id; the caller's install
/// marker covers a crash anywhere before that ([`finish_install`] clears
/// it).
pub(crate) fn install_from_file(
    engine: &Engine,
    path: &Path,
    meta: &SnapshotMeta<NodeId, Node>,
) -> Result<(), StoreError> {
    let (mut input, _) = open_snapshot(path)?;
    for cf in Cf::STATE_MACHINE {
        engine.clear(cf)?;
    }
    let mut batch = engine.batch();
    batch.delete(Cf::SmMeta, schema::SM_REVISION)?;
    batch.delete(Cf::SmMeta, schema::SM_COMPACTED)?;
    loop {
        let mut tag = [0u8; 1];
        input.read_exact(&mut tag).map_err(io_err(path))?;
        if tag[0] == END_TAG {
            break;
        }
        let cf = Cf::from_tag(tag[0])
            .filter(|cf| Cf::STATE_MACHINE.contains(cf) || *cf == Cf::SmMeta)
            .ok_or_else(|| {
                StoreError::Corrupt(format!("snapshot row has unknown tag {}", tag[0]))
            })?;
        let key = read_chunk(&mut input).map_err(io_err(path))?;
        let value = read_chunk(&mut input).map_err(io_err(path))?;
        batch.put(cf, &key, &value)?;
        if batch.len() >= INSTALL_BATCH_ROWS {
            let full = std::mem::replace(&mut batch, engine.batch());
            engine.write_unlogged(full)?;
        }
    }
    // The rows so far skipped the WAL (the install marker makes a crash
    // redo the whole install): they are made durable here, before the
    // last batch records the install as applied.
    engine.flush_all()?;
    batch.put(
        Cf::SmMeta,
        schema::SM_LAST_APPLIED,
        &bincode::serialize(&meta.last_log_id)?,
    )?;
    batch.put(
        Cf::SmMeta,
        schema::SM_MEMBERSHIP,
        &bincode::serialize(&meta.last_membership)?,
    )?;
    engine.write(batch, true)
}

/// Ends an install: the staged file becomes the current snapshot, then the
/// marker goes. A crash in between is finished at the next open.
pub(crate) fn finish_install(
    engine: &Engine,
    dir: &Path,
    guard: &SnapshotFiles,
) -> Result<(), StoreError> {
    {
        let _files = guard.lock();
        if dir.join(STAGED_SNAPSHOT).exists() {
            promote_staged(dir)?;
        }
    }
    let mut batch = engine.batch();
    batch.delete(Cf::SmMeta, schema::SM_INSTALLING)?;
    engine.write(batch, true)
}

/// Serialises changes to the snapshot files between builds and installs.
#[derive(Debug, Clone, Default)]
pub(crate) struct SnapshotFiles(Arc<Mutex<()>>);

impl SnapshotFiles {
    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn promote_staged(dir: &Path) -> Result<(), StoreError> {
    let staged = dir.join(STAGED_SNAPSHOT);
    let current = dir.join(CURRENT_SNAPSHOT);
    std::fs::rename(&staged, &current).map_err(io_err(&current))?;
    sync_dir(dir)
}

/// Makes the received snapshot open as `file` the staged one
/// (`staged.snap`) and returns its size. When it is still the file named
/// `received` (the stream begun last, as openraft hands back), it is
/// synced and renamed into place: half the disk traffic of a copy. The
/// file of a stream a newer one replaced has lost its name and is copied.
pub(crate) fn stage_received(
    mut file: std::fs::File,
    received: Option<&Path>,
    dir: &Path,
) -> Result<u64, StoreError> {
    use std::os::unix::fs::MetadataExt;
    let staged = dir.join(STAGED_SNAPSHOT);
    let open = file.metadata().map_err(io_err(&staged))?;
    let named = received.and_then(|path| std::fs::metadata(path).ok().map(|m| (path, m)));
    if let Some((path, named)) = named {
        if named.dev() == open.dev() && named.ino() == open.ino() {
            file.sync_all().map_err(io_err(path))?;
            std::fs::rename(path, &staged).map_err(io_err(&staged))?;
            sync_dir(dir)?;
            return Ok(open.len());
        }
    }
    file.seek(std::io::SeekFrom::Start(0))
        .map_err(io_err(&staged))?;
    let mut out = std::fs::File::create(&staged).map_err(io_err(&staged))?;
    let bytes = std::io::copy(&mut file, &mut out).map_err(io_err(&staged))?;
    out.sync_all().map_err(io_err(&staged))?;
    Ok(bytes)
}

/// Makes renames in `dir` durable (the log is purged behind them).
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Removes the files of snapshot streams that never finished.
pub(crate) fn remove_incoming(dir: &Path) -> Result<(), StoreError> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let path = entry.map_err(io_err(dir))?.path();
        let incoming = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(INCOMING_PREFIX) && n.ends_with(".snap"));
        if incoming {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::Io(path.display().to_string(), e)),
            }
        }
    }
    Ok(())
}

/// The purge horizon of a store just opened: what `current.snap` covers.
///
/// A data directory written before the horizon existed may have its log
/// purged past its snapshot (the crash loop [`crate::purge`] describes).
/// When the applied state covers the purge, a fresh snapshot of it repairs
/// the directory; otherwise the entries between are gone from this node
/// and only a fresh join can bring it back, which the error says.
pub(crate) fn open_horizon(
    engine: &Engine,
    log: LogSegments,
    dir: &Path,
    files: &SnapshotFiles,
    last_applied: Option<LogId<NodeId>>,
) -> Result<PurgeHorizon, StoreError> {
    let current = dir.join(CURRENT_SNAPSHOT);
    let covered = match current.exists() {
        true => read_snapshot_meta(&current)?.last_log_id,
        false => None,
    };
    let horizon = PurgeHorizon::open(engine.clone(), log, covered)?;
    let purged = horizon.purged();
    if purged > covered {
        if last_applied < purged {
            return Err(StoreError::Corrupt(format!(
                "the log is purged up to {purged:?}, past both the snapshot ({covered:?}) and \
                 the applied state ({last_applied:?}): the entries between are lost on this \
                 node; remove its data directory and let it rejoin the cluster"
            )));
        }
        tracing::warn!(
            ?purged,
            ?covered,
            ?last_applied,
            "the log is purged past the snapshot; building a snapshot of the applied state"
        );
        build_snapshot_file(engine, dir, files, &horizon)?;
    }
    Ok(horizon)
}

//! The MVCC revision store on top of the engine: reading key ranges at any
//! uncompacted revision, the revision-ordered event log, and staging an
//! [`Applied`] command (and compaction) into a write batch.
//!
//! Layout (see [`crate::schema`]): `kv` holds each live key's latest state;
//! `history` holds one row per (key, revision) that touched it, `None` for a
//! deletion; `events` holds what each revision changed, as `StoredEvent`s
//! that point into `history` rather than repeat its values (a put's value is
//! written to the state machine twice, `kv` and `history`, not four times).
//!
//! Compaction to `r` keeps every `history` row an event at or after `r`
//! points at: besides each key's last live row at or below `r`, that is the
//! previous state of every key changed exactly at `r`. The apply only moves
//! the compaction point; [`stage_purge`] deletes the rows, run in bounded
//! steps by the [`compactor`](crate::compactor).
//!
//! Range semantics: a [`RangeRequest`](crate::RangeRequest) without a revision reads the current
//! state; with revision `r` it reads each key's last row at or below `r`.
//! A range of many keys at `r` passes each key's rows above `r` with one
//! step and at most one seek, however many there are.
//! `r` above the current revision is [`StoreError::FutureRevision`]; `r`
//! below the compaction point is [`StoreError::Compacted`]. A read exactly at
//! the compaction point is allowed (compaction keeps it whole).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::apply::Applied;
use crate::command::{Event, EventKind, KeyRange, KeyValue, LeaseRecord, Revision, RevisionEvents};
use crate::engine::{Batch, Cursor, Engine, Source, RECORD_OVERHEAD};
use crate::error::StoreError;
use crate::ids::LeaseId;
use crate::ids::NodeId;
use crate::schema::{self, Cf};
use crate::session::{self, Recorded, SessionState};
use crate::view::{MvccRead, Visit};

pub(crate) fn read_revision<S: Source + ?Sized>(
    src: &S,
    key: &[u8],
) -> Result<Revision, StoreError> {
    match src.get(Cf::SmMeta, key)? {
        Some(bytes) => schema::decode_u64(&bytes)
            .map(Revision)
            .ok_or_else(|| StoreError::Corrupt("revision row is not 8 bytes".into())),
        None => Ok(Revision::ZERO),
    }
}

/// The current key-value of `key` in `src`, decoded where RocksDB holds
/// the row: its value is copied once, into the key-value, not first into
/// a row of its own. One read, atomic on its own.
pub(crate) fn read_current<S: Source + ?Sized>(
    src: &S,
    key: &[u8],
) -> Result<Option<KeyValue>, StoreError> {
    let mut kv = None;
    src.visit_row(Cf::Kv, key, &mut |row| {
        kv = Some(bincode::deserialize(row)?);
        Ok(())
    })?;
    Ok(kv)
}

/// Reads the MVCC store through one source, with the revision bounds the
/// source had when the reader was made.
pub(crate) struct MvccReader<'a, S: ?Sized> {
    src: &'a S,
    current: Revision,
    compacted: Revision,
}

impl<'a, S: Source + ?Sized> MvccReader<'a, S> {
    pub(crate) fn new(src: &'a S) -> Result<Self, StoreError> {
        Ok(Self::at(
            src,
            read_revision(src, schema::SM_REVISION)?,
            read_revision(src, schema::SM_COMPACTED)?,
        ))
    }

    /// A reader of `src` whose current revision and compaction point the
    /// caller knows (the state machine keeps them): no reads of them.
    pub(crate) fn at(src: &'a S, current: Revision, compacted: Revision) -> Self {
        Self {
            src,
            current,
            compacted,
        }
    }

    /// The events of revisions `> after`, ascending, at most `limit`
    /// revisions. `after` below the compaction point is
    /// [`StoreError::Compacted`] (those events are gone).
    pub fn events_after(
        &self,
        after: Revision,
        limit: usize,
    ) -> Result<Vec<RevisionEvents>, StoreError> {
        if after.next() < self.compacted {
            return Err(StoreError::Compacted {
                requested: after.next(),
                compacted: self.compacted,
            });
        }
        let mut out = Vec::new();
        for row in self
            .src
            .scan(Cf::Events, &schema::u64_key(after.0 + 1), None)?
        {
            let (k, v) = row?;
            let rev = schema::decode_u64(&k)
                .ok_or_else(|| StoreError::Corrupt("event key is not 8 bytes".into()))?;
            let stored: Vec<StoredEvent> = bincode::deserialize(&v)?;
            let events = stored
                .into_iter()
                .map(|e| e.load(self.src, rev))
                .collect::<Result<Vec<_>, _>>()?;
            out.push((Revision(rev), events.into()));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    fn scan_current(&self, range: &KeyRange, visit: Visit<'_>) -> Result<(), StoreError> {
        if range.is_single() {
            if let Some(v) = self.src.get(Cf::Kv, &range.key)? {
                let _ = visit(bincode::deserialize(&v)?)?;
            }
            return Ok(());
        }
        let end = range.end_bound();
        for row in self.src.scan(Cf::Kv, &range.key, end.as_deref())? {
            let (_, v) = row?;
            if visit(bincode::deserialize(&v)?)?.is_break() {
                break;
            }
        }
        Ok(())
    }

    fn scan_history(
        &self,
        range: &KeyRange,
        at: Revision,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        if range.is_single() {
            // One key: its last row at or below `at` is one seek back from
            // (key, `at`), bounded below by the key's first row, so the
            // seek never walks into other keys. No row: the key had none
            // by `at` (or compaction removed a deletion and all before it).
            let first = schema::history_key_start(&range.key);
            let upto = schema::history_key(&range.key, at.0);
            if let Some((_, row)) = self.src.floor(Cf::History, &first, &upto)? {
                emit_history_row(&row, visit)?;
            }
            return Ok(());
        }
        let start = schema::history_key_start(&range.key);
        let end = range.end_bound().map(|e| schema::history_key_start(&e));
        // Rows come grouped by key, revisions ascending. A key's last row at
        // or below `at` is kept, still encoded, and decoded and emitted when
        // the key changes (its older rows are read past, never decoded).
        // Once a key's rows pass `at`, all its later ones do too: the first
        // is stepped over (a key changed once since `at`, the common case),
        // and if the key has more, one seek goes past them all, so a key
        // written many times since `at` costs a seek, not a read per row.
        let mut rows = self
            .src
            .cursor_between(Cf::History, &start, end.as_deref())?;
        rows.seek(&start);
        let mut candidate = HistoryCandidate::default();
        let mut passing = Vec::new();
        while let Some((k, v)) = rows.row() {
            let (escaped, rev) = schema::split_history_row(k)
                .ok_or_else(|| StoreError::Corrupt("malformed history key".into()))?;
            if candidate.is_other_key(escaped) && candidate.emit(visit)? {
                return Ok(());
            }
            if rev <= at.0 {
                candidate.hold(escaped, v);
                rows.next();
                continue;
            }
            passing.clear();
            passing.extend_from_slice(escaped);
            rows.next();
            let more_of_key = rows.row().is_some_and(|(next, _)| {
                schema::split_history_row(next).is_some_and(|(e, _)| e == passing.as_slice())
            });
            if more_of_key {
                rows.seek(&schema::history_rows_end(&passing));
            }
        }
        rows.status()?;
        candidate.emit(visit)?;
        Ok(())
    }
}

/// The row a multi-key history scan would emit for the key it is reading:
/// the last seen at or below the scan's revision, still encoded. Its
/// buffers are reused from key to key.
#[derive(Default)]
struct HistoryCandidate {
    held: bool,
    escaped_key: Vec<u8>,
    row: Vec<u8>,
}

impl HistoryCandidate {
    fn is_other_key(&self, escaped: &[u8]) -> bool {
        self.held && self.escaped_key != escaped
    }

    fn hold(&mut self, escaped: &[u8], row: &[u8]) {
        self.held = true;
        self.escaped_key.clear();
        self.escaped_key.extend_from_slice(escaped);
        self.row.clear();
        self.row.extend_from_slice(row);
    }

    /// Emits the held row, if any (see [`emit_history_row`]), and lets it
    /// go; whether `visit` asked to stop.
    fn emit(&mut self, visit: Visit<'_>) -> Result<bool, StoreError> {
        if !std::mem::take(&mut self.held) {
            return Ok(false);
        }
        emit_history_row(&self.row, visit)
    }
}

/// Decodes a `history` row and hands a live key-value to `visit` (a
/// deletion's row is skipped); whether `visit` asked to stop.
fn emit_history_row(row: &[u8], visit: Visit<'_>) -> Result<bool, StoreError> {
    Ok(match bincode::deserialize::<Option<KeyValue>>(row)? {
        Some(kv) => visit(kv)?.is_break(),
        None => false,
    })
}

impl<S: Source + ?Sized> MvccRead for MvccReader<'_, S> {
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        read_current(self.src, key)
    }

    fn scan(
        &self,
        range: &KeyRange,
        at: Option<Revision>,
        visit: Visit<'_>,
    ) -> Result<Revision, StoreError> {
        let at = at.unwrap_or(self.current);
        if at > self.current {
            return Err(StoreError::FutureRevision {
                requested: at,
                current: self.current,
            });
        }
        if at < self.compacted {
            return Err(StoreError::Compacted {
                requested: at,
                compacted: self.compacted,
            });
        }
        if at == self.current {
            self.scan_current(range, visit)?;
        } else {
            self.scan_history(range, at, visit)?;
        }
        Ok(at)
    }

    fn current_revision(&self) -> Revision {
        self.current
    }

    fn compacted_revision(&self) -> Revision {
        self.compacted
    }

    fn lease(&self, id: LeaseId) -> Result<Option<LeaseRecord>, StoreError> {
        match self.src.get(Cf::Leases, &schema::lease_key(id))? {
            Some(v) => Ok(Some(bincode::deserialize(&v)?)),
            None => Ok(None),
        }
    }

    fn lease_keys(&self, id: LeaseId) -> Result<Vec<Vec<u8>>, StoreError> {
        let prefix = schema::lease_attachment_prefix(id);
        let end = crate::command::prefix_end(&prefix);
        let mut keys = Vec::new();
        for row in self.src.scan(Cf::Leases, &prefix, Some(&end))? {
            let (k, _) = row?;
            keys.push(k[prefix.len()..].to_vec());
        }
        Ok(keys)
    }

    fn session(&self, origin: NodeId) -> Result<Option<SessionState>, StoreError> {
        session::read_state(self.src, origin)
    }

    fn session_record(&self, origin: NodeId, seq: u64) -> Result<Option<Recorded>, StoreError> {
        session::read_record(self.src, origin, seq)
    }
}

impl<S: Source + ?Sized> MvccReader<'_, S> {
    /// Every lease, by id.
    pub fn leases(&self) -> Result<Vec<LeaseRecord>, StoreError> {
        let mut out = Vec::new();
        for row in self.src.scan(
            Cf::Leases,
            &schema::LEASE_RECORDS_START,
            Some(&schema::LEASE_RECORDS_END),
        )? {
            let (_, v) = row?;
            out.push(bincode::deserialize(&v)?);
        }
        Ok(out)
    }
}

/// A state an [`Event`] carries, as its `events` row stores it. Borrowed
/// from the applied event when staged (nothing is copied to encode it),
/// owned when read back.
#[derive(Debug, Serialize, Deserialize)]
enum StoredState<'a> {
    /// The event key's `history` row at this revision.
    History(u64),
    /// The state itself: `history` keeps only a key's last state per
    /// revision, so a state a transaction overwrote is kept here.
    Inline(Cow<'a, KeyValue>),
}

/// One [`Event`] of an `events` row; its key borrowed where it can be (from
/// the applied event when staged, from the row when read).
#[derive(Debug, Serialize, Deserialize)]
struct StoredEvent<'a> {
    kind: EventKind,
    #[serde(borrow, with = "serde_bytes")]
    key: Cow<'a, [u8]>,
    /// A put's new state; `None` for a deletion, whose `kv` is only the key
    /// and the revision.
    kv: Option<StoredState<'a>>,
    prev_kv: Option<StoredState<'a>>,
}

impl<'a> StoredEvent<'a> {
    /// How `event`, one of the events of `revision`, is stored. `last` says
    /// whether it is the last event of its key in that revision (so the
    /// key's `history` row at `revision` is its `kv`).
    fn new(event: &'a Event, revision: Revision, last: bool) -> Self {
        let kv = match event.kind {
            EventKind::Delete => None,
            EventKind::Put if last => Some(StoredState::History(revision.0)),
            EventKind::Put => Some(StoredState::Inline(Cow::Borrowed(&event.kv))),
        };
        let prev_kv = event.prev_kv.as_ref().map(|prev| {
            if prev.mod_revision < revision {
                StoredState::History(prev.mod_revision.0)
            } else {
                StoredState::Inline(Cow::Borrowed(prev))
            }
        });
        Self {
            kind: event.kind,
            key: Cow::Borrowed(&event.kv.key),
            kv,
            prev_kv,
        }
    }

    /// The [`Event`] back, its states read from `history` in `src`.
    fn load<S: Source + ?Sized>(self, src: &S, revision: u64) -> Result<Event, StoreError> {
        let kv = match self.kv {
            Some(state) => state.load(src, &self.key)?,
            None => KeyValue::deleted(Bytes::copy_from_slice(&self.key), Revision(revision)),
        };
        let prev_kv = match self.prev_kv {
            Some(state) => Some(state.load(src, &self.key)?),
            None => None,
        };
        Ok(Event {
            kind: self.kind,
            kv,
            prev_kv,
        })
    }

    /// The `history` revision of the previous state, if it lives there.
    fn prev_in_history(&self) -> Option<u64> {
        match self.prev_kv {
            Some(StoredState::History(rev)) => Some(rev),
            _ => None,
        }
    }
}

impl StoredState<'_> {
    fn load<S: Source + ?Sized>(self, src: &S, key: &[u8]) -> Result<KeyValue, StoreError> {
        let revision = match self {
            StoredState::Inline(kv) => return Ok(kv.into_owned()),
            StoredState::History(revision) => revision,
        };
        let row = src
            .get(Cf::History, &schema::history_key(key, revision))?
            .ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "an event points at a missing history row ({revision})"
                ))
            })?;
        bincode::deserialize::<Option<KeyValue>>(&row)?.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "an event points at a deletion in history ({revision})"
            ))
        })
    }
}

/// Encodes the `events` row of `revision` (a `Vec<StoredEvent>`) into
/// `out`, replacing what it held.
fn encode_events(
    events: &[Event],
    revision: Revision,
    out: &mut Vec<u8>,
) -> Result<(), StoreError> {
    out.clear();
    if let [event] = events {
        // bincode encodes a one-element slice as it does the `Vec`.
        let one = StoredEvent::new(event, revision, true);
        bincode::serialize_into(&mut *out, std::slice::from_ref(&one))?;
        return Ok(());
    }
    let mut last_of_key: HashMap<&[u8], usize> = HashMap::with_capacity(events.len());
    for (i, event) in events.iter().enumerate() {
        last_of_key.insert(&event.kv.key, i);
    }
    let stored: Vec<StoredEvent<'_>> = events
        .iter()
        .enumerate()
        .map(|(i, event)| StoredEvent::new(event, revision, last_of_key[&event.kv.key[..]] == i))
        .collect();
    bincode::serialize_into(&mut *out, &stored)?;
    Ok(())
}

/// Stages what one log entry's commands did to the MVCC store and the
/// leases, in their order: each command's own rows (current state,
/// history, events, leases), then once for the entry the rows every
/// command would overwrite (the revision, the compaction point) with their
/// last values. A batch entry of 256 writes makes one revision row, not
/// 256: RocksDB inserts every row of a write batch, overwritten or not.
/// The compaction point alone: the rows it makes unreachable are purged
/// later, off the apply path ([`crate::compactor`]). The session changes
/// are staged by the state machine's mirror of them
/// (`SessionTable::stage`), once per origin.
pub(crate) fn stage_applied(batch: &mut Batch<'_>, entry: &[Applied]) -> Result<(), StoreError> {
    let mut revision = None;
    let mut compact_to = None;
    // Buffers for every command's rows: each grows to the largest once,
    // instead of from empty for every command.
    let mut scratch = RowScratch::default();
    for applied in entry {
        stage_rows(batch, applied, &mut scratch)?;
        if !applied.writes.is_empty() {
            revision = Some(applied.response.revision);
        }
        compact_to = applied.compact_to.or(compact_to);
    }
    if let Some(revision) = revision {
        batch.put(
            Cf::SmMeta,
            schema::SM_REVISION,
            &schema::u64_key(revision.0),
        )?;
    }
    if let Some(to) = compact_to {
        batch.put(Cf::SmMeta, schema::SM_COMPACTED, &schema::u64_key(to.0))?;
    }
    Ok(())
}

/// About the bytes [`stage_applied`] stages for `entry`, and the
/// bookkeeping rows apply adds after it, so the entry's batch is allocated
/// once ([`Engine::batch_with_capacity`]). Each written key is two rows
/// (`kv` and `history`) holding its encoded state (key and value, 49 bytes
/// of revisions, version, lease and tags, 16 of length prefixes), the
/// history key (the key escaped, and a revision); each revision, one row of
/// events that name its keys; each tagged command, its answer in its
/// origin's session row. An estimate errs high: a short one only
/// costs the growth it was meant to save.
pub(crate) fn staged_bytes(entry: &[Applied]) -> usize {
    const KEY_STATE: usize = 49 + 16;
    const EVENT: usize = 32;
    let per_command = |applied: &Applied| -> usize {
        let writes: usize = applied
            .writes
            .iter()
            .map(|(key, state)| {
                let value = state.as_ref().map_or(0, |kv| kv.value.len());
                // kv: key, state; history: escaped key, revision, tag, state.
                2 * (value + key.len() + KEY_STATE) + 2 * key.len() + 12 + 2 * RECORD_OVERHEAD
            })
            .sum();
        let events = if applied.writes.is_empty() {
            0
        } else {
            applied.events.len() * EVENT
                + applied.writes.keys().map(Bytes::len).sum::<usize>()
                + RECORD_OVERHEAD
                + 8
        };
        // A tagged command's answer goes into its origin's session row.
        let session = if applied.session.is_some() { 64 } else { 0 };
        writes + events + session + (applied.leases.len() + applied.attachments.len()) * 64
    };
    // The revision, compaction point, last applied id and session states.
    512 + entry.iter().map(per_command).sum::<usize>()
}

/// Encodes a key's state as its `history` row holds it (bincode's
/// `Option<KeyValue>`: a tag byte, then the `KeyValue` when there is one)
/// into `out`, replacing what it held. The `kv` row of a live key is the
/// same bytes after the tag, so one encoding makes both.
fn encode_state(state: &Option<KeyValue>, out: &mut Vec<u8>) -> Result<(), StoreError> {
    out.clear();
    bincode::serialize_into(&mut *out, state)?;
    Ok(())
}

/// The buffers [`stage_rows`] encodes rows and keys into: a write batch
/// copies what it is given, so one set serves an entry's every command.
#[derive(Default)]
struct RowScratch {
    /// A key's encoded state, then a revision's events.
    row: Vec<u8>,
    /// A `history` row's key.
    key: Vec<u8>,
}

/// One command's own rows: its keys' current state and history, its
/// revision's events, its lease changes.
fn stage_rows(
    batch: &mut Batch<'_>,
    applied: &Applied,
    scratch: &mut RowScratch,
) -> Result<(), StoreError> {
    let revision = applied.response.revision;
    let RowScratch {
        row,
        key: history_key,
    } = scratch;
    if !applied.writes.is_empty() {
        for (key, state) in &applied.writes {
            encode_state(state, row)?;
            match state {
                // The current row is the history row without its tag.
                Some(_) => batch.put(Cf::Kv, key, &row[1..])?,
                None => batch.delete(Cf::Kv, key)?,
            }
            schema::history_key_into(key, revision.0, history_key);
            batch.put(Cf::History, history_key, row)?;
        }
        encode_events(&applied.events, revision, row)?;
        batch.put(Cf::Events, &schema::u64_key(revision.0), row)?;
    }
    for (id, lease) in &applied.leases {
        match lease {
            Some(record) => batch.put(
                Cf::Leases,
                &schema::lease_key(*id),
                &bincode::serialize(record)?,
            )?,
            None => batch.delete(Cf::Leases, &schema::lease_key(*id))?,
        }
    }
    for ((id, key), attached) in &applied.attachments {
        let row = schema::lease_attachment_key(*id, key);
        if *attached {
            batch.put(Cf::Leases, &row, &[])?;
        } else {
            batch.delete(Cf::Leases, &row)?;
        }
    }
    Ok(())
}

/// Stages the physical part of a compaction from `from` to `to` (the
/// history a compaction to `to` makes unreachable, given that one to
/// `from` was purged already), returning how many keys it looked at.
/// Drops history below `to`: for every key changed in `[from, to)`, every
/// row but its last at or below `to` goes, and that one too if it is a
/// deletion; except the previous state of a key changed exactly at `to`,
/// which the event of `to` points at, and then the key's row at `to` even
/// if it is a deletion (the next compaction drops both, as that key is then
/// among those changed since). Events of revisions below
/// `to` go. Reads and events at `to` stay whole.
pub(crate) fn stage_purge(
    engine: &Engine,
    batch: &mut Batch<'_>,
    from: Revision,
    to: Revision,
) -> Result<usize, StoreError> {
    let mut touched = BTreeSet::new();
    let mut pointed_at = HashSet::new();
    let start = schema::u64_key(from.0);
    let end = schema::u64_key(to.0);
    let through_to = schema::u64_key(to.0 + 1);
    for row in engine.scan(Cf::Events, &start, Some(&through_to))? {
        let (k, v) = row?;
        let events: Vec<StoredEvent> = bincode::deserialize(&v)?;
        if schema::decode_u64(&k) == Some(to.0) {
            for event in events {
                if let Some(prev) = event.prev_in_history() {
                    pointed_at.insert(schema::history_key(&event.key, prev));
                }
            }
        } else {
            touched.extend(events.into_iter().map(|e| e.key.into_owned()));
        }
    }
    let mut history = engine.cursor(Cf::History)?;
    for key in &touched {
        let rows = rows_to_purge_from(&mut history, key, from, to)?;
        if let Some((_, live)) = rows.last() {
            // A deletion at `to` whose previous state stays must stay too,
            // or a read at `to` would find that state.
            let keep_last = *live || rows.iter().any(|(k, _)| pointed_at.contains(&**k));
            let drop = if keep_last {
                rows.len() - 1
            } else {
                rows.len()
            };
            for (k, _) in &rows[..drop] {
                if !pointed_at.contains(&**k) {
                    batch.delete(Cf::History, k)?;
                }
            }
        }
    }
    batch.delete_range(Cf::Events, &schema::u64_key(0), &end)?;
    Ok(touched.len())
}

/// A `history` row's key, and whether the row holds a state (not a
/// deletion).
type HistoryRow = (Box<[u8]>, bool);

/// The `history` rows of `key` at or below `to` that a purge from `from`
/// can find, in revision order, each with whether it holds a state (not a
/// deletion): every row in `[from, to]`, and the last row below `from`.
///
/// The purge to `from` left at most one row of a key below `from` (the
/// key's last state, or the previous state an event at `from` points at),
/// so the rows below that one are gone: read backwards from `to`, the
/// walk stops there instead of crossing the deletion markers of every
/// earlier step, which a forward scan from the key's first revision read
/// again on every step that touched the key (a hot key's purge grew with
/// the square of its history).
fn rows_to_purge_from(
    history: &mut Cursor<'_>,
    key: &[u8],
    from: Revision,
    to: Revision,
) -> Result<Vec<HistoryRow>, StoreError> {
    let mut own = Vec::with_capacity(key.len() + 2);
    schema::escape_user_key(key, &mut own);
    let mut rows: Vec<HistoryRow> = Vec::new();
    history.seek_for_prev(&schema::history_key(key, to.0));
    while let Some((k, v)) = history.row() {
        let Some(revision) = k.strip_prefix(own.as_slice()).and_then(schema::decode_u64) else {
            break; // another key's row
        };
        let state: Option<KeyValue> = bincode::deserialize(v)?;
        rows.push((k.into(), state.is_some()));
        if revision < from.0 {
            break;
        }
        history.prev();
    }
    history.status()?;
    rows.reverse();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, KeyRange, Op, RangeRequest};
    use crate::test_fixture::{delete, put, Fixture};

    impl Fixture {
        /// The revisions of `key`'s `history` rows.
        fn history_of(&self, key: &str) -> Vec<u64> {
            let lo = schema::history_key(key.as_bytes(), 0);
            let hi = schema::history_key(key.as_bytes(), u64::MAX);
            self.store
                .engine
                .scan(Cf::History, &lo, Some(&hi))
                .expect("scan")
                .map(|row| {
                    let (k, _) = row.expect("row");
                    schema::split_history_key(&k).expect("history key").1
                })
                .collect()
        }

        /// Each event of revisions after `after` as (revision, kind, key,
        /// value, previous value).
        fn events_after(
            &self,
            after: u64,
        ) -> Vec<(u64, EventKind, String, String, Option<String>)> {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            self.store
                .events_after(Revision(after), 100)
                .expect("events")
                .into_iter()
                .flat_map(|(rev, events)| {
                    events
                        .iter()
                        .map(|e| {
                            assert_eq!(e.kv.mod_revision, rev, "an event's kv has its revision");
                            (
                                rev.0,
                                e.kind,
                                text(&e.kv.key),
                                text(&e.kv.value),
                                e.prev_kv.as_ref().map(|p| text(&p.value)),
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .collect()
        }
    }

    /// An entry's batch is allocated for what `stage_applied` puts in it:
    /// the estimate covers the staged rows of entries of small and large
    /// values, creates, overwrites and deletions, and stays within twice
    /// them (an estimate far above would hold memory for nothing).
    #[tokio::test]
    async fn the_estimate_of_an_entrys_rows_covers_them() {
        let f = Fixture::new();
        let engine = &f.store.engine;
        let big = "v".repeat(4096);
        let entries: [Vec<Op>; 4] = [
            vec![put("a", "1")],
            (0..64)
                .map(|i| put(&format!("/registry/configmaps/default/c{i}"), &big))
                .collect(),
            vec![put("a", "2"), put("b", &big), delete("a")],
            vec![delete("nothing-there")],
        ];
        for ops in entries {
            let cmd = Command::Batch(
                ops.into_iter()
                    .map(|op| {
                        Command::Txn(crate::command::Txn {
                            success: vec![op],
                            ..Default::default()
                        })
                    })
                    .collect(),
            );
            let reader = MvccReader::at(engine, Revision(0), Revision(0));
            let (_, applied) = crate::apply::apply_entry(&reader, &cmd).expect("apply");
            let mut batch = engine.batch();
            stage_applied(&mut batch, &applied).expect("stage");
            let (staged, estimate) = (batch.size_in_bytes(), staged_bytes(&applied));
            assert!(estimate >= staged, "{estimate} < {staged} staged for {cmd}");
            assert!(
                estimate <= 2 * staged + 512,
                "{estimate} far above {staged} for {cmd}"
            );
        }
    }

    /// One encoding makes both rows of a written key: the `kv` row is the
    /// `KeyValue` as bincode writes it, the `history` row the
    /// `Option<KeyValue>`, for live keys and deletions alike.
    #[tokio::test]
    async fn a_keys_current_and_history_rows_are_its_state_encoded_once() {
        let mut f = Fixture::new();
        f.txn(vec![put("a", "1")]).await; // 1
        f.txn(vec![put("a", "2"), put("b", "x")]).await; // 2
        f.txn(vec![delete("b")]).await; // 3
        let engine = &f.store.engine;
        let row = |cf: Cf, key: &[u8]| engine.get(cf, key).expect("read");
        let current = read_current(engine, b"a").expect("get").expect("a is live");
        assert_eq!(current.value, b"2".as_slice());
        assert_eq!(
            row(Cf::Kv, b"a"),
            Some(bincode::serialize(&current).expect("encode"))
        );
        assert_eq!(
            row(Cf::History, &schema::history_key(b"a", 2)),
            Some(bincode::serialize(&Some(current)).expect("encode"))
        );
        assert_eq!(row(Cf::Kv, b"b"), None);
        assert_eq!(
            row(Cf::History, &schema::history_key(b"b", 3)),
            Some(bincode::serialize(&None::<KeyValue>).expect("encode"))
        );
    }

    #[tokio::test]
    async fn events_get_their_values_back_from_history_even_when_one_txn_changes_a_key_twice() {
        let mut f = Fixture::new();
        f.txn(vec![put("a", "1")]).await; // 1
        f.txn(vec![put("a", "2")]).await; // 2
        f.txn(vec![put("b", "x"), delete("b")]).await; // 3: b put, then gone
        f.txn(vec![delete("a"), put("a", "3")]).await; // 4: a gone, then back
        f.txn(vec![delete("a")]).await; // 5
        use EventKind::{Delete, Put};
        let s = |v: &str| v.to_string();
        assert_eq!(
            f.events_after(0),
            vec![
                (1, Put, s("a"), s("1"), None),
                (2, Put, s("a"), s("2"), Some(s("1"))),
                (3, Put, s("b"), s("x"), None),
                (3, Delete, s("b"), s(""), Some(s("x"))),
                (4, Delete, s("a"), s(""), Some(s("2"))),
                (4, Put, s("a"), s("3"), None),
                (5, Delete, s("a"), s(""), Some(s("3"))),
            ]
        );
    }

    /// Reads every key of `range` at `at` as (key, value) pairs, with
    /// `limit`.
    fn read_at(f: &Fixture, range: KeyRange, at: u64, limit: u64) -> Vec<(String, String)> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        f.store
            .range(&RangeRequest {
                range,
                revision: Some(Revision(at)),
                limit,
                ..RangeRequest::default()
            })
            .expect("range")
            .kvs
            .iter()
            .map(|kv| (text(&kv.key), text(&kv.value)))
            .collect()
    }

    #[tokio::test]
    async fn a_range_at_an_old_revision_sees_each_key_as_it_was_however_often_it_changed_since() {
        use std::collections::BTreeMap;
        // Keys whose escaped forms neighbour each other ("a\0" escapes its
        // zero byte), written a few times or hundreds of times, deleted and
        // written again; a model of the state after every revision.
        let keys = ["a", "a\0", "a\0b", "ab", "b", "hot", "warm"];
        let mut f = Fixture::new();
        let mut model: Vec<BTreeMap<String, String>> = vec![BTreeMap::new()];
        let mut seed = 7u64;
        for rev in 1..=600u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pick = (seed >> 33) as usize;
            // Half the writes go to "hot", a few to the others.
            let key = if pick.is_multiple_of(2) {
                "hot"
            } else {
                keys[pick % keys.len()]
            };
            let mut state = model.last().expect("a state").clone();
            if pick % 11 == 3 && state.contains_key(key) {
                f.txn(vec![delete(key)]).await;
                state.remove(key);
            } else {
                let value = format!("{key}@{rev}");
                f.txn(vec![put(key, &value)]).await;
                state.insert(key.to_string(), value);
            }
            model.push(state);
        }
        let check = |f: &Fixture, from: u64| {
            for at in (from..=600).step_by(7).chain([600]) {
                let want: Vec<(String, String)> = model[at as usize]
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(read_at(f, KeyRange::prefix(""), at, 0), want, "all at {at}");
                assert_eq!(
                    read_at(f, KeyRange::prefix(""), at, 3),
                    want[..want.len().min(3)],
                    "the first three at {at}"
                );
                let a_keys: Vec<_> = want
                    .iter()
                    .filter(|(k, _)| k.starts_with('a'))
                    .cloned()
                    .collect();
                assert_eq!(
                    read_at(f, KeyRange::prefix("a"), at, 0),
                    a_keys,
                    "a* at {at}"
                );
                for key in keys {
                    let one: Vec<_> = want.iter().filter(|(k, _)| k == key).cloned().collect();
                    assert_eq!(
                        read_at(f, KeyRange::single(key), at, 0),
                        one,
                        "{key} at {at}"
                    );
                }
            }
        };
        check(&f, 1);
        // After compaction (and its purge), reads at or after the
        // compaction point are unchanged.
        f.compact(300).await;
        check(&f, 300);
    }

    #[tokio::test]
    async fn compaction_keeps_the_previous_state_of_a_key_changed_at_its_revision_until_the_next() {
        let mut f = Fixture::new();
        f.txn(vec![put("a", "1")]).await; // 1
        f.txn(vec![put("a", "2")]).await; // 2
        f.txn(vec![put("a", "3")]).await; // 3
        f.txn(vec![put("b", "1")]).await; // 4
        f.txn(vec![put("c", "1")]).await; // 5
        f.txn(vec![delete("c")]).await; // 6
        f.compact(3).await;
        assert_eq!(
            f.history_of("a"),
            vec![2, 3],
            "the event of revision 3 points at revision 2"
        );
        let s = |v: &str| v.to_string();
        assert_eq!(
            f.events_after(2)[0],
            (3, EventKind::Put, s("a"), s("3"), Some(s("2")))
        );

        f.compact(4).await;
        assert_eq!(
            f.history_of("a"),
            vec![3],
            "no event points at revision 2 now"
        );
        assert_eq!(f.history_of("b"), vec![4]);
        assert_eq!(f.events_after(3).len(), 3);

        // A deletion at the compaction revision keeps its previous state
        // for its event, and its own row so that reads at 6 do not see it.
        f.compact(6).await;
        assert_eq!(f.history_of("c"), vec![5, 6]);
        assert_eq!(
            f.events_after(5),
            vec![(6, EventKind::Delete, s("c"), s(""), Some(s("1")))]
        );
        let at_6 = f
            .store
            .range(&RangeRequest {
                range: KeyRange::prefix("c"),
                revision: Some(Revision(6)),
                ..RangeRequest::default()
            })
            .expect("range at 6");
        assert!(at_6.kvs.is_empty(), "{at_6:?}");

        f.txn(vec![put("d", "1")]).await; // 7
        f.compact(7).await;
        assert!(f.history_of("c").is_empty(), "both rows of c go next time");
    }

    /// An `events` row as format 5 stored it: owned keys and states. The
    /// borrowed form the apply encodes must give the same bytes, so rows
    /// written before and after read alike, and it must read back whole.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum OwnedState {
        History(u64),
        Inline(KeyValue),
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct OwnedEvent {
        kind: EventKind,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        kv: Option<OwnedState>,
        prev_kv: Option<OwnedState>,
    }

    #[test]
    fn an_events_row_is_encoded_as_format_5_encoded_it() {
        let state = |key: &str, value: &str, rev: u64| KeyValue {
            key: Bytes::copy_from_slice(key.as_bytes()),
            create_revision: Revision(2),
            mod_revision: Revision(rev),
            version: 3,
            value: value.to_owned().into(),
            lease: LeaseId(7),
        };
        let put = |key: &str, value: &str, prev: Option<KeyValue>| Event {
            kind: EventKind::Put,
            kv: state(key, value, 9),
            prev_kv: prev,
        };
        // A put over an older state; a transaction that puts a key twice
        // (the first state inline, the second in `history`) and deletes
        // another.
        let one = vec![put("a", "1", Some(state("a", "0", 4)))];
        let several = vec![
            put("b", "1", None),
            put("b", "2", Some(state("b", "1", 9))),
            Event {
                kind: EventKind::Delete,
                kv: KeyValue::deleted(Bytes::from_static(b"c"), Revision(9)),
                prev_kv: Some(state("c", "x", 5)),
            },
        ];
        let expected = [
            vec![OwnedEvent {
                kind: EventKind::Put,
                key: b"a".to_vec(),
                kv: Some(OwnedState::History(9)),
                prev_kv: Some(OwnedState::History(4)),
            }],
            vec![
                OwnedEvent {
                    kind: EventKind::Put,
                    key: b"b".to_vec(),
                    kv: Some(OwnedState::Inline(state("b", "1", 9))),
                    prev_kv: None,
                },
                OwnedEvent {
                    kind: EventKind::Put,
                    key: b"b".to_vec(),
                    kv: Some(OwnedState::History(9)),
                    prev_kv: Some(OwnedState::Inline(state("b", "1", 9))),
                },
                OwnedEvent {
                    kind: EventKind::Delete,
                    key: b"c".to_vec(),
                    kv: None,
                    prev_kv: Some(OwnedState::History(5)),
                },
            ],
        ];
        let mut row = vec![0xAA; 3];
        for (events, expected) in [one, several].iter().zip(expected) {
            encode_events(events, Revision(9), &mut row).expect("encode");
            assert_eq!(row, bincode::serialize(&expected).expect("encode owned"));
            let back: Vec<StoredEvent<'_>> = bincode::deserialize(&row).expect("decode");
            let back: Vec<OwnedEvent> = back
                .into_iter()
                .map(|e| {
                    let owned = |s: StoredState<'_>| match s {
                        StoredState::History(r) => OwnedState::History(r),
                        StoredState::Inline(kv) => OwnedState::Inline(kv.into_owned()),
                    };
                    OwnedEvent {
                        kind: e.kind,
                        key: e.key.into_owned(),
                        kv: e.kv.map(owned),
                        prev_kv: e.prev_kv.map(owned),
                    }
                })
                .collect();
            assert_eq!(back, expected);
        }
    }
}

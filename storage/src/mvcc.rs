//! The MVCC revision store on top of the engine: reading key ranges at any
//! uncompacted revision, the revision-ordered event log, and staging an
//! [`Applied`] command (and compaction) into a write batch.
//!
//! Layout (see [`crate::schema`]): `kv` holds each live key's latest state;
//! `history` holds one row per (key, revision) that touched it, `None` for a
//! deletion; `events` holds everything each revision changed.
//!
//! Range semantics: a [`RangeRequest`] without a revision reads the current
//! state; with revision `r` it reads each key's last row at or below `r`.
//! `r` above the current revision is [`StoreError::FutureRevision`]; `r`
//! below the compaction point is [`StoreError::Compacted`]. A read exactly at
//! the compaction point is allowed (compaction keeps it whole).

use std::collections::BTreeSet;

use crate::apply::{Applied, MvccRead};
use crate::command::{Event, KeyValue, LeaseRecord, RangeRequest, RangeResponse, Revision};
use crate::engine::{Batch, Engine, Scan, SnapshotView};
use crate::error::StoreError;
use crate::schema::{self, Cf};

/// Something rows can be read from: the live engine or a point-in-time view.
pub(crate) trait Source {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    fn scan(&self, cf: Cf, start: &[u8], end: Option<&[u8]>) -> Result<Scan<'_>, StoreError>;
}

impl Source for Engine {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Engine::get(self, cf, key)
    }
    fn scan(&self, cf: Cf, start: &[u8], end: Option<&[u8]>) -> Result<Scan<'_>, StoreError> {
        Engine::scan(self, cf, start, end)
    }
}

impl Source for SnapshotView<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        SnapshotView::get(self, cf, key)
    }
    fn scan(&self, cf: Cf, start: &[u8], end: Option<&[u8]>) -> Result<Scan<'_>, StoreError> {
        SnapshotView::scan(self, cf, start, end)
    }
}

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

/// Reads the MVCC store through one source, with the revision bounds the
/// source had when the reader was made.
pub(crate) struct MvccReader<'a, S: ?Sized> {
    src: &'a S,
    current: Revision,
    compacted: Revision,
}

impl<'a, S: Source + ?Sized> MvccReader<'a, S> {
    pub(crate) fn new(src: &'a S) -> Result<Self, StoreError> {
        Ok(Self {
            src,
            current: read_revision(src, schema::SM_REVISION)?,
            compacted: read_revision(src, schema::SM_COMPACTED)?,
        })
    }

    /// The events of revisions `> after`, ascending, at most `limit`
    /// revisions. `after` below the compaction point is
    /// [`StoreError::Compacted`] (those events are gone).
    pub fn events_after(
        &self,
        after: Revision,
        limit: usize,
    ) -> Result<Vec<(Revision, Vec<Event>)>, StoreError> {
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
            out.push((Revision(rev), bincode::deserialize(&v)?));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    fn range_current(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        let end = req.range.end_bound();
        let mut shaper = Shaper::new(req, self.current);
        if req.range.is_single() {
            if let Some(v) = self.src.get(Cf::Kv, &req.range.key)? {
                shaper.push(bincode::deserialize(&v)?);
            }
            return Ok(shaper.finish());
        }
        for row in self.src.scan(Cf::Kv, &req.range.key, end.as_deref())? {
            let (_, v) = row?;
            shaper.push(bincode::deserialize(&v)?);
        }
        Ok(shaper.finish())
    }

    fn range_history(&self, req: &RangeRequest, at: Revision) -> Result<RangeResponse, StoreError> {
        let start = schema::history_key_start(&req.range.key);
        let end = req.range.end_bound().map(|e| schema::history_key_start(&e));
        let mut shaper = Shaper::new(req, at);
        // Rows come grouped by key, revisions ascending: remember the last row
        // at or below `at` and emit it when the key changes.
        let mut candidate: Option<(Vec<u8>, Option<KeyValue>)> = None;
        for row in self.src.scan(Cf::History, &start, end.as_deref())? {
            let (k, v) = row?;
            let (key, rev) = schema::split_history_key(&k)
                .ok_or_else(|| StoreError::Corrupt("malformed history key".into()))?;
            if candidate.as_ref().is_some_and(|(ck, _)| *ck != key) {
                if let Some((_, Some(kv))) = candidate.take() {
                    shaper.push(kv);
                }
            }
            if rev <= at.0 {
                candidate = Some((key, bincode::deserialize(&v)?));
            }
        }
        if let Some((_, Some(kv))) = candidate {
            shaper.push(kv);
        }
        Ok(shaper.finish())
    }
}

impl<S: Source + ?Sized> MvccRead for MvccReader<'_, S> {
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        match self.src.get(Cf::Kv, key)? {
            Some(v) => Ok(Some(bincode::deserialize(&v)?)),
            None => Ok(None),
        }
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        let at = req.revision.unwrap_or(self.current);
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
            self.range_current(req)
        } else {
            self.range_history(req, at)
        }
    }

    fn current_revision(&self) -> Revision {
        self.current
    }

    fn compacted_revision(&self) -> Revision {
        self.compacted
    }

    fn lease(&self, id: i64) -> Result<Option<LeaseRecord>, StoreError> {
        match self.src.get(Cf::Leases, &schema::lease_key(id))? {
            Some(v) => Ok(Some(bincode::deserialize(&v)?)),
            None => Ok(None),
        }
    }

    fn lease_keys(&self, id: i64) -> Result<Vec<Vec<u8>>, StoreError> {
        let prefix = schema::lease_attachment_prefix(id);
        let end = crate::command::prefix_end(&prefix);
        let mut keys = Vec::new();
        for row in self.src.scan(Cf::Leases, &prefix, Some(&end))? {
            let (k, _) = row?;
            keys.push(k[prefix.len()..].to_vec());
        }
        Ok(keys)
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

/// Applies limit / keys_only / count_only while streaming keys in, keeping
/// at most `limit` values in memory.
struct Shaper<'r> {
    req: &'r RangeRequest,
    kvs: Vec<KeyValue>,
    count: u64,
    revision: Revision,
}

impl<'r> Shaper<'r> {
    fn new(req: &'r RangeRequest, revision: Revision) -> Self {
        Self {
            req,
            kvs: Vec::new(),
            count: 0,
            revision,
        }
    }

    fn push(&mut self, mut kv: KeyValue) {
        self.count += 1;
        if self.req.count_only || (self.req.limit > 0 && self.kvs.len() as u64 >= self.req.limit) {
            return;
        }
        if self.req.keys_only {
            kv.value.clear();
        }
        self.kvs.push(kv);
    }

    fn finish(self) -> RangeResponse {
        RangeResponse {
            more: self.req.limit > 0 && self.count > self.req.limit,
            kvs: self.kvs,
            count: self.count,
            revision: self.revision,
        }
    }
}

/// Stages the writes, history rows, events and revision of `applied` into
/// `batch`. Compaction, if asked for, is staged too (it reads the engine).
pub(crate) fn stage_applied(
    engine: &Engine,
    batch: &mut Batch<'_>,
    applied: &Applied,
    compacted: Revision,
) -> Result<(), StoreError> {
    let revision = applied.response.revision;
    if !applied.writes.is_empty() {
        for (key, state) in &applied.writes {
            match state {
                Some(kv) => batch.put(Cf::Kv, key, &bincode::serialize(kv)?)?,
                None => batch.delete(Cf::Kv, key)?,
            }
            batch.put(
                Cf::History,
                &schema::history_key(key, revision.0),
                &bincode::serialize(state)?,
            )?;
        }
        batch.put(
            Cf::Events,
            &schema::u64_key(revision.0),
            &bincode::serialize(&applied.events)?,
        )?;
        batch.put(
            Cf::SmMeta,
            schema::SM_REVISION,
            &schema::u64_key(revision.0),
        )?;
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
    if let Some(to) = applied.compact_to {
        stage_compaction(engine, batch, compacted, to)?;
    }
    Ok(())
}

/// Drops history below `to`: for every key changed in `[from, to)`, every
/// row but its last at or below `to` goes, and that one too if it is a
/// deletion. Events of revisions below `to` go. Reads at `to` stay whole.
fn stage_compaction(
    engine: &Engine,
    batch: &mut Batch<'_>,
    from: Revision,
    to: Revision,
) -> Result<(), StoreError> {
    let mut touched = BTreeSet::new();
    let start = schema::u64_key(from.0);
    let end = schema::u64_key(to.0);
    for row in engine.scan(Cf::Events, &start, Some(&end))? {
        let (_, v) = row?;
        let events: Vec<Event> = bincode::deserialize(&v)?;
        touched.extend(events.into_iter().map(|e| e.kv.key));
    }
    for key in &touched {
        let lo = schema::history_key(key, 0);
        let hi = schema::history_key(key, to.0 + 1);
        let mut rows: Vec<(Box<[u8]>, bool)> = Vec::new();
        for row in engine.scan(Cf::History, &lo, Some(&hi))? {
            let (k, v) = row?;
            let state: Option<KeyValue> = bincode::deserialize(&v)?;
            rows.push((k, state.is_some()));
        }
        if let Some((_, live)) = rows.last() {
            let keep_last = *live;
            let drop = if keep_last {
                rows.len() - 1
            } else {
                rows.len()
            };
            for (k, _) in &rows[..drop] {
                batch.delete(Cf::History, k)?;
            }
        }
    }
    batch.delete_range(Cf::Events, &schema::u64_key(0), &end)?;
    batch.put(Cf::SmMeta, schema::SM_COMPACTED, &schema::u64_key(to.0))?;
    tracing::info!(
        from = from.0,
        to = to.0,
        keys = touched.len(),
        "compacted history"
    );
    Ok(())
}

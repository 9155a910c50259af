//! The state machine's in-memory mirror of the session table
//! ([`SessionTable`]: every origin's epoch, floor, recorded seqs and the
//! rows holding them) and the read view apply sees it through
//! ([`MirroredView`], with the current rows of [`crate::current_rows`]),
//! so the common case, a proposal seen for the first time, reads nothing
//! from disk. It also stages each entry's session
//! changes ([`SessionTable::stage`]): one row of answers per origin and
//! entry, and one delete per row the floor has passed. The rules and the
//! rows are in [`crate::session`].

use std::collections::{BTreeMap, BTreeSet};

use crate::apply::Applied;
use crate::command::{KeyRange, KeyValue, LeaseRecord, Revision};
use crate::current_rows::CurrentRows;
use crate::engine::{Batch, Source};
use crate::error::StoreError;
use crate::ids::{LeaseId, NodeId};
use crate::schema::{self, Cf, SessionRecordRow, SessionRowKey};
use crate::session::{self, Recorded, SessionState};
use crate::view::{MvccRead, Visit};

/// One session as the state machine mirrors it: no responses, only which
/// seqs have one and which rows hold them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct MirroredSession {
    state: SessionState,
    /// The recorded seqs at or above the floor: those a copy is answered
    /// from (below it, rule 4 refuses a copy before any record is read).
    seqs: BTreeSet<u64>,
    /// Every record row on disk, and the largest seq it holds: it goes
    /// once the floor passes that.
    rows: BTreeMap<SessionRecordRow, u64>,
}

/// The state machine's in-memory mirror of the `sessions` column family:
/// every session's state, recorded seqs and record rows. Loaded at open,
/// rebuilt after a snapshot install, and changed only after the batch
/// holding the same changes was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SessionTable {
    sessions: BTreeMap<NodeId, MirroredSession>,
}

/// What one log entry did to one origin's session, net of its commands:
/// staged by [`SessionTable::stage`], absorbed into the mirror by
/// [`SessionTable::absorb`] once written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntrySessionChange {
    origin: NodeId,
    state: SessionState,
    /// A command of the entry replaced the session: every earlier row went.
    replaced: bool,
    /// The rows the floor passed, deleted.
    dropped: Vec<SessionRecordRow>,
    /// The seqs recorded in the entry's row, if it wrote one.
    recorded: Vec<u64>,
    /// That row, and the largest of its seqs.
    row: Option<(SessionRecordRow, u64)>,
}

impl SessionTable {
    /// The table as stored in `src`.
    pub(crate) fn load<S: Source + ?Sized>(src: &S) -> Result<Self, StoreError> {
        let mut sessions: BTreeMap<NodeId, MirroredSession> = BTreeMap::new();
        for row in src.scan(Cf::Sessions, &[], None)? {
            let (k, v) = row?;
            match schema::split_session_key(&k) {
                // The state row sorts before the origin's record rows, so
                // the floor is known when they are read.
                Some(SessionRowKey::State(origin)) => {
                    sessions.entry(origin).or_default().state = bincode::deserialize(&v)?;
                }
                Some(SessionRowKey::Records(origin, row)) => {
                    let session = sessions.entry(origin).or_default();
                    let records = session::decode_records(row, &v)?;
                    let floor = session.state.floor;
                    let max = records.iter().map(|(seq, _)| *seq).max().ok_or_else(|| {
                        StoreError::Corrupt("an empty sessions record row".into())
                    })?;
                    session.rows.insert(row, max);
                    session.seqs.extend(
                        records
                            .iter()
                            .map(|(seq, _)| *seq)
                            .filter(|seq| *seq >= floor),
                    );
                }
                None => return Err(StoreError::Corrupt("malformed sessions row".into())),
            }
        }
        Ok(Self { sessions })
    }

    /// Stages the session changes of one log entry's commands (`entry`, in
    /// order) into `batch`, once per origin: its state row, at most one row
    /// of the answers the entry recorded and kept, and the deletion of the
    /// rows the floor passed (or of all of them, for a new epoch).
    pub(crate) fn stage(
        &self,
        batch: &mut Batch<'_>,
        entry: &[Applied],
    ) -> Result<Vec<EntrySessionChange>, StoreError> {
        // Each origin's updates, in order; an entry's commands come from a
        // handful of origins.
        let mut origins: BTreeMap<NodeId, Vec<&session::SessionUpdate>> = BTreeMap::new();
        for update in entry.iter().filter_map(|applied| applied.session.as_ref()) {
            origins.entry(update.origin).or_default().push(update);
        }
        let mut changes = Vec::with_capacity(origins.len());
        for (origin, updates) in origins {
            let mut replaced = false;
            let mut records: Vec<(u64, &Recorded)> = Vec::new();
            let mut state = SessionState::default();
            for update in updates {
                if update.replaced {
                    replaced = true;
                    records.clear();
                }
                if let Some((seq, recorded)) = &update.recorded {
                    records.push((*seq, recorded));
                }
                state = update.state;
            }
            records.retain(|(seq, _)| *seq >= state.floor);
            let dropped = if replaced {
                session::stage_records_cleared(batch, origin)?;
                Vec::new()
            } else {
                self.rows_passed(origin, state.floor)
            };
            for row in &dropped {
                batch.delete(Cf::Sessions, &row.key(origin))?;
            }
            let recorded: Vec<u64> = records.iter().map(|(seq, _)| *seq).collect();
            let row = match (recorded.iter().min(), recorded.iter().max()) {
                (Some(&first), Some(&max)) => {
                    session::stage_group(batch, origin, first, &records)?;
                    Some((SessionRecordRow { first, group: true }, max))
                }
                _ => None,
            };
            session::stage_state(batch, origin, &state)?;
            changes.push(EntrySessionChange {
                origin,
                state,
                replaced,
                dropped,
                recorded,
                row,
            });
        }
        Ok(changes)
    }

    /// The record rows of `origin` whose every seq is below `floor`.
    fn rows_passed(&self, origin: NodeId, floor: u64) -> Vec<SessionRecordRow> {
        let Some(session) = self.sessions.get(&origin) else {
            return Vec::new();
        };
        if floor <= session.state.floor {
            return Vec::new();
        }
        // A row's key names its smallest seq: only rows starting below the
        // floor can have passed it.
        let below = SessionRecordRow {
            first: floor,
            group: false,
        };
        session
            .rows
            .range(..below)
            .filter(|(_, max)| **max < floor)
            .map(|(row, _)| *row)
            .collect()
    }

    /// Applies an entry's written change.
    pub(crate) fn absorb(&mut self, change: &EntrySessionChange) {
        let session = self.sessions.entry(change.origin).or_default();
        if change.replaced {
            session.seqs.clear();
            session.rows.clear();
        }
        for row in &change.dropped {
            session.rows.remove(row);
        }
        session.seqs = session.seqs.split_off(&change.state.floor);
        if let Some((row, max)) = change.row {
            session.rows.insert(row, max);
        }
        session.seqs.extend(change.recorded.iter().copied());
        session.state = change.state;
    }
}

/// The store as apply sees it in the state machine: `base` for everything,
/// with session lookups answered from the mirror (only a duplicate's
/// recorded response is read from `base`) and the keys recent entries
/// wrote from the current rows.
pub(crate) struct MirroredView<'a, V> {
    base: &'a V,
    table: &'a SessionTable,
    rows: &'a CurrentRows,
}

impl<'a, V: MvccRead> MirroredView<'a, V> {
    pub(crate) fn new(base: &'a V, table: &'a SessionTable, rows: &'a CurrentRows) -> Self {
        Self { base, table, rows }
    }
}

impl<V: MvccRead> MvccRead for MirroredView<'_, V> {
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        match self.rows.get(key) {
            Some(held) => {
                debug_assert_eq!(
                    held,
                    &self.base.get(key)?,
                    "the current rows in memory left the store's for {}",
                    String::from_utf8_lossy(key)
                );
                Ok(held.clone())
            }
            None => self.base.get(key),
        }
    }

    fn scan(
        &self,
        range: &KeyRange,
        at: Option<Revision>,
        visit: Visit<'_>,
    ) -> Result<Revision, StoreError> {
        self.base.scan(range, at, visit)
    }

    fn current_revision(&self) -> Revision {
        self.base.current_revision()
    }

    fn compacted_revision(&self) -> Revision {
        self.base.compacted_revision()
    }

    fn lease(&self, id: LeaseId) -> Result<Option<LeaseRecord>, StoreError> {
        self.base.lease(id)
    }

    fn lease_keys(&self, id: LeaseId) -> Result<Vec<Vec<u8>>, StoreError> {
        self.base.lease_keys(id)
    }

    fn session(&self, origin: NodeId) -> Result<Option<SessionState>, StoreError> {
        Ok(self.table.sessions.get(&origin).map(|s| s.state))
    }

    fn session_record(&self, origin: NodeId, seq: u64) -> Result<Option<Recorded>, StoreError> {
        let known = self
            .table
            .sessions
            .get(&origin)
            .is_some_and(|s| s.seqs.contains(&seq));
        if !known {
            return Ok(None);
        }
        self.base
            .session_record(origin, seq)?
            .ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "the session mirror has proposal {origin}/{seq}, the store does not"
                ))
            })
            .map(Some)
    }
}

//! The state machine's in-memory mirror of the session table
//! ([`SessionTable`]: every origin's epoch, floor and recorded seqs) and the
//! read view apply sees it through ([`WithSessions`]), so the common case,
//! a proposal seen for the first time, reads nothing from disk. The rules
//! and the rows are in [`crate::session`].

use std::collections::{BTreeMap, BTreeSet};

use crate::command::{KeyRange, KeyValue, LeaseRecord, Revision};
use crate::engine::Source;
use crate::error::StoreError;
use crate::ids::{LeaseId, NodeId};
use crate::schema::{self, Cf};
use crate::session::{Recorded, SessionState, SessionUpdate};
use crate::view::{MvccRead, Visit};

/// One session as the state machine mirrors it: no responses, only which
/// seqs have one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct MirroredSession {
    state: SessionState,
    seqs: BTreeSet<u64>,
}

/// The state machine's in-memory mirror of the `sessions` column family:
/// every session's state and recorded seqs. Loaded at open, rebuilt after a
/// snapshot install, and changed only after the batch holding the same
/// changes was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SessionTable {
    sessions: BTreeMap<NodeId, MirroredSession>,
}

impl SessionTable {
    /// The table as stored in `src`.
    pub(crate) fn load<S: Source + ?Sized>(src: &S) -> Result<Self, StoreError> {
        let mut sessions: BTreeMap<NodeId, MirroredSession> = BTreeMap::new();
        for row in src.scan(Cf::Sessions, &[], None)? {
            let (k, v) = row?;
            match schema::split_session_key(&k) {
                Some((origin, None)) => {
                    sessions.entry(origin).or_default().state = bincode::deserialize(&v)?;
                }
                Some((origin, Some(seq))) => {
                    sessions.entry(origin).or_default().seqs.insert(seq);
                }
                None => return Err(StoreError::Corrupt("malformed sessions row".into())),
            }
        }
        Ok(Self { sessions })
    }

    /// Applies a written update.
    pub(crate) fn absorb(&mut self, update: &SessionUpdate) {
        let session = self.sessions.entry(update.origin).or_default();
        if update.replaced {
            session.seqs.clear();
        }
        for seq in &update.evicted {
            session.seqs.remove(seq);
        }
        if let Some((seq, _)) = &update.recorded {
            session.seqs.insert(*seq);
        }
        session.state = update.state;
    }
}

/// The store as apply sees it in the state machine: `base` for everything,
/// with session lookups answered from the mirror (only a duplicate's
/// recorded response is read from `base`).
pub(crate) struct WithSessions<'a, V> {
    base: &'a V,
    table: &'a SessionTable,
}

impl<'a, V: MvccRead> WithSessions<'a, V> {
    pub(crate) fn new(base: &'a V, table: &'a SessionTable) -> Self {
        Self { base, table }
    }
}

impl<V: MvccRead> MvccRead for WithSessions<'_, V> {
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        self.base.get(key)
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

    fn session_seqs_below(&self, origin: NodeId, below: u64) -> Result<Vec<u64>, StoreError> {
        Ok(self
            .table
            .sessions
            .get(&origin)
            .map(|s| s.seqs.range(..below).copied().collect())
            .unwrap_or_default())
    }
}

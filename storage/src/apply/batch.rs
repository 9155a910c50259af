//! Apply of one log entry: [`apply_entry`] runs a [`Command::Batch`] (group
//! commit) command by command, each over a [`BatchView`] (the base view with
//! the writes, lease changes, attachments and session changes of the
//! batch's earlier commands laid over it), so each applies exactly as if it
//! were its own entry; all of them share the entry's range budget.
//!
//! The view owns the earlier commands' [`Applied`] and reads their key
//! states and session records where they lie, by index: a command's writes
//! are not copied for the ones after it (a batch of puts used to copy each
//! value twice more on every node).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::txn::merge_scan;
use super::{apply_within, Applied, MAX_ENTRY_RANGE_BYTES, MAX_TXN_RANGE_BYTES};
use crate::command::{
    ApplyError, Command, CommandResult, KeyRange, KeyValue, LeaseRecord, Response, Revision,
};
use crate::error::StoreError;
use crate::ids::{LeaseId, NodeId};
use crate::session::{Recorded, SessionState, SessionUpdate};
use crate::view::{MvccRead, Visit};

/// Applies one log entry's command on top of `view`: the entry's response
/// and the [`Applied`] of each command in it, in order, for one write batch.
/// A [`Command::Batch`] runs its commands one after the other, each seeing
/// the ones before it (session changes included, so two copies of one
/// proposal in one entry apply once), exactly as if each were its own entry,
/// except that their ranges share the entry's [`MAX_ENTRY_RANGE_BYTES`].
pub fn apply_entry(
    view: &impl MvccRead,
    cmd: &Command,
) -> Result<(Response, Vec<Applied>), StoreError> {
    apply_entry_within(view, cmd, MAX_ENTRY_RANGE_BYTES)
}

/// [`apply_entry`] with `entry_budget` bytes of range results for the
/// entry's commands together (each still at most [`MAX_TXN_RANGE_BYTES`]).
pub(super) fn apply_entry_within(
    view: &impl MvccRead,
    cmd: &Command,
    mut entry_budget: usize,
) -> Result<(Response, Vec<Applied>), StoreError> {
    let Command::Batch(cmds) = cmd else {
        let mut applied = apply_within(view, cmd, entry_budget.min(MAX_TXN_RANGE_BYTES))?;
        return Ok((take_answer(&mut applied), vec![applied]));
    };
    let mut overlay = BatchView::new(view, cmds.len());
    let mut responses = Vec::with_capacity(cmds.len());
    for cmd in cmds {
        let mut applied = if cmd.is_batchable() {
            let one = apply_within(&overlay, cmd, entry_budget.min(MAX_TXN_RANGE_BYTES))?;
            entry_budget = entry_budget.saturating_sub(one.range_bytes);
            one
        } else {
            Applied {
                response: Response {
                    revision: overlay.current_revision(),
                    result: Err(ApplyError::NotBatchable),
                },
                ..Applied::default()
            }
        };
        responses.push(take_answer(&mut applied));
        overlay.absorb(applied);
    }
    let response = Response {
        revision: overlay.current_revision(),
        result: Ok(CommandResult::Batch(responses)),
    };
    Ok((response, overlay.applied))
}

/// Moves `applied`'s answer out for the entry's response, leaving its
/// revision (all that the staging of its rows and the batch view read
/// after this) and [`CommandResult::None`] in its place: the answer is not
/// copied once more on every node (a put's answer carries its previous
/// key-value, when asked for).
fn take_answer(applied: &mut Applied) -> Response {
    Response {
        revision: applied.response.revision,
        result: std::mem::replace(&mut applied.response.result, Ok(CommandResult::None)),
    }
}

/// The store as the next command of a batch sees it: the base view with
/// the writes, lease changes and attachments of the batch's earlier
/// commands laid over it.
struct BatchView<'v, V> {
    base: &'v V,
    revision: Revision,
    /// The batch's commands applied so far, in order.
    applied: Vec<Applied>,
    /// Every key the batch wrote, and the command of `applied` whose
    /// writes hold its latest state.
    writes: BTreeMap<Bytes, usize>,
    /// Each writing command's revision and place in `applied`, in order,
    /// for reads at a revision inside the batch.
    history: Vec<(Revision, usize)>,
    leases: BTreeMap<LeaseId, Option<LeaseRecord>>,
    attachments: BTreeMap<(LeaseId, Vec<u8>), bool>,
    sessions: BTreeMap<NodeId, SessionOverlay>,
}

/// One origin's session as the batch changed it, over the base's.
#[derive(Debug)]
struct SessionOverlay {
    state: SessionState,
    /// Replaced in this batch: none of the base's records count.
    replaced: bool,
    /// Records made in this batch: the command of the batch whose session
    /// update holds each (those below the floor no longer count).
    recorded: BTreeMap<u64, usize>,
}

impl SessionOverlay {
    /// Lays `update`, made by the batch's command at `index`, over the
    /// session.
    fn absorb(&mut self, update: &SessionUpdate, index: usize) {
        if update.replaced {
            self.replaced = true;
            self.recorded.clear();
        }
        if let Some((seq, _)) = &update.recorded {
            self.recorded.insert(*seq, index);
        }
        self.state = update.state;
    }
}

impl<'v, V: MvccRead> BatchView<'v, V> {
    /// A view over `base` for a batch of `commands` commands.
    fn new(base: &'v V, commands: usize) -> Self {
        Self {
            base,
            revision: base.current_revision(),
            applied: Vec::with_capacity(commands),
            writes: BTreeMap::new(),
            history: Vec::new(),
            leases: BTreeMap::new(),
            attachments: BTreeMap::new(),
            sessions: BTreeMap::new(),
        }
    }

    /// Lays the next command's outcome over the view, and keeps it.
    fn absorb(&mut self, applied: Applied) {
        let index = self.applied.len();
        if !applied.writes.is_empty() {
            self.revision = applied.response.revision;
            self.history.push((self.revision, index));
            for key in applied.writes.keys() {
                match self.writes.get_mut(key) {
                    Some(latest) => *latest = index,
                    None => {
                        self.writes.insert(key.clone(), index);
                    }
                }
            }
        }
        self.leases
            .extend(applied.leases.iter().map(|(k, v)| (*k, *v)));
        self.attachments
            .extend(applied.attachments.iter().map(|(k, v)| (k.clone(), *v)));
        if let Some(update) = &applied.session {
            self.sessions
                .entry(update.origin)
                .or_insert_with(|| SessionOverlay {
                    state: update.state,
                    replaced: false,
                    recorded: BTreeMap::new(),
                })
                .absorb(update, index);
        }
        self.applied.push(applied);
    }

    /// The state command `index` left `key` in (`None`: deleted); the
    /// command wrote `key`.
    fn written(&self, index: usize, key: &[u8]) -> Option<&Option<KeyValue>> {
        self.applied.get(index)?.writes.get(key)
    }
}

impl<V: MvccRead> MvccRead for BatchView<'_, V> {
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        match self.writes.get(key) {
            Some(index) => Ok(self.written(*index, key).cloned().flatten()),
            None => self.base.get(key),
        }
    }

    fn scan(
        &self,
        range: &KeyRange,
        at: Option<Revision>,
        visit: Visit<'_>,
    ) -> Result<Revision, StoreError> {
        let base_revision = self.base.current_revision();
        let upto = at.unwrap_or(self.revision);
        if upto > self.revision {
            return Err(StoreError::FutureRevision {
                requested: upto,
                current: self.revision,
            });
        }
        if self.history.is_empty() || (at.is_some() && upto <= base_revision) {
            return self.base.scan(range, at, visit);
        }
        // The base's current keys with the batch's writes up to `upto` on
        // top (the overlay holds only keys the batch wrote).
        let mut overlay: BTreeMap<&Bytes, &Option<KeyValue>> = BTreeMap::new();
        for (_, index) in self.history.iter().take_while(|(rev, _)| *rev <= upto) {
            for (key, state) in &self.applied[*index].writes {
                if range.contains(key) {
                    overlay.insert(key, state);
                }
            }
        }
        merge_scan(
            |v| self.base.scan(range, None, v),
            overlay.into_iter(),
            visit,
        )?;
        Ok(upto)
    }

    fn current_revision(&self) -> Revision {
        self.revision
    }

    fn compacted_revision(&self) -> Revision {
        self.base.compacted_revision()
    }

    fn lease(&self, id: LeaseId) -> Result<Option<LeaseRecord>, StoreError> {
        match self.leases.get(&id) {
            Some(lease) => Ok(*lease),
            None => self.base.lease(id),
        }
    }

    fn lease_keys(&self, id: LeaseId) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut keys: std::collections::BTreeSet<Vec<u8>> =
            self.base.lease_keys(id)?.into_iter().collect();
        for ((lease, key), attached) in self.attachments.range((id, Vec::new())..) {
            if *lease != id {
                break;
            }
            if *attached {
                keys.insert(key.clone());
            } else {
                keys.remove(key);
            }
        }
        Ok(keys.into_iter().collect())
    }

    fn session(&self, origin: NodeId) -> Result<Option<SessionState>, StoreError> {
        match self.sessions.get(&origin) {
            Some(overlay) => Ok(Some(overlay.state)),
            None => self.base.session(origin),
        }
    }

    fn session_record(&self, origin: NodeId, seq: u64) -> Result<Option<Recorded>, StoreError> {
        let Some(overlay) = self.sessions.get(&origin) else {
            return self.base.session_record(origin, seq);
        };
        if seq < overlay.state.floor {
            return Ok(None);
        }
        if let Some(index) = overlay.recorded.get(&seq) {
            let recorded = self.applied[*index]
                .session
                .as_ref()
                .and_then(|update| update.recorded.as_ref())
                .map(|(_, recorded)| recorded.clone());
            return Ok(recorded);
        }
        if overlay.replaced {
            return Ok(None);
        }
        self.base.session_record(origin, seq)
    }
}

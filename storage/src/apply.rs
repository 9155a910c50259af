//! Pure apply: given a [`Command`] and a read view of the store, decide the
//! response, the key writes and the watch events. No I/O happens here; the
//! state machine turns an [`Applied`] into one atomic write batch.
//!
//! Every check that decides a client's fate (compare guards, duplicate keys,
//! compaction bounds, and whether a tagged proposal is applied at all, see
//! [`crate::session`]) lives here, so every node reaches the same verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use crate::command::{
    ApplyError, Command, CommandResult, Compare, CompareOp, CompareTarget, DeleteRequest,
    DeleteResponse, Event, EventKind, KeyRange, KeyValue, LeaseRecord, Op, OpResponse, ProposalId,
    PutRequest, RangeRequest, RangeResponse, Response, Revision, Txn, TxnResponse,
};
use crate::error::StoreError;
use crate::ids::LeaseId;
use crate::ids::NodeId;
use crate::session::{Recorded, SessionState, SessionUpdate};
use crate::view::{MvccRead, RangeShaper, Visit};

/// At most this many bytes of key-values (see
/// [`kv_bytes`](crate::view::kv_bytes)) the ranges of one command may
/// return from apply. Apply runs on every node and holds
/// a command's response until the entry is written, so an unlimited range
/// inside a Txn would make every node allocate the whole keyspace; past
/// this budget the command is refused with [`ApplyError::ResponseTooLarge`]
/// instead (no write, no revision). Counting keys (`count`, `count_only`)
/// and compares over a range cost no budget: they stream.
///
/// The budget decides a command's verdict, so it is part of the replicated
/// protocol: every node of a cluster must apply with the same value.
pub const MAX_TXN_RANGE_BYTES: usize = 8 << 20;
/// At most this many bytes of range results for all the commands of one
/// log entry together (a [`Command::Batch`] holds up to 256): a command
/// whose ranges would go past what the entry's earlier commands left is
/// refused as over [`MAX_TXN_RANGE_BYTES`]. Half the peer port's message
/// bound, so a forwarded batch's responses always fit in one reply.
pub const MAX_ENTRY_RANGE_BYTES: usize = 64 << 20;
/// Runs `base`'s scan with `overlay` (ascending keys of the scanned range
/// and their states, `None` = deleted) laid over it, into `visit`, in key
/// order. Holds nothing but the overlay's iterator.
fn merge_scan<'o>(
    base: impl FnOnce(Visit<'_>) -> Result<Revision, StoreError>,
    overlay: impl Iterator<Item = (&'o Vec<u8>, &'o Option<KeyValue>)>,
    visit: Visit<'_>,
) -> Result<(), StoreError> {
    let mut pending = overlay.peekable();
    let mut stopped = false;
    base(&mut |kv: KeyValue| {
        while let Some((_, state)) = pending.next_if(|(k, _)| k.as_slice() < kv.key.as_slice()) {
            if let Some(state) = state {
                if visit(state.clone())?.is_break() {
                    stopped = true;
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        let kv = match pending.next_if(|(k, _)| k.as_slice() == kv.key.as_slice()) {
            Some((_, None)) => return Ok(ControlFlow::Continue(())),
            Some((_, Some(state))) => state.clone(),
            None => kv,
        };
        let flow = visit(kv)?;
        stopped = flow.is_break();
        Ok(flow)
    })?;
    if !stopped {
        for state in pending.filter_map(|(_, state)| state.as_ref()) {
            if visit(state.clone())?.is_break() {
                break;
            }
        }
    }
    Ok(())
}

/// The outcome of applying one command.
#[derive(Debug, Default)]
pub struct Applied {
    /// The answer to the command (its revision, and what it did or why it
    /// was refused).
    pub response: Response,
    /// Final state of each written key (`None` = deleted), in key order.
    pub writes: BTreeMap<Vec<u8>, Option<KeyValue>>,
    /// The watch events, in the order the operations ran.
    pub events: Vec<Event>,
    /// Set when the command compacts history to this revision.
    pub compact_to: Option<Revision>,
    /// Final state of each changed lease (`None` = gone).
    pub leases: BTreeMap<LeaseId, Option<LeaseRecord>>,
    /// Lease attachments: `(lease, key)` → attached (`true`) or detached.
    pub attachments: BTreeMap<(LeaseId, Vec<u8>), bool>,
    /// The change a tagged command made to its origin's session.
    pub session: Option<SessionUpdate>,
    /// Bytes of key-values its ranges returned
    /// ([`kv_bytes`](crate::view::kv_bytes)), counted against
    /// [`MAX_TXN_RANGE_BYTES`] and the entry's [`MAX_ENTRY_RANGE_BYTES`].
    pub range_bytes: usize,
}

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
fn apply_entry_within(
    view: &impl MvccRead,
    cmd: &Command,
    mut entry_budget: usize,
) -> Result<(Response, Vec<Applied>), StoreError> {
    let Command::Batch(cmds) = cmd else {
        let applied = apply_within(view, cmd, entry_budget.min(MAX_TXN_RANGE_BYTES))?;
        return Ok((applied.response.clone(), vec![applied]));
    };
    let mut overlay = BatchView::new(view);
    let mut responses = Vec::with_capacity(cmds.len());
    let mut all = Vec::with_capacity(cmds.len());
    for cmd in cmds {
        let applied = if cmd.is_batchable() {
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
        overlay.absorb(&applied);
        responses.push(applied.response.clone());
        all.push(applied);
    }
    let response = Response {
        revision: overlay.current_revision(),
        result: Ok(CommandResult::Batch(responses)),
    };
    Ok((response, all))
}

/// Keys and their state after one command (`None` = deleted).
type KeyStates = Vec<(Vec<u8>, Option<KeyValue>)>;

/// The store as the next command of a batch sees it: the base view with
/// the writes, lease changes and attachments of the batch's earlier
/// commands laid over it.
struct BatchView<'v, V> {
    base: &'v V,
    revision: Revision,
    /// The latest state of every key the batch wrote.
    writes: BTreeMap<Vec<u8>, Option<KeyValue>>,
    /// Each writing command's key states at its revision, in order, for
    /// reads at a revision inside the batch.
    history: Vec<(Revision, KeyStates)>,
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
    /// The base's records evicted in this batch.
    evicted: BTreeSet<u64>,
    /// Records made in this batch (and not evicted since).
    recorded: BTreeMap<u64, Recorded>,
}

impl SessionOverlay {
    fn absorb(&mut self, update: &SessionUpdate) {
        if update.replaced {
            self.replaced = true;
            self.evicted.clear();
            self.recorded.clear();
        }
        for seq in &update.evicted {
            self.recorded.remove(seq);
            self.evicted.insert(*seq);
        }
        if let Some((seq, recorded)) = &update.recorded {
            self.recorded.insert(*seq, recorded.clone());
        }
        self.state = update.state;
    }
}

impl<'v, V: MvccRead> BatchView<'v, V> {
    fn new(base: &'v V) -> Self {
        Self {
            base,
            revision: base.current_revision(),
            writes: BTreeMap::new(),
            history: Vec::new(),
            leases: BTreeMap::new(),
            attachments: BTreeMap::new(),
            sessions: BTreeMap::new(),
        }
    }

    fn absorb(&mut self, applied: &Applied) {
        if !applied.writes.is_empty() {
            self.revision = applied.response.revision;
            self.history.push((
                self.revision,
                applied
                    .writes
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ));
            self.writes
                .extend(applied.writes.iter().map(|(k, v)| (k.clone(), v.clone())));
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
                    evicted: BTreeSet::new(),
                    recorded: BTreeMap::new(),
                })
                .absorb(update);
        }
    }
}

impl<V: MvccRead> MvccRead for BatchView<'_, V> {
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        match self.writes.get(key) {
            Some(state) => Ok(state.clone()),
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
        let mut overlay: BTreeMap<&Vec<u8>, &Option<KeyValue>> = BTreeMap::new();
        for (_, writes) in self.history.iter().take_while(|(rev, _)| *rev <= upto) {
            for (key, state) in writes {
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
        if let Some(recorded) = overlay.recorded.get(&seq) {
            return Ok(Some(recorded.clone()));
        }
        if overlay.replaced || overlay.evicted.contains(&seq) {
            return Ok(None);
        }
        self.base.session_record(origin, seq)
    }

    fn session_seqs_below(&self, origin: NodeId, below: u64) -> Result<Vec<u64>, StoreError> {
        let Some(overlay) = self.sessions.get(&origin) else {
            return self.base.session_seqs_below(origin, below);
        };
        let mut seqs: BTreeSet<u64> = if overlay.replaced {
            BTreeSet::new()
        } else {
            self.base
                .session_seqs_below(origin, below)?
                .into_iter()
                .filter(|seq| !overlay.evicted.contains(seq))
                .collect()
        };
        seqs.extend(overlay.recorded.range(..below).map(|(seq, _)| *seq));
        Ok(seqs.into_iter().collect())
    }
}

/// Applies `cmd` on top of `view`. A deterministic refusal is an `Ok` with an
/// error response and no writes; only a storage failure is an `Err`. Its
/// ranges may return up to [`MAX_TXN_RANGE_BYTES`].
pub fn apply(view: &impl MvccRead, cmd: &Command) -> Result<Applied, StoreError> {
    apply_within(view, cmd, MAX_TXN_RANGE_BYTES)
}

/// [`apply`], with at most `range_budget` bytes of range results.
fn apply_within(
    view: &impl MvccRead,
    cmd: &Command,
    range_budget: usize,
) -> Result<Applied, StoreError> {
    let current = view.current_revision();
    match cmd {
        // Only a log entry may be a batch (see `apply_entry`).
        Command::Batch(_) => Ok(refused(current, ApplyError::NotBatchable)),
        Command::Tagged { id, floor, cmd } => apply_tagged(view, *id, *floor, cmd, range_budget),
        Command::Compact { revision } => {
            let mut applied = Applied {
                response: Response {
                    revision: current,
                    result: Ok(CommandResult::Compacted),
                },
                ..Applied::default()
            };
            if *revision > current {
                applied.response.result = Err(ApplyError::FutureRevision);
            } else if *revision <= view.compacted_revision() {
                applied.response.result = Err(ApplyError::Compacted);
            } else {
                applied.compact_to = Some(*revision);
            }
            Ok(applied)
        }
        Command::LeaseGrant { id, ttl } => {
            let result = if view.lease(*id)?.is_some() {
                Err(ApplyError::LeaseExists)
            } else {
                Ok(LeaseRecord {
                    id: *id,
                    ttl: *ttl,
                    renewals: 0,
                })
            };
            Ok(lease_change(current, result))
        }
        Command::LeaseKeepAlive { id } => {
            let result = match view.lease(*id)? {
                Some(mut lease) => {
                    lease.renewals += 1;
                    Ok(lease)
                }
                None => Err(ApplyError::LeaseNotFound),
            };
            Ok(lease_change(current, result))
        }
        Command::LeaseRevoke { id } => {
            if view.lease(*id)?.is_none() {
                return Ok(refused(current, ApplyError::LeaseNotFound));
            }
            revoke(view, current, *id)
        }
        Command::LeaseExpire { id, renewals } => match view.lease(*id)? {
            None => Ok(refused(current, ApplyError::LeaseNotFound)),
            Some(lease) if lease.renewals != *renewals => {
                Ok(refused(current, ApplyError::LeaseRenewed))
            }
            Some(_) => revoke(view, current, *id),
        },
        Command::Txn(txn) => {
            let mut run = TxnRun::new(view, current, range_budget);
            match run.txn(txn) {
                Ok(resp) => {
                    let revision = if run.writes.is_empty() {
                        current
                    } else {
                        run.revision
                    };
                    Ok(Applied {
                        response: Response {
                            revision,
                            result: Ok(CommandResult::Txn(resp)),
                        },
                        writes: run.writes,
                        events: run.events,
                        compact_to: None,
                        leases: BTreeMap::new(),
                        attachments: run.attachments,
                        session: None,
                        range_bytes: range_budget - run.budget,
                    })
                }
                Err(TxnError::Refused(e)) => Ok(refused(current, e)),
                Err(TxnError::Store(e)) => Err(e),
            }
        }
    }
}

/// A deterministic refusal: no change, no new revision.
/// Deletes lease `id` (known to exist) and every key attached to it, in
/// one revision (none if it held no key).
fn revoke(view: &impl MvccRead, current: Revision, id: LeaseId) -> Result<Applied, StoreError> {
    let mut run = TxnRun::new(view, current, 0);
    let mut deleted = 0;
    for key in view.lease_keys(id)? {
        match run.delete(&DeleteRequest {
            range: KeyRange::single(key),
            prev_kv: false,
        }) {
            Ok(d) => deleted += d.deleted,
            Err(TxnError::Store(e)) => return Err(e),
            Err(TxnError::Refused(e)) => {
                return Err(StoreError::Corrupt(format!(
                    "deleting a leased key was refused: {e}"
                )))
            }
        }
    }
    let revision = if run.writes.is_empty() {
        current
    } else {
        run.revision
    };
    let mut leases = BTreeMap::new();
    leases.insert(id, None);
    Ok(Applied {
        response: Response {
            revision,
            result: Ok(CommandResult::LeaseRevoked { deleted }),
        },
        writes: run.writes,
        events: run.events,
        compact_to: None,
        leases,
        attachments: run.attachments,
        session: None,
        range_bytes: 0,
    })
}

fn refused(current: Revision, error: ApplyError) -> Applied {
    Applied {
        response: Response {
            revision: current,
            result: Err(error),
        },
        ..Applied::default()
    }
}

/// Applies the tagged proposal `id` at most once: the session rules of
/// [`crate::session`], in their order. The [`Applied`] of a copy that is
/// not applied carries no data change, only its session change, if any.
fn apply_tagged(
    view: &impl MvccRead,
    id: ProposalId,
    floor: u64,
    cmd: &Command,
    range_budget: usize,
) -> Result<Applied, StoreError> {
    let current = view.current_revision();
    if matches!(cmd, Command::Batch(_) | Command::Tagged { .. }) {
        return Ok(refused(current, ApplyError::MalformedProposal));
    }
    let known = view.session(id.origin)?;
    let mut update = SessionUpdate {
        origin: id.origin,
        state: SessionState {
            epoch: id.epoch,
            floor: 0,
        },
        replaced: false,
        evicted: Vec::new(),
        recorded: None,
    };
    match known {
        // Rule 1: from a process of the origin that no longer runs.
        Some(session) if id.epoch < session.epoch => {
            tracing::debug!(proposal = %id, session_epoch = session.epoch, "stale proposal: epoch");
            return Ok(refused(current, ApplyError::StaleProposal));
        }
        // Rule 2: a new process of the origin replaces the session.
        Some(session) if id.epoch > session.epoch => update.replaced = true,
        Some(session) => update.state = session,
        None => {}
    }
    // Rule 3: the origin has finished with everything below its floor.
    if floor > update.state.floor {
        update.state.floor = floor;
        if !update.replaced {
            update.evicted = view.session_seqs_below(id.origin, floor)?;
        }
    }
    let changed = update.replaced || known != Some(update.state);
    // Rule 4: a late copy of a proposal its origin gave up on.
    if id.seq < update.state.floor {
        tracing::debug!(proposal = %id, floor = update.state.floor, "stale proposal: below the floor");
        let mut applied = refused(current, ApplyError::StaleProposal);
        applied.session = changed.then_some(update);
        return Ok(applied);
    }
    // Rule 5: a copy of a proposal applied already.
    let recorded = if update.replaced {
        None
    } else {
        view.session_record(id.origin, id.seq)?
    };
    if let Some(recorded) = recorded {
        tracing::debug!(proposal = %id, "duplicate proposal: answered with the recorded response");
        let response = match recorded {
            Recorded::Response(response) => response,
            Recorded::Dropped => Response {
                revision: current,
                result: Err(ApplyError::DuplicateResponseDropped),
            },
        };
        return Ok(Applied {
            response,
            session: changed.then_some(update),
            ..Applied::default()
        });
    }
    // Rule 6: the first copy: apply it and record its answer.
    let mut applied = apply_within(view, cmd, range_budget)?;
    update.recorded = Some((id.seq, Recorded::of(&applied.response)?));
    applied.session = Some(update);
    Ok(applied)
}

/// A grant or keep-alive: the lease's new record, no new revision.
fn lease_change(current: Revision, result: Result<LeaseRecord, ApplyError>) -> Applied {
    let mut leases = BTreeMap::new();
    if let Ok(lease) = &result {
        leases.insert(lease.id, Some(*lease));
    }
    Applied {
        response: Response {
            revision: current,
            result: result.map(CommandResult::Lease),
        },
        leases,
        ..Applied::default()
    }
}

enum TxnError {
    Refused(ApplyError),
    Store(StoreError),
}

impl From<StoreError> for TxnError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Compacted { .. } => TxnError::Refused(ApplyError::Compacted),
            StoreError::FutureRevision { .. } => TxnError::Refused(ApplyError::FutureRevision),
            other => TxnError::Store(other),
        }
    }
}

/// One transaction in progress: its pending writes overlay the view.
struct TxnRun<'v, V> {
    view: &'v V,
    revision: Revision,
    writes: BTreeMap<Vec<u8>, Option<KeyValue>>,
    events: Vec<Event>,
    attachments: BTreeMap<(LeaseId, Vec<u8>), bool>,
    /// Bytes of range results it may still return.
    budget: usize,
}

impl<'v, V: MvccRead> TxnRun<'v, V> {
    fn new(view: &'v V, current: Revision, budget: usize) -> Self {
        Self {
            view,
            revision: current.next(),
            writes: BTreeMap::new(),
            events: Vec::new(),
            attachments: BTreeMap::new(),
            budget,
        }
    }

    /// Moves `key` from lease `from` to lease `to` (0 = none).
    fn reattach(&mut self, key: &[u8], from: LeaseId, to: LeaseId) {
        if from == to {
            return;
        }
        if !from.is_none() {
            self.attachments.insert((from, key.to_vec()), false);
        }
        if !to.is_none() {
            self.attachments.insert((to, key.to_vec()), true);
        }
    }

    fn txn(&mut self, txn: &Txn) -> Result<TxnResponse, TxnError> {
        let mut succeeded = true;
        for cmp in &txn.compare {
            if !self.compare(cmp)? {
                succeeded = false;
                break;
            }
        }
        let ops = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        check_duplicate_puts(ops)?;
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            responses.push(match op {
                Op::Range(req) => OpResponse::Range(self.range(req)?),
                Op::Put(req) => self.put(req)?,
                Op::Delete(req) => OpResponse::Delete(self.delete(req)?),
                Op::Txn(inner) => OpResponse::Txn(self.txn(inner)?),
            });
        }
        Ok(TxnResponse {
            succeeded,
            responses,
        })
    }

    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        match self.writes.get(key) {
            Some(pending) => Ok(pending.clone()),
            None => self.view.get(key),
        }
    }

    /// Visits the current keys in `range`, with this transaction's writes
    /// applied, in key order.
    fn scan_live(&self, range: &KeyRange, visit: Visit<'_>) -> Result<(), StoreError> {
        merge_scan(
            |v| self.view.scan(range, None, v),
            self.writes.iter().filter(|(k, _)| range.contains(k)),
            visit,
        )
    }

    /// Every key of `range` must pass; an empty range compares as one
    /// absent key, as in etcd. Streams: nothing of the range is held.
    fn compare(&self, cmp: &Compare) -> Result<bool, TxnError> {
        if cmp.range.is_single() {
            return Ok(compare_one(self.get(&cmp.range.key)?.as_ref(), cmp));
        }
        let (mut any, mut all) = (false, true);
        self.scan_live(&cmp.range, &mut |kv| {
            any = true;
            if compare_one(Some(&kv), cmp) {
                Ok(ControlFlow::Continue(()))
            } else {
                all = false;
                Ok(ControlFlow::Break(()))
            }
        })?;
        Ok(if any { all } else { compare_one(None, cmp) })
    }

    /// A range op: holds at most `limit` key-values and, of them, at most
    /// the command's remaining range budget (else `ResponseTooLarge`).
    fn range(&mut self, req: &RangeRequest) -> Result<RangeResponse, TxnError> {
        let mut shaper = RangeShaper::new(req, self.budget);
        let touches_pending = self.writes.keys().any(|k| req.range.contains(k));
        let revision = if req.revision.is_some() || !touches_pending {
            let at = self
                .view
                .scan(&req.range, req.revision, &mut |kv| Ok(shaper.push(kv)))?;
            if req.revision.is_none() {
                self.visible_revision()
            } else {
                at
            }
        } else {
            self.scan_live(&req.range, &mut |kv| Ok(shaper.push(kv)))?;
            self.visible_revision()
        };
        if shaper.over_budget() {
            return Err(TxnError::Refused(ApplyError::ResponseTooLarge));
        }
        self.budget -= shaper.bytes();
        Ok(shaper.finish(revision))
    }

    fn visible_revision(&self) -> Revision {
        if self.writes.is_empty() {
            self.view.current_revision()
        } else {
            self.revision
        }
    }

    fn put(&mut self, req: &PutRequest) -> Result<OpResponse, TxnError> {
        let prev = self.get(&req.key)?;
        if (req.ignore_value || req.ignore_lease) && prev.is_none() {
            return Err(TxnError::Refused(ApplyError::KeyNotFound));
        }
        let value = match (&prev, req.ignore_value) {
            (Some(prev), true) => prev.value.clone(),
            _ => req.value.clone(),
        };
        let lease = match (&prev, req.ignore_lease) {
            (Some(prev), true) => prev.lease,
            _ => req.lease,
        };
        if !lease.is_none() && self.view.lease(lease)?.is_none() {
            return Err(TxnError::Refused(ApplyError::LeaseNotFound));
        }
        self.reattach(
            &req.key,
            prev.as_ref().map_or(LeaseId::NONE, |p| p.lease),
            lease,
        );
        let kv = KeyValue {
            key: req.key.clone(),
            create_revision: prev.as_ref().map_or(self.revision, |p| p.create_revision),
            mod_revision: self.revision,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            value,
            lease,
        };
        self.writes.insert(req.key.clone(), Some(kv.clone()));
        self.events.push(Event {
            kind: EventKind::Put,
            kv,
            prev_kv: prev.clone(),
        });
        Ok(OpResponse::Put {
            prev_kv: if req.prev_kv { prev } else { None },
        })
    }

    fn delete(&mut self, req: &DeleteRequest) -> Result<DeleteResponse, TxnError> {
        // A write: every victim gets a history row and an event anyway.
        let victims = if req.range.is_single() {
            self.get(&req.range.key)?.into_iter().collect()
        } else {
            let mut victims = Vec::new();
            self.scan_live(&req.range, &mut |kv| {
                victims.push(kv);
                Ok(ControlFlow::Continue(()))
            })?;
            victims
        };
        let deleted = victims.len() as u64;
        for prev in &victims {
            self.reattach(&prev.key, prev.lease, LeaseId::NONE);
            self.writes.insert(prev.key.clone(), None);
            self.events.push(Event {
                kind: EventKind::Delete,
                kv: KeyValue::deleted(prev.key.clone(), self.revision),
                prev_kv: Some(prev.clone()),
            });
        }
        Ok(DeleteResponse {
            deleted,
            prev_kvs: if req.prev_kv { victims } else { Vec::new() },
        })
    }
}

/// etcd refuses a transaction branch that writes the same key twice.
fn check_duplicate_puts(ops: &[Op]) -> Result<(), TxnError> {
    fn collect<'a>(ops: &'a [Op], seen: &mut Vec<&'a [u8]>) -> Result<(), TxnError> {
        for op in ops {
            match op {
                Op::Put(p) => {
                    if seen.contains(&p.key.as_slice()) {
                        return Err(TxnError::Refused(ApplyError::DuplicateKey));
                    }
                    seen.push(&p.key);
                }
                Op::Txn(t) => {
                    // Only one branch of a nested txn runs; either may clash.
                    let mut a = seen.clone();
                    collect(&t.success, &mut a)?;
                    let mut b = seen.clone();
                    collect(&t.failure, &mut b)?;
                }
                Op::Range(_) | Op::Delete(_) => {}
            }
        }
        Ok(())
    }
    collect(ops, &mut Vec::new())
}

fn compare_one(kv: Option<&KeyValue>, cmp: &Compare) -> bool {
    use std::cmp::Ordering;
    let ord: Ordering = match &cmp.target {
        CompareTarget::Version(v) => kv.map_or(0, |kv| kv.version).cmp(v),
        CompareTarget::Create(r) => kv.map_or(Revision::ZERO, |kv| kv.create_revision).cmp(r),
        CompareTarget::Mod(r) => kv.map_or(Revision::ZERO, |kv| kv.mod_revision).cmp(r),
        CompareTarget::Lease(l) => kv.map_or(LeaseId::NONE, |kv| kv.lease).cmp(l),
        CompareTarget::Value(v) => match kv {
            Some(kv) => kv.value.as_slice().cmp(v.as_slice()),
            // etcd: a value compare against a missing key is false.
            None => return false,
        },
    };
    match cmp.op {
        CompareOp::Equal => ord == Ordering::Equal,
        CompareOp::NotEqual => ord != Ordering::Equal,
        CompareOp::Greater => ord == Ordering::Greater,
        CompareOp::Less => ord == Ordering::Less,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{KeyRange, PutRequest};

    /// An in-memory view: the current state only, enough to test apply.
    #[derive(Default)]
    struct MemView {
        kvs: BTreeMap<Vec<u8>, KeyValue>,
        revision: Revision,
        sessions: BTreeMap<NodeId, SessionState>,
        records: BTreeMap<(NodeId, u64), Recorded>,
        leases: BTreeMap<LeaseId, LeaseRecord>,
    }

    impl MemView {
        fn commit(&mut self, applied: &Applied) {
            for (k, v) in &applied.writes {
                match v {
                    Some(kv) => self.kvs.insert(k.clone(), kv.clone()),
                    None => self.kvs.remove(k),
                };
            }
            if !applied.writes.is_empty() {
                self.revision = applied.response.revision;
            }
            for (id, lease) in &applied.leases {
                match lease {
                    Some(l) => self.leases.insert(*id, *l),
                    None => self.leases.remove(id),
                };
            }
            if let Some(update) = &applied.session {
                let origin = update.origin;
                if update.replaced {
                    self.records.retain(|(o, _), _| *o != origin);
                }
                for seq in &update.evicted {
                    self.records.remove(&(origin, *seq));
                }
                if let Some((seq, recorded)) = &update.recorded {
                    self.records.insert((origin, *seq), recorded.clone());
                }
                self.sessions.insert(origin, update.state);
            }
        }

        fn run(&mut self, cmd: Command) -> Applied {
            let applied = apply(self, &cmd).expect("memory view never fails");
            self.commit(&applied);
            applied
        }

        /// Applies `cmd` as one log entry (a batch command by command).
        fn run_entry(&mut self, cmd: Command) -> Response {
            let (response, applied) = apply_entry(self, &cmd).expect("memory view never fails");
            for one in &applied {
                self.commit(one);
            }
            response
        }

        /// The seqs `origin`'s session holds a record of.
        fn recorded_seqs(&self, origin: NodeId) -> Vec<u64> {
            self.records
                .keys()
                .filter(|(o, _)| *o == origin)
                .map(|(_, seq)| *seq)
                .collect()
        }
    }

    impl MvccRead for MemView {
        fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
            Ok(self.kvs.get(key).cloned())
        }
        fn scan(
            &self,
            range: &KeyRange,
            _at: Option<Revision>,
            visit: Visit<'_>,
        ) -> Result<Revision, StoreError> {
            for kv in self.kvs.values().filter(|kv| range.contains(&kv.key)) {
                if visit(kv.clone())?.is_break() {
                    break;
                }
            }
            Ok(self.revision)
        }
        fn current_revision(&self) -> Revision {
            self.revision
        }
        fn compacted_revision(&self) -> Revision {
            Revision::ZERO
        }
        fn lease(&self, id: LeaseId) -> Result<Option<LeaseRecord>, StoreError> {
            Ok(self.leases.get(&id).copied())
        }
        fn lease_keys(&self, _id: LeaseId) -> Result<Vec<Vec<u8>>, StoreError> {
            Ok(Vec::new())
        }
        fn session(&self, origin: NodeId) -> Result<Option<SessionState>, StoreError> {
            Ok(self.sessions.get(&origin).copied())
        }
        fn session_record(&self, origin: NodeId, seq: u64) -> Result<Option<Recorded>, StoreError> {
            Ok(self.records.get(&(origin, seq)).cloned())
        }
        fn session_seqs_below(&self, origin: NodeId, below: u64) -> Result<Vec<u64>, StoreError> {
            Ok(self
                .recorded_seqs(origin)
                .into_iter()
                .filter(|seq| *seq < below)
                .collect())
        }
    }

    fn put(key: &str, value: &str) -> Command {
        Command::Txn(Txn {
            success: vec![Op::Put(PutRequest::new(key, value))],
            ..Txn::default()
        })
    }

    fn create(key: &str, value: &str) -> Command {
        Command::Txn(Txn {
            compare: vec![Compare::mod_revision(key, CompareOp::Equal, 0)],
            success: vec![Op::Put(PutRequest::new(key, value))],
            failure: vec![Op::Range(RangeRequest {
                range: KeyRange::single(key),
                ..RangeRequest::default()
            })],
        })
    }

    fn txn_result(applied: &Applied) -> &TxnResponse {
        match &applied.response.result {
            Ok(CommandResult::Txn(t)) => t,
            other => panic!("expected a txn response, got {other:?}"),
        }
    }

    #[test]
    fn every_write_gets_the_next_revision_and_reads_do_not() {
        let mut view = MemView::default();
        assert_eq!(view.run(put("a", "1")).response.revision, Revision(1));
        assert_eq!(view.run(put("b", "1")).response.revision, Revision(2));
        let read = view.run(Command::Txn(Txn {
            success: vec![Op::Range(RangeRequest {
                range: KeyRange::prefix(""),
                ..RangeRequest::default()
            })],
            ..Txn::default()
        }));
        assert_eq!(read.response.revision, Revision(2));
        assert!(read.events.is_empty());
        let updated = view.run(put("a", "2"));
        assert_eq!(updated.response.revision, Revision(3));
        let kv = view.kvs.get(b"a".as_slice()).expect("a exists");
        assert_eq!(
            (kv.create_revision, kv.mod_revision, kv.version),
            (Revision(1), Revision(3), 2)
        );
    }

    #[test]
    fn create_precondition_is_decided_inside_apply() {
        let mut view = MemView::default();
        let first = view.run(create("k", "v1"));
        assert!(txn_result(&first).succeeded);
        let second = view.run(create("k", "v2"));
        let resp = txn_result(&second);
        assert!(!resp.succeeded, "a second create must fail its guard");
        assert!(second.writes.is_empty());
        assert_eq!(second.response.revision, Revision(1));
        match &resp.responses[0] {
            OpResponse::Range(r) => assert_eq!(r.kvs[0].value, b"v1"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn one_txn_is_one_revision_and_sees_its_own_writes() {
        let mut view = MemView::default();
        view.run(put("p/1", "x"));
        let applied = view.run(Command::Txn(Txn {
            success: vec![
                Op::Put(PutRequest::new("p/2", "y")),
                Op::Delete(DeleteRequest {
                    range: KeyRange::single("p/1"),
                    prev_kv: true,
                }),
                Op::Range(RangeRequest {
                    range: KeyRange::prefix("p/"),
                    ..RangeRequest::default()
                }),
            ],
            ..Txn::default()
        }));
        assert_eq!(applied.response.revision, Revision(2));
        assert_eq!(applied.events.len(), 2);
        assert!(applied
            .events
            .iter()
            .all(|e| e.kv.mod_revision == Revision(2)));
        let resp = txn_result(&applied);
        match &resp.responses[2] {
            OpResponse::Range(r) => {
                let keys: Vec<_> = r.kvs.iter().map(|kv| kv.key.clone()).collect();
                assert_eq!(keys, vec![b"p/2".to_vec()]);
            }
            other => panic!("unexpected {other:?}"),
        }
        match &resp.responses[1] {
            OpResponse::Delete(d) => assert_eq!(d.prev_kvs[0].value, b"x"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn duplicate_puts_and_bad_compactions_are_refused() {
        let mut view = MemView::default();
        let dup = view.run(Command::Txn(Txn {
            success: vec![
                Op::Put(PutRequest::new("a", "1")),
                Op::Put(PutRequest::new("a", "2")),
            ],
            ..Txn::default()
        }));
        assert_eq!(dup.response.result, Err(ApplyError::DuplicateKey));
        assert!(dup.writes.is_empty());
        let future = view.run(Command::Compact {
            revision: Revision(5),
        });
        assert_eq!(future.response.result, Err(ApplyError::FutureRevision));
    }

    #[test]
    fn a_compare_over_an_empty_range_compares_one_absent_key() {
        let mut view = MemView::default();
        let guarded = |op: CompareOp, rev: u64| {
            Command::Txn(Txn {
                compare: vec![Compare {
                    range: KeyRange::prefix("empty/"),
                    op,
                    target: CompareTarget::Mod(Revision(rev)),
                }],
                success: vec![Op::Put(PutRequest::new("x", "1"))],
                failure: vec![],
            })
        };
        assert!(!txn_result(&view.run(guarded(CompareOp::Equal, 5))).succeeded);
        assert!(txn_result(&view.run(guarded(CompareOp::Equal, 0))).succeeded);
    }

    #[test]
    fn delete_of_a_missing_key_does_not_advance_the_revision() {
        let mut view = MemView::default();
        view.run(put("a", "1"));
        let applied = view.run(Command::Txn(Txn {
            success: vec![Op::Delete(DeleteRequest {
                range: KeyRange::single("zzz"),
                prev_kv: false,
            })],
            ..Txn::default()
        }));
        assert_eq!(applied.response.revision, Revision(1));
    }

    /// `cmd` as proposal `(origin, epoch, seq)` with `floor`.
    fn tagged(origin: NodeId, epoch: u64, seq: u64, floor: u64, cmd: Command) -> Command {
        Command::Tagged {
            id: ProposalId { origin, epoch, seq },
            floor,
            cmd: Box::new(cmd),
        }
    }

    fn batch_responses(response: &Response) -> &[Response] {
        match &response.result {
            Ok(CommandResult::Batch(responses)) => responses,
            other => panic!("expected a batch response, got {other:?}"),
        }
    }

    fn value_of(view: &MemView, key: &str) -> Option<(String, i64)> {
        view.kvs
            .get(key.as_bytes())
            .map(|kv| (String::from_utf8_lossy(&kv.value).into_owned(), kv.version))
    }

    #[test]
    fn two_copies_of_a_proposal_in_one_batch_apply_once() {
        let mut view = MemView::default();
        let once = tagged(1, 1, 1, 1, put("a", "1"));
        let response = view.run_entry(Command::Batch(vec![
            once.clone(),
            put("b", "1"),
            once.clone(),
        ]));
        let answers = batch_responses(&response);
        assert_eq!(answers[0].revision, Revision(1));
        assert_eq!(answers[1].revision, Revision(2));
        assert_eq!(
            answers[2], answers[0],
            "the copy gets the first one's answer, revision included"
        );
        assert_eq!(value_of(&view, "a"), Some(("1".into(), 1)));
        assert_eq!(view.revision, Revision(2), "the copy took no revision");
    }

    #[test]
    fn a_copy_in_a_later_entry_gets_the_first_answer_and_takes_no_revision() {
        let mut view = MemView::default();
        let inc = tagged(1, 1, 1, 1, put("a", "1"));
        let first = view.run(inc.clone());
        assert_eq!(first.response.revision, Revision(1));
        view.run(put("b", "x")); // 2
        let copy = view.run(inc);
        assert_eq!(copy.response, first.response);
        assert!(copy.writes.is_empty() && copy.events.is_empty());
        assert_eq!(copy.session, None, "nothing to change in the session");
        assert_eq!(view.revision, Revision(2));
        assert_eq!(value_of(&view, "a"), Some(("1".into(), 1)));
        // Without the tag the same write would have applied twice.
        view.run(put("a", "1"));
        assert_eq!(value_of(&view, "a"), Some(("1".into(), 2)));
    }

    #[test]
    fn a_proposal_of_an_earlier_process_is_refused_and_changes_nothing() {
        let mut view = MemView::default();
        view.run(tagged(1, 5, 1, 1, put("a", "1")));
        let stale = view.run(tagged(1, 4, 9, 1, put("a", "2")));
        assert_eq!(stale.response.result, Err(ApplyError::StaleProposal));
        assert_eq!(stale.response.revision, Revision(1));
        assert!(stale.writes.is_empty());
        assert_eq!(stale.session, None);
        assert_eq!(view.sessions[&1], SessionState { epoch: 5, floor: 1 });
        assert_eq!(value_of(&view, "a"), Some(("1".into(), 1)));
    }

    #[test]
    fn a_copy_below_the_floor_is_refused() {
        let mut view = MemView::default();
        view.run(tagged(1, 1, 1, 1, put("a", "1"))); // 1
        view.run(tagged(1, 1, 2, 1, put("b", "1"))); // 2
        assert_eq!(view.recorded_seqs(1), vec![1, 2]);
        // Seqs 1 and 2 finished at the origin: seq 3 carries floor 3.
        let third = view.run(tagged(1, 1, 3, 3, put("c", "1")));
        assert_eq!(third.response.revision, Revision(3));
        assert_eq!(view.recorded_seqs(1), vec![3], "1 and 2 evicted");
        for (seq, floor) in [(2, 1), (1, 1), (2, 2)] {
            let late = view.run(tagged(1, 1, seq, floor, put("b", "again")));
            assert_eq!(late.response.result, Err(ApplyError::StaleProposal));
            assert!(late.writes.is_empty());
        }
        assert_eq!(value_of(&view, "b"), Some(("1".into(), 1)));
        assert_eq!(view.revision, Revision(3));
        // A copy sent with a floor above its own seq (its origin finished
        // it) is refused too, and moves the floor.
        let gave_up = view.run(tagged(1, 1, 4, 5, put("d", "1")));
        assert_eq!(gave_up.response.result, Err(ApplyError::StaleProposal));
        assert_eq!(view.sessions[&1].floor, 5);
        assert!(view.recorded_seqs(1).is_empty());
    }

    #[test]
    fn a_new_epoch_replaces_the_session() {
        let mut view = MemView::default();
        view.run(tagged(1, 1, 7, 7, put("a", "1")));
        view.run(tagged(2, 1, 1, 1, put("other", "1")));
        let restarted = view.run(tagged(1, 2, 1, 1, put("a", "2")));
        assert_eq!(restarted.response.revision, Revision(3));
        let update = restarted.session.expect("a session change");
        assert!(update.replaced);
        assert_eq!(view.sessions[&1], SessionState { epoch: 2, floor: 1 });
        assert_eq!(
            view.recorded_seqs(1),
            vec![1],
            "the old process's records are gone"
        );
        assert_eq!(view.recorded_seqs(2), vec![1], "other origins keep theirs");
        // The old process's copies are refused, the new one's deduplicated.
        let old = view.run(tagged(1, 1, 7, 7, put("a", "1")));
        assert_eq!(old.response.result, Err(ApplyError::StaleProposal));
        let copy = view.run(tagged(1, 2, 1, 1, put("a", "2")));
        assert_eq!(copy.response, restarted.response);
        assert_eq!(value_of(&view, "a"), Some(("2".into(), 2)));
    }

    #[test]
    fn the_table_holds_only_what_is_in_flight() {
        let mut view = MemView::default();
        // One write at a time: each is the only one in flight.
        for seq in 1..=100 {
            view.run(tagged(1, 1, seq, seq, put("k", &seq.to_string())));
            assert_eq!(view.recorded_seqs(1), vec![seq]);
        }
        // Ten at a time, each batch with the floor of its first.
        for first in (101..=200).step_by(10) {
            let cmds = (first..first + 10)
                .map(|seq| tagged(1, 1, seq, first, put("k", &seq.to_string())))
                .collect();
            view.run_entry(Command::Batch(cmds));
            assert_eq!(
                view.recorded_seqs(1),
                (first..first + 10).collect::<Vec<_>>()
            );
        }
        assert_eq!(view.revision, Revision(200));
    }

    #[test]
    fn a_record_made_and_evicted_in_one_batch_is_gone_and_its_copy_refused() {
        let mut view = MemView::default();
        let response = view.run_entry(Command::Batch(vec![
            tagged(1, 1, 1, 1, put("a", "1")),
            tagged(1, 1, 2, 2, put("b", "1")),
            tagged(1, 1, 1, 1, put("a", "1")),
        ]));
        let answers = batch_responses(&response);
        assert_eq!(answers[2].result, Err(ApplyError::StaleProposal));
        assert_eq!(view.recorded_seqs(1), vec![2]);
        assert_eq!(value_of(&view, "a"), Some(("1".into(), 1)));
        // A replacement in a batch hides the old process's records.
        let response = view.run_entry(Command::Batch(vec![
            tagged(1, 2, 1, 1, put("c", "1")),
            tagged(1, 1, 2, 2, put("b", "1")),
            tagged(1, 2, 1, 1, put("c", "1")),
        ]));
        let answers = batch_responses(&response);
        assert_eq!(answers[1].result, Err(ApplyError::StaleProposal));
        assert_eq!(answers[2], answers[0]);
        assert_eq!(view.recorded_seqs(1), vec![1]);
        assert_eq!(view.revision, Revision(3));
    }

    #[test]
    fn a_response_too_large_to_keep_answers_its_copies_with_an_error() {
        let mut view = MemView::default();
        let big = "x".repeat(MAX_RECORDED_BYTES_PLUS_ONE);
        view.run(put("big", &big));
        let read = Command::Txn(Txn {
            success: vec![
                Op::Put(PutRequest::new("small", "1")),
                Op::Range(RangeRequest {
                    range: KeyRange::single("big"),
                    ..RangeRequest::default()
                }),
            ],
            ..Txn::default()
        });
        let first = view.run(tagged(1, 1, 1, 1, read.clone()));
        assert!(first.response.result.is_ok());
        let update = first.session.expect("recorded");
        assert_eq!(update.recorded, Some((1, Recorded::Dropped)));
        let copy = view.run(tagged(1, 1, 1, 1, read));
        assert_eq!(
            copy.response.result,
            Err(ApplyError::DuplicateResponseDropped)
        );
        assert!(copy.writes.is_empty());
        assert_eq!(value_of(&view, "small"), Some(("1".into(), 1)));
    }

    const MAX_RECORDED_BYTES_PLUS_ONE: usize =
        crate::session::MAX_RECORDED_RESPONSE_BYTES as usize + 1;

    #[test]
    fn a_tagged_batch_or_tagged_tag_is_refused_untouched() {
        let mut view = MemView::default();
        for inner in [
            Command::Batch(vec![put("a", "1")]),
            tagged(1, 1, 1, 1, put("a", "1")),
        ] {
            let applied = view.run(tagged(1, 1, 1, 1, inner));
            assert_eq!(applied.response.result, Err(ApplyError::MalformedProposal));
            assert!(applied.writes.is_empty());
            assert_eq!(applied.session, None);
        }
        assert!(view.sessions.is_empty());
    }

    #[test]
    fn a_tagged_compaction_goes_alone_and_applies_once() {
        let mut view = MemView::default();
        view.run(put("a", "1"));
        view.run(put("a", "2"));
        let compact = tagged(
            1,
            1,
            1,
            1,
            Command::Compact {
                revision: Revision(2),
            },
        );
        let response = view.run_entry(Command::Batch(vec![compact.clone()]));
        assert_eq!(
            batch_responses(&response)[0].result,
            Err(ApplyError::NotBatchable)
        );
        assert!(
            view.sessions.is_empty(),
            "a refused member changes no session"
        );
        let first = view.run(compact.clone());
        assert_eq!(first.compact_to, Some(Revision(2)));
        let copy = view.run(compact);
        assert_eq!(copy.compact_to, None);
        assert_eq!(copy.response, first.response);
    }

    #[test]
    fn an_expiry_decided_before_a_renewal_is_refused() {
        let mut view = MemView::default();
        let granted = view.run(Command::LeaseGrant {
            id: LeaseId(7),
            ttl: 10,
        });
        assert!(granted.response.result.is_ok());
        // A leader's clock ran out at renewal count 0; meanwhile the
        // majority committed a keep-alive.
        view.run(Command::LeaseKeepAlive { id: LeaseId(7) });
        let stale = view.run(Command::LeaseExpire {
            id: LeaseId(7),
            renewals: 0,
        });
        assert_eq!(stale.response.result, Err(ApplyError::LeaseRenewed));
        assert!(stale.leases.is_empty(), "a refused expiry changes no lease");
        assert_eq!(view.leases.get(&LeaseId(7)).map(|l| l.renewals), Some(1));
        // Decided on the current count, the expiry revokes.
        let expired = view.run(Command::LeaseExpire {
            id: LeaseId(7),
            renewals: 1,
        });
        assert_eq!(
            expired.response.result,
            Ok(CommandResult::LeaseRevoked { deleted: 0 })
        );
        assert!(view.leases.is_empty());
        let gone = view.run(Command::LeaseExpire {
            id: LeaseId(7),
            renewals: 1,
        });
        assert_eq!(gone.response.result, Err(ApplyError::LeaseNotFound));
    }

    /// A txn reading `range` (unlimited unless `limit`) and putting `marker`.
    fn read_and_mark(range: KeyRange, limit: u64, marker: &str) -> Command {
        Command::Txn(Txn {
            success: vec![
                Op::Put(PutRequest::new(marker, "x")),
                Op::Range(RangeRequest {
                    range,
                    limit,
                    ..RangeRequest::default()
                }),
            ],
            ..Txn::default()
        })
    }

    fn range_of(applied: &Applied, i: usize) -> &RangeResponse {
        match &txn_result(applied).responses[i] {
            OpResponse::Range(r) => r,
            other => panic!("expected a range response, got {other:?}"),
        }
    }

    /// `n` keys `big/NN` of `value_len` bytes each.
    fn view_of_big_keys(n: usize, value_len: usize) -> MemView {
        let mut view = MemView::default();
        for i in 0..n {
            let value = "v".repeat(value_len);
            view.run(put(&format!("big/{i:02}"), &value));
        }
        view
    }

    #[test]
    fn a_txn_range_past_the_budget_is_refused_whole_and_a_limited_one_is_served() {
        // 9 MiB of values: over one command's budget (8 MiB).
        let mut view = view_of_big_keys(9, 1 << 20);
        let before = view.revision;
        let over = view.run(read_and_mark(KeyRange::prefix("big/"), 0, "marker"));
        assert_eq!(over.response.result, Err(ApplyError::ResponseTooLarge));
        assert!(over.writes.is_empty(), "the txn's put is not applied");
        assert_eq!(view.revision, before, "no revision for a refused txn");
        assert!(!view.kvs.contains_key(b"marker".as_slice()));

        // With etcd's limit, apply holds only `limit` values; `count` and
        // `more` still describe the whole range, as in etcd.
        let limited = view.run(read_and_mark(KeyRange::prefix("big/"), 2, "marker"));
        let r = range_of(&limited, 1);
        assert_eq!((r.kvs.len(), r.count, r.more), (2, 9, true));
        assert_eq!(r.kvs[0].key, b"big/00");
        assert_eq!(limited.range_bytes, 2 * ((1 << 20) + 6 + 32));

        // Counting and keys-only reads cost (almost) nothing.
        let counted = view.run(Command::Txn(Txn {
            success: vec![
                Op::Range(RangeRequest {
                    range: KeyRange::prefix("big/"),
                    count_only: true,
                    ..RangeRequest::default()
                }),
                Op::Range(RangeRequest {
                    range: KeyRange::prefix("big/"),
                    keys_only: true,
                    ..RangeRequest::default()
                }),
            ],
            ..Txn::default()
        }));
        assert_eq!(range_of(&counted, 0).count, 9);
        assert!(range_of(&counted, 0).kvs.is_empty());
        assert_eq!(range_of(&counted, 1).kvs.len(), 9);
        assert!(range_of(&counted, 1)
            .kvs
            .iter()
            .all(|kv| kv.value.is_empty()));
    }

    #[test]
    fn the_commands_of_one_entry_share_the_entry_budget_in_log_order() {
        let view = view_of_big_keys(4, 100_000);
        let read_all = || read_and_mark(KeyRange::prefix("big/"), 0, "m");
        let one = 4 * (100_000 + 6 + 32);
        // Room for two full reads in this entry: the third is refused, and
        // so would it be on every node, since the entry is the same.
        let (_, applied) = apply_entry_within(
            &view,
            &Command::Batch(vec![read_all(), read_all(), read_all()]),
            2 * one + one / 2,
        )
        .expect("apply");
        let verdicts: Vec<_> = applied
            .iter()
            .map(|a| a.response.result.as_ref().map(|_| ()).map_err(Clone::clone))
            .collect();
        assert_eq!(
            verdicts,
            vec![Ok(()), Ok(()), Err(ApplyError::ResponseTooLarge)]
        );
        assert_eq!(applied[0].range_bytes, one);
    }

    #[test]
    fn ranges_compares_and_deletes_in_a_txn_stream_over_its_own_writes() {
        let mut view = MemView::default();
        for k in ["a", "b", "c", "d"] {
            view.run(put(k, "1"));
        }
        let all = KeyRange {
            key: b"a".to_vec(),
            range_end: b"z".to_vec(),
        };
        let applied = view.run(Command::Txn(Txn {
            // Every key has value "1": true, scanned without holding it.
            compare: vec![Compare {
                range: all.clone(),
                op: CompareOp::Equal,
                target: CompareTarget::Value(b"1".to_vec()),
            }],
            success: vec![
                Op::Delete(DeleteRequest {
                    range: KeyRange::single("b"),
                    prev_kv: false,
                }),
                Op::Put(PutRequest::new("bb", "2")),
                Op::Range(RangeRequest {
                    range: all.clone(),
                    limit: 3,
                    ..RangeRequest::default()
                }),
                Op::Delete(DeleteRequest {
                    range: KeyRange {
                        key: b"c".to_vec(),
                        range_end: b"z".to_vec(),
                    },
                    prev_kv: true,
                }),
                Op::Range(RangeRequest {
                    range: all.clone(),
                    ..RangeRequest::default()
                }),
            ],
            ..Txn::default()
        }));
        let resp = txn_result(&applied);
        assert!(resp.succeeded);
        let keys =
            |r: &RangeResponse| -> Vec<Vec<u8>> { r.kvs.iter().map(|kv| kv.key.clone()).collect() };
        let limited = range_of(&applied, 2);
        assert_eq!(
            keys(limited),
            vec![b"a".to_vec(), b"bb".to_vec(), b"c".to_vec()]
        );
        assert_eq!((limited.count, limited.more), (4, true));
        match &resp.responses[3] {
            OpResponse::Delete(d) => assert_eq!(d.deleted, 2),
            other => panic!("expected a delete, got {other:?}"),
        }
        let after = range_of(&applied, 4);
        assert_eq!(keys(after), vec![b"a".to_vec(), b"bb".to_vec()]);
        assert_eq!(after.count, 2);
    }

    /// Property tests: any sequence of commands a client can get past
    /// validation applies without a panic or a storage error, and every
    /// command that writes takes exactly the next revision.
    mod proptests {
        use proptest::prelude::*;

        use super::*;
        use crate::command::CompareTarget;
        use crate::validate::Limits;

        fn key() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                Just(Vec::new()),
                Just(vec![0]),
                Just(vec![0xff]),
                Just(b"a".to_vec()),
                Just(b"b".to_vec()),
                proptest::collection::vec(
                    prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(0xff)],
                    0..4
                ),
            ]
        }

        fn number() -> impl Strategy<Value = i64> {
            prop_oneof![
                Just(i64::MIN),
                Just(i64::MAX),
                Just(-1i64),
                Just(0i64),
                1i64..8
            ]
        }

        fn revision() -> impl Strategy<Value = u64> {
            prop_oneof![Just(0u64), Just(u64::MAX), 1u64..12]
        }

        fn range() -> impl Strategy<Value = KeyRange> {
            (key(), key()).prop_map(|(key, range_end)| KeyRange { key, range_end })
        }

        fn simple_op() -> BoxedStrategy<Op> {
            prop_oneof![
                (
                    range(),
                    revision(),
                    proptest::option::of(revision()),
                    any::<[bool; 2]>()
                )
                    .prop_map(|(range, limit, rev, f)| Op::Range(RangeRequest {
                        range,
                        limit,
                        revision: rev.map(Revision),
                        keys_only: f[0],
                        count_only: f[1],
                    })),
                (key(), key(), number(), any::<[bool; 3]>()).prop_map(|(key, value, lease, f)| {
                    Op::Put(PutRequest {
                        key,
                        value,
                        lease: LeaseId(lease),
                        prev_kv: f[0],
                        ignore_value: f[1],
                        ignore_lease: f[2],
                    })
                }),
                (range(), any::<bool>())
                    .prop_map(|(range, prev_kv)| Op::Delete(DeleteRequest { range, prev_kv })),
            ]
            .boxed()
        }

        fn compare() -> BoxedStrategy<Compare> {
            let op = proptest::sample::select(
                &[
                    CompareOp::Equal,
                    CompareOp::Greater,
                    CompareOp::Less,
                    CompareOp::NotEqual,
                ][..],
            );
            let target = prop_oneof![
                number().prop_map(CompareTarget::Version),
                revision().prop_map(|r| CompareTarget::Create(Revision(r))),
                revision().prop_map(|r| CompareTarget::Mod(Revision(r))),
                key().prop_map(CompareTarget::Value),
                number().prop_map(|l| CompareTarget::Lease(LeaseId(l))),
            ];
            (range(), op, target)
                .prop_map(|(range, op, target)| Compare { range, op, target })
                .boxed()
        }

        fn txn() -> impl Strategy<Value = Txn> {
            let flat = (
                proptest::collection::vec(compare(), 0..3),
                proptest::collection::vec(simple_op(), 0..4),
                proptest::collection::vec(simple_op(), 0..3),
            )
                .prop_map(|(compare, success, failure)| Txn {
                    compare,
                    success,
                    failure,
                });
            flat.prop_recursive(3, 16, 3, |inner| {
                (
                    proptest::collection::vec(compare(), 0..2),
                    proptest::collection::vec(
                        prop_oneof![simple_op(), inner.prop_map(Op::Txn)],
                        0..3,
                    ),
                    proptest::collection::vec(simple_op(), 0..2),
                )
                    .prop_map(|(compare, success, failure)| Txn {
                        compare,
                        success,
                        failure,
                    })
            })
        }

        fn command() -> impl Strategy<Value = Command> {
            prop_oneof![
                6 => txn().prop_map(Command::Txn),
                1 => revision().prop_map(|r| Command::Compact { revision: Revision(r) }),
                2 => (1i64..4, number()).prop_map(|(id, ttl)| Command::LeaseGrant { id: LeaseId(id), ttl }),
                1 => (1i64..4).prop_map(|id| Command::LeaseRevoke { id: LeaseId(id) }),
                1 => (1i64..4).prop_map(|id| Command::LeaseKeepAlive { id: LeaseId(id) }),
                1 => (1i64..4, 0u64..3).prop_map(|(id, renewals)| Command::LeaseExpire { id: LeaseId(id), renewals }),
            ]
        }

        proptest! {
            // 256 cases of up to 12 commands (`PROPTEST_CASES` for more).
            #![proptest_config(ProptestConfig {
                cases: if std::env::var_os("PROPTEST_CASES").is_some() {
                    ProptestConfig::default().cases
                } else {
                    256
                },
                ..ProptestConfig::default()
            })]

            #[test]
            fn any_valid_command_sequence_applies_without_error(
                cmds in proptest::collection::vec(command(), 1..12),
            ) {
                let mut view = MemView::default();
                for cmd in cmds {
                    if cmd.validate(&Limits::ETCD).is_err() {
                        continue;
                    }
                    let before = view.revision;
                    let applied = apply(&view, &cmd);
                    prop_assert!(applied.is_ok(), "{cmd:?}: {applied:?}");
                    let Ok(applied) = applied else { continue };
                    if !applied.writes.is_empty() {
                        prop_assert_eq!(applied.response.revision, Revision(before.0 + 1));
                        prop_assert!(applied.response.result.is_ok());
                    } else {
                        prop_assert_eq!(applied.response.revision, before);
                    }
                    view.commit(&applied);
                }
            }
        }
    }
}

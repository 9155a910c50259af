//! Transaction execution: [`TxnRun`] runs one transaction's compares and
//! operations (range, put, delete, nested transactions) over its own
//! pending writes, all at one new revision, and refuses a branch that puts
//! a key twice, as etcd does. Also [`merge_scan`], the scan of a view with
//! pending writes laid over it, which the batch view shares.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::ControlFlow;

use bytes::Bytes;

use crate::command::{
    ApplyError, Compare, CompareOp, CompareTarget, DeleteRequest, DeleteResponse, Event, EventKind,
    KeyRange, KeyValue, Op, OpResponse, PutRequest, RangeRequest, RangeResponse, Revision, Txn,
    TxnResponse,
};
use crate::error::StoreError;
use crate::ids::LeaseId;
use crate::view::{MvccRead, RangeShaper, Visit};

/// Runs `base`'s scan with `overlay` (ascending keys of the scanned range
/// and their states, `None` = deleted) laid over it, into `visit`, in key
/// order. Holds nothing but the overlay's iterator.
pub(super) fn merge_scan<'o>(
    base: impl FnOnce(Visit<'_>) -> Result<Revision, StoreError>,
    overlay: impl Iterator<Item = (&'o Bytes, &'o Option<KeyValue>)>,
    visit: Visit<'_>,
) -> Result<(), StoreError> {
    let mut pending = overlay.peekable();
    let mut stopped = false;
    base(&mut |kv: KeyValue| {
        while let Some((_, state)) = pending.next_if(|(k, _)| k[..] < kv.key[..]) {
            if let Some(state) = state {
                if visit(state.clone())?.is_break() {
                    stopped = true;
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        let kv = match pending.next_if(|(k, _)| k[..] == kv.key[..]) {
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

pub(super) enum TxnError {
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
pub(super) struct TxnRun<'v, V> {
    view: &'v V,
    pub(super) revision: Revision,
    pub(super) writes: BTreeMap<Bytes, Option<KeyValue>>,
    pub(super) events: Vec<Event>,
    pub(super) attachments: BTreeMap<(LeaseId, Vec<u8>), bool>,
    /// Bytes of range results it may still return.
    pub(super) budget: usize,
    /// The view's state of the key a single-key compare read last, until
    /// an operation on that key takes it: a guarded write (compare, then
    /// put or delete) reads its key from the store once, not twice. The
    /// view does not change during the transaction, and pending writes
    /// are looked up first.
    compared: RefCell<Option<(Vec<u8>, Option<KeyValue>)>>,
}

impl<'v, V: MvccRead> TxnRun<'v, V> {
    pub(super) fn new(view: &'v V, current: Revision, budget: usize) -> Self {
        Self {
            view,
            revision: current.next(),
            writes: BTreeMap::new(),
            events: Vec::new(),
            attachments: BTreeMap::new(),
            budget,
            compared: RefCell::new(None),
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

    pub(super) fn txn(&mut self, txn: &Txn) -> Result<TxnResponse, TxnError> {
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
        if let Some(pending) = self.writes.get(key) {
            return Ok(pending.clone());
        }
        let mut compared = self.compared.borrow_mut();
        match compared.take() {
            Some((k, state)) if k.as_slice() == key => Ok(state),
            other => {
                *compared = other;
                self.view.get(key)
            }
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
            let state = self.get(&cmp.range.key)?;
            let passed = compare_one(state.as_ref(), cmp);
            if !self.writes.contains_key(cmp.range.key.as_slice()) {
                *self.compared.borrow_mut() = Some((cmp.range.key.clone(), state));
            }
            return Ok(passed);
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
        let answered = if req.prev_kv { prev.clone() } else { None };
        self.events.push(Event {
            kind: EventKind::Put,
            kv,
            prev_kv: prev,
        });
        Ok(OpResponse::Put { prev_kv: answered })
    }

    pub(super) fn delete(&mut self, req: &DeleteRequest) -> Result<DeleteResponse, TxnError> {
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
    // One operation that is not a transaction cannot clash with itself: a
    // plain put (most of the writes) allocates nothing here.
    if let [] | [Op::Put(_) | Op::Range(_) | Op::Delete(_)] = ops {
        return Ok(());
    }
    fn collect<'a>(ops: &'a [Op], seen: &mut Vec<&'a [u8]>) -> Result<(), TxnError> {
        for op in ops {
            match op {
                Op::Put(p) => {
                    if seen.contains(&&p.key[..]) {
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
            Some(kv) => kv.value.as_ref().cmp(v.as_slice()),
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

//! The read view apply decides against: [`MvccRead`], what a command may
//! read of the store (current and past key-values, leases, proposal
//! sessions), and [`RangeShaper`], which turns a streamed scan into a range
//! response. It sits below everything that reads for apply (the store's
//! reader in `mvcc`, the batch overlay in `apply`, the session mirror in
//! `session_table`) so they all depend on it and it on none of them.

use std::ops::ControlFlow;

use crate::command::{KeyRange, KeyValue, LeaseRecord, RangeRequest, RangeResponse, Revision};
use crate::error::StoreError;
use crate::ids::{LeaseId, NodeId};
use crate::session::{Recorded, SessionState};

/// What a key-value costs a range budget besides its key and value: its
/// revisions, version and lease.
const KV_OVERHEAD: usize = 32;

/// The bytes a key-value held in a range response costs its budget.
pub fn kv_bytes(kv: &KeyValue) -> usize {
    kv.key.len() + kv.value.len() + KV_OVERHEAD
}

/// A visitor of key-values in key order; `Break` ends the scan early.
pub type Visit<'f> = &'f mut dyn FnMut(KeyValue) -> Result<ControlFlow<()>, StoreError>;

/// What apply needs to read: the current state of the store.
pub trait MvccRead {
    /// The current value of `key`.
    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError>;
    /// Visits the key-values of `range` at revision `at` (`None`: the
    /// current revision), ascending by key, until `visit` breaks, and
    /// returns the revision read at. A revision below the compaction point
    /// or above the current revision is an error. The scan holds nothing
    /// itself: what is kept is the visitor's business.
    fn scan(
        &self,
        range: &KeyRange,
        at: Option<Revision>,
        visit: Visit<'_>,
    ) -> Result<Revision, StoreError>;
    /// A range read with the semantics of [`RangeRequest`] (a [`scan`]
    /// shaped by limit, keys_only and count_only, holding at most `limit`
    /// values); a revision below the compaction point or above the current
    /// revision is an error.
    ///
    /// [`scan`]: MvccRead::scan
    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        let mut shaper = RangeShaper::new(req, usize::MAX);
        let at = self.scan(&req.range, req.revision, &mut |kv| Ok(shaper.push(kv)))?;
        Ok(shaper.finish(at))
    }
    /// The view's current revision: the last one written.
    fn current_revision(&self) -> Revision;
    /// The view's compaction point: reads below it fail.
    fn compacted_revision(&self) -> Revision;
    /// Lease `id`, if it exists.
    fn lease(&self, id: LeaseId) -> Result<Option<LeaseRecord>, StoreError>;
    /// The keys attached to lease `id`, in key order.
    fn lease_keys(&self, id: LeaseId) -> Result<Vec<Vec<u8>>, StoreError>;
    /// The proposal session of origin node `origin`, if it has one.
    fn session(&self, origin: NodeId) -> Result<Option<SessionState>, StoreError>;
    /// What `origin`'s session recorded of its proposal `seq` (at or above
    /// its floor: below it, the record is gone or going).
    fn session_record(&self, origin: NodeId, seq: u64) -> Result<Option<Recorded>, StoreError>;
}

/// Shapes a range response while its key-values stream in: counts every
/// key, keeps at most `limit` of them (none for `count_only`, no values for
/// `keys_only`), and stops once what it keeps passes `budget` bytes.
pub struct RangeShaper<'r> {
    req: &'r RangeRequest,
    kvs: Vec<KeyValue>,
    count: u64,
    bytes: usize,
    budget: usize,
    over_budget: bool,
}

impl<'r> RangeShaper<'r> {
    /// A shaper for `req` that may keep up to `budget` bytes ([`kv_bytes`]).
    pub fn new(req: &'r RangeRequest, budget: usize) -> Self {
        Self {
            req,
            kvs: Vec::new(),
            count: 0,
            bytes: 0,
            budget,
            over_budget: false,
        }
    }

    /// Takes the next key-value of the range; `Break` once over budget.
    pub fn push(&mut self, mut kv: KeyValue) -> ControlFlow<()> {
        self.count += 1;
        if self.req.count_only || (self.req.limit > 0 && self.kvs.len() as u64 >= self.req.limit) {
            return ControlFlow::Continue(());
        }
        if self.req.keys_only {
            kv.value = bytes::Bytes::new();
        }
        self.bytes = self.bytes.saturating_add(kv_bytes(&kv));
        if self.bytes > self.budget {
            self.over_budget = true;
            return ControlFlow::Break(());
        }
        self.kvs.push(kv);
        ControlFlow::Continue(())
    }

    /// Whether the kept key-values passed the budget (the scan was cut).
    pub fn over_budget(&self) -> bool {
        self.over_budget
    }

    /// The bytes of key-values kept so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The response, read at `revision`.
    pub fn finish(self, revision: Revision) -> RangeResponse {
        RangeResponse {
            more: self.req.limit > 0 && self.count > self.req.limit,
            kvs: self.kvs,
            count: self.count,
            revision,
        }
    }
}

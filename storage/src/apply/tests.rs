//! Unit tests of apply, entry and batch apply and transactions, against an
//! in-memory view (`MemView`).

use std::collections::BTreeMap;

use super::batch::apply_entry_within;
use super::*;
use crate::command::{
    ApplyError, Command, CommandResult, Compare, CompareOp, CompareTarget, DeleteRequest, KeyRange,
    KeyValue, LeaseRecord, Op, OpResponse, ProposalId, PutRequest, RangeRequest, RangeResponse,
    Response, Revision, Txn, TxnResponse,
};
use crate::error::StoreError;
use crate::ids::{LeaseId, NodeId};
use crate::session::{Recorded, SessionState};
use crate::view::{MvccRead, Visit};

/// An in-memory view: the current state only, enough to test apply.
#[derive(Default)]
struct MemView {
    kvs: BTreeMap<Vec<u8>, KeyValue>,
    revision: Revision,
    sessions: BTreeMap<NodeId, SessionState>,
    records: BTreeMap<(NodeId, u64), Recorded>,
    leases: BTreeMap<LeaseId, LeaseRecord>,
    /// How many single-key reads apply made of it.
    reads: std::cell::Cell<usize>,
}

impl MemView {
    fn commit(&mut self, applied: &Applied) {
        for (k, v) in &applied.writes {
            match v {
                Some(kv) => self.kvs.insert(k.to_vec(), kv.clone()),
                None => self.kvs.remove(&k[..]),
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
            let floor = update.state.floor;
            self.records
                .retain(|(o, seq), _| *o != origin || *seq >= floor);
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
        self.reads.set(self.reads.get() + 1);
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
        OpResponse::Range(r) => assert_eq!(r.kvs[0].value, b"v1".as_slice()),
        other => panic!("unexpected {other:?}"),
    }
}

/// `key`'s put (or delete) guarded by its modification revision, as every
/// Kubernetes update (or delete) is.
fn guarded(key: &str, revision: u64, op: Op) -> Command {
    Command::Txn(Txn {
        compare: vec![Compare::mod_revision(key, CompareOp::Equal, revision)],
        success: vec![op],
        failure: vec![Op::Range(RangeRequest {
            range: KeyRange::single(key),
            ..RangeRequest::default()
        })],
    })
}

#[test]
fn a_guarded_write_reads_its_key_once_and_writes_as_if_read_twice() {
    let mut view = MemView::default();
    view.run(put("k", "v1"));
    view.run(put("other", "o"));

    view.reads.set(0);
    let applied = view.run(guarded("k", 1, Op::Put(PutRequest::new("k", "v2"))));
    assert!(txn_result(&applied).succeeded);
    assert_eq!(view.reads.get(), 1, "the put takes what the compare read");
    let kv = &view.kvs[b"k".as_slice()];
    assert_eq!(
        (kv.version, kv.create_revision, kv.mod_revision),
        (2, Revision(1), Revision(3))
    );
    let prev = applied.events[0].prev_kv.as_ref().expect("prev");
    assert_eq!(prev.value, b"v1".as_slice());

    // A compare of one key and a put of another read each on its own.
    view.reads.set(0);
    let applied = view.run(guarded("k", 3, Op::Put(PutRequest::new("other", "o2"))));
    assert!(txn_result(&applied).succeeded);
    assert_eq!(view.reads.get(), 2);
    assert_eq!(view.kvs[b"other".as_slice()].version, 2);

    // A failed guard reads nothing more than its compare and its range.
    let applied = view.run(guarded("k", 1, Op::Put(PutRequest::new("k", "v3"))));
    assert!(!txn_result(&applied).succeeded);
    assert_eq!(view.kvs[b"k".as_slice()].value, b"v2".as_slice());

    view.reads.set(0);
    let applied = view.run(guarded(
        "k",
        3,
        Op::Delete(DeleteRequest {
            range: KeyRange::single("k"),
            prev_kv: true,
        }),
    ));
    assert_eq!(
        view.reads.get(),
        1,
        "the delete takes what the compare read"
    );
    match &txn_result(&applied).responses[0] {
        OpResponse::Delete(d) => assert_eq!(d.prev_kvs[0].value, b"v2".as_slice()),
        other => panic!("unexpected {other:?}"),
    }
    assert!(!view.kvs.contains_key(b"k".as_slice()));
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
            let keys: Vec<_> = r.kvs.iter().map(|kv| kv.key.to_vec()).collect();
            assert_eq!(keys, vec![b"p/2".to_vec()]);
        }
        other => panic!("unexpected {other:?}"),
    }
    match &resp.responses[1] {
        OpResponse::Delete(d) => assert_eq!(d.prev_kvs[0].value, b"x".as_slice()),
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

const MAX_RECORDED_BYTES_PLUS_ONE: usize = crate::session::MAX_RECORDED_RESPONSE_BYTES as usize + 1;

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
    assert_eq!(r.kvs[0].key, &b"big/00"[..]);
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
    let (response, applied) = apply_entry_within(
        &view,
        &Command::Batch(vec![read_all(), read_all(), read_all()]),
        2 * one + one / 2,
    )
    .expect("apply");
    let Ok(CommandResult::Batch(answers)) = response.result else {
        panic!("a batch's answer is the batch's answers: {response:?}");
    };
    let verdicts: Vec<_> = answers
        .iter()
        .map(|a| a.result.as_ref().map(|_| ()).map_err(Clone::clone))
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
        |r: &RangeResponse| -> Vec<Vec<u8>> { r.kvs.iter().map(|kv| kv.key.to_vec()).collect() };
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
                    key: key.into(),
                    value: value.into(),
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
                proptest::collection::vec(prop_oneof![simple_op(), inner.prop_map(Op::Txn)], 0..3),
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

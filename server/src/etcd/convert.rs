//! Conversions between etcd's protobuf messages and the storage model.
//! What can only be checked on the protobuf (an unknown enum value, an
//! empty op, txn nesting while converting) is refused here with etcd's
//! errors; the checks of the command itself (op counts, empty keys, sizes)
//! are `Command::validate`'s, run on the converted command.

use kubestore_proto::etcd::etcdserverpb as pb;
use kubestore_proto::etcd::mvccpb;
use kubestore_storage::{
    Compare, CompareOp, CompareTarget, DeleteRequest, Event, EventKind, KeyRange, KeyValue,
    LeaseId, Op, OpResponse, PutRequest, RangeRequest, RangeResponse, Revision, Txn, TxnResponse,
    MAX_TXN_DEPTH,
};
use tonic::Status;

use super::status;

pub fn kv(kv: KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key.into(),
        create_revision: kv.create_revision.0 as i64,
        mod_revision: kv.mod_revision.0 as i64,
        version: kv.version,
        value: kv.value.into(),
        lease: kv.lease.0,
    }
}

/// An event as a watcher gets it: copied from the log's shared batch, its
/// previous state only when the watcher asked for it.
pub fn event(e: &Event, with_prev: bool) -> mvccpb::Event {
    mvccpb::Event {
        r#type: match e.kind {
            EventKind::Put => mvccpb::event::EventType::Put as i32,
            EventKind::Delete => mvccpb::event::EventType::Delete as i32,
        },
        kv: Some(kv(e.kv.clone())),
        prev_kv: if with_prev {
            e.prev_kv.clone().map(kv)
        } else {
            None
        },
    }
}

fn key_range(key: Vec<u8>, range_end: Vec<u8>) -> KeyRange {
    KeyRange { key, range_end }
}

fn revision(r: i64) -> Option<Revision> {
    (r > 0).then_some(Revision(r as u64))
}

/// The storage read of a Range request (not a command, so checked here):
/// see [`range_read`].
pub fn range_request(r: &pb::RangeRequest) -> Result<RangeRequest, Status> {
    if r.key.is_empty() {
        return Err(status::empty_key());
    }
    Ok(range_read(r))
}

/// The storage read of a Range: without limit when sorting or filtering
/// needs every key (they are applied afterwards by [`shape_range`]).
fn range_read(r: &pb::RangeRequest) -> RangeRequest {
    let post = needs_post_processing(r);
    RangeRequest {
        range: key_range(r.key.clone(), r.range_end.clone()),
        limit: if post { 0 } else { r.limit.max(0) as u64 },
        revision: revision(r.revision),
        keys_only: r.keys_only,
        count_only: r.count_only && !post,
    }
}

fn needs_post_processing(r: &pb::RangeRequest) -> bool {
    let sorted = r.sort_order != pb::range_request::SortOrder::None as i32
        || r.sort_target != pb::range_request::SortTarget::Key as i32;
    // As etcd: any non-zero revision filter (a negative one included,
    // which keeps nothing) means reading the whole range first.
    sorted
        || r.min_mod_revision != 0
        || r.max_mod_revision != 0
        || r.min_create_revision != 0
        || r.max_create_revision != 0
}

/// etcd's post-processing of a Range: revision filters, sort, then limit.
/// `count` stays the number of keys in the range, as etcd reports it.
pub fn shape_range(r: &pb::RangeRequest, mut resp: RangeResponse) -> RangeResponse {
    if !needs_post_processing(r) {
        return resp;
    }
    let keep = |kv: &KeyValue| {
        let (m, c) = (kv.mod_revision.0 as i64, kv.create_revision.0 as i64);
        (r.min_mod_revision == 0 || m >= r.min_mod_revision)
            && (r.max_mod_revision == 0 || m <= r.max_mod_revision)
            && (r.min_create_revision == 0 || c >= r.min_create_revision)
            && (r.max_create_revision == 0 || c <= r.max_create_revision)
    };
    resp.kvs.retain(keep);
    use pb::range_request::{SortOrder, SortTarget};
    let mut order = SortOrder::try_from(r.sort_order).unwrap_or(SortOrder::None);
    let target = SortTarget::try_from(r.sort_target).unwrap_or(SortTarget::Key);
    if order == SortOrder::None && target != SortTarget::Key {
        // etcd: a sort target without an order sorts ascending.
        order = SortOrder::Ascend;
    }
    if order != SortOrder::None {
        resp.kvs.sort_by(|a, b| {
            let ord = match target {
                SortTarget::Key => a.key.cmp(&b.key),
                SortTarget::Version => a.version.cmp(&b.version),
                SortTarget::Create => a.create_revision.cmp(&b.create_revision),
                SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
                SortTarget::Value => a.value.cmp(&b.value),
            };
            if order == SortOrder::Descend {
                ord.reverse()
            } else {
                ord
            }
        });
    }
    if r.limit > 0 && resp.kvs.len() > r.limit as usize {
        resp.kvs.truncate(r.limit as usize);
        resp.more = true;
    }
    if r.count_only {
        resp.kvs.clear();
    }
    resp
}

pub fn range_response(resp: RangeResponse) -> pb::RangeResponse {
    pb::RangeResponse {
        header: None,
        count: resp.count as i64,
        more: resp.more,
        kvs: resp.kvs.into_iter().map(kv).collect(),
    }
}

pub fn put_request(r: pb::PutRequest) -> PutRequest {
    PutRequest {
        key: r.key.into(),
        value: r.value.into(),
        lease: LeaseId(r.lease),
        prev_kv: r.prev_kv,
        ignore_value: r.ignore_value,
        ignore_lease: r.ignore_lease,
    }
}

pub fn delete_request(r: pb::DeleteRangeRequest) -> DeleteRequest {
    DeleteRequest {
        range: key_range(r.key, r.range_end),
        prev_kv: r.prev_kv,
    }
}

fn compare(c: pb::Compare) -> Result<Compare, Status> {
    use pb::compare::{CompareResult, TargetUnion};
    let op = match CompareResult::try_from(c.result) {
        Ok(CompareResult::Equal) => CompareOp::Equal,
        Ok(CompareResult::Greater) => CompareOp::Greater,
        Ok(CompareResult::Less) => CompareOp::Less,
        Ok(CompareResult::NotEqual) => CompareOp::NotEqual,
        Err(_) => return Err(status::unknown_compare("result")),
    };
    let target = match c.target_union {
        Some(TargetUnion::Version(v)) => CompareTarget::Version(v),
        Some(TargetUnion::CreateRevision(r)) => CompareTarget::Create(Revision(r.max(0) as u64)),
        Some(TargetUnion::ModRevision(r)) => CompareTarget::Mod(Revision(r.max(0) as u64)),
        Some(TargetUnion::Value(v)) => CompareTarget::Value(v),
        Some(TargetUnion::Lease(l)) => CompareTarget::Lease(LeaseId(l)),
        // etcd compares the zero value of the named target.
        None => match pb::compare::CompareTarget::try_from(c.target) {
            Ok(pb::compare::CompareTarget::Version) => CompareTarget::Version(0),
            Ok(pb::compare::CompareTarget::Create) => CompareTarget::Create(Revision::ZERO),
            Ok(pb::compare::CompareTarget::Mod) => CompareTarget::Mod(Revision::ZERO),
            Ok(pb::compare::CompareTarget::Value) => CompareTarget::Value(Vec::new()),
            Ok(pb::compare::CompareTarget::Lease) => CompareTarget::Lease(LeaseId::NONE),
            Err(_) => return Err(status::unknown_compare("target")),
        },
    };
    Ok(Compare {
        range: key_range(c.key, c.range_end),
        op,
        target,
    })
}

/// One op of a txn at nesting level `depth`.
fn op(o: pb::RequestOp, depth: usize) -> Result<Op, Status> {
    use pb::request_op::Request;
    match o.request {
        Some(Request::RequestRange(r)) => Ok(Op::Range(range_read(&r))),
        Some(Request::RequestPut(p)) => Ok(Op::Put(put_request(p))),
        Some(Request::RequestDeleteRange(d)) => Ok(Op::Delete(delete_request(d))),
        Some(Request::RequestTxn(t)) => Ok(Op::Txn(txn_at(t, depth + 1)?)),
        None => Err(status::empty_request_op()),
    }
}

/// A Txn. Its op counts and keys are checked by `Command::validate`; the
/// nesting is bounded here too, before recursing (gRPC's decoder already
/// stops at about 50 levels, below [`MAX_TXN_DEPTH`]).
pub fn txn(t: pb::TxnRequest) -> Result<Txn, Status> {
    txn_at(t, 1)
}

fn txn_at(t: pb::TxnRequest, depth: usize) -> Result<Txn, Status> {
    if depth > MAX_TXN_DEPTH {
        return Err(status::txn_too_deep(depth));
    }
    Ok(Txn {
        compare: t
            .compare
            .into_iter()
            .map(compare)
            .collect::<Result<_, _>>()?,
        success: t
            .success
            .into_iter()
            .map(|o| op(o, depth))
            .collect::<Result<_, _>>()?,
        failure: t
            .failure
            .into_iter()
            .map(|o| op(o, depth))
            .collect::<Result<_, _>>()?,
    })
}

/// The revision etcd writes in the header of each response inside a Txn:
/// the revision the Txn started from until one of its ops (nested ones
/// included, in order) has changed something, the Txn's own revision from
/// then on, an op's own change counting for its header. A nested Txn's
/// header is present and empty, as etcd's.
struct InnerRevision {
    begin: u64,
    changed: bool,
}

impl InnerRevision {
    /// The header of the next op's response, `changed` whether that op
    /// changed anything.
    fn header(&mut self, changed: bool) -> Option<pb::ResponseHeader> {
        self.changed |= changed;
        Some(pb::ResponseHeader {
            revision: (self.begin + u64::from(self.changed)) as i64,
            ..pb::ResponseHeader::default()
        })
    }
}

/// Whether a Txn's ops changed anything: a put, or a delete that deleted.
fn changes(t: &TxnResponse) -> bool {
    t.responses.iter().any(|r| match r {
        OpResponse::Range(_) => false,
        OpResponse::Put { .. } => true,
        OpResponse::Delete(d) => d.deleted > 0,
        OpResponse::Txn(t) => changes(t),
    })
}

/// The response of one op; nested range requests keep their own shaping.
fn op_response(
    req: Option<&pb::RequestOp>,
    resp: OpResponse,
    at: &mut InnerRevision,
) -> pb::ResponseOp {
    use pb::request_op::Request;
    use pb::response_op::Response;
    let response = match resp {
        OpResponse::Range(r) => {
            let shaped = match req.and_then(|q| q.request.as_ref()) {
                Some(Request::RequestRange(q)) => shape_range(q, r),
                _ => r,
            };
            let mut out = range_response(shaped);
            out.header = at.header(false);
            Response::ResponseRange(out)
        }
        OpResponse::Put { prev_kv } => Response::ResponsePut(pb::PutResponse {
            header: at.header(true),
            prev_kv: prev_kv.map(kv),
        }),
        OpResponse::Delete(d) => Response::ResponseDeleteRange(pb::DeleteRangeResponse {
            header: at.header(d.deleted > 0),
            deleted: d.deleted as i64,
            prev_kvs: d.prev_kvs.into_iter().map(kv).collect(),
        }),
        OpResponse::Txn(t) => {
            let nested = match req.and_then(|q| q.request.as_ref()) {
                Some(Request::RequestTxn(q)) => Some(q),
                _ => None,
            };
            let mut out = txn_responses(nested, t, at);
            out.header = Some(pb::ResponseHeader::default());
            Response::ResponseTxn(out)
        }
    };
    pb::ResponseOp {
        response: Some(response),
    }
}

/// A Txn's response (its header left to the caller), `revision` the
/// store's revision after it; `req` (the request) shapes nested range
/// results.
pub fn txn_response(
    req: Option<&pb::TxnRequest>,
    t: TxnResponse,
    revision: u64,
) -> pb::TxnResponse {
    let begin = revision.saturating_sub(u64::from(changes(&t)));
    txn_responses(
        req,
        t,
        &mut InnerRevision {
            begin,
            changed: false,
        },
    )
}

/// [`txn_response`] from within: the inner headers continue from `at`,
/// where the Txn's earlier ops (and, nested, its parent's) left them.
fn txn_responses(
    req: Option<&pb::TxnRequest>,
    t: TxnResponse,
    at: &mut InnerRevision,
) -> pb::TxnResponse {
    let branch = req.map(|q| if t.succeeded { &q.success } else { &q.failure });
    pb::TxnResponse {
        header: None,
        succeeded: t.succeeded,
        responses: t
            .responses
            .into_iter()
            .enumerate()
            .map(|(i, r)| op_response(branch.and_then(|b| b.get(i)), r, at))
            .collect(),
    }
}

/// Property tests: any Range, Put, DeleteRange or Txn a client can encode
/// converts and validates to a command or to etcd's refusal (never
/// `Internal` or `Unknown`), and a Range's answer is shaped as asked.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;
    use tonic::Code;

    use super::*;
    use crate::etcd::context::validate;
    use crate::fuzz;
    use kubestore_storage::Command;

    /// Keys: empty, `0x00`, `0xff`, ordinary and arbitrary bytes.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(Vec::new()),
            Just(vec![0]),
            Just(vec![0, 0]),
            Just(vec![0xff]),
            Just(b"a".to_vec()),
            Just(b"/registry/configmaps/default/a".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..12),
        ]
    }

    /// Enum fields: the defined values and undefined ones.
    fn enum_value() -> impl Strategy<Value = i32> {
        prop_oneof![0..5i32, Just(-1), Just(i32::MAX), any::<i32>()]
    }

    fn range_request() -> BoxedStrategy<pb::RangeRequest> {
        (
            (key(), key(), fuzz::edge_i64(), fuzz::edge_i64()),
            (enum_value(), enum_value(), any::<[bool; 3]>()),
            (
                fuzz::edge_i64(),
                fuzz::edge_i64(),
                fuzz::edge_i64(),
                fuzz::edge_i64(),
            ),
        )
            .prop_map(
                |((key, range_end, limit, revision), (order, target, flags), mins)| {
                    pb::RangeRequest {
                        key,
                        range_end,
                        limit,
                        revision,
                        sort_order: order,
                        sort_target: target,
                        serializable: flags[0],
                        keys_only: flags[1],
                        count_only: flags[2],
                        min_mod_revision: mins.0,
                        max_mod_revision: mins.1,
                        min_create_revision: mins.2,
                        max_create_revision: mins.3,
                    }
                },
            )
            .boxed()
    }

    fn put_request() -> impl Strategy<Value = pb::PutRequest> {
        (key(), key(), fuzz::edge_i64(), any::<[bool; 3]>()).prop_map(
            |(key, value, lease, flags)| pb::PutRequest {
                key,
                value,
                lease,
                prev_kv: flags[0],
                ignore_value: flags[1],
                ignore_lease: flags[2],
            },
        )
    }

    fn delete_request() -> impl Strategy<Value = pb::DeleteRangeRequest> {
        (key(), key(), any::<bool>()).prop_map(|(key, range_end, prev_kv)| pb::DeleteRangeRequest {
            key,
            range_end,
            prev_kv,
        })
    }

    fn compare() -> BoxedStrategy<pb::Compare> {
        use pb::compare::TargetUnion;
        let union = prop_oneof![
            Just(None),
            fuzz::edge_i64().prop_map(|v| Some(TargetUnion::Version(v))),
            fuzz::edge_i64().prop_map(|v| Some(TargetUnion::CreateRevision(v))),
            fuzz::edge_i64().prop_map(|v| Some(TargetUnion::ModRevision(v))),
            key().prop_map(|v| Some(TargetUnion::Value(v))),
            fuzz::edge_i64().prop_map(|v| Some(TargetUnion::Lease(v))),
        ];
        (enum_value(), enum_value(), key(), key(), union)
            .prop_map(
                |(result, target, key, range_end, target_union)| pb::Compare {
                    result,
                    target,
                    key,
                    range_end,
                    target_union,
                },
            )
            .boxed()
    }

    /// A Txn of any ops, nested up to four levels.
    fn txn_request() -> impl Strategy<Value = pb::TxnRequest> {
        use pb::request_op::Request as R;
        let flat = (
            proptest::collection::vec(compare(), 0..3),
            proptest::collection::vec(simple_op(), 0..4),
            proptest::collection::vec(simple_op(), 0..4),
        )
            .prop_map(|(compare, success, failure)| pb::TxnRequest {
                compare,
                success,
                failure,
            });
        flat.prop_recursive(4, 32, 4, |inner| {
            (
                proptest::collection::vec(compare(), 0..3),
                proptest::collection::vec(
                    prop_oneof![
                        simple_op(),
                        inner.prop_map(|t| pb::RequestOp {
                            request: Some(R::RequestTxn(t)),
                        }),
                    ],
                    0..4,
                ),
                proptest::collection::vec(simple_op(), 0..3),
            )
                .prop_map(|(compare, success, failure)| pb::TxnRequest {
                    compare,
                    success,
                    failure,
                })
        })
    }

    /// Boxed, as every strategy a recursive one is built of: unboxed, the
    /// value trees of a few nested levels overflowed a test thread's stack
    /// in a debug build.
    fn simple_op() -> BoxedStrategy<pb::RequestOp> {
        use pb::request_op::Request as R;
        prop_oneof![
            range_request().prop_map(|r| Some(R::RequestRange(r))),
            put_request().prop_map(|p| Some(R::RequestPut(p))),
            delete_request().prop_map(|d| Some(R::RequestDeleteRange(d))),
            Just(None),
        ]
        .prop_map(|request| pb::RequestOp { request })
        .boxed()
    }

    fn stored_kv() -> impl Strategy<Value = KeyValue> {
        (key(), key(), 0..50u64, 0..50u64, fuzz::edge_i64()).prop_map(
            |(key, value, c, m, version)| KeyValue {
                key: key.into(),
                create_revision: Revision(c),
                mod_revision: Revision(m),
                version,
                value: value.into(),
                lease: LeaseId::NONE,
            },
        )
    }

    /// A client's mistake is never a server error.
    fn assert_not_internal(s: &Status) -> Result<(), TestCaseError> {
        prop_assert!(
            !matches!(s.code(), Code::Internal | Code::Unknown),
            "bad input answered {:?}: {}",
            s.code(),
            s.message()
        );
        Ok(())
    }

    /// Converts and validates as the KV service does before proposing.
    fn checked(txn: Result<Txn, Status>) -> Result<(), Status> {
        validate(&Command::Txn(txn?))
    }

    #[test]
    fn a_negative_revision_filter_is_etcds_filter_that_keeps_nothing() {
        let r = pb::RangeRequest {
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            limit: 1,
            max_mod_revision: -1,
            ..pb::RangeRequest::default()
        };
        // The whole range is read, then filtered: the store gets no limit.
        assert!(matches!(super::range_request(&r), Ok(read) if read.limit == 0));
        let kv = |k: &[u8], m: u64| KeyValue {
            key: bytes::Bytes::copy_from_slice(k),
            create_revision: Revision(m),
            mod_revision: Revision(m),
            version: 1,
            value: bytes::Bytes::new(),
            lease: LeaseId::NONE,
        };
        let resp = RangeResponse {
            kvs: vec![kv(b"a1", 3), kv(b"a2", 4)],
            more: false,
            count: 2,
            revision: Revision(4),
        };
        let shaped = shape_range(&r, resp);
        assert!(shaped.kvs.is_empty());
        assert_eq!(
            shaped.count, 2,
            "count stays the range's, as etcd reports it"
        );
    }

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_range_request_reads_or_is_refused(r in range_request()) {
            match super::range_request(&r) {
                Ok(read) => {
                    prop_assert!(!r.key.is_empty());
                    prop_assert_eq!(read.revision.map(|v| v.0 as i64), (r.revision > 0).then_some(r.revision));
                }
                Err(s) => {
                    prop_assert!(r.key.is_empty());
                    prop_assert_eq!(s.code(), Code::InvalidArgument);
                }
            }
        }

        #[test]
        fn any_range_answer_is_shaped_as_asked(
            r in range_request(),
            kvs in proptest::collection::vec(stored_kv(), 0..12),
        ) {
            let count = kvs.len() as u64;
            let resp = RangeResponse { kvs, more: false, count, revision: Revision(50) };
            let shaped = shape_range(&r, resp);
            prop_assert_eq!(shaped.count, count);
            // Without post-processing the store applied the limit itself
            // (`range_request` passes it on); with it, shaping does.
            if r.limit > 0 && needs_post_processing(&r) {
                prop_assert!(shaped.kvs.len() as u64 <= r.limit as u64);
            }
            if r.count_only && needs_post_processing(&r) {
                prop_assert!(shaped.kvs.is_empty());
            }
            let out = range_response(shaped);
            prop_assert!(out.count >= 0);
        }

        #[test]
        fn any_put_or_delete_is_a_command_or_refused(
            put in put_request(),
            del in delete_request(),
        ) {
            let put_txn = Txn { success: vec![Op::Put(super::put_request(put))], ..Txn::default() };
            if let Err(s) = checked(Ok(put_txn)) {
                assert_not_internal(&s)?;
            }
            let del_txn = Txn { success: vec![Op::Delete(super::delete_request(del))], ..Txn::default() };
            if let Err(s) = checked(Ok(del_txn)) {
                assert_not_internal(&s)?;
            }
        }

        #[test]
        fn any_txn_is_a_command_or_refused(t in txn_request()) {
            if let Err(s) = checked(txn(t.clone())) {
                assert_not_internal(&s)?;
            }
            // Whatever the store answers, the response follows the request.
            let answer = TxnResponse { succeeded: true, responses: Vec::new() };
            let out = txn_response(Some(&t), answer, 1);
            prop_assert!(out.responses.is_empty());
        }

        #[test]
        fn txns_nested_past_the_limit_are_refused_not_overflowed(depth in 1usize..(MAX_TXN_DEPTH + 8)) {
            use pb::request_op::Request as R;
            let mut t = pb::TxnRequest::default();
            for _ in 1..depth {
                t = pb::TxnRequest {
                    success: vec![pb::RequestOp { request: Some(R::RequestTxn(t)) }],
                    ..pb::TxnRequest::default()
                };
            }
            match checked(txn(t)) {
                Ok(()) => prop_assert!(depth <= MAX_TXN_DEPTH),
                Err(s) => {
                    prop_assert!(depth > MAX_TXN_DEPTH, "{depth}: {s:?}");
                    prop_assert_eq!(s.code(), Code::InvalidArgument);
                }
            }
        }
    }
}

#[cfg(test)]
mod inner_headers {
    use kubestore_storage::{DeleteResponse, RangeResponse, Revision};

    use super::*;

    fn range() -> OpResponse {
        OpResponse::Range(RangeResponse {
            kvs: Vec::new(),
            more: false,
            count: 0,
            revision: Revision(3),
        })
    }

    fn revisions(out: &pb::TxnResponse) -> Vec<Option<i64>> {
        use pb::response_op::Response as R;
        let mut seen = Vec::new();
        for r in &out.responses {
            match r.response.as_ref() {
                Some(R::ResponseRange(x)) => seen.push(x.header.as_ref().map(|h| h.revision)),
                Some(R::ResponsePut(x)) => seen.push(x.header.as_ref().map(|h| h.revision)),
                Some(R::ResponseDeleteRange(x)) => seen.push(x.header.as_ref().map(|h| h.revision)),
                Some(R::ResponseTxn(x)) => {
                    seen.push(x.header.as_ref().map(|h| h.revision));
                    seen.extend(revisions(x));
                }
                None => seen.push(None),
            }
        }
        seen
    }

    #[test]
    fn each_response_inside_a_txn_carries_the_revision_as_of_its_op() {
        // A txn that wrote revision 10: it started from 9. A range before
        // any change and a delete that deleted nothing answer 9; the put,
        // and everything after it, 10. A nested txn's own header is empty.
        let nothing_deleted = OpResponse::Delete(DeleteResponse {
            deleted: 0,
            prev_kvs: Vec::new(),
        });
        let answer = TxnResponse {
            succeeded: true,
            responses: vec![
                range(),
                OpResponse::Txn(TxnResponse {
                    succeeded: true,
                    responses: vec![nothing_deleted, OpResponse::Put { prev_kv: None }],
                }),
                range(),
            ],
        };
        let out = txn_response(None, answer, 10);
        assert_eq!(
            revisions(&out),
            vec![Some(9), Some(0), Some(9), Some(10), Some(10)]
        );
    }

    #[test]
    fn a_txn_that_changed_nothing_answers_the_current_revision_inside() {
        let answer = TxnResponse {
            succeeded: false,
            responses: vec![range(), range()],
        };
        assert_eq!(
            revisions(&txn_response(None, answer, 7)),
            vec![Some(7), Some(7)]
        );
    }
}

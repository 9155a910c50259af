//! The replicated command, its response and the events it produces.
//!
//! A [`Command`] is what one Raft log entry carries. It is modelled on the
//! etcd v3 transaction because both front ends reduce to it: a Kubernetes
//! create is `Txn[MOD(key) == 0 → Put]`, an update `Txn[MOD(key) == rev →
//! Put]`, exactly as a kube-apiserver talks to etcd.
//!
//! A command may be [`Command::Tagged`] with a [`ProposalId`]: however many
//! copies of it reach the log (a write retried at another leader), apply
//! runs it at most once and answers every copy with the first one's
//! response (see [`crate::session`]).

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use crate::ids::{LeaseId, Revision};

// Byte strings are `serde_bytes`: bincode then reads and writes them as
// one copy instead of byte by byte through a sequence visitor (the same
// encoding on disk and on the wire: a length, then the bytes).

/// One key's state as of its last modification (etcd's `mvccpb.KeyValue`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    /// The key, as the client wrote it (any bytes). Shared, not copied,
    /// between the write that wrote it, its pending write, its event and
    /// the current rows; encoded as `serde_bytes` encodes a `Vec<u8>`.
    pub key: Bytes,
    /// The revision that created the key (reset when it is deleted and re-created).
    pub create_revision: Revision,
    /// The revision that last modified the key.
    pub mod_revision: Revision,
    /// Number of modifications since creation; 1 on create.
    pub version: i64,
    /// The value stored at `mod_revision` (empty in a deletion event).
    /// Shared, not copied, between the command that wrote it, the rows it
    /// is staged into and the events that carry it; encoded as
    /// `serde_bytes` encodes a `Vec<u8>`.
    pub value: Bytes,
    /// Attached lease, [`LeaseId::NONE`] for none.
    pub lease: LeaseId,
}

impl KeyValue {
    /// The state a deletion event carries (as etcd's does): only the key
    /// and the deleting revision.
    pub fn deleted(key: Bytes, revision: Revision) -> Self {
        Self {
            key,
            create_revision: Revision::ZERO,
            mod_revision: revision,
            version: 0,
            value: Bytes::new(),
            lease: LeaseId::NONE,
        }
    }
}

/// What happened to the key in an [`Event`] (etcd's `mvccpb.Event.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// The key was created or its value or lease changed.
    Put,
    /// The key was deleted (by a delete, or with its lease).
    Delete,
}

/// One change to one key, as watchers see it. A deletion carries the key and
/// the deletion's revision in `kv.mod_revision`, and the last state in
/// `prev_kv`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// A put or a deletion.
    pub kind: EventKind,
    /// The key's state after the change; its `mod_revision` is the
    /// revision of the change.
    pub kv: KeyValue,
    /// The key's state before the change, `None` if it did not exist.
    pub prev_kv: Option<KeyValue>,
}

/// One revision's events as the event log hands them out: shared, not
/// copied, by every reader of the revision (each node's watch cache, every
/// etcd watcher), which copies only what it keeps or sends.
pub type RevisionEvents = (Revision, std::sync::Arc<[Event]>);

/// The key selection shared by range, delete and compare: one key when
/// `range_end` is empty; otherwise `[key, range_end)`, where a `range_end`
/// of `[0]` means "every key >= key" (etcd's convention).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRange {
    /// The key, or the first key of the range.
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    /// Empty for the single key `key`; `[0]` for every key from `key` on;
    /// otherwise the exclusive end of the range.
    #[serde(with = "serde_bytes")]
    pub range_end: Vec<u8>,
}

impl KeyRange {
    /// The one key `key`.
    pub fn single(key: impl Into<Vec<u8>>) -> Self {
        Self {
            key: key.into(),
            range_end: Vec::new(),
        }
    }

    /// Every key starting with `prefix`.
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let key = prefix.into();
        let range_end = prefix_end(&key);
        Self { key, range_end }
    }

    /// Whether this selects one key (an empty `range_end`).
    pub fn is_single(&self) -> bool {
        self.range_end.is_empty()
    }

    /// The exclusive upper bound of the scan, `None` for "to the end".
    pub fn end_bound(&self) -> Option<Vec<u8>> {
        if self.range_end.is_empty() {
            let mut end = self.key.clone();
            end.push(0);
            Some(end)
        } else if self.range_end == [0] {
            None
        } else {
            Some(self.range_end.clone())
        }
    }

    /// Whether `key` is selected by this range.
    pub fn contains(&self, key: &[u8]) -> bool {
        if self.range_end.is_empty() {
            return key == self.key.as_slice();
        }
        key >= self.key.as_slice() && self.end_bound().is_none_or(|end| key < end.as_slice())
    }
}

/// The smallest key greater than every key with this prefix; `[0]` (all
/// keys) when the prefix is empty or all `0xFF`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A read of a key range, at the current revision or an older one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeRequest {
    /// The keys to read.
    pub range: KeyRange,
    /// Maximum keys returned, 0 for no limit.
    pub limit: u64,
    /// Read at this revision; `None` for the current one.
    pub revision: Option<Revision>,
    /// Return keys and metadata without values (etcd's `keys_only`).
    pub keys_only: bool,
    /// Return only `count`, no key-values (etcd's `count_only`).
    pub count_only: bool,
}

/// The answer to a [`RangeRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeResponse {
    /// The key-values read, ascending by key, at most `limit` of them.
    pub kvs: Vec<KeyValue>,
    /// More keys matched than `limit` allowed.
    pub more: bool,
    /// The number of keys in the range (ignoring `limit`).
    pub count: u64,
    /// The revision the range was read at.
    pub revision: Revision,
}

/// How a [`Compare`] relates the key's attribute (left) to its target
/// (right).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    /// The attribute equals the target.
    Equal,
    /// The attribute differs from the target.
    NotEqual,
    /// The attribute is greater than the target.
    Greater,
    /// The attribute is less than the target.
    Less,
}

/// Which attribute of a key a [`Compare`] checks, and the value it is
/// compared with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    /// Number of modifications since creation (0 when absent).
    Version(i64),
    /// Creation revision (0 when absent).
    Create(Revision),
    /// Last modification revision (0 when absent).
    Mod(Revision),
    /// The value (an absent key compares as an empty value).
    Value(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The attached lease ([`LeaseId::NONE`] when absent or unleased).
    Lease(LeaseId),
}

/// A guard of a transaction, checked against every key of `range` (all must
/// hold; an absent single key compares as version/create/mod 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    /// The keys whose attribute is compared.
    pub range: KeyRange,
    /// How the attribute must relate to the target.
    pub op: CompareOp,
    /// The attribute and the value it is compared with.
    pub target: CompareTarget,
}

impl Compare {
    /// A guard on `key`'s last modification revision (0: the key must
    /// not exist, with [`CompareOp::Equal`]). `rev` may be a bare `u64`,
    /// as the front ends parse it (a `resourceVersion`).
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, rev: impl Into<Revision>) -> Self {
        Self {
            range: KeyRange::single(key),
            op,
            target: CompareTarget::Mod(rev.into()),
        }
    }

    /// A guard on `key`'s creation revision (0: the key must not exist,
    /// with [`CompareOp::Equal`]).
    pub fn create_revision(
        key: impl Into<Vec<u8>>,
        op: CompareOp,
        rev: impl Into<Revision>,
    ) -> Self {
        Self {
            range: KeyRange::single(key),
            op,
            target: CompareTarget::Create(rev.into()),
        }
    }
}

/// Write one key (etcd's `PutRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutRequest {
    /// The key to write. Shared with the key's new state, as the value
    /// is; encoded as `serde_bytes` encodes a `Vec<u8>`.
    pub key: Bytes,
    /// The new value (ignored with `ignore_value`). Shared with the
    /// key's new state; encoded as `serde_bytes` encodes a `Vec<u8>`.
    pub value: Bytes,
    /// The lease to attach the key to, [`LeaseId::NONE`] for none; the
    /// lease must exist, or the command is refused.
    pub lease: LeaseId,
    /// Answer with the key's previous state.
    pub prev_kv: bool,
    /// Keep the current value (etcd `ignore_value`); the key must exist.
    pub ignore_value: bool,
    /// Keep the current lease (etcd `ignore_lease`); the key must exist.
    pub ignore_lease: bool,
}

impl PutRequest {
    /// A plain put of `value` at `key`: no lease, no previous state asked.
    pub fn new(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Self {
            key: Bytes::from(key.into()),
            value: Bytes::from(value.into()),
            lease: LeaseId::NONE,
            prev_kv: false,
            ignore_value: false,
            ignore_lease: false,
        }
    }
}

/// Delete every key of a range (etcd's `DeleteRangeRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRequest {
    /// The keys to delete.
    pub range: KeyRange,
    /// Answer with the deleted keys' last states.
    pub prev_kv: bool,
}

/// One operation of a transaction branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// A read at the transaction's revision (before its writes).
    Range(RangeRequest),
    /// A write of one key.
    Put(PutRequest),
    /// A deletion of a range.
    Delete(DeleteRequest),
    /// A nested transaction (at most [`MAX_TXN_DEPTH`] levels in all).
    Txn(Txn),
}

/// If every compare holds, run `success`, else `failure`. All writes of one
/// transaction share one new revision; a transaction that writes nothing
/// does not advance the revision.
///
/// Decoding refuses transactions nested more than [`MAX_TXN_DEPTH`] deep
/// (see `TxnDepthGuard` below).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Txn {
    /// The guards; all must hold for `success` to run (none: it runs).
    pub compare: Vec<Compare>,
    /// The operations run when every guard holds.
    pub success: Vec<Op>,
    /// The operations run otherwise.
    pub failure: Vec<Op>,
}

/// The deepest nesting of transactions a command may have: a command's own
/// txn is level 1, a txn among its ops level 2, and so on. etcd has no
/// limit of its own beyond gRPC's decoder, whose recursion limit (prost's
/// 100 messages, two per level: `TxnRequest` then `RequestOp`) stops an
/// etcd request at about 50 levels; the Kubernetes front end nests 2.
pub const MAX_TXN_DEPTH: usize = 64;

thread_local! {
    /// How many [`Txn`]s the decoder on this thread is inside of.
    static TXN_DECODE_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Bounds the nesting of transactions while they are decoded.
///
/// A command comes off the wire (a forwarded write, an `AppendEntries`
/// from a peer) as bincode, and decoding a `Txn` inside an `Op` inside a
/// `Txn` recurses: a forged payload of a few bytes per level, millions of
/// levels deep, would overflow the stack and kill the process before any
/// validation could look at the result (and so would dropping or applying
/// it). Bincode is not self-describing, so there is no cheap way to measure
/// the depth before decoding; instead every `Txn` decode enters this guard,
/// which counts the levels the decoder is in on this thread (decoding is
/// synchronous, so the thread's count is this decode's) and refuses the
/// level past [`MAX_TXN_DEPTH`]. The guard leaves its level on drop, so the
/// count is right again after an error too. The wire format is unchanged.
struct TxnDepthGuard;

impl TxnDepthGuard {
    fn enter() -> Result<Self, usize> {
        TXN_DECODE_DEPTH.with(|depth| {
            let level = depth.get() + 1;
            if level > MAX_TXN_DEPTH {
                return Err(level);
            }
            depth.set(level);
            Ok(TxnDepthGuard)
        })
    }
}

impl Drop for TxnDepthGuard {
    fn drop(&mut self) {
        TXN_DECODE_DEPTH.with(|depth| depth.set(depth.get().saturating_sub(1)));
    }
}

impl<'de> Deserialize<'de> for Txn {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// `Txn`'s fields as the derived code decodes them (same encoding).
        #[derive(Deserialize)]
        #[serde(rename = "Txn")]
        struct TxnFields {
            compare: Vec<Compare>,
            success: Vec<Op>,
            failure: Vec<Op>,
        }
        let _level = TxnDepthGuard::enter().map_err(|level| {
            serde::de::Error::custom(format_args!(
                "transactions nested {level} deep; at most {MAX_TXN_DEPTH} levels are allowed"
            ))
        })?;
        let TxnFields {
            compare,
            success,
            failure,
        } = TxnFields::deserialize(deserializer)?;
        Ok(Txn {
            compare,
            success,
            failure,
        })
    }
}

/// A lease: keys attached to it are deleted when it is revoked or expires.
/// Expiry is decided by the leader (wall clock) and proposed as a revoke,
/// so the record holds no time: only the TTL and how often it was renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The lease's id.
    pub id: LeaseId,
    /// Seconds the lease lives after a grant or a renewal.
    pub ttl: i64,
    /// Bumped by every keep-alive: a change restarts the TTL on every node.
    pub renewals: u64,
}

/// Names one proposal of one process, unique in the cluster for ever: every
/// copy of a retried write carries the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProposalId {
    /// The node whose process made the proposal.
    pub origin: crate::ids::NodeId,
    /// That process's boot epoch: strictly greater for every later process
    /// of the node (`Store::boot_epoch`).
    pub epoch: u64,
    /// Increasing per process, from 1.
    pub seq: u64,
}

impl fmt::Display for ProposalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.origin, self.epoch, self.seq)
    }
}

/// What one Raft log entry asks the state machine to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// An etcd-style transaction: guards, then one branch of operations.
    Txn(Txn),
    /// Drop history below `revision`; reads at older revisions then fail.
    Compact {
        /// The new compaction point: history below it goes.
        revision: Revision,
    },
    /// Create lease `id` (refused if it exists).
    LeaseGrant {
        /// The new lease's id (never [`LeaseId::NONE`]).
        id: LeaseId,
        /// Its time to live in seconds, from the grant and every renewal.
        ttl: i64,
    },
    /// Delete lease `id` and every key attached to it, in one revision.
    LeaseRevoke {
        /// The lease to revoke.
        id: LeaseId,
    },
    /// Renew lease `id` (no new revision).
    LeaseKeepAlive {
        /// The lease to renew.
        id: LeaseId,
    },
    /// Expire lease `id` as [`Command::LeaseRevoke`] does, but only if it
    /// was renewed exactly `renewals` times: the count its proposer saw
    /// when its clock ran out. A renewal committed after that decision
    /// (for instance while the proposer was a paused or deposed leader)
    /// refuses the expiry with [`ApplyError::LeaseRenewed`], so an expiry
    /// decided on a stale view never revokes a lease the majority kept
    /// alive.
    LeaseExpire {
        /// The lease whose clock ran out.
        id: LeaseId,
        /// The renewal count the proposer's clock last saw.
        renewals: u64,
    },
    /// Several commands proposed together as one log entry (group commit):
    /// applied in order, each exactly as if it were its own entry (its own
    /// revision, events and verdict), and answered with one [`Response`]
    /// each in [`CommandResult::Batch`]. A batch never holds a compaction
    /// or another batch ([`Command::is_batchable`]); such a member is
    /// refused with [`ApplyError::NotBatchable`].
    Batch(Vec<Command>),
    /// `cmd`, applied at most once whatever number of copies of it are
    /// committed (the session rules of [`crate::session`]), and answered
    /// with `cmd`'s own [`Response`]. `floor` is the smallest seq its origin
    /// still had in flight when this copy was sent: every proposal of the
    /// origin below it is finished and will never be retried. `cmd` is one
    /// plain command: a batch or another tagged command inside is refused
    /// with [`ApplyError::MalformedProposal`].
    Tagged {
        /// The proposal every copy of this write carries.
        id: ProposalId,
        /// The origin's smallest seq still in flight when this copy left.
        floor: u64,
        /// The command itself.
        cmd: Box<Command>,
    },
}

impl Command {
    /// Whether the command may ride in a [`Command::Batch`]. A compaction
    /// goes alone: a batch's members are applied against one view whose
    /// compaction point does not move.
    pub fn is_batchable(&self) -> bool {
        match self {
            Command::Compact { .. } | Command::Batch(_) => false,
            Command::Tagged { cmd, .. } => cmd.is_batchable(),
            _ => true,
        }
    }

    /// Whether applying the command may scan a range of the store rather
    /// than read a few keys: a lease revoke or expiry (the lease's keys), a
    /// transaction with a multi-key compare, range or
    /// delete. The state machine applies such entries off the async
    /// workers.
    pub fn may_scan(&self) -> bool {
        fn txn_scans(txn: &Txn) -> bool {
            txn.compare.iter().any(|c| !c.range.is_single())
                || txn.success.iter().chain(&txn.failure).any(|op| match op {
                    Op::Range(r) => !r.range.is_single(),
                    Op::Delete(d) => !d.range.is_single(),
                    Op::Put(_) => false,
                    Op::Txn(t) => txn_scans(t),
                })
        }
        match self {
            Command::LeaseRevoke { .. } | Command::LeaseExpire { .. } => true,
            Command::Txn(txn) => txn_scans(txn),
            Command::Batch(cmds) => cmds.iter().any(Command::may_scan),
            Command::Tagged { cmd, .. } => cmd.may_scan(),
            // A compaction's apply moves the compaction point only.
            Command::Compact { .. }
            | Command::LeaseGrant { .. }
            | Command::LeaseKeepAlive { .. } => false,
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Txn(txn) => write!(
                f,
                "txn(compare={}, success={}, failure={})",
                txn.compare.len(),
                txn.success.len(),
                txn.failure.len()
            ),
            Command::Compact { revision } => write!(f, "compact({revision})"),
            Command::LeaseGrant { id, ttl } => write!(f, "lease_grant({id}, ttl={ttl})"),
            Command::LeaseRevoke { id } => write!(f, "lease_revoke({id})"),
            Command::LeaseKeepAlive { id } => write!(f, "lease_keep_alive({id})"),
            Command::LeaseExpire { id, renewals } => {
                write!(f, "lease_expire({id}, renewals={renewals})")
            }
            Command::Batch(cmds) => write!(f, "batch({})", cmds.len()),
            Command::Tagged { id, floor, cmd } => {
                write!(f, "{cmd} [proposal {id}, floor {floor}]")
            }
        }
    }
}

/// The answer to a [`DeleteRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteResponse {
    /// How many keys were deleted.
    pub deleted: u64,
    /// Their last states, when the request asked (`prev_kv`).
    pub prev_kvs: Vec<KeyValue>,
}

/// The answer to one [`Op`], in the same shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResponse {
    /// What a range read.
    Range(RangeResponse),
    /// A put's answer.
    Put {
        /// The key's previous state, when asked and it existed.
        prev_kv: Option<KeyValue>,
    },
    /// What a delete removed.
    Delete(DeleteResponse),
    /// A nested transaction's answer.
    Txn(TxnResponse),
}

/// The answer to a [`Txn`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResponse {
    /// Whether every guard held (so `success` ran, else `failure`).
    pub succeeded: bool,
    /// One answer per operation of the branch that ran, in order.
    pub responses: Vec<OpResponse>,
}

/// A deterministic refusal decided inside apply: every node reaches the same
/// verdict, and the log entry changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ApplyError {
    /// A range at a revision below the compaction point, or a compaction
    /// to a revision at or below it.
    #[error("mvcc: required revision has been compacted")]
    Compacted,
    /// A range at, or a compaction to, a revision above the current one.
    #[error("mvcc: required revision is a future revision")]
    FutureRevision,
    /// A transaction branch that writes the same key twice (as etcd refuses).
    #[error("duplicate key given in txn request")]
    DuplicateKey,
    /// A put with `ignore_value` or `ignore_lease` of a key that does not
    /// exist.
    #[error("key not found")]
    KeyNotFound,
    /// A put attaching, or a revoke, keep-alive or expiry of, a lease that
    /// does not exist.
    #[error("requested lease not found")]
    LeaseNotFound,
    /// A grant of an id that is taken.
    #[error("lease already exists")]
    LeaseExists,
    /// A [`Command::LeaseExpire`] whose lease was renewed since the expiry
    /// was decided: the lease lives on.
    #[error("lease was renewed since its expiry was decided")]
    LeaseRenewed,
    /// A [`Command::Batch`] member that may not be batched (a compaction,
    /// a batch).
    #[error("command cannot be batched")]
    NotBatchable,
    /// A tagged proposal from a process that no longer runs (its node has
    /// restarted since), or one its origin had already given up on: it was
    /// not applied now, and may or may not have been applied earlier.
    #[error("stale proposal: its origin has given up on it; it may or may not have been applied")]
    StaleProposal,
    /// A copy of a proposal that was applied already, whose response was
    /// too large to keep: the write happened, its answer is lost.
    #[error("duplicate proposal: it was applied already, but its response was too large to keep")]
    DuplicateResponseDropped,
    /// A tagged proposal wrapping a batch or another tagged command.
    #[error("a tagged proposal must wrap one plain command")]
    MalformedProposal,
    /// The ranges of a transaction return more than apply holds for one
    /// command ([`crate::apply::MAX_TXN_RANGE_BYTES`], or what its log
    /// entry's earlier commands left of [`crate::apply::MAX_ENTRY_RANGE_BYTES`]):
    /// refused, nothing written. A limit, or a Range outside a Txn, reads it.
    #[error("the ranges of this transaction return too much data to apply")]
    ResponseTooLarge,
}

/// The state machine's answer to one log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The store's revision after this entry (the new one if it wrote).
    pub revision: Revision,
    /// What the command did, or why apply refused it (then it changed
    /// nothing).
    pub result: Result<CommandResult, ApplyError>,
}

/// What an applied command did, by command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResult {
    /// A transaction's answer.
    Txn(TxnResponse),
    /// A compaction was done.
    Compacted,
    /// The lease after a grant or keep-alive.
    Lease(LeaseRecord),
    /// A revoke, with the keys it deleted.
    LeaseRevoked {
        /// How many keys went with the lease.
        deleted: u64,
    },
    /// One response per command of a [`Command::Batch`], in order.
    Batch(Vec<Response>),
    /// A non-command entry (blank or membership): nothing to answer.
    None,
}

impl Default for Response {
    fn default() -> Self {
        Self {
            revision: Revision::ZERO,
            result: Ok(CommandResult::None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_command_is_batchable_as_its_inner_one_and_shows_its_id() {
        let tag = |cmd: Command| Command::Tagged {
            id: ProposalId {
                origin: 2,
                epoch: 5,
                seq: 17,
            },
            floor: 15,
            cmd: Box::new(cmd),
        };
        let keep_alive = tag(Command::LeaseKeepAlive { id: LeaseId(9) });
        assert!(keep_alive.is_batchable());
        assert!(!tag(Command::Compact {
            revision: Revision(3)
        })
        .is_batchable());
        assert_eq!(
            keep_alive.to_string(),
            "lease_keep_alive(9) [proposal 2.5.17, floor 15]"
        );
    }

    /// A txn nested `depth` levels deep (the innermost empty), as a value.
    fn nested(depth: usize) -> Txn {
        let mut txn = Txn::default();
        for _ in 1..depth {
            txn = Txn {
                success: vec![Op::Txn(txn)],
                ..Txn::default()
            };
        }
        txn
    }

    /// The bincode encoding of `Command::Txn(nested(depth))`, written by
    /// hand, so that a depth far too large to build (or drop) as a value
    /// can be encoded.
    fn nested_bytes(depth: usize) -> Vec<u8> {
        let mut bytes = 0u32.to_le_bytes().to_vec(); // Command::Txn
        for _ in 1..depth {
            bytes.extend(0u64.to_le_bytes()); // no compares
            bytes.extend(1u64.to_le_bytes()); // one success op
            bytes.extend(3u32.to_le_bytes()); // Op::Txn
        }
        bytes.extend([0u64.to_le_bytes(); 3].concat()); // the innermost txn
        for _ in 1..depth {
            bytes.extend(0u64.to_le_bytes()); // no failure ops
        }
        bytes
    }

    #[test]
    fn decoding_refuses_txns_nested_too_deep_without_overflowing_the_stack() {
        // The hand-made encoding is bincode's.
        let three = Command::Txn(nested(3));
        assert_eq!(bincode::serialize(&three).expect("encode"), nested_bytes(3));

        let deepest = Command::Txn(nested(MAX_TXN_DEPTH));
        let decoded: Command =
            bincode::deserialize(&nested_bytes(MAX_TXN_DEPTH)).expect("the deepest allowed");
        assert_eq!(decoded, deepest);

        let error = bincode::deserialize::<Command>(&nested_bytes(MAX_TXN_DEPTH + 1))
            .expect_err("one level too deep");
        assert!(error.to_string().contains("nested"), "{error}");
        // A million levels: refused at level 65, long before the stack ends.
        let error = bincode::deserialize::<Command>(&nested_bytes(1_000_000))
            .expect_err("a million levels");
        assert!(error.to_string().contains("nested"), "{error}");

        // The guard let go of every level, refused or not: the next decode
        // starts from zero.
        let again: Command = bincode::deserialize(&nested_bytes(MAX_TXN_DEPTH)).expect("again");
        assert_eq!(again, deepest);
        // Siblings are not nesting: a batch of many txns decodes.
        let wide = Command::Batch(vec![Command::Txn(nested(MAX_TXN_DEPTH)); 100]);
        let encoded = bincode::serialize(&wide).expect("encode");
        assert_eq!(
            bincode::deserialize::<Command>(&encoded).expect("wide"),
            wide
        );
    }

    /// `serde_bytes` and `Bytes` (keys and values alike) change how byte
    /// strings are visited and held, not how they are encoded: rows and
    /// log entries written before either read the same.
    #[test]
    fn byte_strings_encode_as_before() {
        #[derive(Serialize)]
        struct PlainKeyValue {
            key: Vec<u8>,
            create_revision: Revision,
            mod_revision: Revision,
            version: i64,
            value: Vec<u8>,
            lease: i64,
        }
        let kv = KeyValue {
            key: Bytes::from_static(b"/registry/pods/default/web"),
            create_revision: Revision(3),
            mod_revision: Revision(9),
            version: 4,
            value: vec![0, 1, 2, 255, 128].into(),
            lease: LeaseId(7),
        };
        let plain = PlainKeyValue {
            key: kv.key.to_vec(),
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            version: kv.version,
            value: kv.value.to_vec(),
            lease: kv.lease.0,
        };
        let encoded = bincode::serialize(&kv).expect("encode");
        assert_eq!(encoded, bincode::serialize(&plain).expect("encode plain"));
        assert_eq!(
            bincode::deserialize::<KeyValue>(&encoded).expect("decode"),
            kv
        );

        #[derive(Serialize)]
        struct PlainPutRequest {
            key: Vec<u8>,
            value: Vec<u8>,
            lease: i64,
            prev_kv: bool,
            ignore_value: bool,
            ignore_lease: bool,
        }
        let put = PutRequest {
            lease: LeaseId(7),
            prev_kv: true,
            ..PutRequest::new("/registry/pods/default/web", vec![0, 1, 2, 255, 128])
        };
        let plain = PlainPutRequest {
            key: put.key.to_vec(),
            value: put.value.to_vec(),
            lease: put.lease.0,
            prev_kv: put.prev_kv,
            ignore_value: put.ignore_value,
            ignore_lease: put.ignore_lease,
        };
        let encoded = bincode::serialize(&put).expect("encode");
        assert_eq!(encoded, bincode::serialize(&plain).expect("encode plain"));
        assert_eq!(
            bincode::deserialize::<PutRequest>(&encoded).expect("decode"),
            put
        );
    }
}

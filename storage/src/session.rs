//! Exactly-once proposals: the replicated session table.
//!
//! A write retried at another leader (the first one was unreachable, or
//! stepped down after appending it) may be committed twice. Every
//! [`Command::Tagged`](crate::Command::Tagged) copy carries the same
//! [`ProposalId`](crate::ProposalId) `(origin, epoch, seq)` and the origin's
//! `floor` (the smallest seq it still has in flight), and apply keeps one
//! session per origin node: `{ epoch, floor, seq → recorded answer }`.
//! The rules, in order, for a tagged command (see `apply::apply_tagged`):
//!
//! 1. `epoch < session.epoch`: the copy comes from a process of that node
//!    that no longer runs, and nobody waits for it: refused with
//!    [`ApplyError::StaleProposal`](crate::ApplyError::StaleProposal).
//! 2. `epoch > session.epoch`: a new process; the session is replaced
//!    (that epoch, floor 0, no records).
//! 3. `session.floor = max(session.floor, floor)`; records below it go.
//! 4. `seq < session.floor`: the origin has finished with it (answered,
//!    failed or timed out), so this is a late copy: refused as stale. It
//!    may or may not have been applied before; its caller was told so.
//! 5. `seq` recorded: a duplicate, answered with the recorded response (the
//!    original revision and result); nothing is applied.
//! 6. Otherwise the inner command is applied and its response recorded
//!    (only a marker if it encodes to more than
//!    [`MAX_RECORDED_RESPONSE_BYTES`]: a later copy then gets
//!    [`ApplyError::DuplicateResponseDropped`](crate::ApplyError::DuplicateResponseDropped)).
//!
//! Why this is at most once: a record leaves the table only when its origin
//! has finished with it (rule 3 evicts below the floor the origin itself
//! sent), and from then on every copy of it is refused by rule 4; a copy
//! from a process that died is refused by rule 1. The decision is made
//! inside apply, from replicated state only, so every node makes the same
//! one, and it does not depend on what the command does: it holds for a
//! blind put or a lease keep-alive as for a guarded Kubernetes update.
//! The table is bounded by what its origins have in flight (plus what they
//! finished since their last proposal).
//!
//! On disk the table is the `sessions` column family (see
//! [`crate::schema`]), written in the same batch as the entry's data and
//! last-applied id, and carried by snapshots: per origin a state row, and
//! one row per log entry holding the answers that entry recorded for the
//! origin (a batch entry of 30 puts from one node makes one row, not 30;
//! format 3 made a row per proposal, and those are still read). A row
//! goes, in one point delete, once the floor has passed all of its seqs.
//! The state machine keeps a mirror of every session's epoch, floor,
//! recorded seqs and rows in memory (`session_table::SessionTable`), so
//! the common case (a proposal seen for the first time) reads nothing from
//! disk; a duplicate reads its recorded response.

use serde::{Deserialize, Serialize};

use crate::command::Response;
use crate::engine::{Batch, Engine, Source};
use crate::error::StoreError;
use crate::ids::NodeId;
use crate::schema::{self, Cf, SessionRecordRow, SessionRowKey};

/// The largest response (bincode-encoded) the table keeps for a duplicate
/// to be answered with; a larger one is recorded as [`Recorded::Dropped`].
pub const MAX_RECORDED_RESPONSE_BYTES: u64 = 64 * 1024;

/// One origin's session: which process of the node it follows, and below
/// which seq that process has finished with every proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SessionState {
    /// The boot epoch of the origin's live process (the newest seen).
    pub epoch: u64,
    /// Every seq of that process below this is finished: its copies are
    /// refused as stale.
    pub floor: u64,
}

/// What the table keeps of one applied proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Recorded {
    /// The response it was answered with.
    Response(Response),
    /// Its response was larger than [`MAX_RECORDED_RESPONSE_BYTES`].
    Dropped,
}

impl Recorded {
    /// What to keep of `response`.
    pub fn of(response: &Response) -> Result<Self, StoreError> {
        Ok(
            if bincode::serialized_size(response)? <= MAX_RECORDED_RESPONSE_BYTES {
                Recorded::Response(response.clone())
            } else {
                Recorded::Dropped
            },
        )
    }
}

/// The change one tagged command makes to its origin's session. The
/// records below the new floor go with it (rule 3); the state machine
/// stages an entry's updates together (`SessionTable::stage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUpdate {
    /// The node whose session changes.
    pub origin: NodeId,
    /// The session after the command.
    pub state: SessionState,
    /// The session was replaced (a newer epoch): every earlier record of
    /// the origin goes first.
    pub replaced: bool,
    /// The proposal applied by this command and what is kept of its answer.
    pub recorded: Option<(u64, Recorded)>,
}

/// Stages the deletion of every record row of `origin` (a new epoch
/// replaced its session). Rare (once per restart of a node): a range
/// delete is fine here.
pub(crate) fn stage_records_cleared(
    batch: &mut Batch<'_>,
    origin: NodeId,
) -> Result<(), StoreError> {
    batch.delete_range(
        Cf::Sessions,
        &schema::session_record_key(origin, 0),
        &schema::session_records_end(origin),
    )
}

/// Stages one row of `origin`'s answers, recorded by one log entry:
/// `records` is not empty, and `first` is the smallest of its seqs.
pub(crate) fn stage_group(
    batch: &mut Batch<'_>,
    origin: NodeId,
    first: u64,
    records: &[(u64, &Recorded)],
) -> Result<(), StoreError> {
    batch.put(
        Cf::Sessions,
        &schema::session_group_key(origin, first),
        &bincode::serialize(records)?,
    )
}

/// Stages `origin`'s session state row.
pub(crate) fn stage_state(
    batch: &mut Batch<'_>,
    origin: NodeId,
    state: &SessionState,
) -> Result<(), StoreError> {
    batch.put(
        Cf::Sessions,
        &schema::session_key(origin),
        &bincode::serialize(state)?,
    )
}

/// Reads `origin`'s session state row.
pub(crate) fn read_state<S: Source + ?Sized>(
    src: &S,
    origin: NodeId,
) -> Result<Option<SessionState>, StoreError> {
    match src.get(Cf::Sessions, &schema::session_key(origin))? {
        Some(v) => Ok(Some(bincode::deserialize(&v)?)),
        None => Ok(None),
    }
}

/// The answers one record row holds, by seq.
pub(crate) type RowRecords = Vec<(u64, Recorded)>;

/// The answers a record row holds, by seq: one (format 3) or a group.
pub(crate) fn decode_records(
    row: SessionRecordRow,
    value: &[u8],
) -> Result<RowRecords, StoreError> {
    if row.group {
        Ok(bincode::deserialize(value)?)
    } else {
        Ok(vec![(row.first, bincode::deserialize(value)?)])
    }
}

/// Every record row of `origin`, in key order, with its answers.
pub(crate) fn read_records<S: Source + ?Sized>(
    src: &S,
    origin: NodeId,
) -> Result<Vec<(SessionRecordRow, RowRecords)>, StoreError> {
    let start = schema::session_record_key(origin, 0);
    let end = schema::session_records_end(origin);
    let mut rows = Vec::new();
    for row in src.scan(Cf::Sessions, &start, Some(&end))? {
        let (k, v) = row?;
        match schema::split_session_key(&k) {
            Some(SessionRowKey::Records(o, row)) if o == origin => {
                rows.push((row, decode_records(row, &v)?));
            }
            _ => return Err(StoreError::Corrupt("malformed sessions row".into())),
        }
    }
    Ok(rows)
}

/// Reads the record of `origin`'s proposal `seq`: a scan of the origin's
/// rows, which the floor keeps to what it has in flight. Only a duplicate
/// copy asks (the mirror answers whether there is one).
pub(crate) fn read_record<S: Source + ?Sized>(
    src: &S,
    origin: NodeId,
    seq: u64,
) -> Result<Option<Recorded>, StoreError> {
    for (_, records) in read_records(src, origin)? {
        if let Some((_, recorded)) = records.into_iter().find(|(s, _)| *s == seq) {
            return Ok(Some(recorded));
        }
    }
    Ok(None)
}

/// Raises this node's boot epoch (a synced write, so no later process can
/// reuse it) and returns it: the previous one plus one, or the wall clock in
/// microseconds if that is larger. The clock keeps epochs increasing even
/// across a lost data directory: a node that rejoins with an empty disk
/// under the same id must not start below the epoch the replicated session
/// table remembers for it, or rule 1 would refuse all its proposals.
pub(crate) fn raise_boot_epoch(engine: &Engine) -> Result<u64, StoreError> {
    let previous = match engine.get(Cf::RaftMeta, schema::RAFT_BOOT_EPOCH)? {
        Some(v) => schema::decode_u64(&v)
            .ok_or_else(|| StoreError::Corrupt("boot epoch row is not 8 bytes".into()))?,
        None => 0,
    };
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let epoch = previous.saturating_add(1).max(clock);
    let mut batch = engine.batch();
    batch.put(
        Cf::RaftMeta,
        schema::RAFT_BOOT_EPOCH,
        &schema::u64_key(epoch),
    )?;
    engine.write(batch, true)?;
    Ok(epoch)
}

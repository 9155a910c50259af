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
//! last-applied id, and carried by snapshots. The state machine keeps a
//! mirror of every session's epoch, floor and recorded seqs in memory
//! (`session_table::SessionTable`), so the common case (a proposal seen for the first
//! time) reads nothing from disk; a duplicate reads its recorded response.

use serde::{Deserialize, Serialize};

use crate::command::Response;
use crate::engine::{Batch, Engine, Source};
use crate::error::StoreError;
use crate::ids::NodeId;
use crate::schema::{self, Cf};

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

/// The change one tagged command makes to its origin's session, staged in
/// the entry's write batch in order with the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUpdate {
    /// The node whose session changes.
    pub origin: NodeId,
    /// The session after the command.
    pub state: SessionState,
    /// The session was replaced (a newer epoch): every earlier record of
    /// the origin goes first.
    pub replaced: bool,
    /// Records the floor passed, dropped.
    pub evicted: Vec<u64>,
    /// The proposal applied by this command and what is kept of its answer.
    pub recorded: Option<(u64, Recorded)>,
}

/// Stages `update`'s records into `batch`: the evictions and the new
/// record. Its state row is staged by [`stage_state`], once per entry
/// with the origin's last state.
pub(crate) fn stage_records(
    batch: &mut Batch<'_>,
    update: &SessionUpdate,
) -> Result<(), StoreError> {
    let origin = update.origin;
    if update.replaced {
        // Rare (once per restart of a node): a range delete is fine here.
        batch.delete_range(
            Cf::Sessions,
            &schema::session_record_key(origin, 0),
            &schema::session_record_key(origin, u64::MAX),
        )?;
        batch.delete(Cf::Sessions, &schema::session_record_key(origin, u64::MAX))?;
    }
    // Point deletes, not a range: the floor moves with nearly every write,
    // and a range tombstone per write would pile up.
    for seq in &update.evicted {
        batch.delete(Cf::Sessions, &schema::session_record_key(origin, *seq))?;
    }
    if let Some((seq, recorded)) = &update.recorded {
        batch.put(
            Cf::Sessions,
            &schema::session_record_key(origin, *seq),
            &bincode::serialize(recorded)?,
        )?;
    }
    Ok(())
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

/// Reads the record of `origin`'s proposal `seq`.
pub(crate) fn read_record<S: Source + ?Sized>(
    src: &S,
    origin: NodeId,
    seq: u64,
) -> Result<Option<Recorded>, StoreError> {
    match src.get(Cf::Sessions, &schema::session_record_key(origin, seq))? {
        Some(v) => Ok(Some(bincode::deserialize(&v)?)),
        None => Ok(None),
    }
}

/// The seqs of `origin` with a record below `below`, ascending.
pub(crate) fn read_seqs_below<S: Source + ?Sized>(
    src: &S,
    origin: NodeId,
    below: u64,
) -> Result<Vec<u64>, StoreError> {
    let start = schema::session_record_key(origin, 0);
    let end = schema::session_record_key(origin, below);
    let mut seqs = Vec::new();
    for row in src.scan(Cf::Sessions, &start, Some(&end))? {
        let (k, _) = row?;
        match schema::split_session_key(&k) {
            Some((o, Some(seq))) if o == origin => seqs.push(seq),
            _ => return Err(StoreError::Corrupt("malformed sessions row".into())),
        }
    }
    Ok(seqs)
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

//! Pure apply: given a [`Command`] and a read view of the store, decide the
//! response, the key writes and the watch events. No I/O happens here; the
//! state machine turns an [`Applied`] into one atomic write batch.
//!
//! Every check that decides a client's fate (compare guards, duplicate keys,
//! compaction bounds, and whether a tagged proposal is applied at all, see
//! [`crate::session`]) lives here, so every node reaches the same verdict.
//!
//! This file applies one command: compaction, the lease commands, a
//! transaction (run by `txn`) and the session rules of a tagged proposal.
//! `batch` applies a whole log entry ([`apply_entry`]): a
//! [`Command::Batch`] command by command, each over a view of the ones
//! before it. `txn` runs a transaction's compares and operations over its
//! own pending writes. Dependencies point one way: `batch` → this file →
//! `txn` (and `batch` → `txn` for the overlay scan both share).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::command::{
    ApplyError, Command, CommandResult, DeleteRequest, Event, KeyRange, KeyValue, LeaseRecord,
    ProposalId, Response, Revision,
};
use crate::error::StoreError;
use crate::ids::LeaseId;
use crate::session::{Recorded, SessionState, SessionUpdate};
use crate::view::MvccRead;

mod batch;
#[cfg(test)]
mod tests;
mod txn;

pub use batch::apply_entry;
use txn::{TxnError, TxnRun};

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
/// The outcome of applying one command.
#[derive(Debug, Default)]
pub struct Applied {
    /// The answer to the command (its revision, and what it did or why it
    /// was refused). [`apply_entry`] moves the answer into the entry's
    /// response and leaves the revision here, with [`CommandResult::None`].
    pub response: Response,
    /// Final state of each written key (`None` = deleted), in key order.
    pub writes: BTreeMap<Bytes, Option<KeyValue>>,
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

/// A deterministic refusal: no change, no new revision.
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
    // Rule 3: the origin has finished with everything below its floor
    // (its records go with the update).
    update.state.floor = update.state.floor.max(floor);
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

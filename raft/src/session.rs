//! The proposing side of exactly-once writes: this process's proposal ids.
//!
//! A [`ClientSession`] hands out [`ProposalId`]s `(origin, epoch, seq)`
//! with increasing seqs for this process (its epoch is the storage's boot
//! epoch, greater for every later process of the node) and tracks which
//! seqs are still in flight. [`ClientSession::floor`] is the smallest of
//! them (or the next seq when none is): every seq below it is finished
//! (answered, failed or timed out), so no copy of it will ever be sent
//! again, and the state machine may forget it (see
//! `kubestore_storage::session`).
//!
//! A write takes one [`InFlight`] before its first attempt and keeps it
//! until it returns, whatever the outcome: every attempt is the same
//! proposal ([`InFlight::tag`]), so the state machine applies it at most
//! once. Dropping the [`InFlight`] finishes the seq. The response to a
//! tagged attempt is the inner command's own; [`settle`] turns the two
//! answers that mean "applied or not, nobody can say" into
//! [`RaftNodeError::Indeterminate`].

use std::collections::BTreeSet;
use std::sync::Mutex;

use kubestore_storage::{ApplyError, Command, NodeId, ProposalId, Response};

use crate::error::{RaftNodeError, UnknownOutcome};

/// This process's proposals: which seq comes next and which are in flight.
#[derive(Debug)]
pub struct ClientSession {
    origin: NodeId,
    epoch: u64,
    seqs: Mutex<Seqs>,
}

#[derive(Debug)]
struct Seqs {
    next: u64,
    in_flight: BTreeSet<u64>,
}

impl ClientSession {
    /// The session of node `origin`'s process of boot epoch `epoch`
    /// (`kubestore_storage::Store::boot_epoch`). Seqs start at 1.
    pub fn new(origin: NodeId, epoch: u64) -> Self {
        Self {
            origin,
            epoch,
            seqs: Mutex::new(Seqs {
                next: 1,
                in_flight: BTreeSet::new(),
            }),
        }
    }

    fn seqs(&self) -> std::sync::MutexGuard<'_, Seqs> {
        // The set stays consistent whatever panicked while holding it:
        // every change is one insert or one remove.
        self.seqs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new proposal: the next seq, in flight until the guard is dropped.
    pub fn begin(&self) -> InFlight<'_> {
        let mut seqs = self.seqs();
        let seq = seqs.next;
        seqs.next += 1;
        seqs.in_flight.insert(seq);
        InFlight {
            session: self,
            id: ProposalId {
                origin: self.origin,
                epoch: self.epoch,
                seq,
            },
        }
    }

    /// The smallest seq still in flight, or the next seq if none is: every
    /// proposal below it is finished. Never decreases.
    pub fn floor(&self) -> u64 {
        let seqs = self.seqs();
        seqs.in_flight.first().copied().unwrap_or(seqs.next)
    }

    /// How many proposals are in flight.
    pub fn in_flight(&self) -> usize {
        self.seqs().in_flight.len()
    }

    fn finish(&self, seq: u64) {
        self.seqs().in_flight.remove(&seq);
    }
}

/// One proposal in flight; dropping it finishes the proposal, so every
/// later attempt's floor passes it.
#[derive(Debug)]
pub struct InFlight<'s> {
    session: &'s ClientSession,
    id: ProposalId,
}

impl InFlight<'_> {
    /// The proposal's id, the same in every attempt.
    pub fn id(&self) -> ProposalId {
        self.id
    }

    /// One attempt of this proposal: `cmd` tagged with its id and the
    /// session's floor now (taken per attempt, so a retry lets the state
    /// machine forget what finished meanwhile).
    pub fn tag(&self, cmd: Command) -> Command {
        Command::Tagged {
            id: self.id,
            floor: self.session.floor(),
            cmd: Box::new(cmd),
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.session.finish(self.id.seq);
    }
}

/// What the caller of a write sees of the response to a tagged attempt:
/// the inner command's response as it is, except when the state machine
/// cannot tell whether the write applied: a copy refused as stale (its
/// origin had finished with it, or it came from an earlier process; a live
/// write meets this only if another copy was refused first) or a duplicate
/// whose first response was too large to keep. Those are
/// [`RaftNodeError::Indeterminate`], like any write of unknown outcome.
pub fn settle(response: Response) -> Result<Response, RaftNodeError> {
    match &response.result {
        Err(e @ (ApplyError::StaleProposal | ApplyError::DuplicateResponseDropped)) => Err(
            RaftNodeError::Indeterminate(UnknownOutcome::Apply(e.clone())),
        ),
        _ => Ok(response),
    }
}

#[cfg(test)]
mod tests {
    use kubestore_storage::{CommandResult, Revision, Txn};

    use super::*;

    #[test]
    fn seqs_increase_and_the_floor_is_the_oldest_in_flight() {
        let session = ClientSession::new(3, 42);
        assert_eq!(session.floor(), 1, "nothing in flight: the next seq");
        let a = session.begin();
        let b = session.begin();
        let c = session.begin();
        assert_eq!(
            [a.id(), b.id(), c.id()].map(|id| (id.origin, id.epoch, id.seq)),
            [(3, 42, 1), (3, 42, 2), (3, 42, 3)]
        );
        assert_eq!(session.floor(), 1);
        drop(b);
        assert_eq!(session.floor(), 1, "a is still in flight");
        drop(a);
        assert_eq!(session.floor(), 3, "b finished before a");
        drop(c);
        assert_eq!(session.floor(), 4, "nothing in flight: the next seq");
        assert_eq!(session.in_flight(), 0);
        assert_eq!(session.begin().id().seq, 4, "seqs are never reused");
    }

    #[test]
    fn every_attempt_carries_the_same_id_and_the_current_floor() {
        let session = ClientSession::new(1, 7);
        let older = session.begin();
        let write = session.begin();
        let first = write.tag(Command::Txn(Txn::default()));
        drop(older);
        let retry = write.tag(Command::Txn(Txn::default()));
        let parts = |cmd: &Command| match cmd {
            Command::Tagged { id, floor, cmd } => (*id, *floor, (**cmd).clone()),
            other => panic!("not tagged: {other:?}"),
        };
        let (id1, floor1, inner1) = parts(&first);
        let (id2, floor2, inner2) = parts(&retry);
        assert_eq!(id1, id2, "a retry is the same proposal");
        assert_eq!(id1, write.id());
        assert_eq!(
            (floor1, floor2),
            (1, 2),
            "the retry's floor moved past the finished write"
        );
        assert_eq!(inner1, inner2);
        assert!(
            floor2 <= id2.seq,
            "a live proposal is never below its own floor"
        );
    }

    #[test]
    fn concurrent_proposals_get_distinct_seqs_and_all_finish() {
        let session = std::sync::Arc::new(ClientSession::new(1, 1));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let session = session.clone();
                std::thread::spawn(move || {
                    (0..250)
                        .map(|_| {
                            let proposal = session.begin();
                            assert!(session.floor() <= proposal.id().seq);
                            proposal.id().seq
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut seqs: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("thread"))
            .collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), 1000, "no seq handed out twice");
        assert_eq!(session.in_flight(), 0);
        assert_eq!(session.floor(), 1001);
    }

    #[test]
    fn an_answer_that_cannot_tell_whether_the_write_applied_is_indeterminate() {
        let answer = |result| Response {
            revision: Revision(4),
            result,
        };
        for unknown in [
            ApplyError::StaleProposal,
            ApplyError::DuplicateResponseDropped,
        ] {
            assert!(matches!(
                settle(answer(Err(unknown))),
                Err(RaftNodeError::Indeterminate(_))
            ));
        }
        for plain in [Ok(CommandResult::Compacted), Err(ApplyError::LeaseNotFound)] {
            let response = answer(plain);
            assert_eq!(settle(response.clone()).ok(), Some(response));
        }
    }
}

//! The leader's read lease: read indexes without a heartbeat round.
//!
//! A leader confirms its leadership for a read by sending a heartbeat round
//! and waiting for a quorum to answer (see `crate::read_index`; concurrent
//! readers share rounds, `crate::read`). Every voter
//! that accepts a heartbeat refuses to vote for anyone else for openraft's
//! follower lease (`election_timeout_max`) from the moment it received it,
//! and a voter does not start an election of its own before that lease and
//! an election timeout have passed. So once a quorum has answered a round
//! that began at `t`, no other leader can be elected before
//! `t + election_timeout_max` on the followers' clocks.
//!
//! The lease records that: a leader whose round began at `t` in term `T`
//! may answer read indexes on its own until `t + duration`, as long as it is
//! still the leader of term `T`. `duration` is well below the followers'
//! lease (at most half the minimum election timeout, which
//! [`crate::RaftNode::start`] enforces; by default 150 ms against
//! followers' leases of 350 to 550 ms for three members), which is the
//! margin for the clocks' rates to differ. The clocks
//! are monotonic; their absolute values never cross a machine.
//!
//! A voter that restarts forgets its refusal to vote, but that does not let
//! a rival leader in early. A candidate must itself have waited out its own
//! lease and an election timeout (if it followed this leader), or have
//! restarted and waited at least `election_timeout_min`, which is at least
//! twice the lease (the node refuses a longer one).
//!
//! The index a leased read gets is the leader's *last log* index, never
//! less than the index the granting round returned. It must be at least
//! the commit index (DESIGN invariant 8), not the leader's applied index:
//! openraft tells followers about a commit before the leader has applied
//! it, so a follower may already answer a read at revision N while the
//! leader's applied index is N−1; a leased read at N−1 would then go back
//! in time. The last log index is at or above the commit index, and the
//! reader waits until that index is applied (which is at most one entry
//! in flight behind, as the leader proposes one entry at a time).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A lease granted by one successful read-index round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grant {
    term: u64,
    /// The granting round's read index: the floor of every leased index.
    index: u64,
    /// When the granting round began.
    started: Instant,
}

/// The leader's read lease; disabled when `duration` is zero.
#[derive(Debug)]
pub(crate) struct ReadLease {
    duration: Duration,
    grant: Mutex<Option<Grant>>,
    /// A renewal round is running (so leased reads start at most one).
    renewing: AtomicBool,
}

/// What a leased read may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leased {
    /// Read at this index or later; the lease holds.
    Index(u64),
    /// Read at this index or later; the lease is past its middle, so the
    /// caller should start a renewal round (see [`ReadLease::begin_renewal`]).
    IndexRenew(u64),
    /// No valid lease: run a round.
    Expired,
}

impl ReadLease {
    pub(crate) fn new(duration: Duration) -> Self {
        Self {
            duration,
            grant: Mutex::new(None),
            renewing: AtomicBool::new(false),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        !self.duration.is_zero()
    }

    /// Records a round that began at `started`, in `term`, and returned
    /// `index`. A grant never moves the lease backwards in time.
    pub(crate) fn grant(&self, term: u64, index: u64, started: Instant) {
        if !self.enabled() {
            return;
        }
        let mut grant = self.grant.lock().unwrap_or_else(|e| e.into_inner());
        let newer = match *grant {
            Some(g) => g.term != term || g.started <= started,
            None => true,
        };
        if newer {
            *grant = Some(Grant {
                term,
                index,
                started,
            });
        }
    }

    /// Forgets the lease (leadership lost or a round failed).
    pub(crate) fn revoke(&self) {
        *self.grant.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The lease as seen at `now` by the leader of `term` whose log ends
    /// at `last_log` (at or above its commit index).
    pub(crate) fn check(&self, term: u64, last_log: u64, now: Instant) -> Leased {
        if !self.enabled() {
            return Leased::Expired;
        }
        let Some(g) = *self.grant.lock().unwrap_or_else(|e| e.into_inner()) else {
            return Leased::Expired;
        };
        if g.term != term {
            return Leased::Expired;
        }
        // A round that began after `now` confirmed the leadership later
        // still: its lease is as fresh as can be.
        let age = now.saturating_duration_since(g.started);
        let index = last_log.max(g.index);
        if age >= self.duration {
            Leased::Expired
        } else if age >= self.duration / 2 {
            Leased::IndexRenew(index)
        } else {
            Leased::Index(index)
        }
    }

    /// Claims the one renewal slot; `false` if a renewal already runs.
    pub(crate) fn begin_renewal(&self) -> bool {
        !self.renewing.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn end_renewal(&self) {
        self.renewing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(200);

    #[test]
    fn a_lease_lasts_its_duration_from_the_start_of_its_round() {
        let lease = ReadLease::new(LEASE);
        let t = Instant::now();
        assert_eq!(lease.check(3, 10, t), Leased::Expired, "no round yet");
        lease.grant(3, 12, t);
        assert_eq!(
            lease.check(3, 10, t),
            Leased::Index(12),
            "floor is the round's index"
        );
        assert_eq!(
            lease.check(3, 15, t + LEASE / 4),
            Leased::Index(15),
            "later applies raise the index"
        );
        assert_eq!(lease.check(3, 15, t + LEASE / 2), Leased::IndexRenew(15));
        assert_eq!(lease.check(3, 15, t + LEASE), Leased::Expired);
    }

    #[test]
    fn a_lease_belongs_to_one_term() {
        let lease = ReadLease::new(LEASE);
        let t = Instant::now();
        lease.grant(3, 12, t);
        assert_eq!(lease.check(4, 12, t), Leased::Expired);
        lease.grant(4, 20, t + LEASE / 8);
        assert_eq!(lease.check(3, 12, t + LEASE / 8), Leased::Expired);
        assert_eq!(lease.check(4, 12, t + LEASE / 8), Leased::Index(20));
    }

    #[test]
    fn a_round_that_began_after_the_read_vouches_for_it() {
        let lease = ReadLease::new(LEASE);
        let t = Instant::now();
        lease.grant(3, 12, t + Duration::from_millis(5));
        assert_eq!(lease.check(3, 12, t), Leased::Index(12));
    }

    #[test]
    fn an_older_round_does_not_shorten_the_lease_and_revoke_ends_it() {
        let lease = ReadLease::new(LEASE);
        let t = Instant::now();
        lease.grant(3, 12, t + LEASE / 2);
        lease.grant(3, 11, t);
        assert_eq!(lease.check(3, 12, t + LEASE), Leased::IndexRenew(12));
        lease.revoke();
        assert_eq!(lease.check(3, 12, t + LEASE), Leased::Expired);
    }

    #[test]
    fn a_zero_lease_is_disabled() {
        let lease = ReadLease::new(Duration::ZERO);
        let t = Instant::now();
        lease.grant(3, 12, t);
        assert_eq!(lease.check(3, 12, t), Leased::Expired);
    }

    #[test]
    fn one_renewal_at_a_time() {
        let lease = ReadLease::new(LEASE);
        assert!(lease.begin_renewal());
        assert!(!lease.begin_renewal());
        lease.end_renewal();
        assert!(lease.begin_renewal());
    }
}

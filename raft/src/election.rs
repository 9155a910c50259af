//! The election timer at millisecond resolution: a follower that has not
//! heard from its leader for its lease and its own election timeout asks
//! openraft for an election at once.
//!
//! openraft 0.9 checks election timeouts only on its tick, which fires every
//! 1.5 heartbeat intervals (300 ms with kubestore's defaults), so a follower
//! noticed a lost leader up to 300 ms late, and which follower noticed
//! first was decided by where each one's tick happened to fall rather than
//! by the election slices of `config::election_window`: the fault-schedule
//! checker saw a lower-ranked follower whose log was behind start the
//! election, be refused, and the better candidate start one in the same
//! term only after another tick, with a lower id, which a candidate refuses;
//! a leader was found 2 s after the old one stopped instead of 0.7 s.
//!
//! This timer keeps openraft's rule (a follower of a committed leader waits
//! for its leader lease, its maximum election timeout, plus its minimum
//! election timeout since it last accepted the leader's entries or granted
//! a vote) but fires on the millisecond, so the followers' slices decide the
//! order: the lowest-ranked follower asks first, and a better candidate,
//! refused nowhere, asks a slice later. openraft's own tick-driven timer
//! stays on beside it (candidates that split a vote, followers that know no
//! leader). Starting an election is always safe in Raft; this only changes
//! when.
//!
//! While this node installs a snapshot it does not campaign, by either
//! timer: the leader that sent the snapshot does not reach it with
//! heartbeats until the install is done, so it sounds silent for as long
//! as the install takes. An election then deposes that leader, and the
//! next one sends another snapshot: a follower with 1M objects to install
//! called an election every timeout and never caught up; with a 6 s
//! install, a follower raised the term from 2 to 13 (the cluster test
//! `a_follower_slow_to_install_a_snapshot_catches_up_without_calling_an_election`).
//! openraft's own timer stays off until one election timeout after the
//! install, time for the leader's heartbeats to land again. The same
//! holds while snapshot chunks arrive: openraft 0.9 hands a chunk to
//! the state machine without its core seeing it, so its timer took a
//! follower receiving 595 MB for a silent leader and called an election
//! every 3 s, each one restarting the transfer; Raft's InstallSnapshot
//! resets the election timer, and here a chunk does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kubestore_storage::{NodeId, TypeConfig};
use openraft::{Raft, ServerState};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::Instrument;

/// When this node last heard from a leader it follows (accepted
/// AppendEntries or a snapshot) or granted a vote: what openraft calls the
/// vote's last modification. Cheap to clone; shared by the peer service
/// that records contacts and the timer that reads them.
#[derive(Debug, Clone)]
pub(crate) struct LeaderContact {
    origin: Instant,
    /// Milliseconds since `origin` of the latest contact.
    last_ms: Arc<AtomicU64>,
    /// One more than the milliseconds since `origin` of the latest
    /// snapshot chunk accepted (0: none yet).
    snapshot_ms: Arc<AtomicU64>,
    /// Told on every snapshot chunk accepted.
    snapshot_chunk: Arc<Notify>,
}

impl LeaderContact {
    /// A contact "now": a starting node waits a whole timeout too.
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
            snapshot_ms: Arc::new(AtomicU64::new(0)),
            snapshot_chunk: Arc::new(Notify::new()),
        }
    }

    /// Records a snapshot chunk from the leader, accepted now: a contact,
    /// and one that openraft's own timer does not see (in openraft 0.9 a
    /// chunk never reaches the core that keeps the vote's time, as Raft's
    /// InstallSnapshot should).
    pub(crate) fn touch_snapshot(&self) {
        self.touch();
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.snapshot_ms
            .fetch_max(ms.saturating_add(1), Ordering::Relaxed);
        self.snapshot_chunk.notify_one();
    }

    /// The latest snapshot chunk accepted, if any.
    fn last_snapshot(&self) -> Option<Instant> {
        match self.snapshot_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.origin + Duration::from_millis(ms - 1)),
        }
    }

    /// Records a contact now.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// The latest contact.
    fn last(&self) -> Instant {
        self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// Starts the timer for node `id`: an election once the leader has been
/// silent for `silence` (the node's own lease plus its minimum election
/// timeout), none while `installing` says a snapshot install runs. Ends
/// when Raft shuts down. Holds no handle on the store (a restarted node
/// reopens the database at once).
pub(crate) fn spawn(
    id: NodeId,
    raft: Raft<TypeConfig>,
    installing: watch::Receiver<bool>,
    contact: LeaderContact,
    silence: Duration,
) {
    let span = tracing::info_span!("election_timer", node = id);
    tokio::spawn(
        hold_during_snapshots(raft.clone(), installing.clone(), contact.clone(), silence)
            .instrument(span.clone()),
    );
    tokio::spawn(run(id, raft, installing, contact, silence).instrument(span));
}

/// Keeps openraft's own election timer off while this node receives or
/// installs a snapshot: from the first chunk until `silence` after the
/// last one, and from an install's start until `silence` after its end
/// (time for the leader's heartbeats, held meanwhile, to land again).
/// Ends when the store does.
async fn hold_during_snapshots(
    raft: Raft<TypeConfig>,
    mut installing: watch::Receiver<bool>,
    contact: LeaderContact,
    silence: Duration,
) {
    let mut held = false;
    loop {
        let changed = if *installing.borrow_and_update() {
            if !held {
                tracing::info!("installing a snapshot: no elections until it is done");
            }
            held = true;
            raft.runtime_config().elect(false);
            let changed = installing.changed().await;
            // The quiet time runs from the install's end.
            contact.touch_snapshot();
            changed
        } else {
            match contact.last_snapshot().map(|at| at + silence) {
                Some(until) if until > Instant::now() => {
                    if !held {
                        tracing::info!("receiving a snapshot: no elections until it is done");
                    }
                    held = true;
                    raft.runtime_config().elect(false);
                    tokio::select! {
                        _ = tokio::time::sleep_until(until) => Ok(()),
                        changed = installing.changed() => changed,
                    }
                }
                _ => {
                    if held {
                        tracing::info!("snapshot done: elections on again");
                    }
                    held = false;
                    raft.runtime_config().elect(true);
                    tokio::select! {
                        _ = contact.snapshot_chunk.notified() => Ok(()),
                        changed = installing.changed() => changed,
                    }
                }
            }
        };
        if changed.is_err() {
            return;
        }
    }
}

async fn run(
    id: NodeId,
    raft: Raft<TypeConfig>,
    installing: watch::Receiver<bool>,
    contact: LeaderContact,
    silence: Duration,
) {
    let metrics = raft.metrics();
    loop {
        tokio::time::sleep_until(contact.last() + silence).await;
        if contact.last() + silence > Instant::now() {
            // Heard from the leader meanwhile.
            continue;
        }
        if *installing.borrow() {
            // Silence while a snapshot from the leader is installed is not a
            // lost leader (see the module's doc).
            contact.touch();
            continue;
        }
        let leader = {
            let m = metrics.borrow();
            if m.running_state.is_err() || m.state == ServerState::Shutdown {
                return;
            }
            // Only a follower of a known leader: candidates, followers that
            // know none and learners are openraft's own timer's business.
            let voter = m
                .membership_config
                .membership()
                .voter_ids()
                .any(|v| v == id);
            match m.current_leader {
                Some(leader) if m.state == ServerState::Follower && leader != id && voter => {
                    Some(leader)
                }
                _ => None,
            }
        };
        if let Some(leader) = leader {
            tracing::info!(
                leader,
                silent_ms = u64::try_from(silence.as_millis()).unwrap_or(u64::MAX),
                "no word from the leader: starting an election"
            );
            if let Err(e) = raft.trigger().elect().await {
                tracing::debug!(error = %e, "election not started; raft stopped");
                return;
            }
        }
        // The next check a whole timeout from now, however this one went.
        contact.touch();
    }
}

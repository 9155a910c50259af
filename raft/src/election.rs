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
//! install, time for the leader's heartbeats to land again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kubestore_storage::{NodeId, TypeConfig};
use openraft::{Raft, ServerState};
use tokio::sync::watch;
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
}

impl LeaderContact {
    /// A contact "now": a starting node waits a whole timeout too.
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
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
        hold_during_installs(raft.clone(), installing.clone(), silence).instrument(span.clone()),
    );
    tokio::spawn(run(id, raft, installing, contact, silence).instrument(span));
}

/// Keeps openraft's own election timer off while this node installs a
/// snapshot, and for `silence` after (time for the leader's heartbeats,
/// held during the install, to land again). Ends when the store does.
async fn hold_during_installs(
    raft: Raft<TypeConfig>,
    mut installing: watch::Receiver<bool>,
    silence: Duration,
) {
    loop {
        if *installing.borrow_and_update() {
            tracing::info!("installing a snapshot: no elections until it is done");
            raft.runtime_config().elect(false);
        } else {
            tokio::select! {
                _ = tokio::time::sleep(silence) => raft.runtime_config().elect(true),
                // Another install began first: stay off.
                _ = installing.changed() => continue,
            }
        }
        if installing.changed().await.is_err() {
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

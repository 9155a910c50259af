//! Linearizable reads from any node: [`RaftNode::linearizable_barrier`]
//! gets a read index and waits until this node has applied it.
//!
//! Where the index comes from: on the leader, from its read lease while it
//! holds (`crate::lease`; past half the lease one renewal round starts in
//! the background), else from a round in which a quorum confirms the
//! leadership (`Raft::get_read_log_id`, which also grants the lease); on a
//! follower, from the leader on one long-lived call stream to it
//! (`crate::call_stream`). Concurrent
//! readers share rounds (`crate::read`). An attempt that finds no leader,
//! cannot reach it or gets no answer within [`PEER_ATTEMPT_TIMEOUT`] is
//! retried at whoever leads next, until the request deadline.

use std::sync::atomic::Ordering;

use kubestore_proto::raft::ReadIndexRequest;
use kubestore_storage::{AppliedState, LogIndex, NodeId};
use openraft::error::RaftError;
use openraft::ServerState;
use tracing::{instrument, Instrument};

use crate::call_stream::StreamEnded;
use crate::error::{ProtocolError, RaftNodeError, Unreachable};
use crate::lease::Leased;
use crate::node::{RaftNode, PEER_ATTEMPT_TIMEOUT};

impl RaftNode {
    /// One read-index round: on the leader, confirm leadership with a quorum;
    /// on a follower, ask the leader. An attempt that gets no answer within
    /// [`PEER_ATTEMPT_TIMEOUT`] (a paused or cut-off leader), finds no
    /// leader, or cannot reach it is retried at whoever leads next, until
    /// the request deadline: a round never waits out a dead leader.
    pub(crate) async fn fetch_read_index(&self) -> Result<u64, RaftNodeError> {
        let deadline = tokio::time::Instant::now() + self.inner.request_timeout;
        loop {
            let leader = match self.current_leader() {
                Some(l) => l,
                None => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    self.wait_for_leader(left).await?
                }
            };
            let attempt_deadline = deadline.min(tokio::time::Instant::now() + PEER_ATTEMPT_TIMEOUT);
            // As for writes: once another leader is known, ask it instead.
            let rerouted = self.rerouted_from(leader);
            let attempt = async {
                tokio::select! {
                    round = self.read_index_from(leader) => round,
                    () = rerouted => Err(RaftNodeError::NoLeader),
                }
            };
            let round = tokio::time::timeout_at(attempt_deadline, attempt)
                .await
                .unwrap_or(Err(RaftNodeError::Timeout("a read index")));
            match round {
                Err(
                    e @ (RaftNodeError::NoLeader
                    | RaftNodeError::Unreachable { .. }
                    | RaftNodeError::Timeout(_)),
                ) => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, leader, "read index attempt failed, retrying");
                    self.pause_for_election(deadline, leader).await?;
                }
                other => return other,
            }
        }
    }

    async fn read_index_from(&self, leader: NodeId) -> Result<u64, RaftNodeError> {
        if leader == self.inner.id {
            let term = self.current_term();
            let started = std::time::Instant::now();
            self.inner.read_index_rounds.fetch_add(1, Ordering::Relaxed);
            return match self.inner.raft.get_read_log_id().await {
                Ok((read_log_id, _)) => {
                    let index = read_log_id.map_or(0, |l| l.index);
                    self.inner.lease.grant(term, index, started);
                    Ok(index)
                }
                Err(e) => {
                    self.inner.lease.revoke();
                    Err(match e {
                        // Lost leadership or its quorum: look for the leader again.
                        RaftError::APIError(_) => RaftNodeError::NoLeader,
                        RaftError::Fatal(e) => e.into(),
                    })
                }
            };
        }
        if self.inner.faults.is_isolated() {
            return Err(RaftNodeError::Unreachable {
                node: leader,
                cause: Unreachable::Isolated,
            });
        }
        let addr = self.peer_addr(leader)?;
        let ended = |StreamEnded| RaftNodeError::Unreachable {
            node: leader,
            cause: Unreachable::StreamEnded,
        };
        let reply = self
            .inner
            .read_index_streams
            .send(leader, || addr, |seq| ReadIndexRequest { seq })
            .map_err(ended)?
            .received()
            .await
            .map_err(ended)?;
        if reply.leader_id != Some(leader) {
            // Leadership moved since we looked: find the new leader.
            return Err(RaftNodeError::NoLeader);
        }
        if !reply.error.is_empty() {
            return Err(ProtocolError::ReadIndex(reply.error).into());
        }
        Ok(reply.index)
    }

    /// Waits until a read on this node would see every write acknowledged
    /// before the call, and returns the applied state it may read at.
    #[instrument(level = "debug", skip_all, fields(node = self.inner.id))]
    pub async fn linearizable_barrier(&self) -> Result<AppliedState, RaftNodeError> {
        let index = tokio::time::timeout(self.inner.request_timeout, self.read_index())
            .await
            .map_err(|_| RaftNodeError::Timeout("a read index"))??;
        self.wait_applied(LogIndex(index)).await
    }

    /// A read index for a read that begins now: from the lease when this
    /// node leads and holds one, else from a (shared) round.
    pub(crate) async fn read_index(&self) -> Result<u64, RaftNodeError> {
        match self.leased_read_index() {
            Some(index) => Ok(index),
            None => self.inner.barrier.read_index().await,
        }
    }

    /// The lease's answer, if this node is the leader and its lease holds.
    /// Past the lease's middle it also starts one renewal round, so a
    /// steady stream of reads never waits for one.
    fn leased_read_index(&self) -> Option<u64> {
        let inner = &self.inner;
        if !inner.lease.enabled() {
            return None;
        }
        // The leader's last log index, not its applied index: a follower
        // learns of a commit (and may apply it and answer a read with it)
        // before the leader has applied it, so only an index at or above
        // the commit index keeps a read here from going back in time. The
        // metrics publish the last log index before any of it can commit.
        let (term, last_log) = {
            let m = inner.raft.metrics();
            let m = m.borrow();
            if m.state != ServerState::Leader || m.current_leader != Some(inner.id) {
                return None;
            }
            (m.current_term, m.last_log_index.unwrap_or(0))
        };
        let index = match inner.lease.check(term, last_log, std::time::Instant::now()) {
            Leased::Index(index) => index,
            Leased::IndexRenew(index) => {
                if inner.lease.begin_renewal() {
                    let node = self.clone();
                    tokio::spawn(
                        async move {
                            if let Err(e) = node.inner.barrier.read_index().await {
                                tracing::debug!(error = %e, "read lease renewal failed");
                            }
                            node.inner.lease.end_renewal();
                        }
                        .instrument(tracing::debug_span!("read_lease_renewal")),
                    );
                }
                index
            }
            Leased::Expired => return None,
        };
        inner.leased_read_indexes.fetch_add(1, Ordering::Relaxed);
        Some(index)
    }

    /// Waits until this node has applied log `index`.
    pub async fn wait_applied(&self, index: LogIndex) -> Result<AppliedState, RaftNodeError> {
        let mut applied = self.inner.store.subscribe();
        let outcome = match tokio::time::timeout(
            self.inner.request_timeout,
            applied.wait_for(|s| s.log_index >= index),
        )
        .await
        {
            Ok(Ok(state)) => Ok(*state),
            Ok(Err(_)) => Err(RaftNodeError::ShuttingDown),
            Err(_) => Err(RaftNodeError::Timeout("the local apply to catch up")),
        };
        outcome
    }
}

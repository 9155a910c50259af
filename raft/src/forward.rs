//! Writes from any node: [`RaftNode::write`] proposes on the leader or
//! forwards to it (a call stream on the peer port), under one
//! deadline ([`RaftNodeConfig::request_timeout`](crate::RaftNodeConfig::request_timeout)).
//!
//! An attempt at a leader is abandoned and retried at the next one when
//! the target answers "not the leader", cannot be reached, gives no answer
//! within [`PEER_ATTEMPT_TIMEOUT`], or another leader becomes known
//! meanwhile (re-route). Every attempt of one write carries the same
//! [`ProposalId`](kubestore_storage::ProposalId), taken from this
//! process's [`ClientSession`](crate::session::ClientSession); the state
//! machine applies a tagged proposal at most once however many copies are
//! committed (`kubestore_storage::session`), which is what makes a retry
//! safe for every command. Once an attempt may have reached a leader, a
//! failure is reported as unknown, never as a definite failure.
//!
//! Forwarded commands travel on one long-lived stream to the leader
//! ([`crate::call_stream`]), each answered by one message with its `seq`.
//! The leader's side of a forward, [`RaftNode::write_forwarded`], is here
//! too; the RPC that carries it is in [`crate::cluster_rpc`].

use std::sync::Arc;

use kubestore_proto::raft::ForwardRequest;
use kubestore_storage::{Command, CommandResult, NodeId, Response};
use openraft::error::{ClientWriteError, RaftError};
use tracing::instrument;

use crate::call_stream::StreamEnded;
use crate::error::{ProtocolError, RaftNodeError, UnknownOutcome, Unreachable};
use crate::node::{RaftNode, WeakNode, PEER_ATTEMPT_TIMEOUT};
use crate::propose::{Redirect, Submit};
use crate::session::settle;

impl RaftNode {
    /// Commits `cmd` through the leader and returns the state machine's
    /// response. Called on a follower, the command is forwarded to the
    /// leader; the client never sees a redirect.
    /// A command that does not meet [`RaftNodeConfig::command_limits`](crate::RaftNodeConfig::command_limits) is
    /// refused at once ([`RaftNodeError::InvalidCommand`]), unproposed.
    ///
    /// Its span is at debug level, as are the other per-write spans below
    /// the front ends (a proposed batch's, a forwarded write's): at info
    /// level the subscriber registers each one, formats its fields and is
    /// told of every enter and exit, which with the forwarded write's span
    /// was 2.2% of the nodes' CPU under puts (BENCHMARKS.md), and nothing
    /// in here logs above debug. `KUBESTORE_LOG=debug` turns them on.
    #[instrument(level = "debug", skip_all, fields(node = self.inner.id, cmd = %cmd, proposal))]
    pub async fn write(&self, cmd: Command) -> Result<Response, RaftNodeError> {
        cmd.validate(&self.inner.command_limits)?;
        let deadline = tokio::time::Instant::now() + self.inner.request_timeout;
        let mut leader_hint = self.current_leader();
        // Once an attempt may have reached a leader, a failure no longer
        // proves the write did not commit: it is answered as unknown.
        let mut attempted = false;
        // One proposal id for every attempt: the state machine applies it
        // at most once however many copies reach the log. Held until this
        // returns, whatever the outcome.
        let proposal = self.inner.session.begin();
        tracing::Span::current().record("proposal", tracing::field::display(proposal.id()));
        let unknown_if_attempted = |attempted: bool, e: RaftNodeError| {
            if attempted {
                e.outcome_unknown()
            } else {
                e
            }
        };
        loop {
            let leader = match leader_hint {
                Some(l) => l,
                None => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    self.wait_for_leader(left)
                        .await
                        .map_err(|e| unknown_if_attempted(attempted, e))?
                }
            };
            attempted = true;
            // Tagged afresh for each attempt: the current floor lets the
            // state machine forget this node's finished proposals.
            let tagged = proposal.tag(cmd.clone());
            let attempt = async {
                if tagged.is_batchable() {
                    self.inner.proposer.propose(leader, tagged).await
                } else {
                    self.submit_to(leader, tagged).await
                }
            };
            // A write waiting on a remote leader is re-routed as soon as
            // another leader is known, without waiting for the old one.
            let rerouted = self.rerouted_from(leader);
            let attempt = tokio::time::timeout_at(deadline, async {
                tokio::select! {
                    answer = attempt => answer,
                    () = rerouted => Err(Redirect::To(self.current_leader())),
                }
            })
            .await
            // Out of time with the outcome unknown (e.g. a leader cut off
            // from its quorum never commits).
            .map_err(|_| RaftNodeError::Timeout("the write to commit"))?;
            match attempt {
                Ok(resp) => return settle(resp),
                Err(Redirect::To(next)) => {
                    tracing::debug!(?next, "leader changed, retrying");
                    leader_hint = match next {
                        Some(n) if n != leader => Some(n),
                        _ => {
                            self.pause_for_election(deadline, leader)
                                .await
                                .map_err(|e| unknown_if_attempted(attempted, e))?;
                            self.current_leader()
                        }
                    };
                }
                Err(Redirect::Fail(e)) => return Err(unknown_if_attempted(attempted, e)),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RaftNodeError::Timeout("the write to commit"));
            }
        }
    }

    /// Proposes `cmd` here if `leader` is this node, else forwards it.
    async fn submit_to(&self, leader: NodeId, cmd: Command) -> Result<Response, Redirect> {
        if leader == self.inner.id {
            self.write_local(cmd).await
        } else {
            self.forward(leader, &cmd).await
        }
    }

    /// Proposes `cmd` on this node as the leader and waits for its answer,
    /// or until this node stops leading in the term it proposed in.
    ///
    /// openraft 0.9 answers a `client_write` only when its entry is applied
    /// or truncated as conflicting. A leader cut off with entries of its own
    /// that the new leader's snapshot then covers purges them unanswered
    /// (its log is shorter than the snapshot, so nothing is truncated), and
    /// the write would wait forever, holding the proposer's one local slot
    /// and with it every write queued behind it on this node. So the attempt
    /// ends with the leadership: the caller retries at the new leader with
    /// the same proposal id, which the state machine applies at most once
    /// whichever copy commits.
    async fn write_local(&self, cmd: Command) -> Result<Response, Redirect> {
        let Some(term) = self.leading_term() else {
            return Err(Redirect::To(self.current_leader()));
        };
        let written = tokio::select! {
            written = self.inner.raft.client_write(cmd.into()) => written,
            () = self.stopped_leading(term) => {
                tracing::debug!(term, "lost leadership with a write pending, retrying");
                let next = self.current_leader().filter(|l| *l != self.inner.id);
                return Err(Redirect::To(next));
            }
        };
        match written {
            Ok(resp) => Ok(resp.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(Redirect::To(f.leader_id))
            }
            Err(RaftError::APIError(e)) => Err(Redirect::Fail(
                ProtocolError::ClientWrite(Arc::new(e)).into(),
            )),
            Err(RaftError::Fatal(e)) => Err(Redirect::Fail(e.into())),
        }
    }

    /// A write forwarded by another node's proposer, at this node as the
    /// leader: batched again with this node's own writes and whatever else
    /// was forwarded (see [`crate::propose`]), a forwarded batch whole in
    /// one entry. Anything not batchable is proposed as it came.
    pub(crate) async fn write_forwarded(&self, cmd: Command) -> Result<Response, Redirect> {
        let id = self.inner.id;
        match cmd {
            Command::Batch(cmds) if cmds.iter().all(Command::is_batchable) => {
                let responses = self.inner.proposer.propose_all(id, cmds).await?;
                Ok(Response {
                    revision: responses
                        .iter()
                        .map(|r| r.revision)
                        .max()
                        .unwrap_or_default(),
                    result: Ok(CommandResult::Batch(responses)),
                })
            }
            cmd if cmd.is_batchable() => self.inner.proposer.propose(id, cmd).await,
            cmd => self.write_local(cmd).await,
        }
    }

    /// Sends `cmd` to `leader` on this node's forwarding stream
    /// ([`crate::call_stream`]) and waits for the leader's answer.
    #[instrument(level = "debug", skip_all, fields(leader))]
    async fn forward(&self, leader: NodeId, cmd: &Command) -> Result<Response, Redirect> {
        if self.inner.faults.is_isolated() {
            return Err(Redirect::Fail(RaftNodeError::Unreachable {
                node: leader,
                cause: Unreachable::Isolated,
            }));
        }
        let command = bincode::serialize(cmd)
            .map_err(|e| Redirect::Fail(ProtocolError::Encode(Arc::new(e)).into()))?;
        let addr = self.peer_addr(leader).map_err(Redirect::Fail)?;
        // A stream that ended as it was used: retry wherever leadership goes.
        let mut answer = self
            .inner
            .forward_streams
            .send(leader, || addr, |seq| ForwardRequest { command, seq })
            .map_err(|StreamEnded| Redirect::To(None))?;
        let Ok(answer) = tokio::time::timeout(PEER_ATTEMPT_TIMEOUT, answer.received()).await else {
            // No answer: the leader may be paused or cut off. Retry wherever
            // leadership goes: the proposal id makes a second copy harmless.
            return Err(Redirect::To(None));
        };
        match answer {
            Ok(reply) => {
                if !reply.error.is_empty() {
                    return Err(Redirect::Fail(RaftNodeError::Indeterminate(
                        UnknownOutcome::Leader(reply.error),
                    )));
                }
                if reply.response.is_empty() {
                    return Err(Redirect::To(reply.leader_id));
                }
                bincode::deserialize(&reply.response).map_err(|e| {
                    Redirect::Fail(RaftNodeError::Indeterminate(
                        UnknownOutcome::UndecodableReply(Arc::new(e)),
                    ))
                })
            }
            // The stream ended (the leader went away or is unreachable):
            // retry at whoever leads next. The proposal id makes a second
            // copy harmless (the state machine applies it once).
            Err(StreamEnded) => Err(Redirect::To(None)),
        }
    }
}

impl Submit for WeakNode {
    async fn submit(&self, leader: NodeId, cmd: Command) -> Result<Response, Redirect> {
        match self.0.upgrade() {
            Some(inner) => RaftNode { inner }.submit_to(leader, cmd).await,
            None => Err(Redirect::Fail(RaftNodeError::ShuttingDown)),
        }
    }
}

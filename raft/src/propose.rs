//! Group commit of proposals: many writes per Raft entry.
//!
//! Every write a node takes (from its own clients or forwarded by another
//! node) is queued here with the leader it is meant for. One task drains
//! the queue: whatever waits when it looks becomes one
//! [`Command::Batch`] entry (or one forwarded RPC carrying that batch), so
//! under load one entry, one replication message, one fsync and one apply
//! write cover many writes. A lone write is proposed as itself, so an idle
//! cluster pays nothing for the batching.
//!
//! Batches are pipelined, at most [`MAX_IN_FLIGHT`] at a time: while they
//! are all out, arrivals wait in the queue and make the next batch larger.
//! No timer is involved, so a write never waits for company.
//!
//! Each command in a batch gets its own revision and verdict (see
//! `kubestore_storage::apply::apply_entry`), and its own answer here. A
//! batch that fails as a whole (the leader moved, the RPC broke) fails each
//! of its writes, and `RaftNode::write` retries each on its own.

use std::sync::Arc;

use kubestore_storage::{Command, CommandResult, NodeId, Response};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tracing::Instrument;

use crate::error::RaftNodeError;

/// Most commands in one entry, so that one apply batch stays short.
pub(crate) const MAX_BATCH: usize = 256;

/// A batch stops growing once its commands reach this many encoded bytes,
/// so one entry stays a small part of a replication message (one command
/// alone may still be up to the front ends' request limit).
pub(crate) const MAX_BATCH_BYTES: u64 = 1 << 20;

/// Batches proposed and not yet answered, per node.
pub(crate) const MAX_IN_FLIGHT: usize = 8;

/// Why a write attempt did not finish at the leader it was sent to.
#[derive(Debug)]
pub(crate) enum Redirect {
    /// Try again at this leader (or wait for one).
    To(Option<NodeId>),
    Fail(RaftNodeError),
}

type Reply = oneshot::Sender<Result<Response, Redirect>>;

struct Proposal {
    leader: NodeId,
    cmd: Command,
    reply: Reply,
}

/// Sends one command (a single one or a batch) to `leader`: proposes it
/// locally when `leader` is this node, forwards it otherwise.
pub(crate) trait Submit: Clone + Send + Sync + 'static {
    fn submit(
        &self,
        leader: NodeId,
        cmd: Command,
    ) -> impl std::future::Future<Output = Result<Response, Redirect>> + Send;
}

/// The queue of this node's proposals and the task that batches them.
#[derive(Debug, Clone)]
pub(crate) struct Proposer {
    tx: mpsc::UnboundedSender<Proposal>,
}

impl Proposer {
    /// Starts the batching task; it ends when every `Proposer` is dropped.
    pub(crate) fn spawn(submit: impl Submit) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, submit));
        Self { tx }
    }

    /// Proposes `cmd` to `leader` in the next batch and waits for its answer.
    pub(crate) async fn propose(&self, leader: NodeId, cmd: Command) -> Result<Response, Redirect> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Proposal { leader, cmd, reply })
            .map_err(|_| Redirect::Fail(RaftNodeError::ShuttingDown))?;
        answer
            .await
            .map_err(|_| Redirect::Fail(RaftNodeError::ShuttingDown))?
    }
}

async fn run(mut rx: mpsc::UnboundedReceiver<Proposal>, submit: impl Submit) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        // Wait for a slot before draining: while every batch is out, the
        // queue fills and the next batch is larger.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = encoded_len(&first.cmd);
        let mut queued = vec![first];
        while queued.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += encoded_len(&p.cmd);
                    queued.push(p);
                }
                Err(_) => break,
            }
        }
        // Almost always one leader; after a leader change, one batch each.
        let mut groups: Vec<(NodeId, Vec<Proposal>)> = Vec::new();
        for p in queued {
            match groups.iter_mut().find(|(l, _)| *l == p.leader) {
                Some((_, group)) => group.push(p),
                None => groups.push((p.leader, vec![p])),
            }
        }
        let submit = submit.clone();
        tokio::spawn(async move {
            for (leader, group) in groups {
                let span = tracing::debug_span!("propose_batch", leader, writes = group.len());
                commit(&submit, leader, group).instrument(span).await;
            }
            drop(permit);
        });
    }
}

fn encoded_len(cmd: &Command) -> u64 {
    bincode::serialized_size(cmd).unwrap_or(MAX_BATCH_BYTES)
}

async fn commit(submit: &impl Submit, leader: NodeId, mut group: Vec<Proposal>) {
    if group.len() == 1 {
        if let Some(p) = group.pop() {
            let outcome = submit.submit(leader, p.cmd).await;
            let _ = p.reply.send(outcome);
        }
        return;
    }
    let (cmds, replies): (Vec<Command>, Vec<Reply>) =
        group.into_iter().map(|p| (p.cmd, p.reply)).unzip();
    let sent = cmds.len();
    match submit.submit(leader, Command::Batch(cmds)).await {
        Ok(Response {
            result: Ok(CommandResult::Batch(responses)),
            ..
        }) if responses.len() == sent => {
            for (reply, response) in replies.into_iter().zip(responses) {
                let _ = reply.send(Ok(response));
            }
        }
        Ok(other) => {
            let message = format!("a batch of {sent} writes was answered with {other:?}");
            tracing::error!(%message);
            for reply in replies {
                let _ = reply.send(Err(Redirect::Fail(RaftNodeError::Raft(message.clone()))));
            }
        }
        Err(redirect) => {
            for reply in replies {
                let _ = reply.send(Err(match &redirect {
                    Redirect::To(leader) => Redirect::To(*leader),
                    Redirect::Fail(e) => Redirect::Fail(e.clone()),
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use kubestore_storage::{Revision, Txn};

    use super::*;

    /// Answers every command with a made-up revision, records the entry
    /// sizes, and holds each entry until the test opens the gate.
    #[derive(Clone)]
    struct Recorder {
        entered: Arc<AtomicUsize>,
        entries: Arc<Mutex<Vec<usize>>>,
        next_revision: Arc<AtomicUsize>,
        gate: tokio::sync::watch::Receiver<bool>,
    }

    impl Submit for Recorder {
        async fn submit(&self, _leader: NodeId, cmd: Command) -> Result<Response, Redirect> {
            self.entered.fetch_add(1, Ordering::SeqCst);
            let mut gate = self.gate.clone();
            gate.wait_for(|open| *open)
                .await
                .map_err(|_| Redirect::Fail(RaftNodeError::ShuttingDown))?;
            let one = |_: &Command| Response {
                revision: Revision(self.next_revision.fetch_add(1, Ordering::SeqCst) as u64 + 1),
                result: Ok(CommandResult::None),
            };
            let (size, response) = match &cmd {
                Command::Batch(cmds) => {
                    let responses: Vec<Response> = cmds.iter().map(one).collect();
                    (
                        cmds.len(),
                        Response {
                            revision: responses.last().map_or(Revision::ZERO, |r| r.revision),
                            result: Ok(CommandResult::Batch(responses)),
                        },
                    )
                }
                single => (1, one(single)),
            };
            self.entries.lock().expect("lock").push(size);
            Ok(response)
        }
    }

    #[tokio::test]
    async fn writes_queued_behind_busy_batches_share_one_entry_and_each_gets_its_answer() {
        let (open, gate) = tokio::sync::watch::channel(false);
        let recorder = Recorder {
            entered: Arc::default(),
            entries: Arc::default(),
            next_revision: Arc::default(),
            gate,
        };
        let proposer = Proposer::spawn(recorder.clone());
        let write = |p: Proposer| async move { p.propose(1, Command::Txn(Txn::default())).await };

        // Fill every in-flight slot with a lone write, held at the gate.
        let mut first = Vec::new();
        for i in 1..=MAX_IN_FLIGHT {
            first.push(tokio::spawn(write(proposer.clone())));
            while recorder.entered.load(Ordering::SeqCst) < i {
                tokio::task::yield_now().await;
            }
        }
        // 100 more arrive while all slots are taken: they must wait and
        // then go as one entry. (On this single-threaded test runtime one
        // yield runs every spawned task once, and each queues its write on
        // its first run.)
        let late: Vec<_> = (0..100)
            .map(|_| tokio::spawn(write(proposer.clone())))
            .collect();
        tokio::task::yield_now().await;
        assert_eq!(
            recorder.entered.load(Ordering::SeqCst),
            MAX_IN_FLIGHT,
            "nothing new proposed while every slot is taken"
        );
        open.send_replace(true);
        let mut revisions = Vec::new();
        for handle in first.into_iter().chain(late) {
            let response = handle.await.expect("join").expect("answered");
            revisions.push(response.revision.0);
        }
        revisions.sort_unstable();
        let expected: Vec<u64> = (1..=(MAX_IN_FLIGHT as u64 + 100)).collect();
        assert_eq!(revisions, expected, "every write answered exactly once");
        let entries = recorder.entries.lock().expect("lock").clone();
        assert_eq!(entries.iter().sum::<usize>(), MAX_IN_FLIGHT + 100);
        assert!(
            entries.contains(&100),
            "the 100 late writes should form one entry, got entries of {entries:?}"
        );
    }
}

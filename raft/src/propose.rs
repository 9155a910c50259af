//! Group commit of proposals: many writes per Raft entry.
//!
//! Every write a node takes (from its own clients or forwarded by another
//! node) is queued here with the leader it is meant for. One task drains
//! the queue: whatever waits when it looks becomes one
//! [`Command::Batch`] entry (or one forwarded message carrying that batch), so
//! under load one entry, one replication message, one fsync and one apply
//! write cover many writes. A lone write is proposed as itself, so an idle
//! cluster pays nothing for the batching.
//!
//! Batches are pipelined: while the allowed number is out, arrivals wait in
//! the queue and make the next batch larger. No timer is involved, so a
//! lone write on an idle node goes at once. A follower keeps up to
//! [`FORWARDED_IN_FLIGHT`] batches on their way to the leader (the leader
//! batches them again); the leader proposes one entry of its own at a
//! time ([`LOCAL_IN_FLIGHT`]), for the reason below.
//!
//! Each command in a batch gets its own revision and verdict (see
//! `kubestore_storage::apply::apply_entry`), and its own answer here. A
//! batch that fails as a whole fails each of its writes: when the leader
//! moved, could not be reached or did not answer in time,
//! `RaftNode::write` retries each on its
//! own (with its own proposal id, so each still applies at most once);
//! any other failure is answered as unknown.
//!
//! The leader batches again what followers forward: a forwarded batch is
//! one proposal of several commands ([`Proposer::propose_all`]), laid into
//! the leader's next entry whole, never split across two. openraft (0.9)
//! appends and fsyncs each `client_write` on its core task before it does
//! anything else, replication included, so every entry the leader proposes
//! costs one fsync on the path of every write behind it: fewer, fuller
//! entries are what makes the leader fast.

use std::sync::Arc;
use std::time::Instant;

use kubestore_storage::{Command, CommandResult, NodeId, Response, Stage, StageTimes};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tracing::Instrument;

use crate::error::{ProtocolError, RaftNodeError};

/// Most commands in one entry, so that one apply batch stays short.
pub(crate) const MAX_BATCH: usize = 256;

/// A batch stops growing once its commands reach this many encoded bytes,
/// so one entry stays a small part of a replication message (one command
/// alone may still be up to the front ends' request limit).
pub(crate) const MAX_BATCH_BYTES: u64 = 1 << 20;

/// Batches a follower has forwarded to the leader and not yet had
/// answered. They cost the leader no entry of their own, so several may be
/// out: a write arriving at a follower does not wait for the one before.
pub(crate) const FORWARDED_IN_FLIGHT: usize = 8;

/// Entries the leader has proposed and not yet had committed. One: every
/// entry costs a sequential fsync on openraft's core task, and what
/// arrives while one is out makes the next one fuller. Measured with
/// `kubestore bench etcd` (put, 1 KiB): 1 gave 7,988–8,416 puts/s at 64
/// clients and 10,187–10,448 at 256, against 7,474–7,583 and 8,601–9,681
/// with 4 (see BENCHMARKS.md).
pub(crate) const LOCAL_IN_FLIGHT: usize = 1;

/// Why a write attempt did not finish at the leader it was sent to.
#[derive(Debug, Clone)]
pub(crate) enum Redirect {
    /// Try again at this leader (or wait for one).
    To(Option<NodeId>),
    Fail(RaftNodeError),
}

type Reply = oneshot::Sender<Result<Vec<Response>, Redirect>>;

/// Commands that go into one entry together, with one answer for all.
struct Proposal {
    leader: NodeId,
    cmds: Vec<Command>,
    reply: Reply,
    /// When it joined the queue ([`Stage::ProposeQueue`]).
    queued_at: Instant,
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
    /// Starts the batching task of node `local`, which times its queue
    /// and its batches into `timings`; it ends when every `Proposer` is
    /// dropped.
    pub(crate) fn spawn(local: NodeId, submit: impl Submit, timings: Arc<StageTimes>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(local, rx, submit, timings));
        Self { tx }
    }

    /// Proposes `cmd` to `leader` in the next batch and waits for its answer.
    pub(crate) async fn propose(&self, leader: NodeId, cmd: Command) -> Result<Response, Redirect> {
        let responses = self.propose_all(leader, vec![cmd]).await?;
        let answered = responses.len();
        match <[Response; 1]>::try_from(responses) {
            Ok([response]) => Ok(response),
            Err(_) => Err(answer_mismatch(1, answered)),
        }
    }

    /// Proposes `cmds` (each batchable) to `leader`, all in the same entry,
    /// and waits for their answers, in order.
    pub(crate) async fn propose_all(
        &self,
        leader: NodeId,
        cmds: Vec<Command>,
    ) -> Result<Vec<Response>, Redirect> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Proposal {
                leader,
                cmds,
                reply,
                queued_at: Instant::now(),
            })
            .map_err(|_| Redirect::Fail(RaftNodeError::ShuttingDown))?;
        answer
            .await
            .map_err(|_| Redirect::Fail(RaftNodeError::ShuttingDown))?
    }
}

async fn run(
    local: NodeId,
    mut rx: mpsc::UnboundedReceiver<Proposal>,
    submit: impl Submit,
    timings: Arc<StageTimes>,
) {
    let proposed = Arc::new(Semaphore::new(LOCAL_IN_FLIGHT));
    let forwarded = Arc::new(Semaphore::new(FORWARDED_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        // Wait for a slot before draining: while every batch is out, the
        // queue fills and the next batch is larger.
        let slots = if first.leader == local {
            &proposed
        } else {
            &forwarded
        };
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        // Then let every task that is ready to run go first: under load
        // some of them are writes a moment from their proposal (a handler
        // finishing its request, a forwarded batch being decoded), and
        // they join this batch instead of making the next entry. On an
        // idle node nothing else is ready and this costs one reschedule.
        tokio::task::yield_now().await;
        let mut bytes = encoded_len(&first.cmds);
        let mut commands = first.cmds.len();
        let mut queued = vec![first];
        while commands < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += encoded_len(&p.cmds);
                    commands += p.cmds.len();
                    queued.push(p);
                }
                Err(_) => break,
            }
        }
        // Almost always one leader; after a leader change, one batch each.
        let mut groups: Vec<(NodeId, Vec<Proposal>)> = Vec::new();
        let leaving = Instant::now();
        for p in queued {
            timings.record(Stage::ProposeQueue, leaving - p.queued_at);
            match groups.iter_mut().find(|(l, _)| *l == p.leader) {
                Some((_, group)) => group.push(p),
                None => groups.push((p.leader, vec![p])),
            }
        }
        let (submit, timings) = (submit.clone(), timings.clone());
        tokio::spawn(async move {
            for (leader, group) in groups {
                let span = tracing::debug_span!("propose_batch", leader, writes = group.len());
                let started = Instant::now();
                commit(&submit, leader, group).instrument(span).await;
                let stage = if leader == local {
                    Stage::Commit
                } else {
                    Stage::Forward
                };
                timings.record_since(stage, started);
            }
            drop(permit);
        });
    }
}

fn encoded_len(cmds: &[Command]) -> u64 {
    cmds.iter()
        .map(|c| bincode::serialized_size(c).unwrap_or(MAX_BATCH_BYTES))
        .sum()
}

fn answer_mismatch(sent: usize, answered: usize) -> Redirect {
    let e = ProtocolError::AnswerCount { sent, answered };
    tracing::error!(error = %e);
    Redirect::Fail(e.into())
}

async fn commit(submit: &impl Submit, leader: NodeId, group: Vec<Proposal>) {
    let mut counts = Vec::with_capacity(group.len());
    let mut replies = Vec::with_capacity(group.len());
    let mut cmds = Vec::new();
    for p in group {
        counts.push(p.cmds.len());
        replies.push(p.reply);
        cmds.extend(p.cmds);
    }
    let sent = cmds.len();
    let outcome = match sent {
        0 => Ok(Vec::new()),
        // A lone write goes as itself, not as a batch of one.
        1 => submit
            .submit(leader, cmds.swap_remove(0))
            .await
            .map(|r| vec![r]),
        _ => match submit.submit(leader, Command::Batch(cmds)).await {
            Ok(Response {
                result: Ok(CommandResult::Batch(responses)),
                ..
            }) => Ok(responses),
            Ok(other) => Err(Redirect::Fail(
                ProtocolError::BatchAnswer {
                    sent,
                    answer: Arc::new(other),
                }
                .into(),
            )),
            Err(redirect) => Err(redirect),
        },
    };
    let outcome = outcome.and_then(|responses| match responses.len() {
        n if n == sent => Ok(responses),
        n => Err(answer_mismatch(sent, n)),
    });
    match outcome {
        Ok(responses) => {
            let mut responses = responses.into_iter();
            for (reply, count) in replies.into_iter().zip(counts) {
                let _ = reply.send(Ok(responses.by_ref().take(count).collect()));
            }
        }
        Err(redirect) => {
            for reply in replies {
                let _ = reply.send(Err(redirect.clone()));
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

    impl Recorder {
        /// A recorder whose entries wait until `gate` turns true.
        fn held_at(gate: tokio::sync::watch::Receiver<bool>) -> Self {
            Self {
                entered: Arc::default(),
                entries: Arc::default(),
                next_revision: Arc::default(),
                gate,
            }
        }
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

    /// Fills the `slots` in-flight batches of a node (`local`) writing to
    /// leader 1 with lone writes held at the gate, queues 100 more, and
    /// checks they wait, go as one entry, and each get exactly one answer.
    async fn queued_writes_share_one_entry(local: NodeId, slots: usize) {
        let (open, gate) = tokio::sync::watch::channel(false);
        let recorder = Recorder::held_at(gate);
        let proposer = Proposer::spawn(local, recorder.clone(), Arc::default());
        let write = |p: Proposer| async move { p.propose(1, Command::Txn(Txn::default())).await };

        // Fill every in-flight slot with a lone write, held at the gate.
        let mut first = Vec::new();
        for i in 1..=slots {
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
            slots,
            "nothing new proposed while every slot is taken"
        );
        open.send_replace(true);
        let mut revisions = Vec::new();
        for handle in first.into_iter().chain(late) {
            let response = handle.await.expect("join").expect("answered");
            revisions.push(response.revision.0);
        }
        revisions.sort_unstable();
        let expected: Vec<u64> = (1..=(slots as u64 + 100)).collect();
        assert_eq!(revisions, expected, "every write answered exactly once");
        let entries = recorder.entries.lock().expect("lock").clone();
        assert_eq!(entries.iter().sum::<usize>(), slots + 100);
        assert!(
            entries.contains(&100),
            "the 100 late writes should form one entry, got entries of {entries:?}"
        );
    }

    #[tokio::test]
    async fn a_follower_forwards_several_batches_and_queues_the_rest_into_one() {
        queued_writes_share_one_entry(2, FORWARDED_IN_FLIGHT).await;
    }

    #[tokio::test]
    async fn the_leader_proposes_one_entry_at_a_time_and_queues_the_rest_into_one() {
        queued_writes_share_one_entry(1, LOCAL_IN_FLIGHT).await;
    }

    #[tokio::test]
    async fn a_forwarded_group_stays_whole_in_one_entry_and_gets_its_answers_in_order() {
        let (open, gate) = tokio::sync::watch::channel(false);
        let recorder = Recorder::held_at(gate);
        let proposer = Proposer::spawn(1, recorder.clone(), Arc::default());
        let lone = |p: Proposer| async move { p.propose(1, Command::Txn(Txn::default())).await };
        // Hold the leader's one slot, then queue a lone write, a group of
        // MAX_BATCH (a full entry by itself) and another lone write.
        let busy = tokio::spawn(lone(proposer.clone()));
        while recorder.entered.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
        let before = tokio::spawn(lone(proposer.clone()));
        let group = {
            let p = proposer.clone();
            tokio::spawn(async move {
                p.propose_all(1, vec![Command::Txn(Txn::default()); MAX_BATCH])
                    .await
            })
        };
        let after = tokio::spawn(lone(proposer.clone()));
        tokio::task::yield_now().await;
        open.send_replace(true);
        busy.await.expect("join").expect("answered");
        let before = before.await.expect("join").expect("answered").revision.0;
        let group: Vec<u64> = group
            .await
            .expect("join")
            .expect("answered")
            .iter()
            .map(|r| r.revision.0)
            .collect();
        let after = after.await.expect("join").expect("answered").revision.0;
        assert_eq!(group.len(), MAX_BATCH, "one answer per command");
        assert!(
            group.windows(2).all(|w| w[1] == w[0] + 1),
            "the group's answers are its own, in order: {group:?}"
        );
        assert_eq!(
            before + 1,
            group[0],
            "the lone write before shares the entry"
        );
        assert!(after > group[MAX_BATCH - 1]);
        let entries = recorder.entries.lock().expect("lock").clone();
        assert_eq!(
            entries,
            vec![1, MAX_BATCH + 1, 1],
            "the group is never split: it fills the entry it joins, and the write after it waits"
        );
    }

    /// Writes that become ready to propose in the same scheduler round as
    /// the proposer (handlers finishing their requests while it is
    /// woken) join the batch it is about to drain, instead of making an
    /// entry of their own.
    #[tokio::test]
    async fn writes_ready_in_the_same_round_join_the_batch_being_drained() {
        let (_open, gate) = tokio::sync::watch::channel(true);
        let recorder = Recorder::held_at(gate);
        let proposer = Proposer::spawn(1, recorder.clone(), Arc::default());
        let write = |p: Proposer| async move { p.propose(1, Command::Txn(Txn::default())).await };
        // Nine writes wait for `go`; one yield lets each start waiting.
        let (go, ready) = tokio::sync::watch::channel(false);
        let rest: Vec<_> = (0..9)
            .map(|_| {
                let (p, mut ready) = (proposer.clone(), ready.clone());
                tokio::spawn(async move {
                    ready.wait_for(|go| *go).await.expect("go");
                    write(p).await
                })
            })
            .collect();
        tokio::task::yield_now().await;
        // On this single-threaded runtime tasks run in the order they are
        // woken: the first write wakes the idle proposer, then `go` makes
        // the nine runnable behind it, all in one round.
        let first = tokio::spawn(write(proposer.clone()));
        tokio::spawn(async move { go.send_replace(true) });
        first.await.expect("join").expect("answered");
        for handle in rest {
            handle.await.expect("join").expect("answered");
        }
        let entries = recorder.entries.lock().expect("lock").clone();
        assert_eq!(entries, vec![10], "one entry for the ten writes");
    }
}

//! The follower's side of write forwarding: one long-lived
//! `ClusterService.Forward` stream to the leader, on which every forwarded
//! command (a proposer's batch, or a command that goes alone) is one
//! message, answered by one message carrying the same `seq`.
//!
//! A stream instead of a unary call per batch: a unary call opens an
//! HTTP/2 stream each time (headers both ways, trailers, a task on the
//! leader), and at a few writes per batch that was a large part of what
//! forwarding cost (BENCHMARKS.md, "What forwarding costs a put"). On the
//! stream a batch costs one DATA frame each way.
//!
//! [`ForwardStreams`] keeps the stream to the node this node last
//! forwarded to, and opens another when the leader changes or the stream
//! ended. A task per stream reads the answers and hands each to the
//! caller waiting on its `seq`. When the stream ends (the leader went
//! away, its connection broke, or it is isolated by fault injection),
//! every caller still waiting is woken with [`StreamEnded`]: as with an
//! unreachable leader, the caller retries wherever leadership goes, with
//! the same proposal ids (`crate::forward`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use kubestore_proto::raft::cluster_service_client::ClusterServiceClient;
use kubestore_proto::raft::{ForwardRequest, ForwardResponse};
use kubestore_storage::NodeId;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tracing::Instrument;

/// The stream ended before the request was answered: whether the leader
/// got it is unknown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamEnded;

/// This node's forwarding stream, to the node it last forwarded to.
#[derive(Debug, Default)]
pub(crate) struct ForwardStreams {
    current: Mutex<Option<(NodeId, ForwardStream)>>,
    /// Streams opened so far (`/debug/cluster`'s `forward_streams_opened`).
    opened: AtomicU64,
}

impl ForwardStreams {
    fn current(&self) -> MutexGuard<'_, Option<(NodeId, ForwardStream)>> {
        // Every change is one assignment: consistent whatever panicked.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many streams this node has opened: one per leader it forwarded
    /// to, and one more each time a stream ended and was needed again.
    pub(crate) fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Sends `command` to `leader` on the stream to it (opened on
    /// `client` if there is none, or the one there is leads elsewhere or
    /// ended) and returns the receiver of its answer. Dropping the
    /// receiver gives up on the answer.
    pub(crate) fn send(
        &self,
        leader: NodeId,
        client: ClusterServiceClient<Channel>,
        command: Vec<u8>,
    ) -> Result<Answer, StreamEnded> {
        let mut current = self.current();
        match current.as_ref() {
            Some((to, stream)) if *to == leader && stream.is_open() => stream.send(command),
            _ => {
                // Dropping the old stream's sender ends its requests; the
                // leader still answers what it has, and the old stream's
                // reader hands those answers on before it ends.
                let stream = ForwardStream::open(leader, client);
                self.opened.fetch_add(1, Ordering::Relaxed);
                let answer = stream.send(command);
                *current = Some((leader, stream));
                answer
            }
        }
    }
}

/// One open stream: the sender of its requests and who waits for which
/// answer.
#[derive(Debug)]
struct ForwardStream {
    requests: mpsc::UnboundedSender<ForwardRequest>,
    waiting: Arc<Waiting>,
}

/// The callers waiting on one stream, by `seq`. Shared with the stream's
/// reader task, which outlives the [`ForwardStream`] when the leader
/// changes with requests still unanswered.
#[derive(Debug)]
struct Waiting {
    state: Mutex<WaitingState>,
}

#[derive(Debug)]
struct WaitingState {
    /// Cleared when the stream ends; nothing waits on it after that.
    open: bool,
    next_seq: u64,
    answers: HashMap<u64, oneshot::Sender<ForwardResponse>>,
}

impl Waiting {
    fn state(&self) -> MutexGuard<'_, WaitingState> {
        // Each change is one insert, remove or clear: consistent whatever
        // panicked while holding it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The answer to one forwarded command, once it comes.
#[derive(Debug)]
pub(crate) struct Answer {
    seq: u64,
    rx: oneshot::Receiver<ForwardResponse>,
    waiting: Arc<Waiting>,
}

impl Answer {
    /// Waits for the leader's answer. [`StreamEnded`] if the stream ended
    /// first.
    pub(crate) async fn received(&mut self) -> Result<ForwardResponse, StreamEnded> {
        (&mut self.rx).await.map_err(|_| StreamEnded)
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        // Answered, given up on, or the stream ended: nobody waits any more.
        self.waiting.state().answers.remove(&self.seq);
    }
}

impl ForwardStream {
    /// Opens the stream to `leader` on `client`; a task reads its answers.
    fn open(leader: NodeId, mut client: ClusterServiceClient<Channel>) -> Self {
        let (requests, outgoing) = mpsc::unbounded_channel();
        let waiting = Arc::new(Waiting {
            state: Mutex::new(WaitingState {
                open: true,
                next_seq: 1,
                answers: HashMap::new(),
            }),
        });
        let reader = Arc::clone(&waiting);
        let span = tracing::debug_span!("forward_stream", leader);
        tokio::spawn(
            async move {
                let ended = async {
                    let mut answers = client
                        .forward(UnboundedReceiverStream::new(outgoing))
                        .await?
                        .into_inner();
                    while let Some(answer) = answers.message().await? {
                        let waiter = reader.state().answers.remove(&answer.seq);
                        if let Some(waiter) = waiter {
                            // The caller may have given up meanwhile.
                            let _ = waiter.send(answer);
                        }
                    }
                    Ok::<_, tonic::Status>(())
                }
                .await;
                match ended {
                    Ok(()) => tracing::debug!("forward stream closed"),
                    Err(status) => tracing::debug!(%status, "forward stream ended"),
                }
                let mut state = reader.state();
                state.open = false;
                // Wakes every caller still waiting, with `StreamEnded`.
                state.answers.clear();
            }
            .instrument(span),
        );
        Self { requests, waiting }
    }

    fn is_open(&self) -> bool {
        self.waiting.state().open && !self.requests.is_closed()
    }

    fn send(&self, command: Vec<u8>) -> Result<Answer, StreamEnded> {
        let (tx, rx) = oneshot::channel();
        let seq = {
            let mut state = self.waiting.state();
            if !state.open {
                return Err(StreamEnded);
            }
            let seq = state.next_seq;
            state.next_seq += 1;
            state.answers.insert(seq, tx);
            seq
        };
        let answer = Answer {
            seq,
            rx,
            waiting: Arc::clone(&self.waiting),
        };
        self.requests
            .send(ForwardRequest { command, seq })
            .map_err(|_| StreamEnded)?;
        Ok(answer)
    }
}

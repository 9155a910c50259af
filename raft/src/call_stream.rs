//! Calls to a peer as messages on one long-lived bidirectional gRPC
//! stream, each request answered by the message carrying the same `seq`,
//! in whatever order the peer answers them.
//!
//! A stream instead of a unary call per request: a unary call opens an
//! HTTP/2 stream each time (headers both ways, trailers, a task on the
//! receiver), and at a few writes per request that was a large part of
//! what a node-to-node call cost (BENCHMARKS.md, "What forwarding costs a
//! put"). On the stream a request costs one DATA frame each way. Log
//! replication ([`crate::network`]), write forwarding (`crate::forward`)
//! and a follower's read indexes (`crate::read_index`) travel this way.
//!
//! The calling side: a task per stream reads the answers and hands each
//! to the caller waiting on its `seq`. When the stream ends (the peer went
//! away, its connection broke, it is isolated by fault injection, or
//! [`CallStream::close`] was called), every caller still waiting is woken
//! with [`StreamEnded`], and the stream is not used again: the owner opens
//! another for the next call. The answering side ([`serve`]) answers each
//! request as it is ready, several at once.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::stream::{FuturesUnordered, StreamExt};
use kubestore_proto::raft::{
    ForwardRequest, ForwardResponse, ReadIndexRequest, ReadIndexResponse, SequencedPayload,
};
use kubestore_storage::{NodeId, TypeConfig};
use openraft::Raft;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::Instrument;

use crate::faults::Faults;

/// A request or answer on a call stream: it carries the number that pairs
/// an answer with its request.
pub(crate) trait Sequenced: Send + 'static {
    /// The number of the request this message is or answers.
    fn seq(&self) -> u64;
}

/// Every message of the peer protocol's call streams carries its `seq`.
macro_rules! sequenced {
    ($($message:ty),*) => {
        $(impl Sequenced for $message {
            fn seq(&self) -> u64 {
                self.seq
            }
        })*
    };
}

sequenced!(
    ForwardRequest,
    ForwardResponse,
    ReadIndexRequest,
    ReadIndexResponse,
    SequencedPayload
);

/// The stream ended before the request was answered: whether the peer got
/// it is unknown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamEnded;

/// The requests a call stream sends: what the tonic client's streaming
/// method takes.
pub(crate) type Outgoing<Req> = UnboundedReceiverStream<Req>;

/// One open stream: the sender of its requests and who waits for which
/// answer.
#[derive(Debug)]
pub(crate) struct CallStream<Req, Resp> {
    requests: mpsc::UnboundedSender<Req>,
    waiting: Arc<Waiting<Resp>>,
    reader: AbortHandle,
}

/// The callers waiting on one stream, by `seq`. Shared with the stream's
/// reader task, which outlives the [`CallStream`] when its owner replaces
/// it with requests still unanswered.
#[derive(Debug)]
struct Waiting<Resp> {
    state: Mutex<WaitingState<Resp>>,
}

#[derive(Debug)]
struct WaitingState<Resp> {
    /// Cleared when the stream ends; nothing waits on it after that.
    open: bool,
    next_seq: u64,
    /// Requests sent and not answered yet, including those whose caller
    /// gave up.
    unanswered: u64,
    answers: HashMap<u64, oneshot::Sender<Resp>>,
}

impl<Resp> Waiting<Resp> {
    fn state(&self) -> MutexGuard<'_, WaitingState<Resp>> {
        // Each change is one insert, remove or clear: consistent whatever
        // panicked while holding it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the stream ended and wakes every caller still waiting, with
    /// [`StreamEnded`].
    fn end(&self) {
        let mut state = self.state();
        state.open = false;
        state.answers.clear();
    }
}

/// The answer to one call, once it comes.
#[derive(Debug)]
pub(crate) struct Answer<Resp> {
    seq: u64,
    rx: oneshot::Receiver<Resp>,
    waiting: Arc<Waiting<Resp>>,
}

impl<Resp> Answer<Resp> {
    /// Waits for the peer's answer. [`StreamEnded`] if the stream ended
    /// first.
    pub(crate) async fn received(&mut self) -> Result<Resp, StreamEnded> {
        (&mut self.rx).await.map_err(|_| StreamEnded)
    }
}

impl<Resp> Drop for Answer<Resp> {
    fn drop(&mut self) {
        // Answered, given up on, or the stream ended: nobody waits any more.
        self.waiting.state().answers.remove(&self.seq);
    }
}

impl<Req: Sequenced, Resp: Sequenced> CallStream<Req, Resp> {
    /// Opens a stream: `call` starts the streaming RPC with the requests
    /// to send, and a task (in `span`) reads its answers.
    pub(crate) fn open<F, Fut>(span: tracing::Span, call: F) -> Self
    where
        F: FnOnce(Outgoing<Req>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>>
            + Send
            + 'static,
    {
        let (requests, outgoing) = mpsc::unbounded_channel();
        let waiting = Arc::new(Waiting {
            state: Mutex::new(WaitingState {
                open: true,
                next_seq: 1,
                unanswered: 0,
                answers: HashMap::new(),
            }),
        });
        let reader = Arc::clone(&waiting);
        let task = tokio::spawn(
            async move {
                // Ends the stream for the waiters however this task ends,
                // aborted included.
                let _ended = EndOnDrop(Arc::clone(&reader));
                let ended = async {
                    let mut answers = call(UnboundedReceiverStream::new(outgoing))
                        .await?
                        .into_inner();
                    while let Some(answer) = answers.message().await? {
                        let waiter = {
                            let mut state = reader.state();
                            state.unanswered = state.unanswered.saturating_sub(1);
                            state.answers.remove(&answer.seq())
                        };
                        if let Some(waiter) = waiter {
                            // The caller may have given up meanwhile.
                            let _ = waiter.send(answer);
                        }
                    }
                    Ok::<_, tonic::Status>(())
                }
                .await;
                match ended {
                    Ok(()) => tracing::debug!("call stream closed"),
                    Err(status) => tracing::debug!(%status, "call stream ended"),
                }
            }
            .instrument(span),
        );
        Self {
            requests,
            waiting,
            reader: task.abort_handle(),
        }
    }

    /// Whether the stream can still carry a call.
    pub(crate) fn is_open(&self) -> bool {
        self.waiting.state().open && !self.requests.is_closed()
    }

    /// How many requests were sent and are not answered yet, including
    /// those whose caller gave up: a peer that stopped answering (paused,
    /// or cut off without the connection breaking) lets this grow.
    pub(crate) fn unanswered(&self) -> u64 {
        self.waiting.state().unanswered
    }

    /// Sends the request that `request` makes of the next `seq` and
    /// returns the receiver of its answer. Dropping the receiver gives up
    /// on the answer (the peer still gets the request).
    pub(crate) fn send(
        &self,
        request: impl FnOnce(u64) -> Req,
    ) -> Result<Answer<Resp>, StreamEnded> {
        let (tx, rx) = oneshot::channel();
        let seq = {
            let mut state = self.waiting.state();
            if !state.open {
                return Err(StreamEnded);
            }
            let seq = state.next_seq;
            state.next_seq += 1;
            state.unanswered += 1;
            state.answers.insert(seq, tx);
            seq
        };
        let answer = Answer {
            seq,
            rx,
            waiting: Arc::clone(&self.waiting),
        };
        self.requests.send(request(seq)).map_err(|_| StreamEnded)?;
        Ok(answer)
    }

    /// Ends the stream now: requests not yet sent are dropped, the peer
    /// sees the stream reset, and every caller still waiting gets
    /// [`StreamEnded`].
    pub(crate) fn close(&self) {
        self.reader.abort();
        self.waiting.end();
    }
}

/// A follower's stream of calls to the leader: to the node it last
/// called, replaced by another when the leader changes or the stream
/// ended. Write forwarding and read indexes each keep one.
#[derive(Debug)]
pub(crate) struct LeaderStream<Req, Resp> {
    name: &'static str,
    current: Mutex<Option<(NodeId, CallStream<Req, Resp>)>>,
    /// Streams opened so far.
    opened: AtomicU64,
}

impl<Req: Sequenced, Resp: Sequenced> LeaderStream<Req, Resp> {
    /// No stream yet; `name` names its tracing span.
    pub(crate) fn new(name: &'static str) -> Self {
        Self {
            name,
            current: Mutex::new(None),
            opened: AtomicU64::new(0),
        }
    }

    /// How many streams this node has opened: one per leader it called,
    /// and one more each time a stream ended and was needed again.
    pub(crate) fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Sends the request `request` makes of its `seq` to `leader`, on the
    /// stream to it, or on one that `call` opens if there is none, the one
    /// there is goes elsewhere, or it ended. Returns the receiver of its
    /// answer; dropping the receiver gives up on the answer.
    pub(crate) fn send<F, Fut>(
        &self,
        leader: NodeId,
        request: impl FnOnce(u64) -> Req,
        call: F,
    ) -> Result<Answer<Resp>, StreamEnded>
    where
        F: FnOnce(Outgoing<Req>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>>
            + Send
            + 'static,
    {
        // Every change is one assignment: consistent whatever panicked.
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, stream)) = current
            .as_ref()
            .filter(|(to, stream)| *to == leader && stream.is_open())
        {
            return stream.send(request);
        }
        // Dropping the old stream's sender ends its requests; the old
        // leader still answers what it has, and the old stream's reader
        // hands those answers on before it ends.
        let stream = CallStream::open(
            tracing::debug_span!("leader_stream", stream = self.name, leader),
            call,
        );
        self.opened.fetch_add(1, Ordering::Relaxed);
        let answer = stream.send(request);
        *current = Some((leader, stream));
        answer
    }
}

/// Ends a stream for its waiters when its reader task ends or is aborted.
struct EndOnDrop<Resp>(Arc<Waiting<Resp>>);

impl<Resp> Drop for EndOnDrop<Resp> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The answers a served call stream sends: what a tonic service's
/// streaming method returns.
pub(crate) type Answers<Resp> = UnboundedReceiverStream<Result<Resp, tonic::Status>>;

/// Serves one peer's call stream on a task (in `span`): each request is
/// handed to `answer` as it arrives (several at once) and its answer sent
/// when it is ready, in whatever order that is. Refused `Unavailable` at
/// once while this node is isolated by fault injection. The stream ends
/// when the peer closes its side and every request is answered, or when
/// the peer goes away. It ends `Unavailable` when `raft` shuts down (the
/// peer server's graceful shutdown waits for every call, so a stream the
/// peer keeps open must not outlive the node), or when a request arrives
/// while this node is isolated; the peer then retries as it would with an
/// unreachable node. An answer that is an error (a request that could not
/// be understood) ends the stream with that error.
pub(crate) fn serve<Req, Resp, F, Fut>(
    span: tracing::Span,
    request: tonic::Request<tonic::Streaming<Req>>,
    raft: &Raft<TypeConfig>,
    faults: &Faults,
    mut answer: F,
) -> Result<tonic::Response<Answers<Resp>>, tonic::Status>
where
    Req: Send + 'static,
    Resp: Send + 'static,
    F: FnMut(Req) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Resp, tonic::Status>> + Send + 'static,
{
    if faults.is_isolated() {
        return Err(tonic::Status::unavailable("isolated by fault injection"));
    }
    let mut requests = request.into_inner();
    let faults = faults.clone();
    let raft = raft.clone();
    let (answers, outgoing) = mpsc::unbounded_channel();
    tokio::spawn(
        async move {
            let mut pending = FuturesUnordered::new();
            let mut open = true;
            let stopped = raft_stopped(&raft);
            tokio::pin!(stopped);
            while open || !pending.is_empty() {
                tokio::select! {
                    () = &mut stopped => {
                        let _ = answers.send(Err(tonic::Status::unavailable("this node is shutting down")));
                        return;
                    }
                    request = requests.message(), if open => match request {
                        Ok(Some(request)) => {
                            if faults.is_isolated() {
                                let _ = answers.send(Err(tonic::Status::unavailable("isolated by fault injection")));
                                return;
                            }
                            pending.push(answer(request));
                        }
                        Ok(None) => open = false,
                        Err(status) => {
                            tracing::debug!(%status, "call stream broken");
                            let _ = answers.send(Err(status));
                            return;
                        }
                    },
                    Some(answer) = pending.next() => {
                        let failed = answer.is_err();
                        if answers.send(answer).is_err() || failed {
                            return;
                        }
                    }
                    () = answers.closed() => return,
                }
            }
        }
        .instrument(span),
    );
    Ok(tonic::Response::new(UnboundedReceiverStream::new(outgoing)))
}

/// Resolves once `raft` has shut down.
async fn raft_stopped(raft: &Raft<TypeConfig>) {
    let mut metrics = raft.metrics();
    // An error: the metrics' sender is gone, which only Raft's shutdown
    // does.
    let _ = metrics
        .wait_for(|m| m.state == openraft::ServerState::Shutdown)
        .await;
}

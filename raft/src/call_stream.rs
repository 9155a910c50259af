//! Calls to a peer as messages on one long-lived TCP connection of the
//! peer port, each request answered by the message carrying the same
//! `seq`, in whatever order the peer answers them.
//!
//! A stream instead of a call per request: a unary gRPC call opens an
//! HTTP/2 stream each time (headers both ways, trailers, a task on the
//! receiver), and at a few writes per request that was a large part of
//! what a node-to-node call cost (BENCHMARKS.md, "What forwarding costs a
//! put"). A plain connection instead of a gRPC stream: on HTTP/2 each
//! message still passed through the body's task, the connection's task and
//! its flow control on both sides, two wake-ups more per message than a
//! writer task draining a queue into the socket (BENCHMARKS.md, "Call
//! streams on plain connections"). etcd's peers likewise talk on long-lived
//! streams of their own framing, not gRPC. Log replication
//! ([`crate::network`]), write forwarding (`crate::forward`) and a
//! follower's read indexes (`crate::read_index`) travel this way.
//!
//! The wire: the caller opens a TCP connection to the peer port and
//! writes [`PREAMBLE`] and the [`StreamKind`] byte; then each side writes
//! frames, a 4-byte big-endian length and that many bytes of one protobuf
//! message (`proto/raft.proto`): requests one way, answers the other. The
//! caller ends its requests by shutting its side down; the answering side
//! closes the connection when every request is answered. Either side ends
//! the stream early by closing the connection, which is all a refusal is.
//! The peer port tells these connections from its gRPC ones by their
//! first byte ([`crate::peer_port`]).
//!
//! The calling side: a task per stream writes the requests and reads the
//! answers, handing each to the caller waiting on its `seq`. When the
//! stream ends (the peer went away, its connection broke, it is isolated
//! by fault injection, or `CallStream::close` was called), every caller
//! still waiting is woken with `StreamEnded`, and the stream is not used
//! again: the owner opens another for the next call. The answering side
//! (`serve`) answers each request as it is ready, several at once.

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use kubestore_proto::raft::{
    ForwardRequest, ForwardResponse, ReadIndexRequest, ReadIndexResponse, SequencedPayload,
};
use kubestore_storage::{NodeId, TypeConfig};
use openraft::Raft;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use tracing::Instrument;

use crate::faults::Faults;

/// Largest message a node accepts from a peer (a batch of entries), on a
/// call stream or a gRPC call.
pub const MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

/// The first bytes a caller writes on a call-stream connection. Its first
/// byte is never an HTTP/2 client's (whose preface starts with `P`), which
/// is how the peer port tells the two apart; the digit is the version of
/// this wire.
pub const PREAMBLE: &[u8; 8] = b"KSCALL1\n";

/// What a call stream carries: the byte after [`PREAMBLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StreamKind {
    /// A leader's AppendEntries to one follower (`SequencedPayload` both
    /// ways, bincode inside).
    Entries = 1,
    /// A follower's forwarded writes (`ForwardRequest`, `ForwardResponse`).
    Forward = 2,
    /// A follower's read-index requests (`ReadIndexRequest`,
    /// `ReadIndexResponse`).
    ReadIndex = 3,
}

impl StreamKind {
    /// The kind a preamble's last byte names, if any.
    pub(crate) fn from_byte(byte: u8) -> Option<Self> {
        [Self::Entries, Self::Forward, Self::ReadIndex]
            .into_iter()
            .find(|kind| *kind as u8 == byte)
    }
}

/// How long a caller waits for a peer to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long sent bytes may go unacknowledged before the kernel gives up on
/// the connection (`TCP_USER_TIMEOUT`), and how long an idle connection
/// waits before probing its peer: a peer whose host vanished ends the
/// stream instead of holding its callers until their deadlines forever.
/// As long as HTTP/2 keep-alive took to notice on the gRPC streams these
/// replaced (10 s interval, 20 s timeout), so a merely paused peer is still
/// noticed by what notices it first (`MAX_UNANSWERED_ENTRIES` in
/// [`crate::network`]).
const DEAD_PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// Frames queued while the writer was busy are written together, up to
/// this many bytes per write.
const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// A request or answer on a call stream: it carries the number that pairs
/// an answer with its request.
pub(crate) trait Sequenced: prost::Message + Default + 'static {
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

/// One open stream: the queue of its requests and who waits for which
/// answer.
#[derive(Debug)]
pub(crate) struct CallStream<Req, Resp> {
    requests: mpsc::UnboundedSender<Req>,
    waiting: Arc<Waiting<Resp>>,
    task: AbortHandle,
}

/// The callers waiting on one stream, by `seq`. Shared with the stream's
/// task, which outlives the [`CallStream`] when its owner replaces it with
/// requests still unanswered.
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

    /// Hands `answer` to the caller waiting on its `seq`, if it still
    /// waits.
    fn answered(&self, answer: Resp)
    where
        Resp: Sequenced,
    {
        let waiter = {
            let mut state = self.state();
            state.unanswered = state.unanswered.saturating_sub(1);
            state.answers.remove(&answer.seq())
        };
        if let Some(waiter) = waiter {
            // The caller may have given up meanwhile.
            let _ = waiter.send(answer);
        }
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
    /// Opens a stream of `kind` to the peer port at `addr`: a task (in
    /// `span`) connects, writes the requests as they are sent and reads
    /// their answers. Requests sent before the connection is up wait for
    /// it.
    pub(crate) fn open(span: tracing::Span, addr: String, kind: StreamKind) -> Self {
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
                match Self::run(&addr, kind, outgoing, &reader).await {
                    Ok(()) => tracing::debug!("call stream closed"),
                    Err(error) => tracing::debug!(%error, "call stream ended"),
                }
            }
            .instrument(span),
        );
        Self {
            requests,
            waiting,
            task: task.abort_handle(),
        }
    }

    /// Connects, then writes requests and reads answers until the peer
    /// closes the connection (after the last answer, once this side's
    /// requests ended) or it breaks.
    async fn run(
        addr: &str,
        kind: StreamKind,
        outgoing: mpsc::UnboundedReceiver<Req>,
        waiting: &Waiting<Resp>,
    ) -> io::Result<()> {
        let connection = connect(addr, kind).await?;
        let (from, to) = connection.into_split();
        let writing = write_frames(outgoing, to);
        let reading = async {
            let mut answers = frames(from);
            while let Some(frame) = answers.next().await {
                waiting.answered(Resp::decode(frame?)?);
            }
            Ok::<_, io::Error>(())
        };
        tokio::pin!(writing, reading);
        let mut requests_ended = false;
        loop {
            tokio::select! {
                // The owner dropped the stream: this side's requests have
                // ended, and the peer still answers what it has.
                written = &mut writing, if !requests_ended => {
                    written?;
                    requests_ended = true;
                }
                read = &mut reading => return read,
            }
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

    /// Ends the stream now: requests not yet written are dropped, the
    /// connection is closed, and every caller still waiting gets
    /// [`StreamEnded`].
    pub(crate) fn close(&self) {
        self.task.abort();
        self.waiting.end();
    }
}

/// A follower's stream of calls to the leader: to the node it last
/// called, replaced by another when the leader changes or the stream
/// ended. Write forwarding and read indexes each keep one.
#[derive(Debug)]
pub(crate) struct LeaderStream<Req, Resp> {
    kind: StreamKind,
    current: Mutex<Option<(NodeId, CallStream<Req, Resp>)>>,
    /// Streams opened so far.
    opened: AtomicU64,
}

impl<Req: Sequenced, Resp: Sequenced> LeaderStream<Req, Resp> {
    /// No stream yet; the streams it opens carry `kind`.
    pub(crate) fn new(kind: StreamKind) -> Self {
        Self {
            kind,
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
    /// stream to it, or on one opened to `addr` (the leader's peer port)
    /// if there is none, the one there is goes elsewhere, or it ended.
    /// Returns the receiver of its answer; dropping the receiver gives up
    /// on the answer.
    pub(crate) fn send(
        &self,
        leader: NodeId,
        addr: impl FnOnce() -> String,
        request: impl FnOnce(u64) -> Req,
    ) -> Result<Answer<Resp>, StreamEnded> {
        // Every change is one assignment: consistent whatever panicked.
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, stream)) = current
            .as_ref()
            .filter(|(to, stream)| *to == leader && stream.is_open())
        {
            return stream.send(request);
        }
        // Dropping the old stream's sender ends its requests; the old
        // leader still answers what it has, and the old stream's task
        // hands those answers on before it ends.
        let stream = CallStream::open(
            tracing::debug_span!("leader_stream", kind = ?self.kind, leader),
            addr(),
            self.kind,
        );
        self.opened.fetch_add(1, Ordering::Relaxed);
        let answer = stream.send(request);
        *current = Some((leader, stream));
        answer
    }
}

/// Ends a stream for its waiters when its task ends or is aborted.
struct EndOnDrop<Resp>(Arc<Waiting<Resp>>);

impl<Resp> Drop for EndOnDrop<Resp> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Opens a call-stream connection of `kind` to the peer port at `addr`
/// (`host:port`, or a URL of the peer port as `--peers` may give it).
async fn connect(addr: &str, kind: StreamKind) -> io::Result<TcpStream> {
    let host_port = addr
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/');
    let mut connection = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(host_port))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("connecting to {addr}")))??;
    tune(&connection)?;
    let mut preamble = PREAMBLE.to_vec();
    preamble.push(kind as u8);
    connection.write_all(&preamble).await?;
    Ok(connection)
}

/// Sets a call-stream connection's socket options, on either side: no
/// Nagle (messages are small and latency-bound), and a bound on how long
/// a vanished peer goes unnoticed ([`DEAD_PEER_TIMEOUT`]).
pub(crate) fn tune(connection: &TcpStream) -> io::Result<()> {
    connection.set_nodelay(true)?;
    let socket = socket2::SockRef::from(connection);
    socket.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(DEAD_PEER_TIMEOUT / 3)
            .with_interval(DEAD_PEER_TIMEOUT / 6)
            .with_retries(4),
    )?;
    #[cfg(target_os = "linux")]
    socket.set_tcp_user_timeout(Some(DEAD_PEER_TIMEOUT))?;
    Ok(())
}

/// The frames arriving on `from`, each one message's bytes.
fn frames<R: AsyncRead>(from: R) -> FramedRead<R, LengthDelimitedCodec> {
    FramedRead::new(
        from,
        LengthDelimitedCodec::builder()
            .big_endian()
            .length_field_length(4)
            .max_frame_length(MAX_MESSAGE_BYTES)
            .new_codec(),
    )
}

/// Writes each message `messages` yields to `to` as a frame, those queued
/// meanwhile together in one write, and shuts `to` down once the sender is
/// gone and everything is written.
async fn write_frames<M: prost::Message, W: AsyncWrite + Unpin>(
    mut messages: mpsc::UnboundedReceiver<M>,
    mut to: W,
) -> io::Result<()> {
    let mut buffer = Vec::with_capacity(16 * 1024);
    while let Some(message) = messages.recv().await {
        put_frame(&mut buffer, &message)?;
        while buffer.len() < WRITE_BATCH_BYTES {
            match messages.try_recv() {
                Ok(message) => put_frame(&mut buffer, &message)?,
                Err(_) => break,
            }
        }
        to.write_all(&buffer).await?;
        buffer.clear();
        if buffer.capacity() > WRITE_BATCH_BYTES {
            // A batch of entries once made it large: do not keep that.
            buffer = Vec::with_capacity(16 * 1024);
        }
    }
    to.shutdown().await
}

/// Appends `message` to `buffer` as one frame: its length, then its bytes.
fn put_frame<M: prost::Message>(buffer: &mut Vec<u8>, message: &M) -> io::Result<()> {
    let len = message.encoded_len();
    let too_long = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a message of {len} bytes is over the peer limit of {MAX_MESSAGE_BYTES}"),
        )
    };
    if len > MAX_MESSAGE_BYTES {
        return Err(too_long());
    }
    let prefix = u32::try_from(len).map_err(|_| too_long())?;
    buffer.extend_from_slice(&prefix.to_be_bytes());
    // A Vec grows as needed: encoding into it cannot run out of room.
    message.encode(buffer).map_err(io::Error::other)
}

/// Serves one peer's call stream on `connection` (past its preamble) on a
/// task (in `span`): each request is handed to `answer` as it arrives
/// (several at once) and its answer written when it is ready, in whatever
/// order that is. Refused at once while this node is isolated by fault
/// injection. The connection is closed when the peer ended its requests
/// and every one is answered, or when the peer goes away; and at once
/// when `raft` shuts down, when a request arrives while this node is
/// isolated, when a request does not decode, or when an answer is an
/// error (a request that could not be understood). The peer then sees
/// the stream ended and retries as it would with an unreachable node.
pub(crate) fn serve<Req, Resp, F, Fut, E>(
    span: tracing::Span,
    connection: TcpStream,
    raft: &Raft<TypeConfig>,
    faults: &Faults,
    mut answer: F,
) where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + 'static,
    F: FnMut(Req) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Resp, E>> + Send + 'static,
    E: Display,
{
    if faults.is_isolated() {
        tracing::debug!(parent: &span, "refused: isolated by fault injection");
        return;
    }
    let faults = faults.clone();
    let raft = raft.clone();
    tokio::spawn(
        async move {
            let (from, to) = connection.into_split();
            let (answers, outgoing) = mpsc::unbounded_channel::<Resp>();
            let writing = write_frames(outgoing, to);
            tokio::pin!(writing);
            let mut requests = frames(from);
            let mut pending = FuturesUnordered::new();
            let mut open = true;
            let stopped = raft_stopped(&raft);
            tokio::pin!(stopped);
            let ended = loop {
                if !open && pending.is_empty() {
                    break None;
                }
                tokio::select! {
                    () = &mut stopped => break Some("this node is shutting down".to_string()),
                    request = requests.next(), if open => match request {
                        Some(Ok(frame)) => {
                            if faults.is_isolated() {
                                break Some("isolated by fault injection".to_string());
                            }
                            match Req::decode(frame) {
                                Ok(request) => pending.push(answer(request)),
                                Err(e) => break Some(format!("undecodable request: {e}")),
                            }
                        }
                        None => open = false,
                        Some(Err(e)) => break Some(format!("broken: {e}")),
                    },
                    Some(answered) = pending.next() => match answered {
                        Ok(answered) => {
                            // The writer ends only on an error, found below.
                            let _ = answers.send(answered);
                        }
                        Err(e) => break Some(format!("unanswerable request: {e}")),
                    },
                    written = &mut writing => break Some(match written {
                        Ok(()) => "writer ended".to_string(),
                        Err(e) => format!("write failed: {e}"),
                    }),
                }
            };
            match ended {
                Some(why) => tracing::debug!(%why, "call stream ended"),
                None => {
                    // Every request is answered: flush the answers, then
                    // close.
                    drop(answers);
                    if let Err(e) = writing.await {
                        tracing::debug!(error = %e, "call stream's last answers not written");
                    }
                }
            }
        }
        .instrument(span),
    );
}

/// Sends `requests` on one call stream of `kind` to the peer port at
/// `addr`, as a peer does, ends the requests, and returns every answer the
/// node wrote before it closed the connection, in the order they came.
/// For tests and tools that speak to the peer port as a node does.
pub async fn call_all<Req, Resp>(
    addr: &str,
    kind: StreamKind,
    requests: Vec<Req>,
) -> io::Result<Vec<Resp>>
where
    Req: prost::Message + Send + 'static,
    Resp: prost::Message + Default,
{
    let (from, to) = connect(addr, kind).await?.into_split();
    let (queue, outgoing) = mpsc::unbounded_channel();
    for request in requests {
        let _ = queue.send(request);
    }
    drop(queue);
    let writing = tokio::spawn(write_frames(outgoing, to));
    let mut answers = Vec::new();
    let mut frames = frames(from);
    while let Some(frame) = frames.next().await {
        answers.push(Resp::decode(frame?)?);
    }
    writing.await.map_err(io::Error::other)??;
    Ok(answers)
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

#[cfg(test)]
mod tests {
    use prost::Message as _;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;

    type ReadIndexStream = CallStream<ReadIndexRequest, ReadIndexResponse>;

    /// A peer port that takes one call stream, checks its preamble, and
    /// hands the connection to `peer`; the handle says whether the peer's
    /// side held up (its checks panic in that task).
    async fn peer_port<F, Fut>(kind: StreamKind, peer: F) -> (String, tokio::task::JoinHandle<()>)
    where
        F: FnOnce(
                FramedRead<tokio::net::tcp::OwnedReadHalf, LengthDelimitedCodec>,
                tokio::net::tcp::OwnedWriteHalf,
            ) -> Fut
            + Send
            + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let peer_side = tokio::spawn(async move {
            let (mut connection, _) = listener.accept().await.expect("accept");
            let mut preamble = [0u8; PREAMBLE.len() + 1];
            connection
                .read_exact(&mut preamble)
                .await
                .expect("preamble");
            assert_eq!(&preamble[..PREAMBLE.len()], PREAMBLE);
            assert_eq!(StreamKind::from_byte(preamble[PREAMBLE.len()]), Some(kind));
            let (from, to) = connection.into_split();
            peer(frames(from), to).await;
        });
        (addr, peer_side)
    }

    /// Waits for `what` at most 10 s: a broken stream fails the test
    /// instead of hanging it.
    async fn within<T>(what: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), what)
            .await
            .expect("done within 10 s")
    }

    /// Reads `n` read-index requests off `requests`.
    async fn read_requests(
        requests: &mut FramedRead<tokio::net::tcp::OwnedReadHalf, LengthDelimitedCodec>,
        n: usize,
    ) -> Vec<ReadIndexRequest> {
        let mut read = Vec::new();
        for _ in 0..n {
            let frame = requests.next().await.expect("a request").expect("a frame");
            read.push(ReadIndexRequest::decode(frame).expect("decodes"));
        }
        read
    }

    fn answer(to: &ReadIndexRequest) -> ReadIndexResponse {
        ReadIndexResponse {
            index: to.seq * 10,
            seq: to.seq,
            ..Default::default()
        }
    }

    async fn write_answers(
        to: &mut tokio::net::tcp::OwnedWriteHalf,
        answers: &[ReadIndexResponse],
    ) {
        let mut buffer = Vec::new();
        for a in answers {
            put_frame(&mut buffer, a).expect("frame");
        }
        to.write_all(&buffer).await.expect("write");
    }

    #[tokio::test]
    async fn each_answer_reaches_the_caller_of_its_request_in_any_order() {
        let (addr, peer_side) =
            peer_port(StreamKind::ReadIndex, |mut requests, mut to| async move {
                let read = read_requests(&mut requests, 3).await;
                let reversed: Vec<_> = read.iter().rev().map(answer).collect();
                write_answers(&mut to, &reversed).await;
                // Hold the connection until the caller is done with it.
                let _ = requests.next().await;
            })
            .await;
        let stream = ReadIndexStream::open(tracing::Span::none(), addr, StreamKind::ReadIndex);
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(stream.send(|seq| ReadIndexRequest { seq }).expect("sent"));
        }
        for (seq, answer) in (1..).zip(answers.iter_mut()) {
            let got = within(answer.received()).await.expect("answered");
            assert_eq!((got.seq, got.index), (seq, seq * 10));
        }
        assert_eq!(stream.unanswered(), 0);
        assert!(stream.is_open());
        drop(stream);
        within(peer_side).await.expect("the peer's side");
    }

    #[tokio::test]
    async fn a_connection_that_ends_wakes_every_waiting_caller() {
        let (addr, peer_side) = peer_port(StreamKind::ReadIndex, |mut requests, to| async move {
            read_requests(&mut requests, 2).await;
            drop((requests, to));
        })
        .await;
        let stream = ReadIndexStream::open(tracing::Span::none(), addr, StreamKind::ReadIndex);
        let mut first = stream.send(|seq| ReadIndexRequest { seq }).expect("sent");
        let mut second = stream.send(|seq| ReadIndexRequest { seq }).expect("sent");
        assert!(within(first.received()).await.is_err());
        assert!(within(second.received()).await.is_err());
        assert!(!stream.is_open());
        assert!(stream.send(|seq| ReadIndexRequest { seq }).is_err());
        // The peer read both requests whole before it closed.
        within(peer_side).await.expect("the peer's side");
    }

    #[tokio::test]
    async fn closing_a_stream_wakes_every_waiting_caller() {
        let (read, was_read) = oneshot::channel();
        let (addr, peer_side) = peer_port(StreamKind::ReadIndex, |mut requests, _to| async move {
            read_requests(&mut requests, 1).await;
            let _ = read.send(());
            // Answers nothing, and sees the connection end.
            while let Some(Ok(_)) = requests.next().await {}
        })
        .await;
        let stream = ReadIndexStream::open(tracing::Span::none(), addr, StreamKind::ReadIndex);
        let mut answer = stream.send(|seq| ReadIndexRequest { seq }).expect("sent");
        within(was_read).await.expect("the peer read the request");
        assert_eq!(stream.unanswered(), 1);
        stream.close();
        assert!(within(answer.received()).await.is_err());
        assert!(!stream.is_open());
        within(peer_side).await.expect("the peer's side");
    }

    /// A follower's stream to an old leader is dropped when it calls a new
    /// one: the old leader sees the requests end and still answers what it
    /// has, and those answers reach their callers.
    #[tokio::test]
    async fn a_dropped_stream_ends_its_requests_and_still_hands_on_their_answers() {
        let (addr, peer_side) = peer_port(StreamKind::Forward, |mut requests, mut to| async move {
            let mut read = Vec::new();
            while let Some(frame) = requests.next().await {
                read.push(ForwardRequest::decode(frame.expect("a frame")).expect("decodes"));
            }
            let mut buffer = Vec::new();
            for request in &read {
                let answer = ForwardResponse {
                    response: request.command.clone(),
                    seq: request.seq,
                    ..Default::default()
                };
                put_frame(&mut buffer, &answer).expect("frame");
            }
            to.write_all(&buffer).await.expect("write");
        })
        .await;
        let stream = CallStream::<ForwardRequest, ForwardResponse>::open(
            tracing::Span::none(),
            addr,
            StreamKind::Forward,
        );
        let mut answer = stream
            .send(|seq| ForwardRequest {
                command: b"put".to_vec(),
                seq,
            })
            .expect("sent");
        drop(stream);
        let got = within(answer.received())
            .await
            .expect("answered after the drop");
        assert_eq!(got.response, b"put");
        within(peer_side).await.expect("the peer's side");
    }

    #[tokio::test]
    async fn a_peer_that_is_not_there_ends_the_stream() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let stream = ReadIndexStream::open(tracing::Span::none(), addr, StreamKind::ReadIndex);
        let mut answer = stream.send(|seq| ReadIndexRequest { seq }).expect("queued");
        assert!(within(answer.received()).await.is_err());
    }
}

//! The follower's side of write forwarding: one long-lived
//! `ClusterService.Forward` stream ([`crate::call_stream`]) to the leader,
//! on which every forwarded command (a proposer's batch, or a command that
//! goes alone) is one message, answered by one message carrying the same
//! `seq`.
//!
//! [`ForwardStreams`] keeps the stream to the node this node last
//! forwarded to, and opens another when the leader changes or the stream
//! ended. When the stream ends (the leader went away, its connection
//! broke, or it is isolated by fault injection), every caller still
//! waiting is woken with [`StreamEnded`]: as with an unreachable leader,
//! the caller retries wherever leadership goes, with the same proposal ids
//! (`crate::forward`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use kubestore_proto::raft::cluster_service_client::ClusterServiceClient;
use kubestore_proto::raft::{ForwardRequest, ForwardResponse};
use kubestore_storage::NodeId;
use tonic::transport::Channel;

use crate::call_stream::{Answer, CallStream, Sequenced, StreamEnded};

impl Sequenced for ForwardRequest {
    fn seq(&self) -> u64 {
        self.seq
    }
}

impl Sequenced for ForwardResponse {
    fn seq(&self) -> u64 {
        self.seq
    }
}

type ForwardStream = CallStream<ForwardRequest, ForwardResponse>;

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
        mut client: ClusterServiceClient<Channel>,
        command: Vec<u8>,
    ) -> Result<Answer<ForwardResponse>, StreamEnded> {
        let request = |seq| ForwardRequest { command, seq };
        let mut current = self.current();
        match current.as_ref() {
            Some((to, stream)) if *to == leader && stream.is_open() => stream.send(request),
            _ => {
                // Dropping the old stream's sender ends its requests; the
                // leader still answers what it has, and the old stream's
                // reader hands those answers on before it ends.
                let stream = ForwardStream::open(
                    tracing::debug_span!("forward_stream", leader),
                    move |outgoing| async move { client.forward(outgoing).await },
                );
                self.opened.fetch_add(1, Ordering::Relaxed);
                let answer = stream.send(request);
                *current = Some((leader, stream));
                answer
            }
        }
    }
}

//! The peer port: one listener for both ways peers talk to this node. A
//! connection that opens with [`PREAMBLE`] is a call stream
//! (AppendEntries, forwarded writes or read indexes,
//! [`crate::call_stream`]) and is served here; every other connection is
//! handed on to the peer gRPC server (votes, snapshots, client
//! addresses). The first byte decides: an HTTP/2 client's preface starts
//! with `P`, a call stream's preamble never does.

use std::io;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use crate::call_stream::{self, StreamKind, PREAMBLE};
use crate::node::RaftNode;

/// How long a new connection may take to send its first bytes before it
/// is dropped.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the peer port waits after a failed accept before the next.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The peer port's gRPC connections, for the peer gRPC server's
/// `serve_with_incoming`.
pub type GrpcConnections = ReceiverStream<io::Result<TcpStream>>;

impl RaftNode {
    /// Accepts the peer port's connections on `listener` until the
    /// returned stream is dropped (the gRPC server is done): serves the
    /// call streams, and yields the rest.
    pub fn serve_peer_port(&self, listener: TcpListener) -> GrpcConnections {
        let (grpc, connections) = mpsc::channel(64);
        let node = self.clone();
        tokio::spawn(
            async move {
                loop {
                    let accepted = tokio::select! {
                        accepted = listener.accept() => accepted,
                        () = grpc.closed() => return,
                    };
                    let (connection, from) = match accepted {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            // Out of file descriptors, say: the
                            // connection is lost, the listener is not.
                            // Pause before the next accept, or a lasting
                            // cause would spin this loop.
                            tracing::warn!(error = %e, "peer port: accept failed");
                            tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                            continue;
                        }
                    };
                    let (node, grpc) = (node.clone(), grpc.clone());
                    tokio::spawn(
                        async move {
                            match tokio::time::timeout(FIRST_BYTES_TIMEOUT, node.route(connection))
                                .await
                            {
                                Ok(Ok(Some(grpc_connection))) => {
                                    let _ = grpc.send(Ok(grpc_connection)).await;
                                }
                                Ok(Ok(None)) => {}
                                Ok(Err(e)) => {
                                    tracing::debug!(error = %e, "peer connection refused")
                                }
                                Err(_) => tracing::debug!("peer connection sent nothing"),
                            }
                        }
                        .instrument(tracing::debug_span!("peer_connection", %from)),
                    );
                }
            }
            .instrument(tracing::debug_span!("peer_port", node = self.inner.id)),
        );
        ReceiverStream::new(connections)
    }

    /// Serves `connection` if it is a call stream; hands it back if it is
    /// something else (gRPC). A connection that closes before its first
    /// byte is neither.
    async fn route(&self, mut connection: TcpStream) -> io::Result<Option<TcpStream>> {
        let mut first = [0u8; 1];
        if connection.peek(&mut first).await? == 0 {
            return Ok(None);
        }
        if first[0] != PREAMBLE[0] {
            connection.set_nodelay(true)?;
            return Ok(Some(connection));
        }
        let mut preamble = [0u8; PREAMBLE.len() + 1];
        connection.read_exact(&mut preamble).await?;
        let kind = preamble[..PREAMBLE.len()]
            .eq(PREAMBLE)
            .then(|| StreamKind::from_byte(preamble[PREAMBLE.len()]))
            .flatten()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("not a call stream this node knows: {preamble:?}"),
                )
            })?;
        call_stream::tune(&connection)?;
        match kind {
            StreamKind::Entries => self.serve_entries(connection),
            StreamKind::Forward => self.serve_forwards(connection),
            StreamKind::ReadIndex => self.serve_read_indexes(connection),
        }
        Ok(None)
    }
}

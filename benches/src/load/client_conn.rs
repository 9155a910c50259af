//! What the load generator's own client connections share ([`H2Channel`]
//! and [`RestConn`]): a TCP connection without Nagle's delay, and a task
//! that drives the client's side of it until it closes.
//!
//! [`H2Channel`]: super::h2_channel::H2Channel
//! [`RestConn`]: super::rest_conn::RestConn

use std::future::Future;

use anyhow::Context as _;
use tokio::net::TcpStream;

/// A TCP connection to `host` (`host:port`) with `TCP_NODELAY` set: the
/// requests are small and each waits for its answer.
pub(super) async fn tcp_nodelay(host: &str) -> anyhow::Result<TcpStream> {
    let tcp = TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to {host}"))?;
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

/// Spawns the task that drives a client `connection` (hyper's or h2's)
/// until it ends.
pub(super) fn drive<E: std::fmt::Display>(
    connection: impl Future<Output = Result<(), E>> + Send + 'static,
) {
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "load generator connection closed");
        }
    });
}

//! What the load generator's own client connections share ([`H2Channel`]
//! and [`RestConn`]): a TCP connection without Nagle's delay, and a task
//! that drives hyper's side of it until it closes.
//!
//! [`H2Channel`]: super::h2_channel::H2Channel
//! [`RestConn`]: super::rest_conn::RestConn

use std::future::Future;

use anyhow::Context as _;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A TCP connection to `host` (`host:port`) with `TCP_NODELAY` set: the
/// requests are small and each waits for its answer.
pub(super) async fn tcp_nodelay(host: &str) -> anyhow::Result<TokioIo<TcpStream>> {
    let tcp = TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to {host}"))?;
    tcp.set_nodelay(true)?;
    Ok(TokioIo::new(tcp))
}

/// Spawns the task that drives a hyper client `connection` until it ends.
pub(super) fn drive(connection: impl Future<Output = Result<(), hyper::Error>> + Send + 'static) {
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "load generator connection closed");
        }
    });
}

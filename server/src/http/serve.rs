//! The REST listener: HTTP/1.1 and cleartext HTTP/2 on one port.
//!
//! `axum::serve` would do, except that it leaves HTTP/2 at hyper's limit of
//! 200 concurrent streams per connection. client-go opens every watch of a
//! client as a stream on one HTTP/2 connection, and kube-apiserver allows
//! 1,000 of them (`--http2-max-streams-per-connection`); so does this
//! listener. A multiplexed idle watch costs a stream, not a connection with
//! its read and write buffers.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// kube-apiserver's default `--http2-max-streams-per-connection`.
pub const HTTP2_MAX_STREAMS_PER_CONNECTION: u32 = 1000;

/// How long open connections get to finish once the node stops (watches
/// end on their own when it does; this bounds a stuck peer).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Pause after a failed accept (e.g. out of file descriptors), so the loop
/// does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `stop` turns true, then closes every
/// connection gracefully (bounded by [`SHUTDOWN_GRACE`]).
pub async fn serve(listener: TcpListener, app: Router, mut stop: watch::Receiver<bool>) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(HTTP2_MAX_STREAMS_PER_CONNECTION);
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stopped| *stopped) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "REST accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // No Nagle: responses are written in small pieces.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone());
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(tcp), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "REST connection ended with an error");
            }
        });
    }
    let open = graceful.count();
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open,
            "REST connections still open after the shutdown grace; dropping them"
        );
    }
}

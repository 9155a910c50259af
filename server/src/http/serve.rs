//! The REST listener: HTTP/1.1 and cleartext HTTP/2 on one port; and the
//! accept loop it shares with the etcd API's listener
//! ([`serve_connections`]).
//!
//! `axum::serve` would do, except that it leaves HTTP/2 at hyper's limit of
//! 200 concurrent streams per connection. client-go opens every watch of a
//! client as a stream on one HTTP/2 connection, and kube-apiserver allows
//! 1,000 of them (`--http2-max-streams-per-connection`); so does this
//! listener. A multiplexed idle watch costs a stream, not a connection with
//! its read and write buffers.

use std::time::Duration;

use axum::http::{Request, Response};
use axum::Router;
use hyper::body::Incoming;
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
pub async fn serve(listener: TcpListener, app: Router, stop: watch::Receiver<bool>) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(HTTP2_MAX_STREAMS_PER_CONNECTION);
    serve_connections(
        "REST",
        listener,
        &builder,
        TowerToHyperService::new(app),
        stop,
    )
    .await;
}

/// The accept loop of a listener: serves each connection accepted on
/// `listener` with `builder`'s settings and its own clone of `service`
/// (with TCP_NODELAY: requests and answers are small and latency-bound)
/// until `stop` turns true, then closes every connection gracefully
/// (bounded by [`SHUTDOWN_GRACE`]). `what` names the listener in the logs.
pub async fn serve_connections<S, B>(
    what: &'static str,
    listener: TcpListener,
    builder: &Builder<TokioExecutor>,
    service: S,
    mut stop: watch::Receiver<bool>,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stopped| *stopped) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(listener = what, error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(listener = what, error = %e, "cannot set TCP_NODELAY");
        }
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(tcp), service.clone())
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(listener = what, %peer, error = %e, "connection ended with an error");
            }
        });
    }
    // Stop accepting at once: a client that connects now is refused, not
    // left waiting for its deadline.
    drop(listener);
    let open = graceful.count();
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            listener = what,
            open,
            "connections still open after the shutdown grace; dropping them"
        );
    }
}

//! [`H2Channel`]: the load generator's gRPC transport for its closed-loop
//! etcd-API clients. One HTTP/2 connection, driven by hyper's connection
//! task, that a client's calls go into directly.
//!
//! Why not tonic's `Channel`: it puts a `tower` buffer in front of the
//! connection, whose worker is a task of its own, so every call wakes that
//! worker on its way to hyper. A closed-loop client has one call in flight
//! at a time and gains nothing from the buffer. The load generator shares
//! the machine's two cores with the servers it measures, so every wake it
//! saves is CPU the servers get back. Both stores of `bench compare` are
//! driven through this same transport.
//!
//! This is a thin `tower::Service` over hyper's `SendRequest` (hand-written:
//! no crate offers a gRPC transport without tonic's buffer). It does what
//! tonic's channel does to each request besides buffering: give it the
//! connection's origin, as HTTP/2's `:scheme` and `:authority`.
//!
//! And it sends each request's message as one body of known length, so
//! the DATA frame that carries it also ends the stream. tonic's request
//! body is a stream that says it has ended only when polled past its one
//! message, so hyper wrote HEADERS, DATA and then an empty DATA frame to
//! end the stream, each in a `writev` of its own: three loopback sends per
//! call, now two (HEADERS still go alone: hyper's HTTP/2 client gives a
//! stream send capacity only once its HEADERS are out). That took 9.4% off
//! the load generator's CPU per put (BENCHMARKS.md, stop 57). grpc-go,
//! which etcd's own clients use, writes a unary call's frames together.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::TokioExecutor;
use tonic::body::Body;

use super::client_conn::{drive, tcp_nodelay};
use tonic::codegen::http::uri::{Authority, PathAndQuery, Scheme};
use tonic::codegen::http::{Request, Response, Uri};

/// One HTTP/2 connection to a gRPC server, cloned into each call's client.
#[derive(Clone)]
pub(super) struct H2Channel {
    send: SendRequest<Full<Bytes>>,
    authority: Authority,
}

impl std::fmt::Debug for H2Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Channel")
            .field("authority", &self.authority)
            .finish()
    }
}

impl H2Channel {
    /// Connects to `endpoint` (`host:port`, or `http://host:port`) without
    /// Nagle's delay, as tonic's channel is set up for the other workloads,
    /// and spawns the connection's task.
    pub(super) async fn connect(endpoint: &str) -> anyhow::Result<Self> {
        let host_port = endpoint.strip_prefix("http://").unwrap_or(endpoint);
        let authority: Authority = host_port
            .parse()
            .with_context(|| format!("endpoint {endpoint:?} is not host:port"))?;
        let io = tcp_nodelay(host_port).await?;
        let (send, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .with_context(|| format!("HTTP/2 handshake with {endpoint}"))?;
        drive(connection);
        Ok(Self { send, authority })
    }
}

/// Whatever a call fails with: hyper's error, or the request body's
/// (tonic's encoding of the message).
type CallError = Box<dyn std::error::Error + Send + Sync>;

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<hyper::body::Incoming>, CallError>> + Send>>;

impl tower::Service<Request<Body>> for H2Channel {
    type Response = Response<hyper::body::Incoming>;
    type Error = CallError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.send.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (mut head, body) = request.into_parts();
        let mut parts = head.uri.clone().into_parts();
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = Some(self.authority.clone());
        if parts.path_and_query.is_none() {
            parts.path_and_query = Some(PathAndQuery::from_static("/"));
        }
        // Scheme, authority and path are all set, so the parts make a URI.
        if let Ok(uri) = Uri::from_parts(parts) {
            head.uri = uri;
        }
        // A clone shares the connection: the call's future owns its own.
        let mut send = self.send.clone();
        Box::pin(async move {
            // A unary call's body is its one encoded message, ready at once.
            let message = body.collect().await?.to_bytes();
            let request = Request::from_parts(head, Full::new(message));
            Ok(send.send_request(request).await?)
        })
    }
}

//! [`H2Channel`]: the load generator's gRPC transport for its closed-loop
//! etcd-API clients. One HTTP/2 connection, driven by h2's connection
//! task, that a client's calls go into directly.
//!
//! Why not tonic's `Channel`: it puts a `tower` buffer in front of the
//! connection, whose worker is a task of its own, so every call wakes that
//! worker on its way to the connection. A closed-loop client has one call
//! in flight at a time and gains nothing from the buffer. The load
//! generator shares the machine's two cores with the servers it measures,
//! so every wake it saves is CPU the servers get back. Both stores of
//! `bench compare` are driven through this same transport.
//!
//! This is a thin `tower::Service` over the `h2` crate's client
//! (hand-written: no crate offers a gRPC transport without tonic's
//! buffer). It does what tonic's channel does to each request besides
//! buffering: give it the connection's origin, as HTTP/2's `:scheme` and
//! `:authority`.
//!
//! And it writes each call in one `writev`, as grpc-go (etcd's own
//! clients) does. tonic's request body is a stream that says it has ended
//! only when polled past its one message, so through tonic's channel hyper
//! wrote HEADERS, DATA and an empty DATA frame to end the stream, each in a
//! `writev` of its own: three loopback sends per call. Sending the message
//! as one body of known length made it two (stop 57): hyper's HTTP/2 client
//! still sent HEADERS alone, because it pipes a request's body to the
//! stream only once the stream has send capacity, which h2 gives a new
//! stream once its HEADERS are written. Through h2 directly, the call's
//! one DATA frame (which also ends the stream) is queued right behind its
//! HEADERS before the connection's task writes either, and h2 writes the
//! two together. A loopback send also costs its sender the receiving
//! side's TCP processing, so the load generator's CPU per put fell by a
//! quarter, and the CPU it gave back went to the servers (BENCHMARKS.md,
//! stop 60).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use anyhow::Context as _;
use bytes::Bytes;
use h2::client::SendRequest;
use h2::RecvStream;
use http_body_util::BodyExt;
use hyper::body::Frame;
use tonic::body::Body;
use tonic::codegen::http::uri::{Authority, PathAndQuery, Scheme};
use tonic::codegen::http::{HeaderMap, Request, Response, Uri};

use super::client_conn::{drive, tcp_nodelay};

/// The receive window of each call's stream: hyper's client default.
const STREAM_WINDOW_BYTES: u32 = 2 << 20;
/// The receive window of the whole connection: hyper's client default.
const CONNECTION_WINDOW_BYTES: u32 = 5 << 20;

/// One HTTP/2 connection to a gRPC server, cloned into each call's client.
#[derive(Clone)]
pub(super) struct H2Channel {
    send: SendRequest<Bytes>,
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
        // As hyper's client sets it up: its windows (h2's own are 64 KiB,
        // which would hold a large answer to a window update per 64 KiB),
        // and no pushes.
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .enable_push(false)
            .handshake::<_, Bytes>(io)
            .await
            .with_context(|| format!("HTTP/2 handshake with {endpoint}"))?;
        drive(connection);
        Ok(Self { send, authority })
    }
}

/// Whatever a call fails with: h2's error, or the request body's (tonic's
/// encoding of the message).
type CallError = Box<dyn std::error::Error + Send + Sync>;

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody>, CallError>> + Send>>;

impl tower::Service<Request<Body>> for H2Channel {
    type Response = Response<ResponseBody>;
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
        let send = self.send.clone();
        Box::pin(async move {
            // A unary call's body is its one encoded message, ready at once.
            let message = body.collect().await?.to_bytes();
            let mut send = send.ready().await?;
            let request = Request::from_parts(head, ());
            let (response, mut stream) = send.send_request(request, message.is_empty())?;
            if !message.is_empty() {
                // Queued behind the HEADERS, before the connection's task
                // writes them: one write for both. A frame h2 has no
                // window for yet waits in its queue, as hyper's would.
                stream.send_data(message, true)?;
            }
            Ok(response.await?.map(ResponseBody::new))
        })
    }
}

/// A response's body as tonic reads it: h2's stream of DATA frames, then
/// its trailers (where gRPC puts a call's status). Each frame's bytes are
/// given back to the stream's window once read, as hyper does.
pub(super) struct ResponseBody {
    stream: RecvStream,
    state: BodyState,
}

/// Where a [`ResponseBody`] is in its stream.
enum BodyState {
    Data,
    Trailers,
    Done,
}

impl ResponseBody {
    fn new(stream: RecvStream) -> Self {
        Self {
            stream,
            state: BodyState::Data,
        }
    }
}

impl hyper::body::Body for ResponseBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = self.get_mut();
        if let BodyState::Data = this.state {
            match ready!(this.stream.poll_data(cx)) {
                Some(Ok(data)) => {
                    this.stream.flow_control().release_capacity(data.len())?;
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    this.state = BodyState::Done;
                    return Poll::Ready(Some(Err(e)));
                }
                None => this.state = BodyState::Trailers,
            }
        }
        if let BodyState::Trailers = this.state {
            let trailers: Option<HeaderMap> = match ready!(this.stream.poll_trailers(cx)) {
                Ok(trailers) => trailers,
                Err(e) => {
                    this.state = BodyState::Done;
                    return Poll::Ready(Some(Err(e)));
                }
            };
            this.state = BodyState::Done;
            return Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, BodyState::Done)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::Full;
    use tokio::net::TcpListener;
    use tower::Service as _;

    use super::*;

    /// What the server of [`a_call_arrives_whole_and_its_status_comes_back_in_trailers`]
    /// saw of the call.
    struct Seen {
        uri: Uri,
        message: Vec<u8>,
        ended: bool,
    }

    /// Answers one call the way a gRPC server does: HEADERS, one DATA
    /// frame, then the status in trailers.
    async fn answer_one_call(listener: TcpListener) -> Seen {
        let (tcp, _) = listener.accept().await.expect("accept");
        let mut connection = h2::server::handshake(tcp).await.expect("h2 handshake");
        let (request, mut respond) = connection
            .accept()
            .await
            .expect("a call")
            .expect("a well-formed call");
        tokio::spawn(async move { while connection.accept().await.is_some() {} });
        let (head, mut body) = request.into_parts();
        let mut message = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("the call's DATA");
            body.flow_control()
                .release_capacity(chunk.len())
                .expect("release");
            message.extend_from_slice(&chunk);
        }
        let ended = body.is_end_stream();
        let response = Response::builder()
            .status(200)
            .header("content-type", "application/grpc")
            .body(())
            .expect("response head");
        let mut send = respond
            .send_response(response, false)
            .expect("response HEADERS");
        send.send_data(Bytes::from_static(b"answer"), false)
            .expect("response DATA");
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "5".parse().expect("header value"));
        send.send_trailers(trailers).expect("trailers");
        Seen {
            uri: head.uri,
            message,
            ended,
        }
    }

    #[tokio::test]
    async fn a_call_arrives_whole_and_its_status_comes_back_in_trailers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(answer_one_call(listener));

        let mut channel = H2Channel::connect(&addr.to_string())
            .await
            .expect("connect");
        std::future::poll_fn(|cx| channel.poll_ready(cx))
            .await
            .expect("ready");
        let request = Request::builder()
            .uri("/etcdserverpb.KV/Put")
            .body(Body::new(Full::new(Bytes::from_static(b"message"))))
            .expect("request");
        let response = channel.call(request).await.expect("the call");
        assert_eq!(response.status(), 200);
        let body = response.into_body().collect().await.expect("the body");
        let trailers = body.trailers().cloned().expect("trailers");
        assert_eq!(body.to_bytes(), Bytes::from_static(b"answer"));
        assert_eq!(trailers.get("grpc-status").expect("grpc-status"), "5");

        let seen = server.await.expect("server task");
        assert_eq!(seen.message, b"message");
        assert!(seen.ended, "the message's DATA frame ends the stream");
        assert_eq!(seen.uri.scheme(), Some(&Scheme::HTTP));
        assert_eq!(
            seen.uri.authority().map(|a| a.as_str()),
            Some(addr.to_string().as_str())
        );
        assert_eq!(seen.uri.path(), "/etcdserverpb.KV/Put");
    }
}

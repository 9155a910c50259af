//! [`RestConn`]: the load generator's HTTP/1.1 connection for its
//! closed-loop REST clients, one per client, and the request bodies they
//! send, serialized from borrowed fields.
//!
//! Why not reqwest, which the set-up steps (seeding, the first read) still
//! use: per request it parses a URL, checks a connection out of its pool,
//! runs its redirect and retry layers, and the bodies were built as
//! `serde_json::Value` trees first. A profile of the load generator under
//! 64-client REST updates put about half of its CPU in that user-space
//! work. The load generator shares the machine's two cores with the three
//! nodes it measures, so what it saves goes to them.
//!
//! Hand-written over hyper's connection API: a client has one request in
//! flight, so it needs no pool, and hyper's `SendRequest` for HTTP/1.1 is
//! one connection. The connection is the same HTTP/1.1 keep-alive socket
//! reqwest used, so the servers see the same traffic.

use std::sync::Arc;

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::sync::Mutex;

use super::client_conn::{drive, tcp_nodelay};

/// A request body: a whole JSON document, or none.
type Body = http_body_util::Either<Full<Bytes>, Empty<Bytes>>;

/// One keep-alive HTTP/1.1 connection to a node, shared by a client's
/// requests one at a time (the lock is never contended: a closed-loop
/// client waits for each answer).
#[derive(Clone)]
pub(super) struct RestConn {
    send: Arc<Mutex<SendRequest<Body>>>,
    /// The `Host` header: the node's `host:port`.
    host: Arc<str>,
    /// The path of the bench namespace's configmaps on this node.
    pub(super) collection: Arc<str>,
}

impl std::fmt::Debug for RestConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestConn")
            .field("host", &self.host)
            .finish()
    }
}

/// What a request answered: its status, the `x-kubestore-read` header (how
/// the node says it served a read) and the whole body.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) served: Option<String>,
    pub(super) body: Bytes,
}

impl RestConn {
    /// Connects to `endpoint` (`http://host:port`) without Nagle's delay
    /// and spawns the connection's task; `collection` is the path every
    /// request of this client is under.
    pub(super) async fn connect(endpoint: &str, collection: &str) -> anyhow::Result<Self> {
        let Some(host) = endpoint.strip_prefix("http://") else {
            bail!("REST endpoint {endpoint:?} is not http://host:port");
        };
        let host = host.trim_end_matches('/');
        Ok(Self {
            send: Arc::new(Mutex::new(open(host).await?)),
            host: host.into(),
            collection: collection.into(),
        })
    }

    /// Sends one request for `path` and reads the whole answer.
    pub(super) async fn request(
        &self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
    ) -> anyhow::Result<Answer> {
        let builder = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &*self.host);
        let request = match json {
            Some(body) => builder
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Body::Left(Full::new(Bytes::from(body))))?,
            None => builder.body(Body::Right(Empty::new()))?,
        };
        let response: Response<hyper::body::Incoming> = {
            let mut send = self.send.lock().await;
            if send.ready().await.is_err() {
                // The node closed the connection (an error answer may): a
                // new one, as a pool would have given.
                *send = open(&self.host).await?;
            }
            send.send_request(request).await?
        };
        let status = response.status();
        let served = response
            .headers()
            .get("x-kubestore-read")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // Read to the end, so the connection is free for the next request.
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            served,
            body,
        })
    }
}

/// A new connection to `host` (`host:port`), its task spawned.
async fn open(host: &str) -> anyhow::Result<SendRequest<Body>> {
    let (send, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp_nodelay(host).await?))
            .await
            .with_context(|| format!("HTTP/1.1 handshake with {host}"))?;
    drive(connection);
    Ok(send)
}

/// A ConfigMap of the bench: `{"metadata":{"name":…},"data":{…}}`.
#[derive(Serialize)]
pub(super) struct ConfigMapBody<'a> {
    pub(super) metadata: Name<'a>,
    pub(super) data: ConfigMapData<'a>,
}

#[derive(Serialize)]
pub(super) struct Name<'a> {
    pub(super) name: &'a str,
}

/// The data of a bench ConfigMap: the payload, and for updates a counter
/// that makes each write differ from the last.
#[derive(Serialize)]
pub(super) struct ConfigMapData<'a> {
    pub(super) value: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) n: Option<&'a str>,
}

impl ConfigMapBody<'_> {
    pub(super) fn to_json(&self) -> anyhow::Result<Vec<u8>> {
        Ok(serde_json::to_vec(self)?)
    }
}

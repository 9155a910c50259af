//! The etcd API's gRPC calls, dispatched by service name straight from
//! hyper to tonic's generated services ([`EtcdDispatch`]).
//!
//! tonic's `Server` would serve them too, but it routes every call through
//! an axum `Router` (a path match with URL parameters decoded into the
//! request's extensions), boxes the request body and the answer's body
//! once more, and wraps each call in five layers, most of which this port
//! does not use (load shedding, concurrency limits, connection info, error
//! recovery for services that cannot fail). Without them a put costs the
//! three nodes 7.6% less CPU (BENCHMARKS.md, "The etcd port without
//! tonic's router"). This keeps what a client can see of tonic's
//! server: the deadline a call's `grpc-timeout` header sets, and an
//! `Unimplemented` answer for a service the port does not serve (a method
//! a service does not have is its generated server's to refuse, as
//! before).
//!
//! The KV service's unary calls skip tonic's per-call decoding and
//! encoding too ([`super::unary`]).
//!
//! A call whose deadline passes before its answer is ready is answered
//! `DeadlineExceeded`, as etcd's gRPC server (grpc-go) answers it, and its
//! handler is dropped; a stream's deadline covers its opening, not the
//! stream itself (as tonic's did).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use kubestore_proto::etcd::etcdserverpb::cluster_server::ClusterServer;
use kubestore_proto::etcd::etcdserverpb::kv_server::KvServer;
use kubestore_proto::etcd::etcdserverpb::lease_server::LeaseServer;
use kubestore_proto::etcd::etcdserverpb::maintenance_server::MaintenanceServer;
use kubestore_proto::etcd::etcdserverpb::watch_server::WatchServer;
use tonic::body::Body;
use tonic::server::NamedService;
use tower::Service;

use super::unary::{self, KvMethod};
use super::{cluster, kv, lease, maintenance, watch, EtcdServices};

/// A call's answer in the making: what tonic's generated services return.
type CallFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

/// Dispatches each call on the etcd port to its service by the first
/// segment of its path (`/etcdserverpb.KV/Put` goes to the KV service).
/// Cheap to clone: one clone per connection.
#[derive(Debug, Clone)]
pub struct EtcdDispatch {
    services: std::sync::Arc<EtcdServices>,
}

impl EtcdDispatch {
    /// Serves `services`.
    pub fn new(services: EtcdServices) -> Self {
        Self {
            services: std::sync::Arc::new(services),
        }
    }
}

/// The services of the etcd port.
#[derive(Debug, Clone, Copy)]
enum Target {
    Kv,
    Watch,
    Lease,
    Maintenance,
    Cluster,
}

impl Target {
    /// The service a call's path names (`/etcdserverpb.KV/Put`: the KV
    /// service), if the port serves it.
    fn of(path: &str) -> Option<(Self, &str)> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        let target = match service {
            KvServer::<kv::KvService>::NAME => Self::Kv,
            WatchServer::<watch::WatchService>::NAME => Self::Watch,
            LeaseServer::<lease::LeaseService>::NAME => Self::Lease,
            MaintenanceServer::<maintenance::MaintenanceService>::NAME => Self::Maintenance,
            ClusterServer::<cluster::ClusterService>::NAME => Self::Cluster,
            _ => return None,
        };
        Some((target, method))
    }
}

impl hyper::service::Service<Request<Incoming>> for EtcdDispatch {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = CallFuture;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let deadline = grpc_timeout(req.headers());
        let Some((target, method)) = Target::of(req.uri().path()) else {
            let status =
                tonic::Status::unimplemented(format!("unknown service {}", req.uri().path()));
            return Box::pin(std::future::ready(Ok(status.into_http())));
        };
        // A generated server is always ready, and its `call` only clones
        // an `Arc` of the handler: each call takes a clone to call.
        let s = &self.services;
        let call = match target {
            Target::Kv => match KvMethod::of(method) {
                Some(method) => Box::pin(unary::serve_kv(
                    s.kv_handler.clone(),
                    s.kv.clone(),
                    method,
                    req,
                    s.kv_limit,
                )),
                None => s.kv.clone().call(req),
            },
            Target::Watch => s.watch.clone().call(req),
            Target::Lease => s.lease.clone().call(req),
            Target::Maintenance => s.maintenance.clone().call(req),
            Target::Cluster => s.cluster.clone().call(req),
        };
        match deadline {
            None => call,
            Some(deadline) => Box::pin(async move {
                match tokio::time::timeout(deadline, call).await {
                    Ok(answer) => answer,
                    Err(_) => Ok(tonic::Status::deadline_exceeded(format!(
                        "the call's deadline of {deadline:?} passed"
                    ))
                    .into_http()),
                }
            }),
        }
    }
}

/// The deadline a call's `grpc-timeout` header sets: at most eight ASCII
/// digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`), per the gRPC over
/// HTTP/2 protocol. A malformed header sets none (as tonic's server
/// treats it).
fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.as_bytes();
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(amount * 3600),
        b"M" => Duration::from_secs(amount * 60),
        b"S" => Duration::from_secs(amount),
        b"m" => Duration::from_millis(amount),
        b"u" => Duration::from_micros(amount),
        b"n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout_of(value: &str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-timeout", value.parse().expect("a header value"));
        grpc_timeout(&headers)
    }

    #[test]
    fn a_grpc_timeout_header_reads_in_each_unit() {
        assert_eq!(timeout_of("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(timeout_of("3M"), Some(Duration::from_secs(180)));
        assert_eq!(timeout_of("5S"), Some(Duration::from_secs(5)));
        assert_eq!(timeout_of("250m"), Some(Duration::from_millis(250)));
        assert_eq!(
            timeout_of("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(timeout_of("1n"), Some(Duration::from_nanos(1)));
        assert_eq!(
            grpc_timeout(&HeaderMap::new()),
            None,
            "no header, no deadline"
        );
    }

    #[test]
    fn a_malformed_grpc_timeout_sets_no_deadline() {
        for value in ["", "S", "10", "10s", "123456789S", "-1S", "1.5S", " 1S"] {
            assert_eq!(timeout_of(value), None, "{value:?}");
        }
    }
}

//! Wire types only: the generated code of kubestore's `.proto` files.
//!
//! This crate contains no logic beyond its codec's choice of an error
//! code. It must not depend on any other kubestore crate; everything else
//! depends on it.
//!
//! - [`raft`]: node-to-node RPCs (Raft replication, write forwarding, read index).
//! - [`codec`]: the gRPC codec of every generated service: tonic-prost's,
//!   except that a message that cannot be decoded is `InvalidArgument`
//!   (the sender's mistake), not `Internal`. The only code here that is
//!   not generated.
//! - [`etcd`]: the etcd v3 client API (`proto/etcd/kv.proto`,
//!   `proto/etcd/rpc.proto`): KV, Watch, Lease, Cluster and Maintenance, with
//!   gRPC client and server stubs. Their wire contract (package, service,
//!   method, message and field names, field numbers and types) must match
//!   etcd's `api/mvccpb/kv.proto` and `api/etcdserverpb/rpc.proto` exactly,
//!   because unmodified etcd clients (etcdctl, kube-apiserver, ...) use it.
//! - [`openapi_v2`]: the subset of gnostic's OpenAPI v2 document messages
//!   (`proto/gnostic/openapiv2.proto`) the server encodes `/openapi/v2`
//!   into; names and field numbers match gnostic's, which client-go
//!   decodes with.
//! - [`KUBE_DESCRIPTORS`]: Kubernetes' own messages (`proto/kube/`, every
//!   built-in kind and the meta types), as an encoded descriptor set: the
//!   server transcodes `application/vnd.kubernetes.protobuf` bodies
//!   through it. Field numbers and types must match kube's
//!   `generated.proto` files, which `scripts/gen-protobuf.py` derives them
//!   from.

pub mod codec;

/// Internal node-to-node RPCs (`proto/raft.proto`).
pub mod raft {
    #![allow(clippy::all, missing_docs)] // generated code
    tonic::include_proto!("kubestore.raft.v1");
}

/// The etcd v3 API. Module names follow etcd's protobuf packages, so the
/// generated cross-package paths (`super::mvccpb::KeyValue`) resolve.
pub mod etcd {
    /// etcd's MVCC data types (`proto/etcd/kv.proto`, package `mvccpb`).
    pub mod mvccpb {
        #![allow(clippy::all, missing_docs)] // generated code
        tonic::include_proto!("mvccpb");
    }

    /// etcd's client-facing services and messages (`proto/etcd/rpc.proto`,
    /// package `etcdserverpb`).
    pub mod etcdserverpb {
        #![allow(clippy::all, missing_docs)] // generated code
        tonic::include_proto!("etcdserverpb");
    }
}

/// gnostic's OpenAPI v2 document (`proto/gnostic/openapiv2.proto`, package
/// `openapi.v2`): the protobuf form of `/openapi/v2`.
pub mod openapi_v2 {
    #![allow(clippy::all, missing_docs)] // generated code
    tonic::include_proto!("openapi.v2");
}

/// Kubernetes' messages (`proto/kube/*.proto`): an encoded
/// `FileDescriptorSet`, read at run time (no Rust types are generated).
pub const KUBE_DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kube.fds"));

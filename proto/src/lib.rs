//! Wire types only: the generated code of kubestore's `.proto` files.
//!
//! This crate contains no logic. It must not depend on any other kubestore
//! crate; everything else depends on it.
//!
//! - [`raft`]: node-to-node RPCs (Raft replication, write forwarding, read index).

/// Internal node-to-node RPCs (`proto/raft.proto`).
pub mod raft {
    #![allow(clippy::all, missing_docs)] // generated code
    tonic::include_proto!("kubestore.raft.v1");
}

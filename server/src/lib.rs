//! The kubestore server: one binary that serves the Kubernetes REST API on
//! top of the replicated revision log, and launches local clusters.
//!
//! Its one job is the front end: turning Kubernetes requests into
//! transactions and reads on the [`kubestore_raft::RaftNode`], and their
//! results into the exact bytes kube clients expect. It never touches
//! RocksDB: reads go through [`kubestore_storage::Store`], writes through
//! Raft.
//!
//! # Invariants
//!
//! - An object's `metadata.resourceVersion` is the revision that last wrote
//!   it, filled in on read; the stored bytes never contain it.
//! - A read with `resourceVersion` unset is linearizable on every node.
//! - Every error is a `Status` with kube's code, reason and message
//!   ([`http::status`] is the only place that makes them); bad input never
//!   panics or answers 500.
//!
//! # Layout
//!
//! - [`config`]: flags and environment of `kubestore serve`.
//! - [`node`]: a running node (Raft + gRPC + REST), also used by tests.
//! - [`compaction`]: the leader's history compaction through the log.
//! - [`launcher`]: `kubestore cluster`, the local multi-process launcher.
//! - [`kube`]: types, objects, selectors, verbs as transactions.
//! - [`http`]: routing, discovery, health, verbs, Tables, Status mapping.

pub mod bench;
pub mod compaction;
pub mod config;
pub mod etcd;
pub mod http;
pub mod kube;
pub mod launcher;
pub mod node;

pub use config::ServeConfig;
pub use node::{NodeError, RunningNode};

//! The kubestore server: a node that serves the Kubernetes REST API and
//! the etcd v3 API on top of the replicated revision log, and the launcher
//! of local clusters. The `kubestore` binary (the `cli` crate) runs it; the
//! load generator behind `kubestore bench` lives in `kubestore-benches`.
//!
//! Its one job is the front end: turning Kubernetes and etcd requests into
//! transactions and reads on the [`kubestore_raft::RaftNode`], and their
//! results into the exact bytes each client expects. It never touches
//! RocksDB: reads go through [`kubestore_storage::Store`] (Kubernetes reads
//! through the in-memory watch cache fed from it), writes through Raft.
//!
//! # Invariants
//!
//! - An object's `metadata.resourceVersion` is the revision that last wrote
//!   it, filled in on read; the stored bytes never contain it.
//! - A read with `resourceVersion` unset is linearizable on every node; an
//!   etcd Range is too unless `serializable`.
//! - The watch cache applies the store's events in revision order, never
//!   skipping one, and never serves a revision below the compaction point.
//! - One keyspace: Kubernetes objects live under the kube-apiserver's etcd
//!   keys, so REST and etcd clients see the same data at the same revisions.
//! - The domain fails in its own terms ([`kube::error::KubeError`], the
//!   storage and Raft errors) and each protocol maps them in one place:
//!   every REST error is a `Status` with kube's code, reason and message
//!   ([`http::status`] is the only place that makes them), every etcd error
//!   etcd's code and message (`etcd::status`); bad input never panics or
//!   answers 500.
//! - Modules depend one way: `http` and `etcd` on `kube`, never the
//!   reverse, and no module imports one that imports it.
//!
//! # Layout
//!
//! - [`config`]: flags and environment of `kubestore serve`.
//! - [`node`]: a running node (Raft + gRPC + REST), also used by tests.
//! - [`compaction`]: the leader's history compaction through the log.
//! - [`launcher`]: `kubestore cluster`, the local multi-process launcher.
//! - [`histogram`]: the fixed-bucket latency histogram of `/metrics`.
//! - [`limits`]: the per-node limits of requests in flight (429 /
//!   ResourceExhausted beyond them).
//! - [`process`]: settings of the whole serving process (transparent huge
//!   pages), applied by the binary, never by a node.
//! - [`write`]: a command through Raft and its answer unpacked, one
//!   helper per command family (txn, lease, compaction).
//! - [`kube`]: types, objects, selectors, verbs as transactions, the watch
//!   cache, and their error type.
//! - [`http`]: routing, discovery, health, verbs, watch, Tables, Status
//!   mapping.
//! - [`etcd`]: the etcd v3 gRPC services (KV, Watch, Lease, Maintenance,
//!   Cluster).
//! - `fuzz` (test builds only): the input generators of the parsers'
//!   property tests (no panic, no 5xx for a client's mistake).

pub mod compaction;
pub mod config;
pub mod etcd;
#[cfg(test)]
mod fuzz;
pub mod histogram;
pub mod http;
pub mod kube;
pub mod launcher;
pub mod limits;
pub mod node;
pub mod process;
pub mod write;

pub use config::ServeConfig;
pub use node::{NodeError, RunningNode};

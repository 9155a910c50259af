//! Kubernetes semantics on top of the revision log: the served types,
//! objects and their server-set fields, selectors, and the verbs as
//! transactions.
//!
//! This layer knows nothing of HTTP: it fails with [`error::KubeError`],
//! which `http::status` alone turns into a `Status`. It depends on the
//! raft and storage crates, never on `http` or `etcd`.

pub mod cache;
pub mod error;
pub mod object;
pub mod paging;
pub mod resources;
pub mod selectors;
pub mod store;

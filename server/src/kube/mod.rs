//! Kubernetes semantics on top of the revision log: the served types,
//! objects and their server-set fields, selectors, and the verbs as
//! transactions.

pub mod cache;
pub mod object;
pub mod paging;
pub mod resources;
pub mod selectors;
pub mod store;

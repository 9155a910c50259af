//! Kubernetes semantics on top of the revision log: the served types,
//! objects, admission (what a create or update stores), selectors and
//! paging, the watch cache, and the verbs as reads and transactions.
//!
//! This layer knows nothing of HTTP: it fails with [`error::KubeError`],
//! which `http::status` alone turns into a `Status`. It depends on the
//! raft and storage crates and on [`crate::write`], never on `http` or
//! `etcd`.
//!
//! Layout: [`resources`] (the served types and their keys), [`types`]
//! (the built-in types' schemas, generated from the upstream OpenAPI
//! specification), [`object`] (objects as JSON and as stored),
//! [`admission`] (prepare and validate for create, update, delete),
//! [`objectmeta`] (every object's metadata rules), [`builtin`] (the
//! built-in types' defaults and validation), [`names`] (kube's name,
//! label and key formats),
//! [`strategic`] (strategic merge patch), [`structural`] (CRD schemas:
//! pruning, defaulting, validation), [`apply`] (server-side apply
//! and managed fields), [`fieldvalidation`] (unknown and duplicate
//! fields), [`options`] (`dryRun`, `DeleteOptions`), [`deletion`] (what a
//! delete does: finalizers, propagation, a namespace's termination),
//! [`scale`] (the `scale` subresource as a view of its parent),
//! [`finalize`] (what a namespace's `/finalize` may write),
//! [`selectors`], [`paging`], [`cache`] (the watch cache), [`store`]
//! (reads and writes of one node), [`controllers`] (the garbage collector
//! and the namespace controller, on the Raft leader), [`error`].

pub mod admission;
pub mod apply;
pub mod builtin;
pub mod cache;
pub mod controllers;
pub mod crd;
pub mod deletion;
pub mod error;
pub mod fieldvalidation;
pub mod finalize;
pub mod names;
pub mod object;
pub mod objectmeta;
pub mod options;
pub mod paging;
pub mod resources;
pub mod scale;
pub mod selectors;
pub mod store;
pub mod strategic;
pub mod structural;
pub mod types;

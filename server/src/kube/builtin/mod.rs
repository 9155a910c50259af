//! The built-in types' own rules, as a kube-apiserver applies them to
//! every write of an object: the typed decoding of the body
//! ([`check_types`]), the defaults it fills in (`defaults.rs`, kube's
//! `pkg/apis/*/v1/defaults.go`), what the type's strategy prepares on a
//! create and an update (a pod's `Pending` status, a job's generated
//! selector, a service's cluster IPs carried over), and its validation
//! (kube's `pkg/apis/*/validation`), worded as kube words it.
//!
//! Admission calls these for every create and update of an object
//! (`POST`, `PUT`, every patch, server-side apply, dry runs alike); the
//! rules of a kind apply only when that kind is served, found by its
//! group and kind ([`Kind::of`]), so a type the table gains later gets its
//! rules as soon as it is served.
//!
//! Layout: `decode.rs` (the JSON types the schema declares), `defaults.rs`
//! (every kind's defaults), `pod.rs` (pod specs, containers, a pod's
//! update), `service.rs`, `workloads.rs` (deployments, replica sets,
//! stateful sets, daemon sets, jobs, cron jobs: selectors and templates),
//! `config.rs` (config maps and secrets), `path.rs` (kube's field paths).
//!
//! Not done (kube does, kubestore does not): allocating cluster IPs and
//! node ports (a service without `clusterIP` stays without one), resource
//! quantities (parsed, compared, rounded), volume sources beyond their
//! names, security contexts, probes' handlers, affinity, topology spread,
//! the feature-gated fields, and `metadata.creationTimestamp: null` in
//! templates. Where kube shows a Go struct with `%#v` in a message, the
//! value is its JSON (label maps and selectors are shown as Go shows them).

mod config;
mod decode;
mod defaults;
pub mod path;
mod pod;
mod service;
mod workloads;

use std::borrow::Cow;

use serde_json::{Map, Value};

pub use decode::check_types;
pub use path::Path;

use crate::kube::error::FieldCause;
use crate::kube::resources::ResourceType;

/// The built-in kinds with rules of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pod,
    Service,
    Endpoints,
    ConfigMap,
    Secret,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
}

impl Kind {
    /// The kind of a served type, by its group and kind (any version:
    /// kubestore serves one per group).
    pub fn of(rt: &ResourceType) -> Option<Kind> {
        Some(match (rt.group, rt.kind) {
            ("", "Pod") => Kind::Pod,
            ("", "Service") => Kind::Service,
            ("", "Endpoints") => Kind::Endpoints,
            ("", "ConfigMap") => Kind::ConfigMap,
            ("", "Secret") => Kind::Secret,
            ("apps", "Deployment") => Kind::Deployment,
            ("apps", "ReplicaSet") => Kind::ReplicaSet,
            ("apps", "StatefulSet") => Kind::StatefulSet,
            ("apps", "DaemonSet") => Kind::DaemonSet,
            ("batch", "Job") => Kind::Job,
            ("batch", "CronJob") => Kind::CronJob,
            _ => return None,
        })
    }
}

/// A new object, after admission set its name, namespace and server-set
/// fields (its `uid` included): kube's defaults, then what the type's
/// strategy does on a create.
pub fn prepare_create(rt: &ResourceType, obj: &mut Map<String, Value>) {
    let Some(kind) = Kind::of(rt) else {
        return;
    };
    defaults::apply(kind, obj);
    match kind {
        Kind::Pod => pod::prepare_create(obj),
        Kind::Service => service::prepare_create(obj),
        Kind::Secret => config::merge_string_data(obj),
        Kind::Deployment
        | Kind::ReplicaSet
        | Kind::StatefulSet
        | Kind::DaemonSet
        | Kind::Job
        | Kind::CronJob => workloads::prepare_create(kind, obj),
        Kind::Endpoints | Kind::ConfigMap => {}
    }
}

/// An object as kube reads it back from storage: with its defaults
/// (for comparing an update with what is stored, as kube compares it
/// with the stored object decoded, hence defaulted).
///
/// A type with no defaults (custom resources, ConfigMaps, most built-ins)
/// gets the stored object itself, uncopied.
pub fn with_defaults<'a>(
    rt: &ResourceType,
    obj: &'a Map<String, Value>,
) -> Cow<'a, Map<String, Value>> {
    match Kind::of(rt).filter(|kind| defaults::has_defaults(*kind)) {
        Some(kind) => {
            let mut obj = obj.clone();
            defaults::apply(kind, &mut obj);
            Cow::Owned(obj)
        }
        None => Cow::Borrowed(obj),
    }
}

/// An update of the stored `old` (already defaulted,
/// [`with_defaults`]) to `new`: what the type's strategy carries over,
/// then kube's defaults (new list items get theirs).
pub fn prepare_update(rt: &ResourceType, old: &Map<String, Value>, new: &mut Map<String, Value>) {
    let Some(kind) = Kind::of(rt) else {
        return;
    };
    match kind {
        Kind::Service => service::prepare_update(old, new),
        Kind::Secret => config::merge_string_data(new),
        _ => {}
    }
    defaults::apply(kind, new);
}

/// The type's validation of a new object.
pub fn validate_create(rt: &ResourceType, obj: &Map<String, Value>) -> Vec<FieldCause> {
    match Kind::of(rt) {
        None | Some(Kind::Endpoints) => Vec::new(),
        Some(Kind::Pod) => pod::validate(obj),
        Some(Kind::Service) => service::validate(obj),
        Some(Kind::ConfigMap) => config::validate_config_map(obj),
        Some(Kind::Secret) => config::validate_secret(obj),
        Some(kind) => workloads::validate(kind, obj),
    }
}

/// The type's validation of an update of `old` (defaulted) to `new`
/// (prepared): the new object as on a create, and what may not change.
pub fn validate_update(
    rt: &ResourceType,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Vec<FieldCause> {
    match Kind::of(rt) {
        None | Some(Kind::Endpoints) => Vec::new(),
        Some(Kind::Pod) => pod::validate_update(old, new),
        Some(Kind::Service) => service::validate_update(old, new),
        Some(Kind::ConfigMap) => config::validate_config_map_update(old, new),
        Some(Kind::Secret) => config::validate_secret_update(old, new),
        Some(kind) => workloads::validate_update(kind, old, new),
    }
}

// Reading and writing untyped JSON. Types were checked on decode
// (`check_types`), but nothing here relies on it: a value of another
// type reads as absent.

/// An empty object, for an absent one read as if present.
fn empty() -> &'static Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(Map::new)
}

/// The object under `key`.
fn obj<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    m.get(key).and_then(Value::as_object)
}

/// The string under `key`, `""` when absent.
fn text<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The list under `key`, empty when absent.
fn list<'a>(m: &'a Map<String, Value>, key: &str) -> &'a [Value] {
    m.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The integer under `key`.
fn int(m: &Map<String, Value>, key: &str) -> Option<i64> {
    m.get(key).and_then(Value::as_i64)
}

/// Whether `key` holds something (not absent, not `null`).
fn has(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key).is_some_and(|v| !v.is_null())
}

/// Sets `key` when it is absent or `null`.
fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    if !has(m, key) {
        m.insert(key.to_string(), value);
    }
}

/// The object under `key`, made `{}` when absent or `null`; `None` for a
/// value of another type.
fn obj_entry<'a>(m: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    set_default(m, key, Value::Object(Map::new()));
    m.get_mut(key).and_then(Value::as_object_mut)
}

/// The object under `key`, if it is one.
fn obj_mut<'a>(m: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    m.get_mut(key).and_then(Value::as_object_mut)
}

/// The objects of the list under `key`.
fn each_obj_mut<'a>(
    m: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    m.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flat_map(|l| l.iter_mut())
        .filter_map(Value::as_object_mut)
}

#[cfg(test)]
mod tests;

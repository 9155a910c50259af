//! Admission: what turns what a client sent into the object to store, for
//! a create and for an update, in one place.
//!
//! - create ([`admit_create`]): the body decoded as the URL's type (its
//!   JSON types checked, `builtin::check_types`), the name (or one
//!   generated from `generateName`, [`NameGenerator`]), the namespace (the
//!   URL's wins; a different one in the body is a `400`; a cluster-scoped
//!   object has none), the server-set fields (`uid`, `creationTimestamp`,
//!   `generation`, a namespace's finalizer and phase) in and
//!   `resourceVersion` out, the type's defaults and strategy
//!   (`kube::builtin`), then the metadata (`kube::objectmeta`) and the
//!   type's rules validated: one `422` with every cause;
//! - update ([`admit_update_body`] for the request, [`admit_update`] once
//!   the stored object is known, for every attempt of a guarded write):
//!   the body's name must be the URL's, the namespace is checked as for a
//!   create, the server's metadata carried as `rest.BeforeUpdate` does
//!   (`objectmeta::before_update`), the type's defaults and strategy
//!   applied, `generation` bumped when `spec` changed (both sides
//!   defaulted, as kube compares them), the metadata and the type's update
//!   rules validated (`422`; a problem the stored object already had,
//!   written before these rules or through the etcd API, is not held
//!   against the update, which kube, whose objects all passed its rules,
//!   never needs), and [`UpdateScope`] keeps the status or everything but
//!   it; [`precondition`] reads the client's `metadata.resourceVersion`;
//! - delete ([`admit_delete`]): the system namespaces stay (what a delete
//!   does is `kube::deletion`'s).
//!
//! Everything here is pure (no store, no clock but the timestamp, no I/O),
//! so it is unit-tested on its own. Patch, server-side apply and custom
//! resources extend it here. A name taken by another object is found by
//! the store's create, which asks [`Admitted::regenerate_name`] for
//! another one (kube's retry of a generated name).

use serde_json::{json, Map, Value};

use std::sync::Arc;

use crate::kube::builtin;
use crate::kube::crd;
use crate::kube::error::KubeError;
use crate::kube::object::{self, metadata_mut};
use crate::kube::objectmeta;
use crate::kube::resources::{self, ResourceType};

/// `utilrand`'s alphabet: no vowels, no look-alike digits.
const GENERATE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const GENERATE_SUFFIX_LEN: usize = 5;
/// kube's `MaxGeneratedNameLength`: a `generateName` is cut to 58
/// characters before its suffix (names.SimpleNameGenerator).
const MAX_GENERATE_BASE_LEN: usize = 63 - GENERATE_SUFFIX_LEN;

/// Where the suffixes of generated names come from: random, as kube's
/// `SimpleNameGenerator`, or (in tests) a given sequence, so a collision
/// can be forced.
#[derive(Clone)]
pub struct NameGenerator {
    suffix: Arc<dyn Fn() -> String + Send + Sync>,
}

impl NameGenerator {
    /// Five random characters of kube's alphabet.
    pub fn random() -> Self {
        Self {
            suffix: Arc::new(|| {
                (0..GENERATE_SUFFIX_LEN)
                    .map(|_| {
                        GENERATE_ALPHABET[rand::random_range(0..GENERATE_ALPHABET.len())] as char
                    })
                    .collect()
            }),
        }
    }

    /// Suffixes from `suffix` (a test's deterministic source).
    pub fn from_fn(suffix: impl Fn() -> String + Send + Sync + 'static) -> Self {
        Self {
            suffix: Arc::new(suffix),
        }
    }

    /// A name from `base`, as kube builds it: the base cut to 58
    /// characters, then the suffix.
    pub fn generate(&self, base: &str) -> String {
        let base: String = base.chars().take(MAX_GENERATE_BASE_LEN).collect();
        format!("{base}{}", (self.suffix)())
    }
}

impl Default for NameGenerator {
    fn default() -> Self {
        Self::random()
    }
}

impl std::fmt::Debug for NameGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NameGenerator")
    }
}

/// Namespaces that exist from the start and may not be deleted.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// An object admitted for writing: its name, its namespace (`None` for a
/// cluster-scoped type) and the object itself.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub name: String,
    pub namespace: Option<String>,
    pub object: Map<String, Value>,
    /// The `generateName` the name was generated from, when the server
    /// chose it: a create that finds the name taken chooses another.
    pub generated_from: Option<String>,
}

impl Admitted {
    /// Another name from the `generateName` this one was generated from
    /// (written into the object), or `None` when the client chose the
    /// name. The new name is as valid as the first: the same base, a
    /// suffix of the same alphabet.
    pub fn regenerate_name(&mut self, names: &NameGenerator) -> Option<&str> {
        let base = self.generated_from.as_deref()?;
        self.name = names.generate(base);
        metadata_mut(&mut self.object).insert("name".into(), json!(self.name));
        Some(&self.name)
    }
}

/// A create of `body` under the URL's namespace `url_ns`: the object to
/// store, validated, with the server-set fields.
pub fn admit_create(
    rt: &ResourceType,
    url_ns: Option<&str>,
    body: &[u8],
) -> Result<Admitted, KubeError> {
    admit_create_object(rt, url_ns, object::decode_body(rt, body)?)
}

/// [`admit_create`] of a body already decoded ([`object::decode_value`]).
pub fn admit_create_object(
    rt: &ResourceType,
    url_ns: Option<&str>,
    obj: Map<String, Value>,
) -> Result<Admitted, KubeError> {
    admit_create_named(rt, url_ns, obj, &NameGenerator::random())
}

/// [`admit_create_object`] with the generator of its name, if it has a
/// `generateName`.
pub fn admit_create_named(
    rt: &ResourceType,
    url_ns: Option<&str>,
    mut obj: Map<String, Value>,
    names: &NameGenerator,
) -> Result<Admitted, KubeError> {
    builtin::check_types(rt, &obj)?;
    let (name, generated_from) = resolve_create_name(&mut obj, names);
    let namespace = check_namespace(rt, url_ns, &mut obj)?;
    prepare_create(rt, &mut obj);
    builtin::prepare_create(rt, &mut obj);
    let definitions = is_definitions(rt);
    if definitions {
        crd::admission::prepare_create(&mut obj);
    }
    let custom = crd::admit_object(rt, &mut obj, None);
    let mut causes =
        objectmeta::validate_create(rt.name_scope(), &obj, &name, namespace.as_deref());
    causes.extend(builtin::validate_create(rt, &obj));
    causes.extend(custom);
    if definitions {
        causes.extend(crd::admission::validate(&obj, &name));
    }
    if !causes.is_empty() {
        return Err(KubeError::invalid(rt, &name, causes));
    }
    Ok(Admitted {
        name,
        namespace,
        object: obj,
        generated_from,
    })
}

/// The body of an update of `url_name` (`PUT`): its name must be the
/// URL's, its namespace is checked as for a create, and the name and
/// namespace are validated when the whole object is written (a status
/// update changes only the status). The object is prepared against the
/// stored one by [`admit_update`].
pub fn admit_update_body(
    rt: &ResourceType,
    url_ns: Option<&str>,
    url_name: &str,
    scope: UpdateScope,
    body: &[u8],
) -> Result<Admitted, KubeError> {
    admit_update_object(rt, url_ns, url_name, scope, object::decode_body(rt, body)?)
}

/// [`admit_update_body`] of a body already decoded.
pub fn admit_update_object(
    rt: &ResourceType,
    url_ns: Option<&str>,
    url_name: &str,
    scope: UpdateScope,
    mut obj: Map<String, Value>,
) -> Result<Admitted, KubeError> {
    let body_name = object::meta_str(&obj, "name").unwrap_or("").to_string();
    if body_name != url_name {
        return Err(KubeError::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
        )));
    }
    let namespace = check_namespace(rt, url_ns, &mut obj)?;
    if scope == UpdateScope::Object {
        let causes =
            objectmeta::name_and_namespace(rt.name_scope(), url_name, namespace.as_deref());
        if !causes.is_empty() {
            return Err(KubeError::invalid(rt, url_name, causes));
        }
    }
    Ok(Admitted {
        name: body_name,
        namespace,
        object: obj,
        generated_from: None,
    })
}

/// The optimistic-concurrency precondition an update carries:
/// `metadata.resourceVersion` when set (a `409` when the stored object is
/// at another revision); `None`: the update applies to whatever is current.
pub fn precondition(obj: &Map<String, Value>) -> Result<Option<u64>, KubeError> {
    match object::meta_str(obj, "resourceVersion") {
        None | Some("") => Ok(None),
        Some(rv) => rv.parse::<u64>().map(Some).map_err(|_| {
            KubeError::BadRequest(format!(
                "invalid resourceVersion {rv:?}: must be an unsigned integer"
            ))
        }),
    }
}

/// The object an update stores: `new` (as the client sent it, or as a
/// patch made it) against the stored `old`, within `scope`; a `400` for
/// a field of the wrong JSON type, a `422` for one the metadata's or the
/// type's rules refuse.
pub fn admit_update(
    rt: &ResourceType,
    scope: UpdateScope,
    old: &Map<String, Value>,
    new: &mut Map<String, Value>,
) -> Result<(), KubeError> {
    builtin::check_types(rt, new)?;
    // As kube reads the stored object: decoded, hence defaulted.
    let old = builtin::with_defaults(rt, old);
    if scope != UpdateScope::Status {
        // The object (or, for `/finalize`, the object but its finalizers
        // from the stored one): the server's metadata carried over.
        objectmeta::before_update(&old, new);
        builtin::prepare_update(rt, &old, new);
    }
    prepare_update_in(rt, scope, &old, new);
    if is_definitions(rt) {
        crd::admission::prepare_update(&old, new);
    }
    // A custom resource's schema covers its status too (kube validates
    // a status update against it).
    let custom = crd::admit_object(rt, new, Some(&old));
    if scope == UpdateScope::Status {
        return if custom.is_empty() {
            Ok(())
        } else {
            let name = object::meta_str(new, "name").unwrap_or("").to_string();
            Err(KubeError::invalid(rt, &name, custom))
        };
    }
    let mut causes = update_causes(rt, &old, new);
    causes.extend(custom);
    if !causes.is_empty() {
        // Problems the stored object has itself (written before these
        // rules, or through the etcd API) are not this update's: it may
        // keep them, so a controller can still edit its metadata.
        let own = update_causes(rt, &old, &old);
        causes.retain(|c| !own.contains(c));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        let name = object::meta_str(new, "name").unwrap_or("").to_string();
        Err(KubeError::invalid(rt, &name, causes))
    }
}

/// What the metadata's and the type's rules refuse in an update of `old`
/// to `new`.
fn update_causes(
    rt: &ResourceType,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Vec<crate::kube::error::FieldCause> {
    let mut causes = objectmeta::validate_update(old, new);
    causes.extend(builtin::validate_update(rt, old, new));
    if is_definitions(rt) {
        let name = object::meta_str(new, "name").unwrap_or("");
        causes.extend(crd::admission::validate(new, name));
        causes.extend(crd::admission::validate_update(old, new));
    }
    causes
}

/// Whether `rt` is CustomResourceDefinitions.
fn is_definitions(rt: &ResourceType) -> bool {
    std::ptr::eq(rt, resources::custom_resource_definitions())
}

/// A delete of `name`: the system namespaces may not be deleted.
pub fn admit_delete(rt: &ResourceType, name: &str) -> Result<(), KubeError> {
    if rt.plural == "namespaces" && SYSTEM_NAMESPACES.contains(&name) {
        return Err(KubeError::Forbidden {
            resource: rt.group_resource(),
            name: name.to_string(),
            message: format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            ),
        });
    }
    Ok(())
}

/// The name of a new object: its own, or one generated from
/// `generateName` (written into the object, with the base it came from).
/// Neither is left empty, which validation refuses.
fn resolve_create_name(
    obj: &mut Map<String, Value>,
    names: &NameGenerator,
) -> (String, Option<String>) {
    let meta = metadata_mut(obj);
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !name.is_empty() {
        return (name, None);
    }
    match meta.get("generateName").and_then(Value::as_str) {
        Some(base) if !base.is_empty() => {
            let base = base.to_string();
            let generated = names.generate(&base);
            meta.insert("name".into(), json!(generated));
            (generated, Some(base))
        }
        _ => (String::new(), None),
    }
}

/// The URL's namespace wins; a different one in the body is a 400.
fn check_namespace(
    rt: &ResourceType,
    url_ns: Option<&str>,
    obj: &mut Map<String, Value>,
) -> Result<Option<String>, KubeError> {
    let meta = metadata_mut(obj);
    let body_ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    if !rt.namespaced {
        if body_ns.as_deref().is_some_and(|n| !n.is_empty()) {
            meta.remove("namespace");
        }
        return Ok(None);
    }
    match (url_ns, body_ns.as_deref()) {
        (Some(u), Some(b)) if !b.is_empty() && u != b => Err(KubeError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        )),
        (Some(u), _) => {
            meta.insert("namespace".into(), json!(u));
            Ok(Some(u.to_string()))
        }
        (None, b) => Ok(b.map(str::to_string)),
    }
}

/// Prepares a new object for storage: server-set fields in, resourceVersion
/// out (it is the revision, filled in on read).
fn prepare_create(rt: &ResourceType, obj: &mut Map<String, Value>) {
    let meta = metadata_mut(obj);
    meta.remove("resourceVersion");
    meta.remove("selfLink");
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(object::now_rfc3339()));
    if rt.tracks_generation {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if rt.plural == "namespaces" {
        // As kube: a new namespace always carries the namespace
        // controller's finalizer, after any the client asked for.
        let mut finalizers = crate::kube::deletion::namespace_finalizers(obj);
        let spec = obj.entry("spec").or_insert_with(|| json!({}));
        if !spec.is_object() {
            *spec = json!({});
        }
        if !finalizers
            .iter()
            .any(|f| f == crate::kube::deletion::FINALIZER_NAMESPACE)
        {
            finalizers.push(crate::kube::deletion::FINALIZER_NAMESPACE.into());
        }
        spec["finalizers"] = json!(finalizers);
        obj.insert("status".into(), json!({ "phase": "Active" }));
    }
}

/// Which part of an object an update writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateScope {
    /// The object (`PUT <name>`): for a type with a status subresource,
    /// the stored status is kept.
    Object,
    /// Only its status (`PUT <name>/status`): everything else is kept.
    Status,
    /// A namespace's finalizers (`PUT namespaces/<name>/finalize`): an
    /// update of the object whose `spec.finalizers` are the body's (kube's
    /// namespace finalize strategy); an update of the object keeps them.
    Finalize,
}

/// Turns the body of an update into the object to store, from the stored
/// one (`old`) and what `scope` lets the update change.
fn prepare_update_in(
    rt: &ResourceType,
    scope: UpdateScope,
    old: &Map<String, Value>,
    new: &mut Map<String, Value>,
) {
    match scope {
        UpdateScope::Status => {
            let status = new.remove("status");
            let mut kept = old.clone();
            match status {
                Some(status) => kept.insert("status".into(), status),
                None => kept.remove("status"),
            };
            *new = kept;
            metadata_mut(new).remove("resourceVersion");
        }
        UpdateScope::Object => {
            prepare_update(rt, old, new);
            if rt.has_status_subresource() {
                match old.get("status") {
                    Some(status) => new.insert("status".into(), status.clone()),
                    None => new.remove("status"),
                };
            }
        }
        UpdateScope::Finalize => {
            let finalizers = new.get("spec").and_then(|s| s.get("finalizers")).cloned();
            prepare_update_in(rt, UpdateScope::Object, old, new);
            let spec = new.entry("spec").or_insert_with(|| json!({}));
            if let Value::Object(spec) = spec {
                match finalizers {
                    Some(f) => spec.insert("finalizers".into(), f),
                    None => spec.remove("finalizers"),
                };
            }
        }
    }
}

/// Carries the immutable and server-owned fields of `old` into an update,
/// and bumps `generation` when `spec` changed.
fn prepare_update(rt: &ResourceType, old: &Map<String, Value>, new: &mut Map<String, Value>) {
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let spec_changed = old.get("spec") != new.get("spec");
    let meta = metadata_mut(new);
    meta.remove("resourceVersion");
    meta.remove("selfLink");
    // uid, creationTimestamp and the deletion fields are
    // `objectmeta::before_update`'s (and what differs is refused).
    match old_meta.and_then(|m| m.get("generateName")) {
        Some(v) => meta.insert("generateName".into(), v.clone()),
        None => meta.remove("generateName"),
    };
    if rt.tracks_generation {
        let old_gen = old_meta
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        // Saturating: the stored generation is whatever was written,
        // through the etcd API too, up to `i64::MAX`.
        let generation = if spec_changed {
            old_gen.saturating_add(1)
        } else {
            old_gen
        };
        meta.insert("generation".into(), json!(generation));
    } else {
        meta.remove("generation");
    }
    if rt.plural == "namespaces" {
        // Namespace status is owned by the server, and its
        // `spec.finalizers` by the namespace controller (kube changes them
        // only through `/finalize`).
        if let Some(status) = old.get("status") {
            new.insert("status".into(), status.clone());
        }
        let kept = old.get("spec").and_then(|s| s.get("finalizers")).cloned();
        let spec = new.entry("spec").or_insert_with(|| json!({}));
        if !spec.is_object() {
            *spec = json!({});
        }
        if let Some(spec) = spec.as_object_mut() {
            match kept {
                Some(f) => spec.insert("finalizers".into(), f),
                None => spec.remove("finalizers"),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    #[test]
    fn names_follow_dns_rules() {
        use crate::kube::names::{self, NameRule};
        let ok = |rule, name: &str| names::name_errors(rule, name, false).is_empty();
        assert!(ok(NameRule::Subdomain, "a.b-c.d"));
        assert!(!ok(NameRule::Subdomain, "Bad_Name"));
        assert!(!ok(NameRule::Subdomain, "-a"));
        assert!(!ok(NameRule::Subdomain, &"a".repeat(254)));
        assert!(!ok(NameRule::Label, "a.b"));
        assert!(ok(NameRule::Label, "123-abc"));
        assert!(!ok(NameRule::Rfc1035Label, "1abc"));
        assert!(ok(NameRule::Rfc1035Label, "abc-1"));
    }

    fn configmaps() -> &'static ResourceType {
        resources::find("", "v1", "configmaps").expect("configmaps")
    }

    #[test]
    fn a_create_gets_its_name_namespace_and_server_set_fields() {
        let cm = configmaps();
        let body = br#"{"metadata":{"generateName":"web-","resourceVersion":"7","uid":"mine"}}"#;
        let a = admit_create(cm, Some("default"), body).expect("admitted");
        assert!(
            a.name.starts_with("web-") && a.name.len() == 9,
            "{}",
            a.name
        );
        assert_eq!(a.namespace.as_deref(), Some("default"));
        let meta = &a.object["metadata"];
        assert_eq!(meta["name"], a.name.as_str());
        assert_eq!(meta["namespace"], "default");
        assert!(
            meta.get("resourceVersion").is_none(),
            "the revision is filled in on read"
        );
        assert_ne!(meta["uid"], "mine", "the server sets the uid");
        assert!(meta["creationTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')));
        assert!(
            meta.get("generation").is_none(),
            "configmaps track no generation"
        );
        assert_eq!(a.object["kind"], "ConfigMap");
        assert_eq!(a.object["apiVersion"], "v1");
    }

    #[test]
    fn a_create_without_a_name_or_in_another_namespace_is_refused() {
        let cm = configmaps();
        match admit_create(cm, Some("default"), br#"{"metadata":{}}"#) {
            Err(KubeError::Invalid { causes, .. }) => {
                assert_eq!(causes[0].field, "metadata.name");
                assert_eq!(causes[0].reason, "FieldValueRequired");
            }
            other => panic!("expected 422, got {other:?}"),
        }
        let elsewhere = br#"{"metadata":{"name":"a","namespace":"other"}}"#;
        assert!(matches!(
            admit_create(cm, Some("default"), elsewhere),
            Err(KubeError::BadRequest(_))
        ));
        // Without a namespace on the URL the body's is used, and checked.
        let a = admit_create(cm, None, elsewhere).expect("the body's namespace");
        assert_eq!(a.namespace.as_deref(), Some("other"));
        match admit_create(cm, None, br#"{"metadata":{"name":"Bad_Name"}}"#) {
            Err(KubeError::Invalid { causes, .. }) => {
                let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
                assert_eq!(fields, ["metadata.name", "metadata.namespace"]);
            }
            other => panic!("expected 422, got {other:?}"),
        }
    }

    #[test]
    fn a_cluster_scoped_object_has_no_namespace_and_a_namespace_is_active() {
        let ns = resources::namespaces();
        let a = admit_create(ns, None, br#"{"metadata":{"name":"team","namespace":"x"}}"#)
            .expect("admitted");
        assert_eq!(a.namespace, None);
        assert!(a.object["metadata"].get("namespace").is_none());
        assert_eq!(a.object["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(a.object["status"]["phase"], "Active");
    }

    #[test]
    fn an_update_body_names_the_urls_object_and_carries_its_precondition() {
        let cm = configmaps();
        assert!(matches!(
            admit_update_body(cm, Some("default"), "a", UpdateScope::Object, br#"{"metadata":{"name":"b"}}"#),
            Err(KubeError::BadRequest(m)) if m.contains("does not match the name on the URL")
        ));
        let body = br#"{"metadata":{"name":"a","resourceVersion":"12"}}"#;
        let a = admit_update_body(cm, Some("default"), "a", UpdateScope::Object, body)
            .expect("admitted");
        assert_eq!(a.object["metadata"]["namespace"], "default");
        assert_eq!(precondition(&a.object).expect("a number"), Some(12));
        let none = admit_update_body(
            cm,
            Some("default"),
            "a",
            UpdateScope::Object,
            br#"{"metadata":{"name":"a","resourceVersion":""}}"#,
        )
        .expect("admitted");
        assert_eq!(
            precondition(&none.object).map_err(|e| e.to_string()),
            Ok(None)
        );
        let bad = admit_update_body(
            cm,
            Some("default"),
            "a",
            UpdateScope::Object,
            br#"{"metadata":{"name":"a","resourceVersion":"-1"}}"#,
        )
        .expect("admitted");
        assert!(matches!(
            precondition(&bad.object),
            Err(KubeError::BadRequest(_))
        ));
        // A status update is not validated as a whole object: a name the
        // object rule refuses still reaches the store (which answers 404).
        assert!(admit_update_body(
            cm,
            Some("default"),
            "A",
            UpdateScope::Status,
            br#"{"metadata":{"name":"A"}}"#
        )
        .is_ok());
        assert!(matches!(
            admit_update_body(
                cm,
                Some("default"),
                "A",
                UpdateScope::Object,
                br#"{"metadata":{"name":"A"}}"#
            ),
            Err(KubeError::Invalid { .. })
        ));
    }

    #[test]
    fn an_update_keeps_what_the_server_owns_and_its_scope_excludes() {
        let dep = resources::find("apps", "v1", "deployments").expect("deployments");
        let spec = |replicas: u32| {
            json!({
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "a"}},
                "template": {"metadata": {"labels": {"app": "a"}},
                             "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
            })
        };
        let old = object::decode_value(
            dep,
            json!({"metadata": {"name": "a", "uid": "u1", "creationTimestamp": "2024-01-02T03:04:05Z", "generation": 4},
                   "spec": spec(1), "status": {"readyReplicas": 1}}),
        )
        .expect("decode");
        let mut new = object::decode_value(
            dep,
            json!({"metadata": {"name": "a", "generation": 99, "creationTimestamp": "2030-01-01T00:00:00Z"},
                   "spec": spec(2), "status": {"readyReplicas": 7}}),
        )
        .expect("decode");
        admit_update(dep, UpdateScope::Object, &old, &mut new).expect("admitted");
        assert_eq!(
            new["metadata"]["uid"], "u1",
            "an empty uid is the stored one"
        );
        assert_eq!(
            new["metadata"]["creationTimestamp"], "2024-01-02T03:04:05Z",
            "a changed creationTimestamp is ignored"
        );
        assert_eq!(new["metadata"]["generation"], 5);
        assert_eq!(
            new["status"],
            json!({"readyReplicas": 1}),
            "the status subresource owns it"
        );
        // Another uid is refused, as kube refuses it.
        let mut forged = old.clone();
        metadata_mut(&mut forged).insert("uid".into(), json!("forged"));
        match admit_update(dep, UpdateScope::Object, &old, &mut forged) {
            Err(KubeError::Invalid { causes, .. }) => {
                assert_eq!(causes[0].field, "metadata.uid");
                assert_eq!(
                    causes[0].message,
                    "Invalid value: \"forged\": field is immutable"
                );
            }
            other => panic!("expected 422, got {other:?}"),
        }

        let mut status = object::decode_body(
            dep,
            br#"{"metadata":{"name":"a","labels":{"x":"y"}},"spec":{"replicas":9},"status":{"ready":7}}"#,
        )
        .expect("decode");
        admit_update(dep, UpdateScope::Status, &old, &mut status).expect("admitted");
        assert_eq!(status["spec"]["replicas"], 1);
        assert!(status["metadata"].get("labels").is_none());
        assert_eq!(status["status"], json!({"ready": 7}));
    }

    #[test]
    fn a_stored_object_that_breaks_the_rules_may_keep_its_problems() {
        // Written before the rules (or through the etcd API): no template.
        let dep = resources::find("apps", "v1", "deployments").expect("deployments");
        let Value::Object(old) = json!({"metadata": {"name": "a", "namespace": "default", "uid": "u1", "finalizers": ["example.com/x"]},
                                        "spec": {"replicas": 1}})
        else {
            unreachable!()
        };
        let mut edited = old.clone();
        metadata_mut(&mut edited).remove("finalizers");
        admit_update(dep, UpdateScope::Object, &old, &mut edited).expect("a metadata edit");
        // A problem of its own is still refused.
        let mut labelled = old.clone();
        metadata_mut(&mut labelled).insert("labels".into(), json!({"-x": "y"}));
        match admit_update(dep, UpdateScope::Object, &old, &mut labelled) {
            Err(KubeError::Invalid { causes, .. }) => {
                let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
                assert_eq!(fields, ["metadata.labels"]);
            }
            other => panic!("expected 422, got {other:?}"),
        }
    }

    #[test]
    fn a_finalize_body_without_uid_or_timestamps_keeps_the_stored_ones() {
        let rt = resources::namespaces();
        let old = json!({"metadata": {"name": "fin", "uid": "u1",
            "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        let Value::Object(old) = old else {
            unreachable!("an object")
        };
        let Value::Object(mut new) = json!({"metadata": {"name": "fin", "creationTimestamp": null},
            "spec": {"finalizers": ["kubernetes", "example.com/hold"]}})
        else {
            unreachable!("an object")
        };
        admit_update(rt, UpdateScope::Finalize, &old, &mut new).expect("admitted");
        assert_eq!(new["metadata"]["uid"], "u1");
        assert_eq!(new["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(
            new["spec"]["finalizers"],
            json!(["kubernetes", "example.com/hold"])
        );
        assert_eq!(new["status"]["phase"], "Active");
    }

    #[test]
    fn system_namespaces_may_not_be_deleted() {
        let ns = resources::namespaces();
        for name in SYSTEM_NAMESPACES {
            assert!(matches!(
                admit_delete(ns, name),
                Err(KubeError::Forbidden { .. })
            ));
        }
        assert!(admit_delete(ns, "team").is_ok());
        assert!(admit_delete(configmaps(), "default").is_ok());
    }

    #[test]
    fn generation_bumps_only_when_spec_changes() {
        let dep = resources::find("apps", "v1", "deployments").expect("deployments");
        let mut old =
            object::decode_body(dep, br#"{"metadata":{"name":"a"},"spec":{"replicas":1}}"#)
                .expect("decode");
        prepare_create(dep, &mut old);
        assert_eq!(old["metadata"]["generation"], 1);
        let mut same = old.clone();
        same.insert("status".into(), json!({"x": 1}));
        prepare_update(dep, &old, &mut same);
        assert_eq!(same["metadata"]["generation"], 1);
        let mut changed = old.clone();
        changed.insert("spec".into(), json!({"replicas": 2}));
        prepare_update(dep, &old, &mut changed);
        assert_eq!(changed["metadata"]["generation"], 2);
        assert_eq!(changed["metadata"]["uid"], old["metadata"]["uid"]);
    }

    #[test]
    fn generated_names_keep_the_prefix_cut_as_kube_cuts_it() {
        let n = NameGenerator::random().generate("web-");
        assert!(n.starts_with("web-") && n.len() == 9, "{n}");
        assert!(
            n[4..].bytes().all(|b| GENERATE_ALPHABET.contains(&b)),
            "{n}"
        );
        let long = NameGenerator::from_fn(|| "xxxxx".into()).generate(&"a".repeat(100));
        assert_eq!(long, format!("{}xxxxx", "a".repeat(58)));
    }

    #[test]
    fn a_generated_name_is_regenerated_a_chosen_one_is_not() {
        let cm = configmaps();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let names = NameGenerator::from_fn(move || {
            format!(
                "{:05}",
                next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            )
        });
        let body = json!({"metadata": {"generateName": "web-"}});
        let Value::Object(body) = body else {
            unreachable!()
        };
        let mut a = admit_create_named(cm, Some("default"), body, &names).expect("admitted");
        assert_eq!(a.name, "web-00000");
        assert_eq!(a.regenerate_name(&names), Some("web-00001"));
        assert_eq!(a.object["metadata"]["name"], "web-00001");
        let mut chosen =
            admit_create(cm, Some("default"), br#"{"metadata":{"name":"a"}}"#).expect("admitted");
        assert_eq!(chosen.regenerate_name(&names), None);
        assert_eq!(chosen.name, "a");
    }

    #[test]
    fn a_create_gets_the_types_defaults_and_its_422s() {
        let pods = resources::find("", "v1", "pods").expect("pods");
        let a = admit_create(
            pods,
            Some("default"),
            br#"{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"nginx"}]}}"#,
        )
        .expect("admitted");
        assert_eq!(a.object["spec"]["restartPolicy"], "Always");
        assert_eq!(
            a.object["spec"]["containers"][0]["imagePullPolicy"],
            "Always"
        );
        assert_eq!(a.object["status"]["phase"], "Pending");
        match admit_create(
            pods,
            Some("default"),
            br#"{"metadata":{"name":"p","labels":{"bad key":"v"}},"spec":{}}"#,
        ) {
            Err(KubeError::Invalid { causes, .. }) => {
                let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
                assert_eq!(fields, ["metadata.labels", "spec.containers"]);
            }
            other => panic!("expected 422, got {other:?}"),
        }
        assert!(matches!(
            admit_create(pods, Some("default"), br#"{"metadata":{"name":"p"},"spec":{"containers":{}}}"#),
            Err(KubeError::BadRequest(m)) if m.contains("cannot unmarshal object")
        ));
    }
}

/// Property tests: whatever body a client sends for a create or an
/// update, it is prepared for storage or refused as the client's mistake
/// (`400` or `422`), never a panic or a server error.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz;
    use crate::kube::resources;

    /// An error a client's input may cause: never one of the server's
    /// (internal, unavailable, Raft).
    fn is_clients_mistake(e: &KubeError) -> bool {
        matches!(e, KubeError::BadRequest(_) | KubeError::Invalid { .. })
    }

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_create_body_is_stored_or_refused(
            body in fuzz::body(),
            url_ns in proptest::option::of(prop_oneof![Just("default".to_string()), fuzz::text()]),
            plural in proptest::sample::select(&["configmaps", "namespaces", "deployments", "pods", "nodes"][..]),
        ) {
            let rt = resources::RESOURCES
                .iter()
                .find(|r| r.plural == plural)
                .expect("a served type");
            let url_ns = url_ns.filter(|_| rt.namespaced);
            match admit_create(rt, url_ns.as_deref(), &body) {
                Ok(Admitted { object: obj, .. }) => {
                    let stored = object::to_stored(&obj);
                    let back = object::from_stored(rt, b"k", &stored, 7)
                        .expect("a stored object reads back");
                    prop_assert_eq!(&back["metadata"]["name"], &obj["metadata"]["name"]);
                    prop_assert_eq!(&back["metadata"]["resourceVersion"], "7");
                    prop_assert_eq!(&back["kind"], rt.kind);
                }
                Err(e) => prop_assert!(is_clients_mistake(&e), "{e:?}"),
            }
        }

        #[test]
        fn any_update_body_merges_with_any_stored_object(
            old in fuzz::object_value(),
            new in fuzz::object_value(),
            status_scope in any::<bool>(),
            plural in proptest::sample::select(&["configmaps", "namespaces", "deployments", "pods"][..]),
        ) {
            let rt = resources::RESOURCES
                .iter()
                .find(|r| r.plural == plural)
                .expect("a served type");
            let (Value::Object(old), Value::Object(mut new)) = (old, new) else {
                unreachable!("object_value makes objects");
            };
            let scope = if status_scope { UpdateScope::Status } else { UpdateScope::Object };
            match admit_update(rt, scope, &old, &mut new) {
                Ok(()) => {
                    prop_assert!(new.get("metadata").is_some_and(Value::is_object));
                    prop_assert!(object::meta_str(&new, "resourceVersion").is_none());
                }
                Err(e) => prop_assert!(is_clients_mistake(&e), "{e:?}"),
            }
        }
    }

    /// The update of an object stored (through the etcd API) with the
    /// largest generation: found by
    /// `any_update_body_merges_with_any_stored_object`, it overflowed.
    #[test]
    fn a_spec_change_at_the_largest_generation_does_not_overflow() {
        let dep = resources::find("apps", "v1", "deployments").expect("deployments");
        let old =
            json!({"metadata": {"name": "a", "generation": i64::MAX}, "spec": {"replicas": 1}});
        let mut new = json!({"metadata": {"name": "a"}, "spec": {"replicas": 2}});
        let (Value::Object(old), Value::Object(new_obj)) = (old, &mut new) else {
            unreachable!("objects");
        };
        prepare_update(dep, &old, new_obj);
        assert_eq!(new_obj["metadata"]["generation"], i64::MAX);
    }
}

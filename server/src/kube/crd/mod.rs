//! CustomResourceDefinitions: what a definition makes a node serve, and
//! what a definition may be.
//!
//! - [`type_set`]: the types a node serves, from the definitions it holds
//!   (the watch cache calls it whenever a revision touches one, so every
//!   node serves a custom type from the revision its definition was
//!   written at, the same on every node). A definition defines one type
//!   per served version, all stored under one etcd prefix
//!   (`/registry/<group>/<plural>/`, as kube lays them out) in the storage
//!   version; conversion is `None`, so a version is a view that differs in
//!   `apiVersion` alone.
//! - [`admission`]: a definition's defaults, rules, names and status, as
//!   kube's apiextensions strategy and its naming controller do them.
//!
//! Invariants:
//! - A type is served only while its definition's `Established` condition
//!   is true (admission sets it when the names are free) and it names no
//!   type already served: when two definitions written concurrently
//!   through different nodes claim the same names, the one first in name
//!   order is served, on every node alike.
//! - Types are interned ([`intern`]): one `&'static ResourceType` per
//!   distinct definition of a version, for the life of the process (a
//!   definition is a few kilobytes and changes rarely), so an unchanged
//!   definition yields the same type, pointer-equal, at every revision.

pub mod admission;

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use serde_json::{json, Map, Value};

use crate::kube::error::FieldCause;

use crate::kube::names::NameRule;
use crate::kube::resources::{CustomType, PrinterColumn, ResourceType, ScalePaths, TypeSet};
use crate::kube::structural::StructuralSchema;
use crate::kube::types::{ResourceDef, SubresourceDef};

/// The finalizer kube puts on every definition: its objects are deleted
/// before it goes.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The verbs of every custom type, as discovery lists them.
const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A custom resource about to be written (`old`: the stored one on an
/// update), as kube's custom resource strategy handles it: fields its
/// schema does not know pruned, its defaults applied, then the schema's
/// validations and rules; the causes of a `422`. A type without a
/// structural schema keeps objects as written.
pub fn admit_object(
    rt: &ResourceType,
    obj: &mut Map<String, Value>,
    old: Option<&Map<String, Value>>,
) -> Vec<FieldCause> {
    let Some(schema) = rt.custom.and_then(|c| c.structural.as_ref()) else {
        return Vec::new();
    };
    let mut value = Value::Object(std::mem::take(obj));
    schema.prune(&mut value);
    schema.apply_defaults(&mut value);
    let old = old.map(|o| {
        let mut o = Value::Object(o.clone());
        schema.apply_defaults(&mut o);
        o
    });
    let causes = schema.validate(&value, old.as_ref());
    if let Value::Object(m) = value {
        *obj = m;
    }
    causes
}

/// The types `definitions` make a node serve, with the built-ins. A
/// definition that is not established defines none; one whose names are
/// taken by a type already in the set (a built-in, or a definition
/// earlier in name order) neither.
pub fn type_set<'a>(definitions: impl IntoIterator<Item = &'a Value>) -> TypeSet {
    let mut defs: Vec<&Value> = definitions.into_iter().collect();
    defs.sort_by_key(|d| name_of(d).to_string());
    let mut custom: Vec<&'static ResourceType> = Vec::new();
    let mut taken = TypeSet::builtin();
    for def in defs {
        let types = types_of(def);
        let clash = types.iter().any(|rt| {
            taken.iter().any(|t| {
                t.group == rt.group
                    && (t.plural == rt.plural || (t.kind == rt.kind && t.version == rt.version))
            })
        });
        if clash {
            tracing::warn!(
                definition = name_of(def),
                "a custom resource definition names a type already served; not serving it"
            );
            continue;
        }
        custom.extend(types);
        taken = TypeSet::with_custom(custom.iter().copied());
    }
    taken
}

fn name_of(def: &Value) -> &str {
    def.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Whether a condition of the definition's status is `True`.
pub fn condition_true(def: &Value, kind: &str) -> bool {
    def.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == kind && c["status"] == "True")
        })
}

/// The types one definition defines: one per served version, when it is
/// established.
pub fn types_of(def: &Value) -> Vec<&'static ResourceType> {
    if !condition_true(def, "Established") {
        return Vec::new();
    }
    let spec = &def["spec"];
    let Some(group) = spec["group"].as_str() else {
        return Vec::new();
    };
    let names = &spec["names"];
    let (Some(plural), Some(kind)) = (names["plural"].as_str(), names["kind"].as_str()) else {
        return Vec::new();
    };
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|v| v["served"].as_bool().unwrap_or(false))
        .filter_map(|v| {
            let version = v["name"].as_str()?;
            Some(intern(Definition {
                name: name_of(def).to_string(),
                uid: def
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                group: group.to_string(),
                plural: plural.to_string(),
                kind: kind.to_string(),
                names: names.clone(),
                namespaced: spec["scope"] != "Cluster",
                version: version.to_string(),
                spec: v.clone(),
            }))
        })
        .collect()
}

/// Everything one served version's type is made of (the interning key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Definition {
    name: String,
    uid: String,
    group: String,
    plural: String,
    kind: String,
    /// `spec.names`, as written (short names, categories, singular).
    names: Value,
    namespaced: bool,
    version: String,
    /// The version's entry of `spec.versions`.
    spec: Value,
}

impl Definition {
    /// The interning key: the definition as one canonical string.
    fn key(&self) -> String {
        json!([
            self.name,
            self.uid,
            self.group,
            self.plural,
            self.kind,
            self.names,
            self.namespaced,
            self.version,
            self.spec
        ])
        .to_string()
    }
}

/// The type of one definition's version, made once per distinct
/// definition and kept for the life of the process (see the module head).
fn intern(def: Definition) -> &'static ResourceType {
    static TYPES: LazyLock<Mutex<HashMap<String, &'static ResourceType>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let key = def.key();
    let mut types = TYPES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(rt) = types.get(&key) {
        return rt;
    }
    let rt: &'static ResourceType = Box::leak(Box::new(build(def)));
    types.insert(key, rt);
    rt
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn leak_list(v: &Value) -> &'static [&'static str] {
    let list: Vec<&'static str> = v
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(leak).collect())
        .unwrap_or_default();
    Box::leak(list.into_boxed_slice())
}

/// The type a definition's version defines.
fn build(def: Definition) -> ResourceType {
    let v = &def.spec;
    let group = leak(&def.group);
    let version = leak(&def.version);
    let kind = leak(&def.kind);
    let mut subresources = std::collections::BTreeMap::new();
    let status_verbs = || vec!["get".to_string(), "patch".into(), "update".into()];
    if v.pointer("/subresources/status")
        .is_some_and(Value::is_object)
    {
        subresources.insert(
            "status".to_string(),
            SubresourceDef {
                group: def.group.clone(),
                version: def.version.clone(),
                kind: def.kind.clone(),
                verbs: status_verbs(),
            },
        );
    }
    let scale = v
        .pointer("/subresources/scale")
        .filter(|s| s.is_object())
        .map(|s| ScalePaths {
            spec_replicas: s["specReplicasPath"].as_str().unwrap_or("").to_string(),
            status_replicas: s["statusReplicasPath"].as_str().unwrap_or("").to_string(),
            label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
        });
    if scale.is_some() {
        subresources.insert(
            "scale".to_string(),
            SubresourceDef {
                group: "autoscaling".into(),
                version: "v1".into(),
                kind: "Scale".into(),
                verbs: status_verbs(),
            },
        );
    }
    let spec: &'static ResourceDef = Box::leak(Box::new(ResourceDef {
        kind: def.kind.clone(),
        namespaced: def.namespaced,
        verbs: VERBS.iter().map(|v| v.to_string()).collect(),
        subresources,
    }));
    let printer_columns = v["additionalPrinterColumns"]
        .as_array()
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: c["name"].as_str().unwrap_or("").to_string(),
                    type_: c["type"].as_str().unwrap_or("string").to_string(),
                    format: c["format"].as_str().unwrap_or("").to_string(),
                    description: c["description"].as_str().unwrap_or("").to_string(),
                    priority: c["priority"].as_i64().unwrap_or(0),
                    json_path: c["jsonPath"].as_str().unwrap_or("").to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    let selectable_fields = v["selectableFields"]
        .as_array()
        .map(|fs| {
            fs.iter()
                .filter_map(|f| f["jsonPath"].as_str())
                .map(|p| p.trim_start_matches('.').to_string())
                .collect()
        })
        .unwrap_or_default();
    let deprecation_warning = v["deprecated"].as_bool().unwrap_or(false).then(|| {
        v["deprecationWarning"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{group}/{version} {kind} is deprecated"))
    });
    let schema = v.pointer("/schema/openAPIV3Schema").cloned();
    let structural = schema.as_ref().and_then(|s| {
        StructuralSchema::new(s, "")
            .map_err(|causes| {
                tracing::warn!(
                    definition = def.name,
                    version,
                    ?causes,
                    "a stored definition's schema is not structural; its objects are not validated"
                );
            })
            .ok()
    });
    let type_schema = structural
        .as_ref()
        .map(|s| s.to_type_schema(group, version, kind));
    let custom: &'static CustomType = Box::leak(Box::new(CustomType {
        definition: def.name.clone(),
        storage: v["storage"].as_bool().unwrap_or(false),
        schema,
        structural,
        type_schema,
        printer_columns,
        selectable_fields,
        scale,
        deprecation_warning,
        uid: def.uid.clone(),
    }));
    let singular = def.names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(leak)
        .unwrap_or_else(|| leak(&def.kind.to_lowercase()));
    ResourceType {
        group,
        version,
        plural: leak(&def.plural),
        singular,
        kind,
        namespaced: def.namespaced,
        short_names: leak_list(&def.names["shortNames"]),
        categories: leak_list(&def.names["categories"]),
        etcd_prefix: leak(&format!("/registry/{}/{}", def.group, def.plural)),
        name_rule: NameRule::Subdomain,
        tracks_generation: true,
        spec,
        custom: Some(custom),
    }
}

#[cfg(test)]
mod tests;

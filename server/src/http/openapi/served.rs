//! The seam between what a node serves and its OpenAPI documents: one
//! [`ServedApi`] per served resource type, naming its root schema and
//! bringing the schemas it needs. Documents are built from a list of them
//! and nothing else, so a custom resource becomes one more entry (its
//! `openAPIV3Schema` as the root schema in [`ServedApi::schemas`]).
//!
//! Today the list is made from the built-in table
//! (`kube::resources::RESOURCES`) on every request; [`fingerprint`] keys
//! the document cache, so when the served set changes at run time the
//! documents, and the index's hashes, change with it.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::Value;

use super::data::Data;
use crate::kube::resources::{self, ResourceType, Subresource};

/// A group, version and kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// A served subresource: its path segment, the kind it reads and writes
/// and that kind's schema, and its verbs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServedSubresource {
    pub name: String,
    pub gvk: Gvk,
    pub schema: String,
    pub verbs: Vec<String>,
}

/// One served resource type as the documents describe it.
#[derive(Debug, Clone)]
pub struct ServedApi {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    /// Discovery's verbs (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`).
    pub verbs: Vec<String>,
    pub subresources: Vec<ServedSubresource>,
    /// The schema name of the kind (`io.k8s.api.apps.v1.Deployment`).
    pub root: String,
    /// The schema name of its list kind.
    pub list: String,
    /// Schemas (swagger 2.0 form, `#/definitions/` refs) this entry
    /// brings beyond the built-in table, which every entry may reference
    /// (a custom resource's root and list, referencing `ObjectMeta`).
    /// Empty for a built-in type.
    pub schemas: Arc<BTreeMap<String, Value>>,
    /// Changes whenever `schemas` do (a CRD's `resourceVersion`); part of
    /// the cache key, so the documents need not be hashed to notice.
    pub revision: String,
}

impl ServedApi {
    /// The entry of a built-in type; `None` when the generated data lacks
    /// its kind (a build defect the tests catch).
    pub fn builtin(rt: &ResourceType) -> Option<ServedApi> {
        let data = Data::get();
        let root = data.definition_of(rt.group, rt.version, rt.kind)?;
        let list = data.definition_of(rt.group, rt.version, &rt.list_kind())?;
        let subresources = Subresource::ALL
            .into_iter()
            .filter_map(|sub| {
                let def = rt.subresource(sub)?;
                let schema = data.definition_of(&def.group, &def.version, &def.kind)?;
                Some(ServedSubresource {
                    name: sub.name().to_string(),
                    gvk: Gvk {
                        group: def.group.clone(),
                        version: def.version.clone(),
                        kind: def.kind.clone(),
                    },
                    schema: schema.to_string(),
                    verbs: def.verbs.clone(),
                })
            })
            .collect();
        Some(ServedApi {
            group: rt.group.to_string(),
            version: rt.version.to_string(),
            plural: rt.plural.to_string(),
            kind: rt.kind.to_string(),
            namespaced: rt.namespaced,
            verbs: rt.verbs().to_vec(),
            subresources,
            root: root.to_string(),
            list: list.to_string(),
            schemas: Arc::default(),
            revision: String::new(),
        })
    }

    pub fn gvk(&self) -> Gvk {
        Gvk {
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
        }
    }

    pub fn serves(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// A schema by name: the entry's own, else the built-in table's.
    pub fn schema<'a>(&'a self, data: &'a Data, name: &str) -> Option<&'a Value> {
        self.schemas
            .get(name)
            .or_else(|| data.definitions.get(name))
    }
}

/// Every served type, in the served table's order. The one place that
/// reads the served set: a dynamic table (custom resources) changes this
/// function alone.
pub fn served() -> Vec<ServedApi> {
    resources::RESOURCES
        .iter()
        .filter_map(|rt| {
            let api = ServedApi::builtin(rt);
            if api.is_none() {
                tracing::error!(kind = rt.kind, "served type missing from the OpenAPI data");
            }
            api
        })
        .collect()
}

/// A key that changes whenever the served set, or any entry's schemas,
/// change.
pub fn fingerprint(apis: &[ServedApi]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for api in apis {
        (
            &api.group,
            &api.version,
            &api.plural,
            &api.kind,
            api.namespaced,
            &api.verbs,
            &api.subresources,
            &api.root,
            &api.list,
            &api.revision,
        )
            .hash(&mut h);
        api.schemas.keys().collect::<Vec<_>>().hash(&mut h);
    }
    h.finish()
}

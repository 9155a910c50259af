//! The seam between what a node serves and its OpenAPI documents: one
//! [`ServedApi`] per served resource type, naming its root schema and
//! bringing the schemas it needs. Documents are built from a list of them
//! and nothing else, so a custom resource becomes one more entry (its
//! `openAPIV3Schema` as the root schema in [`ServedApi::schemas`]).
//!
//! The list is made from the node's served types (`kube::resources::TypeSet`:
//! the built-ins and the custom types of its CustomResourceDefinitions)
//! on every request; [`fingerprint`] keys the document cache, so when the
//! served set changes at run time the documents, and the index's hashes,
//! change with it.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::{json, Value};

use super::data::Data;
use crate::kube::resources::{ResourceType, Subresource, TypeSet};

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
    /// A strategic merge patch is served (built-ins; not custom types).
    pub strategic: bool,
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
            strategic: true,
            revision: String::new(),
        })
    }

    /// The entry of a custom type: its definition's `openAPIV3Schema` as
    /// the root schema (`<reversed group>.<version>.<Kind>`, as kube names
    /// it, with `apiVersion`, `kind` and `metadata` declared and the kind's
    /// extension), a list schema, and the `status` and `scale`
    /// subresources the definition gives it.
    pub fn custom(rt: &'static ResourceType) -> ServedApi {
        let custom = rt.custom;
        let prefix: Vec<&str> = rt.group.split('.').rev().collect();
        let root = format!("{}.{}.{}", prefix.join("."), rt.version, rt.kind);
        let list = format!("{root}List");
        let gvk = |kind: &str| json!([{ "group": rt.group, "version": rt.version, "kind": kind }]);
        let mut schema = custom
            .and_then(|c| c.schema.clone())
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({"type": "object"}));
        let props = schema
            .as_object_mut()
            .map(|s| s.entry("properties").or_insert_with(|| json!({})));
        if let Some(Value::Object(props)) = props {
            props.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}));
            props.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}));
            props.insert("metadata".into(), json!({"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}));
        }
        if let Value::Object(s) = &mut schema {
            s.insert("x-kubernetes-group-version-kind".into(), gvk(rt.kind));
        }
        let list_schema = json!({
            "description": format!("{} is a list of {}", rt.list_kind(), rt.kind),
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
                "items": {"type": "array", "items": {"$ref": format!("#/definitions/{root}")}},
            },
            "x-kubernetes-group-version-kind": gvk(&rt.list_kind()),
        });
        let mut schemas: BTreeMap<String, Value> = BTreeMap::new();
        schemas.insert(root.clone(), schema);
        schemas.insert(list.clone(), list_schema);
        let data = Data::get();
        let subresources = Subresource::ALL
            .into_iter()
            .filter_map(|sub| {
                let def = rt.subresource(sub)?;
                let schema = if def.kind == rt.kind && def.group == rt.group {
                    root.clone()
                } else {
                    data.definition_of(&def.group, &def.version, &def.kind)?
                        .to_string()
                };
                Some(ServedSubresource {
                    name: sub.name().to_string(),
                    gvk: Gvk {
                        group: def.group.clone(),
                        version: def.version.clone(),
                        kind: def.kind.clone(),
                    },
                    schema,
                    verbs: def.verbs.clone(),
                })
            })
            .collect();
        ServedApi {
            group: rt.group.to_string(),
            version: rt.version.to_string(),
            plural: rt.plural.to_string(),
            kind: rt.kind.to_string(),
            namespaced: rt.namespaced,
            verbs: rt.verbs().to_vec(),
            subresources,
            root,
            list,
            schemas: Arc::new(schemas),
            strategic: false,
            // Custom types are interned per distinct definition
            // (`kube::crd`): another address is another definition.
            revision: format!("{:p}", rt),
        }
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

/// Every type of `types`, in its order: the built-ins from the generated
/// data, custom types from their definitions.
pub fn served(types: &TypeSet) -> Vec<ServedApi> {
    types
        .iter()
        .filter_map(|rt| {
            if rt.custom.is_some() {
                return Some(ServedApi::custom(rt));
            }
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
            api.strategic,
            &api.revision,
        )
            .hash(&mut h);
        api.schemas.keys().collect::<Vec<_>>().hash(&mut h);
    }
    h.finish()
}

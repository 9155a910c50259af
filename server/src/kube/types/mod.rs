//! What kubestore knows of the built-in Kubernetes types' shapes: for each
//! kind a client can write, its root type, and for each type its fields,
//! each with its shape and the schema extensions that decide how it is
//! merged (`x-kubernetes-patch-strategy`, `-patch-merge-key`, `-list-type`,
//! `-list-map-keys`, `-map-type`) and which fields are required.
//!
//! The knowledge is data, not code: `builtin.json` beside this file is
//! generated from the upstream OpenAPI specification by
//! `scripts/gen-kube-types.py` (its head says how to rerun it and what the
//! table holds), embedded in the binary and parsed once, on first use.
//! Strategic merge patch ([`crate::kube::strategic`]) reads merge keys and
//! patch strategies from it; server-side apply (list types and map keys),
//! field validation (unknown fields) and the OpenAPI documents are meant
//! to read it too.
//!
//! Merge keys and list-map keys are kept apart because they differ: a
//! strategic merge patch merges container ports on `containerPort`, apply
//! keys them by `containerPort` and `protocol`.
//!
//! The table also holds what the specification's paths say of each
//! resource ([`ResourceDef`]: its kind, scope, verbs and subresources),
//! which the table of served types (`kube::resources`) reads.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;

/// The generated table (see the module head).
const BUILTIN_TABLE: &str = include_str!("builtin.json");

static BUILTIN: LazyLock<Schema> = LazyLock::new(|| {
    // The table is part of the source, checked by this module's tests: a
    // table that does not parse is a build defect, not an input error.
    serde_json::from_str(BUILTIN_TABLE).expect("builtin.json is a valid type table")
});

/// The built-in types: kinds to root types, type names to definitions.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schema {
    /// `<apiVersion>/<kind>` (`v1/ConfigMap`, `apps/v1/Deployment`) to the
    /// name of its root type.
    kinds: BTreeMap<String, String>,
    /// `<apiVersion>/<plural>` (`v1/pods`, `apps/v1/deployments`) to what
    /// the specification's paths say of the resource.
    resources: BTreeMap<String, ResourceDef>,
    /// OpenAPI definition name (`io.k8s.api.core.v1.Container`) to type.
    types: BTreeMap<String, TypeDef>,
}

impl Schema {
    /// The built-in types of Kubernetes v1.33.
    pub fn builtin() -> &'static Schema {
        &BUILTIN
    }

    /// The root type of a kind (`group` is `""` for the core group), or
    /// `None` for a kind that is not built in (a custom resource).
    pub fn for_kind(&self, group: &str, version: &str, kind: &str) -> Option<&TypeDef> {
        let key = if group.is_empty() {
            format!("{version}/{kind}")
        } else {
            format!("{group}/{version}/{kind}")
        };
        self.kinds.get(&key).and_then(|name| self.types.get(name))
    }

    /// What the specification says of a resource (`group` is `""` for
    /// the core group), or `None` for one it does not serve.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceDef> {
        let key = if group.is_empty() {
            format!("{version}/{plural}")
        } else {
            format!("{group}/{version}/{plural}")
        };
        self.resources.get(&key)
    }

    /// A type by its OpenAPI definition name.
    pub fn type_def(&self, name: &str) -> Option<&TypeDef> {
        self.types.get(name)
    }

    /// The table of one custom kind (a CRD version's structural schema,
    /// built by `kube::structural`): `root` is its root type's name in
    /// `types`. A type `types` refers to but does not define is taken
    /// from the built-in table with every type it reaches (`metadata`
    /// is the built-in `ObjectMeta`), so apply and field validation read
    /// a custom kind as they read a built-in one. No resources: what a
    /// CRD serves is the CRD registry's to say.
    pub fn for_custom_kind(
        group: &str,
        version: &str,
        kind: &str,
        root: &str,
        mut types: BTreeMap<String, TypeDef>,
    ) -> Schema {
        let builtin = Schema::builtin();
        let mut wanted: Vec<String> = types
            .values()
            .flat_map(|t| t.fields.values().filter_map(|f| f.shape.object_name()))
            .map(String::from)
            .collect();
        while let Some(name) = wanted.pop() {
            if types.contains_key(&name) {
                continue;
            }
            if let Some(def) = builtin.type_def(&name) {
                wanted.extend(
                    def.fields
                        .values()
                        .filter_map(|f| f.shape.object_name())
                        .map(String::from),
                );
                types.insert(name, def.clone());
            }
        }
        let key = if group.is_empty() {
            format!("{version}/{kind}")
        } else {
            format!("{group}/{version}/{kind}")
        };
        Schema {
            kinds: BTreeMap::from([(key, root.to_string())]),
            resources: BTreeMap::new(),
            types,
        }
    }

    /// The type an object shape names; `None` for any other shape.
    pub fn object(&self, shape: &Shape) -> Option<&TypeDef> {
        match shape {
            Shape::Object(name) => self.types.get(name),
            _ => None,
        }
    }
}

/// One resource as the specification's paths describe it.
#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceDef {
    /// The kind its objects have.
    pub kind: String,
    /// Served under `namespaces/{namespace}/`.
    pub namespaced: bool,
    /// Discovery's verbs (`create`, `delete`, `deletecollection`, `get`,
    /// `list`, `patch`, `update`, `watch`), sorted.
    pub verbs: Vec<String>,
    /// `<name>/<subresource>` paths, by subresource name.
    pub subresources: BTreeMap<String, SubresourceDef>,
}

/// One subresource (`deployments/scale`, `namespaces/finalize`).
#[derive(Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubresourceDef {
    /// The group, version and kind it reads and writes (a `scale` is
    /// `autoscaling/v1` `Scale`; a `status` its resource's own kind).
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Discovery's verbs, sorted.
    pub verbs: Vec<String>,
}

/// One object type (an OpenAPI definition with properties).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TypeDef {
    fields: BTreeMap<String, FieldDef>,
    #[serde(default)]
    required: Vec<String>,
    /// `x-kubernetes-map-type` of the struct itself (`atomic`: apply
    /// replaces it whole).
    #[serde(default)]
    map_type: Option<MapType>,
}

impl TypeDef {
    /// A type made from its parts (a custom kind's, see
    /// [`Schema::for_custom_kind`]).
    pub fn new(
        fields: BTreeMap<String, FieldDef>,
        required: Vec<String>,
        map_type: Option<MapType>,
    ) -> Self {
        TypeDef {
            fields,
            required,
            map_type,
        }
    }

    /// A field by its JSON name.
    pub fn field(&self, name: &str) -> Option<&FieldDef> {
        self.fields.get(name)
    }

    /// Every field, by name.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &FieldDef)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The names of the required fields, sorted.
    pub fn required(&self) -> &[String] {
        &self.required
    }

    pub fn map_type(&self) -> Option<MapType> {
        self.map_type
    }
}

/// One field of a type: its shape and how it merges.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FieldDef {
    pub shape: Shape,
    /// `x-kubernetes-patch-strategy`, split at commas.
    #[serde(default)]
    pub patch_strategy: Vec<PatchStrategy>,
    /// `x-kubernetes-patch-merge-key`: what a strategic merge patch
    /// matches list items on.
    #[serde(default)]
    pub merge_key: Option<String>,
    /// `x-kubernetes-list-type`.
    #[serde(default)]
    pub list_type: Option<ListType>,
    /// `x-kubernetes-list-map-keys`: what apply keys list items by.
    #[serde(default)]
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type`.
    #[serde(default)]
    pub map_type: Option<MapType>,
}

impl FieldDef {
    /// Whether a strategic merge patch merges this list (by
    /// [`merge_key`](Self::merge_key) for objects, as a union for
    /// scalars) instead of replacing it.
    pub fn merges(&self) -> bool {
        self.patch_strategy.contains(&PatchStrategy::Merge)
    }

    /// Whether a strategic merge patch replaces this map whole.
    pub fn replaces(&self) -> bool {
        self.patch_strategy.contains(&PatchStrategy::Replace)
    }

    /// Whether patches computed for this field carry `$retainKeys`.
    pub fn retains_keys(&self) -> bool {
        self.patch_strategy.contains(&PatchStrategy::RetainKeys)
    }
}

/// The shape of a value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Shape {
    Scalar(Scalar),
    /// An object of the named type.
    Object(String),
    List(Box<Shape>),
    /// An object with arbitrary keys whose values have this shape
    /// (`additionalProperties`: labels, `data`, resource lists).
    Map(Box<Shape>),
    /// Any JSON (`RawExtension`, `FieldsV1`, apiextensions' `JSON`).
    Untyped,
}

impl Shape {
    /// The type an object shape names, through lists and maps.
    pub fn object_name(&self) -> Option<&str> {
        match self {
            Shape::Object(name) => Some(name),
            Shape::List(s) | Shape::Map(s) => s.object_name(),
            Shape::Scalar(_) | Shape::Untyped => None,
        }
    }
}

/// A scalar's type, with the string formats that matter to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Scalar {
    String,
    /// Base64 (`format: byte`: a secret's data).
    Byte,
    /// RFC 3339 (`Time`, `MicroTime`).
    DateTime,
    Integer,
    Number,
    Boolean,
    /// `IntOrString`: a JSON number or string.
    IntOrString,
    /// `resource.Quantity`: a string (`"100m"`) or a number.
    Quantity,
}

/// One of `x-kubernetes-patch-strategy`'s strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PatchStrategy {
    Merge,
    RetainKeys,
    Replace,
}

/// `x-kubernetes-list-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ListType {
    Atomic,
    Set,
    Map,
}

/// `x-kubernetes-map-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MapType {
    Atomic,
    Granular,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field<'a>(schema: &'a Schema, ty: &str, name: &str) -> &'a FieldDef {
        schema
            .type_def(ty)
            .and_then(|t| t.field(name))
            .unwrap_or_else(|| panic!("{ty}.{name}"))
    }

    #[test]
    fn the_table_parses_and_every_reference_resolves() {
        let schema: Schema = serde_json::from_str(BUILTIN_TABLE).expect("parses");
        fn check(schema: &Schema, shape: &Shape, at: &str) {
            match shape {
                Shape::Object(name) => {
                    assert!(schema.type_def(name).is_some(), "{at}: {name}")
                }
                Shape::List(s) | Shape::Map(s) => check(schema, s, at),
                Shape::Scalar(_) | Shape::Untyped => {}
            }
        }
        for (kind, root) in &schema.kinds {
            assert!(schema.type_def(root).is_some(), "{kind}: {root}");
        }
        for (name, ty) in &schema.types {
            for (f, def) in ty.fields() {
                check(&schema, &def.shape, &format!("{name}.{f}"));
            }
        }
    }

    #[test]
    fn kinds_map_to_their_root_types() {
        let s = Schema::builtin();
        let dep = s.for_kind("apps", "v1", "Deployment").expect("deployments");
        assert_eq!(dep.required(), &[] as &[String]);
        let spec = dep.field("spec").expect("spec");
        assert_eq!(
            spec.shape,
            Shape::Object("io.k8s.api.apps.v1.DeploymentSpec".into())
        );
        assert!(s.for_kind("", "v1", "ConfigMap").is_some());
        assert!(s.for_kind("autoscaling", "v1", "Scale").is_some());
        assert!(s.for_kind("", "v1", "Deployment").is_none());
        assert!(s.for_kind("example.com", "v1", "Widget").is_none());
    }

    #[test]
    fn resources_carry_their_scope_verbs_and_subresources() {
        let s = Schema::builtin();
        let dep = s
            .resource("apps", "v1", "deployments")
            .expect("deployments");
        assert_eq!(dep.kind, "Deployment");
        assert!(dep.namespaced);
        assert_eq!(
            dep.verbs,
            [
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch"
            ]
        );
        let scale = &dep.subresources["scale"];
        assert_eq!(
            (
                scale.group.as_str(),
                scale.version.as_str(),
                scale.kind.as_str()
            ),
            ("autoscaling", "v1", "Scale")
        );
        assert_eq!(scale.verbs, ["get", "patch", "update"]);
        assert_eq!(dep.subresources["status"].kind, "Deployment");

        let ns = s.resource("", "v1", "namespaces").expect("namespaces");
        assert!(!ns.namespaced, "namespaces are cluster-scoped");
        assert!(
            !ns.verbs.iter().any(|v| v == "deletecollection"),
            "kube serves no deletecollection of namespaces"
        );
        assert_eq!(ns.subresources["finalize"].verbs, ["update"]);
        // A connect subresource is named by its methods.
        let exec = &s.resource("", "v1", "pods").expect("pods").subresources["exec"];
        assert_eq!(exec.verbs, ["create", "get"]);
        assert!(s.resource("", "v1", "widgets").is_none());
        assert!(s.resource("apps", "v1", "deployments/scale").is_none());
    }

    #[test]
    fn merge_keys_and_list_map_keys_are_kept_apart() {
        let s = Schema::builtin();
        let ports = field(s, "io.k8s.api.core.v1.Container", "ports");
        assert!(ports.merges());
        assert_eq!(ports.merge_key.as_deref(), Some("containerPort"));
        assert_eq!(ports.list_type, Some(ListType::Map));
        assert_eq!(ports.list_map_keys, ["containerPort", "protocol"]);

        let volumes = field(s, "io.k8s.api.core.v1.PodSpec", "volumes");
        assert!(volumes.merges() && volumes.retains_keys());
        // Tolerations are atomic upstream: replaced, not merged.
        let tolerations = field(s, "io.k8s.api.core.v1.PodSpec", "tolerations");
        assert!(!tolerations.merges());
        assert_eq!(tolerations.list_type, Some(ListType::Atomic));

        let finalizers = field(
            s,
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "finalizers",
        );
        assert!(finalizers.merges());
        assert_eq!(finalizers.merge_key, None);
        assert_eq!(finalizers.list_type, Some(ListType::Set));

        let selector = field(
            s,
            "io.k8s.api.policy.v1.PodDisruptionBudgetSpec",
            "selector",
        );
        assert!(selector.replaces());
        let node_selector = field(s, "io.k8s.api.core.v1.PodSpec", "nodeSelector");
        assert_eq!(node_selector.map_type, Some(MapType::Atomic));
        assert_eq!(
            node_selector.shape,
            Shape::Map(Box::new(Shape::Scalar(Scalar::String)))
        );
        let container = s
            .type_def("io.k8s.api.core.v1.Container")
            .expect("container");
        assert_eq!(container.required(), ["name"]);
    }

    #[test]
    fn scalar_definitions_resolve_to_scalars() {
        let s = Schema::builtin();
        let requests = field(s, "io.k8s.api.core.v1.ResourceRequirements", "limits");
        assert_eq!(
            requests.shape,
            Shape::Map(Box::new(Shape::Scalar(Scalar::Quantity)))
        );
        let created = field(
            s,
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "creationTimestamp",
        );
        assert_eq!(created.shape, Shape::Scalar(Scalar::DateTime));
        let target = field(s, "io.k8s.api.core.v1.ServicePort", "targetPort");
        assert_eq!(target.shape, Shape::Scalar(Scalar::IntOrString));
        let secret = field(s, "io.k8s.api.core.v1.Secret", "data");
        assert_eq!(
            secret.shape,
            Shape::Map(Box::new(Shape::Scalar(Scalar::Byte)))
        );
        let raw = field(s, "io.k8s.api.apps.v1.ControllerRevision", "data");
        assert_eq!(raw.shape, Shape::Untyped);
    }
}

//! The table of resource types kubestore serves, and where each one lives in
//! the etcd keyspace (exactly as a kube-apiserver lays it out, so the same
//! data is visible through the etcd API).
//!
//! Two sources, joined once on first use: what the upstream specification
//! says of a resource (its kind, scope, verbs and subresources: the
//! generated `kube::types` table) and what it does not, written here
//! ([`served::SERVED`]: etcd keys, short names, categories, name rules,
//! generation tracking).
//!
//! Custom types join them at run time: a node serves the built-ins and
//! the custom types its CustomResourceDefinitions define ([`TypeSet`],
//! kept by the watch cache as it applies the revision log, built by
//! `kube::crd`). Every type is `&'static`: a custom type is interned once
//! per distinct definition for the life of the process (`kube::crd`), so
//! requests, caches and controllers hold types without reference counts.

mod custom;
mod served;

use std::sync::LazyLock;

use crate::kube::error::ErrorSubject;
pub use crate::kube::names::NameRule;
use crate::kube::objectmeta::NameScope;
use crate::kube::types::{ResourceDef, Schema, SubresourceDef};
pub use custom::{CustomType, PrinterColumn, ScalePaths};

/// The subresources kubestore serves, where the specification gives a
/// type one (`pods/log`, `pods/exec` and the like are not served).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// `<name>/status`: the status alone.
    Status,
    /// `<name>/scale`: `autoscaling/v1` `Scale`, the replicas of a
    /// workload.
    Scale,
    /// `namespaces/<name>/finalize`: a namespace's `spec.finalizers`.
    Finalize,
}

impl Subresource {
    pub const ALL: [Subresource; 3] = [
        Subresource::Status,
        Subresource::Scale,
        Subresource::Finalize,
    ];

    /// Its path segment.
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
            Subresource::Finalize => "finalize",
        }
    }

    /// The served subresource a path segment names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One served resource type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceType {
    /// API group, "" for core.
    pub group: &'static str,
    pub version: &'static str,
    /// Plural, lower-case name used in URLs.
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// The etcd key prefix, without the trailing slash.
    pub etcd_prefix: &'static str,
    pub name_rule: NameRule,
    /// `metadata.generation` starts at 1 and is bumped when `spec` changes.
    pub tracks_generation: bool,
    /// What the specification says of it: verbs and subresources (for a
    /// custom type, what its CustomResourceDefinition says).
    pub spec: &'static ResourceDef,
    /// What a CustomResourceDefinition says of a custom type beyond the
    /// above (its schema, printer columns, scale paths, ...); `None` for a
    /// built-in.
    pub custom: Option<&'static CustomType>,
}

impl ResourceType {
    /// A served subresource of the type, as the specification describes
    /// it; `None` when the type has none of that name.
    pub fn subresource(&self, sub: Subresource) -> Option<&'static SubresourceDef> {
        self.spec.subresources.get(sub.name())
    }

    /// Whether the type has a `status` subresource, as in kube: its status
    /// is written only through `<name>/status`, an update of the object
    /// itself keeps the stored status, and an update of `/status` changes
    /// nothing but the status.
    pub fn has_status_subresource(&self) -> bool {
        self.subresource(Subresource::Status).is_some()
    }

    /// Whether the type has a `scale` subresource (`autoscaling/v1`
    /// `Scale`: deployments, replica sets, stateful sets, replication
    /// controllers).
    pub fn has_scale_subresource(&self) -> bool {
        self.subresource(Subresource::Scale).is_some()
    }

    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The group-qualified resource as kube prints it in messages:
    /// `configmaps`, `deployments.apps`.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// What metadata validation needs of the type.
    pub fn name_scope(&self) -> NameScope {
        NameScope {
            rule: self.name_rule,
            namespaced: self.namespaced,
        }
    }

    /// The group-qualified kind, for Invalid messages: `ConfigMap`, `Deployment.apps`.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}/{}/{}", self.etcd_prefix, ns, name),
            _ => format!("{}/{}", self.etcd_prefix, name),
        }
    }

    /// The key prefix of a collection: one namespace, or all of the type.
    pub fn collection_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}/{}/", self.etcd_prefix, ns),
            _ => format!("{}/", self.etcd_prefix),
        }
    }

    /// The verbs served for this type, sorted as discovery lists them (the
    /// specification's: namespaces have no `deletecollection`).
    pub fn verbs(&self) -> &'static [String] {
        &self.spec.verbs
    }
}

impl ErrorSubject for ResourceType {
    fn group_resource(&self) -> String {
        ResourceType::group_resource(self)
    }

    fn group_kind(&self) -> String {
        ResourceType::group_kind(self)
    }

    fn group(&self) -> &str {
        self.group
    }
}

/// Every served type: [`served::SERVED`] joined with what the
/// specification says of each (`kube::types`), in its order (caches and controllers
/// index types by it). Built once, on first use.
pub static RESOURCES: LazyLock<Vec<ResourceType>> = LazyLock::new(|| {
    served::SERVED
        .iter()
        .map(|served| {
            // A served type the specification lacks is a build defect,
            // caught by this module's tests, not an input error.
            let spec = Schema::builtin()
                .resource(served.group, served.version, served.plural)
                .unwrap_or_else(|| {
                    panic!(
                        "{}/{}/{} is not in the specification",
                        served.group, served.version, served.plural
                    )
                });
            ResourceType {
                group: served.group,
                version: served.version,
                plural: served.plural,
                singular: served.singular,
                kind: &spec.kind,
                namespaced: spec.namespaced,
                short_names: served.short_names,
                categories: served.categories,
                etcd_prefix: served.etcd_prefix,
                name_rule: served.name_rule,
                tracks_generation: served.tracks_generation,
                spec,
                custom: None,
            }
        })
        .collect()
});

/// The API groups other than core, with their one served version.
pub fn groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// The types of one group/version.
pub fn in_group_version<'a>(
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static ResourceType> + 'a {
    RESOURCES
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

/// Looks a type up by group, version and plural.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The namespace type (namespaced objects must name an existing one).
pub fn namespaces() -> &'static ResourceType {
    &RESOURCES[0]
}

/// The CustomResourceDefinition type.
pub fn custom_resource_definitions() -> &'static ResourceType {
    static CRDS: LazyLock<&'static ResourceType> = LazyLock::new(|| {
        find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("customresourcedefinitions are served")
    });
    *CRDS
}

/// The types one node serves: the built-ins ([`RESOURCES`], in their
/// order), then the custom types its CustomResourceDefinitions define, in
/// the order of the definitions' names and then of their versions. An
/// immutable snapshot: a change of the definitions makes a new set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSet {
    types: Vec<&'static ResourceType>,
}

impl TypeSet {
    /// The built-in types alone.
    pub fn builtin() -> Self {
        Self {
            types: RESOURCES.iter().collect(),
        }
    }

    /// The built-ins and `custom` (each group/version/plural once: a
    /// custom type that names a served one is left out).
    pub fn with_custom(custom: impl IntoIterator<Item = &'static ResourceType>) -> Self {
        let mut set = Self::builtin();
        for rt in custom {
            if set.find(rt.group, rt.version, rt.plural).is_none() {
                set.types.push(rt);
            }
        }
        set
    }

    /// Every type, built-ins first.
    pub fn iter(&self) -> impl Iterator<Item = &'static ResourceType> + '_ {
        self.types.iter().copied()
    }

    /// The custom types.
    pub fn custom(&self) -> impl Iterator<Item = &'static ResourceType> + '_ {
        self.iter().filter(|rt| rt.custom.is_some())
    }

    /// Looks a type up by group, version and plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
        self.iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// The types of one group/version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'static ResourceType> + 'a {
        self.iter()
            .filter(move |r| r.group == group && r.version == version)
    }

    /// The API groups other than core, each with its served versions,
    /// preferred first (kube's version priority: GA before beta before
    /// alpha, higher numbers first), built-in groups first.
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for r in self.iter().filter(|r| !r.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) => {
                    if !versions.contains(&r.version) {
                        versions.push(r.version);
                    }
                }
                None => out.push((r.group, vec![r.version])),
            }
        }
        for (_, versions) in &mut out {
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }
}

/// How kube orders versions by preference (`version.CompareKubeAwareVersionStrings`):
/// `vN` above `vNbetaM` above `vNalphaM`, larger numbers first within each;
/// anything else below them all, by name (reversed, so a larger value is
/// preferred).
pub fn version_priority(version: &str) -> (u8, u64, u64, std::cmp::Reverse<String>) {
    let parse = |v: &str| -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((3, major, 0));
        }
        for (word, rank) in [("beta", 2u8), ("alpha", 1u8)] {
            if let Some(minor) = tail.strip_prefix(word) {
                return Some((rank, major, minor.parse().ok()?));
            }
        }
        None
    };
    match parse(version) {
        Some((rank, major, minor)) => (rank, major, minor, std::cmp::Reverse(String::new())),
        None => (0, 0, 0, std::cmp::Reverse(version.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_kube_apiserver_layout() {
        let cm = find("", "v1", "configmaps").expect("configmaps");
        assert_eq!(
            cm.key(Some("default"), "a"),
            "/registry/configmaps/default/a"
        );
        let svc = find("", "v1", "services").expect("services");
        assert_eq!(
            svc.key(Some("ns"), "web"),
            "/registry/services/specs/ns/web"
        );
        let node = find("", "v1", "nodes").expect("nodes");
        assert_eq!(node.key(None, "n1"), "/registry/minions/n1");
        assert_eq!(
            namespaces().key(None, "default"),
            "/registry/namespaces/default"
        );
        let dep = find("apps", "v1", "deployments").expect("deployments");
        assert_eq!(dep.group_resource(), "deployments.apps");
        assert_eq!(dep.collection_prefix(None), "/registry/deployments/");
    }

    #[test]
    fn every_served_type_is_in_the_specification_with_its_kind_and_scope() {
        assert_eq!(RESOURCES.len(), served::SERVED.len());
        assert_eq!(namespaces().plural, "namespaces");
        let kinds: Vec<(&str, bool)> = [
            ("apps", "replicasets"),
            ("rbac.authorization.k8s.io", "clusterrolebindings"),
            ("", "persistentvolumes"),
            ("networking.k8s.io", "ingresses"),
            ("autoscaling", "horizontalpodautoscalers"),
        ]
        .iter()
        .map(|(g, p)| {
            let v = if *g == "autoscaling" { "v2" } else { "v1" };
            let rt = find(g, v, p).unwrap_or_else(|| panic!("{p}"));
            (rt.kind, rt.namespaced)
        })
        .collect();
        assert_eq!(
            kinds,
            [
                ("ReplicaSet", true),
                ("ClusterRoleBinding", false),
                ("PersistentVolume", false),
                ("Ingress", true),
                ("HorizontalPodAutoscaler", true),
            ]
        );
        // Short names pick one type: kubectl refuses an ambiguous one.
        let mut short: Vec<&str> = RESOURCES
            .iter()
            .flat_map(|r| r.short_names.iter().copied())
            .collect();
        let n = short.len();
        short.sort_unstable();
        short.dedup();
        assert_eq!(short.len(), n, "a short name used twice");
    }

    #[test]
    fn subresources_are_the_specifications() {
        let scaled: Vec<&str> = RESOURCES
            .iter()
            .filter(|r| r.has_scale_subresource())
            .map(|r| r.plural)
            .collect();
        assert_eq!(
            scaled,
            [
                "replicationcontrollers",
                "deployments",
                "replicasets",
                "statefulsets"
            ]
        );
        let dep = find("apps", "v1", "deployments").expect("deployments");
        let scale = dep.subresource(Subresource::Scale).expect("scale");
        assert_eq!(
            (scale.group.as_str(), scale.kind.as_str()),
            ("autoscaling", "Scale")
        );
        assert!(dep.has_status_subresource());
        let cm = find("", "v1", "configmaps").expect("configmaps");
        assert!(!cm.has_status_subresource() && !cm.has_scale_subresource());
        assert!(find("apps", "v1", "daemonsets")
            .is_some_and(|d| d.has_status_subresource() && !d.has_scale_subresource()));
        assert!(namespaces().subresource(Subresource::Finalize).is_some());
        assert!(dep.subresource(Subresource::Finalize).is_none());
        assert!(!namespaces().verbs().iter().any(|v| v == "deletecollection"));
        assert_eq!(Subresource::from_name("scale"), Some(Subresource::Scale));
        assert_eq!(Subresource::from_name("log"), None, "not served");
    }

    #[test]
    fn new_types_live_where_the_kube_apiserver_keeps_them() {
        for (group, plural, key) in [
            ("", "replicationcontrollers", "/registry/controllers/ns/x"),
            (
                "",
                "persistentvolumeclaims",
                "/registry/persistentvolumeclaims/ns/x",
            ),
            ("", "persistentvolumes", "/registry/persistentvolumes/x"),
            ("", "limitranges", "/registry/limitranges/ns/x"),
            ("", "resourcequotas", "/registry/resourcequotas/ns/x"),
            ("apps", "statefulsets", "/registry/statefulsets/ns/x"),
            ("apps", "daemonsets", "/registry/daemonsets/ns/x"),
            ("batch", "cronjobs", "/registry/cronjobs/ns/x"),
            ("networking.k8s.io", "ingresses", "/registry/ingress/ns/x"),
            (
                "networking.k8s.io",
                "networkpolicies",
                "/registry/networkpolicies/ns/x",
            ),
            (
                "policy",
                "poddisruptionbudgets",
                "/registry/poddisruptionbudgets/ns/x",
            ),
            (
                "rbac.authorization.k8s.io",
                "clusterroles",
                "/registry/clusterroles/x",
            ),
            (
                "storage.k8s.io",
                "storageclasses",
                "/registry/storageclasses/x",
            ),
        ] {
            let version = RESOURCES
                .iter()
                .find(|r| r.group == group && r.plural == plural)
                .map(|r| r.version)
                .unwrap_or_else(|| panic!("{plural}"));
            let rt = find(group, version, plural).expect("served");
            assert_eq!(rt.key(Some("ns"), "x"), key);
        }
    }

    #[test]
    fn no_type_prefix_contains_another_types_objects() {
        // `/registry/services/specs/` and `/registry/services/endpoints/` must not
        // overlap, nor any prefix be a prefix of another type's collection.
        for a in RESOURCES.iter() {
            for b in RESOURCES.iter() {
                if a != b {
                    assert!(
                        !b.collection_prefix(None)
                            .starts_with(&a.collection_prefix(None)),
                        "{} vs {}",
                        a.plural,
                        b.plural
                    );
                }
            }
        }
    }
}

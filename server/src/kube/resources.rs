//! The table of resource types kubestore serves, and where each one lives in
//! the etcd keyspace (exactly as a kube-apiserver lays it out, so the same
//! data is visible through the etcd API).

/// How names of a type are validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain: most types.
    Subdomain,
    /// RFC 1123 label: namespaces.
    Label,
    /// RFC 1035 label: services.
    Rfc1035Label,
    /// Any name that is a valid path segment (events, nodes use subdomains
    /// in kube too; kept for types with looser rules).
    PathSegment,
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
}

impl ResourceType {
    /// Whether the type has a `status` subresource, as in kube: its status
    /// is written only through `<name>/status`, an update of the object
    /// itself keeps the stored status, and an update of `/status` changes
    /// nothing but the status.
    pub fn has_status_subresource(&self) -> bool {
        matches!(
            (self.group, self.plural),
            ("", "pods" | "nodes" | "namespaces" | "services") | ("apps", "deployments")
        )
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

    /// The verbs served for this type, sorted as discovery lists them.
    pub fn verbs(&self) -> &'static [&'static str] {
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
        ]
    }
}

macro_rules! resource {
    ($group:expr, $version:expr, $plural:expr, $singular:expr, $kind:expr, $namespaced:expr,
     $short:expr, $cats:expr, $prefix:expr, $rule:expr, $gen:expr) => {
        ResourceType {
            group: $group,
            version: $version,
            plural: $plural,
            singular: $singular,
            kind: $kind,
            namespaced: $namespaced,
            short_names: $short,
            categories: $cats,
            etcd_prefix: $prefix,
            name_rule: $rule,
            tracks_generation: $gen,
        }
    };
}

use NameRule::*;

/// Every served type. Keys follow the kube-apiserver's etcd layout.
pub static RESOURCES: &[ResourceType] = &[
    resource!(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        false,
        &["ns"],
        &[],
        "/registry/namespaces",
        Label,
        false
    ),
    resource!(
        "",
        "v1",
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        &["cm"],
        &[],
        "/registry/configmaps",
        Subdomain,
        false
    ),
    resource!(
        "",
        "v1",
        "secrets",
        "secret",
        "Secret",
        true,
        &[],
        &[],
        "/registry/secrets",
        Subdomain,
        false
    ),
    resource!(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        true,
        &["po"],
        &["all"],
        "/registry/pods",
        Subdomain,
        true
    ),
    resource!(
        "",
        "v1",
        "services",
        "service",
        "Service",
        true,
        &["svc"],
        &["all"],
        "/registry/services/specs",
        Rfc1035Label,
        false
    ),
    resource!(
        "",
        "v1",
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        true,
        &["sa"],
        &[],
        "/registry/serviceaccounts",
        Subdomain,
        false
    ),
    resource!(
        "",
        "v1",
        "endpoints",
        "endpoints",
        "Endpoints",
        true,
        &["ep"],
        &[],
        "/registry/services/endpoints",
        Subdomain,
        false
    ),
    resource!(
        "",
        "v1",
        "events",
        "event",
        "Event",
        true,
        &["ev"],
        &[],
        "/registry/events",
        PathSegment,
        false
    ),
    resource!(
        "",
        "v1",
        "nodes",
        "node",
        "Node",
        false,
        &["no"],
        &[],
        "/registry/minions",
        Subdomain,
        false
    ),
    resource!(
        "apps",
        "v1",
        "deployments",
        "deployment",
        "Deployment",
        true,
        &["deploy"],
        &["all"],
        "/registry/deployments",
        Subdomain,
        true
    ),
    resource!(
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        true,
        &[],
        &[],
        "/registry/leases",
        Subdomain,
        false
    ),
];

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
    fn no_type_prefix_contains_another_types_objects() {
        // `/registry/services/specs/` and `/registry/services/endpoints/` must not
        // overlap, nor any prefix be a prefix of another type's collection.
        for a in RESOURCES {
            for b in RESOURCES {
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

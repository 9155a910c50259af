//! Path dispatch of the resource API: what a path under `/api` or `/apis`
//! names (discovery documents, or a resource, collection or served
//! subresource of a served type: `<name>/status`, `<name>/scale`,
//! `namespaces/<name>/finalize`, where the specification gives the type
//! one), or `404`. Nothing here reads a query, a body or the store.

use crate::http::status::ApiError;
use crate::kube::resources::{ResourceType, Subresource, TypeSet};

/// A resource URL, parsed.
#[derive(Debug)]
pub struct Target {
    pub rt: &'static ResourceType,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `<name>/<subresource>`: one of the type's served subresources.
    pub subresource: Option<Subresource>,
}

/// The `404` of a path that names no served resource.
pub fn no_resource() -> ApiError {
    ApiError::NoSuchResource
}

/// Parses `<resource>[/<name>[/<subresource>]]` or
/// `namespaces/<ns>/<resource>[/<name>[/<subresource>]]`
/// (`namespaces/<name>/status` is the namespace's status, as in kube).
fn parse_target(
    types: &TypeSet,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Target, ApiError> {
    let (rest, subresource) = match rest {
        [path @ .., last] if path.len() == 2 || path.len() == 4 => {
            match Subresource::from_name(last) {
                Some(sub) => (path, Some(sub)),
                None => (rest, None),
            }
        }
        _ => (rest, None),
    };
    let find = |plural: &str| types.find(group, version, plural).ok_or_else(no_resource);
    let (rt, namespace, name) = match rest {
        [plural] => (find(plural)?, None, None),
        [plural, name] => {
            let rt = find(plural)?;
            if rt.namespaced {
                return Err(no_resource());
            }
            (rt, None, Some(*name))
        }
        ["namespaces", ns, plural] => (find(plural)?, Some(*ns), None),
        ["namespaces", ns, plural, name] => (find(plural)?, Some(*ns), Some(*name)),
        _ => return Err(no_resource()),
    };
    if namespace.is_some() && !rt.namespaced {
        return Err(no_resource());
    }
    if name.is_some_and(str::is_empty) || namespace.is_some_and(str::is_empty) {
        return Err(no_resource());
    }
    if subresource.is_some_and(|sub| name.is_none() || rt.subresource(sub).is_none()) {
        return Err(no_resource());
    }
    Ok(Target {
        rt,
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        subresource,
    })
}
/// What a path under `/api` or `/apis` names.
#[derive(Debug)]
pub enum Route<'p> {
    /// `/api`: the core group's versions.
    ApiVersions,
    /// `/apis`: every group.
    GroupList,
    /// `/apis/<group>`.
    Group(&'p str),
    /// `/api/v1` or `/apis/<group>/<version>`: the group version's resources.
    ResourceList(&'p str, &'p str),
    /// A resource, collection or subresource.
    Resource(Target),
}

/// Resolves a request path (trailing slashes ignored) to what it names
/// among the served `types`; anything else is `404` (never a panic,
/// whatever the path).
pub fn resolve<'p>(path: &'p str, types: &TypeSet) -> Result<Route<'p>, ApiError> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    match segments.as_slice() {
        ["api"] => Ok(Route::ApiVersions),
        ["api", "v1"] => Ok(Route::ResourceList("", "v1")),
        ["apis"] => Ok(Route::GroupList),
        ["apis", group] => Ok(Route::Group(group)),
        ["apis", group, version] => Ok(Route::ResourceList(group, version)),
        ["api", "v1", rest @ ..] => parse_target(types, "", "v1", rest).map(Route::Resource),
        ["apis", group, version, rest @ ..] => {
            parse_target(types, group, version, rest).map(Route::Resource)
        }
        _ => Err(no_resource()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_as_kube_defines_them() {
        let t = parse_target(
            &TypeSet::builtin(),
            "",
            "v1",
            &["namespaces", "d", "configmaps", "a"],
        )
        .expect("object path");
        assert_eq!(
            (t.rt.plural, t.namespace.as_deref(), t.name.as_deref()),
            ("configmaps", Some("d"), Some("a"))
        );
        let t =
            parse_target(&TypeSet::builtin(), "", "v1", &["configmaps"]).expect("all namespaces");
        assert_eq!((t.namespace, t.name), (None, None));
        let t = parse_target(&TypeSet::builtin(), "", "v1", &["namespaces", "d"])
            .expect("a namespace object");
        assert_eq!((t.rt.plural, t.name.as_deref()), ("namespaces", Some("d")));
        assert!(
            parse_target(&TypeSet::builtin(), "", "v1", &["configmaps", "a"]).is_err(),
            "namespaced object without namespace"
        );
        assert!(
            parse_target(&TypeSet::builtin(), "", "v1", &["namespaces", "d", "nodes"]).is_err(),
            "cluster-scoped under a namespace"
        );
        assert!(parse_target(&TypeSet::builtin(), "", "v1", &["widgets"]).is_err());
    }

    /// What a path names: plural, namespace, name, subresource.
    type Named = (
        &'static str,
        Option<String>,
        Option<String>,
        Option<Subresource>,
    );

    fn sub(group: &str, rest: &[&str]) -> Result<Named, ()> {
        let version = if group == "autoscaling" { "v2" } else { "v1" };
        parse_target(&TypeSet::builtin(), group, version, rest)
            .map(|t| (t.rt.plural, t.namespace, t.name, t.subresource))
            .map_err(|_| ())
    }

    #[test]
    fn subresources_parse_where_the_type_has_them() {
        let scale = sub("apps", &["namespaces", "d", "deployments", "x", "scale"]);
        assert_eq!(
            scale,
            Ok((
                "deployments",
                Some("d".into()),
                Some("x".into()),
                Some(Subresource::Scale)
            ))
        );
        for (group, plural) in [
            ("apps", "replicasets"),
            ("apps", "statefulsets"),
            ("", "replicationcontrollers"),
        ] {
            assert!(
                sub(group, &["namespaces", "d", plural, "x", "scale"]).is_ok(),
                "{plural}/scale"
            );
        }
        assert_eq!(
            sub("apps", &["namespaces", "d", "daemonsets", "x", "status"]).map(|t| t.3),
            Ok(Some(Subresource::Status))
        );
        // Only where the specification has them: no scale of a daemon set
        // or a config map, no status of a config map, nothing unknown.
        assert!(sub("apps", &["namespaces", "d", "daemonsets", "x", "scale"]).is_err());
        assert!(sub("", &["namespaces", "d", "configmaps", "x", "scale"]).is_err());
        assert!(sub("", &["namespaces", "d", "configmaps", "x", "status"]).is_err());
        assert!(sub("", &["namespaces", "d", "pods", "x", "log"]).is_err());
        // `.../deployments/scale` is a deployment named `scale`; a
        // namespaced type's scale needs its namespace.
        assert_eq!(
            sub("apps", &["namespaces", "d", "deployments", "scale"]).map(|t| (t.2, t.3)),
            Ok((Some("scale".into()), None))
        );
        assert!(sub("apps", &["deployments", "x", "scale"]).is_err());
        // A namespace's own subresources: `namespaces/<name>/<sub>`.
        assert_eq!(
            sub("", &["namespaces", "team", "finalize"]),
            Ok((
                "namespaces",
                None,
                Some("team".into()),
                Some(Subresource::Finalize)
            ))
        );
        assert_eq!(
            sub("", &["namespaces", "team", "status"]).map(|t| t.3),
            Ok(Some(Subresource::Status))
        );
        assert!(sub("", &["namespaces", "team", "scale"]).is_err());
        assert!(sub("", &["nodes", "n1", "finalize"]).is_err());
        assert_eq!(
            sub("", &["nodes", "n1", "status"]).map(|t| t.3),
            Ok(Some(Subresource::Status))
        );
    }
}

/// Property tests: whatever path a client sends, it resolves or is a
/// `404`, never a panic.
#[cfg(test)]
mod proptests {
    use axum::http::StatusCode;
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz;

    /// Path segments: the ones the router knows, and anything else.
    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => proptest::sample::select(&[
                "api", "apis", "v1", "apps", "coordination.k8s.io", "namespaces",
                "default", "configmaps", "pods", "deployments", "nodes", "status",
                "scale", "finalize", "replicasets", "log", "", "a",
            ][..])
            .prop_map(str::to_string),
            1 => fuzz::text().prop_map(|s| s.replace('/', "")),
        ]
    }

    /// A path under `/api` or `/apis` (or not), maybe with a trailing slash.
    fn path() -> impl Strategy<Value = String> {
        (
            prop_oneof![Just("/api"), Just("/apis"), Just("")],
            proptest::collection::vec(segment(), 0..7),
            any::<bool>(),
        )
            .prop_map(|(root, segs, slash)| {
                let mut p = root.to_string();
                for s in segs {
                    p.push('/');
                    p.push_str(&s);
                }
                if slash {
                    p.push('/');
                }
                p
            })
    }

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_path_resolves_or_is_a_404(path in path()) {
            match resolve(&path, &TypeSet::builtin()) {
                Ok(Route::Resource(t)) => {
                    prop_assert!(t.name.as_deref() != Some(""));
                    prop_assert!(t.namespace.as_deref() != Some(""));
                    prop_assert!(t.subresource.is_none() || t.name.is_some());
                    prop_assert!(t.subresource.is_none_or(|s| t.rt.subresource(s).is_some()));
                    prop_assert!(t.namespace.is_none() || t.rt.namespaced);
                }
                Ok(_) => {}
                Err(e) => prop_assert_eq!(e.code(), StatusCode::NOT_FOUND),
            }
            // A trailing slash names the same thing.
            let with_slash = format!("{path}/");
            prop_assert_eq!(
                format!("{:?}", resolve(&path, &TypeSet::builtin()).map_err(|e| e.to_string())),
                format!("{:?}", resolve(&with_slash, &TypeSet::builtin()).map_err(|e| e.to_string()))
            );
        }
    }
}

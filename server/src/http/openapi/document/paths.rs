//! Every path of the served types and the operations on each, in one
//! form both document versions render ([`PathItem`], [`Op`]): a
//! collection, every namespace's objects, one object, each served
//! subresource, with kube's operation ids, tags, actions, parameters and
//! responses.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::super::data::{self, Data};
use super::super::served::{Gvk, ServedApi};
use super::gv_key;

/// kube's operation-id and tag spelling of a group version:
/// (`CoreV1`, `core_v1`), (`RbacAuthorizationV1`, `rbacAuthorization_v1`).
pub(super) fn gv_names(group: &str, version: &str) -> (String, String) {
    let trimmed = group.strip_suffix(".k8s.io").unwrap_or(group);
    let trimmed = if trimmed.is_empty() { "core" } else { trimmed };
    let camel: String = trimmed.split('.').map(capitalize).collect();
    let mut tag = camel.clone();
    if let Some(first) = tag.get(..1) {
        tag.replace_range(..1, &first.to_ascii_lowercase());
    }
    (
        format!("{camel}{}", capitalize(version)),
        format!("{tag}_{version}"),
    )
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The request body of an operation.
#[derive(Debug, Clone)]
pub(super) enum Body {
    /// The object itself (a create or replace): its schema.
    Object(String),
    /// `DeleteOptions`.
    Delete,
    /// A patch, in any of `PATCH_TYPES` (without strategic merge
    /// patch for a custom type: kubectl then sends a merge patch).
    Patch { strategic: bool },
}

/// One operation, in a form both document versions render.
#[derive(Debug)]
pub(super) struct Op {
    pub(super) method: &'static str,
    pub(super) action: &'static str,
    pub(super) id: String,
    pub(super) description: String,
    pub(super) tag: String,
    pub(super) gvk: Gvk,
    /// The swagger 2.0 query parameters (of [`Data::parameters`]).
    pub(super) query: &'static [Value],
    pub(super) body: Option<Body>,
    /// Status code, its description, and the response's schema.
    pub(super) responses: Vec<(&'static str, &'static str, String)>,
}

/// One path: its path-level parameters and operations.
#[derive(Debug)]
pub(super) struct PathItem {
    pub(super) path: String,
    /// Swagger 2.0 parameter objects (`name`, `namespace`, `pretty`).
    pub(super) params: Vec<Value>,
    pub(super) ops: Vec<Op>,
}

fn path_param(name: &str, description: String) -> Value {
    json!({"name": name, "in": "path", "required": true, "type": "string",
           "uniqueItems": true, "description": description})
}

fn namespace_param() -> Value {
    path_param(
        "namespace",
        "object name and auth scope, such as for teams and projects".into(),
    )
}

/// Every path of one served type.
fn paths_of(api: &ServedApi) -> Vec<PathItem> {
    let data = Data::get();
    let (gv_camel, tag) = gv_names(&api.group, &api.version);
    let prefix = format!("/{}", gv_key(&api.group, &api.version));
    let ns = if api.namespaced { "Namespaced" } else { "" };
    let kind = &api.kind;
    let gvk = api.gvk();
    let mut scope_params = Vec::new();
    let scope = if api.namespaced {
        scope_params.push(namespace_param());
        format!("{prefix}/namespaces/{{namespace}}/{}", api.plural)
    } else {
        format!("{prefix}/{}", api.plural)
    };
    let pretty = data.parameters("path");
    let with_pretty = |mut params: Vec<Value>| {
        params.extend(pretty.iter().cloned());
        params
    };
    let op = |method, action, id: String, description: String, body, responses| Op {
        method,
        action,
        id,
        description,
        tag: tag.clone(),
        gvk: gvk.clone(),
        query: data.parameters(action),
        body,
        responses,
    };
    let ok = |schema: &str| vec![("200", "OK", schema.to_string())];
    let written = |schema: &str| {
        vec![
            ("200", "OK", schema.to_string()),
            ("201", "Created", schema.to_string()),
        ]
    };
    let mut out = Vec::new();

    // The collection.
    let mut ops = Vec::new();
    if api.serves("list") {
        ops.push(op(
            "get",
            "list",
            format!("list{gv_camel}{ns}{kind}"),
            format!("list or watch objects of kind {kind}"),
            None,
            ok(&api.list),
        ));
    }
    if api.serves("create") {
        let mut responses = written(&api.root);
        responses.push(("202", "Accepted", api.root.clone()));
        ops.push(op(
            "post",
            "post",
            format!("create{gv_camel}{ns}{kind}"),
            format!("create a {kind}"),
            Some(Body::Object(api.root.clone())),
            responses,
        ));
    }
    if api.serves("deletecollection") {
        ops.push(op(
            "delete",
            "deletecollection",
            format!("delete{gv_camel}Collection{ns}{kind}"),
            format!("delete collection of {kind}"),
            Some(Body::Delete),
            ok(data::STATUS),
        ));
    }
    if !ops.is_empty() {
        out.push(PathItem {
            path: scope.clone(),
            params: with_pretty(scope_params.clone()),
            ops,
        });
    }

    // Every namespace's objects.
    if api.namespaced && api.serves("list") {
        out.push(PathItem {
            path: format!("{prefix}/{}", api.plural),
            params: with_pretty(Vec::new()),
            ops: vec![op(
                "get",
                "list",
                format!("list{gv_camel}{kind}ForAllNamespaces"),
                format!("list or watch objects of kind {kind}"),
                None,
                ok(&api.list),
            )],
        });
    }

    // One object.
    let mut object_params = vec![path_param("name", format!("name of the {kind}"))];
    object_params.extend(scope_params.iter().cloned());
    let object_params = with_pretty(object_params);
    let mut ops = Vec::new();
    if api.serves("get") {
        ops.push(op(
            "get",
            "get",
            format!("read{gv_camel}{ns}{kind}"),
            format!("read the specified {kind}"),
            None,
            ok(&api.root),
        ));
    }
    if api.serves("update") {
        ops.push(op(
            "put",
            "put",
            format!("replace{gv_camel}{ns}{kind}"),
            format!("replace the specified {kind}"),
            Some(Body::Object(api.root.clone())),
            written(&api.root),
        ));
    }
    if api.serves("patch") {
        ops.push(op(
            "patch",
            "patch",
            format!("patch{gv_camel}{ns}{kind}"),
            format!("partially update the specified {kind}"),
            Some(Body::Patch {
                strategic: api.strategic,
            }),
            written(&api.root),
        ));
    }
    if api.serves("delete") {
        ops.push(op(
            "delete",
            "delete",
            format!("delete{gv_camel}{ns}{kind}"),
            format!("delete a {kind}"),
            Some(Body::Delete),
            vec![
                ("200", "OK", data::STATUS.to_string()),
                ("202", "Accepted", data::STATUS.to_string()),
            ],
        ));
    }
    if !ops.is_empty() {
        out.push(PathItem {
            path: format!("{scope}/{{name}}"),
            params: object_params.clone(),
            ops,
        });
    }

    // Served subresources, with the kind each reads and writes.
    for sub in &api.subresources {
        let word = capitalize(&sub.name);
        let has = |v: &str| sub.verbs.iter().any(|x| x == v);
        let sub_op = |method, action, verb: &str, description: String, body, responses| Op {
            method,
            action,
            id: format!("{verb}{gv_camel}{ns}{kind}{word}"),
            description,
            tag: tag.clone(),
            gvk: sub.gvk.clone(),
            query: data.parameters(action),
            body,
            responses,
        };
        let mut ops = Vec::new();
        if has("get") {
            ops.push(sub_op(
                "get",
                "get",
                "read",
                format!("read {} of the specified {kind}", sub.name),
                None,
                ok(&sub.schema),
            ));
        }
        if has("update") {
            ops.push(sub_op(
                "put",
                "put",
                "replace",
                format!("replace {} of the specified {kind}", sub.name),
                Some(Body::Object(sub.schema.clone())),
                written(&sub.schema),
            ));
        }
        if has("patch") {
            ops.push(sub_op(
                "patch",
                "patch",
                "patch",
                format!("partially update {} of the specified {kind}", sub.name),
                Some(Body::Patch {
                    strategic: api.strategic,
                }),
                written(&sub.schema),
            ));
        }
        if !ops.is_empty() {
            out.push(PathItem {
                path: format!("{scope}/{{name}}/{}", sub.name),
                params: object_params.clone(),
                ops,
            });
        }
    }
    out
}

/// The group version's resource list (`GET /apis/apps/v1/`).
fn resources_path(group: &str, version: &str) -> PathItem {
    let (gv_camel, tag) = gv_names(group, version);
    PathItem {
        path: format!("/{}/", gv_key(group, version)),
        params: Vec::new(),
        ops: vec![Op {
            method: "get",
            action: "",
            id: format!("get{gv_camel}APIResources"),
            description: "get available resources".into(),
            tag,
            gvk: Gvk {
                group: String::new(),
                version: String::new(),
                kind: String::new(),
            },
            query: &[],
            body: None,
            responses: vec![("200", "OK", data::API_RESOURCE_LIST.to_string())],
        }],
    }
}

/// Every path of a set of types (one group version's, or all), the group
/// versions' resource lists first.
pub(super) fn all_paths(apis: &[&ServedApi]) -> Vec<PathItem> {
    let mut gvs = BTreeSet::new();
    for api in apis {
        gvs.insert((api.group.as_str(), api.version.as_str()));
    }
    let mut paths: Vec<PathItem> = gvs.into_iter().map(|(g, v)| resources_path(g, v)).collect();
    paths.extend(apis.iter().flat_map(|api| paths_of(api)));
    paths
}

//! The documents built from the served table: every group version
//! indexed, kube's operations and extensions, every reference resolving,
//! the protobuf form decoding back, hashes following content.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use prost::Message;
use serde_json::{json, Value};

use super::paths::gv_names;
use super::*;
use crate::http::openapi::served::{served, ServedApi};
use crate::kube::resources::{TypeSet, RESOURCES};

fn v3(docs: &Documents, key: &str) -> Value {
    let doc = docs
        .groups
        .get(key)
        .unwrap_or_else(|| panic!("{key} not indexed"));
    serde_json::from_slice(&doc.body).expect("v3 document parses")
}

fn all_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => all_refs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| all_refs(x, out)),
        _ => {}
    }
}

fn object_path(rt: &crate::kube::resources::ResourceType) -> String {
    let prefix = format!("/{}", gv_key(rt.group, rt.version));
    if rt.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
    } else {
        format!("{prefix}/{}/{{name}}", rt.plural)
    }
}

#[test]
fn the_index_covers_every_served_group_version_and_nothing_else() {
    let docs = Documents::build(served(&TypeSet::builtin()));
    let expected: BTreeSet<String> = RESOURCES
        .iter()
        .map(|rt| gv_key(rt.group, rt.version))
        .collect();
    let indexed: BTreeSet<String> = docs.groups.keys().cloned().collect();
    assert_eq!(indexed, expected);
    assert!(indexed.contains("api/v1") && indexed.contains("apis/apps/v1"));
    for doc in docs.groups.values() {
        assert_eq!(doc.hash.len(), 128, "a SHA-512 in hex");
        assert!(doc
            .hash
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
    }
}

#[test]
fn every_served_kinds_patch_carries_its_gvk_and_field_validation() {
    let docs = Documents::build(served(&TypeSet::builtin()));
    for rt in RESOURCES.iter() {
        let doc = v3(&docs, &gv_key(rt.group, rt.version));
        let path = &doc["paths"][object_path(rt)];
        assert!(path.is_object(), "{} has no object path", rt.kind);
        if !rt.verbs().iter().any(|v| v == "patch") {
            assert!(path.get("patch").is_none());
            continue;
        }
        let patch = &path["patch"];
        assert_eq!(patch["x-kubernetes-action"], "patch", "{}", rt.kind);
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": rt.group, "version": rt.version, "kind": rt.kind}),
            "{}",
            rt.kind
        );
        let params: Vec<&str> = patch["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["in"] == "query")
            .filter_map(|p| p["name"].as_str())
            .collect();
        for name in ["fieldValidation", "dryRun", "fieldManager", "force"] {
            assert!(params.contains(&name), "{} patch lacks {name}", rt.kind);
        }
        let content = patch["requestBody"]["content"]
            .as_object()
            .expect("patch body");
        for media in PATCH_TYPES {
            assert!(
                content.contains_key(media),
                "{} patch lacks {media}",
                rt.kind
            );
        }
        // The kind's schema carries its GVK, as kubectl explain finds it.
        let root = doc["components"]["schemas"]
            .as_object()
            .and_then(|s| {
                s.values().find(|s| {
                    s["x-kubernetes-group-version-kind"]
                        .as_array()
                        .is_some_and(|g| {
                            g.contains(
                                &json!({"group": rt.group, "version": rt.version, "kind": rt.kind}),
                            )
                        })
                })
            })
            .unwrap_or_else(|| panic!("no schema of {}", rt.kind));
        assert!(root["properties"]["metadata"].is_object());
    }
    // Subresources: the scale of a deployment reads and writes a Scale.
    let apps = v3(&docs, "apis/apps/v1");
    let scale = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"];
    assert_eq!(
        scale["patch"]["x-kubernetes-group-version-kind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(scale["get"]["x-kubernetes-action"], "get");
    let core = v3(&docs, "api/v1");
    assert!(core["paths"]["/api/v1/namespaces/{name}/finalize"]["put"].is_object());
    assert!(
        core["paths"]["/api/v1/namespaces"]["delete"].is_null(),
        "no deletecollection"
    );
    let list = &core["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"];
    assert_eq!(list["x-kubernetes-action"], "list");
    assert!(list["parameters"]
        .as_array()
        .is_some_and(|p| p.iter().any(|p| p["name"] == "watch")));
}

#[test]
fn v3_schemas_keep_descriptions_and_extensions_with_refs_as_all_of() {
    let docs = Documents::build(served(&TypeSet::builtin()));
    let apps = v3(&docs, "apis/apps/v1");
    let schemas = &apps["components"]["schemas"];
    let spec = &schemas["io.k8s.api.apps.v1.DeploymentSpec"];
    assert!(spec["properties"]["replicas"]["description"]
        .as_str()
        .is_some_and(|d| d.starts_with("Number of desired pods")));
    assert_eq!(
        spec["properties"]["template"]["allOf"],
        json!([{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"}])
    );
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    for meta in [
        "Status",
        "DeleteOptions",
        "WatchEvent",
        "APIResourceList",
        "Patch",
    ] {
        let name = format!("io.k8s.apimachinery.pkg.apis.meta.v1.{meta}");
        assert!(schemas.get(&name).is_some(), "{name}");
    }
}

#[test]
fn every_reference_resolves_in_v3_and_v2() {
    let docs = Documents::build(served(&TypeSet::builtin()));
    for (key, doc) in &docs.groups {
        let doc: Value = serde_json::from_slice(&doc.body).expect("parses");
        let mut refs = Vec::new();
        all_refs(&doc, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{key}: {r} is not a component reference"));
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "{key}: {r} does not resolve"
            );
        }
    }
    let v2: Value = serde_json::from_slice(&docs.v2().body).expect("v2 parses");
    assert_eq!(v2["swagger"], "2.0");
    let mut refs = Vec::new();
    all_refs(&v2, &mut refs);
    for r in refs {
        let name = r
            .strip_prefix("#/definitions/")
            .unwrap_or_else(|| panic!("v2: {r} is not a definitions reference"));
        assert!(
            v2["definitions"].get(name).is_some(),
            "v2: {r} does not resolve"
        );
    }
    // Every served kind's PATCH is in v2 too, with its inline
    // fieldValidation (client-go's v2 query-parameter check).
    for rt in RESOURCES
        .iter()
        .filter(|rt| rt.verbs().iter().any(|v| v == "patch"))
    {
        let patch = &v2["paths"][object_path(rt)]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], rt.kind);
        assert!(patch["parameters"].as_array().is_some_and(|p| p
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")));
    }
}

#[test]
fn the_protobuf_document_decodes_back_with_every_definition() {
    use kubestore_proto::openapi_v2 as pb;
    let docs = Documents::build(served(&TypeSet::builtin()));
    let v2: Value = serde_json::from_slice(&docs.v2().body).expect("v2 parses");
    let decoded = pb::Document::decode(docs.v2_protobuf().as_ref()).expect("decodes");
    assert_eq!(decoded.swagger, "2.0");
    let definitions = decoded
        .definitions
        .expect("definitions")
        .additional_properties;
    assert_eq!(
        definitions.len(),
        v2["definitions"].as_object().map_or(0, |d| d.len())
    );
    let paths = decoded.paths.expect("paths").path;
    assert_eq!(paths.len(), v2["paths"].as_object().map_or(0, |p| p.len()));
    // A PATCH operation as client-go reads it: the GVK extension's YAML
    // and the inline fieldValidation query parameter.
    let deployment = paths
        .iter()
        .find(|p| p.name == "/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        .and_then(|p| p.value.as_ref())
        .and_then(|p| p.patch.as_ref())
        .expect("deployment patch");
    let gvk = deployment
        .vendor_extension
        .iter()
        .find(|e| e.name == "x-kubernetes-group-version-kind")
        .and_then(|e| e.value.as_ref())
        .expect("gvk extension");
    let gvk: Value = serde_json::from_str(&gvk.yaml).expect("json is yaml");
    assert_eq!(
        gvk,
        json!({"group": "apps", "version": "v1", "kind": "Deployment"})
    );
    let has_field_validation = deployment.parameters.iter().any(|p| {
        matches!(&p.oneof, Some(pb::parameters_item::Oneof::Parameter(pb::Parameter {
            oneof: Some(pb::parameter::Oneof::NonBodyParameter(pb::NonBodyParameter {
                oneof: Some(pb::non_body_parameter::Oneof::QueryParameterSubSchema(q)),
            })),
        })) if q.name == "fieldValidation")
    });
    assert!(has_field_validation);
    // A schema keeps its type, description, references and extensions.
    let spec = definitions
        .iter()
        .find(|d| d.name == "io.k8s.api.apps.v1.DeploymentSpec")
        .and_then(|d| d.value.as_ref())
        .expect("DeploymentSpec");
    assert_eq!(
        spec.r#type.as_ref().map(|t| t.value.clone()),
        Some(vec!["object".to_string()])
    );
    let props = &spec
        .properties
        .as_ref()
        .expect("properties")
        .additional_properties;
    let template = props
        .iter()
        .find(|p| p.name == "template")
        .and_then(|p| p.value.as_ref())
        .expect("template");
    assert_eq!(
        template.r#ref,
        "#/definitions/io.k8s.api.core.v1.PodTemplateSpec"
    );
}

/// A custom resource as the CRD registry will add one: its own schemas,
/// referencing the built-in `ObjectMeta`.
fn crontab(revision: &str) -> ServedApi {
    let mut schemas = BTreeMap::new();
    schemas.insert(
        "com.example.stable.v1.CronTab".to_string(),
        json!({"type": "object",
               "x-kubernetes-group-version-kind": [{"group": "stable.example.com", "version": "v1", "kind": "CronTab"}],
               "properties": {
                   "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                   "spec": {"type": "object", "properties": {"cronSpec": {"type": "string", "description": revision}}}}}),
    );
    schemas.insert(
        "com.example.stable.v1.CronTabList".to_string(),
        json!({"type": "object", "properties": {
            "items": {"type": "array", "items": {"$ref": "#/definitions/com.example.stable.v1.CronTab"}},
            "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"}}}),
    );
    ServedApi {
        group: "stable.example.com".into(),
        version: "v1".into(),
        plural: "crontabs".into(),
        kind: "CronTab".into(),
        namespaced: true,
        verbs: [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
        .map(String::from)
        .to_vec(),
        subresources: Vec::new(),
        root: "com.example.stable.v1.CronTab".into(),
        list: "com.example.stable.v1.CronTabList".into(),
        schemas: Arc::new(schemas),
        strategic: false,
        revision: revision.into(),
    }
}

#[test]
fn a_changed_served_set_changes_the_documents_and_their_hashes() {
    let builtin = documents(served(&TypeSet::builtin()));
    assert!(
        Arc::ptr_eq(&builtin, &documents(served(&TypeSet::builtin()))),
        "cached per served set"
    );

    let mut with_crd = served(&TypeSet::builtin());
    with_crd.push(crontab("1"));
    let docs = documents(with_crd.clone());
    assert!(!Arc::ptr_eq(&builtin, &docs));
    let crd = v3(&docs, "apis/stable.example.com/v1");
    assert_eq!(
        crd["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]["patch"]
            ["x-kubernetes-group-version-kind"],
        json!({"group": "stable.example.com", "version": "v1", "kind": "CronTab"})
    );
    assert!(crd["components"]["schemas"]
        .get("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
        .is_some());
    // A custom type takes no strategic merge patch (kubectl then sends a
    // merge patch); a built-in does.
    let patch_types = |doc: &Value, path: &str| -> Vec<String> {
        doc["paths"][path]["patch"]["requestBody"]["content"]
            .as_object()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default()
    };
    let custom = patch_types(
        &crd,
        "/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}",
    );
    assert_eq!(custom.len(), 3, "{custom:?}");
    assert!(!custom.iter().any(|t| t.contains("strategic")));
    let apps = v3(&docs, "apis/apps/v1");
    let builtin_types = patch_types(
        &apps,
        "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
    );
    assert!(builtin_types.iter().any(|t| t.contains("strategic")));
    // The built-in group versions' documents are unchanged.
    assert_eq!(
        docs.groups["apis/apps/v1"].hash,
        builtin.groups["apis/apps/v1"].hash
    );

    // The same type with another schema: a new hash.
    with_crd.pop();
    with_crd.push(crontab("2"));
    let changed = documents(with_crd);
    assert_ne!(
        changed.groups["apis/stable.example.com/v1"].hash,
        docs.groups["apis/stable.example.com/v1"].hash
    );
    // A type gone from a group version changes that document's hash.
    let without_pods: Vec<ServedApi> = served(&TypeSet::builtin())
        .into_iter()
        .filter(|a| a.plural != "pods")
        .collect();
    let fewer = Documents::build(without_pods);
    assert_ne!(fewer.groups["api/v1"].hash, builtin.groups["api/v1"].hash);
}

#[test]
fn operation_names_follow_kube() {
    assert_eq!(gv_names("", "v1"), ("CoreV1".into(), "core_v1".into()));
    assert_eq!(gv_names("apps", "v1"), ("AppsV1".into(), "apps_v1".into()));
    assert_eq!(
        gv_names("rbac.authorization.k8s.io", "v1"),
        ("RbacAuthorizationV1".into(), "rbacAuthorization_v1".into())
    );
}

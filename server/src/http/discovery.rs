//! Discovery (`/api`, `/apis`, per group/version resource lists) and
//! `/version` (OpenAPI is `http::openapi`). `/api` and `/apis` answer aggregated discovery
//! (`apidiscovery.k8s.io` `v2` or `v2beta1` `APIGroupDiscoveryList`, every
//! group version's resources in one document) to a client that asks for
//! it first in its `Accept`, as client-go does, and legacy JSON otherwise.

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::http::authorization;
use crate::http::status::ApiError;
use crate::kube::resources::{ResourceType, Subresource, TypeSet};

/// The Kubernetes version kubestore's API corresponds to.
pub const KUBE_MAJOR: &str = "1";
pub const KUBE_MINOR: &str = "33";

fn json_ok(body: Value) -> Response {
    let mut resp = (StatusCode::OK, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub fn api_versions(req: &Request) -> Result<Response, ApiError> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    Ok(json_ok(json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": host }],
    })))
}

/// A group with its versions, the preferred first.
fn group_entry(group: &str, versions: &[&str]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({ "groupVersion": format!("{group}/{v}"), "version": v }))
        .collect();
    let preferred = gvs.first().cloned().unwrap_or(Value::Null);
    json!({ "name": group, "versions": gvs, "preferredVersion": preferred })
}

/// Every served group with its versions, the preferred first: the
/// stored types' (`types`, built-ins then custom) and the non-stored
/// `authorization.k8s.io/v1` (see [`authorization`]).
fn served_groups(types: &TypeSet) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut groups = types.groups();
    groups.push((authorization::GROUP, vec![authorization::VERSION]));
    groups
}

/// Whether `group`/`version` is the non-stored authorization group.
fn is_authorization(group: &str, version: &str) -> bool {
    group == authorization::GROUP && version == authorization::VERSION
}

pub fn group_list(types: &TypeSet) -> Response {
    let groups: Vec<Value> = served_groups(types)
        .into_iter()
        .map(|(g, vs)| group_entry(g, &vs))
        .collect();
    json_ok(json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups }))
}

pub fn group(types: &TypeSet, group: &str) -> Result<Response, ApiError> {
    let (g, vs) = served_groups(types)
        .into_iter()
        .find(|(g, _)| *g == group)
        .ok_or(ApiError::NoSuchResource)?;
    let mut body = group_entry(g, &vs);
    body["kind"] = json!("APIGroup");
    body["apiVersion"] = json!("v1");
    Ok(json_ok(body))
}

fn api_resource(rt: &ResourceType) -> Value {
    let mut r = json!({
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": rt.verbs(),
    });
    if !rt.short_names.is_empty() {
        r["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        r["categories"] = json!(rt.categories);
    }
    r
}

/// The served subresources of `rt` as discovery lists them, with the
/// group and version of a kind from another group (`deployments/scale`:
/// `autoscaling/v1` `Scale`, which `kubectl scale` resolves through).
fn api_subresources(rt: &ResourceType) -> impl Iterator<Item = Value> + '_ {
    Subresource::ALL.into_iter().filter_map(|sub| {
        let def = rt.subresource(sub)?;
        let mut r = json!({
            "name": format!("{}/{}", rt.plural, sub.name()),
            "singularName": "",
            "namespaced": rt.namespaced,
            "kind": def.kind,
            "verbs": def.verbs,
        });
        if def.group != rt.group || def.version != rt.version {
            r["group"] = json!(def.group);
            r["version"] = json!(def.version);
        }
        Some(r)
    })
}

/// The `APIResourceList` of a group version; `None` when it serves
/// nothing.
fn resource_list_body(types: &TypeSet, group: &str, version: &str) -> Option<Value> {
    let list: Vec<Value> = if is_authorization(group, version) {
        authorization::api_resources()
    } else {
        types
            .in_group_version(group, version)
            .flat_map(|rt| std::iter::once(api_resource(rt)).chain(api_subresources(rt)))
            .collect()
    };
    if list.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut body =
        json!({ "kind": "APIResourceList", "groupVersion": group_version, "resources": list });
    if !group.is_empty() {
        body["apiVersion"] = json!("v1");
    }
    Some(body)
}

/// The aggregated discovery version (`v2` or `v2beta1`) the client's
/// `Accept` names before any plain JSON, if any.
pub fn aggregated_version(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        if !parts
            .next()
            .is_some_and(|e| e.eq_ignore_ascii_case("application/json"))
        {
            continue;
        }
        let params: Vec<(&str, &str)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        let param = |k: &str| params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v);
        match (param("g"), param("v"), param("as")) {
            (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) => {
                return Some("v2")
            }
            (Some("apidiscovery.k8s.io"), Some("v2beta1"), Some("APIGroupDiscoveryList")) => {
                return Some("v2beta1")
            }
            // Plain JSON first: legacy discovery.
            (_, _, None) => return None,
            _ => continue,
        }
    }
    None
}

/// One resource of aggregated discovery (`APIResourceDiscovery`).
fn resource_discovery(rt: &ResourceType) -> Value {
    let mut r = json!({
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": rt.singular,
        "verbs": rt.verbs(),
    });
    if !rt.short_names.is_empty() {
        r["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        r["categories"] = json!(rt.categories);
    }
    let subresources: Vec<Value> = Subresource::ALL
        .into_iter()
        .filter_map(|sub| {
            let def = rt.subresource(sub)?;
            Some(json!({
                "subresource": sub.name(),
                "responseKind": {"group": def.group, "version": def.version, "kind": def.kind},
                "verbs": def.verbs,
            }))
        })
        .collect();
    if !subresources.is_empty() {
        r["subresources"] = json!(subresources);
    }
    r
}

/// One group of aggregated discovery (`APIGroupDiscovery`) with its
/// served versions, the preferred first.
fn group_discovery(types: &TypeSet, group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|version| {
            let resources: Vec<Value> = if is_authorization(group, version) {
                authorization::resource_discovery()
            } else {
                types
                    .in_group_version(group, version)
                    .map(resource_discovery)
                    .collect()
            };
            json!({ "version": version, "resources": resources, "freshness": "Current" })
        })
        .collect();
    let metadata = if group.is_empty() {
        json!({})
    } else {
        json!({ "name": group })
    };
    json!({ "metadata": metadata, "versions": versions })
}

/// `/api` (`core`) or `/apis` as aggregated discovery, in `version`
/// (`v2` or `v2beta1`), with its media type as the content type.
pub fn aggregated(types: &TypeSet, core: bool, version: &'static str) -> Response {
    let items: Vec<Value> = if core {
        vec![group_discovery(types, "", &["v1"])]
    } else {
        served_groups(types)
            .into_iter()
            .map(|(g, vs)| group_discovery(types, g, &vs))
            .collect()
    };
    let body = json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    });
    let mut resp = (StatusCode::OK, body.to_string()).into_response();
    let media = if version == "v2" {
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    } else {
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    };
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    resp
}

pub fn resource_list(types: &TypeSet, group: &str, version: &str) -> Result<Response, ApiError> {
    resource_list_body(types, group, version)
        .map(json_ok)
        .ok_or(ApiError::NoSuchResource)
}

pub async fn version() -> Response {
    json_ok(json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "emulationMajor": KUBE_MAJOR,
        "emulationMinor": KUBE_MINOR,
        "minCompatibilityMajor": KUBE_MAJOR,
        "minCompatibilityMinor": "32",
        "gitVersion": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-kubestore.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "n/a (kubestore is written in Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(list: &Value, name: &str) -> Value {
        list["resources"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{name} not listed"))
    }

    #[test]
    fn aggregated_discovery_is_served_to_clients_that_ask_for_it_first() {
        let accept = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_static(v));
            h
        };
        let client_go = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(&accept(client_go)), Some("v2"));
        assert_eq!(
            aggregated_version(&accept(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            )),
            Some("v2beta1")
        );
        assert_eq!(aggregated_version(&accept("application/json")), None);
        assert_eq!(aggregated_version(&HeaderMap::new()), None);
        // Plain JSON first wins; an unknown version is skipped.
        assert_eq!(
            aggregated_version(&accept(
                "application/json,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            )),
            None
        );
        assert_eq!(
            aggregated_version(&accept(
                "application/json;g=apidiscovery.k8s.io;v=v9;as=APIGroupDiscoveryList"
            )),
            None
        );
        let apps = group_discovery(&TypeSet::builtin(), "apps", &["v1"]);
        assert_eq!(apps["metadata"]["name"], "apps");
        let deployments = apps["versions"][0]["resources"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["resource"] == "deployments"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(deployments["scope"], "Namespaced");
        assert_eq!(deployments["responseKind"]["kind"], "Deployment");
        let scale = deployments["subresources"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["subresource"] == "scale"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            scale["responseKind"],
            json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
        );
        assert_eq!(
            group_discovery(&TypeSet::builtin(), "", &["v1"])["metadata"],
            json!({})
        );
    }

    #[test]
    fn subresources_are_listed_with_the_kind_they_read_and_write() {
        let apps = resource_list_body(&TypeSet::builtin(), "apps", "v1").expect("apps/v1");
        assert_eq!(
            entry(&apps, "deployments/scale"),
            json!({"name": "deployments/scale", "singularName": "", "namespaced": true,
                   "group": "autoscaling", "version": "v1", "kind": "Scale",
                   "verbs": ["get", "patch", "update"]})
        );
        assert_eq!(
            entry(&apps, "statefulsets/status"),
            json!({"name": "statefulsets/status", "singularName": "", "namespaced": true,
                   "kind": "StatefulSet", "verbs": ["get", "patch", "update"]})
        );
        let ds = entry(&apps, "daemonsets");
        assert_eq!(ds["shortNames"], json!(["ds"]));
        assert_eq!(ds["categories"], json!(["all"]));
        assert!(apps["resources"]
            .as_array()
            .is_some_and(|rs| !rs.iter().any(|r| r["name"] == "daemonsets/scale")));

        let core = resource_list_body(&TypeSet::builtin(), "", "v1").expect("v1");
        assert_eq!(
            entry(&core, "namespaces/finalize"),
            json!({"name": "namespaces/finalize", "singularName": "", "namespaced": false,
                   "kind": "Namespace", "verbs": ["update"]})
        );
        assert_eq!(
            entry(&core, "replicationcontrollers/scale")["group"],
            "autoscaling"
        );
        assert_eq!(
            entry(&core, "namespaces")["verbs"],
            json!(["create", "delete", "get", "list", "patch", "update", "watch"])
        );
        assert_eq!(entry(&core, "limitranges")["shortNames"], json!(["limits"]));
        assert!(resource_list_body(&TypeSet::builtin(), "autoscaling", "v2").is_some());
        assert_eq!(
            entry(
                &resource_list_body(&TypeSet::builtin(), "authorization.k8s.io", "v1")
                    .expect("authorization"),
                "selfsubjectaccessreviews"
            )["verbs"],
            json!(["create"])
        );
        assert!(
            resource_list_body(&TypeSet::builtin(), "autoscaling", "v1").is_none(),
            "v2 alone is served"
        );
    }
}

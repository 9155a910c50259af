//! The resource verbs: get, list, create, update, patch, delete and
//! deletecollection on every served type, cluster- and namespace-scoped,
//! and the `status` subresource. Each verb reads its inputs through
//! [`crate::http::query`] and [`crate::http::body`], calls the store, and
//! answers through [`crate::http::render`]; the path was resolved by
//! [`crate::http::routing`].

use std::collections::HashMap;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::http::body::{delete_preconditions, patch_kind, read_body, read_json_body};
use crate::http::negotiate::{self, Rendering};
use crate::http::query::{freshness, page_request, query_bool, query_map};
use crate::http::render::{json_bytes_response, render_list, render_object, with_read_path};
use crate::http::routing::{no_resource, resolve, Route, Target};
use crate::http::state::AppState;
use crate::http::status::ApiError;
use crate::http::{discovery, metrics, patch, query, watch};
use crate::kube::error::FieldCause;
use crate::kube::object::{self, UpdateScope};
use crate::kube::resources::ResourceType;

/// Entry point for everything under `/api` and `/apis`.
pub async fn api(State(state): State<AppState>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let span = tracing::info_span!("kube_request", node = state.node.id(), %method, %path);
    let result = tracing::Instrument::instrument(route(state, req), span).await;
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn route(state: AppState, req: Request) -> Result<Response, ApiError> {
    let path = req.uri().path().to_string();
    let rendering = negotiate::rendering(req.headers())?;
    match resolve(&path)? {
        Route::ApiVersions => discovery::api_versions(&req),
        Route::GroupList => Ok(discovery::group_list()),
        Route::Group(group) => discovery::group(group),
        Route::ResourceList(group, version) => discovery::resource_list(group, version),
        Route::Resource(target) => verb(state, target, rendering, req).await,
    }
}

/// Serves a resource request and tags the response with its verb for the
/// metrics layer (errors included).
async fn verb(
    state: AppState,
    target: Target,
    rendering: Rendering,
    req: Request,
) -> Result<Response, ApiError> {
    let has_name = target.name.is_some();
    let name = match (req.method().clone(), has_name) {
        (Method::GET, false) if query_bool(&query_map(&req), "watch") => "watch",
        (Method::GET, false) => "list",
        (Method::GET, true) => "get",
        (Method::POST, _) => "create",
        (Method::PUT, _) => "update",
        (Method::PATCH, _) => "patch",
        (Method::DELETE, true) => "delete",
        (Method::DELETE, false) => "deletecollection",
        _ => "other",
    };
    let mut resp = dispatch(state, target, rendering, req)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    resp.extensions_mut().insert(metrics::Verb(name));
    Ok(resp)
}

async fn dispatch(
    state: AppState,
    target: Target,
    rendering: Rendering,
    req: Request,
) -> Result<Response, ApiError> {
    let q = query_map(&req);
    let method = req.method().clone();
    let rt = target.rt;
    let ns = target.namespace.as_deref();
    query::refuse_dry_run(&method, &q)?;
    if target.status {
        return status_subresource(state, target, rendering, req, q).await;
    }
    match (&method, &target.name) {
        (&Method::GET, None) => {
            let selectors = query::selectors(rt, &q)?;
            if query_bool(&q, "watch") {
                return watch::serve(state, rt, ns, &q, selectors, rendering).await;
            }
            // Option validation (422) comes before storage-level checks (400), as in kube.
            let fresh = freshness(&q, true)?;
            let page = page_request(&q)?;
            let listed = state
                .kube
                .list_page(rt, ns, fresh, &selectors, &page)
                .await?;
            let served = listed.served;
            Ok(with_read_path(
                render_list(rt, listed, rendering, &q),
                served,
            ))
        }
        (&Method::GET, Some(name)) => {
            let fresh = freshness(&q, false)?;
            let (obj, served) = state.kube.get(rt, ns, name, fresh).await?;
            let resp = match rendering {
                Rendering::Json => json_bytes_response(StatusCode::OK, obj.json.clone()),
                Rendering::Table => {
                    render_object(rt, obj.object.clone(), StatusCode::OK, rendering, &q)
                }
            };
            Ok(with_read_path(resp, served))
        }
        (&Method::POST, None) => {
            if rt.namespaced && ns.is_none() {
                return Err(ApiError::MethodNotAllowed(format!(
                    "create is not supported on resources of kind \"{}\" without a namespace",
                    rt.group_resource()
                )));
            }
            let body = read_json_body(&state, rt, req).await?;
            let mut obj = object::decode_body(rt, &body)?;
            let name = resolve_create_name(rt, &mut obj)?;
            let obj_ns = check_namespace(rt, ns, &mut obj)?;
            object::validate_object_meta(rt, &name, obj_ns.as_deref())?;
            object::prepare_create(rt, &mut obj);
            let created = state.kube.create(rt, obj_ns.as_deref(), &name, obj).await?;
            Ok(render_object(
                rt,
                created,
                StatusCode::CREATED,
                rendering,
                &q,
            ))
        }
        (&Method::PUT, Some(name)) => {
            let body = read_json_body(&state, rt, req).await?;
            let mut obj = object::decode_body(rt, &body)?;
            let body_name = object::meta_str(&obj, "name").unwrap_or("").to_string();
            if body_name != *name {
                return Err(ApiError::BadRequest(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            let obj_ns = check_namespace(rt, ns, &mut obj)?;
            object::validate_object_meta(rt, name, obj_ns.as_deref())?;
            let updated = state.kube.update(rt, obj_ns.as_deref(), name, obj).await?;
            Ok(render_object(rt, updated, StatusCode::OK, rendering, &q))
        }
        (&Method::PATCH, Some(name)) => {
            let kind = patch_kind(req.headers())?;
            let body = read_body(&state, req).await?;
            let patched =
                patch::apply(&state, rt, ns, name, kind, &body, UpdateScope::Object).await?;
            Ok(render_object(rt, patched, StatusCode::OK, rendering, &q))
        }
        (&Method::DELETE, Some(name)) => {
            let body = read_body(&state, req).await?;
            let pre = delete_preconditions(&body)?;
            let last = state.kube.delete(rt, ns, name, &pre).await?;
            Ok(render_object(rt, last, StatusCode::OK, rendering, &q))
        }
        (&Method::DELETE, None) => {
            let selectors = query::selectors(rt, &q)?;
            let deleted = state.kube.delete_collection(rt, ns, &selectors).await?;
            Ok(render_list(rt, deleted, Rendering::Json, &q))
        }
        (m, _) => Err(ApiError::MethodNotAllowed(format!(
            "{} is not supported on resources of kind \"{}\"",
            m.as_str(),
            rt.group_resource()
        ))),
    }
}

/// `<name>/status`: get, update and patch of the status alone.
async fn status_subresource(
    state: AppState,
    target: Target,
    rendering: Rendering,
    req: Request,
    q: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let rt = target.rt;
    let ns = target.namespace.as_deref();
    let name = target.name.as_deref().ok_or_else(no_resource)?;
    match req.method().clone() {
        Method::GET => {
            let fresh = freshness(&q, false)?;
            let (obj, served) = state.kube.get(rt, ns, name, fresh).await?;
            let resp = render_object(rt, obj.object.clone(), StatusCode::OK, rendering, &q);
            Ok(with_read_path(resp, served))
        }
        Method::PUT => {
            let body = read_json_body(&state, rt, req).await?;
            let mut obj = object::decode_body(rt, &body)?;
            let body_name = object::meta_str(&obj, "name").unwrap_or("").to_string();
            if body_name != name {
                return Err(ApiError::BadRequest(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            let obj_ns = check_namespace(rt, ns, &mut obj)?;
            let updated = state
                .kube
                .update_in(rt, obj_ns.as_deref(), name, obj, UpdateScope::Status)
                .await?;
            Ok(render_object(rt, updated, StatusCode::OK, rendering, &q))
        }
        Method::PATCH => {
            let kind = patch_kind(req.headers())?;
            let body = read_body(&state, req).await?;
            let patched =
                patch::apply(&state, rt, ns, name, kind, &body, UpdateScope::Status).await?;
            Ok(render_object(rt, patched, StatusCode::OK, rendering, &q))
        }
        m => Err(ApiError::MethodNotAllowed(format!(
            "{} is not supported on resources of kind \"{}/status\"",
            m.as_str(),
            rt.group_resource()
        ))),
    }
}
fn resolve_create_name(
    rt: &ResourceType,
    obj: &mut Map<String, Value>,
) -> Result<String, ApiError> {
    let meta = object::metadata_mut(obj);
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !name.is_empty() {
        return Ok(name);
    }
    match meta.get("generateName").and_then(Value::as_str) {
        Some(base) if !base.is_empty() => {
            let generated = object::generate_name(base);
            meta.insert("name".into(), json!(generated));
            Ok(generated)
        }
        _ => Err(ApiError::invalid(
            rt,
            "",
            vec![FieldCause::required(
                "metadata.name",
                "name or generateName is required",
            )],
        )),
    }
}

/// The URL's namespace wins; a different one in the body is a 400.
fn check_namespace(
    rt: &ResourceType,
    url_ns: Option<&str>,
    obj: &mut Map<String, Value>,
) -> Result<Option<String>, ApiError> {
    let meta = object::metadata_mut(obj);
    let body_ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    if !rt.namespaced {
        if body_ns.as_deref().is_some_and(|n| !n.is_empty()) {
            meta.remove("namespace");
        }
        return Ok(None);
    }
    match (url_ns, body_ns.as_deref()) {
        (Some(u), Some(b)) if !b.is_empty() && u != b => Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        )),
        (Some(u), _) => {
            meta.insert("namespace".into(), json!(u));
            Ok(Some(u.to_string()))
        }
        (None, b) => Ok(b.map(str::to_string)),
    }
}


/// Property tests: whatever body a client sends for a create or an
/// update, it is prepared for storage or refused as the client's mistake.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz::{self, assert_client_error};
    use crate::kube::resources;

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_create_body_is_stored_or_refused(
            body in fuzz::body(),
            url_ns in proptest::option::of(prop_oneof![Just("default".to_string()), fuzz::text()]),
            plural in proptest::sample::select(&["configmaps", "namespaces", "deployments", "pods", "nodes"][..]),
        ) {
            let rt = resources::RESOURCES
                .iter()
                .find(|r| r.plural == plural)
                .expect("a served type");
            let url_ns = url_ns.filter(|_| rt.namespaced);
            let created = (|| -> Result<Map<String, Value>, ApiError> {
                let mut obj = object::decode_body(rt, &body)?;
                let name = resolve_create_name(rt, &mut obj)?;
                let ns = check_namespace(rt, url_ns.as_deref(), &mut obj)?;
                object::validate_object_meta(rt, &name, ns.as_deref())?;
                object::prepare_create(rt, &mut obj);
                Ok(obj)
            })();
            match created {
                Ok(obj) => {
                    let stored = object::to_stored(&obj);
                    let back = object::from_stored(rt, b"k", &stored, 7)
                        .expect("a stored object reads back");
                    prop_assert_eq!(&back["metadata"]["name"], &obj["metadata"]["name"]);
                    prop_assert_eq!(&back["metadata"]["resourceVersion"], "7");
                    prop_assert_eq!(&back["kind"], rt.kind);
                }
                Err(e) => assert_client_error(&e)?,
            }
        }

        #[test]
        fn any_update_body_merges_with_any_stored_object(
            old in fuzz::object_value(),
            new in fuzz::object_value(),
            status_scope in any::<bool>(),
            plural in proptest::sample::select(&["configmaps", "namespaces", "deployments", "pods"][..]),
        ) {
            let rt = resources::RESOURCES
                .iter()
                .find(|r| r.plural == plural)
                .expect("a served type");
            let (Value::Object(old), Value::Object(mut new)) = (old, new) else {
                unreachable!("object_value makes objects");
            };
            let scope = if status_scope { UpdateScope::Status } else { UpdateScope::Object };
            object::prepare_update_in(rt, scope, &old, &mut new);
            prop_assert!(new.get("metadata").is_some_and(Value::is_object));
            prop_assert!(object::meta_str(&new, "resourceVersion").is_none());
        }
    }

    /// `any_update_body_merges_with_any_stored_object`, it overflowed.
    #[test]
    fn a_spec_change_at_the_largest_generation_does_not_overflow() {
        let dep = resources::find("apps", "v1", "deployments").expect("deployments");
        let old =
            json!({"metadata": {"name": "a", "generation": i64::MAX}, "spec": {"replicas": 1}});
        let mut new = json!({"metadata": {"name": "a"}, "spec": {"replicas": 2}});
        let (Value::Object(old), Value::Object(new_obj)) = (old, &mut new) else {
            unreachable!("objects");
        };
        object::prepare_update(dep, &old, new_obj);
        assert_eq!(new_obj["metadata"]["generation"], i64::MAX);
    }
}


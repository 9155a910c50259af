//! The resource verbs: get, list, create, update, patch, delete and
//! deletecollection on every served type, cluster- and namespace-scoped,
//! and the `status` subresource, each with `dryRun`. Each verb reads its inputs through
//! [`crate::http::query`] and [`crate::http::body`], calls the store, and
//! answers through [`crate::http::render`]; the path was resolved by
//! [`crate::http::routing`].

use std::collections::HashMap;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::http::body::{delete_options, media_type, patch_kind, read_body, read_json_body};
use crate::http::negotiate::{self, Rendering};
use crate::http::query::{dry_run, freshness, page_request, query_bool, query_map};
use crate::http::render::{json_bytes_response, render_list, render_object, with_read_path};
use crate::http::routing::{no_resource, resolve, Route, Target};
use crate::http::state::AppState;
use crate::http::status::ApiError;
use crate::http::write_options::{decode_object, with_warnings, WriteOptions};
use crate::http::{discovery, metrics, patch, query, watch};
use crate::kube::admission::{self, UpdateScope};
use crate::kube::apply;
use crate::kube::error::KubeError;
use crate::kube::fieldvalidation::WriteVerb;
use crate::kube::object;
use crate::kube::options::OptionsKind;
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
            let dry = dry_run(&q, OptionsKind::Create)?;
            let opts = WriteOptions::parse(&q, req.headers(), WriteVerb::Create, false)?;
            let body = read_json_body(&state, rt, req).await?;
            let (obj, warnings) = decode_object(rt, &body, opts.validation, WriteVerb::Create)?;
            let mut admitted = admission::admit_create_object(rt, ns, obj)?;
            apply::track_update(
                &apply::Target::of(rt),
                &opts.manager_for(rt, false),
                None,
                &mut admitted.object,
                &object::now_rfc3339(),
            )
            .map_err(KubeError::from)?;
            let created = state.kube.create(rt, admitted, dry).await?;
            let resp = render_object(rt, created, StatusCode::CREATED, rendering, &q);
            Ok(with_warnings(resp, &warnings))
        }
        (&Method::PUT, Some(name)) => {
            update(
                &state,
                rt,
                ns,
                name,
                UpdateScope::Object,
                rendering,
                req,
                &q,
            )
            .await
        }
        (&Method::PATCH, Some(name)) => {
            patch(
                &state,
                rt,
                ns,
                name,
                UpdateScope::Object,
                rendering,
                req,
                &q,
            )
            .await
        }
        (&Method::DELETE, Some(name)) => {
            let media = media_type(req.headers());
            let body = read_body(&state, req).await?;
            let opts = delete_options(&body, &media, &q)?;
            let deleted = state.kube.delete(rt, ns, name, &opts).await?;
            // As kube: 202 when the client asked for its dependents to be
            // deleted (`orphanDependents=false`) and the object is not gone yet.
            let code = if !deleted.gone && opts.orphan_dependents == Some(false) {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            Ok(render_object(rt, deleted.object, code, rendering, &q))
        }
        (&Method::DELETE, None) => {
            let selectors = query::selectors(rt, &q)?;
            let media = media_type(req.headers());
            let body = read_body(&state, req).await?;
            let opts = delete_options(&body, &media, &q)?;
            let deleted = state
                .kube
                .delete_collection(rt, ns, &selectors, &opts)
                .await?;
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
            update(
                &state,
                rt,
                ns,
                name,
                UpdateScope::Status,
                rendering,
                req,
                &q,
            )
            .await
        }
        Method::PATCH => {
            patch(
                &state,
                rt,
                ns,
                name,
                UpdateScope::Status,
                rendering,
                req,
                &q,
            )
            .await
        }
        m => Err(ApiError::MethodNotAllowed(format!(
            "{} is not supported on resources of kind \"{}/status\"",
            m.as_str(),
            rt.group_resource()
        ))),
    }
}

/// `PUT` of an object or its status: the body decoded under
/// `fieldValidation`, the write recorded in `managedFields` as an
/// `Update` by its manager.
#[allow(clippy::too_many_arguments)] // the request's parts, each distinct
async fn update(
    state: &AppState,
    rt: &'static ResourceType,
    ns: Option<&str>,
    name: &str,
    scope: UpdateScope,
    rendering: Rendering,
    req: Request,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let dry = dry_run(q, OptionsKind::Update)?;
    let opts = WriteOptions::parse(q, req.headers(), WriteVerb::Update, false)?;
    let body = read_json_body(state, rt, req).await?;
    let (obj, warnings) = decode_object(rt, &body, opts.validation, WriteVerb::Update)?;
    let admitted = admission::admit_update_object(rt, ns, name, scope, obj)?;
    let manager = opts.manager_for(rt, scope == UpdateScope::Status);
    let updated = state
        .kube
        .update_as(rt, admitted, scope, dry, Some(&manager))
        .await?;
    let resp = render_object(rt, updated, StatusCode::OK, rendering, q);
    Ok(with_warnings(resp, &warnings))
}

/// `PATCH` of an object or its status, by its media type (`201` when a
/// server-side apply created the object).
#[allow(clippy::too_many_arguments)] // the request's parts, each distinct
async fn patch(
    state: &AppState,
    rt: &'static ResourceType,
    ns: Option<&str>,
    name: &str,
    scope: UpdateScope,
    rendering: Rendering,
    req: Request,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let dry = dry_run(q, OptionsKind::Patch)?;
    let kind = patch_kind(req.headers())?;
    let opts = WriteOptions::parse(
        q,
        req.headers(),
        WriteVerb::Patch,
        kind == patch::PatchKind::Apply,
    )?;
    let body = read_body(state, req).await?;
    let patched = patch::apply(state, rt, ns, name, kind, &body, scope, &opts, dry).await?;
    let code = if patched.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let resp = render_object(rt, patched.object, code, rendering, q);
    Ok(with_warnings(resp, &patched.warnings))
}

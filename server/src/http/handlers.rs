//! The resource verbs: get, list, create, update, patch, delete and
//! deletecollection on every served type, cluster- and namespace-scoped
//! (namespaces too, which kube does not delete as a collection), and the
//! subresources with the verbs the specification gives them (`status`;
//! `scale`, read and written as a view of its parent through
//! `kube::scale`; a namespace's `finalize`; `405` for other verbs), each
//! with `dryRun`. Each verb reads its inputs through
//! [`crate::http::query`] and [`crate::http::body`], calls the store, and
//! answers through [`crate::http::render`]; the path was resolved by
//! [`crate::http::routing`].

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::http::body::{delete_options, media_type, patch_kind, read_body, read_json_body};
use crate::http::negotiate::{self, Rendering};
use crate::http::query::{dry_run, freshness, page_request, query_bool, query_map};
use crate::http::render::{json_bytes_response, render_list, render_object, with_read_path};
use crate::http::routing::{no_resource, resolve, Route, Target};
use crate::http::state::AppState;
use crate::http::status::{answer_in, ApiError};
use crate::http::write_options::{decode_object, with_warnings, WriteOptions};
use crate::http::{discovery, metrics, patch, query, watch, write_options};
use crate::kube::admission::{self, UpdateScope};
use crate::kube::apply::{self, Manager};
use crate::kube::error::KubeError;
use crate::kube::fieldvalidation::WriteVerb;
use crate::kube::finalize;
use crate::kube::object;
use crate::kube::options::OptionsKind;
use crate::kube::resources::{ResourceType, Subresource, TypeSet};
use crate::kube::scale;

/// How many times a write of a subresource (a scale, a namespace's
/// finalizers) without a precondition of its own is computed again on a
/// newer parent after losing a race, in all: as an update.
const SUBRESOURCE_ATTEMPTS: usize = 8;

/// Entry point for everything under `/api` and `/apis`.
pub async fn api(State(state): State<AppState>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let span = tracing::info_span!("kube_request", node = state.node.id(), %method, %path);
    let result = tracing::Instrument::instrument(route(state, req), span.clone()).await;
    answer_in(&span, result)
}

async fn route(state: AppState, req: Request) -> Result<Response, ApiError> {
    let path = req.uri().path().to_string();
    // A path this node does not serve is resolved again after a read
    // barrier: another node may have applied its CustomResourceDefinition.
    let route =
        or_after_barrier(&state, &state.kube.cache().types(), |t| resolve(&path, t)).await?;
    let types = match route {
        Route::GroupList => listed_types(&state).await,
        _ => state.kube.cache().types(),
    };
    if let Route::ApiVersions | Route::GroupList = route {
        if let Some(version) = discovery::aggregated_version(req.headers()) {
            let core = matches!(route, Route::ApiVersions);
            return Ok(discovery::aggregated(&types, core, version));
        }
    }
    let rendering = negotiate::rendering(req.headers())?;
    match route {
        Route::ApiVersions => discovery::api_versions(&req),
        Route::GroupList => Ok(discovery::group_list(&types)),
        Route::Group(group) => {
            or_after_barrier(&state, &types, |t| discovery::group(t, group)).await
        }
        Route::ResourceList(group, version) => {
            or_after_barrier(&state, &types, |t| {
                discovery::resource_list(t, group, version)
            })
            .await
        }
        Route::Resource(target) => verb(state, target, rendering, req).await,
    }
}

/// The types a list of every group (`/apis`, legacy or aggregated) names:
/// those the node serves once it has applied everything committed before
/// the request, so a CustomResourceDefinition created through another node
/// is listed as soon as its creation was acknowledged. Without a quorum
/// the list is answered from what the node has applied, as a
/// stale-tolerant read: discovery stays up on a partitioned node.
async fn listed_types(state: &AppState) -> Arc<TypeSet> {
    if let Err(e) = state.kube.quorum_revision().await {
        tracing::warn!(error = %e, "group list answered without a read barrier");
    }
    state.kube.cache().types()
}

/// `answer` on the node's served `types`; a `404` (a group or version
/// this node does not serve) is answered again after a read barrier, on
/// the types the node serves then: another node may have defined it.
async fn or_after_barrier<T>(
    state: &AppState,
    types: &TypeSet,
    answer: impl Fn(&TypeSet) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    match answer(types) {
        Err(ApiError::NoSuchResource) => {
            state.kube.quorum_revision().await?;
            answer(&state.kube.cache().types())
        }
        found => found,
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
    let deprecation = target
        .rt
        .custom
        .and_then(|c| c.deprecation_warning.as_deref());
    let mut resp = match rendering.for_type(target.rt) {
        Ok(rendering) => dispatch(state, target, name, rendering, req).await,
        Err(e) => Err(e),
    }
    .unwrap_or_else(IntoResponse::into_response);
    if let Some(text) = deprecation {
        // A deprecated version of a custom type: every answer says so.
        if let Ok(v) = HeaderValue::from_str(&write_options::warning_value(text)) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp.extensions_mut().insert(metrics::Verb(name));
    Ok(resp)
}

/// The `405` of a method the resource (or `resource/subresource`) does
/// not serve.
fn not_supported(method: &Method, resource: &str) -> ApiError {
    ApiError::MethodNotAllowed(format!(
        "{} is not supported on resources of kind \"{resource}\"",
        method.as_str()
    ))
}

async fn dispatch(
    state: AppState,
    target: Target,
    verb: &str,
    rendering: Rendering,
    req: Request,
) -> Result<Response, ApiError> {
    let q = query_map(&req);
    let method = req.method().clone();
    let rt = target.rt;
    let ns = target.namespace.as_deref();
    if let Some(sub) = target.subresource {
        // Only the verbs the specification gives the subresource.
        let served = rt.subresource(sub).ok_or_else(no_resource)?;
        if !served.verbs.iter().any(|v| v == verb) {
            return Err(not_supported(
                &method,
                &format!("{}/{}", rt.group_resource(), sub.name()),
            ));
        }
        return match sub {
            Subresource::Status => status_subresource(state, target, rendering, req, q).await,
            Subresource::Scale => scale_subresource(state, target, rendering, req, q).await,
            Subresource::Finalize => finalize_subresource(state, target, rendering, req, q).await,
        };
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
                Rendering::Json => json_bytes_response(StatusCode::OK, obj.json_bytes()),
                _ => render_object(rt, obj.to_value(), StatusCode::OK, rendering, &q),
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
        (&Method::PUT, Some(_)) => {
            update(&state, &target, UpdateScope::Object, rendering, req, &q).await
        }
        (&Method::PATCH, Some(_)) => {
            patch(&state, &target, UpdateScope::Object, rendering, req, &q).await
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
            // As kube: a collection DELETE only where the specification
            // serves deletecollection (namespaces have none).
            if !rt.verbs().iter().any(|v| v == "deletecollection") {
                return Err(not_supported(&Method::DELETE, &rt.group_resource()));
            }
            let selectors = query::selectors(rt, &q)?;
            let media = media_type(req.headers());
            let body = read_body(&state, req).await?;
            let opts = delete_options(&body, &media, &q)?;
            let deleted = state
                .kube
                .delete_collection(rt, ns, &selectors, &opts)
                .await?;
            let rendering = match rendering {
                Rendering::Table => Rendering::Json,
                other => other,
            };
            Ok(render_list(rt, deleted, rendering, &q))
        }
        (m, _) => Err(not_supported(m, &rt.group_resource())),
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
            let resp = render_object(rt, obj.to_value(), StatusCode::OK, rendering, &q);
            Ok(with_read_path(resp, served))
        }
        Method::PUT => update(&state, &target, UpdateScope::Status, rendering, req, &q).await,
        Method::PATCH => patch(&state, &target, UpdateScope::Status, rendering, req, &q).await,
        m => Err(not_supported(
            &m,
            &format!("{}/status", rt.group_resource()),
        )),
    }
}

/// A server-side apply of a `Scale` (kube's scale handler): the applied
/// configuration merged into the parent's `Scale`, whose managed fields
/// are the parent's managers of its replicas, so it conflicts with them
/// (`409`, or taken with `force`); the result written to the parent (its
/// replicas, the `Scale`'s `resourceVersion` as the precondition) with
/// the managed fields mapped back. The parent must exist (`404`).
async fn apply_scale(
    state: AppState,
    target: Target,
    view: &ResourceType,
    rendering: Rendering,
    q: HashMap<String, String>,
    req: Request,
) -> Result<Response, ApiError> {
    let rt = target.rt;
    let ns = target.namespace.as_deref();
    let name = target.name.as_deref().ok_or_else(no_resource)?;
    let dry = dry_run(&q, OptionsKind::Patch)?;
    let opts = WriteOptions::parse(&q, req.headers(), WriteVerb::Patch, true)?;
    let manager = Manager {
        name: opts.manager.clone(),
        subresource: Some(Subresource::Scale.name().to_string()),
        api_version: view.api_version(),
    };
    let body = read_body(&state, req).await?;
    let config = match patch::parse_apply_body(&body)?.0 {
        serde_json::Value::Object(config) => config,
        _ => {
            return Err(ApiError::BadRequest(
                "error decoding YAML: the applied configuration is not an object".into(),
            ))
        }
    };
    patch::check_apply_type(view, &config)?;
    let scale_target = apply::Target::of(view);
    let written = state
        .kube
        .update_managed(
            rt,
            ns,
            name,
            UpdateScope::Object,
            SUBRESOURCE_ATTEMPTS,
            dry,
            None,
            |current| -> Result<_, ApiError> {
                let parent = current
                    .object()
                    .and_then(|p| p.as_object().cloned())
                    .ok_or_else(|| KubeError::not_found(rt, name))?;
                let serde_json::Value::Object(mut live) =
                    scale::scale_of(rt, &serde_json::Value::Object(parent.clone()))?
                else {
                    return Err(KubeError::Internal("a Scale that is not an object".into()).into());
                };
                let meta = object::metadata_mut(&mut live);
                meta.remove("resourceVersion");
                meta.insert(
                    "managedFields".into(),
                    scale::managed_fields_to_scale(rt, &parent),
                );
                let applied = apply::apply(
                    &scale_target,
                    &manager,
                    Some(&live),
                    config.clone(),
                    opts.force,
                    &object::now_rfc3339(),
                )
                .map_err(KubeError::from)?;
                let write = scale::decode(rt, ns, name, &applied)?;
                let mut parent_written = scale::write_to_parent(rt, name, parent.clone(), &write)?;
                let managed = scale::managed_fields_to_parent(
                    rt,
                    &parent,
                    applied.get("metadata").and_then(|m| m.get("managedFields")),
                );
                object::metadata_mut(&mut parent_written).insert("managedFields".into(), managed);
                Ok(parent_written)
            },
        )
        .await
        .map_err(|e| match e {
            ApiError::Kube(e) => ApiError::Kube(scale::not_found_as_scale(rt, name, e)),
            other => other,
        })?;
    let resp = render_object(
        view,
        scale::scale_of(rt, &written)?,
        StatusCode::OK,
        rendering,
        &q,
    );
    Ok(resp)
}

/// What a write of a `Scale` brings: the whole object (PUT), or a patch
/// of the current one.
enum ScaleInput {
    Whole(scale::ScaleWrite),
    Patch(patch::PatchKind, Vec<u8>),
}

/// `<name>/scale`: the `autoscaling/v1` `Scale` of a workload, read from
/// it, and written (`PUT`, or a JSON, merge or strategic merge `PATCH` of
/// the `Scale`) as an update of the parent's `spec.replicas` alone: one
/// guarded update of the parent (the `Scale`'s `resourceVersion` its
/// precondition), recorded as its manager's write of the `scale`
/// subresource, answered with the parent's new `Scale`.
async fn scale_subresource(
    state: AppState,
    target: Target,
    rendering: Rendering,
    req: Request,
    q: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let rt = target.rt;
    let ns = target.namespace.as_deref();
    let name = target.name.as_deref().ok_or_else(no_resource)?;
    let view = scale::scale_type(rt);
    let method = req.method().clone();
    if method == Method::GET {
        let fresh = freshness(&q, false)?;
        let (obj, served) = state.kube.get(rt, ns, name, fresh).await?;
        let scale = scale::scale_of(rt, &obj.to_value())?;
        let resp = render_object(&view, scale, StatusCode::OK, rendering, &q);
        return Ok(with_read_path(resp, served));
    }
    let (dry, write_verb, patch_as) = match method {
        Method::PUT => (dry_run(&q, OptionsKind::Update)?, WriteVerb::Update, None),
        Method::PATCH => {
            let kind = patch_kind(req.headers())?;
            if kind == patch::PatchKind::Apply {
                return apply_scale(state, target, &view, rendering, q, req).await;
            }
            (
                dry_run(&q, OptionsKind::Patch)?,
                WriteVerb::Patch,
                Some(kind),
            )
        }
        m => return Err(not_supported(&m, &scale::group_resource(rt))),
    };
    let opts = WriteOptions::parse(&q, req.headers(), write_verb, false)?;
    let manager = Manager {
        name: opts.manager.clone(),
        subresource: Some(Subresource::Scale.name().to_string()),
        api_version: rt.api_version(),
    };
    // What the request asks: a whole Scale (PUT), or a patch of the
    // current one, computed on each attempt's state.
    let (input, warnings) = match patch_as {
        None => {
            let body = read_json_body(&state, &view, req).await?;
            let (obj, warnings) = decode_object(&view, &body, opts.validation, write_verb)?;
            (
                ScaleInput::Whole(scale::decode(rt, ns, name, &obj)?),
                warnings,
            )
        }
        Some(kind) => (
            ScaleInput::Patch(kind, read_body(&state, req).await?),
            Vec::new(),
        ),
    };
    let written = state
        .kube
        .update_managed(
            rt,
            ns,
            name,
            UpdateScope::Object,
            SUBRESOURCE_ATTEMPTS,
            dry,
            Some(&manager),
            |current| -> Result<_, ApiError> {
                let parent = current
                    .object()
                    .ok_or_else(|| KubeError::not_found(rt, name))?;
                let patched;
                let write = match &input {
                    ScaleInput::Whole(write) => write,
                    ScaleInput::Patch(kind, body) => {
                        let scale = patch::patch_view(
                            &view,
                            ns,
                            name,
                            *kind,
                            body,
                            scale::scale_of(rt, &parent)?,
                            state.max_body_bytes,
                        )?;
                        patched = scale::decode(rt, ns, name, &scale)?;
                        &patched
                    }
                };
                let parent = parent
                    .as_object()
                    .cloned()
                    .ok_or_else(|| KubeError::not_found(rt, name))?;
                Ok(scale::write_to_parent(rt, name, parent, write)?)
            },
        )
        .await
        .map_err(|e| match e {
            ApiError::Kube(e) => ApiError::Kube(scale::not_found_as_scale(rt, name, e)),
            other => other,
        })?;
    let resp = render_object(
        &view,
        scale::scale_of(rt, &written)?,
        StatusCode::OK,
        rendering,
        &q,
    );
    Ok(with_warnings(resp, &warnings))
}

/// `namespaces/<name>/finalize` (`PUT`): the namespace's `spec.finalizers`
/// replaced by the body's, the rest as an update of the namespace (kube's
/// finalize strategy), each finalizer a standard or fully qualified name.
/// A terminating namespace left without finalizers goes, in the same
/// guarded write, as when its controller removes the last one.
async fn finalize_subresource(
    state: AppState,
    target: Target,
    rendering: Rendering,
    req: Request,
    q: HashMap<String, String>,
) -> Result<Response, ApiError> {
    let rt = target.rt;
    let ns = target.namespace.as_deref();
    let name = target.name.as_deref().ok_or_else(no_resource)?;
    let dry = dry_run(&q, OptionsKind::Update)?;
    let opts = WriteOptions::parse(&q, req.headers(), WriteVerb::Update, false)?;
    let body = read_json_body(&state, rt, req).await?;
    let (obj, warnings) = decode_object(rt, &body, opts.validation, WriteVerb::Update)?;
    let causes = finalize::finalizer_causes(&obj);
    if !causes.is_empty() {
        return Err(KubeError::invalid(rt, name, causes).into());
    }
    let admitted = admission::admit_update_object(rt, ns, name, UpdateScope::Finalize, obj)?;
    let manager = Manager {
        name: opts.manager.clone(),
        subresource: Some(Subresource::Finalize.name().to_string()),
        api_version: rt.api_version(),
    };
    let updated = state
        .kube
        .update_as(rt, admitted, UpdateScope::Finalize, dry, Some(&manager))
        .await?;
    let resp = render_object(rt, updated, StatusCode::OK, rendering, &q);
    Ok(with_warnings(resp, &warnings))
}

/// `PUT` of an object or its status: the body decoded under
/// `fieldValidation`, the write recorded in `managedFields` as an
/// `Update` by its manager.
async fn update(
    state: &AppState,
    target: &Target,
    scope: UpdateScope,
    rendering: Rendering,
    req: Request,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let (rt, ns) = (target.rt, target.namespace.as_deref());
    let name = target.name.as_deref().ok_or_else(no_resource)?;
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
async fn patch(
    state: &AppState,
    target: &Target,
    scope: UpdateScope,
    rendering: Rendering,
    req: Request,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let (rt, ns) = (target.rt, target.namespace.as_deref());
    let name = target.name.as_deref().ok_or_else(no_resource)?;
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

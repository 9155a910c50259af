//! The resource verbs: get, list, create, update, patch, delete and
//! deletecollection on every served type, cluster- and namespace-scoped,
//! with paths exactly as the Kubernetes API concepts define them.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::http::negotiate::{self, Rendering};
use crate::http::patch::{self, PatchKind};
use crate::http::state::AppState;
use crate::http::status::ApiError;
use crate::http::{discovery, metrics, protobuf, table, watch};
use crate::kube::cache::CachedObject;
use crate::kube::error::FieldCause;
use crate::kube::object::{self, UpdateScope};
use crate::kube::paging::{ContinueToken, PageRequest};
use crate::kube::resources::{self, ResourceType};
use crate::kube::selectors::Selectors;
use crate::kube::store::{Freshness, Listed, Preconditions, ReadPath};

/// A resource URL, parsed.
#[derive(Debug)]
struct Target {
    rt: &'static ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    /// `<name>/status`: the status subresource.
    status: bool,
}

fn no_resource() -> ApiError {
    ApiError::NoSuchResource
}

/// Parses `<resource>[/<name>[/status]]` or
/// `namespaces/<ns>/<resource>[/<name>[/status]]`.
fn parse_target(group: &str, version: &str, rest: &[&str]) -> Result<Target, ApiError> {
    let (rest, status) = match rest {
        [path @ .., "status"] if path.len() == 2 || path.len() == 4 => (path, true),
        _ => (rest, false),
    };
    let find = |plural: &str| resources::find(group, version, plural).ok_or_else(no_resource);
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
    if status && (name.is_none() || !rt.has_status_subresource()) {
        return Err(no_resource());
    }
    Ok(Target {
        rt,
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        status,
    })
}

/// Entry point for everything under `/api` and `/apis`.
pub async fn api(State(state): State<AppState>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let span = tracing::info_span!("kube_request", node = state.node.id(), %method, %path);
    let result = tracing::Instrument::instrument(route(state, req), span).await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// What a path under `/api` or `/apis` names.
#[derive(Debug)]
enum Route<'p> {
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

/// Resolves a request path (trailing slashes ignored) to what it names;
/// anything else is `404` (never a panic, whatever the path).
fn resolve(path: &str) -> Result<Route<'_>, ApiError> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    match segments.as_slice() {
        ["api"] => Ok(Route::ApiVersions),
        ["api", "v1"] => Ok(Route::ResourceList("", "v1")),
        ["apis"] => Ok(Route::GroupList),
        ["apis", group] => Ok(Route::Group(group)),
        ["apis", group, version] => Ok(Route::ResourceList(group, version)),
        ["api", "v1", rest @ ..] => parse_target("", "v1", rest).map(Route::Resource),
        ["apis", group, version, rest @ ..] => {
            parse_target(group, version, rest).map(Route::Resource)
        }
        _ => Err(no_resource()),
    }
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

fn query_map(req: &Request) -> HashMap<String, String> {
    req.uri()
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// kube's lenient boolean: absent, `0` or `false` (any case) is false.
fn query_bool(q: &HashMap<String, String>, key: &str) -> bool {
    match q.get(key) {
        None => false,
        Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
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
    if method != Method::GET && q.get("dryRun").is_some_and(|v| !v.is_empty()) {
        // Refused rather than ignored: a dry run must never write.
        return Err(ApiError::BadRequest(
            "dryRun is not supported by kubestore yet".into(),
        ));
    }
    if target.status {
        return status_subresource(state, target, rendering, req, q).await;
    }
    match (&method, &target.name) {
        (&Method::GET, None) => {
            let selectors = Selectors::parse(
                rt,
                q.get("labelSelector").map(String::as_str),
                q.get("fieldSelector").map(String::as_str),
            )?;
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
            let selectors = Selectors::parse(
                rt,
                q.get("labelSelector").map(String::as_str),
                q.get("fieldSelector").map(String::as_str),
            )?;
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

fn with_read_path(mut resp: Response, served: ReadPath) -> Response {
    resp.headers_mut().insert(
        metrics::READ_HEADER,
        HeaderValue::from_static(served.as_str()),
    );
    resp
}

/// The read mode of a get or list, from `resourceVersion` and
/// `resourceVersionMatch`, with kube's 400/422 for invalid combinations:
/// unset = most recent; `0` = any; `N` = not older than `N`, or exactly `N`
/// with `Exact` (and, as kube does, for a paginated list without a match).
fn freshness(q: &HashMap<String, String>, list: bool) -> Result<Freshness, ApiError> {
    let rv = q
        .get("resourceVersion")
        .map(String::as_str)
        .filter(|s| !s.is_empty());
    let matching = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .filter(|s| !s.is_empty());
    let has_continue = q.get("continue").is_some_and(|c| !c.is_empty());
    let has_limit = q
        .get("limit")
        .and_then(|l| l.parse::<i64>().ok())
        .is_some_and(|l| l > 0);
    let forbidden = |field: &str, detail: &str| {
        ApiError::invalid_list_options(vec![FieldCause::forbidden(field, detail)])
    };
    if list && q.contains_key("sendInitialEvents") {
        return Err(forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    if let Some(m) = matching {
        if m != "Exact" && m != "NotOlderThan" {
            return Err(ApiError::invalid_list_options(vec![
                FieldCause::not_supported(
                    "resourceVersionMatch",
                    m,
                    &["Exact", "NotOlderThan", ""],
                ),
            ]));
        }
        if rv.is_none() {
            return Err(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if has_continue {
            return Err(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m == "Exact" && rv == Some("0") {
            return Err(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    let Some(rv) = rv else {
        return Ok(Freshness::MostRecent);
    };
    let n = rv
        .parse::<u64>()
        .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv:?}")))?;
    Ok(match (n, matching) {
        (0, _) => Freshness::Any,
        (n, Some("Exact")) => Freshness::Exact(n),
        (n, None) if list && has_limit => Freshness::Exact(n),
        (n, _) => Freshness::NotOlderThan(n),
    })
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

fn delete_preconditions(body: &[u8]) -> Result<Preconditions, ApiError> {
    let mut pre = Preconditions::default();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let opts: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("couldn't decode DeleteOptions: {e}")))?;
        if let Some(p) = opts.get("preconditions") {
            pre.uid = p.get("uid").and_then(Value::as_str).map(str::to_string);
            if let Some(rv) = p.get("resourceVersion").and_then(Value::as_str) {
                pre.resource_version = Some(rv.parse().map_err(|_| {
                    ApiError::BadRequest(format!("invalid resourceVersion precondition {rv:?}"))
                })?);
            }
        }
    }
    Ok(pre)
}

/// The request's media type without parameters, lower-cased ("" if none).
fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn patch_kind(headers: &HeaderMap) -> Result<PatchKind, ApiError> {
    match media_type(headers).as_str() {
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        _ => Err(ApiError::UnsupportedMediaType),
    }
}

/// Bodies larger than the limit are still read (and dropped) up to this
/// many times the limit, so the client gets its 413 instead of a reset
/// connection while it is still sending.
const OVERSIZED_DRAIN_FACTOR: usize = 16;

async fn read_body(state: &AppState, req: Request) -> Result<Vec<u8>, ApiError> {
    use http_body_util::BodyExt;
    let limit = state.max_body_bytes;
    let mut body: Body = req.into_body();
    let mut buf = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::BadRequest(format!("failed to read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len();
        if seen <= limit {
            buf.extend_from_slice(&data);
        } else if seen > limit.saturating_mul(OVERSIZED_DRAIN_FACTOR) {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::RequestEntityTooLarge(limit));
    }
    Ok(buf)
}

/// Reads an object body as JSON: JSON as is, protobuf (for the types
/// [`protobuf`] models) converted; another content type is a 415.
async fn read_json_body(
    state: &AppState,
    rt: &ResourceType,
    req: Request,
) -> Result<Vec<u8>, ApiError> {
    match media_type(req.headers()).as_str() {
        "" | "application/json" => read_body(state, req).await,
        protobuf::MEDIA_TYPE => protobuf::to_json(rt, &read_body(state, req).await?),
        _ => Err(ApiError::UnsupportedMediaType),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn json_bytes_response(status: StatusCode, body: bytes::Bytes) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Items per chunk of a streamed list body.
const LIST_CHUNK_ITEMS: usize = 128;

/// A JSON list written to the socket in chunks of pre-encoded items: the
/// whole list is never encoded into one buffer.
fn streamed_json_list(rt: &ResourceType, meta: &Value, items: Vec<Arc<CachedObject>>) -> Response {
    let head = format!(
        r#"{{"kind":{},"apiVersion":{},"metadata":{},"items":["#,
        Value::from(rt.list_kind()),
        Value::from(rt.api_version()),
        meta
    );
    let items = Arc::new(items);
    let chunks = items.len().div_ceil(LIST_CHUNK_ITEMS);
    let body = std::iter::once(bytes::Bytes::from(head))
        .chain((0..chunks).map(move |c| {
            let from = c * LIST_CHUNK_ITEMS;
            let part = &items[from..(from + LIST_CHUNK_ITEMS).min(items.len())];
            let mut buf = Vec::with_capacity(part.iter().map(|o| o.json.len() + 1).sum());
            for (i, obj) in part.iter().enumerate() {
                if from + i > 0 {
                    buf.push(b',');
                }
                buf.extend_from_slice(&obj.json);
            }
            bytes::Bytes::from(buf)
        }))
        .chain(std::iter::once(bytes::Bytes::from_static(b"]}")))
        .map(Ok::<_, std::convert::Infallible>);
    let mut resp = Response::new(Body::from_stream(futures::stream::iter(body)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn render_object(
    rt: &ResourceType,
    obj: Value,
    status: StatusCode,
    rendering: Rendering,
    q: &HashMap<String, String>,
) -> Response {
    match rendering {
        Rendering::Json => json_response(status, &obj),
        Rendering::Table => {
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match table::render(rt, std::slice::from_ref(&obj), &rv, q) {
                Ok(t) => json_response(status, &t),
                Err(e) => e.into_response(),
            }
        }
    }
}

fn render_list(
    rt: &ResourceType,
    listed: Listed,
    rendering: Rendering,
    q: &HashMap<String, String>,
) -> Response {
    let rv = listed.revision.0.to_string();
    let mut meta = json!({ "resourceVersion": rv });
    if let Some(token) = &listed.continue_token {
        meta["continue"] = json!(token);
    }
    if let Some(n) = listed.remaining {
        meta["remainingItemCount"] = json!(n);
    }
    match rendering {
        Rendering::Json => streamed_json_list(rt, &meta, listed.items),
        Rendering::Table => match table::render(
            rt,
            &listed
                .items
                .iter()
                .map(|o| o.object.clone())
                .collect::<Vec<_>>(),
            &rv,
            q,
        ) {
            Ok(mut t) => {
                t["metadata"] = meta;
                json_response(StatusCode::OK, &t)
            }
            Err(e) => e.into_response(),
        },
    }
}

/// `limit` and `continue`; a continue token with a resourceVersion other
/// than "" or "0" is the 400 kube answers.
fn page_request(q: &HashMap<String, String>) -> Result<PageRequest, ApiError> {
    let limit = match q.get("limit").map(String::as_str) {
        None | Some("") => 0,
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::BadRequest(format!("invalid limit {l:?}: must be an integer")))?
            .max(0) as u64,
    };
    let token = match q.get("continue").map(String::as_str) {
        None | Some("") => None,
        Some(t) => {
            if q.get("resourceVersion")
                .is_some_and(|rv| !rv.is_empty() && rv != "0")
            {
                return Err(ApiError::BadRequest(
                    "specifying resource version is not allowed when using continue".into(),
                ));
            }
            Some(ContinueToken::decode(t)?)
        }
    };
    Ok(PageRequest { limit, token })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_as_kube_defines_them() {
        let t =
            parse_target("", "v1", &["namespaces", "d", "configmaps", "a"]).expect("object path");
        assert_eq!(
            (t.rt.plural, t.namespace.as_deref(), t.name.as_deref()),
            ("configmaps", Some("d"), Some("a"))
        );
        let t = parse_target("", "v1", &["configmaps"]).expect("all namespaces");
        assert_eq!((t.namespace, t.name), (None, None));
        let t = parse_target("", "v1", &["namespaces", "d"]).expect("a namespace object");
        assert_eq!((t.rt.plural, t.name.as_deref()), ("namespaces", Some("d")));
        assert!(
            parse_target("", "v1", &["configmaps", "a"]).is_err(),
            "namespaced object without namespace"
        );
        assert!(
            parse_target("", "v1", &["namespaces", "d", "nodes"]).is_err(),
            "cluster-scoped under a namespace"
        );
        assert!(parse_target("", "v1", &["widgets"]).is_err());
        assert!(parse_target(
            "apps",
            "v1",
            &["namespaces", "d", "deployments", "x", "scale"]
        )
        .is_err());
    }

    #[test]
    fn booleans_are_lenient_like_kube() {
        let q: HashMap<String, String> = [("a", "True"), ("b", "0"), ("c", "FALSE"), ("d", "")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert!(query_bool(&q, "a"));
        assert!(!query_bool(&q, "b"));
        assert!(!query_bool(&q, "c"));
        assert!(query_bool(&q, "d"));
        assert!(!query_bool(&q, "missing"));
    }
}

/// Property tests: whatever a client sends as path, query or body, the
/// parsers answer a value or a client error (`4xx`), never a panic or a
/// `5xx`.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz;

    /// Path segments: the ones the router knows, and anything else.
    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => proptest::sample::select(&[
                "api", "apis", "v1", "apps", "coordination.k8s.io", "namespaces",
                "default", "configmaps", "pods", "deployments", "nodes", "status",
                "scale", "", "a",
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

    /// Checks the error as it goes on the wire (a domain error through
    /// `status`'s mapping).
    fn assert_client_error(e: &(impl Clone + Into<ApiError>)) -> Result<(), TestCaseError> {
        let e: ApiError = e.clone().into();
        prop_assert!(
            !e.code().is_server_error(),
            "a client's input answered {}: {e}",
            e.code()
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_path_resolves_or_is_a_404(path in path()) {
            match resolve(&path) {
                Ok(Route::Resource(t)) => {
                    prop_assert!(t.name.as_deref() != Some(""));
                    prop_assert!(t.namespace.as_deref() != Some(""));
                    prop_assert!(!t.status || t.name.is_some());
                    prop_assert!(t.namespace.is_none() || t.rt.namespaced);
                }
                Ok(_) => {}
                Err(e) => prop_assert_eq!(e.code(), StatusCode::NOT_FOUND),
            }
            // A trailing slash names the same thing.
            let with_slash = format!("{path}/");
            prop_assert_eq!(
                format!("{:?}", resolve(&path).map_err(|e| e.to_string())),
                format!("{:?}", resolve(&with_slash).map_err(|e| e.to_string()))
            );
        }

        #[test]
        fn any_query_is_read_or_refused_as_the_clients_mistake(
            q in fuzz::query(),
            list in any::<bool>(),
        ) {
            match freshness(&q, list) {
                Ok(Freshness::Exact(n)) => prop_assert!(n > 0),
                Ok(Freshness::NotOlderThan(n)) => prop_assert!(n > 0),
                Ok(_) => {}
                Err(e) => assert_client_error(&e)?,
            }
            match page_request(&q) {
                Ok(page) => prop_assert!(page.limit <= i64::MAX as u64),
                Err(e) => assert_client_error(&e)?,
            }
            for rt in resources::RESOURCES {
                match Selectors::parse(
                    rt,
                    q.get("labelSelector").map(String::as_str),
                    q.get("fieldSelector").map(String::as_str),
                ) {
                    Ok(_) => {}
                    Err(e) => assert_client_error(&e)?,
                }
            }
            let _ = query_bool(&q, "watch");
            if let Err(e) = table::render(
                resources::namespaces(),
                &[json!({"metadata": {"name": "a"}})],
                "1",
                &q,
            ) {
                assert_client_error(&e)?;
            }
        }

        #[test]
        fn any_raw_query_string_parses(raw in "[ -~]{0,64}") {
            let req = Request::builder()
                .uri(format!("/api/v1/pods?{}", raw.replace([' ', '#'], "+")))
                .body(Body::empty());
            if let Ok(req) = req {
                let q = query_map(&req);
                prop_assert!(q.len() <= raw.len() + 1);
            }
        }

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

        #[test]
        fn any_delete_options_are_read_or_refused(body in fuzz::body()) {
            if let Err(e) = delete_preconditions(&body) {
                assert_client_error(&e)?;
            }
        }

        #[test]
        fn any_content_type_or_accept_header_is_read_or_refused(value in "[ -~]{0,48}") {
            let mut headers = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert(header::CONTENT_TYPE, v.clone());
                headers.insert(header::ACCEPT, v);
            }
            if let Err(e) = patch_kind(&headers) {
                prop_assert_eq!(e.code(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
            }
            if let Err(e) = negotiate::rendering(&headers) {
                assert_client_error(&e)?;
            }
        }

        #[test]
        fn any_protobuf_body_converts_or_is_refused(
            tail in proptest::collection::vec(any::<u8>(), 0..96),
            plural in proptest::sample::select(&["configmaps", "secrets", "namespaces", "pods"][..]),
        ) {
            let rt = resources::RESOURCES
                .iter()
                .find(|r| r.plural == plural)
                .expect("a served type");
            let mut body = b"k8s\0".to_vec();
            body.extend_from_slice(&tail);
            for candidate in [&body[..], &tail[..]] {
                if let Err(e) = protobuf::to_json(rt, candidate) {
                    assert_client_error(&e)?;
                }
            }
        }
    }

    /// The update of an object stored (through the etcd API) with the
    /// largest generation: found by
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

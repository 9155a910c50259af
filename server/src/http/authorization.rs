//! `authorization.k8s.io/v1` `selfsubjectaccessreviews`: the review a
//! client creates to ask "may I?" (`kubectl auth can-i`), answered without
//! storing anything. kubestore has no authorization yet, so every review
//! is allowed, as kube's `AlwaysAllow` authorizer answers; the review is
//! still validated as kube validates it. Also the group's entries in
//! discovery (legacy and aggregated), since the type is not one of the
//! stored types of `kube::resources`.
//!
//! Hand-written rather than from `k8s-openapi`: the object is echoed back
//! with one status field set. Its protobuf form (which client-go's typed
//! clients send and ask for) goes through `protobuf` like every kind's.

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};

use crate::http::body::{media_type, read_body};
use crate::http::negotiate;
use crate::http::protobuf;
use crate::http::query::{dry_run, query_map};
use crate::http::render::render_value;
use crate::http::state::AppState;
use crate::http::status::{answer_in, ApiError};
use crate::kube::error::{BadValue, FieldCause, KubeError};
use crate::kube::options::OptionsKind;

pub const GROUP: &str = "authorization.k8s.io";
pub const VERSION: &str = "v1";
/// The one path the group serves.
pub const PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const PLURAL: &str = "selfsubjectaccessreviews";
const KIND: &str = "SelfSubjectAccessReview";

/// The group's `APIResource` in legacy discovery (`/apis/<g>/<v>`).
pub fn api_resources() -> Vec<Value> {
    vec![json!({
        "name": PLURAL,
        "singularName": "selfsubjectaccessreview",
        "namespaced": false,
        "kind": KIND,
        "verbs": ["create"],
    })]
}

/// The group's `APIResourceDiscovery` in aggregated discovery.
pub fn resource_discovery() -> Vec<Value> {
    vec![json!({
        "resource": PLURAL,
        "responseKind": { "group": GROUP, "version": VERSION, "kind": KIND },
        "scope": "Cluster",
        "singularResource": "selfsubjectaccessreview",
        "verbs": ["create"],
    })]
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`: the
/// review back with `status.allowed: true` (`201`); any other method is
/// kube's `405`.
pub async fn serve(State(state): State<AppState>, req: Request) -> Response {
    let span = tracing::info_span!("kube_request", node = state.node.id(), method = %req.method(), path = PATH);
    let result = tracing::Instrument::instrument(review(state, req), span.clone()).await;
    answer_in(&span, result)
}

async fn review(state: AppState, req: Request) -> Result<Response, ApiError> {
    if req.method() != Method::POST {
        return Err(ApiError::MethodNotAllowed(format!(
            "{} is not supported on resources of kind \"{PLURAL}.{GROUP}\"",
            req.method().as_str()
        )));
    }
    // A dry run changes nothing here either; its value is still checked.
    dry_run(&query_map(&req), OptionsKind::Create)?;
    let rendering = negotiate::rendering(req.headers())?;
    let media = media_type(req.headers());
    let body = read_body(&state, req).await?;
    let review = match media.as_str() {
        "" | "application/json" => serde_json::from_slice::<Value>(&body).map_err(undecodable)?,
        protobuf::MEDIA_TYPE => from_protobuf(&body)?,
        _ => return Err(ApiError::UnsupportedMediaType),
    };
    let Value::Object(review) = review else {
        return Err(ApiError::BadRequest(format!(
            "couldn't decode {KIND}: the body is not a JSON object"
        )));
    };
    Ok(render_value(
        StatusCode::CREATED,
        &allowed(review)?,
        rendering,
    ))
}

/// Validates a review as kube does (`ValidateSelfSubjectAccessReview`:
/// exactly one of resource and non-resource attributes, empty metadata)
/// and answers it allowed.
fn allowed(mut review: Map<String, Value>) -> Result<Value, ApiError> {
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let present = |k: &str| spec.get(k).is_some_and(|v| !v.is_null());
    let mut causes = Vec::new();
    match (
        present("resourceAttributes"),
        present("nonResourceAttributes"),
    ) {
        (true, true) => causes.push(FieldCause::invalid_value(
            "spec.nonResourceAttributes",
            BadValue::of_json(&spec["nonResourceAttributes"]),
            "cannot be specified in combination with resourceAttributes",
        )),
        (false, false) => causes.push(FieldCause::invalid_value(
            "spec.resourceAttributes",
            BadValue::of_json(&Value::Null),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    // Kube compares the metadata with an empty one, so Go's zero values
    // are empty: clients send `creationTimestamp: null` in JSON and
    // `generation: 0` in protobuf. Anything else set is refused.
    let metadata = review.get("metadata").cloned().unwrap_or(Value::Null);
    let is_zero = |v: &Value| match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    };
    if metadata
        .as_object()
        .is_some_and(|m| m.values().any(|v| !is_zero(v)))
    {
        causes.push(FieldCause::invalid_value(
            "metadata",
            BadValue::of_json(&metadata),
            "must be empty",
        ));
    }
    if !causes.is_empty() {
        return Err(KubeError::Invalid {
            kind: format!("{KIND}.{GROUP}"),
            group: GROUP.into(),
            name: String::new(),
            causes,
        }
        .into());
    }
    review.insert("kind".into(), json!(KIND));
    review.insert("apiVersion".into(), json!(format!("{GROUP}/{VERSION}")));
    review.insert("metadata".into(), json!({}));
    review.insert("status".into(), json!({ "allowed": true }));
    Ok(Value::Object(review))
}

fn undecodable(e: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!("couldn't decode {KIND}: {e}"))
}

/// A protobuf review (`k8s\0` envelope) as the JSON kube would read.
fn from_protobuf(body: &[u8]) -> Result<Value, ApiError> {
    let api_version = format!("{GROUP}/{VERSION}");
    protobuf::decode_object(body, Some((&api_version, KIND))).map_err(undecodable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(body: Value) -> Result<Value, ApiError> {
        let Value::Object(m) = body else {
            panic!("an object")
        };
        allowed(m)
    }

    #[test]
    fn a_review_is_allowed_and_echoed() {
        let got = review(json!({
            "kind": KIND, "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": {"resourceAttributes": {"namespace": "default", "verb": "create", "group": "apps", "resource": "deployments"}},
            "status": {"allowed": false},
        }))
        .expect("allowed");
        assert_eq!(got["status"], json!({"allowed": true}));
        assert_eq!(got["spec"]["resourceAttributes"]["resource"], "deployments");
        assert_eq!(got["metadata"], json!({}));
        let non_resource =
            review(json!({"spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}}))
                .expect("allowed");
        assert_eq!(non_resource["kind"], KIND);
        assert_eq!(non_resource["apiVersion"], "authorization.k8s.io/v1");
    }

    #[test]
    fn a_review_is_validated_as_kube_validates_it() {
        let status = |body: Value| review(body).expect_err("invalid").to_status();
        let none = status(json!({"spec": {}}));
        assert_eq!(none["code"], 422);
        assert_eq!(none["reason"], "Invalid");
        assert_eq!(
            none["message"],
            "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
        );
        let both = status(
            json!({"spec": {"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"path": "/"}}}),
        );
        assert_eq!(
            both["details"]["causes"][0]["field"],
            "spec.nonResourceAttributes"
        );
        let named = status(json!({"metadata": {"name": "x"}, "spec": {"resourceAttributes": {}}}));
        assert_eq!(named["details"]["causes"][0]["field"], "metadata");
        assert_eq!(named["details"]["causes"][0]["reason"], "FieldValueInvalid");
    }

    #[test]
    fn a_protobuf_review_reads_as_its_json() {
        let review_json = json!({"apiVersion": "authorization.k8s.io/v1", "kind": KIND,
            "spec": {"resourceAttributes": {"namespace": "team", "verb": "create",
                "group": "apps", "resource": "deployments"}}});
        let body = protobuf::encode_object(&review_json).expect("encodes");
        let got = from_protobuf(&body).expect("decodes");
        assert_eq!(got, review_json);
        // What client-go sends: every string of the metadata, empty.
        let mut with_meta = review_json.clone();
        with_meta["metadata"] =
            json!({"name": "", "generateName": "", "namespace": "", "generation": 0});
        let body = protobuf::encode_object(&with_meta).expect("encodes");
        let Value::Object(empty) = from_protobuf(&body).expect("decodes") else {
            panic!("an object")
        };
        assert_eq!(allowed(empty).expect("allowed")["status"]["allowed"], true);
        assert!(from_protobuf(b"k8s\0\xff\xff").is_err());
    }
}

//! What a write (POST, PUT, PATCH) says about field management and
//! validation, read from its query and headers: `fieldManager` (or the
//! manager kube derives from the User-Agent), `fieldValidation`, `force`;
//! the decoding of an object body with its unknown and duplicate fields
//! ([`crate::kube::fieldvalidation`]); and the `Warning` headers a write
//! answers with.

use std::collections::HashMap;

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use serde_json::{Map, Value};

use crate::http::query::query_bool;
use crate::http::status::ApiError;
use crate::kube::apply::{Manager, MAX_MANAGER_LEN};
use crate::kube::error::FieldCause;
use crate::kube::fieldvalidation::{
    invalid_options, parse_json, unknown_fields, FieldValidation, Problems, WriteVerb,
};
use crate::kube::object;
use crate::kube::resources::ResourceType;

/// A write's field-management options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// `fieldManager`, or the User-Agent up to its first `/`.
    pub manager: String,
    pub validation: FieldValidation,
    /// `force=true` on an apply: take conflicting fields.
    pub force: bool,
}

impl WriteOptions {
    /// Reads the options of a `verb` request (`apply`: a server-side
    /// apply, which needs a `fieldManager` and alone may say `force`),
    /// with kube's `422`s on the options kind.
    pub fn parse(
        q: &HashMap<String, String>,
        headers: &HeaderMap,
        verb: WriteVerb,
        apply: bool,
    ) -> Result<Self, ApiError> {
        let validation =
            FieldValidation::parse(q.get("fieldValidation").map(String::as_str), verb)?;
        let mut causes = Vec::new();
        let given = q.get("fieldManager").filter(|m| !m.is_empty());
        match given {
            Some(m) if m.len() > MAX_MANAGER_LEN => causes.push(FieldCause {
                reason: "FieldValueTooLong",
                field: "fieldManager".into(),
                message: format!("Too long: may not be more than {MAX_MANAGER_LEN} bytes"),
            }),
            Some(m) if m.chars().any(char::is_control) => causes.push(FieldCause::invalid(
                "fieldManager",
                m,
                "must be made of printable UTF-8 characters",
            )),
            None if apply => causes.push(FieldCause::required(
                "fieldManager",
                "is required for apply patch",
            )),
            _ => {}
        }
        if !apply && verb == WriteVerb::Patch && q.contains_key("force") {
            causes.push(FieldCause::forbidden(
                "force",
                "may not be specified for non-apply patch",
            ));
        }
        if !causes.is_empty() {
            return Err(invalid_options(verb, causes).into());
        }
        let manager = match given {
            Some(m) => m.clone(),
            None => headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .split('/')
                .next()
                .unwrap_or("")
                .chars()
                .take(MAX_MANAGER_LEN)
                .collect(),
        };
        Ok(WriteOptions {
            manager,
            validation,
            force: apply && query_bool(q, "force"),
        })
    }

    /// The manager a write of `rt` (of its `status` with `status`) is
    /// recorded as.
    pub fn manager_for(&self, rt: &ResourceType, status: bool) -> Manager {
        Manager {
            name: self.manager.clone(),
            subresource: status.then(|| "status".to_string()),
            api_version: rt.api_version(),
        }
    }
}

/// Decodes the object body of a create or update of `rt`: JSON with its
/// repeated keys noted, `kind`/`apiVersion` checked, fields the type does
/// not declare taken out. Returns the object and the warnings to send, or
/// (under `Strict`) kube's `400`.
pub fn decode_object(
    rt: &ResourceType,
    body: &[u8],
    validation: FieldValidation,
    verb: WriteVerb,
) -> Result<(Map<String, Value>, Vec<String>), ApiError> {
    let (value, duplicate) = parse_json(body).map_err(object::json_error)?;
    let mut obj = object::decode_value(rt, value)?;
    let unknown = unknown_fields(rt, &mut obj, true);
    let warnings = Problems { unknown, duplicate }.outcome(validation, rt, verb, None)?;
    Ok((obj, warnings))
}

/// kube's `Warning` header value for `text`: code 299, agent `-`, the text
/// quoted with `"` and `\` escaped and control characters dropped.
pub fn warning_value(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            c if c.is_control() => {}
            c => quoted.push(c),
        }
    }
    format!("299 - \"{quoted}\"")
}

/// `resp` with one `Warning` header per distinct warning.
pub fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    let mut seen = Vec::new();
    for w in warnings {
        if seen.contains(&w) {
            continue;
        }
        seen.push(w);
        if let Ok(v) = HeaderValue::from_str(&warning_value(w)) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_apply_needs_a_manager_and_only_an_apply_may_force() {
        let h = HeaderMap::new();
        let err = WriteOptions::parse(&q(&[]), &h, WriteVerb::Patch, true).expect_err("no manager");
        assert_eq!(err.code(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            err.to_status()["message"],
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
        );
        let err = WriteOptions::parse(&q(&[("force", "true")]), &h, WriteVerb::Patch, false)
            .expect_err("force");
        assert_eq!(
            err.to_status()["message"],
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
        );
        let long = "m".repeat(129);
        let err = WriteOptions::parse(&q(&[("fieldManager", &long)]), &h, WriteVerb::Create, false)
            .expect_err("too long");
        assert_eq!(err.code(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        let ok = WriteOptions::parse(
            &q(&[
                ("fieldManager", "kubectl"),
                ("force", "true"),
                ("fieldValidation", "Strict"),
            ]),
            &h,
            WriteVerb::Patch,
            true,
        )
        .expect("valid");
        assert!(ok.force);
        assert_eq!(ok.validation, FieldValidation::Strict);
        assert_eq!(ok.manager, "kubectl");
    }

    #[test]
    fn without_a_field_manager_the_user_agent_names_the_manager() {
        let mut h = HeaderMap::new();
        h.insert(
            header::USER_AGENT,
            HeaderValue::from_static("kubectl/v1.33.0 (linux/amd64) kubernetes/abc"),
        );
        let o = WriteOptions::parse(&q(&[]), &h, WriteVerb::Update, false).expect("valid");
        assert_eq!(o.manager, "kubectl");
        let rt = resources::find("apps", "v1", "deployments").expect("deployments");
        let m = o.manager_for(rt, true);
        assert_eq!(m.api_version, "apps/v1");
        assert_eq!(m.subresource.as_deref(), Some("status"));
    }

    #[test]
    fn warnings_are_quoted_as_kube_quotes_them() {
        assert_eq!(
            warning_value("unknown field \"spec.foo\""),
            "299 - \"unknown field \\\"spec.foo\\\"\""
        );
        let resp = with_warnings(
            Response::new(axum::body::Body::empty()),
            &["a".into(), "b".into(), "a".into()],
        );
        let all: Vec<_> = resp.headers().get_all(header::WARNING).iter().collect();
        assert_eq!(all, ["299 - \"a\"", "299 - \"b\""]);
    }

    #[test]
    fn a_create_body_loses_unknown_fields_and_strict_refuses_them() {
        let rt = resources::find("", "v1", "configmaps").expect("configmaps");
        let body =
            br#"{"metadata":{"name":"a"},"data":{"k":"v"},"dataa":{"x":"y"},"data":{"k":"w"}}"#;
        let (obj, warnings) =
            decode_object(rt, body, FieldValidation::Warn, WriteVerb::Create).expect("warns");
        assert_eq!(
            warnings,
            ["unknown field \"dataa\"", "duplicate field \"data\""]
        );
        assert!(obj.get("dataa").is_none());
        assert_eq!(obj["data"]["k"], "w");
        let err = decode_object(rt, body, FieldValidation::Strict, WriteVerb::Create)
            .expect_err("strict");
        assert_eq!(err.code(), axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(
            err.to_string(),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: \
             unknown field \"dataa\", duplicate field \"data\""
        );
    }
}

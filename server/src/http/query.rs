//! The query-parameter rules of the resource verbs: reading the query
//! string, kube's lenient booleans, the read mode of a get or list
//! (`resourceVersion`, `resourceVersionMatch`), pagination (`limit`,
//! `continue`), selectors and `dryRun` (`All` or nothing), each with the
//! `400`/`422` kube answers for an invalid one.

use std::collections::HashMap;

use axum::extract::Request;

use crate::http::status::ApiError;
use crate::kube::error::FieldCause;
use crate::kube::options::{DryRun, OptionsKind};
use crate::kube::paging::{ContinueToken, PageRequest};
use crate::kube::resources::ResourceType;
use crate::kube::selectors::Selectors;
use crate::kube::store::Freshness;

pub fn query_map(req: &Request) -> HashMap<String, String> {
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
pub fn query_bool(q: &HashMap<String, String>, key: &str) -> bool {
    match q.get(key) {
        None => false,
        Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
    }
}

/// The read mode of a get or list, from `resourceVersion` and
/// `resourceVersionMatch`, with kube's 400/422 for invalid combinations:
/// unset = most recent; `0` = any; `N` = not older than `N`, or exactly `N`
/// with `Exact` (and, as kube does, for a paginated list without a match).
pub fn freshness(q: &HashMap<String, String>, list: bool) -> Result<Freshness, ApiError> {
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
/// `limit` and `continue`; a continue token with a resourceVersion other
/// than "" or "0" is the 400 kube answers.
pub fn page_request(q: &HashMap<String, String>) -> Result<PageRequest, ApiError> {
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

/// `labelSelector` and `fieldSelector` of a list, watch or
/// deletecollection.
pub fn selectors(
    rt: &'static ResourceType,
    q: &HashMap<String, String>,
) -> Result<Selectors, ApiError> {
    Ok(Selectors::parse(
        rt,
        q.get("labelSelector").map(String::as_str),
        q.get("fieldSelector").map(String::as_str),
    )?)
}

/// `dryRun` of a write verb (`verb` names its options kind): `All` is a
/// dry run, absent or empty a real write, anything else kube's `422`.
pub fn dry_run(q: &HashMap<String, String>, verb: OptionsKind) -> Result<DryRun, ApiError> {
    let values = q.get("dryRun").map(std::slice::from_ref).unwrap_or(&[]);
    Ok(DryRun::parse(values, verb)?)
}

#[cfg(test)]
mod tests {
    use super::*;

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

/// Property tests: whatever query a client sends, the rules answer a value
/// or a client error (`4xx`), never a panic or a `5xx`.
#[cfg(test)]
mod proptests {
    use axum::body::Body;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::fuzz::{self, assert_client_error};
    use crate::http::table;
    use crate::kube::resources;

    proptest! {
        #![proptest_config(fuzz::config())]

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
            for rt in resources::RESOURCES.iter() {
                match selectors(rt, &q) {
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

    }
}

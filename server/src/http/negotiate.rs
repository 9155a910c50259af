//! Content negotiation: JSON objects, or a `meta.k8s.io` Table when the
//! client asks for one (kubectl get). kubestore does not speak protobuf: a
//! client that accepts nothing else gets `406`.

use axum::http::{header, HeaderMap};

use crate::http::status::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendering {
    Json,
    Table,
}

/// Picks the first acceptable rendering from the `Accept` header, in the
/// client's order.
pub fn rendering(headers: &HeaderMap) -> Result<Rendering, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Rendering::Json);
    };
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let essence = parts.next().unwrap_or("").to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let param = |k: &str| {
            params
                .iter()
                .find(|(pk, _)| pk == k)
                .map(|(_, v)| v.as_str())
        };
        match essence.as_str() {
            "application/json" | "application/*" | "*/*" => match param("as") {
                None => return Ok(Rendering::Json),
                Some("Table")
                    if param("g") == Some("meta.k8s.io")
                        && matches!(param("v"), Some("v1") | Some("v1beta1")) =>
                {
                    return Ok(Rendering::Table)
                }
                Some(_) => continue,
            },
            "" => return Ok(Rendering::Json),
            _ => continue,
        }
    }
    Err(ApiError::NotAcceptable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_accept(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static(v));
        h
    }

    #[test]
    fn kubectl_get_gets_a_table_and_others_json() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            rendering(&with_accept(kubectl)).expect("ok"),
            Rendering::Table
        );
        assert_eq!(
            rendering(&with_accept("application/json")).expect("ok"),
            Rendering::Json
        );
        assert_eq!(rendering(&HeaderMap::new()).expect("ok"), Rendering::Json);
        assert_eq!(
            rendering(&with_accept(
                "application/vnd.kubernetes.protobuf,application/json"
            ))
            .expect("ok"),
            Rendering::Json
        );
        assert!(rendering(&with_accept("application/vnd.kubernetes.protobuf")).is_err());
    }
}

//! Content negotiation: JSON objects, a `meta.k8s.io` Table when the
//! client asks for one (kubectl get), kube's protobuf for built-in kinds,
//! or YAML. A client that accepts none of them gets `406`.

use axum::http::{header, HeaderMap};

use crate::http::protobuf;
use crate::http::status::ApiError;
use crate::kube::resources::ResourceType;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendering {
    Json,
    Table,
    /// `application/yaml`: objects and lists (not watch streams, which
    /// kube does not serve as YAML).
    Yaml,
    /// `application/vnd.kubernetes.protobuf`; `or_json` when the client
    /// also accepts JSON (used for custom resources, which have no
    /// protobuf form).
    Protobuf {
        or_json: bool,
    },
}

impl Rendering {
    /// The rendering of a response about `rt`: protobuf falls back to
    /// JSON for a custom resource, or is `406` if the client takes only
    /// protobuf.
    pub fn for_type(self, rt: &ResourceType) -> Result<Rendering, ApiError> {
        match self {
            Rendering::Protobuf { or_json } if rt.custom.is_some() => {
                if or_json {
                    Ok(Rendering::Json)
                } else {
                    Err(ApiError::NotAcceptable)
                }
            }
            other => Ok(other),
        }
    }
}

/// Picks the first acceptable rendering from the `Accept` header, in the
/// client's order.
pub fn rendering(headers: &HeaderMap) -> Result<Rendering, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Rendering::Json);
    };
    let medias: Vec<&str> = accept.split(',').collect();
    for (i, media) in medias.iter().enumerate() {
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
            protobuf::MEDIA_TYPE if param("as").is_none() => {
                let or_json = medias[i + 1..].iter().any(|m| {
                    let essence = m.split(';').next().unwrap_or("").trim();
                    matches!(essence, "application/json" | "application/*" | "*/*")
                });
                return Ok(Rendering::Protobuf { or_json });
            }
            "application/yaml" if param("as").is_none() => return Ok(Rendering::Yaml),
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
                "application/vnd.kubernetes.protobuf, application/json"
            ))
            .expect("ok"),
            Rendering::Protobuf { or_json: true }
        );
        assert_eq!(
            rendering(&with_accept("application/vnd.kubernetes.protobuf")).expect("ok"),
            Rendering::Protobuf { or_json: false }
        );
        assert_eq!(
            rendering(&with_accept("application/yaml")).expect("ok"),
            Rendering::Yaml
        );
        assert!(rendering(&with_accept("application/cbor")).is_err());
    }
}

//! The HTTP side: negotiation, ETags and `304`, the hash in a v3 URL.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};

use super::*;
use crate::kube::resources::TypeSet;

fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(k.clone(), HeaderValue::from_static(v));
    }
    h
}

#[test]
fn media_types_are_negotiated_in_the_clients_order() {
    let v2 = ["application/json", V2_PROTOBUF, V2_PROTOBUF_LEGACY];
    let client_go = headers(&[(
        header::ACCEPT,
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    )]);
    assert_eq!(negotiate(&client_go, &v2).ok(), Some(V2_PROTOBUF));
    assert_eq!(
        negotiate(&HeaderMap::new(), &v2).ok(),
        Some("application/json")
    );
    let both = headers(&[(
        header::ACCEPT,
        "application/json, application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    )]);
    assert_eq!(negotiate(&both, &v2).ok(), Some("application/json"));
    let any = headers(&[(header::ACCEPT, "*/*")]);
    assert_eq!(
        negotiate(&any, &["application/json"]).ok(),
        Some("application/json")
    );
    let v3_protobuf = headers(&[(
        header::ACCEPT,
        "application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
    )]);
    assert!(matches!(
        negotiate(&v3_protobuf, &["application/json"]),
        Err(OpenApiError::NotAcceptable)
    ));
}

#[test]
fn a_group_version_answers_with_etag_304_redirect_and_immutable_caching() {
    let docs = Documents::build(served::served(&TypeSet::builtin()));
    let hash = docs.groups["apis/apps/v1"].hash.clone();

    let plain = gv_response(&docs, "apis/apps/v1", None, &HeaderMap::new()).expect("served");
    assert_eq!(plain.status(), StatusCode::OK);
    assert_eq!(plain.headers()[header::CONTENT_TYPE], "application/json");
    assert_eq!(
        plain.headers()[header::ETAG],
        format!("\"{hash}\"").as_str()
    );
    assert!(plain.headers().get(header::CACHE_CONTROL).is_none());

    let query = format!("hash={hash}");
    let pinned =
        gv_response(&docs, "apis/apps/v1", Some(&query), &HeaderMap::new()).expect("served");
    assert_eq!(pinned.status(), StatusCode::OK);
    assert_eq!(pinned.headers()[header::CACHE_CONTROL], "public, immutable");
    assert!(pinned.headers().get(header::EXPIRES).is_some());

    let stale =
        gv_response(&docs, "apis/apps/v1", Some("hash=0123"), &HeaderMap::new()).expect("redirect");
    assert_eq!(stale.status(), StatusCode::MOVED_PERMANENTLY);
    assert_eq!(
        stale.headers()[header::LOCATION],
        format!("/openapi/v3/apis/apps/v1?hash={hash}").as_str()
    );

    let mut cached = HeaderMap::new();
    cached.insert(
        header::IF_NONE_MATCH,
        HeaderValue::from_str(&format!("\"{hash}\"")).expect("header"),
    );
    let not_modified = gv_response(&docs, "apis/apps/v1", None, &cached).expect("served");
    assert_eq!(not_modified.status(), StatusCode::NOT_MODIFIED);

    assert!(matches!(
        gv_response(
            &docs,
            "apis/nothing.example.com/v1",
            None,
            &HeaderMap::new()
        ),
        Err(OpenApiError::NotFound)
    ));
    let protobuf_only = headers(&[(
        header::ACCEPT,
        "application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
    )]);
    assert!(matches!(
        gv_response(&docs, "apis/apps/v1", None, &protobuf_only),
        Err(OpenApiError::NotAcceptable)
    ));
}

#[test]
fn v2_is_json_or_protobuf_with_one_etag() {
    let docs = Documents::build(served::served(&TypeSet::builtin()));
    let json = v2_response(&docs, &headers(&[(header::ACCEPT, "application/json")])).expect("json");
    assert_eq!(json.headers()[header::CONTENT_TYPE], "application/json");
    let etag = json.headers()[header::ETAG].clone();

    let client_go = headers(&[(
        header::ACCEPT,
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    )]);
    let pb = v2_response(&docs, &client_go).expect("protobuf");
    assert_eq!(pb.status(), StatusCode::OK);
    // Without the '@': Go's mime parser refuses it in a Content-Type.
    assert_eq!(
        pb.headers()[header::CONTENT_TYPE],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    assert_eq!(pb.headers()[header::ETAG], etag);

    let mut cached = client_go.clone();
    cached.insert(header::IF_NONE_MATCH, etag);
    assert_eq!(
        v2_response(&docs, &cached).expect("304").status(),
        StatusCode::NOT_MODIFIED
    );
    assert!(matches!(
        v2_response(&docs, &headers(&[(header::ACCEPT, "application/yaml")])),
        Err(OpenApiError::NotAcceptable)
    ));
}

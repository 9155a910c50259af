//! Hostile and extreme inputs get a clear answer, never a panic, a 500 or
//! a hang: out-of-range numbers in query parameters, a JSON Patch of more
//! operations than kube-apiserver allows, lease TTLs beyond etcd's cap.

use std::time::Duration;

use kubestore_tests::TestCluster;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_numbers_and_oversized_patches_are_answered_not_crashed_on() {
    let c = TestCluster::new(1).await.expect("node");
    let kube = c.kube(1);
    let created = kube
        .create_configmap("default", "target", "1")
        .await
        .expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);

    // A deadline beyond the clock's range is capped, not overflowed.
    let mut watch = kube
        .watch(&format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={}&timeoutSeconds={}",
            created.rv(),
            u64::MAX
        ))
        .await
        .expect("the watch opens");
    let later = kube
        .create_configmap("default", "later", "1")
        .await
        .expect("create");
    assert_eq!(later.status, StatusCode::CREATED, "{}", later.text);
    let event = watch
        .next_event(Duration::from_secs(10))
        .await
        .expect("an event")
        .expect("the stream is open");
    assert_eq!(event["object"]["metadata"]["name"], "later");

    for (query, want) in [
        (format!("limit={}", i64::MAX), StatusCode::OK),
        (format!("limit={}", u64::MAX), StatusCode::BAD_REQUEST),
        ("limit=-5".to_string(), StatusCode::OK),
        (
            format!("watch=1&timeoutSeconds=-1&resourceVersion={}", created.rv()),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let r = kube
            .get(&format!("/api/v1/namespaces/default/configmaps?{query}"))
            .await
            .expect("get");
        assert_eq!(r.status, want, "{query}: {}", r.text);
    }

    // More operations than kube-apiserver allows in one JSON Patch.
    let ops: Vec<_> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/data/value", "value": "1"}))
        .collect();
    let r = kube
        .request(
            reqwest::Method::PATCH,
            "/api/v1/namespaces/default/configmaps/target",
            Some((
                serde_json::to_vec(&ops).expect("encode"),
                "application/json-patch+json",
            )),
        )
        .await
        .expect("patch");
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.text);
    assert_eq!(r.body["reason"], "RequestEntityTooLarge", "{}", r.text);

    // etcd: a TTL beyond etcd's cap is refused with its error.
    let mut etcd = c.etcd(1).await.expect("etcd client");
    match etcd.lease_grant(i64::MAX, None).await {
        Err(etcd_client::Error::GRpcStatus(s)) => {
            assert_eq!(s.code(), tonic::Code::OutOfRange, "{s:?}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    c.shutdown().await;
}

//! Health that tells the truth and overload that is refused, not queued:
//! `/readyz` fails (naming the check) on a node cut off from its leader,
//! and on a leader cut off from its quorum, while `/livez` holds; requests
//! over the in-flight limit get `429` with `Retry-After` on REST and
//! `ResourceExhausted` on the etcd API.

use std::time::Duration;

use kubestore_tests::{ClusterOptions, TestCluster};
use reqwest::StatusCode;

/// Status and body of a plain GET.
async fn get(url: &str) -> (StatusCode, String) {
    let resp = reqwest::get(url).await.expect("request");
    let status = resp.status();
    (status, resp.text().await.expect("body"))
}

/// Polls `url` until its status is `want` (state that changes with time
/// passing, such as an election timeout, has no event to await).
async fn wait_status(url: &str, want: StatusCode) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(url).await;
        if status == want {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url} stayed {status}, want {want}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_while_a_node_is_cut_off_and_liveness_holds() {
    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let follower = c.follower().await.expect("follower");
    let base = c.rest_url(follower);

    let body = wait_status(&format!("{base}/readyz?verbose"), StatusCode::OK).await;
    for check in [
        "ping",
        "storage",
        "raft-leader",
        "raft-applied",
        "watch-cache",
    ] {
        assert!(body.contains(&format!("[+]{check} ok")), "{body}");
    }
    assert!(body.ends_with("readyz check passed\n"), "{body}");

    c.isolate(follower, true).expect("isolate");
    let body = wait_status(&format!("{base}/readyz"), StatusCode::INTERNAL_SERVER_ERROR).await;
    assert!(
        body.contains("[-]raft-leader failed: reason withheld"),
        "{body}"
    );
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    let (status, _) = get(&format!("{base}/readyz/raft-leader")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let (status, body) = get(&format!("{base}/readyz?exclude=raft-leader")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = get(&format!("{base}/livez")).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    let (status, _) = get(&format!("{base}/livez/storage")).await;
    assert_eq!(status, StatusCode::OK);
    // Cut off is not dead: the Raft core still runs.
    let (status, body) = get(&format!("{base}/livez/raft")).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    let (status, _) = get(&format!("{base}/readyz/no-such-check")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    c.isolate(follower, false).expect("reconnect");
    wait_status(&format!("{base}/readyz"), StatusCode::OK).await;

    // A leader cut off from its quorum keeps its role for a while, but not
    // its readiness.
    c.isolate(leader, true).expect("isolate the leader");
    let body = wait_status(
        &format!("{}/readyz", c.rest_url(leader)),
        StatusCode::INTERNAL_SERVER_ERROR,
    )
    .await;
    assert!(body.contains("[-]raft-leader failed"), "{body}");
    c.isolate(leader, false).expect("reconnect the leader");
    wait_status(&format!("{}/readyz", c.rest_url(leader)), StatusCode::OK).await;
    c.shutdown().await;
}

/// The value of a `kubestore_requests_*{class="..."}` sample in `/metrics`.
async fn sample(base: &str, metric: &str, class: &str) -> u64 {
    let (_, text) = get(&format!("{base}/metrics")).await;
    let prefix = format!("{metric}{{class=\"{class}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_the_inflight_limit_are_refused_on_both_apis() {
    let options = ClusterOptions {
        max_requests_inflight: 1,
        max_mutating_requests_inflight: 1,
        ..ClusterOptions::default()
    };
    let c = TestCluster::with_options(1, options).await.expect("node");
    let base = c.rest_url(1);
    let kube = c.kube(1);
    // The namespace must exist before the slow write below.
    let warm = kube
        .create_configmap("default", "warm", "1")
        .await
        .expect("create");
    assert_eq!(warm.status, StatusCode::CREATED, "{}", warm.text);

    // One write held in flight by a slow state machine fills the budget.
    let raft = c.node(1).expect("in-process node").raft.clone();
    raft.store()
        .faults()
        .set_apply_delay(Duration::from_millis(3_000));
    let held = tokio::spawn({
        let kube = kube.clone();
        async move { kube.create_configmap("default", "held", "1").await }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sample(&base, "kubestore_requests_inflight", "mutating").await < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the held write never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let refused = kube
        .create_configmap("default", "refused", "1")
        .await
        .expect("create");
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.text
    );
    assert_eq!(
        refused.body["reason"], "TooManyRequests",
        "{}",
        refused.text
    );
    assert_eq!(refused.body["details"]["retryAfterSeconds"], 1);
    assert_eq!(
        refused
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let mut etcd = c.etcd(1).await.expect("etcd client");
    match etcd.put("/limits/refused", "1", None).await {
        Err(etcd_client::Error::GRpcStatus(s)) => {
            assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
            assert_eq!(s.message(), "etcdserver: too many requests");
        }
        other => panic!("expected ResourceExhausted, got {other:?}"),
    }
    // Reads have their own budget.
    let read = kube
        .get("/api/v1/namespaces/default/configmaps/warm")
        .await
        .expect("get");
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);

    raft.store().faults().set_apply_delay(Duration::ZERO);
    let held = held.await.expect("join").expect("create");
    assert_eq!(held.status, StatusCode::CREATED, "{}", held.text);
    assert!(sample(&base, "kubestore_requests_rejected_total", "mutating").await >= 2);
    let gone = kube
        .get("/api/v1/namespaces/default/configmaps/refused")
        .await
        .expect("get");
    assert_eq!(
        gone.status,
        StatusCode::NOT_FOUND,
        "a refused write was applied"
    );
    c.shutdown().await;
}

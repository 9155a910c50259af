//! Watch on a 3-node cluster: event order and content, resume on another
//! node, initial state, selector transitions, bookmarks, timeouts, and the
//! too-large error; many watches multiplexed on one HTTP/2 connection.

use std::time::Duration;

use kubestore_tests::{ClusterOptions, KubeClient, TestCluster};
use reqwest::StatusCode;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);
const CM: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_arrive_in_order_and_a_watch_resumes_on_another_node() {
    let c = TestCluster::new(3).await.expect("cluster");
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));
    let start = n2.get(CM).await.expect("list").rv();

    // Phase 1: watch through node 2 from the list's revision.
    let mut w = n2
        .watch(&format!("{CM}?watch=1&resourceVersion={start}"))
        .await
        .expect("watch");
    let created = n1
        .create_configmap("default", "w", "1")
        .await
        .expect("create");
    let mut obj = created.body.clone();
    obj["data"]["value"] = json!("2");
    let updated = n1.put(&format!("{CM}/w"), &obj).await.expect("update");
    let deleted = n3.delete(&format!("{CM}/w")).await.expect("delete");
    assert_eq!(deleted.status, StatusCode::OK);

    let added = w.next_event(WAIT).await.expect("event").expect("open");
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["kind"], "ConfigMap");
    assert_eq!(
        added["object"]["metadata"]["resourceVersion"],
        created.rv().to_string()
    );
    let modified = w.next_event(WAIT).await.expect("event").expect("open");
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["data"]["value"], "2");
    assert_eq!(
        modified["object"]["metadata"]["resourceVersion"],
        updated.rv().to_string()
    );
    let gone = w.next_event(WAIT).await.expect("event").expect("open");
    assert_eq!(gone["type"], "DELETED");
    assert_eq!(
        gone["object"]["data"]["value"], "2",
        "DELETED carries the last state"
    );
    let delete_rv: u64 = gone["object"]["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("rv");
    assert!(
        delete_rv > updated.rv(),
        "DELETED carries the deletion's revision"
    );

    // Phase 2: resume on node 3 from the MODIFIED revision: only what came after.
    let mut resumed = n3
        .watch(&format!("{CM}?watch=true&resourceVersion={}", updated.rv()))
        .await
        .expect("resume");
    let first = resumed
        .next_event(WAIT)
        .await
        .expect("event")
        .expect("open");
    assert_eq!(first["type"], "DELETED");
    assert_eq!(
        first["object"]["metadata"]["resourceVersion"],
        delete_rv.to_string()
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_state_selectors_bookmarks_timeout_and_too_large() {
    let c = TestCluster::with_options(
        3,
        ClusterOptions {
            watch_bookmark_interval_seconds: 1,
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster");
    let (n1, n2) = (c.kube(1), c.kube(2));
    let existing = n1
        .create_configmap("default", "existing", "x")
        .await
        .expect("create");

    // Without a resourceVersion: the current state as ADDED, then changes.
    let mut w = n2.watch(&format!("{CM}?watch=True")).await.expect("watch");
    let first = w.next_event(WAIT).await.expect("event").expect("open");
    assert_eq!(
        (
            first["type"].as_str(),
            first["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("existing"))
    );
    assert_eq!(
        first["object"]["metadata"]["resourceVersion"],
        existing.rv().to_string()
    );

    // Selector transitions: in → ADDED, out → DELETED, back → ADDED.
    let mut sel = n2
        .watch(&format!(
            "{CM}?watch=1&labelSelector=app%3Dweb&resourceVersion={}",
            existing.rv()
        ))
        .await
        .expect("watch");
    let body = |app: &str| json!({"metadata": {"name": "moving", "labels": {"app": app}}});
    let r = n1.post(CM, &body("web")).await.expect("create");
    assert_eq!(r.status, StatusCode::CREATED);
    let mut obj = r.body.clone();
    obj["metadata"]["labels"]["app"] = json!("db");
    let out = n1.put(&format!("{CM}/moving"), &obj).await.expect("update");
    let mut obj = out.body.clone();
    obj["metadata"]["labels"]["app"] = json!("web");
    n1.put(&format!("{CM}/moving"), &obj).await.expect("update");
    let kinds: Vec<String> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            let e = sel.next_event(WAIT).await.expect("event").expect("open");
            v.push(e["type"].as_str().unwrap_or_default().to_string());
        }
        v
    };
    assert_eq!(kinds, vec!["ADDED", "DELETED", "ADDED"]);

    // Bookmarks on a quiet type carry the node's latest revision.
    let latest = n1.get(CM).await.expect("list").rv();
    let mut b = n2
        .watch(&format!("/api/v1/namespaces/default/secrets?watch=1&allowWatchBookmarks=true&resourceVersion={latest}&timeoutSeconds=5"))
        .await
        .expect("watch");
    let bookmark = b.next_event(WAIT).await.expect("event").expect("open");
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "Secret");
    assert_eq!(bookmark["object"]["apiVersion"], "v1");
    assert_eq!(
        bookmark["object"]["metadata"]["resourceVersion"],
        latest.to_string()
    );
    // timeoutSeconds ends the stream.
    while let Some(e) = b.next_event(WAIT).await.expect("stream ends in time") {
        assert_eq!(e["type"], "BOOKMARK");
    }

    // A revision the cluster has not reached: an ERROR event with 504, after HTTP 200.
    let mut far = n2
        .watch(&format!("{CM}?watch=1&resourceVersion={}", latest + 1000))
        .await
        .expect("watch");
    let err = far.next_event(WAIT).await.expect("event").expect("open");
    assert_eq!(err["type"], "ERROR");
    assert_eq!(err["object"]["code"], 504);
    assert_eq!(err["object"]["reason"], "Timeout");
    assert!(err["object"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("Too large resource version")));

    // Parameter errors are plain HTTP errors.
    let bad = n2
        .get(&format!("{CM}?watch=1&resourceVersion=x"))
        .await
        .expect("bad");
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    for (query, text) in [
        (
            "sendInitialEvents=true",
            "requires setting resourceVersionMatch to NotOlderThan",
        ),
        (
            "sendInitialEvents=true&resourceVersionMatch=Exact&resourceVersion=1",
            "supported values: \"NotOlderThan\"",
        ),
        (
            "resourceVersionMatch=NotOlderThan&resourceVersion=1",
            "unless sendInitialEvents is provided",
        ),
    ] {
        let r = n2
            .get(&format!("{CM}?watch=1&{query}"))
            .await
            .expect("invalid");
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            r.text
        );
        assert!(
            r.body["message"].as_str().is_some_and(|m| m.contains(text)),
            "{query}: {}",
            r.text
        );
    }

    // A streaming list: the state in key order, the initial-events-end bookmark, then changes.
    let mut stream = n2
        .watch(&format!("{CM}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"))
        .await
        .expect("streaming list");
    let listed = n2.get(CM).await.expect("list");
    let mut initial = Vec::new();
    let end = loop {
        let e = stream.next_event(WAIT).await.expect("event").expect("open");
        if e["type"] == "BOOKMARK" {
            break e;
        }
        assert_eq!(e["type"], "ADDED");
        initial.push(
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    };
    assert_eq!(
        initial,
        listed.names(),
        "initial events are the state, in key order"
    );
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let end_rv: u64 = end["object"]["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("rv");
    assert!(end_rv >= listed.rv());
    let live = n1
        .create_configmap("default", "after-stream", "1")
        .await
        .expect("create");
    // (This cluster sends a periodic bookmark every second: skip those.)
    let next = loop {
        let e = stream.next_event(WAIT).await.expect("event").expect("open");
        if e["type"] != "BOOKMARK" {
            break e;
        }
    };
    assert_eq!(next["type"], "ADDED");
    assert_eq!(
        next["object"]["metadata"]["resourceVersion"],
        live.rv().to_string()
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_runs_through_the_log_and_makes_old_watches_expire() {
    let c = TestCluster::new(3).await.expect("cluster");
    let (n1, n3) = (c.kube(1), c.kube(3));
    let first = n1
        .create_configmap("default", "c0", "0")
        .await
        .expect("create")
        .rv();
    let mut last = first;
    for i in 1..5 {
        last = n1
            .create_configmap("default", &format!("c{i}"), "x")
            .await
            .expect("create")
            .rv();
    }

    // Phase 1: compact on demand through one node; every node compacts to the same revision.
    let url = format!("{}/debug/compact?revision={last}", c.rest_url(2));
    let resp = reqwest::Client::new()
        .post(&url)
        .send()
        .await
        .expect("compact");
    assert_eq!(resp.status(), StatusCode::OK);
    c.wait_for("every node compacted", WAIT, |s| {
        s.iter().all(|x| x["compacted_revision"] == last)
    })
    .await
    .expect("compacted everywhere");
    let again = reqwest::Client::new()
        .post(format!("{}/debug/compact?revision={first}", c.rest_url(1)))
        .send()
        .await
        .expect("compact again");
    assert_eq!(
        again.status(),
        StatusCode::BAD_REQUEST,
        "compacting backwards is refused"
    );

    // Phase 2: a watch from before the compaction point: HTTP 200, then ERROR 410 Expired.
    let mut old = n3
        .watch(&format!("{CM}?watch=1&resourceVersion={first}"))
        .await
        .expect("watch");
    let err = old.next_event(WAIT).await.expect("event").expect("open");
    assert_eq!(err["type"], "ERROR");
    assert_eq!(err["object"]["code"], 410);
    assert_eq!(err["object"]["reason"], "Expired");
    assert!(
        old.next_event(WAIT).await.expect("end").is_none(),
        "the stream ends after the error"
    );
    // From the compaction point itself the watch works.
    let mut ok = n3
        .watch(&format!("{CM}?watch=1&resourceVersion={last}"))
        .await
        .expect("watch");
    let created = n1
        .create_configmap("default", "after", "1")
        .await
        .expect("create");
    let e = ok.next_event(WAIT).await.expect("event").expect("open");
    assert_eq!(
        e["object"]["metadata"]["resourceVersion"],
        created.rv().to_string()
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_compacts_periodically_by_age() {
    let c = TestCluster::with_options(
        3,
        ClusterOptions {
            history_retention_seconds: 1,
            compaction_interval_seconds: 1,
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster");
    let written = c
        .kube(1)
        .create_configmap("default", "aging", "1")
        .await
        .expect("create")
        .rv();
    c.wait_compacted(written, Duration::from_secs(30))
        .await
        .expect("periodic compaction past the write, by age");
    c.shutdown().await;
}

/// (type, name, resourceVersion) of a watch event.
fn event_row(e: &serde_json::Value) -> (String, String, u64) {
    let meta = &e["object"]["metadata"];
    (
        e["type"].as_str().unwrap_or_default().to_string(),
        meta["name"].as_str().unwrap_or_default().to_string(),
        meta["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("event has a resourceVersion"),
    )
}

/// Watch streams handed from node to node while writers run: the
/// concatenation equals the revision log exactly (no gap, duplicate or
/// reorder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumed_across_nodes_under_writers_equals_the_revision_log() {
    let c = TestCluster::new(3).await.expect("cluster");
    let start = c.kube(1).get(CM).await.expect("list").rv();

    // Phase 1: 4 writers through all nodes: creates, then updates and deletes.
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let clients: Vec<_> = c.ids().iter().map(|id| c.kube(*id)).collect();
        writers.push(tokio::spawn(async move {
            for i in 0..30u64 {
                let n = &clients[((w + i) % 3) as usize];
                let name = format!("r{w}-{}", i % 10);
                let r = n
                    .create_configmap("default", &name, &i.to_string())
                    .await
                    .expect("create");
                if r.status == StatusCode::CONFLICT {
                    let del = n.delete(&format!("{CM}/{name}")).await.expect("delete");
                    assert_eq!(del.status, StatusCode::OK, "{}", del.text);
                } else {
                    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
                }
            }
        }));
    }

    // Phase 2: follow with a watch that moves to the next node every 25 events.
    let mut seen: Vec<(String, String, u64)> = Vec::new();
    let mut last = start;
    let mut node = 0usize;
    let writers_done = async {
        for w in writers {
            w.await.expect("writer");
        }
    };
    tokio::pin!(writers_done);
    let mut done = false;
    let mut final_rv = None;
    loop {
        let id = c.ids()[node % 3];
        let mut w = c
            .kube(id)
            .watch(&format!("{CM}?watch=1&resourceVersion={last}"))
            .await
            .expect("watch");
        let mut taken = 0;
        while taken < 25 {
            if !done {
                tokio::select! {
                    _ = &mut writers_done => {
                        done = true;
                        final_rv = Some(c.kube(1).get(CM).await.expect("list").rv());
                    }
                    e = w.next_event(WAIT) => {
                        let row = event_row(&e.expect("event").expect("open"));
                        last = row.2;
                        seen.push(row);
                        taken += 1;
                    }
                }
            } else {
                if Some(last) >= final_rv {
                    break;
                }
                let row = event_row(&w.next_event(WAIT).await.expect("event").expect("open"));
                last = row.2;
                seen.push(row);
                taken += 1;
            }
        }
        if done && Some(last) >= final_rv {
            break;
        }
        node += 1;
    }

    // Phase 3: the revision log of node 1, as watch events.
    let store = c.node(1).expect("in-process").raft.store().clone();
    let expected: Vec<(String, String, u64)> = store
        .events_after(kubestore_storage::Revision(start), 100_000)
        .expect("events")
        .into_iter()
        .flat_map(|(rev, events)| {
            events
                .iter()
                .map(|e| {
                    let key = String::from_utf8_lossy(&e.kv.key).into_owned();
                    let kind = match (e.kind, &e.prev_kv) {
                        (kubestore_storage::EventKind::Delete, _) => "DELETED",
                        (_, None) => "ADDED",
                        (_, Some(_)) => "MODIFIED",
                    };
                    (
                        kind.to_string(),
                        key.rsplit('/').next().unwrap_or_default().to_string(),
                        rev.0,
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        expected.len() >= 120,
        "writers wrote {} events",
        expected.len()
    );
    assert_eq!(
        seen, expected,
        "the resumed streams differ from the revision log"
    );
    c.shutdown().await;
}

/// A watcher that stops reading does not hold up writes or other watchers,
/// and when it reads again it catches up from history without a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_blocks_no_one_and_catches_up() {
    let c = TestCluster::new(3).await.expect("cluster");
    let (n1, n2) = (c.kube(1), c.kube(2));
    let start = n1.get(CM).await.expect("list").rv();
    let mut slow = n2
        .watch(&format!("{CM}?watch=1&resourceVersion={start}"))
        .await
        .expect("slow");
    let mut fast = n2
        .watch(&format!("{CM}?watch=1&resourceVersion={start}"))
        .await
        .expect("fast");

    // 200 objects of 32 KiB: far more than the slow watcher's queue and socket buffers.
    let payload = "x".repeat(32 * 1024);
    for i in 0..200 {
        let body = json!({"metadata": {"name": format!("big-{i:03}")}, "data": {"v": payload}});
        let r = n1.post(CM, &body).await.expect("create");
        assert_eq!(
            r.status,
            StatusCode::CREATED,
            "writes must not wait for a stalled watcher"
        );
    }
    for i in 0..200 {
        let e = fast
            .next_event(WAIT)
            .await
            .expect("fast watcher is not held up")
            .expect("open");
        assert_eq!(e["object"]["metadata"]["name"], format!("big-{i:03}"));
    }
    // The stalled watcher now reads everything, in order, nothing missing.
    for i in 0..200 {
        let e = slow
            .next_event(WAIT)
            .await
            .expect("slow watcher catches up")
            .expect("open");
        assert_eq!(e["object"]["metadata"]["name"], format!("big-{i:03}"));
    }
    c.shutdown().await;
}

/// client-go opens every watch of a client as a stream of one HTTP/2
/// connection. The server allows kube-apiserver's 1,000 streams per
/// connection, so 300 watches (more than hyper's default of 200) all open
/// on one connection and all see the next write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_watches_share_one_http2_connection() {
    const WATCHES: usize = 300;
    let c = TestCluster::new(1).await.expect("cluster");
    let http = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("an HTTP/2 client");
    let n = KubeClient::new(http, c.rest_url(1));
    let start = n.get(CM).await.expect("list").rv();
    let mut watches = Vec::with_capacity(WATCHES);
    for i in 0..WATCHES {
        let w = tokio::time::timeout(
            WAIT,
            n.watch(&format!("{CM}?watch=1&resourceVersion={start}")),
        )
        .await
        .unwrap_or_else(|_| panic!("watch {i} found no free stream on the connection"))
        .expect("watch");
        watches.push(w);
    }
    let created = n
        .create_configmap("default", "multiplexed", "1")
        .await
        .expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    for (i, w) in watches.iter_mut().enumerate() {
        let e = w.next_event(WAIT).await.expect("event").expect("open");
        assert_eq!(e["type"], "ADDED", "watch {i}: {e}");
        assert_eq!(e["object"]["metadata"]["name"], "multiplexed", "watch {i}");
    }
    c.shutdown().await;
}

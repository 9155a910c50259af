//! The Kubernetes REST API of a 3-node in-process cluster: verbs through
//! every node, server-set fields, and kube's exact errors for bad input.

use kubestore_tests::{ClusterOptions, TestCluster};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

async fn cluster() -> TestCluster {
    TestCluster::new(3).await.expect("cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_through_different_nodes_with_optimistic_concurrency() {
    let c = cluster().await;
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));

    // Phase 1: create through node 1; server-set fields are filled in.
    let created = n1
        .create_configmap("default", "app-config", "v1")
        .await
        .expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let meta = &created.body["metadata"];
    assert!(meta["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert!(meta["creationTimestamp"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z')));
    let rv1 = created.rv();
    assert!(rv1 > 0);

    // Phase 2: a most-recent read on the other nodes sees it at the same revision.
    for n in [&n2, &n3] {
        let got = n
            .get("/api/v1/namespaces/default/configmaps/app-config")
            .await
            .expect("get");
        assert_eq!(got.status, StatusCode::OK, "{}", got.text);
        assert_eq!(got.rv(), rv1);
        assert_eq!(got.body["data"]["value"], "v1");
        assert_eq!(got.body["kind"], "ConfigMap");
    }

    // Phase 3: update through node 2 with the current resourceVersion.
    let mut obj = created.body.clone();
    obj["data"]["value"] = json!("v2");
    let updated = n2
        .put("/api/v1/namespaces/default/configmaps/app-config", &obj)
        .await
        .expect("put");
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.text);
    assert!(updated.rv() > rv1);
    assert_eq!(
        updated.body["metadata"]["uid"], meta["uid"],
        "uid is immutable"
    );

    // Phase 4: the same stale resourceVersion again is a 409 Conflict.
    let stale = n3
        .put("/api/v1/namespaces/default/configmaps/app-config", &obj)
        .await
        .expect("put");
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert_eq!(stale.body["reason"], "Conflict");
    assert_eq!(
        stale.body["message"],
        "Operation cannot be fulfilled on configmaps \"app-config\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // Phase 5: lists (one namespace and all namespaces) from node 3.
    let list = n3
        .get("/api/v1/namespaces/default/configmaps")
        .await
        .expect("list");
    assert_eq!(list.body["kind"], "ConfigMapList");
    assert_eq!(list.names(), vec!["app-config"]);
    assert!(list.rv() >= updated.rv());
    let all = n3.get("/api/v1/configmaps").await.expect("list all");
    assert_eq!(all.names(), vec!["app-config"]);
    let empty = n1
        .get("/api/v1/namespaces/kube-system/configmaps")
        .await
        .expect("empty list");
    assert_eq!(
        empty.body["items"],
        json!([]),
        "lists always carry items: []"
    );

    // Phase 6: delete through node 3; gone everywhere.
    let deleted = n3
        .delete("/api/v1/namespaces/default/configmaps/app-config")
        .await
        .expect("delete");
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    for n in [&n1, &n2, &n3] {
        let got = n
            .get("/api/v1/namespaces/default/configmaps/app-config")
            .await
            .expect("get");
        assert_eq!(got.status, StatusCode::NOT_FOUND);
        assert_eq!(got.body["reason"], "NotFound");
        assert_eq!(got.body["message"], "configmaps \"app-config\" not found");
        assert_eq!(
            got.body["details"],
            json!({"name": "app-config", "kind": "configmaps"})
        );
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_generate_name_generation_and_deletecollection() {
    let c = cluster().await;
    let n1 = c.kube(1);

    // The system namespaces exist from the start, on every node.
    for id in c.ids() {
        let names = c
            .kube(id)
            .get("/api/v1/namespaces")
            .await
            .expect("list")
            .names();
        for ns in ["default", "kube-public", "kube-system"] {
            assert!(
                names.contains(&ns.to_string()),
                "node {id} lacks {ns}: {names:?}"
            );
        }
    }
    let forbidden = n1
        .delete("/api/v1/namespaces/default")
        .await
        .expect("delete default");
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);

    // Creating in a namespace that does not exist is rejected as kube does.
    let orphan = n1
        .create_configmap("nowhere", "x", "1")
        .await
        .expect("create");
    assert_eq!(orphan.status, StatusCode::NOT_FOUND);
    assert_eq!(orphan.body["message"], "namespaces \"nowhere\" not found");

    let ns = n1
        .post(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "team-a"}}),
        )
        .await
        .expect("ns");
    assert_eq!(ns.status, StatusCode::CREATED, "{}", ns.text);
    assert_eq!(ns.body["status"]["phase"], "Active");

    // generateName.
    let gen = n1
        .post(
            "/api/v1/namespaces/team-a/configmaps",
            &json!({"metadata": {"generateName": "cfg-"}}),
        )
        .await
        .expect("generateName");
    assert_eq!(gen.status, StatusCode::CREATED, "{}", gen.text);
    let name = gen.body["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    assert!(name.starts_with("cfg-") && name.len() == 9, "{name}");

    // generation starts at 1 and moves only when spec changes.
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                     "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                              "template": {"metadata": {"labels": {"app": "web"}},
                                           "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    let created = n1
        .post("/apis/apps/v1/namespaces/team-a/deployments", &dep)
        .await
        .expect("deploy");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["metadata"]["generation"], 1);
    let mut same = created.body.clone();
    same["metadata"]["labels"] = json!({"a": "b"});
    let same = n1
        .put("/apis/apps/v1/namespaces/team-a/deployments/web", &same)
        .await
        .expect("put");
    assert_eq!(same.body["metadata"]["generation"], 1, "{}", same.text);
    let mut changed = same.body.clone();
    changed["spec"]["replicas"] = json!(3);
    let changed = n1
        .put("/apis/apps/v1/namespaces/team-a/deployments/web", &changed)
        .await
        .expect("put");
    assert_eq!(
        changed.body["metadata"]["generation"], 2,
        "{}",
        changed.text
    );

    // Leases live in their group; label selectors filter deletecollection.
    for (name, tier) in [("l1", "a"), ("l2", "a"), ("l3", "b")] {
        let lease = json!({"metadata": {"name": name, "labels": {"tier": tier}}, "spec": {"holderIdentity": name}});
        let r = n1
            .post(
                "/apis/coordination.k8s.io/v1/namespaces/team-a/leases",
                &lease,
            )
            .await
            .expect("lease");
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    let gone = n1
        .request(
            Method::DELETE,
            "/apis/coordination.k8s.io/v1/namespaces/team-a/leases?labelSelector=tier%3Da",
            None,
        )
        .await
        .expect("deletecollection");
    assert_eq!(gone.status, StatusCode::OK, "{}", gone.text);
    let mut deleted = gone.names();
    deleted.sort();
    assert_eq!(deleted, vec!["l1", "l2"]);
    let left = c
        .kube(2)
        .get("/apis/coordination.k8s.io/v1/namespaces/team-a/leases")
        .await
        .expect("list");
    assert_eq!(left.names(), vec!["l3"]);

    // Namespaces have no deletecollection (405, as kube); deleting one
    // cascades.
    let doomed = n1
        .post(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "doomed", "labels": {"x": "y"}}}),
        )
        .await
        .expect("ns");
    assert_eq!(doomed.status, StatusCode::CREATED);
    assert_eq!(
        n1.create_configmap("doomed", "inside", "1")
            .await
            .expect("cm")
            .status,
        StatusCode::CREATED
    );
    let swept = n1
        .request(
            Method::DELETE,
            "/api/v1/namespaces?labelSelector=x%3Dy",
            None,
        )
        .await
        .expect("sweep");
    assert_eq!(
        swept.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "{}",
        swept.text
    );
    assert_eq!(swept.body["reason"], "MethodNotAllowed", "{}", swept.text);
    let doomed = n1
        .delete("/api/v1/namespaces/doomed")
        .await
        .expect("delete ns");
    assert_eq!(
        doomed.body["status"]["phase"], "Terminating",
        "{}",
        doomed.text
    );
    // The namespace controller (on the leader) empties it, then removes it.
    until_deleted(&n1, "/api/v1/namespaces", "doomed").await;
    let inside = n1.get("/api/v1/configmaps").await.expect("list");
    assert!(
        !inside.names().contains(&"inside".to_string()),
        "{:?}",
        inside.names()
    );

    // Deleting the namespace deletes what it holds.
    let del = n1
        .delete("/api/v1/namespaces/team-a")
        .await
        .expect("delete ns");
    assert_eq!(del.status, StatusCode::OK, "{}", del.text);
    assert_eq!(del.body["status"]["phase"], "Terminating", "{}", del.text);
    until_deleted(&n1, "/api/v1/namespaces", "team-a").await;
    let leftovers = c
        .kube(3)
        .get("/apis/apps/v1/deployments")
        .await
        .expect("list");
    assert!(leftovers.names().is_empty(), "{:?}", leftovers.names());
    c.shutdown().await;
}

/// Waits until `collection`/`name` is gone: at once if it already is, else
/// by watching it from the revision read until its DELETED event.
async fn until_deleted(k: &kubestore_tests::KubeClient, collection: &str, name: &str) {
    let got = k.get(&format!("{collection}/{name}")).await.expect("get");
    if got.status == StatusCode::NOT_FOUND {
        return;
    }
    let mut w = k
        .watch(&format!(
            "{collection}?watch=1&fieldSelector=metadata.name%3D{name}&resourceVersion={}",
            got.rv()
        ))
        .await
        .expect("watch");
    loop {
        let ev = w
            .next_event(Duration::from_secs(60))
            .await
            .expect("an event")
            .expect("the watch stays open");
        if ev["type"] == "DELETED" {
            return;
        }
    }
}

/// (what, method, path, body and content type, expected code, expected reason)
type BadInput<'a> = (
    &'a str,
    Method,
    String,
    Option<(Vec<u8>, &'a str)>,
    u16,
    &'a str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_kube_status_errors_never_500() {
    let c = cluster().await;
    let n = c.kube(2);
    let cms = "/api/v1/namespaces/default/configmaps";

    let cases: Vec<BadInput> = vec![
        (
            "malformed JSON",
            Method::POST,
            cms.into(),
            Some((b"{nope".to_vec(), "application/json")),
            400,
            "BadRequest",
        ),
        (
            "a JSON array",
            Method::POST,
            cms.into(),
            Some((b"[]".to_vec(), "application/json")),
            400,
            "BadRequest",
        ),
        (
            "bad name",
            Method::POST,
            cms.into(),
            Some((
                br#"{"metadata":{"name":"Bad_Name"}}"#.to_vec(),
                "application/json",
            )),
            422,
            "Invalid",
        ),
        (
            "no name",
            Method::POST,
            cms.into(),
            Some((br#"{"metadata":{}}"#.to_vec(), "application/json")),
            422,
            "Invalid",
        ),
        (
            "wrong kind",
            Method::POST,
            cms.into(),
            Some((
                br#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"a"}}"#.to_vec(),
                "application/json",
            )),
            400,
            "BadRequest",
        ),
        (
            "wrong apiVersion",
            Method::POST,
            cms.into(),
            Some((
                br#"{"kind":"ConfigMap","apiVersion":"v2","metadata":{"name":"a"}}"#.to_vec(),
                "application/json",
            )),
            400,
            "BadRequest",
        ),
        (
            "namespace mismatch",
            Method::POST,
            cms.into(),
            Some((
                br#"{"metadata":{"name":"a","namespace":"kube-system"}}"#.to_vec(),
                "application/json",
            )),
            400,
            "BadRequest",
        ),
        (
            "name mismatch on PUT",
            Method::PUT,
            format!("{cms}/a"),
            Some((br#"{"metadata":{"name":"b"}}"#.to_vec(), "application/json")),
            400,
            "BadRequest",
        ),
        (
            "form body",
            Method::POST,
            cms.into(),
            Some((b"a=b".to_vec(), "application/x-www-form-urlencoded")),
            415,
            "UnsupportedMediaType",
        ),
        (
            "apply without a fieldManager",
            Method::PATCH,
            format!("{cms}/a"),
            Some((b"{}".to_vec(), "application/apply-patch+yaml")),
            422,
            "Invalid",
        ),
        (
            "unknown patch type",
            Method::PATCH,
            format!("{cms}/a"),
            Some((b"{}".to_vec(), "application/yaml")),
            415,
            "UnsupportedMediaType",
        ),
        (
            "unsupported fieldValidation",
            Method::POST,
            format!("{cms}?fieldValidation=Loud"),
            Some((br#"{"metadata":{"name":"a"}}"#.to_vec(), "application/json")),
            422,
            "Invalid",
        ),
        (
            "strict validation of an unknown field",
            Method::POST,
            format!("{cms}?fieldValidation=Strict"),
            Some((
                br#"{"metadata":{"name":"a"},"dataa":{}}"#.to_vec(),
                "application/json",
            )),
            400,
            "BadRequest",
        ),
        (
            "POST on an object",
            Method::POST,
            format!("{cms}/a"),
            None,
            405,
            "MethodNotAllowed",
        ),
        (
            "unknown resource",
            Method::GET,
            "/api/v1/widgets".into(),
            None,
            404,
            "NotFound",
        ),
        (
            "unknown group",
            Method::GET,
            "/apis/nope/v1".into(),
            None,
            404,
            "NotFound",
        ),
        (
            "non-numeric resourceVersion",
            Method::GET,
            format!("{cms}?resourceVersion=abc"),
            None,
            400,
            "BadRequest",
        ),
        (
            "bad label selector",
            Method::GET,
            format!("{cms}?labelSelector=a%20in%20(b"),
            None,
            400,
            "BadRequest",
        ),
        (
            "unsupported field selector",
            Method::GET,
            format!("{cms}?fieldSelector=spec.x%3D1"),
            None,
            400,
            "BadRequest",
        ),
        (
            "missing object",
            Method::GET,
            format!("{cms}/missing"),
            None,
            404,
            "NotFound",
        ),
        (
            "a dry run other than All",
            Method::POST,
            format!("{cms}?dryRun=Some"),
            Some((
                br#"{"metadata":{"name":"dry"}}"#.to_vec(),
                "application/json",
            )),
            422,
            "Invalid",
        ),
        (
            "an unknown propagation policy",
            Method::DELETE,
            format!("{cms}/x?propagationPolicy=Sideways"),
            None,
            422,
            "Invalid",
        ),
    ];
    for (what, method, path, body, code, reason) in cases {
        let r = n.request(method, &path, body).await.expect("request");
        assert_eq!(r.status.as_u16(), code, "{what}: {}", r.text);
        assert_eq!(r.body["kind"], "Status", "{what}: {}", r.text);
        assert_eq!(r.body["reason"], reason, "{what}: {}", r.text);
        assert_eq!(r.body["code"], code, "{what}");
    }

    // Oversized body: 413 with a Status, not a dropped connection.
    let big = json!({"metadata": {"name": "big"}, "data": {"x": "y".repeat(4 * 1024 * 1024)}});
    let r = n.post(cms, &big).await.expect("big");
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.body["reason"], "RequestEntityTooLarge");

    // Creating twice is AlreadyExists.
    assert_eq!(
        n.create_configmap("default", "twice", "1")
            .await
            .expect("1")
            .status,
        StatusCode::CREATED
    );
    let again = n
        .create_configmap("default", "twice", "1")
        .await
        .expect("2");
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert_eq!(again.body["reason"], "AlreadyExists");

    // A patch may not move an object to another namespace.
    let moved = n
        .request(
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/twice",
            Some((
                br#"{"metadata":{"namespace":"kube-system"}}"#.to_vec(),
                "application/merge-patch+json",
            )),
        )
        .await
        .expect("patch");
    assert_eq!(
        moved.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        moved.text
    );
    let patched = n
        .request(
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/twice",
            Some((
                br#"[{"op":"add","path":"/data/extra","value":"y"}]"#.to_vec(),
                "application/json-patch+json",
            )),
        )
        .await
        .expect("json patch");
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["data"]["extra"], "y");

    // A strategic merge patch merges; one it cannot apply is the client's
    // mistake: a malformed directive 400, anything else 422.
    let strategic = |body: &'static str| {
        n.request(
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/twice",
            Some((
                body.as_bytes().to_vec(),
                "application/strategic-merge-patch+json",
            )),
        )
    };
    let merged = strategic(r#"{"data":{"smp":"z","extra":null}}"#)
        .await
        .expect("strategic patch");
    assert_eq!(merged.status, StatusCode::OK, "{}", merged.text);
    assert_eq!(merged.body["data"]["smp"], "z");
    assert!(
        merged.body["data"].get("extra").is_none(),
        "{}",
        merged.text
    );
    let malformed = strategic(r#"{"metadata":{"$setElementOrder/finalizers":1}}"#)
        .await
        .expect("malformed");
    assert_eq!(
        malformed.status,
        StatusCode::BAD_REQUEST,
        "{}",
        malformed.text
    );
    assert_eq!(malformed.body["reason"], "BadRequest");
    let unknown = strategic(r#"{"data":{"$patch":"nope"}}"#)
        .await
        .expect("unknown directive");
    assert_eq!(
        unknown.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        unknown.text
    );
    assert_eq!(unknown.body["reason"], "Invalid");

    // A namespace whose spec is not an object is kube's decoding error,
    // not a crash.
    let odd = n
        .post(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "odd"}, "spec": []}),
        )
        .await
        .expect("odd");
    assert_eq!(odd.status, StatusCode::BAD_REQUEST, "{}", odd.text);
    assert_eq!(
        odd.body["message"],
        "Namespace in version \"v1\" cannot be handled as a Namespace: json: cannot unmarshal array into Go struct field Namespace.spec of type v1.NamespaceSpec"
    );
    let plain = n
        .post("/api/v1/namespaces", &json!({"metadata": {"name": "odd"}}))
        .await
        .expect("odd");
    assert_eq!(plain.status, StatusCode::CREATED, "{}", plain.text);
    assert_eq!(plain.body["spec"]["finalizers"], json!(["kubernetes"]));

    // Unknown non-resource paths: plain text 404 like kube.
    let r = n.get("/nope").await.expect("nope");
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.text, "404 page not found\n");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_version_health_openapi_and_debug() {
    let c = cluster().await;
    let n = c.kube(3);
    let api = n.get("/api").await.expect("api");
    assert_eq!(api.body["versions"], json!(["v1"]));
    assert!(api.body["serverAddressByClientCIDRs"].is_array());
    let v1 = n.get("/api/v1").await.expect("v1");
    let names: Vec<&str> = v1.body["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for r in [
        "namespaces",
        "configmaps",
        "secrets",
        "pods",
        "services",
        "serviceaccounts",
        "endpoints",
        "events",
        "nodes",
    ] {
        assert!(names.contains(&r), "{r} missing from /api/v1");
    }
    let apis = n.get("/apis").await.expect("apis");
    let groups: Vec<&str> = apis.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert_eq!(
        groups,
        vec![
            "apps",
            "batch",
            "autoscaling",
            "networking.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "storage.k8s.io",
            "coordination.k8s.io",
            "apiextensions.k8s.io",
            "authorization.k8s.io"
        ]
    );
    for gv in [
        "/apis/apps/v1",
        "/apis/batch/v1",
        "/apis/autoscaling/v2",
        "/apis/coordination.k8s.io/v1",
    ] {
        let r = n.get(gv).await.expect("gv");
        assert_eq!(r.body["kind"], "APIResourceList", "{gv}");
    }
    let version = n.get("/version").await.expect("version");
    assert_eq!(version.body["major"], "1");
    for key in [
        "minor",
        "gitVersion",
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    ] {
        assert!(version.body.get(key).is_some(), "/version lacks {key}");
    }
    for path in ["/livez", "/readyz", "/healthz"] {
        let r = n.get(path).await.expect("health");
        assert_eq!(
            (r.status, r.text.as_str()),
            (StatusCode::OK, "ok"),
            "{path}"
        );
    }
    let verbose = n.get("/readyz?verbose").await.expect("verbose");
    assert!(
        verbose.text.contains("[+]raft-leader ok")
            && verbose.text.ends_with("readyz check passed\n"),
        "{}",
        verbose.text
    );

    // kubectl's validation probe: the PATCH operation carries the GVK and fieldValidation.
    let index = n.get("/openapi/v3").await.expect("openapi");
    let url = index.body["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .expect("url")
        .to_string();
    let doc = n.get(&url).await.expect("gv doc");
    let patch = &doc.body["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"]["kind"],
        "ConfigMap"
    );
    assert!(
        patch["parameters"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["name"] == "fieldValidation")),
        "{patch}"
    );

    // Table rendering for kubectl get.
    let mut table_req = reqwest::Client::new()
        .get(format!("{}/api/v1/namespaces", c.rest_url(1)))
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .send()
        .await
        .expect("table")
        .json::<Value>()
        .await
        .expect("json");
    assert_eq!(table_req["kind"], "Table");
    assert_eq!(table_req["columnDefinitions"][0]["format"], "name");
    assert!(table_req["metadata"]["resourceVersion"].as_str().is_some());
    let first_row = table_req["rows"][0].take();
    assert_eq!(first_row["object"]["kind"], "PartialObjectMetadata");

    // /metrics: per verb and read path, plus the node's gauges.
    let created = n
        .create_configmap("default", "metered", "1")
        .await
        .expect("create");
    assert_eq!(created.status, StatusCode::CREATED);
    n.get("/api/v1/namespaces/default/configmaps")
        .await
        .expect("list");
    n.get("/api/v1/namespaces/default/configmaps/missing")
        .await
        .expect("404");
    let metrics = n.get("/metrics").await.expect("metrics");
    assert_eq!(metrics.status, StatusCode::OK);
    for line in [
        "kubestore_http_requests_total{verb=\"list\",read=\"quorum-cache\",code=\"200\"}",
        "kubestore_http_requests_total{verb=\"create\",read=\"none\",code=\"201\"}",
        "kubestore_http_requests_total{verb=\"get\",read=\"none\",code=\"404\"}",
        "kubestore_http_request_duration_seconds_bucket{verb=\"list\",read=\"quorum-cache\",le=\"+Inf\"}",
        "# TYPE kubestore_raft_is_leader gauge",
        "kubestore_store_revision ",
    ] {
        assert!(
            metrics.text.contains(line),
            "/metrics lacks {line}:\n{}",
            metrics.text
        );
    }
    // The write path's stages this node ran for the create.
    for stage in ["log_append", "log_fsync", "apply", "cache_feed"] {
        let runs = metrics
            .text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("kubestore_stage_total{{stage=\"{stage}\"}} ")))
            .and_then(|v| v.parse::<u64>().ok());
        assert!(
            runs.is_some_and(|n| n > 0),
            "stage {stage}: {runs:?} runs:\n{}",
            metrics.text
        );
    }

    // /debug/cluster on every node.
    let leader = c.leader().await.expect("leader");
    for id in c.ids() {
        let s = c.status(id).await.expect("status");
        assert_eq!(s["node_id"], id);
        assert_eq!(s["leader_id"], leader);
        for key in [
            "term",
            "last_log_index",
            "committed_index",
            "applied_index",
            "revision",
        ] {
            assert!(s[key].is_u64(), "{key} missing: {s}");
        }
        assert_eq!(s["members"].as_array().map(Vec::len), Some(3));
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_share_one_snapshot_and_expire_with_compaction() {
    let c = cluster().await;
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));
    for i in 0..25 {
        let r = n1
            .create_configmap("default", &format!("page-{i:02}"), "x")
            .await
            .expect("create");
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let cms = "/api/v1/namespaces/default/configmaps";

    // Phase 1: first page through node 2.
    let p1 = n2.get(&format!("{cms}?limit=10")).await.expect("page 1");
    assert_eq!(p1.names().len(), 10);
    let snapshot_rv = p1.rv();
    assert_eq!(p1.body["metadata"]["remainingItemCount"], 15);
    let token = p1.body["metadata"]["continue"]
        .as_str()
        .expect("continue")
        .to_string();

    // A write between pages must not show up in them.
    n1.create_configmap("default", "page-00a", "late")
        .await
        .expect("late write");
    let mut modified = n1.get(&format!("{cms}/page-20")).await.expect("get").body;
    modified["data"]["value"] = json!("changed");
    n1.put(&format!("{cms}/page-20"), &modified)
        .await
        .expect("update");

    // Phase 2: the remaining pages through node 3, at the same revision.
    let p2 = n3
        .get(&format!("{cms}?limit=10&continue={token}"))
        .await
        .expect("page 2");
    assert_eq!(p2.status, StatusCode::OK, "{}", p2.text);
    assert_eq!(p2.rv(), snapshot_rv);
    assert_eq!(p2.body["metadata"]["remainingItemCount"], 5);
    let token2 = p2.body["metadata"]["continue"]
        .as_str()
        .expect("continue")
        .to_string();
    let p3 = n3
        .get(&format!("{cms}?limit=10&continue={token2}"))
        .await
        .expect("page 3");
    assert_eq!(p3.rv(), snapshot_rv);
    assert!(
        p3.body["metadata"]
            .get("continue")
            .is_none_or(|c| c.is_null()),
        "{}",
        p3.text
    );
    assert!(
        p3.body["metadata"].get("remainingItemCount").is_none(),
        "none on the last page"
    );
    let mut all: Vec<String> = [p1.names(), p2.names(), p3.names()].concat();
    let expected: Vec<String> = (0..25).map(|i| format!("page-{i:02}")).collect();
    assert_eq!(
        all, expected,
        "pages are one consistent snapshot in key order"
    );
    let page20 = p3.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["metadata"]["name"] == "page-20")
        .expect("page-20");
    assert_eq!(
        page20["data"]["value"], "x",
        "the snapshot shows the old value"
    );
    all.clear();

    // Selectors: remainingItemCount is absent.
    let sel = n2
        .get(&format!("{cms}?limit=2&labelSelector=missing!%3Dx"))
        .await
        .expect("selected");
    assert_eq!(sel.names().len(), 2);
    assert!(sel.body["metadata"].get("remainingItemCount").is_none());

    // Errors: a resourceVersion with continue, a garbage token.
    let both = n2
        .get(&format!(
            "{cms}?limit=10&continue={token}&resourceVersion=5"
        ))
        .await
        .expect("both");
    assert_eq!(both.status, StatusCode::BAD_REQUEST);
    let garbage = n2
        .get(&format!("{cms}?limit=10&continue=nonsense"))
        .await
        .expect("garbage");
    assert_eq!(garbage.status, StatusCode::BAD_REQUEST);

    // Phase 3: compact past the snapshot: the token expires with a fresh one in the Status.
    let current = n1.get(cms).await.expect("list").rv();
    let compact = reqwest::Client::new()
        .post(format!(
            "{}/debug/compact?revision={current}",
            c.rest_url(1)
        ))
        .send()
        .await
        .expect("compact");
    assert_eq!(compact.status(), StatusCode::OK);
    c.wait_for("compaction everywhere", Duration::from_secs(10), |s| {
        s.iter().all(|x| x["compacted_revision"] == current)
    })
    .await
    .expect("compacted");
    let expired = n3
        .get(&format!("{cms}?limit=10&continue={token}"))
        .await
        .expect("expired");
    assert_eq!(expired.status, StatusCode::GONE, "{}", expired.text);
    assert_eq!(expired.body["reason"], "Expired");
    let fresh = expired.body["metadata"]["continue"]
        .as_str()
        .expect("inconsistent-continue token");
    let rest = n3
        .get(&format!("{cms}?limit=100&continue={fresh}"))
        .await
        .expect("continue at latest");
    assert_eq!(rest.status, StatusCode::OK, "{}", rest.text);
    assert!(rest.names().contains(&"page-20".to_string()));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_modes_by_resource_version_and_match() {
    let c = TestCluster::with_options(
        3,
        ClusterOptions {
            watch_cache_events: 4,
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster");
    let cms = "/api/v1/namespaces/default/configmaps";
    let n1 = c.kube(1);
    let before = n1
        .create_configmap("default", "rm-a", "1")
        .await
        .expect("create")
        .rv();
    let after = n1
        .create_configmap("default", "rm-b", "1")
        .await
        .expect("create")
        .rv();

    // Phase 1: the valid cells, on every node (leader and followers).
    for id in c.ids() {
        let n = c.kube(id);
        let cases: Vec<(String, u16, Option<u64>, Vec<&str>)> = vec![
            (cms.to_string(), 200, None, vec!["rm-a", "rm-b"]),
            (
                format!("{cms}?resourceVersion=0"),
                200,
                None,
                vec!["rm-a", "rm-b"],
            ),
            (
                format!("{cms}?resourceVersion={before}&resourceVersionMatch=NotOlderThan"),
                200,
                None,
                vec!["rm-a", "rm-b"],
            ),
            (
                format!("{cms}?resourceVersion={before}&resourceVersionMatch=Exact"),
                200,
                Some(before),
                vec!["rm-a"],
            ),
            (
                format!("{cms}?resourceVersion={before}&limit=10"),
                200,
                Some(before),
                vec!["rm-a"],
            ),
            (
                format!("{cms}?resourceVersion={before}"),
                200,
                None,
                vec!["rm-a", "rm-b"],
            ),
        ];
        for (path, code, exact_rv, names) in cases {
            let r = n.get(&path).await.expect("list");
            assert_eq!(r.status.as_u16(), code, "node {id} {path}: {}", r.text);
            if let Some(rv) = exact_rv {
                assert_eq!(
                    r.rv(),
                    rv,
                    "node {id} {path}: an exact read is at that revision"
                );
            } else {
                assert!(
                    r.rv() >= after,
                    "node {id} {path}: read is older than an acknowledged write"
                );
            }
            assert_eq!(r.names(), names, "node {id} {path}");
        }
        // How each mode was served.
        for (path, served) in [
            (cms.to_string(), "quorum-cache"),
            (format!("{cms}?resourceVersion=0"), "cache"),
            (
                format!("{cms}?resourceVersion={before}&resourceVersionMatch=NotOlderThan"),
                "cache",
            ),
            (
                format!("{cms}?resourceVersion={before}&resourceVersionMatch=Exact"),
                "snapshot",
            ),
            (
                format!("{cms}?resourceVersion={before}&limit=10"),
                "snapshot",
            ),
            (format!("{cms}?limit=1"), "quorum-cache"),
            (format!("{cms}/rm-a"), "quorum-cache"),
            (format!("{cms}/rm-a?resourceVersion=0"), "cache"),
            (
                format!("{cms}/rm-a?resourceVersion={before}&resourceVersionMatch=Exact"),
                "snapshot",
            ),
        ] {
            let r = n.get(&path).await.expect("read");
            assert_eq!(r.status, StatusCode::OK, "node {id} {path}: {}", r.text);
            assert_eq!(r.read_path(), Some(served), "node {id} {path}");
        }
        // Every page of a paginated list is one snapshot, served from memory.
        let first = n.get(&format!("{cms}?limit=1")).await.expect("page 1");
        let token = first.body["metadata"]["continue"]
            .as_str()
            .expect("a continue token")
            .to_string();
        let second = n
            .get(&format!("{cms}?limit=1&continue={token}"))
            .await
            .expect("page 2");
        assert_eq!(second.status, StatusCode::OK, "{}", second.text);
        assert_eq!(second.rv(), first.rv(), "node {id}: pages share a revision");
        assert_eq!(second.read_path(), Some("snapshot"), "node {id}");
        assert_eq!(second.names(), vec!["rm-b"]);
        let old = n
            .get(&format!("{cms}/rm-b?resourceVersion={after}"))
            .await
            .expect("get");
        assert_eq!(old.status, StatusCode::OK, "{}", old.text);
    }

    // Phase 1b: once the cache's ring (4 events per type here) has moved
    // past a revision, exact reads of it come from the MVCC history.
    let n1 = c.kube(1);
    for i in 0..5 {
        n1.create_configmap("kube-system", &format!("pad-{i}"), "1")
            .await
            .expect("pad");
    }
    let latest = n1.get(cms).await.expect("list").rv();
    for id in c.ids() {
        let n = c.kube(id);
        let old = n
            .get(&format!(
                "{cms}?resourceVersion={before}&resourceVersionMatch=Exact"
            ))
            .await
            .expect("old exact");
        assert_eq!(old.status, StatusCode::OK, "{}", old.text);
        assert_eq!(old.read_path(), Some("history"), "node {id}");
        assert_eq!(old.rv(), before);
        assert_eq!(old.names(), vec!["rm-a"]);
        let recent = n
            .get(&format!(
                "{cms}?resourceVersion={latest}&resourceVersionMatch=Exact"
            ))
            .await
            .expect("recent exact");
        assert_eq!(recent.read_path(), Some("snapshot"), "node {id}");
        assert_eq!(recent.names(), vec!["rm-a", "rm-b"]);
    }

    // Phase 2: the invalid combinations.
    let n2 = c.kube(2);
    let invalid: Vec<(String, u16, &str)> = vec![
        (
            format!("{cms}?resourceVersionMatch=Exact"),
            422,
            "unless resourceVersion is provided",
        ),
        (
            format!("{cms}?resourceVersion=0&resourceVersionMatch=Exact"),
            422,
            "forbidden for resourceVersion \"0\"",
        ),
        (
            format!("{cms}?resourceVersion=1&resourceVersionMatch=Newest"),
            422,
            "supported values",
        ),
        (
            format!("{cms}?resourceVersion=1&resourceVersionMatch=Exact&continue=abc"),
            422,
            "when continue is provided",
        ),
        (
            format!("{cms}?sendInitialEvents=true"),
            422,
            "sendInitialEvents is forbidden for list",
        ),
        (
            format!("{cms}?resourceVersion=-1"),
            400,
            "invalid resource version",
        ),
        (
            format!("{cms}?resourceVersion=abc"),
            400,
            "invalid resource version",
        ),
    ];
    for (path, code, text) in invalid {
        let r = n2.get(&path).await.expect("invalid");
        assert_eq!(r.status.as_u16(), code, "{path}: {}", r.text);
        assert!(
            r.body["message"].as_str().is_some_and(|m| m.contains(text)),
            "{path}: {}",
            r.text
        );
    }

    // Phase 3: a revision nobody has reached: 504 after a short wait, with Retry-After.
    let far = n2
        .get(&format!(
            "{cms}?resourceVersion={}&resourceVersionMatch=NotOlderThan",
            after + 1000
        ))
        .await
        .expect("far");
    assert_eq!(far.status, StatusCode::GATEWAY_TIMEOUT, "{}", far.text);
    assert_eq!(
        far.headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert_eq!(
        far.body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert!(far.body["message"]
        .as_str()
        .is_some_and(|m| m.contains("Too large resource version")));

    // Phase 4: an exact read below the compaction point is 410 Expired.
    let compact = reqwest::Client::new()
        .post(format!("{}/debug/compact?revision={after}", c.rest_url(1)))
        .send()
        .await
        .expect("compact");
    assert_eq!(compact.status(), StatusCode::OK);
    c.wait_for("compaction", Duration::from_secs(10), |s| {
        s.iter().all(|x| x["compacted_revision"] == after)
    })
    .await
    .expect("compacted");
    let gone = n2
        .get(&format!(
            "{cms}?resourceVersion={before}&resourceVersionMatch=Exact"
        ))
        .await
        .expect("gone");
    assert_eq!(gone.status, StatusCode::GONE, "{}", gone.text);
    assert_eq!(gone.body["reason"], "Expired");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_subresource_owns_the_status_as_in_kube() {
    let c = cluster().await;
    let (n1, n2) = (c.kube(1), c.kube(2));
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "web" },
        "spec": { "nodeName": "node-a", "containers": [{ "name": "c", "image": "nginx" }] },
        "status": { "phase": "Pending" },
    });
    let created = n1.post(pods, &pod).await.expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);

    // Updating the object keeps the stored status.
    let mut obj = created.body.clone();
    obj["metadata"]["labels"] = json!({ "app": "web" });
    obj["status"]["phase"] = json!("Running");
    let updated = n2.put(&format!("{pods}/web"), &obj).await.expect("put");
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.text);
    assert_eq!(updated.body["status"]["phase"], "Pending");
    assert_eq!(updated.body["metadata"]["labels"]["app"], "web");

    // Updating /status changes the status and nothing else, with the
    // resourceVersion as its precondition.
    let mut obj = updated.body.clone();
    obj["status"]["phase"] = json!("Running");
    obj["spec"]["nodeName"] = json!("node-b");
    obj["metadata"]["labels"] = json!({ "app": "changed" });
    let status = n1
        .put(&format!("{pods}/web/status"), &obj)
        .await
        .expect("put status");
    assert_eq!(status.status, StatusCode::OK, "{}", status.text);
    assert_eq!(status.body["status"]["phase"], "Running");
    assert_eq!(status.body["spec"]["nodeName"], "node-a");
    assert_eq!(status.body["metadata"]["labels"]["app"], "web");
    assert!(status.rv() > updated.rv());
    let stale = n2
        .put(&format!("{pods}/web/status"), &obj)
        .await
        .expect("stale put status");
    assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.text);

    // A merge patch of /status, then GET /status.
    let patched = n2
        .request(
            Method::PATCH,
            &format!("{pods}/web/status"),
            Some((
                json!({ "status": { "podIP": "10.0.0.7" } })
                    .to_string()
                    .into_bytes(),
                "application/merge-patch+json",
            )),
        )
        .await
        .expect("patch status");
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["status"]["podIP"], "10.0.0.7");
    assert_eq!(patched.body["status"]["phase"], "Running");
    let got = n1.get(&format!("{pods}/web/status")).await.expect("get");
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    assert_eq!(got.rv(), patched.rv());

    // Types without a status subresource have no /status; discovery lists
    // the subresources there are.
    n1.create_configmap("default", "cm", "v").await.expect("cm");
    let none = n1
        .get("/api/v1/namespaces/default/configmaps/cm/status")
        .await
        .expect("get");
    assert_eq!(none.status, StatusCode::NOT_FOUND, "{}", none.text);
    let discovery = n1.get("/api/v1").await.expect("discovery");
    let names: Vec<&str> = discovery.body["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(names.contains(&"pods/status"), "{names:?}");
    assert!(!names.contains(&"configmaps/status"), "{names:?}");
    c.shutdown().await;
}

/// Server-side apply and managed fields over REST, through different
/// nodes: an apply (YAML) creates (201) and re-applies (200); POST, PUT
/// and merge patches are recorded as `Update`s by `fieldManager` or the
/// User-Agent; an apply guarded by a stale resourceVersion is a 409; and
/// `fieldValidation` warns (`Warning: 299`), refuses (400 on POST, 422 on
/// PATCH) or ignores unknown and duplicate fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_managed_fields_and_field_validation() {
    let c = cluster().await;
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));
    let cms = "/api/v1/namespaces/default/configmaps";
    let managers = |obj: &Value| -> Vec<(String, String, Value)> {
        obj["metadata"]["managedFields"]
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|e| {
                        (
                            e["manager"].as_str().unwrap_or("").to_string(),
                            e["operation"].as_str().unwrap_or("").to_string(),
                            e["fieldsV1"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let warnings = |r: &kubestore_tests::kube::Reply| -> Vec<String> {
        r.headers
            .get_all("warning")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    };

    // Phase 1: an apply of YAML creates (201), again answers 200.
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: \"1\"\n";
    let apply = |n: &kubestore_tests::KubeClient, query: &str, body: &str| {
        let n = n.clone();
        let path = format!("{cms}/applied?{query}");
        let body = body.as_bytes().to_vec();
        async move {
            n.request(
                Method::PATCH,
                &path,
                Some((body, "application/apply-patch+yaml")),
            )
            .await
            .expect("apply")
        }
    };
    let created = apply(&n1, "fieldManager=tool", yaml).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(
        managers(&created.body),
        [(
            "tool".into(),
            "Apply".into(),
            json!({"f:data": {"f:a": {}}})
        )]
    );
    let again = apply(&n2, "fieldManager=tool", yaml).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    // Nothing changed: nothing written, as in kube.
    assert_eq!(
        again.rv(),
        created.rv(),
        "a no-op apply keeps the resourceVersion"
    );

    // A stale resourceVersion in the config is a precondition.
    let stale = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"applied","resourceVersion":"{}"}},"data":{{"a":"2"}}}}"#,
        created.rv() - 1
    );
    let refused = apply(&n3, "fieldManager=tool", &stale).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text);
    // ... and on an absent object it is not found, not a create.
    let absent = n3
        .request(
            Method::PATCH,
            &format!("{cms}/absent?fieldManager=tool"),
            Some((
                stale.replace("applied", "absent").into_bytes(),
                "application/apply-patch+yaml",
            )),
        )
        .await
        .expect("apply");
    assert_eq!(absent.status, StatusCode::NOT_FOUND, "{}", absent.text);

    // Phase 2: POST, PUT and a merge patch are Updates by their manager.
    let posted = n1
        .request(
            Method::POST,
            &format!("{cms}?fieldManager=creator"),
            Some((
                br#"{"metadata":{"name":"updated"},"data":{"k":"v"}}"#.to_vec(),
                "application/json",
            )),
        )
        .await
        .expect("post");
    assert_eq!(posted.status, StatusCode::CREATED, "{}", posted.text);
    assert_eq!(
        managers(&posted.body),
        [(
            "creator".into(),
            "Update".into(),
            json!({"f:data": {".": {}, "f:k": {}}})
        )]
    );
    let put = reqwest::Client::new()
        .put(format!("{}{cms}/updated", n2.base()))
        .header("user-agent", "my-tool/1.2 (linux)")
        .json(&json!({"metadata": {"name": "updated"}, "data": {"k": "v", "l": "w"}}))
        .send()
        .await
        .expect("put");
    assert_eq!(put.status(), StatusCode::OK);
    let put: Value = put.json().await.expect("json");
    let m = managers(&put);
    assert_eq!(m.len(), 2, "{m:?}");
    assert_eq!(m[1].0, "my-tool");
    assert_eq!(m[1].2, json!({"f:data": {"f:l": {}}}));

    // Phase 3: unknown and duplicate fields under each mode.
    let merge = |query: &str, body: &str| {
        let n = n3.clone();
        let path = format!("{cms}/updated?{query}");
        let body = body.as_bytes().to_vec();
        async move {
            n.request(
                Method::PATCH,
                &path,
                Some((body, "application/merge-patch+json")),
            )
            .await
            .expect("patch")
        }
    };
    let warned = merge("fieldManager=m", r#"{"dataa":{"x":"y"},"data":{"k":"1"}}"#).await;
    assert_eq!(warned.status, StatusCode::OK, "{}", warned.text);
    assert_eq!(warnings(&warned), [r#"299 - "unknown field \"dataa\"""#]);
    assert!(warned.body.get("dataa").is_none(), "{}", warned.text);
    assert_eq!(warned.body["data"]["k"], "1");
    let strict = merge("fieldValidation=Strict", r#"{"dataa":{"x":"y"}}"#).await;
    assert_eq!(
        strict.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        strict.text
    );
    assert_eq!(strict.body["reason"], "Invalid");
    let message = strict.body["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(r#" "" is invalid: patch: Invalid value: "{"#)
            && message.ends_with(r#"strict decoding error: unknown field "dataa""#),
        "{message}"
    );
    let ignored = merge(
        "fieldValidation=Ignore",
        r#"{"dataa":{"x":"y"},"data":{"k":"2","k":"3"}}"#,
    )
    .await;
    assert_eq!(ignored.status, StatusCode::OK, "{}", ignored.text);
    assert!(warnings(&ignored).is_empty());
    assert_eq!(ignored.body["data"]["k"], "3");
    let dup = n1
        .request(
            Method::POST,
            &format!("{cms}?fieldValidation=Strict"),
            Some((
                br#"{"metadata":{"name":"dup","name":"dup"},"data":{}}"#.to_vec(),
                "application/json",
            )),
        )
        .await
        .expect("post");
    assert_eq!(dup.status, StatusCode::BAD_REQUEST, "{}", dup.text);
    assert_eq!(
        dup.body["message"],
        r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "metadata.name""#
    );
    let warned = n1
        .request(
            Method::POST,
            cms,
            Some((
                br#"{"metadata":{"name":"dup","name":"dup"},"spec":{}}"#.to_vec(),
                "application/json",
            )),
        )
        .await
        .expect("post");
    assert_eq!(warned.status, StatusCode::CREATED, "{}", warned.text);
    assert_eq!(
        warnings(&warned),
        [
            r#"299 - "unknown field \"spec\"""#,
            r#"299 - "duplicate field \"metadata.name\"""#
        ]
    );
    c.shutdown().await;
}

/// Compression as kube-apiserver does it: a list of at least 128 KiB is
/// gzipped for a client that accepts it (with `Vary: Accept-Encoding`),
/// sent as it is otherwise with its exact `Content-Length`; a small answer
/// and a watch never are (a watch event is not held in a compressor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_lists_are_gzipped_and_watches_never_are() {
    use std::io::Read;

    let c = cluster().await;
    let k = c.kube(1);
    let filler = "v".repeat(1024);
    for i in 0..160 {
        let made = k
            .create_configmap("default", &format!("big-{i:03}"), &filler)
            .await
            .expect("create");
        assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    }
    let http = reqwest::Client::new();
    let list_url = format!("{}/api/v1/namespaces/default/configmaps", c.rest_url(2));

    // Phase 1: gzip asked for and the list is large.
    let gz = http
        .get(&list_url)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .expect("list");
    assert_eq!(gz.status(), StatusCode::OK);
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    assert_eq!(gz.headers()["vary"], "accept-encoding");
    let compressed = gz.bytes().await.expect("body");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&compressed[..])
        .read_to_string(&mut text)
        .expect("valid gzip");
    let list: Value = serde_json::from_str(&text).expect("a JSON list");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(160));
    assert!(compressed.len() * 4 < text.len(), "it compresses");

    // Phase 2: not asked for: plain, with its exact length.
    let plain = http.get(&list_url).send().await.expect("list");
    assert!(plain.headers().get("content-encoding").is_none());
    let length: usize = plain.headers()["content-length"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("a length");
    let body = plain.bytes().await.expect("body");
    assert_eq!(body.len(), length);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).expect("JSON")["items"],
        list["items"]
    );

    // Phase 3: a small answer is not compressed.
    let one = http
        .get(format!("{list_url}/big-000"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .expect("get");
    assert!(one.headers().get("content-encoding").is_none());

    // Phase 4: a watch is never compressed; its events arrive as written.
    let watch = http
        .get(format!("{list_url}?watch=1&resourceVersion=0"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .expect("watch");
    assert!(watch.headers().get("content-encoding").is_none());
    let mut stream = watch.bytes_stream();
    let first = tokio::time::timeout(
        Duration::from_secs(30),
        futures::StreamExt::next(&mut stream),
    )
    .await
    .expect("an event in time")
    .expect("the stream is open")
    .expect("bytes");
    assert!(
        first.starts_with(br#"{"type":"ADDED""#),
        "{}",
        String::from_utf8_lossy(&first)
    );
    c.shutdown().await;
}

/// A server-side apply of a deployment's `Scale`, as kube's scale handler
/// answers it: the parent's manager of its replicas conflicts (`409`,
/// naming it), `force` takes them, and the parent's managed fields say who
/// owns `spec.replicas` afterwards (the scale's applier, with subresource
/// `scale`); the other manager keeps the rest of its fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_is_applied_through_its_parents_managed_fields() {
    let c = TestCluster::new(3).await.expect("cluster");
    let (n1, n2) = (c.kube(1), c.kube(2));
    let dep = "/apis/apps/v1/namespaces/default/deployments/web";
    let apply = |fields: &str| format!("?fieldManager={fields}");
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    let created = n1
        .request(
            Method::PATCH,
            &format!("{dep}{}", apply("deployer")),
            Some((
                deployment.to_string().into_bytes(),
                "application/apply-patch+yaml",
            )),
        )
        .await
        .expect("apply");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);

    let scale = |replicas: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": {"name": "web", "namespace": "default"},
               "spec": {"replicas": replicas}})
        .to_string()
        .into_bytes()
    };
    let conflict = n2
        .request(
            Method::PATCH,
            &format!("{dep}/scale{}", apply("autoscaler")),
            Some((scale(3), "application/apply-patch+yaml")),
        )
        .await
        .expect("apply scale");
    assert_eq!(conflict.status, StatusCode::CONFLICT, "{}", conflict.text);
    assert!(
        conflict.text.contains(".spec.replicas") && conflict.text.contains("deployer"),
        "{}",
        conflict.text
    );
    let forced = n2
        .request(
            Method::PATCH,
            &format!("{dep}/scale{}&force=true", apply("autoscaler")),
            Some((scale(3), "application/apply-patch+yaml")),
        )
        .await
        .expect("apply scale");
    assert_eq!(forced.status, StatusCode::OK, "{}", forced.text);
    assert_eq!(forced.body["kind"], "Scale");
    assert_eq!(forced.body["spec"]["replicas"], 3);

    let read = n1.get(dep).await.expect("get");
    assert_eq!(read.body["spec"]["replicas"], 3);
    let managed = read.body["metadata"]["managedFields"]
        .as_array()
        .expect("managed fields")
        .clone();
    let entry = |name: &str| {
        managed
            .iter()
            .find(|e| e["manager"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {managed:?}"))
    };
    let autoscaler = entry("autoscaler");
    assert_eq!(autoscaler["operation"], "Apply");
    assert_eq!(autoscaler["subresource"], "scale");
    assert_eq!(autoscaler["apiVersion"], "apps/v1");
    assert_eq!(
        autoscaler["fieldsV1"],
        json!({"f:spec": {"f:replicas": {}}})
    );
    let deployer = entry("deployer");
    assert!(
        deployer["fieldsV1"]["f:spec"].get("f:replicas").is_none(),
        "{deployer}"
    );
    assert!(
        deployer["fieldsV1"]["f:spec"].get("f:template").is_some(),
        "{deployer}"
    );
    // The deployer applying its manifest again now conflicts on replicas.
    let again = n1
        .request(
            Method::PATCH,
            &format!("{dep}{}", apply("deployer")),
            Some((
                deployment.to_string().into_bytes(),
                "application/apply-patch+yaml",
            )),
        )
        .await
        .expect("apply");
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text);
    c.shutdown().await;
}

/// Writers through every node create and update ConfigMaps concurrently,
/// so each node's watch cache takes many revisions per feed step (and
/// keeps one snapshot per step). Then a list at every acknowledged
/// revision with `resourceVersionMatch=Exact`, on every node, shows each
/// object as its last acknowledged write at or before that revision.
async fn exact_lists_match_the_acknowledged_writes(options: ClusterOptions, from_ring: bool) {
    const WRITERS: usize = 8;
    const NAMES: usize = 4;
    const UPDATES: usize = 6;
    let c = TestCluster::with_options(3, options)
        .await
        .expect("cluster");
    let ids = c.ids();
    let cms = "/api/v1/namespaces/default/configmaps";
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let k = c.kube(ids[w % ids.len()]);
        tasks.push(tokio::spawn(async move {
            // (revision, name) of every write this writer had acknowledged.
            let mut acked = Vec::new();
            for n in 0..NAMES {
                let name = format!("exact-{w}-{n}");
                let r = k
                    .create_configmap("default", &name, "0")
                    .await
                    .expect("create");
                assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
                acked.push((r.rv(), name));
            }
            for round in 1..=UPDATES {
                for n in 0..NAMES {
                    let name = format!("exact-{w}-{n}");
                    let body = json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name}, "data": {"value": round.to_string()}
                    });
                    let r = k
                        .put(&format!("{cms}/{name}"), &body)
                        .await
                        .expect("update");
                    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
                    acked.push((r.rv(), name));
                }
            }
            acked
        }));
    }
    let mut acked: Vec<(u64, String)> = Vec::new();
    for t in tasks {
        acked.extend(t.await.expect("writer"));
    }
    acked.sort();
    assert_eq!(acked.len(), WRITERS * NAMES * (UPDATES + 1));
    c.wait_converged(Duration::from_secs(30))
        .await
        .expect("converged");

    for id in c.ids() {
        let k = c.kube(id);
        for (at, _) in &acked {
            // Each name at its last acknowledged write at or before `at`.
            let mut expected: std::collections::BTreeMap<&str, u64> = Default::default();
            for (rev, name) in acked.iter().take_while(|(rev, _)| rev <= at) {
                expected.insert(name, *rev);
            }
            let expected: Vec<(String, u64)> = expected
                .into_iter()
                .map(|(n, r)| (n.to_string(), r))
                .collect();
            let path = format!("{cms}?resourceVersion={at}&resourceVersionMatch=Exact");
            let r = k.get(&path).await.expect("list");
            assert_eq!(r.status, StatusCode::OK, "node {id} {path}: {}", r.text);
            assert_eq!(r.rv(), *at, "node {id} {path}");
            let mut got: Vec<(String, u64)> = r.body["items"]
                .as_array()
                .expect("items")
                .iter()
                .filter(|i| {
                    i["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("exact-"))
                })
                .map(|i| {
                    let meta = &i["metadata"];
                    let rv = meta["resourceVersion"]
                        .as_str()
                        .and_then(|s| s.parse().ok());
                    (
                        meta["name"].as_str().unwrap_or_default().to_string(),
                        rv.unwrap_or(0),
                    )
                })
                .collect();
            got.sort();
            assert_eq!(got, expected, "node {id} {path}");
            if from_ring {
                assert_eq!(r.read_path(), Some("snapshot"), "node {id} {path}");
            }
        }
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_lists_at_every_revision_of_concurrent_writes_come_from_the_ring() {
    exact_lists_match_the_acknowledged_writes(ClusterOptions::default(), true).await;
}

/// The same with a ring of 40 events: it drops revisions inside feed
/// steps, and reads older than its base come from storage's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_lists_stay_exact_when_a_small_ring_cuts_inside_feed_steps() {
    exact_lists_match_the_acknowledged_writes(
        ClusterOptions {
            watch_cache_events: 40,
            ..ClusterOptions::default()
        },
        false,
    )
    .await;
}

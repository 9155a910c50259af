//! Deletion as Kubernetes clients see it, on a 3-node in-process cluster:
//! finalizers and two-phase deletion, DeleteOptions preconditions, garbage
//! collection of dependents (Background, Foreground, Orphan) by the
//! leader's controllers, namespace termination, and dryRun on every verb
//! leaving the revision where it was.
//!
//! Every wait is on a watch event (or a read that already answers), never
//! on a clock; the watch timeouts only turn a hang into a failure.

use std::time::Duration;

use kubestore_tests::{KubeClient, TestCluster};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// How long a controller's work may take before the test calls it hung.
const PATIENCE: Duration = Duration::from_secs(60);

/// A deployment's spec that validates: a selector matching its
/// template's labels, a container with an image.
fn web_spec() -> Value {
    json!({
        "replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
    })
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn cluster() -> TestCluster {
    TestCluster::new(3).await.expect("cluster")
}

/// A JSON body as a request body.
fn body(v: &Value, ct: &'static str) -> Option<(Vec<u8>, &'static str)> {
    Some((v.to_string().into_bytes(), ct))
}

/// Waits until `collection`/`name` is gone: answers at once if it already
/// is, else watches it from the revision read until its DELETED event.
async fn until_deleted(k: &KubeClient, collection: &str, name: &str) {
    let got = k.get(&format!("{collection}/{name}")).await.expect("get");
    if got.status == StatusCode::NOT_FOUND {
        return;
    }
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    let mut w = k
        .watch(&format!(
            "{collection}?watch=1&fieldSelector=metadata.name%3D{name}&resourceVersion={}",
            got.rv()
        ))
        .await
        .expect("watch");
    loop {
        let ev = w
            .next_event(PATIENCE)
            .await
            .expect("an event")
            .expect("the watch stays open");
        if ev["type"] == "DELETED" {
            return;
        }
    }
}

/// Waits for the next event of `name` on an open watch and returns it.
async fn next_of(w: &mut kubestore_tests::kube::WatchStream, name: &str) -> Value {
    loop {
        let ev = w
            .next_event(PATIENCE)
            .await
            .expect("an event")
            .expect("the watch stays open");
        if ev["object"]["metadata"]["name"] == name {
            return ev;
        }
    }
}

fn owner_ref(owner: &Value, block: bool) -> Value {
    json!({
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": block,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizer_holds_a_deleted_object_until_the_update_that_removes_it() {
    let c = cluster().await;
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));

    // Phase 1: an object with a finalizer, watched from its creation.
    let created = n1
        .post(
            CMS,
            &json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {"a": "1"}}),
        )
        .await
        .expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let mut w = n3
        .watch(&format!(
            "{CMS}?watch=1&fieldSelector=metadata.name%3Dheld&resourceVersion={}",
            created.rv()
        ))
        .await
        .expect("watch");

    // Phase 2: preconditions that do not hold are kube's 409s.
    let wrong = n2
        .request(
            Method::DELETE,
            &format!("{CMS}/held"),
            body(
                &json!({"preconditions": {"uid": "not-its-uid"}}),
                "application/json",
            ),
        )
        .await
        .expect("delete");
    assert_eq!(wrong.status, StatusCode::CONFLICT, "{}", wrong.text);
    assert_eq!(wrong.body["reason"], "Conflict");
    assert_eq!(
        wrong.body["message"],
        format!(
            "Operation cannot be fulfilled on configmaps \"held\": Precondition failed: UID in precondition: not-its-uid, UID in object meta: {}",
            created.body["metadata"]["uid"].as_str().expect("uid")
        )
    );
    let stale = n2
        .request(
            Method::DELETE,
            &format!("{CMS}/held"),
            body(
                &json!({"preconditions": {"resourceVersion": (created.rv() - 1).to_string()}}),
                "application/json",
            ),
        )
        .await
        .expect("delete");
    assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.text);

    // Phase 3: DELETE keeps it, marked; every node reads it so; the watch
    // sees MODIFIED.
    let deleted = n2
        .request(
            Method::DELETE,
            &format!("{CMS}/held"),
            body(
                &json!({"kind": "DeleteOptions", "apiVersion": "v1",
                        "preconditions": {"uid": created.body["metadata"]["uid"]}}),
                "application/json",
            ),
        )
        .await
        .expect("delete");
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    let stamp = deleted.body["metadata"]["deletionTimestamp"].clone();
    assert!(stamp.is_string(), "{}", deleted.text);
    assert_eq!(deleted.body["metadata"]["deletionGracePeriodSeconds"], 0);
    for n in [&n1, &n3] {
        let got = n.get(&format!("{CMS}/held")).await.expect("get");
        assert_eq!(got.status, StatusCode::OK, "{}", got.text);
        assert_eq!(got.body["metadata"]["deletionTimestamp"], stamp);
    }
    let ev = next_of(&mut w, "held").await;
    assert_eq!(ev["type"], "MODIFIED", "{ev}");
    assert_eq!(ev["object"]["metadata"]["deletionTimestamp"], stamp);

    // Phase 4: no new finalizer on an object being deleted (kube's 422).
    let more = n1
        .request(
            Method::PATCH,
            &format!("{CMS}/held"),
            body(
                &json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
                "application/merge-patch+json",
            ),
        )
        .await
        .expect("patch");
    assert_eq!(
        more.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        more.text
    );
    assert!(
        more.body["message"].as_str().is_some_and(
            |m| m.contains("no new finalizers can be added if the object is being deleted")
        ),
        "{}",
        more.text
    );

    // Phase 5: the update that removes the last finalizer deletes it; the
    // watch sees DELETED and no node has it any more.
    let released = n3
        .request(
            Method::PATCH,
            &format!("{CMS}/held"),
            body(
                &json!({"metadata": {"finalizers": null}}),
                "application/merge-patch+json",
            ),
        )
        .await
        .expect("patch");
    assert_eq!(released.status, StatusCode::OK, "{}", released.text);
    let ev = next_of(&mut w, "held").await;
    assert_eq!(ev["type"], "DELETED", "{ev}");
    for n in [&n1, &n2, &n3] {
        let got = n.get(&format!("{CMS}/held")).await.expect("get");
        assert_eq!(got.status, StatusCode::NOT_FOUND, "{}", got.text);
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_garbage_collector_deletes_or_orphans_dependents_by_policy() {
    let c = cluster().await;
    let follower = c.follower().await.expect("a follower");
    let k = c.kube(follower);
    let deps = "/apis/apps/v1/namespaces/default/deployments";
    let secrets = "/api/v1/namespaces/default/secrets";

    // Phase 1: Background. The owner goes now; its dependents (of other
    // types) after it, deleted by the leader's garbage collector.
    let owner = k
        .post(CMS, &json!({"metadata": {"name": "bg-owner"}}))
        .await
        .expect("owner");
    assert_eq!(owner.status, StatusCode::CREATED, "{}", owner.text);
    let dep = k
        .post(
            deps,
            &json!({"metadata": {"name": "bg-dep", "ownerReferences": [owner_ref(&owner.body, false)]},
                    "spec": web_spec()}),
        )
        .await
        .expect("dependent");
    assert_eq!(dep.status, StatusCode::CREATED, "{}", dep.text);
    let secret = k
        .post(
            secrets,
            &json!({"metadata": {"name": "bg-secret", "ownerReferences": [owner_ref(&owner.body, false)]}}),
        )
        .await
        .expect("dependent");
    assert_eq!(secret.status, StatusCode::CREATED, "{}", secret.text);
    // A dependent of the dependent: collected in turn once its owner is.
    let grandchild = k
        .post(
            CMS,
            &json!({"metadata": {"name": "bg-grandchild", "ownerReferences": [owner_ref(&dep.body, false)]}}),
        )
        .await
        .expect("grandchild");
    assert_eq!(
        grandchild.status,
        StatusCode::CREATED,
        "{}",
        grandchild.text
    );
    let gone = k
        .request(
            Method::DELETE,
            &format!("{CMS}/bg-owner"),
            body(
                &json!({"propagationPolicy": "Background"}),
                "application/json",
            ),
        )
        .await
        .expect("delete");
    assert_eq!(gone.status, StatusCode::OK, "{}", gone.text);
    assert_eq!(
        k.get(&format!("{CMS}/bg-owner")).await.expect("get").status,
        StatusCode::NOT_FOUND,
        "a background delete removes the owner at once"
    );
    until_deleted(&k, deps, "bg-dep").await;
    until_deleted(&k, secrets, "bg-secret").await;
    until_deleted(&k, CMS, "bg-grandchild").await;

    // Phase 2: Foreground. The owner is kept with `foregroundDeletion`
    // until its blocking dependent is gone; the dependent is held by a
    // finalizer of its own until the test releases it.
    let owner = k
        .post(CMS, &json!({"metadata": {"name": "fg-owner"}}))
        .await
        .expect("owner");
    let blocking = k
        .post(
            CMS,
            &json!({"metadata": {"name": "fg-dep", "finalizers": ["example.com/hold"],
                                 "ownerReferences": [owner_ref(&owner.body, true)]}}),
        )
        .await
        .expect("dependent");
    assert_eq!(blocking.status, StatusCode::CREATED, "{}", blocking.text);
    let mut dep_watch = k
        .watch(&format!(
            "{CMS}?watch=1&fieldSelector=metadata.name%3Dfg-dep&resourceVersion={}",
            blocking.rv()
        ))
        .await
        .expect("watch");
    let marked = k
        .request(
            Method::DELETE,
            &format!("{CMS}/fg-owner?propagationPolicy=Foreground"),
            None,
        )
        .await
        .expect("delete");
    assert_eq!(marked.status, StatusCode::OK, "{}", marked.text);
    assert_eq!(
        marked.body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(marked.body["metadata"]["deletionTimestamp"].is_string());
    // The collector deletes the dependent: its finalizer keeps it, marked.
    let ev = next_of(&mut dep_watch, "fg-dep").await;
    assert_eq!(ev["type"], "MODIFIED", "{ev}");
    assert!(
        ev["object"]["metadata"]["deletionTimestamp"].is_string(),
        "{ev}"
    );
    let still = k.get(&format!("{CMS}/fg-owner")).await.expect("get");
    assert_eq!(
        still.status,
        StatusCode::OK,
        "the owner waits for its blocking dependent"
    );
    let released = k
        .request(
            Method::PATCH,
            &format!("{CMS}/fg-dep"),
            body(
                &json!({"metadata": {"finalizers": []}}),
                "application/merge-patch+json",
            ),
        )
        .await
        .expect("release");
    assert_eq!(released.status, StatusCode::OK, "{}", released.text);
    until_deleted(&k, CMS, "fg-dep").await;
    until_deleted(&k, CMS, "fg-owner").await;

    // Phase 3: Orphan. The owner goes; its dependent stays, without the
    // reference to it.
    let owner = k
        .post(CMS, &json!({"metadata": {"name": "or-owner"}}))
        .await
        .expect("owner");
    let kept = k
        .post(
            secrets,
            &json!({"metadata": {"name": "or-dep", "ownerReferences": [owner_ref(&owner.body, true)]}}),
        )
        .await
        .expect("dependent");
    assert_eq!(kept.status, StatusCode::CREATED, "{}", kept.text);
    let orphaning = k
        .request(
            Method::DELETE,
            &format!("{CMS}/or-owner"),
            body(&json!({"propagationPolicy": "Orphan"}), "application/json"),
        )
        .await
        .expect("delete");
    assert_eq!(orphaning.status, StatusCode::OK, "{}", orphaning.text);
    assert_eq!(orphaning.body["metadata"]["finalizers"], json!(["orphan"]));
    until_deleted(&k, CMS, "or-owner").await;
    let orphan = k.get(&format!("{secrets}/or-dep")).await.expect("get");
    assert_eq!(orphan.status, StatusCode::OK, "{}", orphan.text);
    assert!(
        orphan.body["metadata"].get("ownerReferences").is_none(),
        "{}",
        orphan.text
    );

    // Phase 4: a dependent created for an owner already gone is collected.
    let late = k
        .post(
            CMS,
            &json!({"metadata": {"name": "late-dep", "ownerReferences": [owner_ref(&owner.body, false)]}}),
        )
        .await
        .expect("dependent");
    assert_eq!(late.status, StatusCode::CREATED, "{}", late.text);
    until_deleted(&k, CMS, "late-dep").await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_namespace_terminates_empties_and_goes() {
    let c = cluster().await;
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));
    let ns = "/api/v1/namespaces";
    let cms = "/api/v1/namespaces/doomed/configmaps";
    let created = n1
        .post(ns, &json!({"metadata": {"name": "doomed"}}))
        .await
        .expect("ns");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["spec"]["finalizers"], json!(["kubernetes"]));

    // Phase 1: content of several types, one held by a finalizer.
    for (path, obj) in [
        (cms, json!({"metadata": {"name": "plain"}})),
        (
            cms,
            json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        ),
        (
            "/api/v1/namespaces/doomed/secrets",
            json!({"metadata": {"name": "s"}}),
        ),
        (
            "/apis/apps/v1/namespaces/doomed/deployments",
            json!({"metadata": {"name": "web"}, "spec": web_spec()}),
        ),
        (
            "/apis/coordination.k8s.io/v1/namespaces/doomed/leases",
            json!({"metadata": {"name": "l"}, "spec": {}}),
        ),
    ] {
        let r = n2.post(path, &obj).await.expect("create");
        assert_eq!(r.status, StatusCode::CREATED, "{path}: {}", r.text);
    }

    // Phase 2: DELETE answers the namespace, terminating.
    let del = n3.delete(&format!("{ns}/doomed")).await.expect("delete");
    assert_eq!(del.status, StatusCode::OK, "{}", del.text);
    assert_eq!(del.body["status"]["phase"], "Terminating", "{}", del.text);
    assert!(del.body["metadata"]["deletionTimestamp"].is_string());

    // Phase 3: creating in it is refused as kube words it, on every node.
    for n in [&n1, &n2, &n3] {
        let refused = n
            .post(cms, &json!({"metadata": {"name": "late"}}))
            .await
            .expect("create");
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
        assert_eq!(refused.body["reason"], "Forbidden");
        assert_eq!(
            refused.body["message"],
            "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
        );
        assert_eq!(
            refused.body["details"]["causes"][0]["reason"],
            "NamespaceTerminating"
        );
    }

    // Phase 4: the namespace controller deletes what it can; the held
    // object is marked and keeps the namespace.
    for (collection, name) in [
        (cms, "plain"),
        ("/api/v1/namespaces/doomed/secrets", "s"),
        ("/apis/apps/v1/namespaces/doomed/deployments", "web"),
        ("/apis/coordination.k8s.io/v1/namespaces/doomed/leases", "l"),
    ] {
        until_deleted(&n1, collection, name).await;
    }
    let held = n1.get(&format!("{cms}/held")).await.expect("get");
    assert_eq!(held.status, StatusCode::OK, "{}", held.text);
    let ns_now = n1.get(&format!("{ns}/doomed")).await.expect("get");
    assert_eq!(ns_now.status, StatusCode::OK);
    assert_eq!(ns_now.body["status"]["phase"], "Terminating");
    let mut ns_watch = n2
        .watch(&format!(
            "{ns}?watch=1&fieldSelector=metadata.name%3Ddoomed&resourceVersion={}",
            ns_now.rv()
        ))
        .await
        .expect("watch");
    // Its conditions say what is left and why, in kube's words (written
    // once only finalizers hold what is left: now, or in an event to come).
    let mut state = ns_now.body.clone();
    while state["status"]["conditions"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        state = next_of(&mut ns_watch, "doomed").await["object"].clone();
    }
    let conditions = &state["status"]["conditions"];
    assert_eq!(
        conditions[0]["type"], "NamespaceContentRemaining",
        "{state}"
    );
    assert_eq!(
        conditions[0]["message"],
        "Some resources are remaining: configmaps. has 1 resource instances"
    );
    assert_eq!(conditions[1]["type"], "NamespaceFinalizersRemaining");
    assert_eq!(
        conditions[1]["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );

    // Phase 5: its release lets the namespace go.
    let released = n2
        .request(
            Method::PATCH,
            &format!("{cms}/held"),
            body(
                &json!({"metadata": {"finalizers": null}}),
                "application/merge-patch+json",
            ),
        )
        .await
        .expect("release");
    assert_eq!(released.status, StatusCode::OK, "{}", released.text);
    loop {
        let ev = next_of(&mut ns_watch, "doomed").await;
        if ev["type"] == "DELETED" {
            break;
        }
    }
    for n in [&n1, &n2, &n3] {
        let got = n.get(&format!("{ns}/doomed")).await.expect("get");
        assert_eq!(got.status, StatusCode::NOT_FOUND, "{}", got.text);
    }
    // A namespace of that name can be made again, empty.
    let again = n1
        .post(ns, &json!({"metadata": {"name": "doomed"}}))
        .await
        .expect("ns");
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.text);
    let list = n1.get(cms).await.expect("list");
    assert!(list.names().is_empty(), "{:?}", list.names());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_every_verb_leaves_the_revision_where_it_was() {
    let c = cluster().await;
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));
    let created = n1
        .create_configmap("default", "real", "v1")
        .await
        .expect("create");
    assert_eq!(created.status, StatusCode::CREATED);
    let pods = "/api/v1/namespaces/default/pods";
    let pod = n1
        .post(
            pods,
            &json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )
        .await
        .expect("pod");
    assert_eq!(pod.status, StatusCode::CREATED, "{}", pod.text);
    let revision = |r: &kubestore_tests::kube::Reply| r.rv();
    let before = revision(&n2.get(CMS).await.expect("list"));
    assert!(before >= pod.rv());

    // POST: the object as it would be stored, without a resourceVersion.
    let post = n2
        .request(
            Method::POST,
            &format!("{CMS}?dryRun=All"),
            body(
                &json!({"metadata": {"generateName": "dry-"}, "data": {"a": "b"}}),
                "application/json",
            ),
        )
        .await
        .expect("post");
    assert_eq!(post.status, StatusCode::CREATED, "{}", post.text);
    assert!(post.body["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n.starts_with("dry-")));
    assert!(post.body["metadata"]["uid"].is_string());
    assert!(
        post.body["metadata"].get("resourceVersion").is_none(),
        "{}",
        post.text
    );
    let dup = n2
        .request(
            Method::POST,
            &format!("{CMS}?dryRun=All"),
            body(&json!({"metadata": {"name": "real"}}), "application/json"),
        )
        .await
        .expect("post");
    assert_eq!(
        dup.status,
        StatusCode::CONFLICT,
        "a dry run checks as the real one does"
    );

    // PUT, PATCH (object and status), DELETE, deletecollection.
    let mut changed = created.body.clone();
    changed["data"]["value"] = json!("v2");
    let put = n3
        .request(
            Method::PUT,
            &format!("{CMS}/real?dryRun=All"),
            body(&changed, "application/json"),
        )
        .await
        .expect("put");
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    assert_eq!(put.body["data"]["value"], "v2");
    assert_eq!(put.rv(), created.rv(), "answered at the current revision");
    let patch = n1
        .request(
            Method::PATCH,
            &format!("{CMS}/real?dryRun=All"),
            body(
                &json!({"data": {"value": "v3"}}),
                "application/merge-patch+json",
            ),
        )
        .await
        .expect("patch");
    assert_eq!(patch.status, StatusCode::OK, "{}", patch.text);
    assert_eq!(patch.body["data"]["value"], "v3");
    let status = n2
        .request(
            Method::PATCH,
            &format!("{pods}/p/status?dryRun=All"),
            body(
                &json!({"status": {"phase": "Running"}}),
                "application/merge-patch+json",
            ),
        )
        .await
        .expect("status patch");
    assert_eq!(status.status, StatusCode::OK, "{}", status.text);
    assert_eq!(status.body["status"]["phase"], "Running");
    let del = n3
        .request(Method::DELETE, &format!("{CMS}/real?dryRun=All"), None)
        .await
        .expect("delete");
    assert_eq!(del.status, StatusCode::OK, "{}", del.text);
    let del_body = n3
        .request(
            Method::DELETE,
            &format!("{CMS}/real"),
            body(
                &json!({"dryRun": ["All"], "propagationPolicy": "Foreground"}),
                "application/json",
            ),
        )
        .await
        .expect("delete");
    assert_eq!(del_body.status, StatusCode::OK, "{}", del_body.text);
    assert_eq!(
        del_body.body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    let sweep = n1
        .request(Method::DELETE, &format!("{CMS}?dryRun=All"), None)
        .await
        .expect("deletecollection");
    assert_eq!(sweep.status, StatusCode::OK, "{}", sweep.text);
    assert_eq!(sweep.names(), vec!["real"]);
    let ns_dry = n1
        .request(
            Method::DELETE,
            "/api/v1/namespaces/kube-public?dryRun=All",
            None,
        )
        .await
        .expect("delete");
    assert_eq!(
        ns_dry.status,
        StatusCode::FORBIDDEN,
        "system namespaces stay, dry run or not"
    );

    // Another dryRun value is kube's 422.
    let bogus = n1
        .request(
            Method::POST,
            &format!("{CMS}?dryRun=Some"),
            body(&json!({"metadata": {"name": "x"}}), "application/json"),
        )
        .await
        .expect("post");
    assert_eq!(
        bogus.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        bogus.text
    );
    assert_eq!(bogus.body["reason"], "Invalid");
    assert_eq!(
        bogus.body["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: [\"Some\"]: supported values: \"All\""
    );

    // Nothing moved: the same revision everywhere, the object unchanged.
    for n in [&n1, &n2, &n3] {
        assert_eq!(revision(&n.get(CMS).await.expect("list")), before);
        let real = n.get(&format!("{CMS}/real")).await.expect("get");
        assert_eq!(real.body["data"]["value"], "v1");
        assert!(real.body["metadata"].get("deletionTimestamp").is_none());
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_a_dead_leader_left_pending_is_finished_by_the_next() {
    let mut c = cluster().await;
    let leader = c.leader().await.expect("a leader");
    let others: Vec<u64> = c.ids().into_iter().filter(|id| *id != leader).collect();
    let k = c.kube(others[0]);

    // Phase 1: a foreground deletion the leader's collector has started:
    // the blocking dependent is marked, held by its own finalizer.
    let owner = k
        .post(CMS, &json!({"metadata": {"name": "fo-owner"}}))
        .await
        .expect("owner");
    assert_eq!(owner.status, StatusCode::CREATED, "{}", owner.text);
    let dep = k
        .post(
            CMS,
            &json!({"metadata": {"name": "fo-dep", "finalizers": ["example.com/hold"],
                                 "ownerReferences": [owner_ref(&owner.body, true)]}}),
        )
        .await
        .expect("dependent");
    assert_eq!(dep.status, StatusCode::CREATED, "{}", dep.text);
    let mut dep_watch = k
        .watch(&format!(
            "{CMS}?watch=1&fieldSelector=metadata.name%3Dfo-dep&resourceVersion={}",
            dep.rv()
        ))
        .await
        .expect("watch");
    let marked = k
        .request(
            Method::DELETE,
            &format!("{CMS}/fo-owner"),
            body(
                &json!({"propagationPolicy": "Foreground"}),
                "application/json",
            ),
        )
        .await
        .expect("delete");
    assert_eq!(marked.status, StatusCode::OK, "{}", marked.text);
    let ev = next_of(&mut dep_watch, "fo-dep").await;
    assert!(
        ev["object"]["metadata"]["deletionTimestamp"].is_string(),
        "{ev}"
    );

    // Phase 2: the leader dies; the dependent is released through a
    // survivor. Only the next leader's controllers can finish the owner.
    c.kill(leader).await.expect("kill the leader");
    let new_leader = c.leader().await.expect("a new leader");
    assert_ne!(new_leader, leader);
    let released = k
        .request(
            Method::PATCH,
            &format!("{CMS}/fo-dep"),
            body(
                &json!({"metadata": {"finalizers": null}}),
                "application/merge-patch+json",
            ),
        )
        .await
        .expect("release");
    assert_eq!(released.status, StatusCode::OK, "{}", released.text);
    until_deleted(&k, CMS, "fo-owner").await;

    // Phase 3: a namespace deleted under the new leader completes too.
    let ns = k
        .post(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "after"}}),
        )
        .await
        .expect("ns");
    assert_eq!(ns.status, StatusCode::CREATED, "{}", ns.text);
    let inside = k
        .post(
            "/api/v1/namespaces/after/configmaps",
            &json!({"metadata": {"name": "x"}}),
        )
        .await
        .expect("cm");
    assert_eq!(inside.status, StatusCode::CREATED, "{}", inside.text);
    let del = c
        .kube(others[1])
        .delete("/api/v1/namespaces/after")
        .await
        .expect("delete");
    assert_eq!(del.status, StatusCode::OK, "{}", del.text);
    until_deleted(&k, "/api/v1/namespaces", "after").await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_pod_is_deleted_gracefully() {
    const PODS: &str = "/api/v1/namespaces/default/pods";
    let c = cluster().await;
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));
    let pod = |name: &str, node: &str| {
        json!({"metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "c", "image": "nginx:1.27"}]}})
    };
    let node = n1
        .post("/api/v1/nodes", &json!({"metadata": {"name": "worker-1"}}))
        .await
        .expect("node");
    assert_eq!(node.status, StatusCode::CREATED, "{}", node.text);

    // Phase 1: a pod on a node that exists is kept for its grace period:
    // its kubelet stops it, then deletes it with a grace period of 0.
    let created = n1
        .post(PODS, &pod("on-node", "worker-1"))
        .await
        .expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let deleted = n2
        .request(Method::DELETE, &format!("{PODS}/on-node"), None)
        .await
        .expect("delete");
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    let meta = &deleted.body["metadata"];
    assert_eq!(meta["deletionGracePeriodSeconds"], 30, "{}", deleted.text);
    assert!(meta["deletionTimestamp"].is_string(), "{}", deleted.text);
    let kept = n3.get(&format!("{PODS}/on-node")).await.expect("get");
    assert_eq!(kept.status, StatusCode::OK, "still there: {}", kept.text);
    // A longer period changes nothing; a shorter one moves the deadline.
    let longer = n3
        .request(
            Method::DELETE,
            &format!("{PODS}/on-node?gracePeriodSeconds=60"),
            None,
        )
        .await
        .expect("delete");
    assert_eq!(longer.status, StatusCode::OK, "{}", longer.text);
    assert_eq!(longer.body["metadata"]["deletionGracePeriodSeconds"], 30);
    let shorter = n3
        .request(
            Method::DELETE,
            &format!("{PODS}/on-node?gracePeriodSeconds=10"),
            None,
        )
        .await
        .expect("delete");
    assert_eq!(shorter.body["metadata"]["deletionGracePeriodSeconds"], 10);
    // The kubelet's final delete.
    let last = n1
        .request(
            Method::DELETE,
            &format!("{PODS}/on-node"),
            body(&json!({"gracePeriodSeconds": 0}), "application/json"),
        )
        .await
        .expect("delete");
    assert_eq!(last.status, StatusCode::OK, "{}", last.text);
    let gone = n2.get(&format!("{PODS}/on-node")).await.expect("get");
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.text);

    // Phase 2: an unscheduled pod goes at once.
    let pending = json!({"metadata": {"name": "pending"},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}});
    let created = n1.post(PODS, &pending).await.expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let deleted = n2
        .request(Method::DELETE, &format!("{PODS}/pending"), None)
        .await
        .expect("delete");
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    let gone = n3.get(&format!("{PODS}/pending")).await.expect("get");
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.text);

    // Phase 3: a pod bound to a node that is no Node object has no kubelet:
    // the leader's pod garbage collector deletes it when its grace period
    // ends (MODIFIED with the deadline, then DELETED).
    let mut orphan = pod("orphan", "no-such-node");
    orphan["spec"]["terminationGracePeriodSeconds"] = json!(2);
    let created = n1.post(PODS, &orphan).await.expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let mut w = n3
        .watch(&format!(
            "{PODS}?watch=1&fieldSelector=metadata.name%3Dorphan&resourceVersion={}",
            created.rv()
        ))
        .await
        .expect("watch");
    let deleted = n2
        .request(Method::DELETE, &format!("{PODS}/orphan"), None)
        .await
        .expect("delete");
    assert_eq!(deleted.body["metadata"]["deletionGracePeriodSeconds"], 2);
    let marked = next_of(&mut w, "orphan").await;
    assert_eq!(marked["type"], "MODIFIED", "{marked}");
    let removed = next_of(&mut w, "orphan").await;
    assert_eq!(removed["type"], "DELETED", "{removed}");
    let gone = n1.get(&format!("{PODS}/orphan")).await.expect("get");
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.text);
}

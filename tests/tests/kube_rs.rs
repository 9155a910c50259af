//! The real kube-rs client: a `watcher` + `reflector` on a follower of a
//! 3-node cluster, through concurrent writes, forced compactions and a
//! restart of the node it watches, ends with a store identical to a fresh
//! list. Whenever its resume revision has been compacted the server answers
//! `410 Expired` and kube-rs must relist.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client, Config};
use kubestore_tests::{KubeClient, TestCluster};
use reqwest::StatusCode;
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn client_for(url: &str) -> Client {
    let config = Config::new(url.parse().expect("a valid URL"));
    Client::try_from(config).expect("a kube client")
}

/// name → resourceVersion of every configmap in `default`, per a list.
fn by_name(items: &[serde_json::Value]) -> BTreeMap<String, String> {
    items
        .iter()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap_or("").to_string(),
                i["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

async fn compact_now(c: &TestCluster) -> u64 {
    let leader = c.leader().await.expect("leader");
    let current = c.kube(leader).get(CM).await.expect("list").rv();
    let resp = reqwest::Client::new()
        .post(format!(
            "{}/debug/compact?revision={current}",
            c.rest_url(leader)
        ))
        .send()
        .await
        .expect("compact");
    assert_eq!(resp.status(), StatusCode::OK);
    current
}

/// Two writers (one per client) create 15 configmaps each, updating every
/// third and deleting every third.
async fn write_round(clients: Vec<(u64, KubeClient)>, round: usize) {
    let mut tasks = Vec::new();
    for (id, k) in clients {
        tasks.push(tokio::spawn(async move {
            for i in 0..15 {
                let name = format!("r{round}-n{id}-{i}");
                let created = k
                    .create_configmap("default", &name, "1")
                    .await
                    .expect("create");
                assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
                if i % 3 == 1 {
                    let mut obj = created.body.clone();
                    obj["data"] = json!({ "value": "2" });
                    let r = k.put(&format!("{CM}/{name}"), &obj).await.expect("update");
                    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
                }
                if i % 3 == 2 {
                    let r = k.delete(&format!("{CM}/{name}")).await.expect("delete");
                    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reflector_converges_through_writes_compactions_and_a_restart() {
    let mut c = TestCluster::new(3).await.expect("cluster");
    let watched = c.follower().await.expect("a follower");
    let writers: Vec<u64> = c.ids().into_iter().filter(|id| *id != watched).collect();

    // The reflector, driven in the background; every event it sees bumps a
    // channel the test waits on.
    let api: Api<ConfigMap> = Api::namespaced(client_for(&c.rest_url(watched)), "default");
    let (reader, writer) = reflector::store();
    let (seen_tx, mut seen_rx) = tokio::sync::watch::channel(0u64);
    let relists = Arc::new(AtomicUsize::new(0));
    let stream = reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let counted = relists.clone();
    let driver = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Init) = event {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            seen_tx.send_modify(|n| *n += 1);
        }
    });

    // Phase 1: writers on the other nodes create, update and delete while
    // the leader compacts away the history behind them.
    let clients = |c: &TestCluster| -> Vec<(u64, KubeClient)> {
        writers.iter().map(|id| (*id, c.kube(*id))).collect()
    };
    for round in 0..3 {
        write_round(clients(&c), round).await;
        compact_now(&c).await;
    }

    // Phase 2: the watched node goes away; writes and a compaction happen
    // while it is down, so kube-rs resumes from a compacted revision.
    c.kill(watched).await.expect("kill");
    write_round(clients(&c), 10).await;
    let compacted = compact_now(&c).await;
    c.restart(watched).await.expect("restart");
    c.wait_compacted(compacted, Duration::from_secs(30))
        .await
        .expect("the restarted node applied the compaction too");
    write_round(clients(&c), 11).await;

    // Phase 3: the reflector's store equals a fresh linearizable list.
    let fresh = c.kube(writers[0]).get(CM).await.expect("fresh list");
    let expected = by_name(fresh.body["items"].as_array().expect("items"));
    let converged = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let actual: BTreeMap<String, String> = reader
                .state()
                .iter()
                .map(|cm| {
                    (
                        cm.metadata.name.clone().unwrap_or_default(),
                        cm.metadata.resource_version.clone().unwrap_or_default(),
                    )
                })
                .collect();
            if actual == expected {
                return;
            }
            if seen_rx.changed().await.is_err() {
                panic!("the reflector stream ended");
            }
        }
    })
    .await;
    let actual: Vec<String> = reader
        .state()
        .iter()
        .filter_map(|cm| cm.metadata.name.clone())
        .collect();
    assert!(
        converged.is_ok(),
        "the reflector did not converge: {} objects vs {} expected ({actual:?})",
        actual.len(),
        expected.len()
    );
    tracing::info!(
        relists = relists.load(Ordering::SeqCst),
        "reflector converged"
    );
    assert!(
        relists.load(Ordering::SeqCst) >= 1,
        "the watcher listed at least once"
    );
    driver.abort();
    c.shutdown().await;
}

/// kube-rs `Patch::Apply` (server-side apply) through a follower of a
/// 3-node cluster: create, a second manager's conflict (409 with one
/// cause per field), `force`, a field dropped by its only applier, and
/// the managers read back through another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_server_side_apply_conflicts_forces_and_removes_fields() {
    use kube::api::{Patch, PatchParams};

    let c = TestCluster::new(3).await.expect("cluster");
    c.wait_for_leader(Duration::from_secs(10))
        .await
        .expect("leader");
    let follower = c.follower().await.expect("follower");
    let leader = c.leader().await.expect("leader");
    let cms: Api<ConfigMap> = Api::namespaced(client_for(&c.rest_url(follower)), "default");
    let cm = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": data});

    // Phase 1: an apply of an absent object creates it.
    let created = cms
        .patch(
            "ssa",
            &PatchParams::apply("team-a"),
            &Patch::Apply(cm(json!({"a": "1", "b": "2", "c": "3"}))),
        )
        .await
        .expect("apply creates");
    assert_eq!(
        created
            .data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str),
        Some("1")
    );

    // Phase 2: another manager changing a and b conflicts on both.
    let err = cms
        .patch(
            "ssa",
            &PatchParams::apply("team-b"),
            &Patch::Apply(cm(json!({"a": "9", "b": "8"}))),
        )
        .await
        .expect_err("conflict");
    let kube::Error::Api(status) = err else {
        panic!("expected a Status, got {err:?}");
    };
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        "Apply failed with 2 conflicts: conflicts with \"team-a\":\n- .data.a\n- .data.b"
    );
    let causes = status.details.expect("details").causes;
    assert_eq!(causes.len(), 2);
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".data.a");

    // Phase 3: forced, team-b takes a and b.
    let forced = cms
        .patch(
            "ssa",
            &PatchParams::apply("team-b").force(),
            &Patch::Apply(cm(json!({"a": "9", "b": "8"}))),
        )
        .await
        .expect("forced apply");
    let data = forced.data.expect("data");
    assert_eq!((data["a"].as_str(), data["b"].as_str()), ("9", "8"));

    // Phase 4: team-a drops everything but c; a and b stay (team-b's).
    cms.patch(
        "ssa",
        &PatchParams::apply("team-a"),
        &Patch::Apply(cm(json!({"c": "3"}))),
    )
    .await
    .expect("re-apply");
    // team-b drops b: nobody else owns it, so it goes.
    cms.patch(
        "ssa",
        &PatchParams::apply("team-b"),
        &Patch::Apply(cm(json!({"a": "9"}))),
    )
    .await
    .expect("re-apply");

    // Phase 5: read back through the leader, managers included.
    let other: Api<ConfigMap> = Api::namespaced(client_for(&c.rest_url(leader)), "default");
    let read = other.get("ssa").await.expect("get");
    let data = read.data.clone().expect("data");
    assert_eq!(
        data.into_iter().collect::<Vec<_>>(),
        [
            ("a".to_string(), "9".to_string()),
            ("c".to_string(), "3".to_string())
        ]
    );
    let managers: Vec<(String, String, serde_json::Value)> = read
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            (
                e.manager.unwrap_or_default(),
                e.operation.unwrap_or_default(),
                e.fields_v1.map(|f| f.0).unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        managers
            .iter()
            .map(|(m, op, f)| (m.as_str(), op.as_str(), f.clone()))
            .collect::<Vec<_>>(),
        [
            ("team-a", "Apply", json!({"f:data": {"f:c": {}}})),
            ("team-b", "Apply", json!({"f:data": {"f:a": {}}})),
        ]
    );
    c.shutdown().await;
}

/// kube-rs `Patch::Strategic` and `Patch::Json` through a follower: a
/// strategic patch of one container merges by name and keeps the other;
/// a JSON patch whose `test` fails changes nothing (422), one whose `test`
/// holds applies, and the leader reads what the follower wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_strategic_and_json_patches() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams, PostParams};

    let c = TestCluster::new(3).await.expect("cluster");
    c.wait_for_leader(Duration::from_secs(10))
        .await
        .expect("leader");
    let follower = c.follower().await.expect("follower");
    let leader = c.leader().await.expect("leader");
    let deps: Api<Deployment> = Api::namespaced(client_for(&c.rest_url(follower)), "default");
    let web: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "app", "image": "nginx:1.26"},
                    {"name": "sidecar", "image": "envoy:1.30"},
                ]},
            },
        },
    }))
    .expect("a deployment");
    deps.create(&PostParams::default(), &web)
        .await
        .expect("create");
    let images = |d: &Deployment| -> Vec<(String, String)> {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map(|p| {
                p.containers
                    .iter()
                    .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default()
    };

    // Phase 1: a strategic merge patch of one container, by its name.
    let patched = deps
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "nginx:1.27"}
            ]}}}})),
        )
        .await
        .expect("strategic patch");
    assert_eq!(
        images(&patched),
        [
            ("app".to_string(), "nginx:1.27".to_string()),
            ("sidecar".to_string(), "envoy:1.30".to_string())
        ]
    );
    assert_eq!(patched.metadata.generation, Some(2), "a spec change");

    // Phase 2: a JSON patch whose test fails is refused and changes nothing.
    let failed: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/replicas", "value": 5},
        {"op": "replace", "path": "/spec/replicas", "value": 6},
    ]))
    .expect("a JSON patch");
    let err = deps
        .patch("web", &PatchParams::default(), &Patch::Json::<()>(failed))
        .await
        .expect_err("the test fails");
    let kube::Error::Api(status) = err else {
        panic!("expected a Status, got {err:?}");
    };
    assert_eq!(status.code, 422, "{status:?}");

    // Phase 3: one whose test holds applies.
    let ok: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/replicas", "value": 2},
        {"op": "replace", "path": "/spec/replicas", "value": 3},
        {"op": "remove", "path": "/spec/template/spec/containers/1"},
    ]))
    .expect("a JSON patch");
    deps.patch("web", &PatchParams::default(), &Patch::Json::<()>(ok))
        .await
        .expect("json patch");

    // Phase 4: the leader reads both patches.
    let other: Api<Deployment> = Api::namespaced(client_for(&c.rest_url(leader)), "default");
    let read = other.get("web").await.expect("get");
    assert_eq!(read.spec.as_ref().and_then(|s| s.replicas), Some(3));
    assert_eq!(
        images(&read),
        [("app".to_string(), "nginx:1.27".to_string())]
    );
    assert_eq!(read.metadata.generation, Some(3));
    c.shutdown().await;
}

/// kube-rs aggregated discovery (`Discovery::run_aggregated`, one request
/// for `/apis` and one for `/api`) through a follower finds what legacy
/// discovery lists: the groups, each type's kind and scope, its verbs and
/// its subresources (a deployment's `scale` reads and writes
/// `autoscaling/v1` `Scale`); the answer carries aggregated discovery's
/// media type, and a client asking for plain JSON still gets legacy
/// discovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_aggregated_discovery_matches_the_served_types() {
    use kube::core::{discovery::Scope, GroupVersionKind};
    use kube::Discovery;

    let c = TestCluster::new(3).await.expect("cluster");
    let follower = c.follower().await.expect("follower");
    let url = c.rest_url(follower);
    let discovery = Discovery::new(client_for(&url))
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    for group in [
        "",
        "apps",
        "batch",
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
    ] {
        assert!(discovery.has_group(group), "{group:?} missing");
    }
    let (dep, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .expect("deployments");
    assert_eq!(dep.plural, "deployments");
    assert_eq!(caps.scope, Scope::Namespaced);
    assert!(caps.supports_operation("patch") && caps.supports_operation("watch"));
    let subresources: Vec<(String, String)> = caps
        .subresources
        .iter()
        .map(|(ar, _)| (ar.plural.clone(), ar.kind.clone()))
        .collect();
    assert!(
        subresources.contains(&("scale".to_string(), "Scale".to_string())),
        "{subresources:?}"
    );
    let (ns, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"))
        .expect("namespaces");
    assert_eq!(ns.plural, "namespaces");
    assert_eq!(caps.scope, Scope::Cluster);
    assert!(!caps.supports_operation("deletecollection"));

    let http = reqwest::Client::new();
    let aggregated = http
        .get(format!("{url}/apis"))
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )
        .send()
        .await
        .expect("apis");
    assert_eq!(
        aggregated.headers()["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let legacy = http
        .get(format!("{url}/apis"))
        .header("accept", "application/json")
        .send()
        .await
        .expect("apis");
    assert_eq!(legacy.headers()["content-type"], "application/json");
    let body: serde_json::Value = legacy.json().await.expect("json");
    assert_eq!(body["kind"], "APIGroupList");
    c.shutdown().await;
}

/// A custom resource defined at run time, through kube-rs only: the
/// definition created through one node (`Api<CustomResourceDefinition>`),
/// found by legacy and aggregated discovery on the others, its objects
/// written through a second node as `DynamicObject`s and followed through
/// the third by a `watcher` + `reflector` until the store holds them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_discovers_and_watches_a_custom_resource_defined_at_run_time() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{DynamicObject, PostParams};
    use kube::core::GroupVersionKind;
    use kube::Discovery;

    let c = TestCluster::new(3).await.expect("cluster");
    let (u1, u2, u3) = (c.rest_url(1), c.rest_url(2), c.rest_url(3));
    let definition: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gizmos.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gizmos", "kind": "Gizmo"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .expect("a definition");
    let crds: Api<CustomResourceDefinition> = Api::all(client_for(&u1));
    let created = crds
        .create(&PostParams::default(), &definition)
        .await
        .expect("create the definition");
    let established = created
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established, "established when created");

    let gvk = GroupVersionKind::gvk("example.com", "v1", "Gizmo");
    let legacy = Discovery::new(client_for(&u2))
        .run()
        .await
        .expect("legacy discovery");
    let (resource, _) = legacy.resolve_gvk(&gvk).expect("legacy discovery finds it");
    assert_eq!(resource.plural, "gizmos");
    let aggregated = Discovery::new(client_for(&u3))
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    assert!(
        aggregated.resolve_gvk(&gvk).is_some(),
        "aggregated discovery finds it"
    );

    let watched: Api<DynamicObject> = Api::namespaced_with(client_for(&u3), "default", &resource);
    let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
    let reader = writer.as_reader();
    // Every watcher event (the initial list's end too, which is when the
    // store swaps in what the list found).
    let mut events = reflector(writer, watcher(watched, watcher::Config::default())).boxed();
    let written: Api<DynamicObject> = Api::namespaced_with(client_for(&u2), "default", &resource);
    for i in 0..3 {
        let mut gizmo = DynamicObject::new(&format!("g{i}"), &resource);
        gizmo.data = json!({"spec": {"size": i}});
        written
            .create(&PostParams::default(), &gizmo)
            .await
            .expect("create a gizmo");
    }
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while reader.len() < 3 {
            events
                .next()
                .await
                .expect("the watcher keeps going")
                .expect("no watch error");
        }
    })
    .await;
    assert!(seen.is_ok(), "the reflector holds every gizmo");
    let mut names: Vec<String> = reader
        .state()
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["g0", "g1", "g2"]);
    c.shutdown().await;
}

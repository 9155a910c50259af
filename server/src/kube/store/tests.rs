//! Unit tests of the reads and writes against one node: a single-member
//! Raft node on a temporary directory (it elects itself; no peer, no
//! listener) and its watch cache, fed by its own task as in `serve`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kubestore_raft::RaftNodeConfig;
use kubestore_storage::{Command, PutRequest, Txn};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::*;
use crate::kube::admission::{self, NameGenerator, UpdateScope};
use crate::kube::cache::{CacheLimits, WatchCache};
use crate::kube::error::KubeError;
use crate::kube::options::{DeleteOptions, DryRun, Preconditions, Propagation};
use crate::kube::paging::{ContinueToken, PageRequest};
use crate::kube::resources::{self, ResourceType};
use crate::kube::selectors::Selectors;

struct OneNode {
    kube: KubeStore,
    node: RaftNode,
    stop: watch::Sender<bool>,
    feeder: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl OneNode {
    /// A node whose watch cache keeps `max_events` events per type.
    async fn start(max_events: usize) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let members = BTreeMap::from([(1, "127.0.0.1:1".to_string())]);
        let config = RaftNodeConfig::new(1, dir.path().join("node"), members);
        let node = RaftNode::start(config).await.expect("start");
        node.wait_for_leader(Duration::from_secs(10))
            .await
            .expect("a one-member cluster elects itself");
        let cache = WatchCache::new(
            node.store().clone(),
            CacheLimits {
                max_events,
                max_age: Duration::from_secs(300),
            },
        );
        cache.catch_up_blocking().await.expect("cache filled");
        let (stop, stopped) = watch::channel(false);
        let feeder = tokio::spawn(cache.clone().run(stopped));
        let kube = KubeStore::new(node.clone(), cache);
        kube.ensure_system_namespaces()
            .await
            .expect("system namespaces");
        Self {
            kube,
            node,
            stop,
            feeder,
            _dir: dir,
        }
    }

    async fn shutdown(self) {
        self.stop.send_replace(true);
        let _ = self.feeder.await;
        self.node.shutdown().await.expect("shutdown");
    }

    /// One page of at most `limit` objects at the latest revision, without
    /// selectors.
    async fn page(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        limit: u64,
        token: Option<ContinueToken>,
    ) -> Result<Listed, KubeError> {
        self.kube
            .list_page(
                rt,
                ns,
                Freshness::MostRecent,
                &Selectors::default(),
                &PageRequest { limit, token },
            )
            .await
    }

    async fn create(&self, rt: &ResourceType, ns: Option<&str>, body: Value) -> Value {
        let admitted =
            admission::admit_create(rt, ns, body.to_string().as_bytes()).expect("admitted");
        self.kube
            .create(rt, admitted, DryRun::No)
            .await
            .expect("created")
    }

    async fn update(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
    ) -> Result<Value, KubeError> {
        let admitted = admission::admit_update_body(
            rt,
            ns,
            name,
            UpdateScope::Object,
            body.to_string().as_bytes(),
        )?;
        self.kube
            .update(rt, admitted, UpdateScope::Object, DryRun::No)
            .await
    }

    async fn get(&self, rt: &'static ResourceType, ns: Option<&str>, name: &str) -> Value {
        self.kube
            .get(rt, ns, name, Freshness::MostRecent)
            .await
            .expect("get")
            .0
            .to_value()
    }
}

fn configmaps() -> &'static ResourceType {
    resources::find("", "v1", "configmaps").expect("configmaps")
}

/// A deployment's spec that validates (a selector matching its
/// template, a container with an image).
fn web_spec(replicas: u32) -> Value {
    json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
    })
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a resourceVersion")
}

fn cm(name: &str, v: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"app": "x"}}, "data": {"v": v}})
}

fn names(listed: &Listed) -> Vec<String> {
    listed
        .items
        .iter()
        .map(|o| {
            o.to_value()["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_is_read_back_at_its_revision_and_guarded_by_absence_and_namespace() {
    let n = OneNode::start(100).await;
    let rt = configmaps();
    let created = n.create(rt, Some("default"), cm("a", "1")).await;
    let read = n.get(rt, Some("default"), "a").await;
    assert_eq!(read["data"]["v"], "1");
    assert_eq!(rv(&read), rv(&created));
    assert_eq!(read["metadata"]["uid"], created["metadata"]["uid"]);

    let again = admission::admit_create(rt, Some("default"), cm("a", "2").to_string().as_bytes())
        .expect("admitted");
    match n.kube.create(rt, again, DryRun::No).await {
        Err(KubeError::AlreadyExists { name, .. }) => assert_eq!(name, "a"),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }

    let elsewhere =
        admission::admit_create(rt, Some("nowhere"), cm("a", "1").to_string().as_bytes())
            .expect("admitted");
    match n.kube.create(rt, elsewhere, DryRun::No).await {
        Err(KubeError::NotFound { resource, name }) => {
            assert_eq!(
                (resource.as_str(), name.as_str()),
                ("namespaces", "nowhere")
            )
        }
        other => panic!("expected the namespace to be missing, got {other:?}"),
    }
    n.shutdown().await;
}

/// A create guards on the revision its namespace was last found usable
/// at, without reading it again; a namespace deleted and created again
/// since fails that guard, and the create is decided on the namespace as
/// it is now: refused while it is gone, written once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_in_a_namespace_changed_since_the_last_is_decided_on_it_now() {
    let n = OneNode::start(100).await;
    let rt = configmaps();
    let ns = resources::namespaces();
    n.create(ns, None, json!({"metadata": {"name": "cycle"}}))
        .await;
    n.create(rt, Some("cycle"), cm("first", "1")).await;
    n.create(rt, Some("cycle"), cm("second", "1")).await;
    let failed = n.kube.guard_failures(GuardedWrite::Create);
    assert_eq!(failed, 0, "the namespace remembered is current");

    // Gone: terminating, emptied, finalized.
    n.kube
        .delete(ns, None, "cycle", &DeleteOptions::default())
        .await
        .expect("namespace marked");
    for name in ["first", "second"] {
        n.kube
            .delete(rt, Some("cycle"), name, &DeleteOptions::default())
            .await
            .expect("emptied");
    }
    n.kube.finalize_namespace("cycle").await.expect("finalized");
    let absent =
        admission::admit_create(rt, Some("cycle"), cm("third", "1").to_string().as_bytes())
            .expect("admitted");
    match n.kube.create(rt, absent, DryRun::No).await {
        Err(KubeError::NotFound { resource, name }) => {
            assert_eq!((resource.as_str(), name.as_str()), ("namespaces", "cycle"))
        }
        other => panic!("expected the namespace to be missing, got {other:?}"),
    }
    assert_eq!(
        n.kube.guard_failures(GuardedWrite::Create),
        failed + 1,
        "the remembered revision failed its guard once"
    );

    // Back: the create is written, in the new namespace.
    n.create(ns, None, json!({"metadata": {"name": "cycle"}}))
        .await;
    let third = n.create(rt, Some("cycle"), cm("third", "1")).await;
    assert_eq!(third["metadata"]["namespace"], "cycle");
    let read = n.get(rt, Some("cycle"), "third").await;
    assert_eq!(rv(&read), rv(&third));
    n.shutdown().await;
}

/// Suffixes of generated names from a fixed list (then its last, for
/// ever), and how many were asked for.
fn suffixes(list: &'static [&'static str]) -> (NameGenerator, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let names = NameGenerator::from_fn(move || {
        let i = counter.fetch_add(1, Ordering::SeqCst);
        list[i.min(list.len() - 1)].to_string()
    });
    (names, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_generated_name_is_replaced_by_another_at_most_eight_times() {
    let n = OneNode::start(1_000).await;
    let rt = configmaps();
    n.create(rt, Some("default"), cm("web-aaaaa", "taken"))
        .await;
    let generate = || {
        let Value::Object(body) =
            json!({"metadata": {"generateName": "web-"}, "data": {"v": "new"}})
        else {
            unreachable!("an object")
        };
        body
    };

    // The first two names are taken (one by the object above, one by the
    // same suffix again), the third is free.
    let (names, asked) = suffixes(&["aaaaa", "aaaaa", "bbbbb"]);
    let kube = n.kube.clone().with_name_generator(names.clone());
    let admitted =
        admission::admit_create_named(rt, Some("default"), generate(), &names).expect("admitted");
    assert_eq!(admitted.name, "web-aaaaa");
    let created = kube
        .create(rt, admitted, DryRun::No)
        .await
        .expect("created under another name");
    assert_eq!(created["metadata"]["name"], "web-bbbbb");
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    assert_eq!(
        n.get(rt, Some("default"), "web-bbbbb").await["data"]["v"],
        "new"
    );
    assert_eq!(
        n.get(rt, Some("default"), "web-aaaaa").await["data"]["v"],
        "taken"
    );

    // Every name taken: eight attempts, then kube's 409.
    let (names, asked) = suffixes(&["aaaaa"]);
    let kube = n.kube.clone().with_name_generator(names.clone());
    let admitted =
        admission::admit_create_named(rt, Some("default"), generate(), &names).expect("admitted");
    match kube.create(rt, admitted, DryRun::No).await {
        Err(e @ KubeError::GeneratedNameConflict { .. }) => assert_eq!(
            e.to_string(),
            "configmaps \"web-aaaaa\" already exists, the server was not able to generate a unique name for the object"
        ),
        other => panic!("expected the generated-name conflict, got {other:?}"),
    }
    assert_eq!(asked.load(Ordering::SeqCst), 8, "one name per attempt");

    // A name the client chose is not replaced.
    let chosen = admission::admit_create(
        rt,
        Some("default"),
        cm("web-aaaaa", "x").to_string().as_bytes(),
    )
    .expect("admitted");
    assert!(matches!(
        kube.create(rt, chosen, DryRun::No).await,
        Err(KubeError::AlreadyExists { .. })
    ));
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_naming_another_uid_fails_its_precondition() {
    let n = OneNode::start(1_000).await;
    let rt = configmaps();
    let created = n.create(rt, Some("default"), cm("a", "1")).await;
    let uid = created["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_string();
    let other = "00000000-0000-0000-0000-000000000000";
    let stale = json!({"metadata": {"name": "a", "uid": other}, "data": {"v": "2"}});
    match n.update(rt, Some("default"), "a", stale).await {
        Err(KubeError::Conflict { detail, .. }) => assert_eq!(
            detail,
            format!("Precondition failed: UID in precondition: {other}, UID in object meta: {uid}")
        ),
        other => panic!("expected the uid precondition to fail, got {other:?}"),
    }
    let same = json!({"metadata": {"name": "a", "uid": uid}, "data": {"v": "2"}});
    let updated = n
        .update(rt, Some("default"), "a", same)
        .await
        .expect("the stored uid");
    assert_eq!(updated["data"]["v"], "2");
    let none = json!({"metadata": {"name": "a"}, "data": {"v": "3"}});
    let updated = n
        .update(rt, Some("default"), "a", none)
        .await
        .expect("no uid");
    assert_eq!(
        updated["metadata"]["uid"],
        uid.as_str(),
        "an empty uid is the stored one"
    );
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_is_guarded_by_the_clients_resource_version_or_else_applies_to_the_current() {
    let n = OneNode::start(100).await;
    let dep = resources::find("apps", "v1", "deployments").expect("deployments");
    let body = json!({"metadata": {"name": "web"}, "spec": web_spec(1)});
    let created = n.create(dep, Some("default"), body).await;
    assert_eq!(created["metadata"]["generation"], 1);

    // No resourceVersion: applies to whatever is current; server-owned
    // fields are carried over and a spec change bumps the generation.
    let updated = n
        .update(
            dep,
            Some("default"),
            "web",
            json!({"metadata": {"name": "web"}, "spec": web_spec(2)}),
        )
        .await
        .expect("updated");
    assert!(rv(&updated) > rv(&created));
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(updated["metadata"]["generation"], 2);

    // A stale resourceVersion is a conflict, and nothing is written.
    let stale = json!({"metadata": {"name": "web", "resourceVersion": rv(&created).to_string()}, "spec": web_spec(3)});
    match n.update(dep, Some("default"), "web", stale).await {
        Err(KubeError::Conflict { .. }) => {}
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        n.get(dep, Some("default"), "web").await["spec"]["replicas"],
        2
    );

    // The current one is accepted.
    let fresh = json!({"metadata": {"name": "web", "resourceVersion": rv(&updated).to_string()}, "spec": web_spec(3)});
    let third = n
        .update(dep, Some("default"), "web", fresh)
        .await
        .expect("updated");
    assert_eq!(third["spec"]["replicas"], 3);

    // A malformed one is the client's mistake, an absent object 404.
    let bad = json!({"metadata": {"name": "web", "resourceVersion": "x"}});
    assert!(matches!(
        n.update(dep, Some("default"), "web", bad).await,
        Err(KubeError::BadRequest(_))
    ));
    assert!(matches!(
        n.update(
            dep,
            Some("default"),
            "gone",
            json!({"metadata": {"name": "gone"}})
        )
        .await,
        Err(KubeError::NotFound { .. })
    ));
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_loses_a_race_is_computed_again_on_the_newer_state() {
    let n = OneNode::start(100).await;
    let rt = configmaps();
    n.create(rt, Some("default"), cm("a", "1")).await;
    let key = rt.key(Some("default"), "a");
    let handle = tokio::runtime::Handle::current();
    let mut seen = Vec::new();
    let updated = n
        .kube
        .update_with(rt, Some("default"), "a", UpdateScope::Object, 5, DryRun::No, |current| {
            let obj = current.object().expect("an object");
            seen.push(obj["data"]["v"].as_str().unwrap_or("").to_string());
            if seen.len() == 1 {
                // Another writer gets in between the read and the write.
                let interloper = json!({"metadata": {"name": "a", "namespace": "default"}, "data": {"v": "other"}});
                let node = n.node.clone();
                let key = key.clone();
                tokio::task::block_in_place(|| {
                    handle.block_on(node.write(Command::Txn(Txn {
                        success: vec![kubestore_storage::Op::Put(PutRequest::new(
                            key.into_bytes(),
                            interloper.to_string(),
                        ))],
                        ..Txn::default()
                    })))
                })
                .expect("the interloper's write");
            }
            let Value::Object(mut obj) = obj else {
                unreachable!("an object");
            };
            let v = format!("{}+patched", obj["data"]["v"].as_str().unwrap_or(""));
            obj.insert("data".into(), json!({ "v": v }));
            if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
            Ok::<_, KubeError>(obj)
        })
        .await
        .expect("written on the second attempt");
    assert_eq!(seen, ["1", "other"]);
    assert_eq!(updated["data"]["v"], "other+patched");
    assert_eq!(
        n.get(rt, Some("default"), "a").await["data"]["v"],
        "other+patched"
    );
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_with_its_own_precondition_is_not_retried() {
    let n = OneNode::start(100).await;
    let rt = configmaps();
    let created = n.create(rt, Some("default"), cm("a", "1")).await;
    n.update(rt, Some("default"), "a", cm("a", "2"))
        .await
        .expect("updated");
    let mut calls = 0;
    let result = n
        .kube
        .update_with(
            rt,
            Some("default"),
            "a",
            UpdateScope::Object,
            5,
            DryRun::No,
            |current| {
                calls += 1;
                let Some(Value::Object(mut obj)) = current.object() else {
                    unreachable!("an object");
                };
                if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("resourceVersion".into(), json!(rv(&created).to_string()));
                }
                Ok::<_, KubeError>(obj)
            },
        )
        .await;
    assert!(
        matches!(result, Err(KubeError::Conflict { .. })),
        "{result:?}"
    );
    assert_eq!(calls, 1);
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_update_changes_only_the_status() {
    let n = OneNode::start(100).await;
    let dep = resources::find("apps", "v1", "deployments").expect("deployments");
    n.create(
        dep,
        Some("default"),
        json!({"metadata": {"name": "web"}, "spec": web_spec(1)}),
    )
    .await;
    let body = json!({"metadata": {"name": "web"}, "spec": web_spec(9), "status": {"replicas": 1}});
    let admitted = admission::admit_update_body(
        dep,
        Some("default"),
        "web",
        UpdateScope::Status,
        body.to_string().as_bytes(),
    )
    .expect("admitted");
    let updated = n
        .kube
        .update(dep, admitted, UpdateScope::Status, DryRun::No)
        .await
        .expect("updated");
    assert_eq!(updated["spec"]["replicas"], 1, "spec kept");
    assert_eq!(updated["status"]["replicas"], 1);
    assert_eq!(updated["metadata"]["generation"], 1);
    n.shutdown().await;
}

fn with_preconditions(pre: Preconditions) -> DeleteOptions {
    DeleteOptions {
        preconditions: pre,
        ..DeleteOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_check_their_preconditions_and_a_namespace_terminates() {
    let n = OneNode::start(100).await;
    let rt = configmaps();
    let ns = resources::namespaces();
    n.create(ns, None, json!({"metadata": {"name": "team"}}))
        .await;
    let a = n.create(rt, Some("team"), cm("a", "1")).await;
    n.create(rt, Some("team"), cm("b", "1")).await;

    let wrong_uid = with_preconditions(Preconditions {
        uid: Some("not-its-uid".into()),
        resource_version: None,
    });
    match n.kube.delete(rt, Some("team"), "a", &wrong_uid).await {
        Err(KubeError::Conflict { detail, .. }) => {
            assert!(detail.contains("Precondition failed: UID"), "{detail}")
        }
        other => panic!("expected a UID conflict, got {other:?}"),
    }
    let stale = with_preconditions(Preconditions {
        uid: None,
        resource_version: Some(rv(&a) - 1),
    });
    match n.kube.delete(rt, Some("team"), "a", &stale).await {
        Err(KubeError::Conflict { detail, .. }) => {
            assert!(
                detail.contains("Precondition failed: ResourceVersion"),
                "{detail}"
            )
        }
        other => panic!("expected a resourceVersion conflict, got {other:?}"),
    }
    let exact = with_preconditions(Preconditions {
        uid: a["metadata"]["uid"].as_str().map(str::to_string),
        resource_version: Some(rv(&a)),
    });
    let last = n
        .kube
        .delete(rt, Some("team"), "a", &exact)
        .await
        .expect("deleted");
    assert!(last.gone);
    assert_eq!(last.object["data"]["v"], "1");
    assert!(matches!(
        n.kube
            .get(rt, Some("team"), "a", Freshness::MostRecent)
            .await,
        Err(KubeError::NotFound { .. })
    ));

    assert!(matches!(
        n.kube
            .delete(ns, None, "default", &DeleteOptions::default())
            .await,
        Err(KubeError::Forbidden { .. })
    ));
    // A namespace's first DELETE marks it terminating and keeps it (its
    // controller, not running here, empties it); creates in it are refused.
    let terminating = n
        .kube
        .delete(ns, None, "team", &DeleteOptions::default())
        .await
        .expect("namespace marked");
    assert!(!terminating.gone);
    assert_eq!(terminating.object["status"]["phase"], "Terminating");
    assert!(terminating.object["metadata"]["deletionTimestamp"].is_string());
    let late = admission::admit_create(rt, Some("team"), cm("late", "1").to_string().as_bytes())
        .expect("admitted");
    match n.kube.create(rt, late, DryRun::No).await {
        Err(e @ KubeError::NamespaceTerminating { .. }) => assert_eq!(
            e.to_string(),
            "configmaps \"late\" is forbidden: unable to create new content in namespace team because it is being terminated"
        ),
        other => panic!("expected 403, got {other:?}"),
    }
    // Once its finalizer is gone (what the controller does when it is
    // empty), the namespace goes.
    n.kube.finalize_namespace("team").await.expect("finalized");
    assert!(matches!(
        n.kube.get(ns, None, "team", Freshness::MostRecent).await,
        Err(KubeError::NotFound { .. })
    ));
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_every_write_changes_nothing() {
    let n = OneNode::start(100).await;
    let rt = configmaps();
    let a = n.create(rt, Some("default"), cm("a", "1")).await;
    let before = n.node.store().applied().revision;

    let body = cm("dry", "1").to_string();
    let admitted = admission::admit_create(rt, Some("default"), body.as_bytes()).expect("admitted");
    let created = n
        .kube
        .create(rt, admitted, DryRun::All)
        .await
        .expect("a dry-run create");
    assert_eq!(created["metadata"]["name"], "dry");
    assert!(
        created["metadata"]["uid"].is_string(),
        "defaults are filled in"
    );
    assert!(
        created["metadata"].get("resourceVersion").is_none(),
        "a dry-run create has no resourceVersion"
    );
    let dup = admission::admit_create(rt, Some("default"), cm("a", "2").to_string().as_bytes())
        .expect("admitted");
    assert!(matches!(
        n.kube.create(rt, dup, DryRun::All).await,
        Err(KubeError::AlreadyExists { .. })
    ));

    let mut changed = a.clone();
    changed["data"]["v"] = json!("2");
    let admitted = admission::admit_update_body(
        rt,
        Some("default"),
        "a",
        UpdateScope::Object,
        changed.to_string().as_bytes(),
    )
    .expect("admitted");
    let updated = n
        .kube
        .update(rt, admitted, UpdateScope::Object, DryRun::All)
        .await
        .expect("a dry-run update");
    assert_eq!(updated["data"]["v"], "2");
    assert_eq!(rv(&updated), rv(&a), "at the current revision");
    let mut stale = changed.clone();
    stale["metadata"]["resourceVersion"] = json!((rv(&a) - 1).to_string());
    let admitted = admission::admit_update_body(
        rt,
        Some("default"),
        "a",
        UpdateScope::Object,
        stale.to_string().as_bytes(),
    )
    .expect("admitted");
    assert!(matches!(
        n.kube
            .update(rt, admitted, UpdateScope::Object, DryRun::All)
            .await,
        Err(KubeError::Conflict { .. })
    ));

    let opts = DeleteOptions {
        dry_run: DryRun::All,
        ..DeleteOptions::default()
    };
    let deleted = n
        .kube
        .delete(rt, Some("default"), "a", &opts)
        .await
        .expect("a dry-run delete");
    assert!(deleted.gone);
    let swept = n
        .kube
        .delete_collection(rt, Some("default"), &Selectors::default(), &opts)
        .await
        .expect("a dry-run deletecollection");
    assert_eq!(names(&swept), ["a"]);

    assert_eq!(
        n.node.store().applied().revision,
        before,
        "no revision consumed"
    );
    assert_eq!(n.get(rt, Some("default"), "a").await["data"]["v"], "1");
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizer_holds_a_deleted_object_until_an_update_removes_it() {
    let n = OneNode::start(100).await;
    let rt = configmaps();
    let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
    n.create(rt, Some("default"), held).await;

    let marked = n
        .kube
        .delete(rt, Some("default"), "held", &DeleteOptions::default())
        .await
        .expect("marked");
    assert!(!marked.gone);
    let meta = &marked.object["metadata"];
    assert!(meta["deletionTimestamp"].is_string());
    assert_eq!(meta["deletionGracePeriodSeconds"], 0);
    let stored = n.get(rt, Some("default"), "held").await;
    assert_eq!(
        stored["metadata"]["deletionTimestamp"],
        meta["deletionTimestamp"]
    );
    assert_eq!(rv(&stored), rv(&marked.object));

    // No new finalizer on an object being deleted.
    let mut more = stored.clone();
    more["metadata"]["finalizers"] = json!(["example.com/hold", "example.com/more"]);
    more["metadata"]
        .as_object_mut()
        .map(|m| m.remove("resourceVersion"));
    assert!(matches!(
        n.update(rt, Some("default"), "held", more).await,
        Err(KubeError::Invalid { .. })
    ));
    // The update that removes the last finalizer deletes it.
    let mut released = stored.clone();
    released["metadata"]["finalizers"] = json!([]);
    n.update(rt, Some("default"), "held", released)
        .await
        .expect("released");
    assert!(matches!(
        n.kube
            .get(rt, Some("default"), "held", Freshness::MostRecent)
            .await,
        Err(KubeError::NotFound { .. })
    ));
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_are_read_at_the_first_pages_revision_from_the_cache_or_history() {
    // A ring of one event: older revisions are served from history.
    for (max_events, later_pages) in [(100, ReadPath::Snapshot), (1, ReadPath::History)] {
        let n = OneNode::start(max_events).await;
        let rt = configmaps();
        for name in ["a", "b", "c"] {
            n.create(rt, Some("default"), cm(name, "1")).await;
        }
        let first = n
            .page(rt, Some("default"), 2, None)
            .await
            .expect("first page");
        assert_eq!(names(&first), ["a", "b"]);
        assert_eq!(first.remaining, Some(1));
        assert_eq!(first.served, ReadPath::QuorumCache);
        // Writes after the first page are not seen by the next one.
        n.create(rt, Some("default"), cm("d", "1")).await;
        n.update(rt, Some("default"), "c", cm("c", "2"))
            .await
            .expect("updated");
        // The cache has taken those writes in (so a ring of one event
        // no longer reaches back to the first page).
        n.kube.quorum_revision().await.expect("caught up");
        let token = ContinueToken::decode(first.continue_token.as_deref().expect("a token"))
            .expect("a valid token");
        let second = n
            .page(rt, Some("default"), 2, Some(token))
            .await
            .expect("second page");
        assert_eq!(names(&second), ["c"], "{max_events}");
        assert_eq!(second.items[0].to_value()["data"]["v"], "1");
        assert_eq!(second.revision, first.revision);
        assert_eq!(second.served, later_pages, "{max_events}");
        assert!(second.continue_token.is_none());

        // An exact get of the old state takes the same path.
        let (old, served) = n
            .kube
            .get(rt, Some("default"), "c", Freshness::Exact(first.revision.0))
            .await
            .expect("old state");
        assert_eq!(
            (old.to_value()["data"]["v"].as_str(), served),
            (Some("1"), later_pages)
        );
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_counts_what_follows_it_without_scanning_the_rest() {
    let n = OneNode::start(100).await;
    let rt = configmaps();
    for (ns, count) in [("default", 7), ("kube-system", 4), ("kube-public", 2)] {
        for i in 0..count {
            n.create(rt, Some(ns), cm(&format!("cm-{i}"), "1")).await;
        }
    }
    n.kube
        .delete(rt, Some("default"), "cm-3", &Default::default())
        .await
        .expect("deleted");
    // Pages of one namespace, and of all of them, three at a time.
    for (ns, total) in [
        (Some("default"), 6u64),
        (Some("kube-system"), 4),
        (None, 12),
    ] {
        let mut token = None;
        let mut seen = 0u64;
        loop {
            let page = n.page(rt, ns, 3, token).await.expect("a page");
            seen += page.items.len() as u64;
            let Some(next) = page.continue_token else {
                assert_eq!(page.remaining, None, "{ns:?}: the last page");
                break;
            };
            assert_eq!(page.remaining, Some(total - seen), "{ns:?} after {seen}");
            let next = ContinueToken::decode(&next).expect("a valid token");
            assert_eq!(
                next.remaining,
                Some(total - seen),
                "{ns:?}: the token carries it"
            );
            token = Some(next);
        }
        assert_eq!(seen, total, "{ns:?}");
    }
    // A token without a count (one continuing at the latest revision) is
    // still answered with the count of what follows.
    let page = n
        .page(
            rt,
            Some("default"),
            2,
            Some(ContinueToken {
                revision: None,
                start: "cm-1".into(),
                remaining: None,
            }),
        )
        .await
        .expect("a page at the latest revision");
    assert_eq!(names(&page), ["cm-1", "cm-2"]);
    assert_eq!(page.remaining, Some(3));
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_page_is_gone_with_a_token_that_continues_at_the_latest_revision() {
    let n = OneNode::start(1).await;
    let rt = configmaps();
    for name in ["a", "b", "c"] {
        n.create(rt, Some("default"), cm(name, "1")).await;
    }
    let first = n
        .page(rt, Some("default"), 1, None)
        .await
        .expect("first page");
    n.update(rt, Some("default"), "b", cm("b", "2"))
        .await
        .expect("updated");
    let latest = n.node.store().applied().revision;
    crate::write::compact(&n.node, latest)
        .await
        .expect("compacted");
    let token = ContinueToken::decode(first.continue_token.as_deref().expect("a token"))
        .expect("a valid token");
    let start = token.start.clone();
    match n.page(rt, Some("default"), 1, Some(token)).await {
        Err(KubeError::ExpiredContinue {
            token: Some(fresh), ..
        }) => {
            let fresh = ContinueToken::decode(&fresh).expect("a valid token");
            assert_eq!((fresh.revision, fresh.start), (None, start));
        }
        other => panic!("expected 410 with a fresh token, got {other:?}"),
    }
    n.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_delete_takes_what_matches_in_one_revision() {
    let n = OneNode::start(100).await;
    let rt = configmaps();
    n.create(rt, Some("default"), cm("a", "1")).await;
    n.create(rt, Some("default"), cm("b", "1")).await;
    n.create(rt, Some("default"), json!({"metadata": {"name": "other"}}))
        .await;
    let selectors = Selectors::parse(rt, Some("app=x"), None).expect("a selector");
    let deleted = n
        .kube
        .delete_collection(rt, Some("default"), &selectors, &DeleteOptions::default())
        .await
        .expect("deleted");
    assert_eq!(names(&deleted), ["a", "b"]);
    assert_eq!(deleted.revision, n.node.store().applied().revision);
    let left = n
        .kube
        .list(
            rt,
            Some("default"),
            Freshness::MostRecent,
            &Selectors::default(),
        )
        .await
        .expect("list");
    assert_eq!(names(&left), ["other"]);
    n.shutdown().await;
}

/// Waits (on the cache's revisions, not a clock) until `check` holds of
/// the cache; a generous bound only turns a hang into a failure.
async fn until(n: &OneNode, what: &str, check: impl Fn(&WatchCache) -> bool) {
    let cache = n.kube.cache().clone();
    let mut revisions = cache.subscribe();
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while !check(&cache) {
            revisions.changed().await.expect("the cache feed runs");
        }
    })
    .await;
    assert!(waited.is_ok(), "never: {what}");
}

fn cached(cache: &WatchCache, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<Value> {
    cache
        .current(rt)
        .0
        .get(rt.key(ns, name).as_str())
        .map(|o| o.to_value())
}

fn owned(name: &str, owner: &Value, block: bool) -> Value {
    json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": block,
    }]}})
}

fn policy(p: Propagation) -> DeleteOptions {
    DeleteOptions {
        propagation: Some(p),
        ..DeleteOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_collect_dependents_and_empty_a_terminating_namespace() {
    let n = OneNode::start(1000).await;
    let (stop, stopped) = watch::channel(false);
    let controllers = tokio::spawn(crate::kube::controllers::run(
        n.kube.clone(),
        n.node.clone(),
        stopped,
    ));
    let rt = configmaps();
    let d = Some("default");

    // Background: the owner goes now, its dependent after it.
    let owner = n.create(rt, d, cm("owner", "1")).await;
    n.create(rt, d, owned("dep", &owner, false)).await;
    let gone = n
        .kube
        .delete(rt, d, "owner", &policy(Propagation::Background))
        .await;
    assert!(gone.expect("deleted").gone);
    until(&n, "the dependent is collected", |c| {
        cached(c, rt, d, "dep").is_none()
    })
    .await;

    // A dependent created for an owner that is already gone goes too.
    n.create(rt, d, owned("late-dep", &owner, false)).await;
    until(&n, "the late dependent is collected", |c| {
        cached(c, rt, d, "late-dep").is_none()
    })
    .await;

    // Orphan: the owner goes once its dependents no longer name it.
    let parent = n.create(rt, d, cm("parent", "1")).await;
    n.create(rt, d, owned("child", &parent, false)).await;
    let marked = n
        .kube
        .delete(rt, d, "parent", &policy(Propagation::Orphan))
        .await
        .expect("marked");
    assert!(!marked.gone);
    assert_eq!(marked.object["metadata"]["finalizers"], json!(["orphan"]));
    until(&n, "the orphaning owner goes", |c| {
        cached(c, rt, d, "parent").is_none()
    })
    .await;
    let child = n.get(rt, d, "child").await;
    assert!(
        child["metadata"].get("ownerReferences").is_none(),
        "{child}"
    );

    // Foreground: the owner waits for its blocking dependent, held by a
    // finalizer of its own, and goes after it.
    let root = n.create(rt, d, cm("root", "1")).await;
    let mut leaf = owned("leaf", &root, true);
    leaf["metadata"]["finalizers"] = json!(["example.com/hold"]);
    n.create(rt, d, leaf).await;
    let marked = n
        .kube
        .delete(rt, d, "root", &policy(Propagation::Foreground))
        .await
        .expect("marked");
    assert_eq!(
        marked.object["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    until(&n, "the blocking dependent is being deleted", |c| {
        cached(c, rt, d, "leaf").is_some_and(|l| l["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    assert!(
        cached(n.kube.cache(), rt, d, "root").is_some(),
        "the owner waits for its blocking dependent"
    );
    let mut release = n.get(rt, d, "leaf").await;
    release["metadata"]["finalizers"] = json!([]);
    release["metadata"]
        .as_object_mut()
        .map(|m| m.remove("resourceVersion"));
    n.update(rt, d, "leaf", release).await.expect("released");
    until(&n, "the foreground owner goes after its dependent", |c| {
        cached(c, rt, d, "root").is_none() && cached(c, rt, d, "leaf").is_none()
    })
    .await;

    // A namespace: its contents are deleted, one held by a finalizer keeps
    // it terminating until released, then it goes.
    let ns = resources::namespaces();
    n.create(ns, None, json!({"metadata": {"name": "team"}}))
        .await;
    let t = Some("team");
    n.create(rt, t, cm("plain", "1")).await;
    n.create(
        resources::find("apps", "v1", "deployments").expect("deployments"),
        t,
        json!({"metadata": {"name": "web"}, "spec": web_spec(1)}),
    )
    .await;
    n.create(
        rt,
        t,
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    )
    .await;
    n.kube
        .delete(ns, None, "team", &DeleteOptions::default())
        .await
        .expect("terminating");
    until(&n, "the namespace's free contents are deleted", |c| {
        cached(c, rt, t, "plain").is_none()
            && cached(c, rt, t, "held")
                .is_some_and(|h| h["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    assert_eq!(
        cached(n.kube.cache(), ns, None, "team").map(|t| t["status"]["phase"].clone()),
        Some(json!("Terminating"))
    );
    let mut release = n.get(rt, t, "held").await;
    release["metadata"]["finalizers"] = json!([]);
    release["metadata"]
        .as_object_mut()
        .map(|m| m.remove("resourceVersion"));
    n.update(rt, t, "held", release).await.expect("released");
    until(&n, "the namespace goes", |c| {
        cached(c, ns, None, "team").is_none()
    })
    .await;

    stop.send_replace(true);
    controllers.await.expect("the controllers stop");
    n.shutdown().await;
}

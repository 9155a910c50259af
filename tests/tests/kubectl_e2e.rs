//! End to end with real clients: `kubestore cluster --nodes 3` as a user
//! runs it, then kubectl (found through `$KUBECTL`, installed by
//! `scripts/test.sh`) through different nodes, then a follower killed with
//! -9 and restarted from the command line recorded in cluster.json.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use kubestore_tests::clients::{kubectl, kubectl_path, ok, start_cluster, stop_cluster};
use kubestore_tests::KubeClient;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_against_a_three_node_cluster_from_the_launcher() {
    let dir = tempfile::tempdir().expect("tempdir");

    // Phase 1: the launcher starts 3 processes and reports when they are up.
    let (launcher, nodes) = start_cluster(dir.path()).await;
    for n in &nodes {
        for key in [
            "id", "pid", "rest_url", "grpc_url", "peer_url", "data_dir", "args",
        ] {
            assert!(!n[key].is_null(), "cluster.json node lacks {key}: {n}");
        }
    }
    let kubeconfig = dir.path().join("kubeconfig");

    // Phase 2: kubectl through different nodes.
    ok(
        &kubectl(&kubeconfig, "node-1", &["create", "namespace", "e2e"]),
        "create namespace",
    );
    ok(
        &kubectl(
            &kubeconfig,
            "node-2",
            &[
                "-n",
                "e2e",
                "create",
                "configmap",
                "cfg",
                "--from-literal=greeting=hello",
            ],
        ),
        "create configmap",
    );
    let manifest = dir.path().join("cm.json");
    std::fs::write(
        &manifest,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"from-file","namespace":"e2e","labels":{"app":"web"}},"data":{"k":"v"}}"#,
    )
    .expect("manifest");
    ok(
        &kubectl(
            &kubeconfig,
            "node-3",
            &["create", "-f", manifest.to_str().expect("path")],
        ),
        "create -f",
    );
    let got = ok(
        &kubectl(
            &kubeconfig,
            "node-3",
            &[
                "-n",
                "e2e",
                "get",
                "configmap",
                "cfg",
                "-o",
                "jsonpath={.data.greeting}",
            ],
        ),
        "get",
    );
    assert_eq!(got, "hello");

    // One keyspace: kubectl's object is at the kube-apiserver's etcd key,
    // with its resourceVersion as the etcd revision; an etcd watch sees
    // kubectl's next change at the revision kubectl reports.
    let etcd_endpoint = nodes[2]["grpc_url"]
        .as_str()
        .expect("grpc_url")
        .trim_start_matches("http://")
        .to_string();
    let etcdctl = |args: &[&str]| {
        Command::new(std::env::var("ETCDCTL").unwrap_or_else(|_| "etcdctl".into()))
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={etcd_endpoint}"))
            .args(args)
            .output()
            .expect("etcdctl (installed by scripts/test.sh)")
    };
    let rv = ok(
        &kubectl(
            &kubeconfig,
            "node-1",
            &[
                "-n",
                "e2e",
                "get",
                "configmap",
                "cfg",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
        ),
        "get rv",
    );
    let stored: Value = serde_json::from_slice(
        &etcdctl(&["get", "/registry/configmaps/e2e/cfg", "-w", "json"]).stdout,
    )
    .expect("etcdctl -w json");
    assert_eq!(stored["kvs"][0]["mod_revision"].to_string(), rv);
    let mut etcd_watch =
        tokio::process::Command::new(std::env::var("ETCDCTL").unwrap_or_else(|_| "etcdctl".into()))
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={etcd_endpoint}"))
            .args([
                "watch",
                "/registry/configmaps/e2e/",
                "--prefix",
                "-w",
                "json",
            ])
            // From the next revision: only changes made after this point.
            .arg(format!(
                "--rev={}",
                stored["header"]["revision"]
                    .as_u64()
                    .expect("header revision")
                    + 1
            ))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("etcdctl watch");
    let mut etcd_lines = BufReader::new(etcd_watch.stdout.take().expect("stdout")).lines();
    let via_kubectl = ok(
        &kubectl(
            &kubeconfig,
            "node-2",
            &[
                "-n",
                "e2e",
                "create",
                "configmap",
                "seen-by-etcd",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
        ),
        "create seen-by-etcd",
    );
    let line = tokio::time::timeout(Duration::from_secs(15), etcd_lines.next_line())
        .await
        .expect("etcd watch output in time")
        .expect("read")
        .expect("a line");
    let event: Value = serde_json::from_str(&line).expect("watch json");
    assert_eq!(
        event["Events"][0]["kv"]["mod_revision"].to_string(),
        via_kubectl,
        "{line} (the watch started after {stored})"
    );
    etcd_watch.kill().await.expect("stop etcd watch");
    let listed = ok(
        &kubectl(&kubeconfig, "node-1", &["-n", "e2e", "get", "configmaps"]),
        "get configmaps",
    );
    assert!(
        listed.contains("cfg") && listed.contains("from-file") && listed.contains("DATA"),
        "{listed}"
    );
    let selected = ok(
        &kubectl(
            &kubeconfig,
            "node-2",
            &["get", "cm", "-A", "-l", "app=web", "-o", "name"],
        ),
        "get -l",
    );
    assert_eq!(selected.trim(), "configmap/from-file");
    let namespaces = ok(
        &kubectl(&kubeconfig, "node-2", &["get", "namespaces", "-o", "name"]),
        "get ns",
    );
    for ns in [
        "namespace/default",
        "namespace/kube-system",
        "namespace/kube-public",
        "namespace/e2e",
    ] {
        assert!(namespaces.contains(ns), "{ns} missing: {namespaces}");
    }
    let resources = ok(
        &kubectl(&kubeconfig, "node-3", &["api-resources"]),
        "api-resources",
    );
    for r in [
        "configmaps",
        "namespaces",
        "deployments",
        "leases",
        "pods",
        "secrets",
        "services",
    ] {
        assert!(
            resources.contains(r),
            "{r} missing from api-resources:\n{resources}"
        );
    }
    // kubectl get --chunk-size pages through limit/continue.
    for name in ["page-a", "page-b", "page-c"] {
        ok(
            &kubectl(
                &kubeconfig,
                "node-1",
                &["-n", "e2e", "create", "configmap", name],
            ),
            "create page",
        );
    }
    let paged = kubectl(
        &kubeconfig,
        "node-2",
        &[
            "-n",
            "e2e",
            "get",
            "configmaps",
            "--chunk-size=2",
            "-o",
            "name",
            "-v=6",
        ],
    );
    let names = ok(&paged, "get --chunk-size=2");
    for name in ["cfg", "from-file", "page-a", "page-b", "page-c"] {
        assert!(
            names.contains(&format!("configmap/{name}")),
            "{name} missing from the paged list: {names}"
        );
    }
    let requests = String::from_utf8_lossy(&paged.stderr);
    assert!(
        requests.contains("limit=2") && requests.contains("continue="),
        "kubectl did not page: {requests}"
    );

    // kubectl get -w prints events as they happen.
    let mut watching = tokio::process::Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--context", "node-3"])
        .args([
            "-n",
            "e2e",
            "get",
            "configmaps",
            "-w",
            "--output-watch-events",
            "--watch-only",
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl get -w");
    let mut watch_lines = BufReader::new(watching.stdout.take().expect("stdout")).lines();
    // The watch is open once kubectl's request is served; create until the
    // event shows (a create before the watch started is not an event).
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        for i in 0.. {
            let name = format!("watched-{i}");
            ok(
                &kubectl(
                    &kubeconfig,
                    "node-1",
                    &["-n", "e2e", "create", "configmap", &name],
                ),
                "create watched",
            );
            // kubectl prints a header line first.
            while let Ok(Ok(Some(line))) =
                tokio::time::timeout(Duration::from_secs(3), watch_lines.next_line()).await
            {
                if line.contains("watched-") {
                    return line;
                }
            }
        }
        unreachable!()
    })
    .await
    .expect("kubectl get -w printed no event");
    assert!(
        seen.contains("ADDED") && seen.contains("watched-"),
        "unexpected watch line: {seen}"
    );
    watching.kill().await.expect("stop kubectl -w");

    ok(
        &kubectl(
            &kubeconfig,
            "node-1",
            &["-n", "e2e", "delete", "configmap", "cfg"],
        ),
        "delete configmap",
    );
    let gone = kubectl(
        &kubeconfig,
        "node-2",
        &["-n", "e2e", "get", "configmap", "cfg"],
    );
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );

    // Phase 2b: server-side dry run, a namespace deleted with content (the
    // delete waits until the namespace controller is done), and `kubectl
    // wait --for=delete` on an object a finalizer holds.
    let dry = ok(
        &kubectl(
            &kubeconfig,
            "node-3",
            &[
                "-n",
                "e2e",
                "create",
                "configmap",
                "dry",
                "--from-literal=a=b",
                "--dry-run=server",
                "-o",
                "jsonpath={.metadata.name}",
            ],
        ),
        "create --dry-run=server",
    );
    assert_eq!(dry, "dry");
    let not_made = kubectl(
        &kubeconfig,
        "node-1",
        &["-n", "e2e", "get", "configmap", "dry"],
    );
    assert!(!not_made.status.success(), "a dry run stored nothing");
    ok(
        &kubectl(&kubeconfig, "node-2", &["create", "namespace", "doomed"]),
        "create namespace doomed",
    );
    for name in ["one", "two"] {
        ok(
            &kubectl(
                &kubeconfig,
                "node-2",
                &[
                    "-n",
                    "doomed",
                    "create",
                    "configmap",
                    name,
                    "--from-literal=k=v",
                ],
            ),
            "create configmap in doomed",
        );
    }
    ok(
        &kubectl(
            &kubeconfig,
            "node-1",
            &["delete", "namespace", "doomed", "--timeout=90s"],
        ),
        "delete namespace doomed",
    );
    let gone_ns = kubectl(&kubeconfig, "node-3", &["get", "namespace", "doomed"]);
    assert!(
        String::from_utf8_lossy(&gone_ns.stderr).contains("NotFound"),
        "the namespace is gone when kubectl delete returns: {}",
        String::from_utf8_lossy(&gone_ns.stdout)
    );
    let held = dir.path().join("held.json");
    std::fs::write(
        &held,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"held","namespace":"e2e","finalizers":["example.com/hold"]}}"#,
    )
    .expect("write held.json");
    ok(
        &kubectl(
            &kubeconfig,
            "node-1",
            &["create", "-f", held.to_str().expect("path")],
        ),
        "create held",
    );
    ok(
        &kubectl(
            &kubeconfig,
            "node-2",
            &["-n", "e2e", "delete", "configmap", "held", "--wait=false"],
        ),
        "delete held without waiting",
    );
    // `-v=6` logs each request: the watch's line says kubectl is waiting
    // on the object (an event to wait for, not a pause), so the release
    // below is seen by the watch rather than raced by it.
    let mut waiting = tokio::process::Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--context",
            "node-3",
            "-n",
            "e2e",
            "wait",
            "--for=delete",
            "configmap/held",
            "--timeout=90s",
            "-v=6",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl wait");
    let mut wait_log = BufReader::new(waiting.stderr.take().expect("stderr")).lines();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = wait_log.next_line().await.expect("line") {
            if line.contains("watch=true") {
                return;
            }
        }
        panic!("kubectl wait ended before it watched");
    })
    .await
    .expect("kubectl wait never watched");
    ok(
        &kubectl(
            &kubeconfig,
            "node-1",
            &[
                "-n",
                "e2e",
                "patch",
                "configmap",
                "held",
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ],
        ),
        "release held",
    );
    let waited = waiting.wait_with_output().await.expect("kubectl wait ends");
    assert!(
        waited.status.success(),
        "kubectl wait --for=delete: {}",
        String::from_utf8_lossy(&waited.stdout)
    );

    // Phase 3: kill -9 a follower, write, restart it from cluster.json's args.
    let status: Value = reqwest::get(format!(
        "{}/debug/cluster",
        nodes[0]["rest_url"].as_str().expect("url")
    ))
    .await
    .expect("status")
    .json()
    .await
    .expect("json");
    let leader = status["leader_id"].as_u64().expect("leader");
    let victim = nodes
        .iter()
        .find(|n| n["id"].as_u64() != Some(leader))
        .expect("follower")
        .clone();
    let pid = victim["pid"].as_i64().expect("pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
    let writer = nodes
        .iter()
        .find(|n| n["id"] != victim["id"])
        .expect("live node");
    let client = KubeClient::new(
        reqwest::Client::new(),
        writer["rest_url"].as_str().expect("url").to_string(),
    );
    let mut last_rv = 0;
    for i in 0..50 {
        let r = client
            .create_configmap("e2e", &format!("while-down-{i}"), "x")
            .await
            .expect("create");
        assert_eq!(r.status, reqwest::StatusCode::CREATED, "{}", r.text);
        last_rv = r.rv();
    }
    let args: Vec<String> = victim["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect();
    let mut restarted = tokio::process::Command::new(&args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("restart");
    let victim_ctx = format!("node-{}", victim["id"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = kubectl(
            &kubeconfig,
            &victim_ctx,
            &[
                "-n",
                "e2e",
                "get",
                "configmap",
                "while-down-49",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
        );
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout), last_rv.to_string());
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "restarted node never caught up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Phase 4: SIGTERM stops the launcher and its children.
    stop_cluster(launcher).await;
    restarted.kill().await.expect("stop restarted node");
}

/// kubectl's default patch type is a strategic merge patch; its
/// client-side apply sends one computed against the last-applied
/// annotation. Both through a 3-node cluster, read back through another
/// node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_patch_and_apply_merge_strategically() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, _nodes) = start_cluster(dir.path()).await;
    let kc = dir.path().join("kubeconfig");
    let get_json = |ctx: &str, what: &[&str]| -> Value {
        let mut args = vec!["-n", "smp", "get"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&ok(&kubectl(&kc, ctx, &args), "get -o json")).expect("json")
    };
    ok(
        &kubectl(&kc, "node-1", &["create", "namespace", "smp"]),
        "create namespace",
    );

    // Phase 1: `kubectl patch` (strategic by default) merges a container
    // by name and keeps the other; `$patch: delete` removes one by name.
    let web = dir.path().join("web.json");
    std::fs::write(
        &web,
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"smp"},
            "spec":{"replicas":1,"selector":{"matchLabels":{"app":"web"}},
              "template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[
                {"name":"app","image":"app:1","env":[{"name":"A","value":"1"}]},
                {"name":"sidecar","image":"proxy:1"}]}}}}"#,
    )
    .expect("manifest");
    ok(
        &kubectl(
            &kc,
            "node-1",
            &["create", "-f", web.to_str().expect("path")],
        ),
        "create deployment",
    );
    let patched = kubectl(
        &kc,
        "node-2",
        &[
            "-n",
            "smp",
            "patch",
            "deployment",
            "web",
            "-v=8",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"new"}]}}}}"#,
        ],
    );
    ok(&patched, "kubectl patch");
    let log = String::from_utf8_lossy(&patched.stderr);
    assert!(
        log.contains("application/strategic-merge-patch+json"),
        "kubectl did not send a strategic merge patch:\n{log}"
    );
    let dep = get_json("node-3", &["deployment", "web"]);
    assert_eq!(
        dep["spec"]["template"]["spec"]["containers"],
        serde_json::json!([
            {"name": "app", "image": "new", "env": [{"name": "A", "value": "1"}], "imagePullPolicy": "IfNotPresent", "resources": {}, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"},
            {"name": "sidecar", "image": "proxy:1", "imagePullPolicy": "IfNotPresent", "resources": {}, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"},
        ])
    );
    ok(
        &kubectl(
            &kc,
            "node-3",
            &[
                "-n",
                "smp",
                "patch",
                "deployment",
                "web",
                "--type",
                "strategic",
                "-p",
                r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","$patch":"delete"}]}}}}"#,
            ],
        ),
        "kubectl patch $patch: delete",
    );
    let dep = get_json("node-1", &["deployment", "web"]);
    let names: Vec<&str> = dep["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["app"]);

    // Phase 2: `kubectl apply` creates, a foreign change lands, and a
    // second apply changes a field and removes others, keeping the
    // foreign change (a three-way strategic merge).
    let v1 = dir.path().join("v1.yaml");
    std::fs::write(
        &v1,
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: smp
  labels: {tier: web, old: x}
data: {a: "1", b: "2"}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: smp
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: api
        image: api:1
        env: [{name: X, value: "1"}, {name: "Y", value: "2"}]
      - name: logger
        image: log:1
"#,
    )
    .expect("v1");
    ok(
        &kubectl(&kc, "node-2", &["apply", "-f", v1.to_str().expect("path")]),
        "apply v1",
    );
    ok(
        &kubectl(
            &kc,
            "node-3",
            &[
                "-n",
                "smp",
                "annotate",
                "deployment",
                "api",
                "owner=someone-else",
            ],
        ),
        "foreign change",
    );
    let v2 = dir.path().join("v2.yaml");
    std::fs::write(
        &v2,
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: smp
  labels: {tier: web}
data: {a: "10"}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: smp
spec:
  replicas: 3
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: api
        image: api:2
        env: [{name: X, value: "1"}]
"#,
    )
    .expect("v2");
    let applied = kubectl(
        &kc,
        "node-1",
        &["apply", "-f", v2.to_str().expect("path"), "-v=8"],
    );
    ok(&applied, "apply v2");
    let log = String::from_utf8_lossy(&applied.stderr);
    assert!(
        log.contains("application/strategic-merge-patch+json"),
        "kubectl apply did not send a strategic merge patch:\n{log}"
    );

    let cm = get_json("node-2", &["configmap", "settings"]);
    assert_eq!(cm["data"], serde_json::json!({"a": "10"}));
    assert_eq!(cm["metadata"]["labels"], serde_json::json!({"tier": "web"}));
    let dep = get_json("node-3", &["deployment", "api"]);
    assert_eq!(dep["spec"]["replicas"], 3);
    assert_eq!(
        dep["spec"]["template"]["spec"]["containers"],
        serde_json::json!([{"name": "api", "image": "api:2", "env": [{"name": "X", "value": "1"}], "imagePullPolicy": "IfNotPresent", "resources": {}, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}])
    );
    assert_eq!(
        dep["metadata"]["annotations"]["owner"], "someone-else",
        "apply dropped a field it does not manage: {dep}"
    );
    let last: Value = serde_json::from_str(
        dep["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .expect("last-applied annotation"),
    )
    .expect("last-applied json");
    assert_eq!(last["spec"]["replicas"], 3);

    stop_cluster(launcher).await;
}

/// `kubectl apply --server-side` on a 3-node cluster: create, re-apply
/// with a changed and a removed field, a second manager's conflict named
/// by field and manager, `--force-conflicts`, the managers read back with
/// `--show-managed-fields`; and kubectl's default strict validation:
/// valid manifests pass, a typo'd field fails with kube's message (and
/// only warns under `--validate=warn`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_apply_and_field_validation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, _nodes) = start_cluster(dir.path()).await;
    let kc = dir.path().join("kubeconfig");
    let get_json = |ctx: &str, what: &[&str]| -> Value {
        let mut args = vec!["-n", "ssa", "get"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["-o", "json", "--show-managed-fields"]);
        serde_json::from_str(&ok(&kubectl(&kc, ctx, &args), "get -o json")).expect("json")
    };
    let write = |name: &str, text: &str| -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("manifest");
        path.to_str().expect("path").to_string()
    };
    ok(
        &kubectl(&kc, "node-1", &["create", "namespace", "ssa"]),
        "create namespace",
    );

    // Phase 1: a server-side apply creates both objects.
    let v1 = write(
        "v1.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: ssa}
data: {a: "1", b: "2"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: ssa}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: api
        image: api:1
        env: [{name: X, value: "1"}]
"#,
    );
    let applied = kubectl(
        &kc,
        "node-1",
        &["apply", "--server-side", "-f", &v1, "-v=8"],
    );
    ok(&applied, "apply --server-side v1");
    let log = String::from_utf8_lossy(&applied.stderr);
    assert!(
        log.contains("application/apply-patch+yaml") && log.contains("fieldManager=kubectl"),
        "kubectl did not send a server-side apply:\n{log}"
    );

    // Phase 2: re-applied with a changed and a removed field.
    let v2 = write(
        "v2.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: ssa}
data: {a: "10"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: ssa}
spec:
  replicas: 3
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: api
        image: api:2
"#,
    );
    ok(
        &kubectl(&kc, "node-2", &["apply", "--server-side", "-f", &v2]),
        "apply --server-side v2",
    );
    let cm = get_json("node-3", &["configmap", "settings"]);
    assert_eq!(cm["data"], serde_json::json!({"a": "10"}));
    let dep = get_json("node-3", &["deployment", "api"]);
    assert_eq!(dep["spec"]["replicas"], 3);
    assert_eq!(
        dep["spec"]["template"]["spec"]["containers"],
        serde_json::json!([{"name": "api", "image": "api:2", "imagePullPolicy": "IfNotPresent", "resources": {}, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}])
    );

    // Phase 3: another manager changing a field kubectl owns conflicts.
    let other = write(
        "other.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: ssa}
data: {a: "other"}
"#,
    );
    let conflict = kubectl(
        &kc,
        "node-3",
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "-f",
            &other,
        ],
    );
    assert!(!conflict.status.success(), "a conflicting apply succeeded");
    let err = String::from_utf8_lossy(&conflict.stderr);
    assert!(
        err.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .data.a"),
        "kubectl did not report the conflict: {err}"
    );
    assert_eq!(
        get_json("node-1", &["configmap", "settings"])["data"]["a"],
        "10"
    );

    // Phase 4: forced, the field changes hands.
    ok(
        &kubectl(
            &kc,
            "node-3",
            &[
                "apply",
                "--server-side",
                "--field-manager",
                "other",
                "--force-conflicts",
                "-f",
                &other,
            ],
        ),
        "apply --force-conflicts",
    );
    let cm = get_json("node-2", &["configmap", "settings"]);
    assert_eq!(cm["data"]["a"], "other");
    let managers: Vec<(String, String, Value)> = cm["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|e| {
            assert_eq!(e["fieldsType"], "FieldsV1");
            assert_eq!(e["apiVersion"], "v1");
            assert!(e["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{e}");
            (
                e["manager"].as_str().unwrap_or("").to_string(),
                e["operation"].as_str().unwrap_or("").to_string(),
                e["fieldsV1"].clone(),
            )
        })
        .collect();
    // kubectl lost .data.a and owns nothing else of the configmap.
    assert_eq!(
        managers,
        [(
            "other".to_string(),
            "Apply".to_string(),
            serde_json::json!({"f:data": {"f:a": {}}})
        )]
    );

    // Phase 5: a client-side apply of a typo'd field fails under
    // kubectl's default strict validation, with kube's message; a valid
    // manifest passes; --validate=warn only warns.
    let typo = write(
        "typo.yaml",
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: typo, namespace: ssa}
spec:
  replicaz: 2
  selector: {matchLabels: {app: typo}}
  template:
    metadata: {labels: {app: typo}}
    spec:
      containers: [{name: c, image: c:1}]
"#,
    );
    let refused = kubectl(&kc, "node-1", &["apply", "-f", &typo]);
    assert!(!refused.status.success(), "a typo'd manifest was applied");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("strict decoding error: unknown field \"spec.replicaz\""),
        "kubectl did not report the unknown field: {err}"
    );
    let missing = kubectl(&kc, "node-1", &["-n", "ssa", "get", "deployment", "typo"]);
    assert!(!missing.status.success(), "the refused deployment exists");
    let warned = kubectl(&kc, "node-2", &["apply", "--validate=warn", "-f", &typo]);
    ok(&warned, "apply --validate=warn");
    let err = String::from_utf8_lossy(&warned.stderr);
    assert!(
        err.contains("unknown field \"spec.replicaz\""),
        "kubectl did not print the warning: {err}"
    );
    let dep = get_json("node-3", &["deployment", "typo"]);
    assert!(dep["spec"].get("replicaz").is_none(), "{dep}");
    let managers: Vec<&str> = dep["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter_map(|e| e["manager"].as_str())
        .collect();
    assert_eq!(managers, ["kubectl-client-side-apply"]);

    // Phase 6: an object made by client-side apply moves to server-side
    // apply, a changed field and all, without conflicts (kube's
    // last-applied upgrade), and its annotation follows.
    let csa = write(
        "csa.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: moved, namespace: ssa}
data: {a: "1", b: "2"}
"#,
    );
    ok(
        &kubectl(&kc, "node-1", &["apply", "-f", &csa]),
        "client-side apply",
    );
    let ssa = write(
        "ssa.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: moved, namespace: ssa}
data: {a: "1", b: "3"}
"#,
    );
    ok(
        &kubectl(&kc, "node-2", &["apply", "--server-side", "-f", &ssa]),
        "server-side apply after client-side apply",
    );
    let cm = get_json("node-3", &["configmap", "moved"]);
    assert_eq!(cm["data"], serde_json::json!({"a": "1", "b": "3"}));
    let last: Value = serde_json::from_str(
        cm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .expect("last-applied annotation"),
    )
    .expect("json");
    assert_eq!(last["data"]["b"], "3");

    stop_cluster(launcher).await;
}

/// One object of every everyday workload type kubestore serves beside the
/// first ones, as a chart would ship them: real pod templates (containers
/// with a name and an image, selectors matching the template's labels).
const WORKLOADS: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: wl, labels: {app: web}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: cache, namespace: wl}
spec:
  replicas: 2
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec:
      containers: [{name: redis, image: "redis:7"}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: wl}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: postgres, image: "postgres:16"}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: wl}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {role: edge}
      containers: [{name: agent, image: "busybox:1.36", command: [sleep, "3600"]}]
---
apiVersion: v1
kind: ReplicationController
metadata: {name: legacy, namespace: wl}
spec:
  replicas: 1
  selector: {app: legacy}
  template:
    metadata: {labels: {app: legacy}}
    spec:
      containers: [{name: app, image: "nginx:1.27"}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: wl}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: migrate, image: "busybox:1.36", command: ["true"]}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: wl}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: backup, image: "busybox:1.36", command: ["true"]}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: wl}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 5
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: wl}
spec:
  ingressClassName: nginx
  rules:
  - host: web.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {service: {name: web, port: {number: 80}}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: wl}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {}}]}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: wl}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: wl}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-reader, namespace: wl}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects: [{kind: ServiceAccount, name: default, namespace: wl}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "wl:reader"}
rules: [{apiGroups: [apps], resources: [deployments], verbs: [get, list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "wl:reader"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "wl:reader"}
subjects: [{kind: User, name: jane, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: wl-standard}
provisioner: example.com/none
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: wl-pv}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: wl-standard
  hostPath: {path: /tmp/wl}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: wl}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: wl-standard
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: wl}
spec:
  limits: [{type: Container, default: {cpu: 500m}, defaultRequest: {cpu: 100m}}]
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: pods, namespace: wl}
spec:
  hard: {pods: "10"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_serves_the_everyday_workload_types_with_scale_and_describe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, _nodes) = start_cluster(dir.path()).await;
    let kc = dir.path().join("kubeconfig");
    let write = |name: &str, text: &str| -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("manifest");
        path.to_str().expect("path").to_string()
    };
    let get_json = |ctx: &str, what: &[&str]| -> Value {
        let mut args = vec!["-n", "wl", "get"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&ok(&kubectl(&kc, ctx, &args), "get -o json")).expect("json")
    };
    ok(
        &kubectl(&kc, "node-1", &["create", "namespace", "wl"]),
        "create namespace",
    );

    // Phase 1: `kubectl apply` of one object of every type, through a
    // follower as much as the leader.
    let manifest = write("workloads.yaml", WORKLOADS);
    let applied = ok(
        &kubectl(&kc, "node-2", &["apply", "-f", &manifest]),
        "apply the workloads",
    );
    let types: [(&str, &str); 20] = [
        ("deployment", "web"),
        ("replicaset", "cache"),
        ("statefulset", "db"),
        ("daemonset", "agent"),
        ("replicationcontroller", "legacy"),
        ("job", "migrate"),
        ("cronjob", "nightly"),
        ("horizontalpodautoscaler", "web"),
        ("ingress", "web"),
        ("networkpolicy", "web"),
        ("poddisruptionbudget", "web"),
        ("role", "pod-reader"),
        ("rolebinding", "pod-reader"),
        ("clusterrole", "wl:reader"),
        ("clusterrolebinding", "wl:reader"),
        ("storageclass", "wl-standard"),
        ("persistentvolume", "wl-pv"),
        ("persistentvolumeclaim", "data"),
        ("limitrange", "defaults"),
        ("resourcequota", "pods"),
    ];
    for (kind, name) in types {
        assert!(
            applied.contains(&format!("/{name} created")),
            "kubectl apply did not create {kind} {name}:\n{applied}"
        );
    }

    // Phase 2: `kubectl get` (server-side Tables) and `kubectl describe`
    // of each, and `get all` by category.
    for (i, (kind, name)) in types.iter().enumerate() {
        let ctx = ["node-1", "node-2", "node-3"][i % 3];
        let got = ok(
            &kubectl(&kc, ctx, &["-n", "wl", "get", kind, name]),
            &format!("get {kind}"),
        );
        let header = got.lines().next().unwrap_or("");
        assert!(
            header.starts_with("NAME") && header.ends_with("AGE") && got.contains(name),
            "kubectl get {kind} {name}:\n{got}"
        );
        let described = ok(
            &kubectl(&kc, ctx, &["-n", "wl", "describe", kind, name]),
            &format!("describe {kind}"),
        );
        assert!(
            described
                .lines()
                .any(|l| l.starts_with("Name:") && l.ends_with(name)),
            "kubectl describe {kind} {name}:\n{described}"
        );
    }
    let rs = ok(
        &kubectl(&kc, "node-3", &["-n", "wl", "get", "rs", "cache"]),
        "get rs",
    );
    assert!(
        rs.lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .eq(["NAME", "DESIRED", "CURRENT", "READY", "AGE"]),
        "{rs}"
    );
    let all = ok(
        &kubectl(&kc, "node-1", &["-n", "wl", "get", "all"]),
        "get all",
    );
    for shown in [
        "deployment.apps/web",
        "replicaset.apps/cache",
        "statefulset.apps/db",
        "daemonset.apps/agent",
        "replicationcontroller/legacy",
        "job.batch/migrate",
        "cronjob.batch/nightly",
        "horizontalpodautoscaler.autoscaling/web",
    ] {
        assert!(all.contains(shown), "kubectl get all lacks {shown}:\n{all}");
    }

    // Phase 3: `kubectl describe` lists an object's events, found by
    // kube's `involvedObject.*` field selectors.
    let uid = ok(
        &kubectl(
            &kc,
            "node-1",
            &[
                "-n",
                "wl",
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.metadata.uid}",
            ],
        ),
        "deployment uid",
    );
    let event = write(
        "event.yaml",
        &format!(
            r#"apiVersion: v1
kind: Event
metadata: {{name: web.e2e, namespace: wl}}
involvedObject: {{apiVersion: apps/v1, kind: Deployment, name: web, namespace: wl, uid: "{uid}"}}
reason: RolledByTheTest
message: a deployment event from the e2e test
type: Normal
source: {{component: e2e}}
"#
        ),
    );
    ok(
        &kubectl(&kc, "node-2", &["create", "-f", &event]),
        "create event",
    );
    let described = ok(
        &kubectl(
            &kc,
            "node-3",
            &["-n", "wl", "describe", "deployment", "web"],
        ),
        "describe deployment",
    );
    assert!(
        described.contains("RolledByTheTest")
            && described.contains("a deployment event from the e2e test"),
        "describe does not list the deployment's event:\n{described}"
    );
    let selected = ok(
        &kubectl(
            &kc,
            "node-1",
            &[
                "-n",
                "wl",
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=Deployment,involvedObject.name=web,source=e2e",
                "-o",
                "name",
            ],
        ),
        "events by field selector",
    );
    assert_eq!(selected.trim(), "event/web.e2e");
    let none = ok(
        &kubectl(
            &kc,
            "node-1",
            &[
                "-n",
                "wl",
                "get",
                "events",
                "--field-selector",
                "involvedObject.kind=Pod",
                "-o",
                "name",
            ],
        ),
        "no pod events",
    );
    assert_eq!(none.trim(), "");
    let refused = kubectl(
        &kc,
        "node-1",
        &[
            "-n",
            "wl",
            "get",
            "rs",
            "--field-selector",
            "status.replicas=2",
        ],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains(
            "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        ),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // Phase 4: `kubectl scale` writes the scale subresource: spec.replicas
    // and the generation move, nothing else; every scalable type.
    let before = get_json("node-1", &["deployment", "web"]);
    assert_eq!(before["metadata"]["generation"], 1);
    ok(
        &kubectl(
            &kc,
            "node-2",
            &["-n", "wl", "scale", "deployment/web", "--replicas=3"],
        ),
        "kubectl scale",
    );
    let after = get_json("node-3", &["deployment", "web", "--show-managed-fields"]);
    assert_eq!(after["spec"]["replicas"], 3);
    assert_eq!(after["metadata"]["generation"], 2);
    assert_eq!(after["spec"]["template"], before["spec"]["template"]);
    let managers: Vec<(&str, &str)> = after["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or(""),
                e["subresource"].as_str().unwrap_or(""),
            )
        })
        .collect();
    // kubectl's manager is its User-Agent's program name (`kubectl`, or
    // the binary's own name).
    assert!(
        managers
            .iter()
            .any(|(m, sub)| m.starts_with("kubectl") && *sub == "scale"),
        "the scale is recorded as kubectl's write of the subresource: {managers:?}"
    );
    for target in [
        "replicaset/cache",
        "statefulset/db",
        "replicationcontroller/legacy",
    ] {
        ok(
            &kubectl(
                &kc,
                "node-1",
                &["-n", "wl", "scale", target, "--replicas=4"],
            ),
            &format!("scale {target}"),
        );
        let obj = get_json("node-2", &[target]);
        assert_eq!(obj["spec"]["replicas"], 4, "{target}");
    }
    let unscalable = kubectl(
        &kc,
        "node-1",
        &["-n", "wl", "scale", "daemonset/agent", "--replicas=2"],
    );
    assert!(!unscalable.status.success(), "a daemon set has no scale");

    // Phase 5: the scale as clients read it, and its preconditions:
    // `--resource-version` (kubectl reads the scale, checks, then PUTs it
    // with that version) and a stale version PUT raw: kube's 409.
    let raw: Value = serde_json::from_str(&ok(
        &kubectl(
            &kc,
            "node-3",
            &[
                "get",
                "--raw",
                "/apis/apps/v1/namespaces/wl/deployments/web/scale",
            ],
        ),
        "get --raw scale",
    ))
    .expect("json");
    assert_eq!(raw["kind"], "Scale");
    assert_eq!(raw["apiVersion"], "autoscaling/v1");
    assert_eq!(raw["spec"]["replicas"], 3);
    assert_eq!(raw["status"]["selector"], "app=web");
    assert_eq!(raw["metadata"]["uid"], after["metadata"]["uid"]);
    let rv = raw["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    assert_eq!(
        rv,
        after["metadata"]["resourceVersion"].as_str().expect("rv")
    );
    ok(
        &kubectl(
            &kc,
            "node-1",
            &[
                "-n",
                "wl",
                "scale",
                "deployment/web",
                "--replicas=2",
                &format!("--resource-version={rv}"),
            ],
        ),
        "scale with the current resource version",
    );
    assert_eq!(
        get_json("node-2", &["deployment", "web"])["spec"]["replicas"],
        2
    );
    let stale = kubectl(
        &kc,
        "node-2",
        &[
            "-n",
            "wl",
            "scale",
            "deployment/web",
            "--replicas=5",
            &format!("--resource-version={rv}"),
        ],
    );
    assert!(
        !stale.status.success(),
        "a stale --resource-version must fail"
    );
    assert!(
        String::from_utf8_lossy(&stale.stderr).contains("resource version"),
        "{}",
        String::from_utf8_lossy(&stale.stderr)
    );
    let stale_body = write(
        "stale-scale.json",
        &format!(
            r#"{{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{{"name":"web","namespace":"wl","resourceVersion":"{rv}"}},"spec":{{"replicas":6}}}}"#
        ),
    );
    let conflict = kubectl(
        &kc,
        "node-3",
        &[
            "replace",
            "--raw",
            "/apis/apps/v1/namespaces/wl/deployments/web/scale",
            "-f",
            &stale_body,
        ],
    );
    assert!(
        !conflict.status.success(),
        "a stale scale PUT must be refused"
    );
    let err = String::from_utf8_lossy(&conflict.stderr);
    assert!(
        err.contains("Conflict") && err.contains("the object has been modified"),
        "{err}"
    );
    let dep = get_json("node-1", &["deployment", "web"]);
    assert_eq!(
        dep["spec"]["replicas"], 2,
        "nothing written by the refused scales"
    );
    // A dry run answers the new scale and writes nothing.
    ok(
        &kubectl(
            &kc,
            "node-1",
            &[
                "-n",
                "wl",
                "scale",
                "deployment/web",
                "--replicas=9",
                "--dry-run=server",
            ],
        ),
        "scale --dry-run=server",
    );
    let dep_after = get_json("node-2", &["deployment", "web"]);
    assert_eq!(dep_after["spec"]["replicas"], 2);
    assert_eq!(
        dep_after["metadata"]["resourceVersion"],
        dep["metadata"]["resourceVersion"]
    );

    // Phase 6: a namespace's `/finalize` replaces its `spec.finalizers`
    // (kube's names only); a terminating namespace left with none goes.
    ok(
        &kubectl(&kc, "node-1", &["create", "namespace", "fin"]),
        "create namespace fin",
    );
    let finalize = |ctx: &str, finalizers: &str| {
        let body = write(
            "finalize.json",
            &format!(
                r#"{{"kind":"Namespace","apiVersion":"v1","metadata":{{"name":"fin"}},"spec":{{"finalizers":{finalizers}}}}}"#
            ),
        );
        kubectl(
            &kc,
            ctx,
            &[
                "replace",
                "--raw",
                "/api/v1/namespaces/fin/finalize",
                "-f",
                &body,
            ],
        )
    };
    ok(
        &finalize("node-2", r#"["kubernetes","example.com/hold"]"#),
        "finalize: add a finalizer",
    );
    let ns: Value = serde_json::from_str(&ok(
        &kubectl(&kc, "node-3", &["get", "namespace", "fin", "-o", "json"]),
        "get namespace",
    ))
    .expect("json");
    assert_eq!(
        ns["spec"]["finalizers"],
        serde_json::json!(["kubernetes", "example.com/hold"])
    );
    let bad = finalize("node-1", r#"["cleanup"]"#);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("name is neither a standard finalizer name nor is it fully qualified"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    ok(
        &kubectl(
            &kc,
            "node-1",
            &["delete", "namespace", "fin", "--wait=false"],
        ),
        "delete namespace fin",
    );
    // The namespace controller empties it and removes `kubernetes`; the
    // other finalizer keeps it until `/finalize` drops it, which removes it
    // in the same write.
    ok(&finalize("node-3", "[]"), "finalize: drop every finalizer");
    let gone = kubectl(&kc, "node-2", &["get", "namespace", "fin"]);
    assert!(!gone.status.success(), "the namespace is gone");
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );

    stop_cluster(launcher).await;
}

/// `kubectl diff` (a server-side dry run of the manifest against what is
/// stored) and `kubectl edit` through `KUBE_EDITOR`, as a user runs them:
/// a changed manifest diffs with exit code 1 and leaves the object and
/// the revision as they were, an unchanged one diffs empty with exit
/// code 0; an edit that changes a value is stored, one that changes
/// nothing is cancelled; `kubectl patch --type merge` and `--type json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_diff_and_edit() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, _nodes) = start_cluster(dir.path()).await;
    let kc = dir.path().join("kubeconfig");
    ok(
        &kubectl(&kc, "node-1", &["create", "namespace", "ed"]),
        "create namespace",
    );
    let manifest = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: ed\ndata:\n  mode: \"{value}\"\n  keep: \"yes\"\n"
        )
    };
    let file = dir.path().join("settings.yaml");
    std::fs::write(&file, manifest("fast")).expect("manifest");
    let file_arg = file.to_str().expect("utf-8 path");
    ok(&kubectl(&kc, "node-1", &["apply", "-f", file_arg]), "apply");
    let rv = |ctx: &str| -> String {
        ok(
            &kubectl(
                &kc,
                ctx,
                &[
                    "-n",
                    "ed",
                    "get",
                    "configmap",
                    "settings",
                    "-o",
                    "jsonpath={.metadata.resourceVersion}",
                ],
            ),
            "get rv",
        )
    };
    let before = rv("node-2");

    // Phase 1: diff of the stored manifest: nothing, exit 0.
    let same = kubectl(&kc, "node-2", &["diff", "-f", file_arg]);
    assert_eq!(
        same.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&same.stdout),
        String::from_utf8_lossy(&same.stderr)
    );
    assert!(
        same.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&same.stdout)
    );

    // Phase 2: a changed manifest: the change, exit 1, nothing stored.
    std::fs::write(&file, manifest("safe")).expect("manifest");
    let changed = kubectl(&kc, "node-3", &["diff", "-f", file_arg]);
    let text = String::from_utf8_lossy(&changed.stdout);
    assert_eq!(
        changed.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&changed.stderr)
    );
    assert!(text.contains("-  mode: fast"), "{text}");
    assert!(text.contains("+  mode: safe"), "{text}");
    assert_eq!(rv("node-1"), before, "a diff stores nothing");

    // Phase 3: kubectl edit with an editor that changes the value.
    let editor = dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/mode: fast/mode: edited/' \"$1\"\n",
    )
    .expect("editor");
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let edited = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(&kc)
        .args([
            "--context",
            "node-2",
            "-n",
            "ed",
            "edit",
            "configmap",
            "settings",
        ])
        .env("KUBE_EDITOR", &editor)
        .output()
        .expect("kubectl edit");
    let out = ok(&edited, "edit");
    assert!(out.contains("configmap/settings edited"), "{out}");
    let data: Value = serde_json::from_str(&ok(
        &kubectl(
            &kc,
            "node-3",
            &["-n", "ed", "get", "configmap", "settings", "-o", "json"],
        ),
        "get",
    ))
    .expect("json");
    assert_eq!(
        data["data"],
        serde_json::json!({"mode": "edited", "keep": "yes"})
    );
    assert_ne!(rv("node-1"), before);

    // Phase 4: an edit that changes nothing is cancelled.
    let unchanged = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(&kc)
        .args([
            "--context",
            "node-1",
            "-n",
            "ed",
            "edit",
            "configmap",
            "settings",
        ])
        .env("KUBE_EDITOR", "true")
        .output()
        .expect("kubectl edit");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&unchanged.stdout),
        String::from_utf8_lossy(&unchanged.stderr)
    );
    assert!(all.contains("Edit cancelled, no changes made."), "{all}");

    // Phase 5: kubectl patch --type merge, then --type json.
    ok(
        &kubectl(
            &kc,
            "node-3",
            &[
                "-n",
                "ed",
                "patch",
                "configmap",
                "settings",
                "--type",
                "merge",
                "-p",
                r#"{"data":{"extra":"1"}}"#,
            ],
        ),
        "patch --type merge",
    );
    ok(
        &kubectl(
            &kc,
            "node-1",
            &[
                "-n",
                "ed",
                "patch",
                "configmap",
                "settings",
                "--type",
                "json",
                "-p",
                r#"[{"op":"remove","path":"/data/keep"}]"#,
            ],
        ),
        "patch --type json",
    );
    let data: Value = serde_json::from_str(&ok(
        &kubectl(
            &kc,
            "node-2",
            &["-n", "ed", "get", "configmap", "settings", "-o", "json"],
        ),
        "get",
    ))
    .expect("json");
    assert_eq!(
        data["data"],
        serde_json::json!({"mode": "edited", "extra": "1"})
    );
    stop_cluster(launcher).await;
}

/// The oldest kubectl exercised (1.27, which needs `/openapi/v2` as
/// protobuf to validate): `$KUBECTL_OLDEST` (set by `scripts/common.sh`'s
/// `ensure_kubectl`), else gcloud's `kubectl.1.27`.
fn oldest_kubectl() -> String {
    if let Ok(k) = std::env::var("KUBECTL_OLDEST") {
        return k;
    }
    let gcloud = Command::new("sh")
        .args(["-c", "readlink -f \"$(command -v gcloud)\""])
        .output()
        .ok()
        .filter(|o| o.status.success() && !o.stdout.is_empty())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let Some(gcloud) = gcloud else {
        panic!(
            "kubectl 1.27 not found: KUBECTL_OLDEST is unset and gcloud is not installed \
             (its SDK ships kubectl.1.27 beside it); run scripts/test.sh or \
             `source scripts/common.sh && ensure_kubectl`, which set KUBECTL_OLDEST"
        );
    };
    let k = Path::new(&gcloud)
        .parent()
        .map(|d| d.join("kubectl.1.27"))
        .filter(|k| k.exists())
        .unwrap_or_else(|| panic!("kubectl 1.27 not found beside gcloud ({gcloud})"));
    k.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_openapi_for_explain_apply_and_validation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, _nodes) = start_cluster(dir.path()).await;
    let kc = dir.path().join("kubeconfig");
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

    // Phase 1: kubectl explain reads the v3 schemas: a field's
    // description, and every field of a pod.
    let replicas = ok(
        &kubectl(&kc, "node-1", &["explain", "deployment.spec.replicas"]),
        "explain deployment.spec.replicas",
    );
    assert!(replicas.contains("replicas"), "{replicas}");
    assert!(
        replicas.contains("Number of desired pods"),
        "no description: {replicas}"
    );
    let pods = ok(
        &kubectl(&kc, "node-2", &["explain", "pods", "--recursive"]),
        "explain pods --recursive",
    );
    assert!(pods.contains("containers"), "{pods}");
    assert!(pods.contains("terminationGracePeriodSeconds"), "{pods}");

    // Phase 2: a client-side apply of a changed manifest computes its
    // strategic merge patch from the v3 schema, without a warning.
    ok(
        &kubectl(&kc, "node-1", &["create", "namespace", "oa"]),
        "create namespace",
    );
    let manifest = |replicas: u32, image: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: oa\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n"
        )
    };
    let file = dir.path().join("web.yaml");
    let file_arg = file.to_str().expect("utf-8 path");
    std::fs::write(&file, manifest(1, "nginx:1.25")).expect("manifest");
    let first = kubectl(&kc, "node-2", &["apply", "-f", file_arg]);
    ok(&first, "first apply");
    std::fs::write(&file, manifest(3, "nginx:1.27")).expect("manifest");
    let second = kubectl(&kc, "node-3", &["apply", "-f", file_arg]);
    ok(&second, "second apply");
    for out in [&first, &second] {
        assert!(
            !stderr(out).contains("error calculating patch"),
            "{}",
            stderr(out)
        );
    }
    let stored = ok(
        &kubectl(
            &kc,
            "node-1",
            &[
                "-n",
                "oa",
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}",
            ],
        ),
        "get deployment",
    );
    assert_eq!(stored, "3 nginx:1.27");

    // Phase 3: /openapi/v2 as JSON, through kubectl's raw GET.
    let v2 = ok(
        &kubectl(&kc, "node-3", &["get", "--raw", "/openapi/v2"]),
        "get --raw /openapi/v2",
    );
    let v2: Value = serde_json::from_str(&v2).expect("v2 is JSON");
    assert_eq!(v2["swagger"], "2.0");
    assert!(v2["definitions"]["io.k8s.api.apps.v1.Deployment"].is_object());

    // Phase 4: kubectl 1.27 creates and applies with its default
    // (strict) validation, and refuses a manifest with an unknown field.
    let oldest = oldest_kubectl();
    let old = |ctx: &str, args: &[&str]| -> Output {
        Command::new(&oldest)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["--context", ctx])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {oldest}: {e}"))
    };
    let cm = |name: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: oa\n{extra}data:\n  mode: fast\n"
        )
    };
    let created = dir.path().join("created.yaml");
    std::fs::write(&created, cm("created", "")).expect("manifest");
    let out = old("node-1", &["create", "-f", created.to_str().expect("path")]);
    ok(&out, "kubectl 1.27 create -f");
    let applied = dir.path().join("applied.yaml");
    std::fs::write(&applied, cm("applied", "")).expect("manifest");
    let out = old("node-2", &["apply", "-f", applied.to_str().expect("path")]);
    ok(&out, "kubectl 1.27 apply -f");
    let out = old("node-3", &["apply", "-f", applied.to_str().expect("path")]);
    ok(&out, "kubectl 1.27 apply -f again");
    let typo = dir.path().join("typo.yaml");
    std::fs::write(&typo, cm("typo", "bogusField: 1\n")).expect("manifest");
    let out = old("node-1", &["apply", "-f", typo.to_str().expect("path")]);
    assert!(
        !out.status.success(),
        "an unknown field passed strict validation: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr(&out).contains("bogusField"),
        "the error does not name the field: {}",
        stderr(&out)
    );
    let names = ok(
        &kubectl(
            &kc,
            "node-2",
            &["-n", "oa", "get", "configmaps", "-o", "name"],
        ),
        "get configmaps",
    );
    assert!(names.contains("configmap/created"), "{names}");
    assert!(names.contains("configmap/applied"), "{names}");
    assert!(!names.contains("configmap/typo"), "{names}");

    stop_cluster(launcher).await;
}

/// CustomResourceDefinitions with kubectl, through different nodes: a
/// definition applied and waited for (`condition=established`), found by
/// `api-resources` and `explain` (its schema in OpenAPI v3), its objects
/// applied client-side (a merge patch: kubectl knows no strategic keys for
/// them) and server-side, refused by strict validation for an unknown
/// field, listed with the definition's printer columns and selected by
/// its selectable field; then the definition deleted with its objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_defines_and_uses_a_custom_resource() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, _nodes) = start_cluster(dir.path()).await;
    let kc = dir.path().join("kubeconfig");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("manifest");
        path.to_str().expect("utf-8 path").to_string()
    };
    let crd = write(
        "crd.yaml",
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - name: Spec
      type: string
      jsonPath: .spec.cronSpec
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    selectableFields:
    - jsonPath: .spec.cronSpec
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What the cron tab runs, and when.
            properties:
              cronSpec:
                type: string
                description: When it runs, in cron syntax.
              image:
                type: string
              replicas:
                type: integer
                default: 1
"#,
    );
    ok(
        &kubectl(&kc, "node-1", &["apply", "-f", &crd]),
        "apply the definition",
    );
    ok(
        &kubectl(
            &kc,
            "node-2",
            &[
                "wait",
                "--for=condition=established",
                "--timeout=30s",
                "crd/crontabs.stable.example.com",
            ],
        ),
        "wait for the definition",
    );
    let resources = ok(
        &kubectl(
            &kc,
            "node-3",
            &["api-resources", "--api-group=stable.example.com"],
        ),
        "api-resources",
    );
    assert!(
        resources.contains("crontabs") && resources.contains("ct"),
        "{resources}"
    );
    let explained = ok(
        &kubectl(&kc, "node-3", &["explain", "crontab.spec.cronSpec"]),
        "explain",
    );
    assert!(explained.contains("in cron syntax"), "{explained}");

    let tab = |name: &str, spec: &str, extra: &str| {
        format!(
            "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  cronSpec: \"{spec}\"\n  image: busybox\n{extra}"
        )
    };
    let every5 = write("every5.yaml", &tab("every5", "*/5 * * * *", ""));
    ok(
        &kubectl(&kc, "node-2", &["apply", "-f", &every5]),
        "apply a cron tab",
    );
    let every5 = write(
        "every5.yaml",
        &tab("every5", "*/5 * * * *", "  replicas: 3\n"),
    );
    ok(
        &kubectl(&kc, "node-3", &["apply", "-f", &every5]),
        "apply it changed",
    );
    let hourly = write("hourly.yaml", &tab("hourly", "0 * * * *", ""));
    ok(
        &kubectl(&kc, "node-1", &["apply", "--server-side", "-f", &hourly]),
        "server-side apply",
    );
    let typo = write("typo.yaml", &tab("typo", "0 0 * * *", "  bogusField: 1\n"));
    let refused = kubectl(&kc, "node-1", &["apply", "-f", &typo]);
    assert!(
        !refused.status.success(),
        "strict validation let an unknown field through"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("bogusField"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let listed = ok(&kubectl(&kc, "node-2", &["get", "ct"]), "get cron tabs");
    let lines: Vec<Vec<&str>> = listed
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "SPEC", "REPLICAS"], "{listed}");
    assert!(
        lines.contains(&vec!["every5", "*/5", "*", "*", "*", "*", "3"]),
        "{listed}"
    );
    assert!(
        lines.contains(&vec!["hourly", "0", "*", "*", "*", "*", "1"]),
        "{listed}"
    );
    let selected = ok(
        &kubectl(
            &kc,
            "node-3",
            &[
                "get",
                "crontabs",
                "--field-selector",
                "spec.cronSpec=0 * * * *",
                "-o",
                "name",
            ],
        ),
        "select by a selectable field",
    );
    assert_eq!(selected.trim(), "crontab.stable.example.com/hourly");

    ok(
        &kubectl(
            &kc,
            "node-1",
            &["delete", "-f", &crd, "--wait=true", "--timeout=60s"],
        ),
        "delete the definition",
    );
    let gone = kubectl(&kc, "node-2", &["get", "crontabs"]);
    assert!(
        !gone.status.success(),
        "the type is still served after its definition went"
    );
    stop_cluster(launcher).await;
}

/// A test that panics drops its launcher without `stop_cluster`: the
/// launcher still stops its nodes, so their ports close and nothing
/// outlives the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_launcher_stops_its_nodes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, nodes) = start_cluster(dir.path()).await;
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}/readyz", n["rest_url"].as_str().expect("url")))
        .collect();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    for url in &urls {
        assert!(client.get(url).send().await.is_ok(), "{url} answers");
    }
    drop(launcher);
    // The nodes are the launcher's children, not ours: nothing to await
    // but their ports closing.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for url in &urls {
        while client.get(url).send().await.is_ok() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{url} still answers 30 s after the launcher was dropped"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

//! End to end with the real clients a user runs, against the 3-node
//! cluster of `kubestore cluster --nodes 3`: every everyday kubectl
//! command with each kubectl version the project obtains
//! ([`KUBECTL_VERSIONS`]: 1.33 and 1.37 today), and helm 4 through a
//! chart's whole lifecycle, each command through one of the three nodes'
//! contexts, asserting on output and exit codes.
//!
//! Each kubectl version works in namespaces of its own (named after its
//! minor version), so the versions share one cluster without seeing each
//! other's objects. The helm test builds its charts from [`Chart`]s
//! (files written into a temporary directory), so a chart that ships a
//! CRD is one more `Chart` with a `crds/` file.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use kubestore_tests::clients::{
    failed, ok, start_cluster, stop_cluster, Helm, Kubectl, KUBECTL_VERSIONS,
};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The three nodes' contexts in the launcher's kubeconfig.
const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];

/// How long a long-running client (a watch, a wait) may take to show
/// what the test waits for.
const CLIENT_DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_everyday_kubectl_command_with_each_kubectl_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, _nodes) = start_cluster(dir.path()).await;
    let kubeconfig = dir.path().join("kubeconfig");
    for var in KUBECTL_VERSIONS {
        let k = Kubectl::from_env(var, &kubeconfig);
        let (_, minor) = k.client_version();
        let scratch = dir.path().join(format!("kubectl-1.{minor}"));
        std::fs::create_dir_all(&scratch).expect("scratch dir");
        let day = Day {
            k,
            minor,
            ns: format!("everyday-1-{minor}"),
            dir: scratch,
        };
        day.discovery_version_and_auth();
        day.create_and_get();
        day.watch().await;
        day.describe();
        day.apply_client_and_server_side();
        day.apply_prune();
        day.edit_patch_replace();
        day.label_annotate_scale();
        day.wait_for_condition_jsonpath_and_delete().await;
        day.diff();
        day.kustomize();
        day.delete();
    }
    stop_cluster(launcher).await;
}

/// One kubectl version's everyday work, in its own namespace.
struct Day {
    k: Kubectl,
    minor: u32,
    ns: String,
    /// Scratch files (manifests, an editor script, a kustomization).
    dir: PathBuf,
}

impl Day {
    /// `kubectl -n <ns> <args>` through `ctx`.
    fn run(&self, ctx: &str, args: &[&str]) -> Output {
        let mut all = vec!["-n", self.ns.as_str()];
        all.extend_from_slice(args);
        self.k.run(ctx, &all)
    }

    /// `kubectl -n <ns> <args>` through `ctx`, which must succeed: its
    /// standard output.
    fn ok(&self, ctx: &str, args: &[&str]) -> String {
        ok(
            &self.run(ctx, args),
            &format!("kubectl 1.{} {}", self.minor, args.join(" ")),
        )
    }

    /// `kubectl -n <ns> <args> -o json` through `ctx`, parsed.
    fn json(&self, ctx: &str, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.ok(ctx, &all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    /// A file in the scratch directory, as a path argument.
    fn file(&self, name: &str, content: &str) -> String {
        let path = self.dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, content).expect("write scratch file");
        path.to_str().expect("utf-8 path").to_string()
    }

    /// `version`, `api-versions`, `api-resources`, `get --raw`, `auth
    /// can-i`.
    fn discovery_version_and_auth(&self) {
        let v: Value = serde_json::from_str(&ok(
            &self.k.run(NODES[0], &["version", "-o", "json"]),
            "version",
        ))
        .expect("version -o json");
        assert_eq!(v["clientVersion"]["minor"], self.minor.to_string());
        assert_eq!(v["serverVersion"]["major"], "1");
        assert_eq!(v["serverVersion"]["minor"], "33");
        assert!(
            v["serverVersion"]["gitVersion"]
                .as_str()
                .is_some_and(|g| g.contains("kubestore")),
            "{v}"
        );

        let versions = ok(&self.k.run(NODES[1], &["api-versions"]), "api-versions");
        let versions: Vec<&str> = versions.lines().collect();
        for gv in [
            "v1",
            "apps/v1",
            "authorization.k8s.io/v1",
            "coordination.k8s.io/v1",
        ] {
            assert!(
                versions.contains(&gv),
                "{gv} not in api-versions: {versions:?}"
            );
        }

        let resources = ok(&self.k.run(NODES[2], &["api-resources"]), "api-resources");
        let deployments = resources
            .lines()
            .find(|l| l.starts_with("deployments "))
            .unwrap_or_else(|| panic!("no deployments in api-resources:\n{resources}"));
        let cols: Vec<&str> = deployments.split_whitespace().collect();
        assert_eq!(
            cols,
            ["deployments", "deploy", "apps/v1", "true", "Deployment"]
        );
        let authz = ok(
            &self.k.run(
                NODES[0],
                &[
                    "api-resources",
                    "--api-group=authorization.k8s.io",
                    "-o",
                    "name",
                ],
            ),
            "api-resources --api-group",
        );
        assert_eq!(
            authz.trim(),
            "selfsubjectaccessreviews.authorization.k8s.io"
        );
        let verbs = ok(
            &self.k.run(
                NODES[1],
                &[
                    "api-resources",
                    "--verbs=create",
                    "--namespaced=false",
                    "-o",
                    "name",
                ],
            ),
            "api-resources --verbs",
        );
        assert!(verbs.lines().any(|l| l == "namespaces"), "{verbs}");

        ok(
            &self.k.run(NODES[0], &["create", "namespace", &self.ns]),
            "create namespace",
        );
        let raw: Value = serde_json::from_str(&ok(
            &self
                .k
                .run(NODES[1], &["get", "--raw", "/api/v1/namespaces"]),
            "get --raw",
        ))
        .expect("get --raw prints JSON");
        assert_eq!(raw["kind"], "NamespaceList");
        assert!(
            raw["items"]
                .as_array()
                .is_some_and(|items| items.iter().any(|n| n["metadata"]["name"] == self.ns)),
            "{raw}"
        );

        // No authorization is configured: every question is answered yes.
        let can = self
            .k
            .run(NODES[2], &["auth", "can-i", "create", "deployments"]);
        assert_eq!(ok(&can, "auth can-i create deployments"), "yes\n");
        let quiet = self.run(NODES[0], &["auth", "can-i", "delete", "secrets", "--quiet"]);
        assert_eq!(ok(&quiet, "auth can-i --quiet"), "");
        let path = self.k.run(NODES[1], &["auth", "can-i", "get", "/healthz"]);
        assert_eq!(ok(&path, "auth can-i get /healthz"), "yes\n");
    }

    /// `create` (generators and `-f`), then `get` in every output.
    fn create_and_get(&self) {
        let out = self.ok(
            NODES[1],
            &["create", "configmap", "cfg", "--from-literal=mode=fast"],
        );
        assert_eq!(out.trim(), "configmap/cfg created");
        // Generators whose typed clients send and ask for protobuf.
        let created = self.run(
            NODES[0],
            &[
                "create",
                "deployment",
                "gen",
                "--image=nginx:1.27",
                "--replicas=0",
                "-v=8",
            ],
        );
        let out = ok(&created, "kubectl create deployment");
        assert_eq!(out.trim(), "deployment.apps/gen created");
        // kubectl 1.33 and later send a generator's object as protobuf.
        let log = String::from_utf8_lossy(&created.stderr);
        assert!(
            self.minor < 33 || log.contains("application/vnd.kubernetes.protobuf"),
            "kubectl 1.{} did not send protobuf:\n{log}",
            self.minor
        );
        let gen = self.json(NODES[1], &["get", "deployment", "gen"]);
        assert_eq!(gen["spec"]["replicas"], 0, "{gen}");
        assert_eq!(
            gen["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27",
            "{gen}"
        );
        for (args, expected) in [
            (
                &["create", "service", "clusterip", "gen", "--tcp=80:8080"][..],
                "service/gen created",
            ),
            (
                &["create", "job", "gen", "--image=busybox", "--", "true"][..],
                "job.batch/gen created",
            ),
            (
                &["create", "role", "gen", "--verb=get", "--resource=pods"][..],
                "role.rbac.authorization.k8s.io/gen created",
            ),
        ] {
            assert_eq!(self.ok(NODES[2], args).trim(), expected);
        }
        let svc = self.json(NODES[0], &["get", "service", "gen"]);
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080, "{svc}");
        let manifest = self.file(
            "web.yaml",
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-settings\n  namespace: {ns}\n  labels:\n    app: web\ndata:\n  color: blue\n---\n\
                 apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\n  labels:\n    app: web\nspec:\n  replicas: 0\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: nginx\n        image: nginx:1.27\n",
                ns = self.ns
            ),
        );
        let out = self.ok(NODES[2], &["create", "-f", &manifest]);
        assert!(
            out.contains("configmap/web-settings created")
                && out.contains("deployment.apps/web created"),
            "{out}"
        );
        let again = failed(
            &self.run(NODES[1], &["create", "configmap", "cfg"]),
            "create of an existing name",
        );
        assert!(
            again.contains(r#"configmaps "cfg" already exists"#),
            "{again}"
        );

        // The default table, and `-o wide`.
        let table = self.ok(NODES[0], &["get", "configmaps"]);
        let cms = rows(&table);
        assert_eq!(cms[0], ["NAME", "DATA", "AGE"], "{table}");
        assert!(cms.iter().any(|r| r[..2] == ["cfg", "1"]), "{table}");
        let listed = self.ok(NODES[1], &["get", "deployments"]);
        let deployments = rows(&listed);
        assert_eq!(
            deployments[0],
            ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
            "{listed}"
        );
        let web = deployments
            .iter()
            .find(|r| r[0] == "web")
            .unwrap_or_else(|| panic!("{listed}"));
        assert_eq!(web[1..4], ["0/0", "0", "0"], "{listed}");
        // `-o wide` adds the template's containers and images and the
        // selector, after AGE.
        let wide = self.ok(NODES[2], &["get", "deployments", "-o", "wide"]);
        let wide_rows = rows(&wide);
        assert_eq!(
            wide_rows[0],
            [
                "NAME",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ],
            "{wide}"
        );
        let web = wide_rows
            .iter()
            .find(|r| r[0] == "web")
            .unwrap_or_else(|| panic!("{wide}"));
        assert_eq!(web.len(), 8, "{wide}");
        // A config map has no wide columns in kube either.
        let wide = self.ok(NODES[2], &["get", "configmaps", "-o", "wide"]);
        assert_eq!(rows(&wide)[0], ["NAME", "DATA", "AGE"], "{wide}");

        // yaml, json, name, jsonpath, custom-columns.
        let yaml = self.ok(NODES[2], &["get", "configmap", "cfg", "-o", "yaml"]);
        assert!(
            yaml.contains("kind: ConfigMap")
                && yaml.contains("  mode: fast")
                && yaml.contains("  name: cfg"),
            "{yaml}"
        );
        let obj = self.json(NODES[0], &["get", "configmap", "cfg"]);
        assert_eq!(obj["data"], json!({"mode": "fast"}));
        assert_eq!(obj["metadata"]["namespace"], self.ns);
        let names = self.ok(
            NODES[1],
            &["get", "configmaps", "-l", "app=web", "-o", "name"],
        );
        assert_eq!(names, "configmap/web-settings\n");
        let mode = self.ok(
            NODES[2],
            &["get", "configmap", "cfg", "-o", "jsonpath={.data.mode}"],
        );
        assert_eq!(mode, "fast");
        let columns = self.ok(
            NODES[0],
            &[
                "get",
                "configmaps,deployments",
                "-l",
                "app=web",
                "-o",
                "custom-columns=KIND:.kind,NAME:.metadata.name,APP:.metadata.labels.app",
            ],
        );
        assert_eq!(
            rows(&columns),
            [
                vec!["KIND", "NAME", "APP"],
                vec!["ConfigMap", "web-settings", "web"],
                vec!["Deployment", "web", "web"],
            ],
            "{columns}"
        );

        // All namespaces, a label selector, a field selector.
        let all = ok(
            &self
                .k
                .run(NODES[1], &["get", "configmaps", "-A", "-l", "app=web"]),
            "get -A",
        );
        let everywhere = rows(&all);
        assert_eq!(everywhere[0][..2], ["NAMESPACE", "NAME"], "{all}");
        assert!(
            everywhere
                .iter()
                .any(|r| r[..2] == [self.ns.as_str(), "web-settings"]),
            "{all}"
        );
        let picked = self.ok(
            NODES[2],
            &[
                "get",
                "configmaps",
                "--field-selector",
                "metadata.name=cfg",
                "-o",
                "name",
            ],
        );
        assert_eq!(picked, "configmap/cfg\n");
        let none = self.run(NODES[0], &["get", "configmaps", "-l", "app=nothing"]);
        let said = String::from_utf8_lossy(&none.stderr);
        assert!(
            none.status.success() && none.stdout.is_empty() && said.contains("No resources found"),
            "{said}"
        );

        // One object per page: kubectl follows the continue tokens.
        let paged = self.run(
            NODES[1],
            &["get", "configmaps", "--chunk-size=1", "-o", "name", "-v=6"],
        );
        let names = ok(&paged, "get --chunk-size=1");
        assert!(
            names.contains("configmap/cfg\n") && names.contains("configmap/web-settings\n"),
            "{names}"
        );
        let requests = String::from_utf8_lossy(&paged.stderr);
        assert!(
            requests.contains("limit=1") && requests.contains("continue="),
            "kubectl did not page: {requests}"
        );
    }

    /// `get -w`: the current objects first, then a change made after.
    async fn watch(&self) {
        let mut watching = self.k.spawn(
            NODES[2],
            &["-n", &self.ns, "get", "configmaps", "-w", "-o", "name"],
        );
        let mut lines = BufReader::new(watching.stdout.take().expect("stdout")).lines();
        let mut initial = Vec::new();
        while initial.len() < 2 {
            let line = next_line(&mut lines).await;
            if line == "configmap/cfg" || line == "configmap/web-settings" {
                initial.push(line);
            }
        }
        // kubectl watches from the revision of the list it printed, so a
        // change made now is its next event.
        self.ok(NODES[0], &["create", "configmap", "watched"]);
        while next_line(&mut lines).await != "configmap/watched" {}
        watching.kill().await.expect("stop kubectl get -w");
    }

    /// `describe` of a config map and a deployment.
    fn describe(&self) {
        let cm = self.ok(NODES[1], &["describe", "configmap", "cfg"]);
        for want in [
            "Name:",
            "cfg",
            "Namespace:",
            &self.ns,
            "Data",
            "====",
            "mode:",
            "fast",
        ] {
            assert!(cm.contains(want), "{want} not in:\n{cm}");
        }
        let deploy = self.ok(NODES[2], &["describe", "deployment", "web"]);
        for want in [
            "Name:",
            "web",
            "Selector:",
            "app=web",
            "Replicas:",
            "0 desired",
            "StrategyType:",
            "RollingUpdate",
            "nginx:1.27",
        ] {
            assert!(deploy.contains(want), "{want} not in:\n{deploy}");
        }
    }

    /// Client-side apply (created, unchanged, configured, the
    /// last-applied annotation) and server-side apply (managed fields, a
    /// conflict, `--force-conflicts`).
    fn apply_client_and_server_side(&self) {
        let manifest = |v: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: \"{v}\"\n"
            )
        };
        let file = self.file("applied.yaml", &manifest("1"));
        assert_eq!(
            self.ok(NODES[0], &["apply", "-f", &file]).trim(),
            "configmap/applied created"
        );
        assert_eq!(
            self.ok(NODES[1], &["apply", "-f", &file]).trim(),
            "configmap/applied unchanged"
        );
        self.file("applied.yaml", &manifest("2"));
        assert_eq!(
            self.ok(NODES[2], &["apply", "-f", &file]).trim(),
            "configmap/applied configured"
        );
        let obj = self.json(NODES[0], &["get", "configmap", "applied"]);
        assert_eq!(obj["data"], json!({"a": "2"}));
        let last = obj["metadata"]["annotations"]
            ["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap_or_else(|| panic!("no last-applied annotation: {obj}"));
        let last: Value = serde_json::from_str(last).expect("annotation is JSON");
        assert_eq!(last["data"], json!({"a": "2"}));

        let ssa = |v: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  owned: \"{v}\"\n"
            )
        };
        let file = self.file("ssa.yaml", &ssa("1"));
        assert_eq!(
            self.ok(NODES[1], &["apply", "--server-side", "-f", &file])
                .trim(),
            "configmap/ssa serverside-applied"
        );
        let obj = self.json(
            NODES[2],
            &["get", "configmap", "ssa", "--show-managed-fields"],
        );
        let managers = &obj["metadata"]["managedFields"];
        assert_eq!(managers[0]["manager"], "kubectl", "{managers}");
        assert_eq!(managers[0]["operation"], "Apply", "{managers}");
        // Another manager takes the field; applying it back is a conflict
        // until forced.
        self.ok(
            NODES[0],
            &[
                "patch",
                "configmap",
                "ssa",
                "--type=merge",
                "-p",
                r#"{"data":{"owned":"other"}}"#,
            ],
        );
        self.file("ssa.yaml", &ssa("2"));
        let conflict = failed(
            &self.run(NODES[1], &["apply", "--server-side", "-f", &file]),
            "apply --server-side over another manager's field",
        );
        assert!(
            conflict.contains("Apply failed with 1 conflict") && conflict.contains(".data.owned"),
            "{conflict}"
        );
        assert_eq!(
            self.ok(
                NODES[2],
                &["apply", "--server-side", "--force-conflicts", "-f", &file]
            )
            .trim(),
            "configmap/ssa serverside-applied"
        );
        let owned = self.ok(
            NODES[0],
            &["get", "configmap", "ssa", "-o", "jsonpath={.data.owned}"],
        );
        assert_eq!(owned, "2");
    }

    /// `apply --prune -l`: an object dropped from the applied set and
    /// carrying the label is deleted.
    fn apply_prune(&self) {
        let cm = |name: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    set: pruned\ndata:\n  k: v\n"
            )
        };
        let set = self.dir.join("prune");
        std::fs::create_dir_all(&set).expect("mkdir");
        self.file("prune/one.yaml", &cm("prune-one"));
        self.file("prune/two.yaml", &cm("prune-two"));
        let set = set.to_str().expect("utf-8 path");
        let out = self.ok(
            NODES[0],
            &["apply", "-f", set, "--prune", "-l", "set=pruned"],
        );
        assert!(
            out.contains("configmap/prune-one created")
                && out.contains("configmap/prune-two created"),
            "{out}"
        );
        std::fs::remove_file(self.dir.join("prune/two.yaml")).expect("rm");
        let out = self.ok(
            NODES[1],
            &["apply", "-f", set, "--prune", "-l", "set=pruned"],
        );
        assert!(
            out.contains("configmap/prune-one unchanged")
                && out.contains("configmap/prune-two pruned"),
            "{out}"
        );
        let left = self.ok(
            NODES[2],
            &["get", "configmaps", "-l", "set=pruned", "-o", "name"],
        );
        assert_eq!(left, "configmap/prune-one\n");
    }

    /// `edit` (through `KUBE_EDITOR`), `patch` of each type, `replace`.
    fn edit_patch_replace(&self) {
        let editor = self.dir.join("editor.sh");
        std::fs::write(
            &editor,
            "#!/bin/sh\nsed -i 's/mode: fast/mode: edited/' \"$1\"\n",
        )
        .expect("editor");
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let edited = self
            .k
            .command(NODES[1], &["-n", &self.ns, "edit", "configmap", "cfg"])
            .env("KUBE_EDITOR", &editor)
            .output()
            .expect("kubectl edit");
        assert_eq!(ok(&edited, "edit").trim(), "configmap/cfg edited");
        let mode = self.ok(
            NODES[2],
            &["get", "configmap", "cfg", "-o", "jsonpath={.data.mode}"],
        );
        assert_eq!(mode, "edited");

        // Strategic (kubectl's default): the container is merged by name.
        let out = self.ok(
            NODES[0],
            &[
                "patch",
                "deployment",
                "web",
                "-p",
                r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.28"}]}}}}"#,
            ],
        );
        assert_eq!(out.trim(), "deployment.apps/web patched");
        let containers = &self.json(NODES[1], &["get", "deployment", "web"])["spec"]["template"]
            ["spec"]["containers"];
        assert_eq!(containers.as_array().map(Vec::len), Some(1), "{containers}");
        assert_eq!(containers[0]["image"], "nginx:1.28");
        self.ok(
            NODES[2],
            &[
                "patch",
                "configmap",
                "cfg",
                "--type=merge",
                "-p",
                r#"{"data":{"extra":"1"}}"#,
            ],
        );
        self.ok(
            NODES[0],
            &[
                "patch",
                "configmap",
                "cfg",
                "--type=json",
                "-p",
                r#"[{"op":"replace","path":"/data/extra","value":"2"}]"#,
            ],
        );
        let unchanged = self.ok(
            NODES[1],
            &[
                "patch",
                "configmap",
                "cfg",
                "--type=merge",
                "-p",
                r#"{"data":{"extra":"2"}}"#,
            ],
        );
        assert_eq!(unchanged.trim(), "configmap/cfg patched (no change)");

        // replace: the object read, changed and written back whole.
        let mut obj = self.json(NODES[2], &["get", "configmap", "cfg"]);
        obj["data"] = json!({"mode": "replaced"});
        let file = self.file("replace.json", &obj.to_string());
        assert_eq!(
            self.ok(NODES[0], &["replace", "-f", &file]).trim(),
            "configmap/cfg replaced"
        );
        // The same resourceVersion again is now stale: a conflict.
        let stale = failed(
            &self.run(NODES[1], &["replace", "-f", &file]),
            "replace with a stale resourceVersion",
        );
        assert!(
            stale.contains("Conflict") || stale.contains("the object has been modified"),
            "{stale}"
        );
        let data = &self.json(NODES[2], &["get", "configmap", "cfg"])["data"];
        assert_eq!(data, &json!({"mode": "replaced"}));
    }

    /// `label`, `annotate` (set, refuse without `--overwrite`, remove)
    /// and `scale` (with a failed precondition).
    fn label_annotate_scale(&self) {
        assert_eq!(
            self.ok(NODES[0], &["label", "configmap", "cfg", "tier=backend"])
                .trim(),
            "configmap/cfg labeled"
        );
        let refused = failed(
            &self.run(NODES[1], &["label", "configmap", "cfg", "tier=frontend"]),
            "label over a value without --overwrite",
        );
        assert!(
            refused.contains("already has a value (backend)"),
            "{refused}"
        );
        self.ok(
            NODES[2],
            &["label", "configmap", "cfg", "tier=frontend", "--overwrite"],
        );
        assert_eq!(
            self.ok(
                NODES[0],
                &["get", "configmaps", "-l", "tier=frontend", "-o", "name"]
            ),
            "configmap/cfg\n"
        );
        assert_eq!(
            self.ok(NODES[1], &["label", "configmap", "cfg", "tier-"])
                .trim(),
            "configmap/cfg unlabeled"
        );
        // kubectl before 1.28 prints "annotate", later ones "annotated".
        let annotated = self.ok(NODES[2], &["annotate", "configmap", "cfg", "note=hello"]);
        assert!(
            ["configmap/cfg annotated", "configmap/cfg annotate"].contains(&annotated.trim()),
            "{annotated}"
        );
        let note = self.ok(
            NODES[0],
            &[
                "get",
                "configmap",
                "cfg",
                "-o",
                "jsonpath={.metadata.annotations.note}",
            ],
        );
        assert_eq!(note, "hello");
        self.ok(NODES[1], &["annotate", "configmap", "cfg", "note-"]);
        let labels = &self.json(NODES[2], &["get", "configmap", "cfg"])["metadata"];
        assert!(
            labels["labels"].get("tier").is_none() && labels["annotations"].get("note").is_none(),
            "{labels}"
        );

        assert_eq!(
            self.ok(NODES[0], &["scale", "deployment", "web", "--replicas=2"])
                .trim(),
            "deployment.apps/web scaled"
        );
        let replicas = self.ok(
            NODES[1],
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
        );
        assert_eq!(replicas, "2");
        let refused = failed(
            &self.run(
                NODES[2],
                &[
                    "scale",
                    "deployment",
                    "web",
                    "--current-replicas=5",
                    "--replicas=3",
                ],
            ),
            "scale with a wrong --current-replicas",
        );
        assert!(
            refused.contains("Expected replicas to be 5, was 2"),
            "{refused}"
        );
    }

    /// `wait --for=condition=`, `--for=jsonpath=` and `--for=delete`, each
    /// started before the change it waits for.
    async fn wait_for_condition_jsonpath_and_delete(&self) {
        // A condition nothing sets but this test (no controller runs
        // deployments), through the status subresource.
        let waiting = self.k.spawn(
            NODES[0],
            &[
                "-n",
                &self.ns,
                "wait",
                "--for=condition=Available",
                "deployment/web",
                "--timeout=60s",
            ],
        );
        self.ok(
            NODES[1],
            &[
                "patch",
                "deployment",
                "web",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"conditions":[{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"set by the test"}]}}"#,
            ],
        );
        let out = finished(waiting, "wait --for=condition").await;
        assert_eq!(out.trim(), "deployment.apps/web condition met");

        let waiting = self.k.spawn(
            NODES[2],
            &[
                "-n",
                &self.ns,
                "wait",
                "--for=jsonpath={.spec.replicas}=4",
                "deployment/web",
                "--timeout=60s",
            ],
        );
        self.ok(NODES[0], &["scale", "deployment", "web", "--replicas=4"]);
        let out = finished(waiting, "wait --for=jsonpath").await;
        assert_eq!(out.trim(), "deployment.apps/web condition met");

        self.ok(NODES[1], &["create", "configmap", "doomed"]);
        let waiting = self.k.spawn(
            NODES[1],
            &[
                "-n",
                &self.ns,
                "wait",
                "--for=delete",
                "configmap/doomed",
                "--timeout=60s",
            ],
        );
        self.ok(NODES[2], &["delete", "configmap", "doomed", "--wait=false"]);
        finished(waiting, "wait --for=delete").await;
        let gone = failed(
            &self.run(NODES[0], &["get", "configmap", "doomed"]),
            "get of a deleted object",
        );
        assert!(gone.contains("NotFound"), "{gone}");
    }

    /// `diff`: nothing (exit 0), then a change (exit 1), storing nothing.
    fn diff(&self) {
        let manifest = |v: &str| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: diffed\ndata:\n  mode: \"{v}\"\n")
        };
        let file = self.file("diffed.yaml", &manifest("one"));
        self.ok(NODES[0], &["apply", "-f", &file]);
        let same = self.run(NODES[1], &["diff", "-f", &file]);
        assert_eq!(
            same.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&same.stderr)
        );
        assert!(
            same.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&same.stdout)
        );
        self.file("diffed.yaml", &manifest("two"));
        let changed = self.run(NODES[2], &["diff", "-f", &file]);
        let text = String::from_utf8_lossy(&changed.stdout);
        assert_eq!(
            changed.status.code(),
            Some(1),
            "{text}{}",
            String::from_utf8_lossy(&changed.stderr)
        );
        assert!(
            text.contains("-  mode: one") && text.contains("+  mode: two"),
            "{text}"
        );
        let mode = self.ok(
            NODES[0],
            &["get", "configmap", "diffed", "-o", "jsonpath={.data.mode}"],
        );
        assert_eq!(mode, "one", "a diff stores nothing");
    }

    /// `kustomize` of a directory, then `apply -k` of it.
    fn kustomize(&self) {
        self.file(
            "kustomized/kustomization.yaml",
            &format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {}\n\
                 labels:\n- pairs:\n    part-of: kustomized\nconfigMapGenerator:\n- name: generated\n  literals:\n  - color=blue\n\
                 resources:\n- service.yaml\n",
                self.ns
            ),
        );
        self.file(
            "kustomized/service.yaml",
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: kustomized\nspec:\n  selector:\n    app: web\n  ports:\n  - port: 80\n",
        );
        let dir = self.dir.join("kustomized");
        let dir = dir.to_str().expect("utf-8 path");
        let built = ok(&self.k.run(NODES[0], &["kustomize", dir]), "kustomize");
        assert!(
            built.contains("kind: Service")
                && built.contains("name: generated-")
                && built.contains("part-of: kustomized"),
            "{built}"
        );
        let out = self.ok(NODES[1], &["apply", "-k", dir]);
        assert!(
            out.contains("configmap/generated-") && out.contains("service/kustomized created"),
            "{out}"
        );
        let made = self.ok(
            NODES[2],
            &[
                "get",
                "configmaps,services",
                "-l",
                "part-of=kustomized",
                "-o",
                "name",
            ],
        );
        let made: Vec<&str> = made.lines().collect();
        assert_eq!(made.len(), 2, "{made:?}");
        assert!(made[0].starts_with("configmap/generated-"), "{made:?}");
        assert_eq!(made[1], "service/kustomized");
    }

    /// `delete` by name with `--wait`, by label, `--all`.
    fn delete(&self) {
        let out = self.ok(NODES[0], &["delete", "configmap", "applied", "--wait"]);
        assert!(out.contains(r#"configmap "applied" deleted"#), "{out}");
        let out = self.ok(
            NODES[1],
            &["delete", "configmaps,deployments", "-l", "app=web"],
        );
        assert!(
            out.contains(r#"configmap "web-settings" deleted"#)
                && out.contains(r#"deployment.apps "web" deleted"#),
            "{out}"
        );
        let out = self.ok(NODES[2], &["delete", "configmaps", "--all"]);
        assert!(out.contains(r#"configmap "cfg" deleted"#), "{out}");
        let left = self.ok(NODES[0], &["get", "configmaps", "-o", "name"]);
        assert_eq!(left, "", "delete --all left {left}");
        let out = ok(
            &self.k.run(
                NODES[1],
                &["delete", "namespace", &self.ns, "--timeout=90s"],
            ),
            "delete namespace",
        );
        assert!(
            out.contains(&format!(r#"namespace "{}" deleted"#, self.ns)),
            "{out}"
        );
        let gone = failed(
            &self.k.run(NODES[2], &["get", "namespace", &self.ns]),
            "get of a deleted namespace",
        );
        assert!(gone.contains("NotFound"), "{gone}");
    }
}

/// The next line a long-running client prints, within the deadline.
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(lines: &mut tokio::io::Lines<R>) -> String {
    tokio::time::timeout(CLIENT_DEADLINE, lines.next_line())
        .await
        .expect("the client printed nothing in time")
        .expect("read the client's output")
        .expect("the client ended")
}

/// The whitespace-separated columns of each line of a table.
fn rows(table: &str) -> Vec<Vec<&str>> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// Waits for a long-running client to exit successfully: its standard
/// output.
async fn finished(child: tokio::process::Child, what: &str) -> String {
    let out = tokio::time::timeout(CLIENT_DEADLINE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish in time"))
        .expect("wait for the client");
    ok(&out, what)
}

/// A chart as files, written into a directory for helm to install.
struct Chart {
    name: &'static str,
    /// Paths inside the chart (`Chart.yaml`, `templates/x.yaml`,
    /// `crds/x.yaml`) and their contents.
    files: Vec<(&'static str, String)>,
}

impl Chart {
    /// A chart of config maps and a ClusterIP service only: what helm 4's
    /// `--wait` (kstatus) sees as ready without any controller running.
    /// Its port names no protocol: a re-apply keys it by the default
    /// (`TCP`) the stored port has, as kube does.
    fn ready_without_pods() -> Self {
        Chart {
            name: "settings",
            files: vec![
                (
                    "Chart.yaml",
                    "apiVersion: v2\nname: settings\nversion: 0.1.0\nappVersion: \"1\"\n".into(),
                ),
                ("values.yaml", "color: blue\n".into()),
                (
                    "templates/configmap.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\ndata:\n  color: {{ .Values.color | quote }}\n".into(),
                ),
                (
                    "templates/service.yaml",
                    "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}-svc\nspec:\n  selector:\n    app: settings\n  ports:\n  - port: 80\n".into(),
                ),
            ],
        }
    }

    /// A chart that ships a CustomResourceDefinition (`crds/`, which helm
    /// installs first and waits to be established) and one object of it.
    fn with_crd() -> Self {
        Chart {
            name: "gizmo",
            files: vec![
                (
                    "Chart.yaml",
                    "apiVersion: v2\nname: gizmo\nversion: 0.1.0\nappVersion: \"1\"\n".into(),
                ),
                ("values.yaml", "size: 1\n".into()),
                (
                    "crds/gizmos.yaml",
                    "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gizmos.charts.example.com\nspec:\n  group: charts.example.com\n  scope: Namespaced\n  names:\n    plural: gizmos\n    kind: Gizmo\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              size:\n                type: integer\n".into(),
                ),
                (
                    "templates/gizmo.yaml",
                    "apiVersion: charts.example.com/v1\nkind: Gizmo\nmetadata:\n  name: {{ .Release.Name }}-gizmo\nspec:\n  size: {{ .Values.size }}\n".into(),
                ),
            ],
        }
    }

    /// Writes the chart under `dir`: its directory.
    fn write(&self, dir: &Path) -> PathBuf {
        let root = dir.join(self.name);
        for (path, content) in &self.files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, content).expect("write chart file");
        }
        root
    }
}

/// helm in a scratch home, with the helpers the test asserts through.
struct HelmRun {
    helm: Helm,
    home: PathBuf,
    kubectl: Kubectl,
}

impl HelmRun {
    fn run(&self, ctx: &str, args: &[&str]) -> Output {
        self.helm.run(&self.home, ctx, args)
    }

    fn ok(&self, ctx: &str, args: &[&str]) -> String {
        ok(&self.run(ctx, args), &format!("helm {}", args.join(" ")))
    }

    fn json(&self, ctx: &str, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.ok(ctx, &all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    /// `kubectl get ... -o jsonpath=<path>` through `ctx`.
    fn jsonpath(&self, ctx: &str, ns: &str, what: &[&str], path: &str) -> String {
        let mut args = vec!["-n", ns, "get"];
        args.extend_from_slice(what);
        let jp = format!("jsonpath={path}");
        args.extend(["-o", jp.as_str()]);
        self.kubectl.ok(ctx, &args)
    }

    /// The names of the release secrets of `ns` (`owner=helm`).
    fn release_secrets(&self, ctx: &str, ns: &str) -> Vec<String> {
        self.kubectl
            .ok(
                ctx,
                &["-n", ns, "get", "secrets", "-l", "owner=helm", "-o", "name"],
            )
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_chart_lifecycle_through_different_nodes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (launcher, _nodes) = start_cluster(dir.path()).await;
    let kubeconfig = dir.path().join("kubeconfig");
    let h = HelmRun {
        helm: Helm::from_env(&kubeconfig),
        home: dir.path().join("helm-home"),
        kubectl: Kubectl::from_env("KUBECTL", &kubeconfig),
    };
    let ns = "helm-e2e";

    // Phase 1: `helm create`'s chart, rendered against the server
    // (`--dry-run=server`) and nothing stored.
    let charts = dir.path().join("charts");
    std::fs::create_dir_all(&charts).expect("mkdir");
    let web = charts.join("web");
    let web = web.to_str().expect("utf-8 path");
    let created = h.ok(NODES[0], &["create", web]);
    assert!(created.contains("Creating"), "{created}");
    h.kubectl.ok(NODES[0], &["create", "namespace", ns]);
    let dry = h.ok(
        NODES[1],
        &[
            "install",
            "web",
            web,
            "-n",
            ns,
            "--set",
            "replicaCount=0",
            "--dry-run=server",
        ],
    );
    assert!(
        dry.contains("STATUS: pending-install") && dry.contains("kind: Deployment"),
        "{dry}"
    );
    assert!(
        h.release_secrets(NODES[2], ns).is_empty(),
        "a dry run stores no release"
    );
    let nothing = h
        .kubectl
        .run(NODES[2], &["-n", ns, "get", "deployment", "web"]);
    assert!(failed(&nothing, "get after a dry run").contains("NotFound"));

    // Phase 2: install (helm 4 applies server-side), list, status, get
    // manifest, through different nodes.
    let installed = h.ok(
        NODES[0],
        &["install", "web", web, "-n", ns, "--set", "replicaCount=0"],
    );
    assert!(
        installed.contains("STATUS: deployed") && installed.contains("REVISION: 1"),
        "{installed}"
    );
    assert_eq!(
        h.jsonpath(NODES[1], ns, &["deployment", "web"], "{.spec.replicas}"),
        "0"
    );
    let managers = h.jsonpath(
        NODES[2],
        ns,
        &["deployment", "web", "--show-managed-fields"],
        "{.metadata.managedFields[*].manager}/{.metadata.managedFields[*].operation}",
    );
    assert_eq!(
        managers, "helm/Apply",
        "helm 4 installs by server-side apply"
    );
    let image = |ctx: &str| {
        h.jsonpath(
            ctx,
            ns,
            &["deployment", "web"],
            "{.spec.template.spec.containers[0].image}",
        )
    };
    let first_image = image(NODES[0]);
    assert!(first_image.starts_with("nginx:"), "{first_image}");
    let listed = h.json(NODES[1], &["list", "-n", ns]);
    assert_eq!(listed[0]["name"], "web", "{listed}");
    assert_eq!(listed[0]["status"], "deployed", "{listed}");
    assert_eq!(listed[0]["revision"], "1", "{listed}");
    let status = h.ok(NODES[2], &["status", "web", "-n", ns]);
    assert!(status.contains("STATUS: deployed"), "{status}");
    let manifest = h.ok(NODES[0], &["get", "manifest", "web", "-n", ns]);
    for want in [
        "kind: Deployment",
        "kind: Service",
        "kind: ServiceAccount",
        "name: web",
    ] {
        assert!(manifest.contains(want), "{want} not in:\n{manifest}");
    }

    // Phase 3: upgrade with changed values, history, rollback.
    let upgraded = h.ok(
        NODES[1],
        &[
            "upgrade",
            "web",
            web,
            "-n",
            ns,
            "--set",
            "replicaCount=0",
            "--set",
            "image.tag=1.99",
        ],
    );
    assert!(upgraded.contains("REVISION: 2"), "{upgraded}");
    assert_eq!(image(NODES[2]), "nginx:1.99");
    let history = h.json(NODES[2], &["history", "web", "-n", ns]);
    let states: Vec<(u64, &str)> = history
        .as_array()
        .expect("history is a list")
        .iter()
        .map(|r| {
            (
                r["revision"].as_u64().unwrap_or(0),
                r["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(states, [(1, "superseded"), (2, "deployed")], "{history}");
    let rolled = h.ok(NODES[0], &["rollback", "web", "1", "-n", ns]);
    assert!(rolled.contains("Rollback was a success"), "{rolled}");
    assert_eq!(image(NODES[1]), first_image);
    let history = h.json(NODES[1], &["history", "web", "-n", ns]);
    assert_eq!(history.as_array().map(Vec::len), Some(3), "{history}");
    assert_eq!(history[2]["status"], "deployed");
    assert_eq!(history[2]["description"], "Rollback to 1");

    // Phase 4: the release secrets, readable through kubectl.
    let mut secrets = h.release_secrets(NODES[2], ns);
    secrets.sort();
    assert_eq!(
        secrets,
        [
            "secret/sh.helm.release.v1.web.v1",
            "secret/sh.helm.release.v1.web.v2",
            "secret/sh.helm.release.v1.web.v3"
        ]
    );
    let secret = h.kubectl.json(
        NODES[0],
        &["-n", ns, "get", "secret", "sh.helm.release.v1.web.v3"],
    );
    assert_eq!(secret["type"], "helm.sh/release.v1");
    assert_eq!(secret["metadata"]["labels"]["status"], "deployed");
    assert!(secret["data"]["release"].is_string(), "{secret}");

    // Phase 5: uninstall, waiting for the objects to go.
    let gone = h.ok(
        NODES[1],
        &["uninstall", "web", "-n", ns, "--wait", "--timeout=60s"],
    );
    assert!(gone.contains(r#"release "web" uninstalled"#), "{gone}");
    let none = h
        .kubectl
        .run(NODES[2], &["-n", ns, "get", "deployment", "web"]);
    assert!(failed(&none, "get after uninstall").contains("NotFound"));
    assert!(h.release_secrets(NODES[0], ns).is_empty());
    assert_eq!(h.json(NODES[0], &["list", "-n", ns]), json!([]));

    // Phase 6: `--wait` on a chart helm sees ready with no pods running:
    // install (creating its namespace), upgrade and uninstall all wait.
    let settings = Chart::ready_without_pods().write(&charts);
    let settings = settings.to_str().expect("utf-8 path");
    let wait_ns = "helm-wait";
    let installed = h.ok(
        NODES[2],
        &[
            "install",
            "cfg",
            settings,
            "-n",
            wait_ns,
            "--create-namespace",
            "--wait",
            "--timeout=60s",
        ],
    );
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    assert_eq!(
        h.jsonpath(
            NODES[0],
            wait_ns,
            &["configmap", "cfg-settings"],
            "{.data.color}"
        ),
        "blue"
    );
    let upgraded = h.ok(
        NODES[0],
        &[
            "upgrade",
            "cfg",
            settings,
            "-n",
            wait_ns,
            "--set",
            "color=green",
            "--wait",
            "--timeout=60s",
        ],
    );
    assert!(upgraded.contains("REVISION: 2"), "{upgraded}");
    assert_eq!(
        h.jsonpath(
            NODES[1],
            wait_ns,
            &["configmap", "cfg-settings"],
            "{.data.color}"
        ),
        "green"
    );
    h.ok(
        NODES[1],
        &["uninstall", "cfg", "-n", wait_ns, "--wait", "--timeout=60s"],
    );
    let none = h
        .kubectl
        .run(NODES[2], &["-n", wait_ns, "get", "service", "cfg-svc"]);
    assert!(failed(&none, "get after uninstall").contains("NotFound"));

    // Phase 7: a chart that ships a CRD: the definition installed first,
    // then its object; upgraded, rolled back and uninstalled (helm keeps
    // the definitions of `crds/`).
    let gizmo = Chart::with_crd().write(&charts);
    let gizmo = gizmo.to_str().expect("utf-8 path");
    let crd_ns = "helm-crd";
    let installed = h.ok(
        NODES[0],
        &[
            "install",
            "gz",
            gizmo,
            "-n",
            crd_ns,
            "--create-namespace",
            "--wait",
            "--timeout=60s",
        ],
    );
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    let size = |ctx: &str| h.jsonpath(ctx, crd_ns, &["gizmos", "gz-gizmo"], "{.spec.size}");
    assert_eq!(size(NODES[1]), "1");
    let upgraded = h.ok(
        NODES[2],
        &["upgrade", "gz", gizmo, "-n", crd_ns, "--set", "size=5"],
    );
    assert!(upgraded.contains("REVISION: 2"), "{upgraded}");
    assert_eq!(size(NODES[0]), "5");
    let rolled = h.ok(NODES[1], &["rollback", "gz", "1", "-n", crd_ns]);
    assert!(rolled.contains("Rollback was a success"), "{rolled}");
    assert_eq!(size(NODES[2]), "1");
    h.ok(
        NODES[0],
        &["uninstall", "gz", "-n", crd_ns, "--wait", "--timeout=60s"],
    );
    let none = h
        .kubectl
        .run(NODES[1], &["-n", crd_ns, "get", "gizmos", "gz-gizmo"]);
    assert!(failed(&none, "get after uninstall").contains("NotFound"));
    h.kubectl
        .ok(NODES[2], &["get", "crd", "gizmos.charts.example.com"]);

    stop_cluster(launcher).await;
}

//! Unit tests of the built-in types' rules, through admission (the path
//! every create and update takes): each kind's defaults as a create reads
//! back, and each rule valid and invalid, on a create and an update,
//! with kube's field paths and words. Kinds kubestore does not serve yet
//! are tested with a type made from a served one (`synthetic`), as the
//! rules key on group and kind.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::kube::admission::{admit_create_object, admit_update, UpdateScope};
use crate::kube::error::KubeError;
use crate::kube::resources::{self, ResourceType};

fn map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn served(group: &str, plural: &str) -> &'static ResourceType {
    resources::find(group, "v1", plural).unwrap_or_else(|| panic!("{plural} served"))
}

/// A type of `group`/`kind`, served or not (the rest from deployments).
fn synthetic(group: &'static str, kind: &'static str, plural: &'static str) -> ResourceType {
    ResourceType {
        group,
        kind,
        plural,
        ..*served("apps", "deployments")
    }
}

fn create(rt: &ResourceType, body: Value) -> Result<Map<String, Value>, KubeError> {
    admit_create_object(rt, Some("default"), map(body)).map(|a| a.object)
}

fn created(rt: &ResourceType, body: Value) -> Map<String, Value> {
    create(rt, body).unwrap_or_else(|e| panic!("admitted: {e:?}"))
}

/// An update as a PUT reaches admission: in the URL's namespace.
fn update(
    rt: &ResourceType,
    old: &Map<String, Value>,
    new: Value,
) -> Result<Map<String, Value>, KubeError> {
    let mut new = map(new);
    crate::kube::object::metadata_mut(&mut new).insert("namespace".into(), json!("default"));
    admit_update(rt, UpdateScope::Object, old, &mut new).map(|()| new)
}

/// The causes of a `422`, as `field: message` lines.
fn invalid(result: Result<Map<String, Value>, KubeError>) -> Vec<String> {
    match result {
        Err(KubeError::Invalid { causes, .. }) => causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect(),
        other => panic!("expected 422, got {other:?}"),
    }
}

/// An object's JSON with `f` applied.
fn with(mut v: Value, f: impl FnOnce(&mut Value)) -> Value {
    f(&mut v);
    v
}

fn pod() -> Value {
    json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
}

fn deployment() -> Value {
    json!({
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}
        }
    })
}

fn service() -> Value {
    json!({"metadata": {"name": "s"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
}

// ---- pods -----------------------------------------------------------

#[test]
fn a_minimal_pod_reads_back_with_kubes_defaults() {
    let p = created(
        served("", "pods"),
        with(pod(), |p| {
            p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
        }),
    );
    let spec = &p["spec"];
    assert_eq!(spec["restartPolicy"], "Always");
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["schedulerName"], "default-scheduler");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["securityContext"], json!({}));
    assert_eq!(spec["enableServiceLinks"], true);
    let c = &spec["containers"][0];
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["imagePullPolicy"], "Always", "untagged: latest");
    assert_eq!(c["resources"], json!({}));
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(
        p["status"],
        json!({"phase": "Pending", "qosClass": "BestEffort"})
    );

    let tagged = created(
        served("", "pods"),
        with(pod(), |p| {
            p["spec"]["containers"][0]["image"] = json!("nginx:1.25");
            p["spec"]["containers"][0]["resources"] =
                json!({"limits": {"cpu": "1", "memory": "1Gi"}});
            p["spec"]["restartPolicy"] = json!("Never");
            p["status"] = json!({"phase": "Running"});
        }),
    );
    let c = &tagged["spec"]["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(
        c["resources"]["requests"],
        json!({"cpu": "1", "memory": "1Gi"}),
        "requests default to limits"
    );
    assert_eq!(
        tagged["spec"]["restartPolicy"], "Never",
        "a value the client set stays"
    );
    assert_eq!(
        tagged["status"],
        json!({"phase": "Pending", "qosClass": "Guaranteed"}),
        "a create's status is the server's"
    );
}

#[test]
fn a_pod_needs_named_containers_with_images() {
    let pods = served("", "pods");
    assert_eq!(
        invalid(create(pods, json!({"metadata": {"name": "p"}, "spec": {}}))),
        ["spec.containers: Required value"]
    );
    assert_eq!(
        invalid(create(pods, json!({"metadata": {"name": "p"}}))),
        ["spec.containers: Required value"],
        "no spec at all is a spec without containers"
    );
    assert_eq!(
        invalid(create(
            pods,
            with(
                pod(),
                |p| p["spec"]["containers"] =
                    json!([{"name": "c"}, {"image": "x"}, {"name": "c", "image": "y"}])
            )
        )),
        [
            "spec.containers[0].image: Required value",
            "spec.containers[1].name: Required value",
            "spec.containers[2].name: Duplicate value: \"c\"",
        ]
    );
    let bad_name = invalid(create(
        pods,
        with(pod(), |p| {
            p["spec"]["containers"][0]["name"] = json!("Web_1")
        }),
    ));
    assert!(
        bad_name[0].starts_with(
            "spec.containers[0].name: Invalid value: \"Web_1\": a lowercase RFC 1123 label"
        ),
        "{bad_name:?}"
    );
    let init_dup = invalid(create(
        pods,
        with(pod(), |p| {
            p["spec"]["initContainers"] = json!([{"name": "c", "image": "busybox"}])
        }),
    ));
    assert_eq!(
        init_dup,
        ["spec.initContainers[0].name: Duplicate value: \"c\""]
    );
}

#[test]
fn a_pods_enums_are_kubes() {
    let pods = served("", "pods");
    let causes = invalid(create(
        pods,
        with(pod(), |p| {
            p["spec"]["restartPolicy"] = json!("Sometimes");
            p["spec"]["dnsPolicy"] = json!("Google");
            p["spec"]["containers"][0]["imagePullPolicy"] = json!("Maybe");
            p["spec"]["containers"][0]["terminationMessagePolicy"] = json!("Dump");
            p["spec"]["containers"][0]["ports"] =
                json!([{"containerPort": 70000, "protocol": "ICMP", "name": "HTTP"}]);
        }),
    ));
    assert_eq!(
        causes,
        [
            "spec.containers[0].terminationMessagePolicy: Unsupported value: \"Dump\": supported values: \"File\", \"FallbackToLogsOnError\"",
            "spec.containers[0].ports[0].name: Invalid value: \"HTTP\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            "spec.containers[0].ports[0].name: Invalid value: \"HTTP\": must contain at least one letter (a-z)",
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.containers[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.containers[0].imagePullPolicy: Unsupported value: \"Maybe\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            "spec.dnsPolicy: Unsupported value: \"Google\": supported values: \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\"",
        ]
    );
    let mounts = invalid(create(
        pods,
        with(pod(), |p| {
            p["spec"]["volumes"] = json!([{"name": "data"}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/d"}, {"name": "cache", "mountPath": "/c"}]);
        }),
    ));
    assert_eq!(
        mounts,
        ["spec.containers[0].volumeMounts[1].name: Not found: \"cache\""]
    );
}

#[test]
fn a_pod_update_changes_only_what_kube_lets_it() {
    let pods = served("", "pods");
    let old = created(
        pods,
        with(pod(), |p| {
            p["spec"]["tolerations"] = json!([{"key": "a", "operator": "Exists"}])
        }),
    );
    // An image, added tolerations, labels: fine (as a patch of the
    // stored pod sends them; defaults need not be sent again).
    let ok = update(
        pods,
        &old,
        with(Value::Object(old.clone()), |p| {
            p["metadata"]["labels"] = json!({"app": "web"});
            p["spec"]["containers"][0]["image"] = json!("nginx:1.26");
            p["spec"]["tolerations"] =
                json!([{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]);
        }),
    )
    .expect("allowed");
    assert_eq!(ok["spec"]["containers"][0]["image"], "nginx:1.26");
    assert_eq!(ok["metadata"]["generation"], 2, "the spec changed");
    let resent = update(
        pods,
        &old,
        with(pod(), |p| {
            p["spec"]["tolerations"] =
                json!([{"key": "a", "operator": "Exists", "tolerationSeconds": 5}]);
        }),
    )
    .expect("the same pod sent again without its defaults");
    assert_eq!(
        resent["spec"]["containers"][0]["terminationMessagePath"],
        "/dev/termination-log"
    );
    // As in kube: an image given a tag without a pull policy defaults the
    // policy anew, which is a change the update may not make.
    let retagged = invalid(update(
        pods,
        &old,
        with(pod(), |p| {
            p["spec"]["tolerations"] = json!([{"key": "a", "operator": "Exists"}]);
            p["spec"]["containers"][0]["image"] = json!("nginx:1.26");
        }),
    ));
    assert!(retagged[0].ends_with("- spec.containers[0].imagePullPolicy: \"Always\"\n+ spec.containers[0].imagePullPolicy: \"IfNotPresent\""), "{retagged:?}");

    let command = invalid(update(
        pods,
        &old,
        with(pod(), |p| {
            p["spec"]["tolerations"] = json!([{"key": "a", "operator": "Exists"}]);
            p["spec"]["containers"][0]["command"] = json!(["sleep"]);
        }),
    ));
    assert_eq!(command.len(), 1, "{command:?}");
    assert!(command[0].starts_with("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"), "{command:?}");
    assert!(
        command[0].contains("+ spec.containers[0].command: [\"sleep\"]"),
        "{command:?}"
    );

    let added = invalid(update(
        pods,
        &old,
        with(pod(), |p| {
            p["spec"]["containers"] =
                json!([{"name": "c", "image": "nginx"}, {"name": "d", "image": "nginx"}]);
        }),
    ));
    assert_eq!(
        added,
        ["spec.containers: Forbidden: pod updates may not add or remove containers"]
    );

    let removed_toleration = invalid(update(pods, &old, pod()));
    assert_eq!(removed_toleration, ["spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"]);

    let with_deadline = created(
        pods,
        with(pod(), |p| p["spec"]["activeDeadlineSeconds"] = json!(60)),
    );
    let longer = invalid(update(
        pods,
        &with_deadline,
        with(pod(), |p| p["spec"]["activeDeadlineSeconds"] = json!(120)),
    ));
    assert_eq!(longer, ["spec.activeDeadlineSeconds: Invalid value: 120: must be less than or equal to previous value"]);
    assert!(update(
        pods,
        &with_deadline,
        with(pod(), |p| p["spec"]["activeDeadlineSeconds"] = json!(30))
    )
    .is_ok());
}

// ---- services --------------------------------------------------------

#[test]
fn a_minimal_service_reads_back_with_kubes_defaults_and_no_cluster_ip() {
    let s = created(served("", "services"), service());
    let spec = &s["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(
        spec["ports"][0],
        json!({"port": 80, "protocol": "TCP", "targetPort": 80})
    );
    assert_eq!(spec["internalTrafficPolicy"], "Cluster");
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
    assert!(
        spec.get("clusterIP").is_none(),
        "kubestore allocates no cluster IP"
    );
    assert_eq!(s["status"], json!({"loadBalancer": {}}));

    let lb = created(
        served("", "services"),
        with(service(), |s| {
            s["spec"]["type"] = json!("LoadBalancer");
            s["spec"]["sessionAffinity"] = json!("ClientIP");
            s["spec"]["clusterIP"] = json!("10.0.0.10");
        }),
    );
    assert_eq!(lb["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
    assert_eq!(
        lb["spec"]["sessionAffinityConfig"],
        json!({"clientIP": {"timeoutSeconds": 10800}})
    );
    assert_eq!(lb["spec"]["clusterIPs"], json!(["10.0.0.10"]));
}

#[test]
fn a_service_needs_ports_unless_external_or_headless() {
    let svcs = served("", "services");
    let no_ports = json!({"metadata": {"name": "s"}, "spec": {}});
    assert_eq!(
        invalid(create(svcs, no_ports.clone())),
        ["spec.ports: Required value"]
    );
    assert!(create(
        svcs,
        with(no_ports.clone(), |s| s["spec"]["clusterIP"] = json!("None"))
    )
    .is_ok());
    let external = create(
        svcs,
        with(no_ports.clone(), |s| {
            s["spec"]["type"] = json!("ExternalName");
            s["spec"]["externalName"] = json!("example.com");
        }),
    )
    .expect("an ExternalName service needs no ports");
    assert!(external["spec"].get("ipFamilyPolicy").is_none());
    let causes = invalid(create(
        svcs,
        with(service(), |s| {
            s["spec"]["type"] = json!("Balanced");
            s["spec"]["sessionAffinity"] = json!("Sticky");
            s["spec"]["ports"] = json!([{"port": 80}, {"port": 80, "name": "b"}]);
        }),
    ));
    assert_eq!(
        causes,
        [
            "spec.ports[0].name: Required value",
            "spec.sessionAffinity: Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"",
            "spec.type: Unsupported value: \"Balanced\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
            "spec.ports[1]: Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\", AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, NodePort:0}",
        ]
    );
    assert_eq!(
        invalid(create(svcs, with(service(), |s| s["spec"]["clusterIP"] = json!("10.0.0.300")))),
        ["spec.clusterIPs[0]: Invalid value: \"10.0.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]
    );
}

#[test]
fn a_services_cluster_ip_does_not_change_once_set() {
    let svcs = served("", "services");
    let old = created(
        svcs,
        with(service(), |s| s["spec"]["clusterIP"] = json!("10.0.0.10")),
    );
    // Left out: the stored one.
    let kept = update(svcs, &old, service()).expect("a PUT without clusterIP keeps it");
    assert_eq!(kept["spec"]["clusterIP"], "10.0.0.10");
    assert_eq!(kept["spec"]["clusterIPs"], json!(["10.0.0.10"]));
    let changed = invalid(update(
        svcs,
        &old,
        with(service(), |s| s["spec"]["clusterIP"] = json!("10.0.0.11")),
    ));
    assert_eq!(
        changed,
        ["spec.clusterIPs[0]: Invalid value: \"10.0.0.11\": may not change once set"]
    );
    // None set before: it may be set.
    let unset = created(svcs, service());
    assert!(update(
        svcs,
        &unset,
        with(service(), |s| s["spec"]["clusterIP"] = json!("10.0.0.12"))
    )
    .is_ok());
}

// ---- deployments and the other workloads ------------------------------

#[test]
fn a_minimal_deployment_reads_back_with_kubes_defaults() {
    let d = created(served("apps", "deployments"), deployment());
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Always");
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "IfNotPresent");
    assert!(
        pod.get("enableServiceLinks").is_none(),
        "a pod's own default, not a template's"
    );
    assert_eq!(d["status"], json!({}));
    assert_eq!(d["metadata"]["generation"], 1);
}

#[test]
fn a_deployments_selector_must_match_its_template() {
    let deps = served("apps", "deployments");
    let mismatch = invalid(create(
        deps,
        with(deployment(), |d| {
            d["spec"]["template"]["metadata"]["labels"] = json!({"app": "other", "tier": "fe"})
        }),
    ));
    assert_eq!(
        mismatch,
        ["spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"other\", \"tier\":\"fe\"}: `selector` does not match template `labels`"]
    );
    let no_selector = invalid(create(
        deps,
        with(deployment(), |d| {
            d["spec"].as_object_mut().map(|s| s.remove("selector"));
        }),
    ));
    assert_eq!(
        no_selector,
        [
            "spec.selector: Required value",
            "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
        ]
    );
    let empty_template = invalid(create(
        deps,
        with(deployment(), |d| {
            d["spec"]["template"]["spec"] =
                json!({"restartPolicy": "Never", "containers": [{"name": "c"}]});
        }),
    ));
    assert_eq!(
        empty_template,
        [
            "spec.template.spec.containers[0].image: Required value",
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
        ]
    );
    let bad_strategy = invalid(create(
        deps,
        with(deployment(), |d| {
            d["spec"]["strategy"] = json!({"type": "Recreate", "rollingUpdate": {"maxSurge": 1}});
        }),
    ));
    assert_eq!(bad_strategy, ["spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"]);
}

#[test]
fn a_deployments_selector_is_immutable() {
    let deps = served("apps", "deployments");
    let old = created(deps, deployment());
    let scaled = update(
        deps,
        &old,
        with(deployment(), |d| d["spec"]["replicas"] = json!(3)),
    )
    .expect("scaled");
    assert_eq!(scaled["spec"]["replicas"], 3);
    let moved = invalid(update(
        deps,
        &old,
        with(deployment(), |d| {
            d["spec"]["selector"] = json!({"matchLabels": {"app": "api"}});
            d["spec"]["template"]["metadata"]["labels"] = json!({"app": "api"});
        }),
    ));
    assert_eq!(
        moved,
        ["spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"api\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"]
    );
}

#[test]
fn replica_sets_stateful_sets_and_daemon_sets() {
    let rs = synthetic("apps", "ReplicaSet", "replicasets");
    let r = created(&rs, deployment());
    assert_eq!(r["spec"]["replicas"], 1);
    assert_eq!(r["status"], json!({"replicas": 0}));
    assert!(invalid(update(&rs, &r, with(deployment(), |d| d["spec"]["selector"] = json!({"matchLabels": {"app": "web", "x": "y"}}))))
        .iter()
        .any(|c| c.starts_with("spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"web\", \"x\":\"y\"}")));

    let sts = synthetic("apps", "StatefulSet", "statefulsets");
    let s = created(&sts, deployment());
    assert_eq!(s["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        s["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(
        s["spec"]["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    assert_eq!(s["spec"]["revisionHistoryLimit"], 10);
    assert!(update(
        &sts,
        &s,
        with(deployment(), |d| d["spec"]["replicas"] = json!(5))
    )
    .is_ok());
    assert_eq!(
        invalid(update(&sts, &s, with(deployment(), |d| d["spec"]["serviceName"] = json!("other")))),
        ["spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"]
    );

    let ds = synthetic("apps", "DaemonSet", "daemonsets");
    let d = created(&ds, deployment());
    assert_eq!(
        d["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    assert!(d["spec"].get("replicas").is_none());
    assert_eq!(
        invalid(create(&ds, with(deployment(), |d| d["spec"]["selector"] = json!({"matchLabels": {"app": "x"}})))),
        ["spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`"]
    );
}

fn job() -> Value {
    json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]
    }}}})
}

#[test]
fn a_job_gets_its_selector_and_restarts_on_failure_or_never() {
    let jobs = synthetic("batch", "Job", "jobs");
    let j = created(&jobs, job());
    let uid = j["metadata"]["uid"].as_str().expect("a uid").to_string();
    let spec = &j["spec"];
    assert_eq!(
        spec["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    );
    let labels = &spec["template"]["metadata"]["labels"];
    assert_eq!(labels["job-name"], "j");
    assert_eq!(labels["batch.kubernetes.io/job-name"], "j");
    assert_eq!(labels["controller-uid"], uid.as_str());
    assert_eq!(spec["completions"], 1);
    assert_eq!(spec["parallelism"], 1);
    assert_eq!(spec["backoffLimit"], 6);
    assert_eq!(spec["completionMode"], "NonIndexed");
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["manualSelector"], false);
    assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");

    let always = invalid(create(
        &jobs,
        with(job(), |j| {
            j["spec"]["template"]["spec"]
                .as_object_mut()
                .map(|s| s.remove("restartPolicy"));
        }),
    ));
    assert_eq!(always, ["spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""]);
    let unsupported = invalid(create(
        &jobs,
        with(job(), |j| {
            j["spec"]["template"]["spec"]["restartPolicy"] = json!("Sometimes")
        }),
    ));
    assert_eq!(unsupported[0], "spec.template.spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"");
    assert_eq!(unsupported[1], "spec.template.spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"OnFailure\", \"Never\"");

    // The template is immutable (a running job's); its selector too.
    let image = invalid(update(
        &jobs,
        &j,
        with(Value::Object(j.clone()), |n| {
            n["spec"]["template"]["spec"]["containers"][0]["image"] = json!("alpine")
        }),
    ));
    assert_eq!(image.len(), 1, "{image:?}");
    assert!(
        image[0].starts_with("spec.template: Invalid value: {"),
        "{image:?}"
    );
    assert!(image[0].ends_with(": field is immutable"), "{image:?}");
    assert!(update(
        &jobs,
        &j,
        with(Value::Object(j.clone()), |n| n["spec"]["parallelism"] =
            json!(3))
    )
    .is_ok());
}

#[test]
fn a_cron_job_has_a_schedule_and_a_job_template() {
    let cron = synthetic("batch", "CronJob", "cronjobs");
    let body = json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": job()["spec"].clone()}}});
    let c = created(&cron, body.clone());
    assert_eq!(c["spec"]["concurrencyPolicy"], "Allow");
    assert_eq!(c["spec"]["suspend"], false);
    assert_eq!(c["spec"]["successfulJobsHistoryLimit"], 3);
    assert_eq!(c["spec"]["failedJobsHistoryLimit"], 1);
    assert_eq!(
        c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"],
        "ClusterFirst"
    );
    assert!(
        c["spec"]["jobTemplate"]["spec"]
            .get("completions")
            .is_none(),
        "a job template is not a job"
    );
    assert_eq!(
        invalid(create(&cron, with(body, |b| {
            b["spec"]["schedule"] = json!("every minute");
            b["spec"]["concurrencyPolicy"] = json!("Sometimes");
        }))),
        [
            "spec.schedule: Invalid value: \"every minute\": expected exactly 5 fields, found 2: [every minute]",
            "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\"",
        ]
    );
}

// ---- config maps and secrets ------------------------------------------

#[test]
fn config_maps_have_config_keys_and_can_be_immutable() {
    let cms = served("", "configmaps");
    assert_eq!(
        invalid(create(cms, json!({"metadata": {"name": "c"}, "data": {"a/b": "x", "ok.key": "y"}}))),
        ["data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"]
    );
    let frozen = created(
        cms,
        json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "immutable": true}),
    );
    assert!(update(cms, &frozen, json!({"metadata": {"name": "c", "labels": {"x": "y"}}, "data": {"a": "1"}, "immutable": true})).is_ok());
    assert_eq!(
        invalid(update(
            cms,
            &frozen,
            json!({"metadata": {"name": "c"}, "data": {"a": "2"}})
        )),
        [
            "immutable: Forbidden: field is immutable when `immutable` is set",
            "data: Forbidden: field is immutable when `immutable` is set",
        ]
    );
}

#[test]
fn secrets_default_to_opaque_and_merge_their_string_data() {
    let secrets = served("", "secrets");
    let s = created(
        secrets,
        json!({"metadata": {"name": "s"}, "data": {"a": "eA=="}, "stringData": {"b": "hello", "a": "y"}}),
    );
    assert_eq!(s["type"], "Opaque");
    assert_eq!(s["data"], json!({"a": "eQ==", "b": "aGVsbG8="}));
    assert!(s.get("stringData").is_none());
    assert_eq!(
        invalid(update(
            secrets,
            &s,
            json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls", "data": {}})
        )),
        [
            "type: Invalid value: \"kubernetes.io/tls\": field is immutable",
            "data[tls.crt]: Required value",
            "data[tls.key]: Required value",
        ]
    );
}

// ---- metadata on every type -------------------------------------------

#[test]
fn bad_labels_are_refused_on_create_and_update_of_any_type() {
    let cms = served("", "configmaps");
    let causes = invalid(create(
        cms,
        json!({"metadata": {"name": "c", "labels": {"app": "has space"}}}),
    ));
    assert_eq!(causes.len(), 1);
    assert!(
        causes[0].starts_with(
            "metadata.labels: Invalid value: \"has space\": a valid label must be an empty string"
        ),
        "{causes:?}"
    );
    let old = created(cms, json!({"metadata": {"name": "c"}}));
    let causes = invalid(update(
        cms,
        &old,
        json!({"metadata": {"name": "c", "annotations": {"a/b/c": "x"}}}),
    ));
    assert!(
        causes[0].starts_with(
            "metadata.annotations: Invalid value: \"a/b/c\": a qualified name must consist of"
        ),
        "{causes:?}"
    );
}

#[test]
fn the_other_types_keep_their_shapes() {
    // Namespaces, leases, events: metadata rules only, no defaults.
    let leases = served("coordination.k8s.io", "leases");
    let l = created(
        leases,
        json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "x"}}),
    );
    assert_eq!(l["spec"], json!({"holderIdentity": "x"}));
    let endpoints = served("", "endpoints");
    let e = created(
        endpoints,
        json!({"metadata": {"name": "e"}, "subsets": [{"ports": [{"port": 80}]}]}),
    );
    assert_eq!(e["subsets"][0]["ports"][0]["protocol"], "TCP");
}

// ---- properties ---------------------------------------------------------

/// Values a field may be given: right and wrong types, valid and invalid
/// strings, the enum values kube knows.
fn field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!("")),
        Just(json!("Always")),
        Just(json!("None")),
        Just(json!("TCP")),
        Just(json!("25%")),
        Just(json!("100m")),
        Just(json!("nginx:latest")),
        Just(json!({})),
        Just(json!([])),
        Just(json!([{}])),
        Just(json!({"app": "web"})),
        Just(json!({"matchLabels": {"app": "web"}})),
        Just(json!([{"name": "c", "image": "x"}])),
        (-3i64..70000).prop_map(Value::from),
        any::<bool>().prop_map(Value::Bool),
        "[a-zA-Z0-9 ./_-]{0,12}".prop_map(Value::from),
    ]
}

/// A path into the object: fields the rules read.
fn field_path() -> impl Strategy<Value = Vec<&'static str>> {
    proptest::sample::select(vec![
        vec!["spec"],
        vec!["spec", "containers"],
        vec!["spec", "replicas"],
        vec!["spec", "selector"],
        vec!["spec", "selector", "matchLabels"],
        vec!["spec", "selector", "matchExpressions"],
        vec!["spec", "strategy"],
        vec!["spec", "strategy", "type"],
        vec!["spec", "strategy", "rollingUpdate", "maxSurge"],
        vec!["spec", "template"],
        vec!["spec", "template", "metadata", "labels"],
        vec!["spec", "template", "spec", "containers"],
        vec!["spec", "template", "spec", "restartPolicy"],
        vec!["spec", "ports"],
        vec!["spec", "type"],
        vec!["spec", "clusterIP"],
        vec!["spec", "clusterIPs"],
        vec!["spec", "sessionAffinity"],
        vec!["spec", "restartPolicy"],
        vec!["spec", "tolerations"],
        vec!["spec", "volumes"],
        vec!["spec", "schedule"],
        vec!["spec", "jobTemplate"],
        vec!["metadata", "labels"],
        vec!["metadata", "annotations"],
        vec!["metadata", "ownerReferences"],
        vec!["metadata", "finalizers"],
        vec!["metadata", "uid"],
        vec!["data"],
        vec!["stringData"],
        vec!["type"],
        vec!["immutable"],
        vec!["status"],
    ])
}

fn set_path(v: &mut Value, path: &[&str], value: Value) {
    let mut at = v;
    for key in &path[..path.len() - 1] {
        if !at.get(*key).is_some_and(Value::is_object) {
            at[*key] = json!({});
        }
        at = &mut at[*key];
    }
    if let Some(last) = path.last() {
        at[*last] = value;
    }
}

fn rule_types() -> Vec<ResourceType> {
    vec![
        *served("", "pods"),
        *served("", "services"),
        *served("", "configmaps"),
        *served("", "secrets"),
        *served("apps", "deployments"),
        synthetic("apps", "ReplicaSet", "replicasets"),
        synthetic("apps", "StatefulSet", "statefulsets"),
        synthetic("apps", "DaemonSet", "daemonsets"),
        synthetic("batch", "Job", "jobs"),
        synthetic("batch", "CronJob", "cronjobs"),
    ]
}

fn is_clients_mistake(e: &KubeError) -> bool {
    matches!(e, KubeError::BadRequest(_) | KubeError::Invalid { .. })
}

proptest! {
    #![proptest_config(crate::fuzz::config())]

    /// Whatever a client sends for a built-in type (a valid object with
    /// fields changed to anything), the create is admitted or refused as
    /// the client's mistake, never a panic; an admitted object passes its
    /// own update unchanged (its defaults are stable and valid).
    #[test]
    fn any_create_body_is_admitted_or_refused_and_admitted_objects_stay_valid(
        which in 0usize..10,
        base in prop_oneof![Just(pod()), Just(deployment()), Just(service()), Just(job())],
        edits in proptest::collection::vec((field_path(), field_value()), 0..4),
    ) {
        let rt = rule_types()[which];
        let mut body = base;
        for (path, value) in edits {
            set_path(&mut body, &path, value);
        }
        let Value::Object(obj) = body else { unreachable!("bodies are objects") };
        match admit_create_object(&rt, Some("default"), obj) {
            Ok(admitted) => {
                let stored = admitted.object;
                let mut again = stored.clone();
                let same = admit_update(&rt, UpdateScope::Object, &stored, &mut again);
                prop_assert!(same.is_ok(), "{}: {:?} of {}", rt.kind, same, Value::Object(stored.clone()));
                prop_assert_eq!(&again.get("spec"), &stored.get("spec"));
            }
            Err(e) => prop_assert!(is_clients_mistake(&e), "{e:?}"),
        }
    }

    /// Any update of a valid stored object is admitted or refused as the
    /// client's mistake.
    #[test]
    fn any_update_of_a_valid_object_is_admitted_or_refused(
        which in 0usize..10,
        edits in proptest::collection::vec((field_path(), field_value()), 0..4),
    ) {
        let rt = rule_types()[which];
        let base = match rt.kind {
            "Pod" => pod(),
            "Service" => service(),
            "Job" => job(),
            "CronJob" => json!({"metadata": {"name": "c"}, "spec": {"schedule": "@hourly", "jobTemplate": {"spec": job()["spec"].clone()}}}),
            "ConfigMap" | "Secret" => json!({"metadata": {"name": "c"}}),
            _ => deployment(),
        };
        let old = created(&rt, base.clone());
        let mut new = Value::Object(old.clone());
        for (path, value) in edits {
            set_path(&mut new, &path, value);
        }
        let Value::Object(mut new) = new else { unreachable!("objects") };
        if let Err(e) = admit_update(&rt, UpdateScope::Object, &old, &mut new) {
            prop_assert!(is_clients_mistake(&e), "{e:?}");
        }
    }
}

/// An update compares with the stored object as kube decodes it: with
/// its type's defaults. A type without defaults compares with the stored
/// object itself, uncopied.
#[test]
fn the_stored_object_is_defaulted_only_where_its_type_has_defaults() {
    use std::borrow::Cow;
    let stored = map(json!({"metadata": {"name": "a"}, "data": {"k": "v"}}));
    let config_maps = served("", "configmaps");
    assert!(matches!(
        super::with_defaults(config_maps, &stored),
        Cow::Borrowed(s) if std::ptr::eq(s, &stored)
    ));
    let namespaces = served("", "namespaces");
    assert!(matches!(
        super::with_defaults(namespaces, &stored),
        Cow::Borrowed(_)
    ));
    let secrets = served("", "secrets");
    let defaulted = super::with_defaults(secrets, &stored);
    assert_eq!(defaulted.get("type"), Some(&json!("Opaque")));
    assert_eq!(stored.get("type"), None, "the stored object is left alone");
}

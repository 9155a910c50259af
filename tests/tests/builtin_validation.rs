//! The built-in types' defaults and validation over REST on a 3-node
//! in-process cluster: minimal objects read back (through another node)
//! with the fields a kube-apiserver fills in, and the writes kube refuses
//! get kube's `422`s (and a PUT naming another uid its `409`), with
//! kube's field paths and words, on POST, PUT, PATCH and server-side
//! apply alike.

use kubestore_tests::{KubeClient, TestCluster};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const PODS: &str = "/api/v1/namespaces/default/pods";
const SERVICES: &str = "/api/v1/namespaces/default/services";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn cluster() -> TestCluster {
    TestCluster::new(3).await.expect("cluster")
}

async fn merge_patch(k: &KubeClient, path: &str, patch: &Value) -> kubestore_tests::kube::Reply {
    k.request(
        Method::PATCH,
        path,
        Some((
            patch.to_string().into_bytes(),
            "application/merge-patch+json",
        )),
    )
    .await
    .expect("patch")
}

/// A `422` with kube's reason, kind and exactly these `field: message`
/// causes; the message joins them as kube does.
fn assert_invalid(r: &kubestore_tests::kube::Reply, kind: &str, name: &str, causes: &[&str]) {
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.body["reason"], "Invalid", "{}", r.text);
    let got: Vec<String> = r.body["details"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(got, causes, "{}", r.text);
    let joined = if causes.len() == 1 {
        causes[0].to_string()
    } else {
        format!("[{}]", causes.join(", "))
    };
    assert_eq!(
        r.body["message"],
        format!("{kind} \"{name}\" is invalid: {joined}"),
        "{}",
        r.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minimal_objects_read_back_with_kubes_defaults() {
    let c = cluster().await;
    let (n1, n2) = (c.kube(1), c.kube(2));

    // Phase 1: a pod with a name, one container and its image.
    let pod = json!({"metadata": {"name": "web"},
                     "spec": {"containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 80}]}]}});
    let created = n1.post(PODS, &pod).await.expect("pod");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let got = n2.get(&format!("{PODS}/web")).await.expect("get");
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    let spec = &got.body["spec"];
    assert_eq!(spec["restartPolicy"], "Always");
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["schedulerName"], "default-scheduler");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["securityContext"], json!({}));
    assert_eq!(spec["enableServiceLinks"], true);
    let container = &spec["containers"][0];
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(container["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(container["terminationMessagePolicy"], "File");
    assert_eq!(container["resources"], json!({}));
    assert_eq!(container["ports"][0]["protocol"], "TCP");
    assert_eq!(got.body["status"]["phase"], "Pending");
    assert_eq!(got.body["status"]["qosClass"], "BestEffort");

    // Phase 2: a deployment with a selector and a template.
    let dep = json!({"metadata": {"name": "web"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}}}});
    let created = n1.post(DEPLOYMENTS, &dep).await.expect("deployment");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let got = n2.get(&format!("{DEPLOYMENTS}/web")).await.expect("get");
    let spec = &got.body["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
    assert_eq!(
        spec["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(got.body["metadata"]["generation"], 1);

    // Phase 3: a service with a selector and a port; no cluster IP is
    // allocated (kubestore has no allocator).
    let svc = json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
    let created = n1.post(SERVICES, &svc).await.expect("service");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let got = n2.get(&format!("{SERVICES}/web")).await.expect("get");
    let spec = &got.body["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(
        spec["ports"][0],
        json!({"port": 80, "protocol": "TCP", "targetPort": 80})
    );
    assert_eq!(spec["internalTrafficPolicy"], "Cluster");
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    assert!(spec.get("clusterIP").is_none(), "{}", got.text);

    // Phase 4: a secret is Opaque, its stringData is data.
    let secret = json!({"metadata": {"name": "s"}, "stringData": {"user": "admin"}});
    let created = n1
        .post("/api/v1/namespaces/default/secrets", &secret)
        .await
        .expect("secret");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["type"], "Opaque");
    assert_eq!(created.body["data"], json!({"user": "YWRtaW4="}));
    assert!(created.body.get("stringData").is_none());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_writes_get_kubes_422s() {
    let c = cluster().await;
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));

    // Phase 1: a pod without containers, and one whose container has no
    // image: refused on every node, nothing stored.
    let r = n1
        .post(PODS, &json!({"metadata": {"name": "empty"}, "spec": {}}))
        .await
        .expect("post");
    assert_invalid(&r, "Pod", "empty", &["spec.containers: Required value"]);
    let r = n2
        .post(
            PODS,
            &json!({"metadata": {"name": "imageless"}, "spec": {"containers": [{"name": "c"}]}}),
        )
        .await
        .expect("post");
    assert_invalid(
        &r,
        "Pod",
        "imageless",
        &["spec.containers[0].image: Required value"],
    );
    assert_eq!(
        n3.get(&format!("{PODS}/imageless"))
            .await
            .expect("get")
            .status,
        StatusCode::NOT_FOUND
    );
    let r = n3
        .post(
            PODS,
            &json!({"metadata": {"name": "odd"}, "spec": {"restartPolicy": "Sometimes",
                     "containers": [{"name": "c", "image": "i"}]}}),
        )
        .await
        .expect("post");
    assert_invalid(
        &r,
        "Pod",
        "odd",
        &["spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""],
    );
    // A field of the wrong type is kube's decoding error.
    let r = n1
        .post(
            PODS,
            &json!({"metadata": {"name": "typed"}, "spec": {"containers": "nginx"}}),
        )
        .await
        .expect("post");
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(
        r.body["message"],
        "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type []v1.Container"
    );

    // Phase 2: a bad label, on a create and on an update.
    let r = n2
        .post(
            CMS,
            &json!({"metadata": {"name": "labelled", "labels": {"app": "not ok"}}}),
        )
        .await
        .expect("post");
    assert_invalid(
        &r,
        "ConfigMap",
        "labelled",
        &["metadata.labels: Invalid value: \"not ok\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"],
    );
    let cm = n1
        .create_configmap("default", "plain", "v")
        .await
        .expect("create");
    assert_eq!(cm.status, StatusCode::CREATED, "{}", cm.text);
    let r = merge_patch(
        &n3,
        &format!("{CMS}/plain"),
        &json!({"metadata": {"labels": {"-bad": "x"}}}),
    )
    .await;
    assert_invalid(
        &r,
        "ConfigMap",
        "plain",
        &["metadata.labels: Invalid value: \"-bad\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"],
    );

    // Phase 3: a changed uid: a patch meets the 422, a PUT's uid is a
    // precondition (kube's 409); creationTimestamp is silently kept.
    let uid = cm.body["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    let forged = "00000000-0000-0000-0000-000000000000";
    let r = merge_patch(
        &n1,
        &format!("{CMS}/plain"),
        &json!({"metadata": {"uid": forged}}),
    )
    .await;
    assert_invalid(
        &r,
        "ConfigMap",
        "plain",
        &[&format!(
            "metadata.uid: Invalid value: \"{forged}\": field is immutable"
        )],
    );
    let mut put = cm.body.clone();
    put["metadata"]["uid"] = json!(forged);
    let r = n2.put(&format!("{CMS}/plain"), &put).await.expect("put");
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(
        r.body["message"],
        format!("Operation cannot be fulfilled on configmaps \"plain\": Precondition failed: UID in precondition: {forged}, UID in object meta: {uid}")
    );
    let r = merge_patch(
        &n2,
        &format!("{CMS}/plain"),
        &json!({"metadata": {"creationTimestamp": "2001-01-01T00:00:00Z"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["metadata"]["creationTimestamp"],
        cm.body["metadata"]["creationTimestamp"]
    );

    // Phase 4: a deployment whose selector does not match its template,
    // then one whose selector a PUT and an apply try to change.
    let dep = |app: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}},
                         "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})
    };
    let mut mismatched = dep("web");
    mismatched["spec"]["template"]["metadata"]["labels"] = json!({"app": "api"});
    let r = n1.post(DEPLOYMENTS, &mismatched).await.expect("post");
    assert_invalid(
        &r,
        "Deployment.apps",
        "web",
        &["spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"api\"}: `selector` does not match template `labels`"],
    );
    assert_eq!(r.body["details"]["group"], "apps");
    let created = n1.post(DEPLOYMENTS, &dep("web")).await.expect("post");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let immutable = "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"api\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable";
    let r = n2
        .put(&format!("{DEPLOYMENTS}/web"), &dep("api"))
        .await
        .expect("put");
    assert_invalid(&r, "Deployment.apps", "web", &[immutable]);
    let r = n3
        .request(
            Method::PATCH,
            &format!("{DEPLOYMENTS}/web?fieldManager=test&force=true"),
            Some((
                dep("api").to_string().into_bytes(),
                "application/apply-patch+yaml",
            )),
        )
        .await
        .expect("apply");
    assert_invalid(&r, "Deployment.apps", "web", &[immutable]);
    // A dry run is refused the same way.
    let r = n3
        .request(
            Method::PUT,
            &format!("{DEPLOYMENTS}/web?dryRun=All"),
            Some((dep("api").to_string().into_bytes(), "application/json")),
        )
        .await
        .expect("dry run");
    assert_invalid(&r, "Deployment.apps", "web", &[immutable]);
    let got = n1.get(&format!("{DEPLOYMENTS}/web")).await.expect("get");
    assert_eq!(got.rv(), created.rv(), "nothing was written");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_update_may_change_its_image_and_nothing_else() {
    let c = cluster().await;
    let (n1, n2) = (c.kube(1), c.kube(2));
    let pod = json!({"metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}});
    let created = n1.post(PODS, &pod).await.expect("pod");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let r = merge_patch(
        &n2,
        &format!("{PODS}/p"),
        &json!({"spec": {"containers": [{"name": "c", "image": "nginx:1.26"}]}}),
    )
    .await;
    // A merge patch replaces the list: the new container's defaults are
    // filled in again, equal to the stored ones, so only the image moved.
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["spec"]["containers"][0]["image"], "nginx:1.26");
    let r = merge_patch(
        &n2,
        &format!("{PODS}/p"),
        &json!({"spec": {"containers": [{"name": "c", "image": "nginx:1.26", "command": ["sh"]}]}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    let message = r.body["details"]["causes"][0]["message"]
        .as_str()
        .expect("a cause");
    assert!(
        message.starts_with("Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"),
        "{message}"
    );
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec");
    c.shutdown().await;
}

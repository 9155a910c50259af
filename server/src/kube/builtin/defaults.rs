//! The defaults kube fills in whenever it decodes a built-in object (on
//! every create and update, so new list items get theirs), as
//! `pkg/apis/core/v1/defaults.go`, `pkg/apis/apps/v1/defaults.go` and
//! `pkg/apis/batch/v1/defaults.go` (with their generated callers) set
//! them in Kubernetes 1.33: a pod's restart and DNS policies, scheduler,
//! grace period, security context and service links; a container's pull
//! policy, termination message path and policy, resources, port
//! protocols and probe timings; volume modes; a deployment's replicas,
//! rolling update, revision history and progress deadline; a service's
//! type, session affinity, port protocols, target ports and traffic
//! policies; a secret's type; the workloads' update strategies; a job's
//! completions, parallelism, backoff and modes.
//!
//! A default never replaces a value the object has (`null` counts as
//! none). Values of the wrong JSON type are left alone (decoding refused
//! them before).

use serde_json::{json, Map, Value};

use super::{each_obj_mut, has, list, obj, obj_entry, obj_mut, set_default, text, Kind};

/// `v1.TerminationMessagePathDefault`.
const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The file mode of secret, config map, downward API and projected
/// volumes (0644).
const VOLUME_DEFAULT_MODE: i64 = 0o644;

/// Whether [`apply`] may change an object of `kind`.
pub fn has_defaults(kind: Kind) -> bool {
    !matches!(kind, Kind::ConfigMap)
}

/// Fills in `kind`'s defaults.
pub fn apply(kind: Kind, obj: &mut Map<String, Value>) {
    match kind {
        Kind::Pod => {
            if let Some(spec) = obj_entry(obj, "spec") {
                pod_spec(spec, true);
            }
        }
        Kind::Service => {
            if let Some(spec) = obj_entry(obj, "spec") {
                service_spec(spec);
            }
        }
        Kind::Endpoints => {
            for subset in each_obj_mut(obj, "subsets") {
                for port in each_obj_mut(subset, "ports") {
                    set_default(port, "protocol", json!("TCP"));
                }
            }
        }
        Kind::Secret => set_default(obj, "type", json!("Opaque")),
        Kind::ConfigMap => {}
        Kind::Deployment => {
            if let Some(spec) = obj_entry(obj, "spec") {
                deployment_spec(spec);
            }
        }
        Kind::ReplicaSet => {
            if let Some(spec) = obj_entry(obj, "spec") {
                set_default(spec, "replicas", json!(1));
                template(spec);
            }
        }
        Kind::StatefulSet => {
            if let Some(spec) = obj_entry(obj, "spec") {
                stateful_set_spec(spec);
            }
        }
        Kind::DaemonSet => {
            if let Some(spec) = obj_entry(obj, "spec") {
                daemon_set_spec(spec);
            }
        }
        Kind::Job => self::job(obj),
        Kind::CronJob => {
            if let Some(spec) = obj_entry(obj, "spec") {
                cron_job_spec(spec);
            }
        }
    }
}

/// A workload's `spec.template.spec`: a pod spec's defaults (not a
/// pod's own: no service links, no requests from limits).
fn template(spec: &mut Map<String, Value>) {
    if let Some(pod) = obj_entry(spec, "template").and_then(|t| obj_entry(t, "spec")) {
        pod_spec(pod, false);
    }
}

/// `SetDefaults_PodSpec`, the containers' and volumes' defaults, and with
/// `is_pod` those `SetDefaults_Pod` adds for a pod itself.
fn pod_spec(spec: &mut Map<String, Value>, is_pod: bool) {
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    if is_pod {
        set_default(spec, "enableServiceLinks", json!(true));
    }
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        for c in each_obj_mut(spec, key) {
            container(c);
            if is_pod && key != "ephemeralContainers" {
                requests_from_limits(c);
                if host_network {
                    for port in each_obj_mut(c, "ports") {
                        if port.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                            if let Some(p) = port.get("containerPort").cloned() {
                                port.insert("hostPort".into(), p);
                            }
                        }
                    }
                }
            }
        }
    }
    for v in each_obj_mut(spec, "volumes") {
        volume(v);
    }
}

/// `SetDefaults_Container` and what the generated defaults add: ports'
/// protocol, probes' timings, HTTP handlers' path and scheme, field
/// references' API version, `resources: {}` (a struct kube always
/// writes).
fn container(c: &mut Map<String, Value>) {
    if !has(c, "imagePullPolicy") {
        let policy = if image_tag_is_latest(text(c, "image")) {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    set_default(c, "terminationMessagePath", json!(TERMINATION_MESSAGE_PATH));
    set_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, "resources", json!({}));
    for port in each_obj_mut(c, "ports") {
        set_default(port, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = obj_mut(c, probe) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
            http_get(p);
        }
    }
    if let Some(lifecycle) = obj_mut(c, "lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = obj_mut(lifecycle, hook) {
                http_get(h);
            }
        }
    }
    for env in each_obj_mut(c, "env") {
        if let Some(field_ref) = obj_mut(env, "valueFrom").and_then(|v| obj_mut(v, "fieldRef")) {
            set_default(field_ref, "apiVersion", json!("v1"));
        }
    }
}

/// `SetDefaults_HTTPGetAction` of a probe's or hook's `httpGet`.
fn http_get(handler: &mut Map<String, Value>) {
    if let Some(get) = obj_mut(handler, "httpGet") {
        set_default(get, "path", json!("/"));
        set_default(get, "scheme", json!("HTTP"));
    }
}

/// `SetDefaults_Pod`: a container with limits but no request for a
/// resource requests its limit.
fn requests_from_limits(c: &mut Map<String, Value>) {
    let Some(resources) = obj_mut(c, "resources") else {
        return;
    };
    let Some(limits) = obj(resources, "limits").cloned() else {
        return;
    };
    if let Some(requests) = obj_entry(resources, "requests") {
        for (name, quantity) in limits {
            requests.entry(name).or_insert(quantity);
        }
    }
}

/// Whether kube pulls `image` always: its tag is `latest`, or it has
/// neither tag nor digest (`parsers.ParseImageName`; a reference that
/// does not parse, e.g. with capitals in its path, pulls if not present).
fn image_tag_is_latest(image: &str) -> bool {
    if image.is_empty() {
        return false;
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.rsplit_once(':').map(|(_, tag)| tag);
    // The path after the registry host must be lower case.
    let path = match name.split_once('/') {
        Some((host, rest)) if host.contains(['.', ':']) || host == "localhost" => rest,
        _ => name,
    };
    let path = path.rsplit_once(':').map_or(path, |(p, _)| p);
    if path.chars().any(|c| c.is_ascii_uppercase()) || path.is_empty() {
        return false;
    }
    match (tag, digest) {
        (Some(tag), _) => tag == "latest",
        (None, Some(_)) => false,
        (None, None) => true,
    }
}

/// A volume's defaults: no source is an `emptyDir`; file modes, host path
/// types, field references' API version, token expiry.
fn volume(v: &mut Map<String, Value>) {
    if !v.iter().any(|(k, val)| k != "name" && !val.is_null()) {
        v.insert("emptyDir".into(), json!({}));
    }
    if let Some(host_path) = obj_mut(v, "hostPath") {
        set_default(host_path, "type", json!(""));
    }
    for source in ["secret", "configMap"] {
        if let Some(s) = obj_mut(v, source) {
            set_default(s, "defaultMode", json!(VOLUME_DEFAULT_MODE));
        }
    }
    if let Some(d) = obj_mut(v, "downwardAPI") {
        set_default(d, "defaultMode", json!(VOLUME_DEFAULT_MODE));
        field_ref_items(d);
    }
    if let Some(p) = obj_mut(v, "projected") {
        set_default(p, "defaultMode", json!(VOLUME_DEFAULT_MODE));
        for source in each_obj_mut(p, "sources") {
            if let Some(token) = obj_mut(source, "serviceAccountToken") {
                set_default(token, "expirationSeconds", json!(3600));
            }
            if let Some(d) = obj_mut(source, "downwardAPI") {
                field_ref_items(d);
            }
        }
    }
}

fn field_ref_items(downward: &mut Map<String, Value>) {
    for item in each_obj_mut(downward, "items") {
        if let Some(field_ref) = obj_mut(item, "fieldRef") {
            set_default(field_ref, "apiVersion", json!("v1"));
        }
    }
}

/// `SetDefaults_Service`.
fn service_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "sessionAffinity", json!("None"));
    match text(spec, "sessionAffinity") {
        "None" => {
            spec.remove("sessionAffinityConfig");
        }
        "ClientIP" => {
            let timeout = obj(spec, "sessionAffinityConfig")
                .and_then(|c| obj(c, "clientIP"))
                .is_some_and(|c| has(c, "timeoutSeconds"));
            if !timeout {
                spec.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": 10800}}),
                );
            }
        }
        _ => {}
    }
    set_default(spec, "type", json!("ClusterIP"));
    for port in each_obj_mut(spec, "ports") {
        set_default(port, "protocol", json!("TCP"));
        let unset = match port.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(v) => v.as_i64() == Some(0),
        };
        if unset {
            if let Some(p) = port.get("port").cloned() {
                port.insert("targetPort".into(), p);
            }
        }
    }
    let service_type = text(spec, "type").to_string();
    let externally_accessible = service_type == "LoadBalancer"
        || service_type == "NodePort"
        || (service_type == "ClusterIP" && !list(spec, "externalIPs").is_empty());
    if externally_accessible {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if matches!(
        service_type.as_str(),
        "ClusterIP" | "NodePort" | "LoadBalancer"
    ) {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if service_type == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
}

/// `SetDefaults_Deployment`.
fn deployment_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "replicas", json!(1));
    if let Some(strategy) = obj_entry(spec, "strategy") {
        set_default(strategy, "type", json!("RollingUpdate"));
        if text(strategy, "type") == "RollingUpdate" {
            if let Some(rolling) = obj_entry(strategy, "rollingUpdate") {
                set_default(rolling, "maxUnavailable", json!("25%"));
                set_default(rolling, "maxSurge", json!("25%"));
            }
        }
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "progressDeadlineSeconds", json!(600));
    template(spec);
}

/// `SetDefaults_StatefulSet` (with `StatefulSetAutoDeletePVC`, on in
/// 1.33) and its claim templates' defaults.
fn stateful_set_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "podManagementPolicy", json!("OrderedReady"));
    if let Some(strategy) = obj_entry(spec, "updateStrategy") {
        if !has(strategy, "type") {
            strategy.insert("type".into(), json!("RollingUpdate"));
            set_default(strategy, "rollingUpdate", json!({}));
        }
        if text(strategy, "type") == "RollingUpdate" {
            if let Some(rolling) = obj_mut(strategy, "rollingUpdate") {
                set_default(rolling, "partition", json!(0));
            }
        }
    }
    if let Some(policy) = obj_entry(spec, "persistentVolumeClaimRetentionPolicy") {
        set_default(policy, "whenDeleted", json!("Retain"));
        set_default(policy, "whenScaled", json!("Retain"));
    }
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    for claim in each_obj_mut(spec, "volumeClaimTemplates") {
        if let Some(claim_spec) = obj_entry(claim, "spec") {
            set_default(claim_spec, "volumeMode", json!("Filesystem"));
        }
        if let Some(status) = obj_entry(claim, "status") {
            set_default(status, "phase", json!("Pending"));
        }
    }
    template(spec);
}

/// `SetDefaults_DaemonSet`.
fn daemon_set_spec(spec: &mut Map<String, Value>) {
    if let Some(strategy) = obj_entry(spec, "updateStrategy") {
        set_default(strategy, "type", json!("RollingUpdate"));
        if text(strategy, "type") == "RollingUpdate" {
            if let Some(rolling) = obj_entry(strategy, "rollingUpdate") {
                set_default(rolling, "maxUnavailable", json!(1));
                set_default(rolling, "maxSurge", json!(0));
            }
        }
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    template(spec);
}

/// `SetDefaults_Job` (with `JobPodReplacementPolicy`, on in 1.33).
fn job(job: &mut Map<String, Value>) {
    let Some(spec) = obj_entry(job, "spec") else {
        return;
    };
    if !has(spec, "completions") && !has(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    if !has(spec, "backoffLimit") {
        let limit = if has(spec, "backoffLimitPerIndex") {
            i64::from(i32::MAX)
        } else {
            6
        };
        spec.insert("backoffLimit".into(), json!(limit));
    }
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    let has_failure_policy = has(spec, "podFailurePolicy");
    if let Some(policy) = obj_mut(spec, "podFailurePolicy") {
        for rule in each_obj_mut(policy, "rules") {
            for pattern in each_obj_mut(rule, "onPodConditions") {
                set_default(pattern, "status", json!("True"));
            }
        }
    }
    let replacement = if has_failure_policy {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    set_default(spec, "podReplacementPolicy", json!(replacement));
    set_default(spec, "manualSelector", json!(false));
    template(spec);
    // A job without labels of its own takes its template's.
    let template_labels = obj(spec, "template")
        .and_then(|t| obj(t, "metadata"))
        .and_then(|m| obj(m, "labels"))
        .cloned();
    if let Some(labels) = template_labels {
        if let Some(meta) = obj_entry(job, "metadata") {
            let own = obj(meta, "labels").is_some_and(|l| !l.is_empty());
            if !own {
                meta.insert("labels".into(), Value::Object(labels));
            }
        }
    }
}

/// `SetDefaults_CronJob`, and its job template's pod spec.
fn cron_job_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "concurrencyPolicy", json!("Allow"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "successfulJobsHistoryLimit", json!(3));
    set_default(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(job_spec) = obj_entry(spec, "jobTemplate").and_then(|t| obj_entry(t, "spec")) {
        template(job_spec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag_as_kube_parses_it() {
        for always in [
            "nginx",
            "nginx:latest",
            "library/nginx",
            "registry.example.com:5000/team/app",
            "localhost/app:latest",
        ] {
            assert!(image_tag_is_latest(always), "{always}");
        }
        for if_not_present in [
            "nginx:1.25",
            "nginx@sha256:abcd",
            "registry.example.com:5000/team/app:v1",
            "Nginx",
            "",
            "nginx:1.25@sha256:abcd",
        ] {
            assert!(!image_tag_is_latest(if_not_present), "{if_not_present}");
        }
    }
}

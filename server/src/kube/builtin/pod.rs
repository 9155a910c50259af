//! Pods: a pod spec's validation (also every workload's template), a
//! pod's update (its spec is immutable but for images, a shorter active
//! deadline and added tolerations), and what a create sets: the
//! `Pending` phase and the QoS class, as kube's pod strategy does.
//! Messages are kube's `pkg/apis/core/validation`.

use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Map, Value};

use super::{empty, int, list, obj, text, Path};
use crate::kube::error::{BadValue, FieldCause};
use crate::kube::names;
use crate::kube::objectmeta;

const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
/// `supportedDNSPolicies`, sorted as kube lists them.
const DNS_POLICIES: &[&str] = &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];
const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const TERMINATION_MESSAGE_POLICIES: &[&str] = &["File", "FallbackToLogsOnError"];
/// `supportedPortProtocols`, sorted.
pub const PORT_PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

/// kube's message for a pod update that changes more than it may.
const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// How many differing fields a refused pod update lists.
const DIFF_LINES: usize = 10;

/// `ValidatePodCreate`'s spec part.
pub fn validate(pod: &Map<String, Value>) -> Vec<FieldCause> {
    validate_spec(obj(pod, "spec").unwrap_or(empty()), &Path::new("spec"))
}

/// `ValidatePodTemplateSpec`: a workload's template at `path`: its
/// labels and annotations (at `<path>.labels`, as kube names them), its
/// spec, no ephemeral containers.
pub fn validate_template(template: Option<&Map<String, Value>>, path: &Path) -> Vec<FieldCause> {
    let template = template.unwrap_or(empty());
    let meta = obj(template, "metadata");
    let mut causes = Vec::new();
    if let Some(labels) = meta.and_then(|m| obj(m, "labels")) {
        causes.extend(objectmeta::validate_labels(
            labels,
            path.child("labels").as_str(),
        ));
    }
    if let Some(annotations) = meta.and_then(|m| obj(m, "annotations")) {
        causes.extend(objectmeta::validate_annotations(
            annotations,
            path.child("annotations").as_str(),
        ));
    }
    let spec = obj(template, "spec").unwrap_or(empty());
    causes.extend(validate_spec(spec, &path.child("spec")));
    if !list(spec, "ephemeralContainers").is_empty() {
        causes.push(FieldCause::forbidden(
            path.at(&["spec", "ephemeralContainers"]).as_str(),
            "ephemeral containers not allowed in pod template",
        ));
    }
    causes
}

/// `ValidatePodSpec`, the parts kubestore checks: volumes' names, the
/// containers and init containers, the restart and DNS policies, the node
/// selector, the active deadline.
pub fn validate_spec(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let volumes = validate_volumes(list(spec, "volumes"), &path.child("volumes"), &mut causes);
    let containers = list(spec, "containers");
    let containers_path = path.child("containers");
    if containers.is_empty() {
        causes.push(FieldCause::required(containers_path.as_str(), ""));
    }
    let mut names = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let c = c.as_object().unwrap_or(empty());
        let at = containers_path.index(i);
        causes.extend(validate_container(c, &volumes, &at));
        let name = text(c, "name");
        if !names.insert(name.to_string()) {
            causes.push(FieldCause::duplicate(
                at.child("name").as_str(),
                BadValue::from(name),
            ));
        }
    }
    let init_path = path.child("initContainers");
    let mut init_names = HashSet::new();
    for (i, c) in list(spec, "initContainers").iter().enumerate() {
        let c = c.as_object().unwrap_or(empty());
        let at = init_path.index(i);
        causes.extend(validate_container(c, &volumes, &at));
        let name = text(c, "name");
        if names.contains(name) || !init_names.insert(name.to_string()) {
            causes.push(FieldCause::duplicate(
                at.child("name").as_str(),
                BadValue::from(name),
            ));
        }
    }
    causes.extend(enum_field(spec, "restartPolicy", RESTART_POLICIES, path));
    causes.extend(enum_field(spec, "dnsPolicy", DNS_POLICIES, path));
    if let Some(selector) = obj(spec, "nodeSelector") {
        causes.extend(objectmeta::validate_labels(
            selector,
            path.child("nodeSelector").as_str(),
        ));
    }
    if let Some(deadline) = int(spec, "activeDeadlineSeconds") {
        if !(1..=i64::from(i32::MAX)).contains(&deadline) {
            causes.push(FieldCause::invalid_value(
                path.child("activeDeadlineSeconds").as_str(),
                BadValue::Int(deadline),
                &names::inclusive_range_error(1, i64::from(i32::MAX)),
            ));
        }
    }
    causes
}

/// A required field with a fixed set of values: `Required value` when
/// empty, kube's `Unsupported value` with the list otherwise.
pub fn enum_field(
    m: &Map<String, Value>,
    key: &str,
    supported: &[&str],
    path: &Path,
) -> Vec<FieldCause> {
    let value = text(m, key);
    let at = path.child(key);
    if value.is_empty() {
        vec![FieldCause::required(at.as_str(), "")]
    } else if !supported.contains(&value) {
        vec![FieldCause::not_supported(at.as_str(), value, supported)]
    } else {
        Vec::new()
    }
}

/// The volumes' names (required, DNS labels, unique); the names found.
fn validate_volumes(
    volumes: &[Value],
    path: &Path,
    causes: &mut Vec<FieldCause>,
) -> HashSet<String> {
    let mut names = HashSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        let at = path.index(i).child("name");
        if name.is_empty() {
            causes.push(FieldCause::required(at.as_str(), ""));
        } else {
            for msg in names::dns1123_label(name) {
                causes.push(FieldCause::invalid(at.as_str(), name, &msg));
            }
            if !names.insert(name.to_string()) {
                causes.push(FieldCause::duplicate(at.as_str(), BadValue::from(name)));
            }
        }
    }
    names
}

/// `validateContainerCommon`, the parts kubestore checks.
fn validate_container(
    c: &Map<String, Value>,
    volumes: &HashSet<String>,
    path: &Path,
) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let name = text(c, "name");
    let name_path = path.child("name");
    if name.is_empty() {
        causes.push(FieldCause::required(name_path.as_str(), ""));
    } else {
        for msg in names::dns1123_label(name) {
            causes.push(FieldCause::invalid(name_path.as_str(), name, &msg));
        }
    }
    if text(c, "image").is_empty() {
        causes.push(FieldCause::required(path.child("image").as_str(), ""));
    }
    causes.extend(enum_field(
        c,
        "terminationMessagePolicy",
        TERMINATION_MESSAGE_POLICIES,
        path,
    ));
    causes.extend(container_ports(list(c, "ports"), &path.child("ports")));
    for (i, env) in list(c, "env").iter().enumerate() {
        let name = env.get("name").and_then(Value::as_str).unwrap_or("");
        let at = path.child("env").index(i).child("name");
        if name.is_empty() {
            causes.push(FieldCause::required(at.as_str(), ""));
        } else if name
            .chars()
            .any(|ch| !ch.is_ascii() || ch.is_ascii_control() || ch == '=')
        {
            causes.push(FieldCause::invalid(
                at.as_str(),
                name,
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            ));
        }
    }
    for (i, mount) in list(c, "volumeMounts").iter().enumerate() {
        let at = path.child("volumeMounts").index(i);
        let name = mount.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            causes.push(FieldCause::required(at.child("name").as_str(), ""));
        } else if !volumes.contains(name) {
            causes.push(FieldCause::not_found(
                at.child("name").as_str(),
                BadValue::from(name),
            ));
        }
        if mount
            .get("mountPath")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            causes.push(FieldCause::required(at.child("mountPath").as_str(), ""));
        }
    }
    causes.extend(enum_field(c, "imagePullPolicy", PULL_POLICIES, path));
    causes
}

/// `validateContainerPorts`.
fn container_ports(ports: &[Value], path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let port = port.as_object().unwrap_or(empty());
        let at = path.index(i);
        let name = text(port, "name");
        if !name.is_empty() {
            let errs = names::port_name(name);
            if !errs.is_empty() {
                for msg in errs {
                    causes.push(FieldCause::invalid(at.child("name").as_str(), name, &msg));
                }
            } else if !names.insert(name.to_string()) {
                causes.push(FieldCause::duplicate(
                    at.child("name").as_str(),
                    BadValue::from(name),
                ));
            }
        }
        match int(port, "containerPort").unwrap_or(0) {
            0 => causes.push(FieldCause::required(at.child("containerPort").as_str(), "")),
            p => {
                for msg in names::port_number(p) {
                    causes.push(FieldCause::invalid_value(
                        at.child("containerPort").as_str(),
                        BadValue::Int(p),
                        &msg,
                    ));
                }
            }
        }
        let host = int(port, "hostPort").unwrap_or(0);
        if host != 0 {
            for msg in names::port_number(host) {
                causes.push(FieldCause::invalid_value(
                    at.child("hostPort").as_str(),
                    BadValue::Int(host),
                    &msg,
                ));
            }
        }
        causes.extend(enum_field(port, "protocol", PORT_PROTOCOLS, &at));
    }
    causes
}

/// `ValidatePodUpdate`: the new pod as on a create, then what its update
/// may change: containers neither added nor removed, each with an image;
/// the active deadline only lowered (never cleared); tolerations only
/// added (their `tolerationSeconds` may change); everything else in the
/// spec as it was (kube's `Forbidden` listing what may change, followed
/// by the fields that differ).
pub fn validate_update(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<FieldCause> {
    let mut causes = validate(new);
    let spec_path = Path::new("spec");
    let old_spec = obj(old, "spec").unwrap_or(empty());
    let new_spec = obj(new, "spec").unwrap_or(empty());
    for key in ["containers", "initContainers"] {
        let (before, after) = (list(old_spec, key), list(new_spec, key));
        if before.len() != after.len() {
            causes.push(FieldCause::forbidden(
                spec_path.child(key).as_str(),
                "pod updates may not add or remove containers",
            ));
            return causes;
        }
        for (i, c) in after.iter().enumerate() {
            let image = c.get("image").and_then(Value::as_str).unwrap_or("");
            if image.trim() != image {
                causes.push(FieldCause::invalid(
                    spec_path.child(key).index(i).child("image").as_str(),
                    image,
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    let deadline_path = spec_path.child("activeDeadlineSeconds");
    match (
        int(old_spec, "activeDeadlineSeconds"),
        int(new_spec, "activeDeadlineSeconds"),
    ) {
        (_, Some(new_deadline)) if !(0..=i64::from(i32::MAX)).contains(&new_deadline) => {
            causes.push(FieldCause::invalid_value(
                deadline_path.as_str(),
                BadValue::Int(new_deadline),
                &names::inclusive_range_error(0, i64::from(i32::MAX)),
            ));
            return causes;
        }
        (Some(old_deadline), Some(new_deadline)) if old_deadline < new_deadline => {
            causes.push(FieldCause::invalid_value(
                deadline_path.as_str(),
                BadValue::Int(new_deadline),
                "must be less than or equal to previous value",
            ));
            return causes;
        }
        (Some(_), None) => causes.push(FieldCause::invalid_value(
            deadline_path.as_str(),
            BadValue::Str("null".into()),
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }
    if let Some(cause) = only_added_tolerations(
        list(old_spec, "tolerations"),
        list(new_spec, "tolerations"),
        &spec_path.child("tolerations"),
    ) {
        causes.push(cause);
    }
    let munged = munge_update(old_spec, new_spec);
    if &munged != old_spec {
        let diff = differences(
            &Value::Object(old_spec.clone()),
            &Value::Object(munged),
            "spec",
        );
        causes.push(FieldCause::forbidden(
            spec_path.as_str(),
            &format!("{POD_UPDATE_FORBIDDEN}\n{}", diff.join("\n")),
        ));
    }
    causes
}

/// The new spec with what an update may change put back as it was.
fn munge_update(old: &Map<String, Value>, new: &Map<String, Value>) -> Map<String, Value> {
    let mut munged = new.clone();
    for key in ["containers", "initContainers"] {
        let old_list = list(old, key);
        if let Some(items) = munged.get_mut(key).and_then(Value::as_array_mut) {
            for (item, before) in items.iter_mut().zip(old_list) {
                if let Some(c) = item.as_object_mut() {
                    match before.get("image") {
                        Some(image) => c.insert("image".into(), image.clone()),
                        None => c.remove("image"),
                    };
                }
            }
        }
    }
    for key in ["activeDeadlineSeconds", "tolerations", "schedulingGates"] {
        match old.get(key) {
            Some(v) => munged.insert(key.into(), v.clone()),
            None => munged.remove(key),
        };
    }
    let old_grace = int(old, "terminationGracePeriodSeconds");
    if old_grace.is_some_and(|g| g < 0) && int(&munged, "terminationGracePeriodSeconds") == Some(1)
    {
        if let Some(g) = old.get("terminationGracePeriodSeconds") {
            munged.insert("terminationGracePeriodSeconds".into(), g.clone());
        }
    }
    munged
}

/// `validateOnlyAddedTolerations`: every old toleration is still there
/// (its `tolerationSeconds` aside).
fn only_added_tolerations(old: &[Value], new: &[Value], path: &Path) -> Option<FieldCause> {
    let without_seconds = |t: &Value| {
        let mut t = t.as_object().cloned().unwrap_or_default();
        t.remove("tolerationSeconds");
        t
    };
    let new: Vec<Map<String, Value>> = new.iter().map(without_seconds).collect();
    if old.iter().all(|t| new.contains(&without_seconds(t))) {
        return None;
    }
    Some(FieldCause::forbidden(
        path.as_str(),
        "existing toleration can not be modified except its tolerationSeconds",
    ))
}

/// The fields where two values differ, as `- path: old` / `+ path: new`
/// lines (kube prints a Go diff of its internal struct here), at most
/// [`DIFF_LINES`] fields.
fn differences(old: &Value, new: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    diff_into(old, new, path, &mut out);
    if out.len() > 2 * DIFF_LINES {
        out.truncate(2 * DIFF_LINES);
        out.push("...".into());
    }
    out
}

fn diff_into(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    if old == new || out.len() > 2 * DIFF_LINES {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let null = Value::Null;
                diff_into(
                    a.get(k).unwrap_or(&null),
                    b.get(k).unwrap_or(&null),
                    &format!("{path}.{k}"),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff_into(x, y, &format!("{path}[{i}]"), out);
            }
        }
        _ => {
            if !old.is_null() {
                out.push(format!("- {path}: {old}"));
            }
            if !new.is_null() {
                out.push(format!("+ {path}: {new}"));
            }
        }
    }
}

/// A new pod's status, as kube's pod strategy sets it on a create:
/// `Pending`, with its QoS class.
pub fn prepare_create(pod: &mut Map<String, Value>) {
    let qos = qos_class(obj(pod, "spec").unwrap_or(empty()));
    pod.insert(
        "status".into(),
        json!({"phase": "Pending", "qosClass": qos}),
    );
}

/// `ComputePodQOS`: `BestEffort` without CPU or memory requests or limits,
/// `Guaranteed` when every container limits both and the requests are the
/// limits, else `Burstable`.
fn qos_class(spec: &Map<String, Value>) -> &'static str {
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    let containers = list(spec, "containers")
        .iter()
        .chain(list(spec, "initContainers"));
    for c in containers {
        let resources = c.get("resources").and_then(Value::as_object);
        let add = |into: &mut BTreeMap<&str, i128>, what: &str| -> HashSet<&'static str> {
            let mut found = HashSet::new();
            let Some(quantities) = resources.and_then(|r| obj(r, what)) else {
                return found;
            };
            for name in ["cpu", "memory"] {
                let amount = quantities.get(name).and_then(quantity_nanos).unwrap_or(0);
                if amount > 0 {
                    found.insert(name);
                    let sum = into.entry(name).or_insert(0);
                    *sum = sum.saturating_add(amount);
                }
            }
            found
        };
        add(&mut requests, "requests");
        let limited = add(&mut limits, "limits");
        if !(limited.contains("cpu") && limited.contains("memory")) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed
        && requests
            .iter()
            .all(|(name, req)| limits.get(name) == Some(req))
        && requests.len() == limits.len()
    {
        return "Guaranteed";
    }
    "Burstable"
}

/// A quantity (`"100m"`, `"1Gi"`, `2`) in billionths, for comparing and
/// adding; `None` for one that does not parse.
fn quantity_nanos(value: &Value) -> Option<i128> {
    let s = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(&s)),
    };
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(split);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let mut nanos: i128 = 0;
    for d in whole.bytes() {
        nanos = nanos
            .checked_mul(10)?
            .checked_add(i128::from(d.checked_sub(b'0')?))?;
    }
    nanos = nanos.checked_mul(1_000_000_000)?;
    let mut scale: i128 = 100_000_000;
    for d in frac.bytes().take(9) {
        nanos = nanos.checked_add(i128::from(d.checked_sub(b'0')?) * scale)?;
        scale /= 10;
    }
    let (mul, div): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        exp => {
            let e: i32 = exp.strip_prefix(['e', 'E'])?.parse().ok()?;
            if e >= 0 {
                (10i128.checked_pow(u32::try_from(e).ok()?)?, 1)
            } else {
                (1, 10i128.checked_pow(u32::try_from(-e).ok()?)?)
            }
        }
    };
    let value = nanos.checked_mul(mul)? / div;
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_compare_in_billionths() {
        assert_eq!(quantity_nanos(&json!("100m")), Some(100_000_000));
        assert_eq!(quantity_nanos(&json!("0.1")), Some(100_000_000));
        assert_eq!(quantity_nanos(&json!("1Ki")), Some(1024 * 1_000_000_000));
        assert_eq!(quantity_nanos(&json!("1e3")), quantity_nanos(&json!("1k")));
        assert_eq!(quantity_nanos(&json!(2)), Some(2_000_000_000));
        assert_eq!(quantity_nanos(&json!("lots")), None);
    }

    #[test]
    fn qos_classes() {
        let spec = |resources: Value| -> Map<String, Value> {
            match json!({"containers": [{"name": "a", "resources": resources}]}) {
                Value::Object(m) => m,
                _ => unreachable!(),
            }
        };
        assert_eq!(qos_class(&spec(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&spec(
                json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m", "memory": "1Gi"}})
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&spec(json!({"requests": {"cpu": "100m"}}))),
            "Burstable"
        );
    }
}

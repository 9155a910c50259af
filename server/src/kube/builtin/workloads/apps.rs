//! The apps/v1 workloads (`pkg/apis/apps/validation`): deployments and
//! their strategies, replica sets, stateful sets and daemon sets, each a
//! selector matching a template that always restarts.

use serde_json::{Map, Value};

use super::super::pod;
use super::super::{empty, has, int, list, obj, text, Path};
use super::selector::{label_selector, selector_checks, selector_match, selector_value};
use super::{nonnegative, template_spec, NEGATIVE};
use crate::kube::error::{BadValue, FieldCause};
use crate::kube::names;

/// The template restricted to `Always` restarts and no active deadline
/// (the replica set's words: `activeDeadlineSeconds in <Kind> is not
/// Supported`).
fn always_restarting(
    spec: &Map<String, Value>,
    path: &Path,
    kind_word: &str,
    forbidden: bool,
) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let pod = template_spec(spec);
    let policy = text(pod, "restartPolicy");
    if policy != "Always" {
        causes.push(FieldCause::not_supported(
            path.at(&["template", "spec", "restartPolicy"]).as_str(),
            policy,
            &["Always"],
        ));
    }
    if let Some(deadline) = pod.get("activeDeadlineSeconds").filter(|v| !v.is_null()) {
        let at = path.at(&["template", "spec", "activeDeadlineSeconds"]);
        let detail = format!("activeDeadlineSeconds in {kind_word} is not Supported");
        causes.push(if forbidden {
            FieldCause::forbidden(at.as_str(), &detail)
        } else {
            FieldCause::invalid_value(at.as_str(), BadValue::of_json(deadline), &detail)
        });
    }
    causes
}

/// `ValidateDeploymentSpec`.
pub(super) fn deployment(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes: Vec<FieldCause> = nonnegative(spec, "replicas", path).into_iter().collect();
    causes.extend(replicated_template(spec, path));
    causes.extend(deployment_strategy(
        obj(spec, "strategy").unwrap_or(empty()),
        &path.child("strategy"),
    ));
    causes.extend(nonnegative(spec, "minReadySeconds", path));
    causes.extend(nonnegative(spec, "revisionHistoryLimit", path));
    if let Some(deadline) = int(spec, "progressDeadlineSeconds") {
        causes.extend(nonnegative(spec, "progressDeadlineSeconds", path));
        if deadline <= int(spec, "minReadySeconds").unwrap_or(0) {
            causes.push(FieldCause::invalid_value(
                path.child("progressDeadlineSeconds").as_str(),
                BadValue::Int(deadline),
                "must be greater than minReadySeconds",
            ));
        }
    }
    causes
}

/// What a deployment and a replica set check alike: the selector (kube
/// words both as a deployment's), and the template against it when the
/// selector converts, or `invalid label selector` when it does not.
fn replicated_template(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let (mut causes, converts) = selector_checks(spec, path, "deployment", true);
    if converts {
        causes.extend(template_for_replica_set(spec, path));
    } else {
        causes.push(FieldCause::invalid_value(
            path.child("selector").as_str(),
            BadValue::label_selector(selector_value(spec)),
            "invalid label selector",
        ));
    }
    causes
}

/// `ValidatePodTemplateSpecForReplicaSet`.
fn template_for_replica_set(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes: Vec<FieldCause> = selector_match(spec, path, true).into_iter().collect();
    causes.extend(pod::validate_template(
        obj(spec, "template"),
        &path.child("template"),
    ));
    causes.extend(always_restarting(spec, path, "ReplicaSet", true));
    causes
}

/// `ValidateDeploymentStrategy` and `ValidateRollingUpdateDeployment`.
fn deployment_strategy(strategy: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    match text(strategy, "type") {
        "Recreate" => {
            if has(strategy, "rollingUpdate") {
                causes.push(FieldCause::forbidden(
                    path.child("rollingUpdate").as_str(),
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match obj(strategy, "rollingUpdate") {
            None => causes.push(FieldCause::required(
                path.child("rollingUpdate").as_str(),
                "this should be defaulted and never be nil",
            )),
            Some(rolling) => {
                causes.extend(rolling_update(rolling, &path.child("rollingUpdate"), true))
            }
        },
        _ => causes.push(FieldCause::not_supported_value(
            path.as_str(),
            BadValue::Go(Value::Object(strategy.clone()).to_string()),
            &["Recreate", "RollingUpdate"],
        )),
    }
    causes
}

/// A rolling update's `maxUnavailable` and `maxSurge`: non-negative
/// integers or percentages, not both zero, at most 100% unavailable.
fn rolling_update(rolling: &Map<String, Value>, path: &Path, at_most_100: bool) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    for key in ["maxUnavailable", "maxSurge"] {
        if let Some(v) = rolling.get(key).filter(|v| !v.is_null()) {
            causes.extend(positive_int_or_percent(v, &path.child(key)));
        }
    }
    let amount = |key: &str| -> i64 {
        match rolling.get(key) {
            Some(Value::String(s)) => s
                .strip_suffix('%')
                .and_then(|n| n.parse().ok())
                .unwrap_or(-1),
            Some(v) => v.as_i64().unwrap_or(0),
            None => 0,
        }
    };
    if amount("maxUnavailable") == 0 && amount("maxSurge") == 0 {
        causes.push(FieldCause::invalid_value(
            path.child("maxUnavailable").as_str(),
            int_or_string(rolling.get("maxUnavailable")),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
    if at_most_100 {
        if let Some(Value::String(s)) = rolling.get("maxUnavailable") {
            if s.strip_suffix('%')
                .and_then(|n| n.parse::<i64>().ok())
                .is_some_and(|n| n > 100)
            {
                causes.push(FieldCause::invalid_value(
                    path.child("maxUnavailable").as_str(),
                    int_or_string(rolling.get("maxUnavailable")),
                    "must not be greater than 100%",
                ));
            }
        }
    }
    causes
}

/// An `intstr.IntOrString` as Go's `%#v` shows it.
fn int_or_string(v: Option<&Value>) -> BadValue {
    match v {
        Some(Value::String(s)) => BadValue::Go(format!(
            "intstr.IntOrString{{Type:1, IntVal:0, StrVal:{}}}",
            crate::kube::error::go_quote(s)
        )),
        other => BadValue::Go(format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            other.and_then(Value::as_i64).unwrap_or(0)
        )),
    }
}

/// `ValidatePositiveIntOrPercent`.
fn positive_int_or_percent(v: &Value, path: &Path) -> Vec<FieldCause> {
    match v {
        Value::String(s) => {
            let ok = s
                .strip_suffix('%')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if ok {
                Vec::new()
            } else {
                vec![FieldCause::invalid_value(
                    path.as_str(),
                    int_or_string(Some(v)),
                    &names::regex_error(
                        "a valid percent string must be a numeric string followed by an ending '%'",
                        "[0-9]+%",
                        &["1%", "93%"],
                    ),
                )]
            }
        }
        other => {
            let n = other.as_i64().unwrap_or(0);
            if n < 0 {
                vec![FieldCause::invalid_value(
                    path.as_str(),
                    BadValue::Int(n),
                    NEGATIVE,
                )]
            } else {
                Vec::new()
            }
        }
    }
}

/// `ValidateReplicaSetSpec`.
pub(super) fn replica_set(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes: Vec<FieldCause> = nonnegative(spec, "replicas", path).into_iter().collect();
    causes.extend(nonnegative(spec, "minReadySeconds", path));
    causes.extend(replicated_template(spec, path));
    causes
}

/// `ValidateStatefulSetSpec`.
pub(super) fn stateful_set(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    match text(spec, "podManagementPolicy") {
        "" => causes.push(FieldCause::required(
            path.child("podManagementPolicy").as_str(),
            "",
        )),
        "OrderedReady" | "Parallel" => {}
        other => causes.push(FieldCause::invalid(
            path.child("podManagementPolicy").as_str(),
            other,
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let strategy = obj(spec, "updateStrategy").unwrap_or(empty());
    let strategy_path = path.child("updateStrategy");
    match text(strategy, "type") {
        "" => causes.push(FieldCause::required(strategy_path.as_str(), "")),
        "OnDelete" => {
            if let Some(rolling) = strategy.get("rollingUpdate").filter(|v| !v.is_null()) {
                causes.push(FieldCause::invalid_value(
                    strategy_path.child("rollingUpdate").as_str(),
                    BadValue::of_json(rolling),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(rolling) = obj(strategy, "rollingUpdate") {
                let at = strategy_path.child("rollingUpdate");
                causes.extend(nonnegative(rolling, "partition", &at));
                if let Some(v) = rolling.get("maxUnavailable").filter(|v| !v.is_null()) {
                    causes.extend(positive_int_or_percent(v, &at.child("maxUnavailable")));
                }
            }
        }
        _ => causes.push(FieldCause::invalid_value(
            strategy_path.as_str(),
            BadValue::Go(Value::Object(strategy.clone()).to_string()),
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    if let Some(policy) = obj(spec, "persistentVolumeClaimRetentionPolicy") {
        let at = path.child("persistentVolumeClaimRetentionPolicy");
        for key in ["whenDeleted", "whenScaled"] {
            let value = text(policy, key);
            if !matches!(value, "Retain" | "Delete") {
                causes.push(FieldCause::not_supported(
                    at.child(key).as_str(),
                    value,
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    causes.extend(nonnegative(spec, "replicas", path));
    causes.extend(nonnegative(spec, "minReadySeconds", path));
    let (selector_causes, converts) = selector_checks(spec, path, "statefulset", true);
    causes.extend(selector_causes);
    if converts {
        causes.extend(selector_match(spec, path, true));
        causes.extend(pod::validate_template(
            obj(spec, "template"),
            &path.child("template"),
        ));
    } else {
        causes.push(FieldCause::invalid_value(
            path.child("selector").as_str(),
            BadValue::label_selector(selector_value(spec)),
            "",
        ));
    }
    causes.extend(always_restarting(spec, path, "StatefulSet", true));
    causes
}

/// `ValidateDaemonSetSpec`.
pub(super) fn daemon_set(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let converts = match obj(spec, "selector") {
        Some(sel) => {
            let errors = label_selector(sel, &path.child("selector"));
            let converts = errors.is_empty();
            causes.extend(errors);
            converts
        }
        None => true,
    };
    if converts {
        causes.extend(selector_match(spec, path, false));
    }
    if let Some(sel) = obj(spec, "selector") {
        if obj(sel, "matchLabels").is_none_or(Map::is_empty)
            && list(sel, "matchExpressions").is_empty()
        {
            causes.push(FieldCause::invalid_value(
                path.child("selector").as_str(),
                BadValue::label_selector(selector_value(spec)),
                "empty selector is invalid for daemonset",
            ));
        }
    }
    causes.extend(pod::validate_template(
        obj(spec, "template"),
        &path.child("template"),
    ));
    causes.extend(always_restarting(spec, path, "DaemonSet", false));
    causes.extend(nonnegative(spec, "minReadySeconds", path));
    let strategy = obj(spec, "updateStrategy").unwrap_or(empty());
    let strategy_path = path.child("updateStrategy");
    match text(strategy, "type") {
        "OnDelete" => {}
        "RollingUpdate" => match obj(strategy, "rollingUpdate") {
            None => causes.push(FieldCause::required(
                strategy_path.child("rollingUpdate").as_str(),
                "",
            )),
            Some(rolling) => causes.extend(rolling_update(
                rolling,
                &strategy_path.child("rollingUpdate"),
                true,
            )),
        },
        _ => causes.push(FieldCause::not_supported_value(
            strategy_path.as_str(),
            BadValue::Go(Value::Object(strategy.clone()).to_string()),
            &["RollingUpdate", "OnDelete"],
        )),
    }
    causes.extend(nonnegative(spec, "revisionHistoryLimit", path));
    causes
}

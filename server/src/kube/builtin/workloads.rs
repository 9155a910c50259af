//! The workloads: deployments, replica sets, stateful sets and daemon
//! sets (`pkg/apis/apps/validation`), jobs and cron jobs
//! (`pkg/apis/batch/validation`): a selector that is valid and matches
//! the template's labels, the template validated as a pod's (with the
//! restart policy the kind allows), the kind's strategies and counts; on
//! an update, the selector (apps/v1) and a job's template immutable, a
//! stateful set's spec but for its mutable fields. A create resets the
//! status (kube's strategies do) and gives a job its generated selector
//! and labels.

use serde_json::{json, Map, Value};

use super::pod::{self, enum_field};
use super::{empty, has, int, list, obj, obj_entry, text, Kind, Path};
use crate::kube::error::{BadValue, FieldCause};
use crate::kube::names;
use crate::kube::objectmeta::{self, FIELD_IMMUTABLE};

/// kube's `IsNegativeErrorMsg`.
const NEGATIVE: &str = "must be greater than or equal to 0";
const SELECTOR_MISMATCH: &str = "`selector` does not match template `labels`";
const STATEFUL_SET_UPDATE: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

/// The job labels kube's job strategy puts on the template (the legacy
/// name and uid labels, and the prefixed ones).
const JOB_NAME_LABELS: [&str; 2] = ["job-name", "batch.kubernetes.io/job-name"];
const JOB_UID_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];
const JOB_UID_SELECTOR: &str = "batch.kubernetes.io/controller-uid";

fn spec_of(obj_: &Map<String, Value>) -> &Map<String, Value> {
    obj(obj_, "spec").unwrap_or(empty())
}

/// What a create resets or generates.
pub fn prepare_create(kind: Kind, obj_: &mut Map<String, Value>) {
    let status = match kind {
        Kind::ReplicaSet => json!({"replicas": 0}),
        Kind::StatefulSet => json!({"replicas": 0, "availableReplicas": 0}),
        Kind::DaemonSet => json!({
            "currentNumberScheduled": 0,
            "numberMisscheduled": 0,
            "desiredNumberScheduled": 0,
            "numberReady": 0
        }),
        _ => json!({}),
    };
    obj_.insert("status".into(), status);
    if kind == Kind::Job {
        generate_job_selector(obj_);
    }
}

/// kube's `generateSelector`, unless `spec.manualSelector`: the job's
/// name and uid as template labels, its uid as the selector.
fn generate_job_selector(job: &mut Map<String, Value>) {
    let meta = obj(job, "metadata");
    let name = meta.map_or("", |m| text(m, "name")).to_string();
    let uid = meta.map_or("", |m| text(m, "uid")).to_string();
    let Some(spec) = obj_entry(job, "spec") else {
        return;
    };
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    if let Some(labels) = obj_entry(spec, "template")
        .and_then(|t| obj_entry(t, "metadata"))
        .and_then(|m| obj_entry(m, "labels"))
    {
        for key in JOB_NAME_LABELS {
            labels.entry(key).or_insert_with(|| json!(name));
        }
        for key in JOB_UID_LABELS {
            labels.entry(key).or_insert_with(|| json!(uid));
        }
    }
    if let Some(match_labels) =
        obj_entry(spec, "selector").and_then(|s| obj_entry(s, "matchLabels"))
    {
        match_labels
            .entry(JOB_UID_SELECTOR)
            .or_insert_with(|| json!(uid));
    }
}

/// The kind's validation of a new object.
pub fn validate(kind: Kind, obj_: &Map<String, Value>) -> Vec<FieldCause> {
    let spec = spec_of(obj_);
    let path = Path::new("spec");
    match kind {
        Kind::Deployment => deployment(spec, &path),
        Kind::ReplicaSet => replica_set(spec, &path),
        Kind::StatefulSet => stateful_set(spec, &path),
        Kind::DaemonSet => daemon_set(spec, &path),
        Kind::Job => {
            let mut causes = generated_selector(obj_);
            causes.extend(job_spec(spec, &path));
            causes
        }
        Kind::CronJob => cron_job(spec, &path),
        _ => Vec::new(),
    }
}

/// The kind's validation of an update.
pub fn validate_update(
    kind: Kind,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Vec<FieldCause> {
    let (old_spec, new_spec) = (spec_of(old), spec_of(new));
    let path = Path::new("spec");
    let mut causes = match kind {
        // Only a create checks the generated selector.
        Kind::Job => job_spec(new_spec, &path),
        _ => validate(kind, new),
    };
    match kind {
        Kind::Deployment | Kind::ReplicaSet | Kind::DaemonSet => {
            causes.extend(immutable_selector(old_spec, new_spec, &path));
        }
        Kind::StatefulSet => {
            let mut clone = new_spec.clone();
            for key in [
                "replicas",
                "template",
                "updateStrategy",
                "minReadySeconds",
                "ordinals",
                "revisionHistoryLimit",
                "persistentVolumeClaimRetentionPolicy",
            ] {
                match old_spec.get(key) {
                    Some(v) => clone.insert(key.into(), v.clone()),
                    None => clone.remove(key),
                };
            }
            if &clone != old_spec {
                causes.push(FieldCause::forbidden(path.as_str(), STATEFUL_SET_UPDATE));
            }
        }
        Kind::Job => causes.extend(job_update(old, new, &path)),
        _ => {}
    }
    causes
}

fn immutable_selector(
    old_spec: &Map<String, Value>,
    new_spec: &Map<String, Value>,
    path: &Path,
) -> Vec<FieldCause> {
    let (before, after) = (selector_value(old_spec), selector_value(new_spec));
    if before == after {
        return Vec::new();
    }
    vec![FieldCause::invalid_value(
        path.child("selector").as_str(),
        BadValue::label_selector(after),
        FIELD_IMMUTABLE,
    )]
}

fn selector_value(spec: &Map<String, Value>) -> Option<&Value> {
    spec.get("selector").filter(|v| !v.is_null())
}

fn nonnegative(spec: &Map<String, Value>, key: &str, path: &Path) -> Option<FieldCause> {
    let value = int(spec, key)?;
    (value < 0).then(|| {
        FieldCause::invalid_value(path.child(key).as_str(), BadValue::Int(value), NEGATIVE)
    })
}

/// `ValidateLabelSelector`: matchLabels as labels, each expression's
/// operator, key and values.
fn label_selector(sel: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if let Some(labels) = obj(sel, "matchLabels") {
        causes.extend(objectmeta::validate_labels(
            labels,
            path.child("matchLabels").as_str(),
        ));
    }
    for (i, req) in list(sel, "matchExpressions").iter().enumerate() {
        let req = req.as_object().unwrap_or(empty());
        let at = path.child("matchExpressions").index(i);
        let values = list(req, "values");
        match text(req, "operator") {
            "In" | "NotIn" if values.is_empty() => causes.push(FieldCause::required(
                at.child("values").as_str(),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(FieldCause::forbidden(
                at.child("values").as_str(),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => causes.push(FieldCause::invalid(
                at.child("operator").as_str(),
                other,
                "not a valid selector operator",
            )),
        }
        let key = text(req, "key");
        for msg in names::qualified_name(key) {
            causes.push(FieldCause::invalid(at.child("key").as_str(), key, &msg));
        }
        for (j, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or("");
            for msg in names::label_value(v) {
                causes.push(FieldCause::invalid(
                    at.child("values").index(j).as_str(),
                    v,
                    &msg,
                ));
            }
        }
    }
    causes
}

/// A selector as kube's `LabelSelectorAsSelector` makes it.
enum Selector<'a> {
    /// No selector: matches nothing.
    Nothing,
    /// An empty one: matches everything.
    Everything,
    Some(&'a Map<String, Value>),
}

impl Selector<'_> {
    fn of(spec: &Map<String, Value>) -> Selector<'_> {
        match obj(spec, "selector") {
            None => Selector::Nothing,
            Some(sel)
                if obj(sel, "matchLabels").is_none_or(Map::is_empty)
                    && list(sel, "matchExpressions").is_empty() =>
            {
                Selector::Everything
            }
            Some(sel) => Selector::Some(sel),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Selector::Everything)
    }

    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let sel = match self {
            Selector::Nothing => return false,
            Selector::Everything => return true,
            Selector::Some(sel) => sel,
        };
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let labels_ok =
            obj(sel, "matchLabels").is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
        labels_ok
            && list(sel, "matchExpressions").iter().all(|req| {
                let key = req.get("key").and_then(Value::as_str).unwrap_or("");
                let values: Vec<&str> = req
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|vs| vs.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match req.get("operator").and_then(Value::as_str).unwrap_or("") {
                    "In" => label(key).is_some_and(|l| values.contains(&l)),
                    "NotIn" => label(key).is_none_or(|l| !values.contains(&l)),
                    "Exists" => label(key).is_some(),
                    "DoesNotExist" => label(key).is_none(),
                    _ => false,
                }
            })
    }
}

fn template_labels(spec: &Map<String, Value>) -> Option<&Map<String, Value>> {
    obj(spec, "template")
        .and_then(|t| obj(t, "metadata"))
        .and_then(|m| obj(m, "labels"))
}

fn template_spec(spec: &Map<String, Value>) -> &Map<String, Value> {
    obj(spec, "template")
        .and_then(|t| obj(t, "spec"))
        .unwrap_or(empty())
}

/// The selector's own checks: required (or not), valid, not empty.
/// Returns its causes and whether it converts to a selector.
fn selector_checks(
    spec: &Map<String, Value>,
    path: &Path,
    word: &str,
    required: bool,
) -> (Vec<FieldCause>, bool) {
    let mut causes = Vec::new();
    let at = path.child("selector");
    let Some(sel) = obj(spec, "selector") else {
        if required {
            causes.push(FieldCause::required(at.as_str(), ""));
        }
        return (causes, true);
    };
    let errors = label_selector(sel, &at);
    let converts = errors.is_empty();
    causes.extend(errors);
    if obj(sel, "matchLabels").is_none_or(Map::is_empty) && list(sel, "matchExpressions").is_empty()
    {
        causes.push(FieldCause::invalid_value(
            at.as_str(),
            BadValue::label_selector(selector_value(spec)),
            &format!("empty selector is invalid for {word}"),
        ));
    }
    (causes, converts)
}

fn selector_match(spec: &Map<String, Value>, path: &Path, check_empty: bool) -> Option<FieldCause> {
    let selector = Selector::of(spec);
    if check_empty && selector.is_empty() {
        return None;
    }
    let labels = template_labels(spec);
    (!selector.matches(labels)).then(|| {
        FieldCause::invalid_value(
            path.at(&["template", "metadata", "labels"]).as_str(),
            BadValue::string_map(labels),
            SELECTOR_MISMATCH,
        )
    })
}

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
fn deployment(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes: Vec<FieldCause> = nonnegative(spec, "replicas", path).into_iter().collect();
    let (selector_causes, converts) = selector_checks(spec, path, "deployment", true);
    causes.extend(selector_causes);
    if converts {
        causes.extend(template_for_replica_set(spec, path));
    } else {
        causes.push(FieldCause::invalid_value(
            path.child("selector").as_str(),
            BadValue::label_selector(selector_value(spec)),
            "invalid label selector",
        ));
    }
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
fn replica_set(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes: Vec<FieldCause> = nonnegative(spec, "replicas", path).into_iter().collect();
    causes.extend(nonnegative(spec, "minReadySeconds", path));
    let (selector_causes, converts) = selector_checks(spec, path, "deployment", true);
    causes.extend(selector_causes);
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

/// `ValidateStatefulSetSpec`.
fn stateful_set(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
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
fn daemon_set(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
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

/// `validateGeneratedSelector`: a job whose selector the server generates
/// carries it, with the uid, on its template and selector.
fn generated_selector(job: &Map<String, Value>) -> Vec<FieldCause> {
    let spec = spec_of(job);
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return Vec::new();
    }
    let path = Path::new("spec");
    let Some(labels) = template_labels(spec) else {
        return vec![FieldCause::required(
            path.at(&["template", "metadata", "labels"]).as_str(),
            "",
        )];
    };
    let uid = obj(job, "metadata").map_or("", |m| text(m, "uid"));
    let mut causes = Vec::new();
    for key in JOB_UID_LABELS {
        if let Some(v) = labels
            .get(key)
            .and_then(Value::as_str)
            .filter(|v| *v != uid)
        {
            causes.push(FieldCause::invalid(
                path.at(&["template", "metadata", "labels"])
                    .key(key)
                    .as_str(),
                v,
                &format!("must be '{uid}'"),
            ));
        }
    }
    if let Some(sel) = obj(spec, "selector") {
        let generated = obj(sel, "matchLabels")
            .and_then(|m| m.get(JOB_UID_SELECTOR))
            .and_then(Value::as_str)
            == Some(uid);
        if !generated {
            causes.push(FieldCause::invalid_value(
                path.child("selector").as_str(),
                BadValue::label_selector(selector_value(spec)),
                "`selector` not auto-generated",
            ));
        }
    }
    causes
}

/// `ValidateJobSpec`: `validateJobSpec` and a selector that is there and
/// matches the template.
fn job_spec(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = job_template_spec(spec, path);
    match obj(spec, "selector") {
        None => causes.push(FieldCause::required(path.child("selector").as_str(), "")),
        Some(sel) => causes.extend(label_selector(sel, &path.child("selector"))),
    }
    if obj(spec, "selector")
        .is_none_or(|sel| label_selector(sel, &path.child("selector")).is_empty())
    {
        causes.extend(selector_match(spec, path, false));
    }
    causes
}

/// `validateJobSpec`: counts, modes and the template (restarting
/// `OnFailure` or `Never`).
fn job_template_spec(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        causes.extend(nonnegative(spec, key, path));
    }
    if has(spec, "completionMode") {
        let mode = text(spec, "completionMode");
        if mode != "NonIndexed" && mode != "Indexed" {
            causes.push(FieldCause::not_supported(
                path.child("completionMode").as_str(),
                mode,
                &["NonIndexed", "Indexed"],
            ));
        }
        if mode == "Indexed" && !has(spec, "completions") {
            causes.push(FieldCause::required(
                path.child("completions").as_str(),
                "when completion mode is Indexed",
            ));
        }
    }
    causes.extend(pod::validate_template(
        obj(spec, "template"),
        &path.child("template"),
    ));
    let policy = text(template_spec(spec), "restartPolicy");
    let at = path.at(&["template", "spec", "restartPolicy"]);
    if policy == "Always" || policy.is_empty() {
        causes.push(FieldCause::required(
            at.as_str(),
            "valid values: \"OnFailure\", \"Never\"",
        ));
    } else if policy != "OnFailure" && policy != "Never" {
        causes.push(FieldCause::not_supported(
            at.as_str(),
            policy,
            &["OnFailure", "Never"],
        ));
    }
    causes
}

/// `ValidateJobSpecUpdate`: completions (an indexed job's only with its
/// parallelism), the selector, the template (but a suspended job that
/// never started may change its scheduling directives), the completion
/// mode and failure policies immutable.
fn job_update(old: &Map<String, Value>, new: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let (old_spec, new_spec) = (spec_of(old), spec_of(new));
    let mut causes = Vec::new();
    let immutable = |key: &str| -> Option<FieldCause> {
        let (a, b) = (
            old_spec.get(key).filter(|v| !v.is_null()),
            new_spec.get(key).filter(|v| !v.is_null()),
        );
        (a != b).then(|| {
            let shown = b.map_or(BadValue::Str("null".into()), BadValue::of_json);
            FieldCause::invalid_value(path.child(key).as_str(), shown, FIELD_IMMUTABLE)
        })
    };
    let indexed = text(new_spec, "completionMode") == "Indexed";
    if !indexed {
        causes.extend(immutable("completions"));
    } else if old_spec.get("completions") != new_spec.get("completions") {
        if let Some(completions) = int(new_spec, "completions") {
            if Some(completions) != int(new_spec, "parallelism") {
                causes.push(FieldCause::invalid_value(
                    path.child("completions").as_str(),
                    BadValue::Int(completions),
                    "can only be modified in tandem with spec.parallelism",
                ));
            }
        }
    }
    if selector_value(old_spec) != selector_value(new_spec) {
        causes.push(FieldCause::invalid_value(
            path.child("selector").as_str(),
            BadValue::label_selector(selector_value(new_spec)),
            FIELD_IMMUTABLE,
        ));
    }
    let suspended = new_spec.get("suspend").and_then(Value::as_bool) == Some(true);
    let started = obj(old, "status").is_some_and(|s| has(s, "startTime"));
    let mut old_template = obj(old_spec, "template").cloned().unwrap_or_default();
    let new_template = obj(new_spec, "template").cloned().unwrap_or_default();
    if suspended && !started {
        // Scheduling directives of a job that has not started yet.
        for key in ["labels", "annotations"] {
            let new_value = obj(&new_template, "metadata")
                .and_then(|m| m.get(key))
                .cloned();
            if let Some(meta) = obj_entry(&mut old_template, "metadata") {
                match new_value {
                    Some(v) => meta.insert(key.into(), v),
                    None => meta.remove(key),
                };
            }
        }
        let new_pod = obj(&new_template, "spec").cloned().unwrap_or_default();
        if let Some(pod) = obj_entry(&mut old_template, "spec") {
            for key in ["nodeSelector", "tolerations", "schedulingGates", "affinity"] {
                match new_pod.get(key) {
                    Some(v) => pod.insert(key.into(), v.clone()),
                    None => pod.remove(key),
                };
            }
        }
    }
    if old_template != new_template {
        causes.push(FieldCause::invalid_value(
            path.child("template").as_str(),
            BadValue::Go(Value::Object(new_template).to_string()),
            FIELD_IMMUTABLE,
        ));
    }
    for key in ["completionMode", "podFailurePolicy", "backoffLimitPerIndex"] {
        causes.extend(immutable(key));
    }
    causes
}

/// `validateCronJobSpec`.
fn cron_job(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let schedule = text(spec, "schedule");
    let at = path.child("schedule");
    if schedule.is_empty() {
        causes.push(FieldCause::required(at.as_str(), ""));
    } else {
        if let Err(e) = parse_cron(schedule) {
            causes.push(FieldCause::invalid(at.as_str(), schedule, &e));
        }
        if schedule.contains("TZ") {
            causes.push(FieldCause::invalid(
                at.as_str(),
                schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        }
    }
    causes.extend(nonnegative(spec, "startingDeadlineSeconds", path));
    causes.extend(enum_field(
        spec,
        "concurrencyPolicy",
        &["Allow", "Forbid", "Replace"],
        path,
    ));
    let template = obj(spec, "jobTemplate").unwrap_or(empty());
    let template_path = path.child("jobTemplate");
    let job = obj(template, "spec").unwrap_or(empty());
    causes.extend(job_template_spec(job, &template_path.child("spec")));
    if let Some(sel) = job.get("selector").filter(|v| !v.is_null()) {
        causes.push(FieldCause::invalid_value(
            template_path.at(&["spec", "selector"]).as_str(),
            BadValue::label_selector(Some(sel)),
            "`selector` will be auto-generated",
        ));
    }
    if job.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        causes.push(FieldCause::not_supported_value(
            template_path.at(&["spec", "manualSelector"]).as_str(),
            BadValue::Bool(true),
            &["nil", "false"],
        ));
    }
    causes.extend(nonnegative(spec, "successfulJobsHistoryLimit", path));
    causes.extend(nonnegative(spec, "failedJobsHistoryLimit", path));
    causes
}

/// A standard cron schedule as robfig/cron's `ParseStandard` reads it:
/// a descriptor (`@hourly`, `@every 1h`, ...) or five fields (minute,
/// hour, day of month, month, day of week), each `*`, `?`, values and
/// ranges with steps, separated by commas; errors in its words.
fn parse_cron(schedule: &str) -> Result<(), String> {
    let spec = schedule.trim();
    if let Some(descriptor) = spec.strip_prefix('@') {
        return match descriptor {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            d if d.starts_with("every ") => Ok(()),
            _ => Err(format!("unrecognized descriptor: {spec}")),
        };
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let bounds: [(i64, i64, &[&str], i64); 5] = [
        (0, 59, &[], 0),
        (0, 23, &[], 0),
        (1, 31, &[], 0),
        (1, 12, &MONTHS, 1),
        (0, 6, &DAYS, 0),
    ];
    for (field, (min, max, names, base)) in fields.iter().zip(bounds) {
        for range in field.split(',') {
            cron_range(range, min, max, names, base)?;
        }
    }
    Ok(())
}

fn cron_range(expr: &str, min: i64, max: i64, names: &[&str], base: i64) -> Result<(), String> {
    let parts: Vec<&str> = expr.split('/').collect();
    if parts.len() > 2 {
        return Err(format!("too many slashes: {expr}"));
    }
    let low_high: Vec<&str> = parts[0].split('-').collect();
    if low_high.len() > 2 {
        return Err(format!("too many hyphens: {expr}"));
    }
    let value = |s: &str| -> Result<i64, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(i as i64 + base);
        }
        s.parse::<i64>().map_err(|_| {
            format!("failed to parse int from {s}: strconv.Atoi: parsing \"{s}\": invalid syntax")
        })
    };
    let (start, end) = if low_high[0] == "*" || low_high[0] == "?" {
        (min, max)
    } else {
        let start = value(low_high[0])?;
        let end = match low_high.get(1) {
            Some(e) => value(e)?,
            None => start,
        };
        (start, end)
    };
    if let Some(step) = parts.get(1) {
        let step = value(step)?;
        if step <= 0 {
            return Err(format!("step of range should be a positive number: {expr}"));
        }
    }
    if start < min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({min}): {expr}"
        ));
    }
    if end > max {
        return Err(format!(
            "end of range ({end}) above maximum ({max}): {expr}"
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_schedules_parse_as_robfig_cron_reads_them() {
        for ok in [
            "*/5 * * * *",
            "0 0 1 jan-mar mon,fri",
            "@hourly",
            "@every 1h30m",
            "0-59/15 9-17 * * 1-5",
        ] {
            assert!(parse_cron(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            parse_cron("* * *"),
            Err("expected exactly 5 fields, found 3: [* * *]".into())
        );
        assert_eq!(
            parse_cron("61 * * * *"),
            Err("end of range (61) above maximum (59): 61".into())
        );
        assert_eq!(
            parse_cron("@sometimes"),
            Err("unrecognized descriptor: @sometimes".into())
        );
        assert!(parse_cron("x * * * *")
            .expect_err("not a number")
            .starts_with("failed to parse int from x"));
    }
}

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

use super::{empty, int, obj, Kind, Path};
use crate::kube::error::{BadValue, FieldCause};

mod apps;
mod batch;
mod selector;

use apps::{daemon_set, deployment, replica_set, stateful_set};
use batch::{cron_job, generate_job_selector, generated_selector, job_spec, job_update};
use selector::immutable_selector;

/// kube's `IsNegativeErrorMsg`.
const NEGATIVE: &str = "must be greater than or equal to 0";
const STATEFUL_SET_UPDATE: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

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

fn nonnegative(spec: &Map<String, Value>, key: &str, path: &Path) -> Option<FieldCause> {
    let value = int(spec, key)?;
    (value < 0).then(|| {
        FieldCause::invalid_value(path.child(key).as_str(), BadValue::Int(value), NEGATIVE)
    })
}

fn template_spec(spec: &Map<String, Value>) -> &Map<String, Value> {
    obj(spec, "template")
        .and_then(|t| obj(t, "spec"))
        .unwrap_or(empty())
}

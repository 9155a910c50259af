//! The pod garbage collector's part kubestore needs without kubelets: a
//! pod deleted gracefully is kept until its kubelet stops it and deletes
//! it with a grace period of 0. A pod bound (`spec.nodeName`) to a node
//! that is not a Node object has no kubelet to do that, and kube's pod
//! garbage collector removes such orphaned pods; kubestore removes it once
//! its grace period has passed, with a delete guarded by the uid and
//! revision seen. A pod on a node that exists is its kubelet's.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::kube::deletion;

/// What to do about one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing: not in a grace period, or its kubelet's to finish.
    Nothing,
    /// Look again at this time (its grace period ends then).
    WaitUntil(DateTime<Utc>),
    /// Its grace period has passed and no kubelet will delete it.
    DeleteNow,
}

/// The node a pod is bound to, if any.
pub fn node_name(pod: &Map<String, Value>) -> Option<&str> {
    pod.get("spec")
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

/// Decides on `pod` at `now`, given whether its node is a Node object.
pub fn verdict(pod: &Map<String, Value>, node_exists: bool, now: DateTime<Utc>) -> Verdict {
    if !deletion::is_being_deleted(pod) || deletion::deletion_grace_period(pod) == 0 {
        // Not deleted gracefully: finalizers and the store decide.
        return Verdict::Nothing;
    }
    if node_name(pod).is_some() && node_exists {
        return Verdict::Nothing;
    }
    match deletion::deletion_deadline(pod) {
        Some(deadline) if deadline > now => Verdict::WaitUntil(deadline),
        _ => Verdict::DeleteNow,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(ts: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(ts)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(|e| panic!("{ts}: {e}"))
    }

    fn pod(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object"),
        }
    }

    #[test]
    fn a_pod_whose_node_is_no_node_goes_when_its_grace_period_ends() {
        let p = pod(json!({"metadata": {"name": "p",
            "deletionTimestamp": "2026-01-01T00:00:30Z", "deletionGracePeriodSeconds": 30},
            "spec": {"nodeName": "gone"}}));
        assert_eq!(
            verdict(&p, false, at("2026-01-01T00:00:10Z")),
            Verdict::WaitUntil(at("2026-01-01T00:00:30Z"))
        );
        assert_eq!(
            verdict(&p, false, at("2026-01-01T00:00:30Z")),
            Verdict::DeleteNow
        );
        // Its kubelet's, when the node exists.
        assert_eq!(
            verdict(&p, true, at("2026-01-01T00:01:00Z")),
            Verdict::Nothing
        );
    }

    #[test]
    fn pods_not_in_a_grace_period_are_left_alone() {
        let live = pod(json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n"}}));
        assert_eq!(
            verdict(&live, false, at("2026-01-01T00:00:00Z")),
            Verdict::Nothing
        );
        // Held by a finalizer after a delete without grace: not ours.
        let held = pod(json!({"metadata": {"name": "p", "finalizers": ["x/y"],
            "deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0},
            "spec": {"nodeName": "n"}}));
        assert_eq!(
            verdict(&held, false, at("2026-01-02T00:00:00Z")),
            Verdict::Nothing
        );
    }
}

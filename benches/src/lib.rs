//! kubestore's micro-benchmarks (criterion, in `benches/benches/`) and the
//! fixtures they share. The load generator — throughput and latency of a
//! running cluster, and the side-by-side comparison with etcd — is the
//! `kubestore bench` subcommand of the main binary.
//!
//! Benchmarks are programs: nothing here asserts a timing.

use serde_json::{json, Value};

/// A configmap of about 1 KiB, labelled `app=web` (even `i`) or `app=db`.
pub fn configmap(i: usize) -> Value {
    json!({
        "metadata": {
            "name": format!("cm-{i:05}"),
            "namespace": "default",
            "uid": format!("uid-{i}"),
            "labels": { "app": if i.is_multiple_of(2) { "web" } else { "db" }, "tier": "a" },
        },
        "data": { "value": "x".repeat(1024) },
    })
}

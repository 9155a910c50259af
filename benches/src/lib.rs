//! kubestore's benchmarks: the load generator behind `kubestore bench`
//! ([`load`]: throughput and latency of running endpoints, and the
//! side-by-side comparison with etcd), and the criterion micro-benchmarks
//! of the hot paths (in `benches/benches/`) with the fixtures they share.
//! `benches/examples/cache_memory.rs` measures what one object costs in
//! the watch cache, in-process.
//!
//! It depends on the server only for shared constants and never the other
//! way round, so the server does not link the histogram, progress-bar and
//! plotting crates. Benchmarks are programs: nothing here asserts a timing.

pub mod load;

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

//! What one object costs in the watch cache, in-process and without a
//! cluster: decodes 100,000 stored ConfigMaps of about 1 KiB of JSON (the
//! shape a REST create stores, managed fields included) into the cache's
//! `Objects` map and reads the growth of this process's RSS, as fed (each
//! object its stored bytes) and once every object is rendered (as the first
//! list renders them), then does the
//! same for the parsed `serde_json::Value`s alone: what each object would
//! cost again if the cache kept its tree beside its JSON (it did until
//! 2026-11-26).
//!
//! `cargo run --release -p kubestore-benches --example cache_memory`
//!
//! RSS is what the machine pays; the allocator may keep freed memory, so
//! the cache is measured first, on a fresh heap.

use std::sync::Arc;

use anyhow::Context;
use kubestore_server::kube::cache::{CachedObject, Objects, WatchEventType};
use serde_json::{json, Value};

const OBJECTS: usize = 100_000;

fn rss_bytes() -> anyhow::Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .context("no VmRSS")?
        .parse()?;
    Ok(kib * 1024.0)
}

fn main() -> anyhow::Result<()> {
    let rt = kubestore_server::kube::resources::find("", "v1", "configmaps")
        .context("configmaps are served")?;
    let stored: Vec<Vec<u8>> = (0..OBJECTS)
        .map(|i| {
            serde_json::to_vec(&json!({
                "metadata": {
                    "name": format!("configmap-{i:07}"),
                    "namespace": "scale",
                    "uid": "c0a8b5e2-1111-2222-3333-444455556666",
                    "creationTimestamp": "2026-11-25T03:30:52Z",
                    "managedFields": [{
                        "manager": "reqwest",
                        "operation": "Update",
                        "apiVersion": "v1",
                        "time": "2026-11-25T03:30:52Z",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": { "f:data": { ".": {}, "f:value": {} } },
                    }],
                },
                "data": { "value": "x".repeat(624) },
            }))
        })
        .collect::<Result<_, _>>()?;
    let n = OBJECTS as f64;

    let before = rss_bytes()?;
    let mut objects = Objects::new();
    let mut stored_counted = 0;
    for (i, value) in stored.iter().enumerate() {
        let key = format!("/registry/configmaps/scale/configmap-{i:07}");
        let object = CachedObject::decode(
            rt,
            key.as_bytes(),
            value,
            5 + i as u64,
            WatchEventType::Added,
        )
        .context("a stored object decodes")?;
        stored_counted += object.heap_bytes();
        objects.insert(Arc::new(object));
    }
    // As fed: each object its stored bytes, not rendered yet.
    let fed = (rss_bytes()? - before) / n;

    // As read: the first reader renders each object, which then drops its
    // stored bytes (the allocator may keep those: the RSS is an upper bound).
    let (mut json_bytes, mut counted) = (0, 0);
    for object in objects.values() {
        json_bytes += object.json().len();
        counted += object.heap_bytes();
    }
    let cache = (rss_bytes()? - before) / n;

    let before = rss_bytes()?;
    let parsed: Vec<Value> = stored
        .iter()
        .map(|v| serde_json::from_slice(v))
        .collect::<Result<_, _>>()?;
    let values = (rss_bytes()? - before) / n;

    let json = json_bytes as f64 / n;
    let (stored_counted, counted) = (stored_counted as f64 / n, counted as f64 / n);
    println!(
        "{OBJECTS} ConfigMaps of {json:.0} bytes of JSON: the watch cache holds each, as fed, in \
         {fed:.0} bytes ({:.1}x its JSON; {stored_counted:.0} of them its key and stored bytes) and, \
         rendered, in at most {cache:.0} bytes ({:.1}x; {counted:.0} of them its key, line and \
         selector attributes); a parsed serde_json::Value of one, which the cache does not keep, \
         is about {values:.0} bytes",
        fed / json,
        cache / json
    );
    drop((objects, parsed));
    Ok(())
}

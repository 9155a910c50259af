//! `write_load`: creates configmaps through the Kubernetes REST API of a
//! running kubestore cluster with C concurrent clients spread over its
//! nodes, and reports throughput and latency percentiles.
//!
//! ```text
//! cargo run --release -p kubestore-benches --bin write_load -- \
//!     --endpoints http://127.0.0.1:8080,http://127.0.0.1:8081,http://127.0.0.1:8082 \
//!     --clients 64 --requests 20000 --size 1024
//! ```
//!
//! It also reads `/debug/cluster` before and after, to report how many Raft
//! log entries the writes took (entries per write < 1 would mean batching
//! of commands; today each write is one entry).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

#[derive(Debug, Parser)]
struct Args {
    /// Comma-separated REST base URLs; clients are spread over them.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:8080")]
    endpoints: Vec<String>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Total writes.
    #[arg(long, default_value_t = 10_000)]
    requests: u64,
    /// Bytes of data per object.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Namespace to write into (must exist).
    #[arg(long, default_value = "default")]
    namespace: String,
}

async fn applied_index(client: &reqwest::Client, endpoint: &str) -> anyhow::Result<u64> {
    let s: Value = client
        .get(format!("{endpoint}/debug/cluster"))
        .send()
        .await?
        .json()
        .await?;
    Ok(s["applied_index"].as_u64().unwrap_or(0))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.clients)
        .build()?;
    let run = format!("load-{}", std::process::id());
    let payload = "x".repeat(args.size);
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let index_before = applied_index(&client, &args.endpoints[0]).await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let endpoint = args.endpoints[c % args.endpoints.len()].clone();
        let (client, next, errors, run, payload, ns) = (
            client.clone(),
            next.clone(),
            errors.clone(),
            run.clone(),
            payload.clone(),
            args.namespace.clone(),
        );
        let total = args.requests;
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
            let url = format!("{endpoint}/api/v1/namespaces/{ns}/configmaps");
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let body = json!({"metadata": {"name": format!("{run}-{i}")}, "data": {"payload": payload}});
                let t = Instant::now();
                match client.post(&url).json(&body).send().await {
                    Ok(r) if r.status().as_u16() == 201 => {
                        let _ = hist.record(t.elapsed().as_micros() as u64);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            hist
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for t in tasks {
        hist.add(t.await?)?;
    }
    let elapsed = started.elapsed();
    let index_after = applied_index(&client, &args.endpoints[0]).await?;
    let ok = hist.len();
    let ms = |q: f64| Duration::from_micros(hist.value_at_quantile(q)).as_secs_f64() * 1000.0;
    println!(
        "writes: {ok} ok, {} errors in {:.2} s with {} clients over {} endpoints, {} B objects",
        errors.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        args.clients,
        args.endpoints.len(),
        args.size
    );
    println!(
        "throughput: {:.0} writes/s",
        ok as f64 / elapsed.as_secs_f64()
    );
    println!(
        "latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(0.999),
        Duration::from_micros(hist.max()).as_secs_f64() * 1000.0
    );
    println!(
        "raft log entries applied during the run: {} ({:.2} per write)",
        index_after.saturating_sub(index_before),
        index_after.saturating_sub(index_before) as f64 / ok.max(1) as f64
    );
    Ok(())
}

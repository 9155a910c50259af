//! `kubestore bench restart`: how long a node holding many keys takes to
//! serve again after a crash.
//!
//! It starts a 3-node kubestore under `--out`, loads `--keys` keys through
//! the etcd API (transactions of `--batch` puts, as a bulk loader would),
//! then, once for a follower and once for the leader: kills the node
//! (SIGKILL, no shutdown), starts it again on the same data, and measures
//! from the spawn to
//! - **ready**: `/readyz` answers 200 (the node knows a leader), and
//! - **caught up**: a serializable Range on that node counts every loaded
//!   key at the cluster's revision from before the kill.
//!
//! Polling the restarted process every 10 ms is the measurement itself
//! (there is no event to await in another process), so the figures carry
//! up to 10 ms of polling granularity.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use kubestore_proto::etcd::etcdserverpb::kv_client::KvClient;
use kubestore_proto::etcd::etcdserverpb::{
    request_op, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use serde_json::json;
use tonic::transport::Channel;

use super::compare::{fresh_data_dir, fsync_rate, kubestore_specs, wait_ready, NodeSpec};
use super::record::progress;

const PREFIX: &str = "bench/restart/";

#[derive(Debug, Args)]
pub struct RestartArgs {
    /// Keys to load before the restarts.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 256)]
    pub size: usize,
    /// Puts per loading transaction (etcd allows at most 128).
    #[arg(long, default_value_t = 128)]
    pub batch: u64,
    /// Concurrent loading clients.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Where restart-results.json, logs and (while running) data go.
    #[arg(long, default_value = "bench-restart")]
    pub out: PathBuf,
    /// Keep the data directories afterwards.
    #[arg(long)]
    pub keep_data: bool,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

async fn kv_client(endpoint: &str) -> anyhow::Result<KvClient<Channel>> {
    let channel = Channel::from_shared(format!("http://{endpoint}"))?
        .connect()
        .await?;
    Ok(KvClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20))
}

/// Loads `keys` keys in transactions of `batch` puts from `clients` clients.
async fn load(specs: &[NodeSpec], args: &RestartArgs) -> anyhow::Result<f64> {
    let txns = args.keys.div_ceil(args.batch.max(1));
    let next = Arc::new(AtomicU64::new(0));
    let bar = progress(
        args.keys,
        "loading",
        "{prefix} {bar:40} {pos}/{len} keys {per_sec} eta {eta}",
        args.no_progress,
    );
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..args.clients.max(1) {
        let mut kv = kv_client(&specs[c % specs.len()].grpc).await?;
        let (next, bar) = (next.clone(), bar.clone());
        let (keys, batch, value) = (args.keys, args.batch.max(1), vec![b'v'; args.size]);
        tasks.push(tokio::spawn(async move {
            loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                if t >= txns {
                    return anyhow::Ok(());
                }
                let first = t * batch;
                let last = (first + batch).min(keys);
                let success = (first..last)
                    .map(|k| RequestOp {
                        request: Some(request_op::Request::RequestPut(PutRequest {
                            key: format!("{PREFIX}{k:010}").into_bytes(),
                            value: value.clone(),
                            ..Default::default()
                        })),
                    })
                    .collect();
                kv.txn(TxnRequest {
                    success,
                    ..Default::default()
                })
                .await
                .with_context(|| format!("loading keys {first}..{last}"))?;
                bar.inc(last - first);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    bar.finish_and_clear();
    Ok(args.keys as f64 / started.elapsed().as_secs_f64())
}

/// The node's view of the cluster from `/debug/cluster`.
pub(super) async fn leader_of(http: &reqwest::Client, spec: &NodeSpec) -> anyhow::Result<u64> {
    let status: serde_json::Value = http
        .get(format!("http://{}/debug/cluster", spec.rest))
        .send()
        .await?
        .json()
        .await?;
    status["leader_id"]
        .as_u64()
        .context("no leader in /debug/cluster")
}

/// Whether the node's `/readyz` answers 200.
pub(super) async fn is_ready(http: &reqwest::Client, spec: &NodeSpec) -> bool {
    http.get(format!("http://{}/readyz", spec.rest))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Keys under the prefix and the revision, read on `endpoint` without a
/// quorum round: what that node itself has applied.
async fn local_count(endpoint: &str) -> anyhow::Result<(i64, i64)> {
    let mut kv = kv_client(endpoint).await?;
    let resp = kv
        .range(RangeRequest {
            key: PREFIX.as_bytes().to_vec(),
            range_end: kubestore_storage::prefix_end(PREFIX.as_bytes()),
            count_only: true,
            serializable: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok((resp.count, resp.header.map_or(0, |h| h.revision)))
}

#[derive(Debug, serde::Serialize)]
struct Restart {
    role: &'static str,
    node: u64,
    /// Spawn to `/readyz` 200.
    ready_seconds: f64,
    /// Spawn to every key readable locally at the pre-kill revision.
    caught_up_seconds: f64,
}

/// Kills `spec`'s process, starts it again and times its way back.
async fn restart(
    http: &reqwest::Client,
    role: &'static str,
    spec: &NodeSpec,
    child: &mut tokio::process::Child,
    keys: u64,
    revision: i64,
) -> anyhow::Result<Restart> {
    child.kill().await?;
    let started = Instant::now();
    *child = spec.spawn()?;
    let deadline = started + Duration::from_secs(120);
    let mut ready = None;
    let caught_up = loop {
        if Instant::now() > deadline {
            bail!("node {} was not back within 120 s", spec.id);
        }
        if ready.is_none() && is_ready(http, spec).await {
            ready = Some(started.elapsed());
        }
        if ready.is_some() {
            if let Ok((count, rev)) = local_count(&spec.grpc).await {
                if count as u64 == keys && rev >= revision {
                    break started.elapsed();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let ready = ready.unwrap_or(caught_up);
    Ok(Restart {
        role,
        node: spec.id,
        ready_seconds: ready.as_secs_f64(),
        caught_up_seconds: caught_up.as_secs_f64(),
    })
}

pub(super) fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

pub async fn run(args: RestartArgs) -> anyhow::Result<()> {
    let data = fresh_data_dir(&args.out)?;
    let fsyncs = fsync_rate(&data)?;
    let specs = kubestore_specs(&data, kubestore_server::config::DEFAULT_READ_LEASE_MS)?;
    let mut children = specs
        .iter()
        .map(NodeSpec::spawn)
        .collect::<Result<Vec<_>, _>>()?;
    let grpc: Vec<String> = specs.iter().map(|s| s.grpc.clone()).collect();
    wait_ready("kubestore", &grpc, &mut children).await?;
    let http = reqwest::Client::new();

    let outcome = async {
        let load_rate = load(&specs, &args).await?;
        println!("loaded {} keys at {load_rate:.0} keys/s", args.keys);
        let leader = leader_of(&http, &specs[0]).await?;
        let leader_at = specs
            .iter()
            .position(|s| s.id == leader)
            .context("leader is not a member")?;
        let follower_at = (leader_at + 1) % specs.len();
        let mut restarts = Vec::new();
        for (role, at) in [("follower", follower_at), ("leader", leader_at)] {
            // The cluster's revision, read through another node.
            let other = &specs[(at + 2) % specs.len()];
            let (count, revision) = local_count(&other.grpc).await?;
            if count as u64 != args.keys {
                bail!("node {} counts {count} keys, expected {}", other.id, args.keys);
            }
            let node_bytes = dir_bytes(&specs[at].data_dir);
            let r = restart(&http, role, &specs[at], &mut children[at], args.keys, revision).await?;
            println!(
                "restart of the {role} (node {}, {:.0} MiB on disk): ready in {:.2} s, all {} keys readable in {:.2} s",
                r.node,
                node_bytes as f64 / (1 << 20) as f64,
                r.ready_seconds,
                args.keys,
                r.caught_up_seconds
            );
            restarts.push((r, node_bytes));
            wait_ready("kubestore", &grpc, &mut children).await?;
        }
        anyhow::Ok((load_rate, restarts))
    }
    .await;
    for c in &mut children {
        let _ = c.kill().await;
    }
    let (load_rate, restarts) = outcome?;
    let results = json!({
        "keys": args.keys,
        "value_bytes": args.size,
        "disk_fsyncs_per_second": fsyncs,
        "load_keys_per_second": load_rate,
        "restarts": restarts
            .iter()
            .map(|(r, bytes)| json!({
                "role": r.role,
                "node": r.node,
                "data_bytes": bytes,
                "ready_seconds": r.ready_seconds,
                "caught_up_seconds": r.caught_up_seconds,
            }))
            .collect::<Vec<_>>(),
    });
    std::fs::write(
        args.out.join("restart-results.json"),
        serde_json::to_vec_pretty(&results)?,
    )?;
    if !args.keep_data {
        std::fs::remove_dir_all(&data).ok();
    }
    println!(
        "results in {}",
        args.out.join("restart-results.json").display()
    );
    Ok(())
}

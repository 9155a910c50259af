//! The workloads, the closed-loop runner and the result table.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hyper::Method;
use kubestore_proto::etcd::etcdserverpb::kv_client::KvClient;
use kubestore_proto::etcd::etcdserverpb::maintenance_client::MaintenanceClient;
use kubestore_proto::etcd::etcdserverpb::{PutRequest, RangeRequest, StatusRequest};
use serde_json::json;
use tonic::transport::Channel;

use super::args::LoadArgs;
use super::h2_channel::H2Channel;
use super::record::{progress, Recorder, RunResult, WORKLOAD_BAR};
use super::rest_conn::{Answer, ConfigMapBody, ConfigMapData, Name, RestConn};

/// Keys the put workload spreads over (etcd's benchmark default).
const PUT_KEY_SPACE: u64 = 10_000;
/// The key the range workloads read.
const RANGE_KEY: &str = "bench/range";
/// The namespace of the REST workloads.
pub const REST_NAMESPACE: &str = "bench";

/// What one request does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    EtcdPut,
    EtcdRange {
        serializable: bool,
    },
    RestCreate,
    /// Unconditional updates spread over the first `targets` seeded objects.
    RestUpdate {
        targets: u64,
    },
    /// A GET of this path under the bench namespace's configmaps.
    RestRead {
        name: &'static str,
        query: String,
    },
    /// A list followed through every `continue` token.
    RestPaginated {
        limit: u64,
    },
}

impl Workload {
    pub fn etcd(name: &str) -> anyhow::Result<Self> {
        Ok(match name {
            "put" => Workload::EtcdPut,
            "range_linearizable" => Workload::EtcdRange {
                serializable: false,
            },
            "range_serializable" => Workload::EtcdRange { serializable: true },
            other => bail!("unknown etcd workload {other:?}"),
        })
    }

    /// A REST workload over `objects` seeded configmaps.
    pub fn rest(name: &str, objects: usize) -> anyhow::Result<Self> {
        let read = |name: &'static str, query: &str| Workload::RestRead {
            name,
            query: query.to_string(),
        };
        Ok(match name {
            "create" => Workload::RestCreate,
            "update" => Workload::RestUpdate {
                targets: objects.clamp(1, 100) as u64,
            },
            "get_quorum" => read("get_quorum", "/cm-000000"),
            "get_any" => read("get_any", "/cm-000000?resourceVersion=0"),
            "list_quorum" => read("list_quorum", ""),
            "list_any" => read("list_any", "?resourceVersion=0"),
            "list_not_older_than" => read(
                "list_not_older_than",
                "?resourceVersion=1&resourceVersionMatch=NotOlderThan",
            ),
            "list_exact" => read("list_exact", "?resourceVersionMatch=Exact&resourceVersion="),
            "list_paginated" => Workload::RestPaginated { limit: 500 },
            other => bail!("unknown REST workload {other:?}"),
        })
    }

    pub fn name(&self) -> String {
        match self {
            Workload::EtcdPut => "put".into(),
            Workload::EtcdRange {
                serializable: false,
            } => "range_linearizable".into(),
            Workload::EtcdRange { serializable: true } => "range_serializable".into(),
            Workload::RestCreate => "create".into(),
            Workload::RestUpdate { .. } => "update".into(),
            Workload::RestRead { name, .. } => (*name).into(),
            Workload::RestPaginated { .. } => "list_paginated".into(),
        }
    }
}

fn finish(
    workload: &Workload,
    clients: usize,
    requests: u64,
    elapsed: Duration,
    rec: Recorder,
) -> RunResult {
    let errors = rec.errors();
    rec.result_with(
        &workload.name(),
        clients,
        requests,
        errors,
        elapsed.as_secs_f64(),
    )
}

pub(super) async fn etcd_channel(endpoint: &str) -> anyhow::Result<Channel> {
    let url = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    Channel::from_shared(url.clone())?
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// Which of `endpoints` is the member that leads now, by the members' own
/// `Status` (the id it answers with equals the leader it knows). Asks
/// again until one does, for up to `wait` (an election may be running).
pub async fn leader_endpoint(endpoints: &[String], wait: Duration) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        for endpoint in endpoints {
            // A member that hangs is asked no longer than the wait allows.
            let probe = async {
                let channel = etcd_channel(endpoint).await.ok()?;
                let status = MaintenanceClient::new(channel)
                    .status(StatusRequest {})
                    .await
                    .ok()?
                    .into_inner();
                let member = status.header.as_ref().map_or(0, |h| h.member_id);
                Some(status.leader != 0 && member == status.leader)
            };
            if let Ok(Some(true)) = tokio::time::timeout_at(deadline, probe).await {
                return Ok(endpoint.clone());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("none of {endpoints:?} says it leads");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs an etcd-API workload with `clients` concurrent clients (one
/// connection each, an [`H2Channel`]), spread over `endpoints`.
pub async fn run_etcd(
    workload: &Workload,
    endpoints: &[String],
    clients: usize,
    load: &LoadArgs,
) -> anyhow::Result<RunResult> {
    let mut conns = Vec::new();
    for i in 0..clients.max(1) {
        conns.push(KvClient::new(
            H2Channel::connect(&endpoints[i % endpoints.len()]).await?,
        ));
    }
    if let Workload::EtcdRange { .. } = workload {
        conns[0]
            .put(PutRequest {
                key: RANGE_KEY.into(),
                value: vec![b'x'; load.size],
                ..Default::default()
            })
            .await?;
    }
    let value = Arc::new(vec![b'x'; load.size]);
    let workload_op = workload.clone();
    closed_loop(
        workload,
        conns,
        load,
        move |mut kv: KvClient<H2Channel>, i| {
            let (workload, value) = (workload_op.clone(), value.clone());
            async move {
                match &workload {
                    Workload::EtcdPut => {
                        kv.put(PutRequest {
                            key: format!("bench/{:08}", i % PUT_KEY_SPACE).into_bytes(),
                            value: value.to_vec(),
                            ..Default::default()
                        })
                        .await?;
                    }
                    Workload::EtcdRange { serializable } => {
                        kv.range(RangeRequest {
                            key: RANGE_KEY.into(),
                            serializable: *serializable,
                            ..Default::default()
                        })
                        .await?;
                    }
                    _ => bail!("not an etcd workload"),
                }
                Ok(None)
            }
        },
    )
    .await
}

/// Runs `op(client, i)` for requests `i` in `0..load.requests` from one
/// task per client (closed loop: each client waits for its answer), with a
/// progress bar; records latencies, errors and how reads were served.
async fn closed_loop<C, F, Fut>(
    workload: &Workload,
    clients: Vec<C>,
    load: &LoadArgs,
    op: F,
) -> anyhow::Result<RunResult>
where
    C: Clone + Send + 'static,
    F: Fn(C, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<Option<String>>> + Send,
{
    let count = clients.len();
    let rec = Arc::new(Recorder::new()?);
    let next = Arc::new(AtomicU64::new(0));
    let bar = progress(
        load.requests,
        &format!("{} c{count}", workload.name()),
        WORKLOAD_BAR,
        load.no_progress,
    );
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in clients {
        let (rec, next, bar, op) = (rec.clone(), next.clone(), bar.clone(), op.clone());
        let total = load.requests;
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let t = Instant::now();
                match op(client.clone(), i).await {
                    Ok(served) => rec.ok(t, served),
                    Err(e) => rec.err(&e),
                }
                bar.inc(1);
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    let rec = Arc::try_unwrap(rec).map_err(|_| anyhow::anyhow!("recorder still shared"))?;
    Ok(finish(workload, count, load.requests, elapsed, rec))
}

/// Creates the bench namespace and `objects` configmaps in it, if missing.
pub async fn seed_rest(endpoints: &[String], objects: usize, size: usize) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let base = &endpoints[0];
    let r = client
        .post(format!("{base}/api/v1/namespaces"))
        .json(&json!({ "metadata": { "name": REST_NAMESPACE } }))
        .send()
        .await?;
    if !(r.status().is_success() || r.status().as_u16() == 409) {
        bail!("creating namespace {REST_NAMESPACE}: {}", r.status());
    }
    let cms = format!("{base}/api/v1/namespaces/{REST_NAMESPACE}/configmaps");
    let bar = progress(objects as u64, "seeding configmaps", WORKLOAD_BAR, false);
    for i in 0..objects {
        let r = client
            .post(&cms)
            .json(&json!({
                "metadata": { "name": format!("cm-{i:06}") },
                "data": { "value": "x".repeat(size) },
            }))
            .send()
            .await?;
        if !(r.status().is_success() || r.status().as_u16() == 409) {
            bail!("seeding cm-{i:06}: {}", r.status());
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

/// Runs a REST workload with `clients` concurrent clients (one
/// keep-alive connection each, a [`RestConn`]) spread over `endpoints`.
pub async fn run_rest(
    workload: &Workload,
    endpoints: &[String],
    clients: usize,
    load: &LoadArgs,
) -> anyhow::Result<RunResult> {
    let http = reqwest::Client::new();
    // Exact reads need a revision the store still has: the current one.
    let current: serde_json::Value = http
        .get(format!(
            "{}/api/v1/namespaces/{REST_NAMESPACE}/configmaps?limit=1",
            endpoints[0]
        ))
        .send()
        .await?
        .json()
        .await?;
    let current_rv = current["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    // Created names are unique per run: a process may run `create` twice.
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let payload = Arc::new("x".repeat(load.size));
    let collection = format!("/api/v1/namespaces/{REST_NAMESPACE}/configmaps");
    let mut conns = Vec::new();
    for c in 0..clients.max(1) {
        conns.push(RestConn::connect(&endpoints[c % endpoints.len()], &collection).await?);
    }
    let workload_op = workload.clone();
    let (run_id, current_rv): (Arc<str>, Arc<str>) = (run_id.into(), current_rv.into());
    closed_loop(workload, conns, load, move |conn: RestConn, i| {
        let (workload, payload, current_rv, run_id) = (
            workload_op.clone(),
            payload.clone(),
            current_rv.clone(),
            run_id.clone(),
        );
        async move { rest_once(&conn, &workload, i, &run_id, &payload, &current_rv).await }
    })
    .await
}

/// One REST request (or, paginated, one whole traversal); how the server
/// says it served it.
async fn rest_once(
    conn: &RestConn,
    workload: &Workload,
    i: u64,
    run_id: &str,
    payload: &str,
    current_rv: &str,
) -> anyhow::Result<Option<String>> {
    let check = |answer: Answer| -> anyhow::Result<Answer> {
        if answer.status.is_success() {
            Ok(answer)
        } else {
            bail!("HTTP {}", answer.status)
        }
    };
    let base = &*conn.collection;
    match workload {
        Workload::RestCreate => {
            let name = format!("w-{run_id}-{i}");
            let body = ConfigMapBody {
                metadata: Name { name: &name },
                data: ConfigMapData {
                    value: payload,
                    n: None,
                },
            };
            check(
                conn.request(Method::POST, base, Some(body.to_json()?))
                    .await?,
            )?;
            Ok(None)
        }
        Workload::RestUpdate { targets } => {
            let name = format!("cm-{:06}", i % targets);
            let n = i.to_string();
            let body = ConfigMapBody {
                metadata: Name { name: &name },
                data: ConfigMapData {
                    value: payload,
                    n: Some(&n),
                },
            };
            let path = format!("{base}/{name}");
            check(
                conn.request(Method::PUT, &path, Some(body.to_json()?))
                    .await?,
            )?;
            Ok(None)
        }
        Workload::RestRead { query, name } => {
            let path = if *name == "list_exact" {
                format!("{base}{query}{current_rv}")
            } else {
                format!("{base}{query}")
            };
            Ok(check(conn.request(Method::GET, &path, None).await?)?.served)
        }
        Workload::RestPaginated { limit } => {
            let mut token: Option<String> = None;
            let mut how = None;
            loop {
                let path = match &token {
                    Some(t) => format!("{base}?limit={limit}&continue={t}"),
                    None => format!("{base}?limit={limit}"),
                };
                let answer = check(conn.request(Method::GET, &path, None).await?)?;
                how = how.or(answer.served);
                let page: serde_json::Value = serde_json::from_slice(&answer.body)?;
                match page["metadata"]["continue"].as_str() {
                    Some(t) if !t.is_empty() => token = Some(t.to_string()),
                    _ => return Ok(how),
                }
            }
        }
        Workload::EtcdPut | Workload::EtcdRange { .. } => bail!("not a REST workload"),
    }
}

/// The terminal table of a set of runs.
pub fn table(title: &str, runs: &[RunResult]) -> String {
    let mut out = format!(
        "{title}\n{:<10} {:<22} {:>7} {:>10} {:>8} {:>8} {:>8} {:>9} {:>7}  served\n",
        "store", "workload", "clients", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "errors"
    );
    for r in runs {
        let served: Vec<String> = r.served.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!(
            "{:<10} {:<22} {:>7} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>7}  {}\n",
            r.store,
            r.workload,
            r.clients,
            r.throughput,
            r.p50_ms,
            r.p90_ms,
            r.p99_ms,
            r.p999_ms,
            r.errors,
            served.join(" ")
        ));
    }
    out
}

//! `kubestore bench compare`: etcd and kubestore side by side, same
//! machine, same client code, same durability (both fsync their log before
//! acknowledging a write).
//!
//! It starts a 3-member etcd (the `etcd` binary, Debian's 3.4) and a
//! 3-node kubestore (this binary's `serve`), each with data under the
//! output directory, runs every etcd-API workload against one store and
//! then the other (the puts at 64 clients once more on each, straight
//! after, with every client on the leader), then kubestore's REST creates
//! and updates of the same size, and writes `results.json` (top-level
//! `ratios`: kubestore/etcd throughput per workload; `forwarding`: per
//! store, the spread puts' rate and server CPU against the leader-only
//! ones', what forwarding a follower's writes costs; `rest_ratios`:
//! kubestore's REST write rate over its own etcd-API put rate at the same
//! clients, the price of the
//! Kubernetes layer; `kubestore_stages`: where kubestore's writes spent
//! their time, stage by stage, on the leader and on the followers, from
//! the nodes' `/metrics`; `runs`: every figure of both stores), plots and
//! the disk's fsync rate.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use kubestore_proto::etcd::etcdserverpb::kv_client::KvClient;
use kubestore_proto::etcd::etcdserverpb::RangeRequest;
use kubestore_server::ServeConfig;
use serde_json::json;
use tokio::process::{Child, Command};

use super::args::LoadArgs;
use super::cpu::{CpuSample, CpuSpent};
use super::plot;
use super::record::RunResult;
use super::stages::StageSample;
use super::workload::{self, Workload};

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A short run (under 3 minutes): fewer requests per workload.
    #[arg(long)]
    pub quick: bool,
    /// Where results.json, the plots, logs and (while running) data go.
    #[arg(long, default_value = "bench-compare")]
    pub out: PathBuf,
    /// The etcd server binary.
    #[arg(long, default_value = "etcd")]
    pub etcd: PathBuf,
    /// Keep both stores' data directories afterwards.
    #[arg(long)]
    pub keep_data: bool,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
    /// Requests per workload, overriding the quick or full sizes (the test
    /// suite runs a tiny comparison with it).
    #[arg(long)]
    pub requests: Option<u64>,
    /// kubestore's read lease (`serve --read-lease-ms`); 0 makes every
    /// linearizable read run a heartbeat round, as etcd's do.
    #[arg(long, default_value_t = kubestore_server::config::DEFAULT_READ_LEASE_MS)]
    pub read_lease_ms: u64,
    /// `--snapshot-after-entries`, if not the default.
    pub snapshot_after_entries: Option<u64>,
    /// `--snapshot-catch-up-entries`, if not the default.
    pub snapshot_catch_up_entries: Option<u64>,
}

/// The workloads compared, as `(key in ratios, workload, clients)`.
const PLAN: [(&str, &str, usize); 4] = [
    ("put_c64", "put", 64),
    ("put_c256", "put", 256),
    ("range_linearizable", "range_linearizable", 64),
    ("range_serializable", "range_serializable", 64),
];

/// The write workload run again with every client on the leader, on each
/// store straight after its spread run of [`PLAN`], as `(key, workload,
/// clients, spread key)`: its key under `cpu`, and the key of the spread
/// run it is set against. The difference is what forwarding a follower's
/// writes to the leader costs each store.
const ON_LEADER: (&str, &str, usize, &str) = ("put_c64_on_leader", "put", 64, "put_c64");

/// The workload name [`ON_LEADER`]'s runs are reported under in `runs`
/// (their key under `cpu` is [`ON_LEADER`]'s first field).
const ON_LEADER_WORKLOAD: &str = "put_on_leader";

/// The Kubernetes-layer workloads, run on kubestore alone after [`PLAN`],
/// as `(key in rest_ratios, REST workload, clients, the etcd-API run of
/// kubestore it is divided by)`.
const REST_PLAN: [(&str, &str, usize, &str); 2] = [
    ("rest_create_c64", "create", 64, "put"),
    ("rest_update_c64", "update", 64, "put"),
];

/// How long [`ON_LEADER`] waits for a member to say it leads.
const LEADER_WAIT: Duration = Duration::from_secs(10);

/// ConfigMaps seeded for the REST updates (which spread over 100).
const REST_SEEDED: usize = 100;

/// A port nothing listens on, below Linux's ephemeral range (32768 and
/// up), and not handed out before by this process. A port the kernel hands
/// out for `bind(0)` comes from that range, and between probing it and the
/// server binding it, any outgoing connection on the machine (the load
/// generator's, a parallel test's) may take it as its local port; then that
/// node never starts. The probe releases the port at once, so without the
/// record two members could be given the same one.
fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT
        .lock()
        .map_err(|_| anyhow::anyhow!("port record poisoned"))?;
    for _ in 0..1000 {
        let port = rand::random_range(10_000..32_000);
        if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return Ok(port);
        }
    }
    bail!("no free port found between 10000 and 32000")
}

/// Three running processes of one store, killed on drop.
struct Cluster {
    endpoints: Vec<String>,
    /// The REST base URLs (kubestore only).
    rest: Vec<String>,
    children: Vec<Child>,
}

impl Cluster {
    /// The servers' process ids (a killed one is left out).
    fn pids(&self) -> Vec<u32> {
        self.children.iter().filter_map(Child::id).collect()
    }

    async fn stop(mut self) {
        for c in &mut self.children {
            let _ = c.kill().await;
        }
    }
}

fn log_file(dir: &Path, name: &str) -> anyhow::Result<std::fs::File> {
    Ok(std::fs::File::create(dir.join(format!("{name}.log")))?)
}

async fn start_etcd(bin: &Path, data: &Path) -> anyhow::Result<Cluster> {
    let peers: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let initial: Vec<String> = peers
        .iter()
        .enumerate()
        .map(|(i, p)| format!("etcd-{i}=http://127.0.0.1:{p}"))
        .collect();
    let mut children = Vec::new();
    for i in 0..3 {
        let dir = data.join(format!("etcd-{i}"));
        let client = format!("http://127.0.0.1:{}", clients[i]);
        let peer = format!("http://127.0.0.1:{}", peers[i]);
        let log = log_file(data, &format!("etcd-{i}"))?;
        children.push(
            Command::new(bin)
                .args(["--name", &format!("etcd-{i}")])
                .arg("--data-dir")
                .arg(&dir)
                .args(["--listen-client-urls", &client])
                .args(["--advertise-client-urls", &client])
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &initial.join(",")])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "kubestore-bench"])
                .stdout(Stdio::null())
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {} (install etcd-server)", bin.display()))?,
        );
    }
    Ok(Cluster {
        endpoints: clients.iter().map(|p| format!("127.0.0.1:{p}")).collect(),
        rest: Vec::new(),
        children,
    })
}

/// How to run one `kubestore serve` of a local 3-node cluster, so it can
/// be started again after a kill with the same identity and data.
#[derive(Debug, Clone)]
pub(super) struct NodeSpec {
    pub id: u64,
    pub data_dir: PathBuf,
    pub log_dir: PathBuf,
    /// The etcd API address (what the workloads use).
    pub grpc: String,
    /// The peer address (Raft and cluster RPCs), as `peers` lists it.
    pub peer: String,
    pub rest: String,
    pub peers: String,
    pub read_lease_ms: u64,
    /// `--snapshot-after-entries`, if not the default.
    pub snapshot_after_entries: Option<u64>,
    /// `--snapshot-catch-up-entries`, if not the default.
    pub snapshot_catch_up_entries: Option<u64>,
}

impl NodeSpec {
    pub(super) fn spawn(&self) -> anyhow::Result<Child> {
        self.spawn_configured(|_| {})
    }

    /// This node's `serve` configuration.
    pub(super) fn config(&self) -> anyhow::Result<ServeConfig> {
        let mut c = ServeConfig::single_node(self.data_dir.clone());
        c.id = self.id;
        c.rest_addr = self.rest.parse().context("REST address")?;
        c.grpc_addr = self.grpc.parse().context("etcd API address")?;
        c.peer_addr = self.peer.parse().context("peer address")?;
        c.peers = self.peers.split(',').map(str::to_string).collect();
        c.read_lease_ms = self.read_lease_ms;
        if let Some(n) = self.snapshot_after_entries {
            c.snapshot_after_entries = n;
        }
        if let Some(n) = self.snapshot_catch_up_entries {
            c.snapshot_catch_up_entries = n;
        }
        Ok(c)
    }

    /// [`NodeSpec::spawn`] with its configuration changed by `adjust`.
    pub(super) fn spawn_configured(
        &self,
        adjust: impl FnOnce(&mut ServeConfig),
    ) -> anyhow::Result<Child> {
        self.spawn_logged(adjust, "warn")
    }

    /// [`NodeSpec::spawn`] logging what `filter` (a `KUBESTORE_LOG`
    /// directive) lets through.
    pub(super) fn spawn_with_log(&self, filter: &str) -> anyhow::Result<Child> {
        self.spawn_logged(|_| {}, filter)
    }

    fn spawn_logged(
        &self,
        adjust: impl FnOnce(&mut ServeConfig),
        filter: &str,
    ) -> anyhow::Result<Child> {
        let mut config = self.config()?;
        adjust(&mut config);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_dir.join(format!("kubestore-{}.log", self.id)))?;
        Ok(Command::new(std::env::current_exe()?)
            .args(config.to_args())
            .env("KUBESTORE_LOG", filter)
            // The log goes to stdout, panics to stderr: both to the file.
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?)
    }
}

/// The specs of a 3-node kubestore on free local ports, data under `data`.
pub(super) fn kubestore_specs(data: &Path, read_lease_ms: u64) -> anyhow::Result<Vec<NodeSpec>> {
    let grpc: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let peer: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let rest: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let peers: Vec<String> = peer
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1))
        .collect();
    Ok((0..3)
        .map(|i| NodeSpec {
            id: i as u64 + 1,
            data_dir: data.join(format!("kubestore-{}", i + 1)),
            log_dir: data.to_path_buf(),
            grpc: format!("127.0.0.1:{}", grpc[i]),
            peer: format!("127.0.0.1:{}", peer[i]),
            rest: format!("127.0.0.1:{}", rest[i]),
            peers: peers.join(","),
            read_lease_ms,
            snapshot_after_entries: None,
            snapshot_catch_up_entries: None,
        })
        .collect())
}

async fn start_kubestore(data: &Path, read_lease_ms: u64) -> anyhow::Result<Cluster> {
    let specs = kubestore_specs(data, read_lease_ms)?;
    let children = specs
        .iter()
        .map(NodeSpec::spawn)
        .collect::<Result<_, _>>()?;
    Ok(Cluster {
        endpoints: specs.iter().map(|s| s.grpc.clone()).collect(),
        rest: specs.iter().map(|s| format!("http://{}", s.rest)).collect(),
        children,
    })
}

/// Waits until a linearizable read succeeds on every endpoint, failing
/// early, with the process's exit status, if one of `children` exits.
pub(super) async fn wait_ready(
    name: &str,
    endpoints: &[String],
    children: &mut [Child],
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for e in endpoints {
        loop {
            let ok = async {
                let ch = tonic::transport::Channel::from_shared(format!("http://{e}"))?
                    .connect()
                    .await?;
                KvClient::new(ch)
                    .range(RangeRequest {
                        key: b"ready".to_vec(),
                        ..Default::default()
                    })
                    .await?;
                anyhow::Ok(())
            }
            .await;
            let Err(err) = ok else { break };
            for (i, child) in children.iter_mut().enumerate() {
                if let Some(status) = child.try_wait()? {
                    bail!("{name} member {i} exited ({status}) before it was ready: see its log");
                }
            }
            if Instant::now() > deadline {
                bail!("{name} at {e} did not become ready within 60 s: {err:#}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// How many `fdatasync`ed 4 KiB appends the disk under `dir` takes per
/// second: the ceiling of unbatched commits.
pub(super) fn fsync_rate(dir: &Path) -> anyhow::Result<f64> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path)?;
    let block = [0u8; 4096];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(2) {
        f.write_all(&block)?;
        f.sync_data()?;
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(path)?;
    Ok(rate)
}

/// `out/data`, emptied (or created) for a run's stores.
pub(super) fn fresh_data_dir(out: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let data = out.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data)?;
    }
    std::fs::create_dir_all(&data)?;
    Ok(data)
}

/// Runs the comparison and writes the results.
pub async fn run(args: CompareArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let data = fresh_data_dir(&args.out)?;
    let fsyncs = fsync_rate(&data)?;
    println!("disk: {fsyncs:.0} fsynced 4 KiB appends per second");
    let load = |requests| LoadArgs {
        requests,
        size: 1024,
        out: args.out.clone(),
        no_progress: args.no_progress,
    };
    let (put_requests, range_requests) = match (args.requests, args.quick) {
        (Some(n), _) => (n, n),
        (None, true) => (4_000, 10_000),
        (None, false) => (30_000, 100_000),
    };

    let mut etcd = start_etcd(&args.etcd, &data).await?;
    let mut kubestore = start_kubestore(&data, args.read_lease_ms).await?;
    let ready = async {
        wait_ready("etcd", &etcd.endpoints, &mut etcd.children).await?;
        wait_ready("kubestore", &kubestore.endpoints, &mut kubestore.children).await
    }
    .await;
    let mut runs: Vec<RunResult> = Vec::new();
    // (store, ratio key, CPU spent, requests answered) per workload run.
    let mut cpu: Vec<(&str, &str, CpuSpent, u64)> = Vec::new();
    // Per write workload's ratio key: kubestore's stage breakdown.
    let mut stages: Vec<(&str, super::stages::StageBreakdown)> = Vec::new();
    let outcome = match ready {
        Err(e) => Err(e),
        Ok(()) => {
            async {
                for (key, name, clients) in PLAN {
                    let workload = Workload::etcd(name)?;
                    let requests = if name == "put" {
                        put_requests
                    } else {
                        range_requests
                    };
                    for (store, cluster) in [("etcd", &etcd), ("kubestore", &kubestore)] {
                        let timed = store == "kubestore" && name == "put";
                        let stages_before = match timed {
                            true => Some(StageSample::take(&cluster.rest).await?),
                            false => None,
                        };
                        let (spent, mut r) = run_etcd_timed(
                            cluster,
                            &workload,
                            &cluster.endpoints,
                            clients,
                            &load(requests),
                        )
                        .await?;
                        let answered = r.requests.saturating_sub(r.errors);
                        if let Some(s) = stages_before {
                            let after = StageSample::take(&cluster.rest).await?;
                            stages.push((key, s.until(&after, answered)));
                        }
                        cpu.push((store, key, spent, answered));
                        r.store = store.into();
                        runs.push(r);
                        if key == ON_LEADER.3 {
                            // Straight after the spread puts, on the same
                            // store as it now is.
                            let (on_leader, cpu_spent, r) =
                                run_on_leader(cluster, &load(put_requests)).await?;
                            cpu.push((
                                store,
                                on_leader,
                                cpu_spent,
                                r.requests.saturating_sub(r.errors),
                            ));
                            runs.push(RunResult {
                                store: store.into(),
                                ..r
                            });
                        }
                    }
                }
                workload::seed_rest(&kubestore.rest, REST_SEEDED, 1024).await?;
                for (key, name, clients, _) in REST_PLAN {
                    let workload = Workload::rest(name, REST_SEEDED)?;
                    let pids = kubestore.pids();
                    let stages_before = StageSample::take(&kubestore.rest).await?;
                    let before = CpuSample::take(&pids);
                    let mut r = workload::run_rest(
                        &workload,
                        &kubestore.rest,
                        clients,
                        &load(put_requests),
                    )
                    .await?;
                    let spent = before.until(&CpuSample::take(&pids));
                    let answered = r.requests.saturating_sub(r.errors);
                    let after = StageSample::take(&kubestore.rest).await?;
                    stages.push((key, stages_before.until(&after, answered)));
                    cpu.push(("kubestore", key, spent, answered));
                    r.store = "kubestore".into();
                    runs.push(r);
                }
                anyhow::Ok(())
            }
            .await
        }
    };
    etcd.stop().await;
    kubestore.stop().await;
    outcome?;
    if !args.keep_data {
        std::fs::remove_dir_all(&data).ok();
    }

    let find = |store: &str, name: &str, clients: usize| {
        runs.iter()
            .find(|r| r.store == store && r.workload == name && r.clients == clients)
    };
    let mut ratios = serde_json::Map::new();
    let mut p99_ratios = serde_json::Map::new();
    for (key, name, clients) in PLAN {
        if let (Some(k), Some(e)) = (
            find("kubestore", name, clients),
            find("etcd", name, clients),
        ) {
            ratios.insert(key.into(), json!(k.throughput / e.throughput.max(1e-9)));
            p99_ratios.insert(key.into(), json!(k.p99_ms / e.p99_ms.max(1e-9)));
        }
    }
    let mut rest_ratios = serde_json::Map::new();
    for (key, name, clients, etcd_api) in REST_PLAN {
        if let (Some(r), Some(p)) = (
            find("kubestore", name, clients),
            find("kubestore", etcd_api, clients),
        ) {
            rest_ratios.insert(key.into(), json!(r.throughput / p.throughput.max(1e-9)));
        }
    }
    let cpu_report = cpu_report(&cpu);
    let forwarding = forwarding_report(&runs, &cpu_report.json);
    let puts_per_fsync = find("kubestore", "put", 256).map(|r| r.throughput / fsyncs.max(1e-9));
    let results = json!({
        "quick": args.quick,
        "duration_seconds": started.elapsed().as_secs_f64(),
        "value_bytes": 1024,
        "kubestore_read_lease_ms": args.read_lease_ms,
        "disk_fsyncs_per_second": fsyncs,
        "kubestore_puts_per_disk_fsync_c256": puts_per_fsync,
        "ratios": ratios,
        "p99_ratios": p99_ratios,
        "rest_ratios": rest_ratios,
        "kubestore_stages": stages
            .iter()
            .map(|(key, b)| ((*key).to_string(), b.json()))
            .collect::<serde_json::Map<_, _>>(),
        "cpu": cpu_report.json,
        "forwarding": forwarding.json,
        "cpu_per_request_ratios": cpu_report.ratios,
        "runs": runs,
    });
    std::fs::write(
        args.out.join("results.json"),
        serde_json::to_vec_pretty(&results)?,
    )?;
    let series: Vec<(&str, &RunResult)> = runs.iter().map(|r| ("", r)).collect();
    plot::latency_cdf(
        &args.out.join("latency-cdf.svg"),
        "etcd API (and kubestore REST)",
        &series,
    )?;
    plot::latency_vs_throughput(
        &args.out.join("latency-vs-throughput.svg"),
        "etcd API (and kubestore REST)",
        &series,
    )?;
    println!(
        "{}",
        workload::table(
            "etcd API, 3 members each; then kubestore's REST writes",
            &runs
        )
    );
    println!(
        "kubestore / etcd throughput (kubestore read lease: {} ms):",
        args.read_lease_ms
    );
    for (k, v) in &ratios {
        println!("  {k:<22} {:.2}x", v.as_f64().unwrap_or(0.0));
    }
    println!("kubestore REST writes / kubestore etcd-API puts, same clients:");
    for (k, v) in &rest_ratios {
        println!("  {k:<22} {:.2}x", v.as_f64().unwrap_or(0.0));
    }
    println!("{}", cpu_report.table);
    println!("{}", forwarding.table);
    for (key, b) in &stages {
        println!(
            "{}",
            b.table(&format!(
                "kubestore's write path, {key} (mean per stage run; runs per acknowledged write):"
            ))
        );
    }
    println!(
        "finished in {:.0} s; results in {}",
        started.elapsed().as_secs_f64(),
        args.out.join("results.json").display()
    );
    Ok(())
}

/// [`ON_LEADER`]'s puts on `cluster`, every client on the member that
/// leads now: its key, the servers' CPU and the run (reported under
/// [`ON_LEADER_WORKLOAD`]).
async fn run_on_leader(
    cluster: &Cluster,
    load: &LoadArgs,
) -> anyhow::Result<(&'static str, CpuSpent, RunResult)> {
    let (key, name, clients, _) = ON_LEADER;
    let leader = workload::leader_endpoint(&cluster.endpoints, LEADER_WAIT).await?;
    let workload = Workload::etcd(name)?;
    let (spent, mut r) = run_etcd_timed(
        cluster,
        &workload,
        std::slice::from_ref(&leader),
        clients,
        load,
    )
    .await?;
    r.workload = ON_LEADER_WORKLOAD.into();
    Ok((key, spent, r))
}

/// Runs an etcd-API workload against `endpoints` (members of `cluster`),
/// and the CPU the cluster's servers and the load generator spent on it.
async fn run_etcd_timed(
    cluster: &Cluster,
    workload: &Workload,
    endpoints: &[String],
    clients: usize,
    load: &LoadArgs,
) -> anyhow::Result<(CpuSpent, RunResult)> {
    let pids = cluster.pids();
    let before = CpuSample::take(&pids);
    let r = workload::run_etcd(workload, endpoints, clients, load).await?;
    Ok((before.until(&CpuSample::take(&pids)), r))
}

/// What forwarding costs each store: its puts with the clients spread
/// over the three members against the same puts with every client on the
/// leader ([`ON_LEADER`]).
struct ForwardingReport {
    /// Per store: puts/s and server CPU per put, spread and on the leader,
    /// and the spread run's CPU per put over the leader run's (`null` when
    /// the leader run was too short to measure).
    json: serde_json::Value,
    table: String,
}

fn forwarding_report(runs: &[RunResult], cpu: &serde_json::Value) -> ForwardingReport {
    let (key, name, clients, spread_key) = ON_LEADER;
    let mut json = serde_json::Map::new();
    let mut table = format!(
        "Forwarding: put x{clients} with the clients spread over the members, and all on the leader\n{:<10} {:>12} {:>12} {:>12} {:>12} {:>14}\n",
        "store", "spread /s", "leader /s", "spread µs", "leader µs", "CPU spread/ldr"
    );
    for store in ["etcd", "kubestore"] {
        let rate = |workload: &str| {
            runs.iter()
                .find(|r| r.store == store && r.workload == workload && r.clients == clients)
                .map(|r| r.throughput)
        };
        let cpu_of = |k: &str| cpu[k][store]["server_cpu_us_per_request"].as_f64();
        let (Some(spread_rate), Some(leader_rate), Some(spread_cpu), Some(leader_cpu)) = (
            rate(name),
            rate(ON_LEADER_WORKLOAD),
            cpu_of(spread_key),
            cpu_of(key),
        ) else {
            continue;
        };
        // A run too short for the CPU clock's ticks (a test's) has no ratio.
        let cpu_ratio = (leader_cpu > 0.0).then(|| spread_cpu / leader_cpu);
        json.insert(
            store.into(),
            json!({
                "spread_puts_per_second": spread_rate,
                "on_leader_puts_per_second": leader_rate,
                "spread_server_cpu_us_per_put": spread_cpu,
                "on_leader_server_cpu_us_per_put": leader_cpu,
                "spread_over_on_leader_cpu": cpu_ratio,
            }),
        );
        let cpu_ratio = cpu_ratio.map_or("-".to_string(), |r| format!("{r:.2}x"));
        table.push_str(&format!(
            "{store:<10} {spread_rate:>12.0} {leader_rate:>12.0} {spread_cpu:>12.1} {leader_cpu:>12.1} {cpu_ratio:>14}\n"
        ));
    }
    ForwardingReport {
        json: json.into(),
        table,
    }
}

/// CPU per request of each store's servers and of the load generator.
struct CpuReport {
    /// Per ratio key, per store: seconds spent and microseconds per request.
    json: serde_json::Value,
    /// Per ratio key: kubestore's server CPU per request over etcd's.
    ratios: serde_json::Value,
    table: String,
}

fn cpu_report(cpu: &[(&str, &str, CpuSpent, u64)]) -> CpuReport {
    let mut json: BTreeMap<String, BTreeMap<String, serde_json::Value>> = BTreeMap::new();
    let mut ratios = serde_json::Map::new();
    let mut table = format!(
        "CPU per request (µs; servers: all three, busiest node; client: the load generator)\n{:<22} {:<10} {:>9} {:>9} {:>9}\n",
        "workload", "store", "servers", "busiest", "client"
    );
    let mut per_request = BTreeMap::new();
    for (store, key, spent, answered) in cpu {
        let done = (*answered).max(1) as f64;
        let micros = |seconds: f64| seconds * 1e6 / done;
        let busiest = spent.servers.iter().flatten().copied().fold(0.0, f64::max);
        let servers = micros(spent.servers_total());
        per_request.insert((*store, *key), servers);
        json.entry(key.to_string()).or_default().insert(
            store.to_string(),
            json!({
                "server_cpu_seconds": spent.servers,
                "client_cpu_seconds": spent.client,
                "server_cpu_us_per_request": servers,
                "busiest_server_cpu_us_per_request": micros(busiest),
                "client_cpu_us_per_request": spent.client.map(micros),
            }),
        );
        table.push_str(&format!(
            "{:<22} {:<10} {:>9.1} {:>9.1} {:>9}\n",
            key,
            store,
            servers,
            micros(busiest),
            spent
                .client
                .map_or("-".to_string(), |c| format!("{:.1}", micros(c)))
        ));
    }
    for (key, _, _) in PLAN {
        if let (Some(k), Some(e)) = (
            per_request.get(&("kubestore", key)),
            per_request.get(&("etcd", key)),
        ) {
            ratios.insert(key.into(), json!(k / e.max(1e-9)));
        }
    }
    CpuReport {
        json: json!(json),
        ratios: ratios.into(),
        table,
    }
}

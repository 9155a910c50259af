//! `kubestore bench`: the load generator. Workloads run C concurrent
//! clients against any endpoints and report throughput, HDR latency
//! percentiles, errors and (for REST reads) how the server says it served
//! them. `kubestore bench compare` starts a 3-member etcd and a 3-node
//! kubestore on this machine and runs the same etcd-API workloads, with
//! the same client code, against both.
//!
//! `kubestore bench watch` measures watch fan-out: delivery latency, events
//! per second, lost events and server memory per idle watcher.
//!
//! `kubestore bench restart` loads a node with many keys, kills it and
//! times its way back to ready and caught up.
//!
//! `kubestore bench overload` offers ten times the sustainable write rate
//! to a 3-node kubestore with and without its in-flight limits.
//!
//! `kubestore bench mixed` runs a small Kubernetes control plane's mix for
//! a fixed time: node lease renewals, pod status updates, pod lists and one
//! pod watch per node, one result row per operation kind.
//!
//! `kubestore bench scale` grows a 3-node kubestore to each of a list of
//! object counts and measures memory and disk per object, LIST and page
//! latency, compaction, cold start and snapshot catch-up at each.
//!
//! Results go to the terminal as a table, to `results.json`, and as SVG
//! plots (latency CDFs, latency against throughput).

mod args;
mod client_conn;
mod compare;
mod cpu;
mod h2_channel;
mod mixed;
mod overload;
mod plot;
mod record;
mod rest_conn;
mod restart;
mod scale;
mod stages;
mod watch;
mod workload;

use std::path::Path;

use clap::{Args, Subcommand};

pub use args::LoadArgs;
pub use record::RunResult;
pub use workload::Workload;

/// `kubestore bench ...`
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Run etcd-API workloads against running endpoints (etcd or kubestore).
    Etcd(EtcdArgs),
    /// Run Kubernetes REST workloads against running kubestore endpoints.
    Rest(RestArgs),
    /// Start a 3-member etcd and a 3-node kubestore here and compare them.
    Compare(compare::CompareArgs),
    /// Watch fan-out: W watchers while writers create at a fixed rate.
    Watch(watch::WatchArgs),
    /// Restart of a node holding many keys: time to ready and caught up.
    Restart(restart::RestartArgs),
    /// A kube-like mix for a fixed time: lease renewals, pod status
    /// updates, lists and per-node watches.
    Mixed(mixed::MixedArgs),
    /// A 3-node kubestore under ten times its sustainable write rate (open
    /// loop), with its in-flight limits and without: admitted latency,
    /// refusals and memory.
    Overload(overload::OverloadArgs),
    /// Cost curves as the store grows: memory and disk per object, LIST
    /// and page latency, compaction, cold start and snapshot catch-up at
    /// each object count.
    Scale(scale::ScaleArgs),
}

#[derive(Debug, Args)]
pub struct EtcdArgs {
    /// Comma-separated etcd endpoints (host:port); clients spread over them.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:2379")]
    pub endpoints: Vec<String>,
    /// Workloads: put, range_linearizable, range_serializable.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "put,range_linearizable,range_serializable"
    )]
    pub workloads: Vec<String>,
    /// Concurrent clients per workload (one run per value).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub clients: Vec<usize>,
    #[command(flatten)]
    pub load: LoadArgs,
}

#[derive(Debug, Args)]
pub struct RestArgs {
    /// Comma-separated REST base URLs; clients spread over them.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:8080")]
    pub endpoints: Vec<String>,
    /// Workloads: create, update, get_quorum, get_any, list_quorum,
    /// list_any, list_not_older_than, list_exact, list_paginated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "create,get_quorum,get_any,list_quorum,list_any"
    )]
    pub workloads: Vec<String>,
    /// Concurrent clients per workload (one run per value).
    #[arg(long, value_delimiter = ',', default_value = "16")]
    pub clients: Vec<usize>,
    /// Objects listed by the list workloads.
    #[arg(long, default_value_t = 1000)]
    pub objects: usize,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// Runs `kubestore bench`.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Etcd(a) => {
            let mut runs = Vec::new();
            for name in &a.workloads {
                let workload = Workload::etcd(name)?;
                for &clients in &a.clients {
                    let r = workload::run_etcd(&workload, &a.endpoints, clients, &a.load).await?;
                    runs.push(r);
                }
            }
            report("etcd API", &runs, &a.load)
        }
        BenchCommand::Rest(a) => {
            let mut runs = Vec::new();
            workload::seed_rest(&a.endpoints, a.objects, a.load.size).await?;
            for name in &a.workloads {
                let workload = Workload::rest(name, a.objects)?;
                for &clients in &a.clients {
                    let r = workload::run_rest(&workload, &a.endpoints, clients, &a.load).await?;
                    runs.push(r);
                }
            }
            report("REST", &runs, &a.load)
        }
        BenchCommand::Compare(a) => compare::run(a).await,
        BenchCommand::Watch(a) => watch::run(a).await,
        BenchCommand::Restart(a) => restart::run(a).await,
        BenchCommand::Mixed(a) => mixed::driver::run(a).await,
        BenchCommand::Overload(a) => overload::run(a).await,
        BenchCommand::Scale(a) => scale::run(a).await,
    }
}

/// Prints the table and writes results.json and the plots.
fn report(title: &str, runs: &[RunResult], load: &LoadArgs) -> anyhow::Result<()> {
    report_with(title, runs, &load.out, serde_json::Map::new())
}

/// [`report`] into `out`, with `extra` fields next to `runs` in results.json.
fn report_with(
    title: &str,
    runs: &[RunResult],
    out: &Path,
    mut extra: serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    println!("{}", workload::table(title, runs));
    std::fs::create_dir_all(out)?;
    extra.insert("runs".into(), serde_json::to_value(runs)?);
    std::fs::write(out.join("results.json"), serde_json::to_vec_pretty(&extra)?)?;
    let series: Vec<(&str, &RunResult)> = runs.iter().map(|r| ("", r)).collect();
    plot::latency_cdf(&out.join("latency-cdf.svg"), title, &series)?;
    plot::latency_vs_throughput(&out.join("latency-vs-throughput.svg"), title, &series)?;
    println!("results and plots in {}", out.display());
    Ok(())
}

//! `kubestore`: the one binary. `serve` runs a node (with no flags: a
//! single node on 127.0.0.1 with its data in `./kubestore-data`);
//! `cluster` runs a local multi-node cluster of `serve` processes; `bench`
//! is the load generator (and `bench compare`, etcd side by side).

use clap::{Parser, Subcommand};
use kubestore_server::launcher::{self, ClusterArgs};
use kubestore_server::{RunningNode, ServeConfig};
use tracing_subscriber::EnvFilter;

/// mimalloc instead of the system allocator: the server allocates per
/// request, per event and per watcher from many threads, where glibc's
/// per-thread arenas fragment and hold on to freed memory. Measured on
/// 64-client puts (BENCHMARKS.md, "A slower machine"): glibc cost 15% more
/// CPU per put; mimalloc 2 and jemalloc were within the noise of this one
/// (mimalloc 3, the crate's default).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "kubestore",
    version,
    about = "A Raft-replicated store that serves the Kubernetes API"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run one node.
    Serve(Box<ServeConfig>),
    /// Run a local cluster of N nodes as separate processes.
    Cluster(ClusterArgs),
    /// Load-test running endpoints, or compare with etcd side by side.
    Bench(kubestore_benches::load::BenchArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("KUBESTORE_LOG")
                .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn")),
        )
        // Colours only on a terminal: the launcher and the test harnesses
        // write each node's log to a file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let command = Cli::parse()
        .command
        .unwrap_or(Cmd::Serve(Box::new(ServeConfig::single_node(
            "kubestore-data".into(),
        ))));
    if let Cmd::Serve(config) = &command {
        // A process setting, made before the runtime's threads allocate.
        if let Err(e) =
            kubestore_server::process::set_transparent_huge_pages(config.transparent_huge_pages)
        {
            tracing::warn!(error = %e, "could not set transparent huge pages; the kernel's default holds");
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match command {
            Cmd::Serve(config) => serve(*config).await,
            Cmd::Cluster(args) => launcher::run(args).await,
            Cmd::Bench(args) => kubestore_benches::load::run(args).await,
        }
    })
}

async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    let node = RunningNode::bind_and_start(config).await?;
    println!(
        "kubestore node {} serving the Kubernetes API on http://{} (etcd API {}, peers {})",
        node.raft.id(),
        node.rest_addr,
        node.grpc_addr,
        node.peer_addr
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let raft = node.raft.clone();
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
        reason = raft.core_stopped_wait() => {
            // Nothing is served any more: exit, so a supervisor restarts
            // the node and it catches up from its log and the leader.
            tracing::error!(%reason, "the raft core stopped; exiting");
            node.shutdown().await;
            anyhow::bail!("the raft core stopped: {reason}");
        }
    }
    tracing::info!("shutting down");
    node.shutdown().await;
    Ok(())
}

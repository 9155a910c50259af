//! `kubestore cluster`: starts N `kubestore serve` processes on 127.0.0.1
//! (node i on the REST, etcd API and peer ports of node 1 plus i - 1),
//! waits for a leader, writes `cluster.json` and a kubeconfig, and stops the
//! children on Ctrl-C or SIGTERM. Each child's full command line is in
//! `cluster.json`, so a killed node can be restarted by hand and rejoins.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::config::ServeConfig;

#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// Directory for every node's data, logs, cluster.json and kubeconfig.
    #[arg(long, default_value = "kubestore-cluster")]
    pub data_dir: PathBuf,
    /// REST port of node 1; node i listens on rest_port + i - 1.
    #[arg(long, default_value_t = 8080)]
    pub rest_port: u16,
    /// etcd API (gRPC) port of node 1; node i listens on grpc_port + i - 1.
    #[arg(long, default_value_t = 2379)]
    pub grpc_port: u16,
    /// Peer port (Raft and cluster RPCs) of node 1; node i listens on
    /// peer_port + i - 1. The default range starts above the gRPC ports'
    /// (2379, 2380, 2381 for three nodes), so neither collides.
    #[arg(long, default_value_t = 2390)]
    pub peer_port: u16,
    /// How long to wait for the cluster to elect a leader.
    #[arg(long, default_value_t = 60)]
    pub wait_seconds: u64,
}

struct Launched {
    id: u64,
    child: Child,
    rest_url: String,
    grpc_url: String,
    peer_url: String,
    data_dir: PathBuf,
    args: Vec<String>,
}

pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let ports = |base: u16| u64::from(base)..u64::from(base) + args.nodes;
    let (grpc_ports, peer_ports) = (ports(args.grpc_port), ports(args.peer_port));
    if grpc_ports.start < peer_ports.end && peer_ports.start < grpc_ports.end {
        bail!(
            "the gRPC ports {grpc_ports:?} and peer ports {peer_ports:?} overlap: \
             choose --peer-port at least {} ports away from --grpc-port",
            args.nodes
        );
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&args.data_dir)?;
    let exe = std::env::current_exe().context("locating the kubestore binary")?;
    let port = |base: u16, i: u64| -> anyhow::Result<u16> {
        u16::try_from(u64::from(base) + i - 1).context("port out of range")
    };
    let mut peers = Vec::new();
    for i in 1..=args.nodes {
        peers.push(format!("{i}=127.0.0.1:{}", port(args.peer_port, i)?));
    }
    let mut nodes = Vec::new();
    for i in 1..=args.nodes {
        let node_dir = data_dir.join(format!("node-{i}"));
        let rest = format!("127.0.0.1:{}", port(args.rest_port, i)?);
        let grpc = format!("127.0.0.1:{}", port(args.grpc_port, i)?);
        let peer = format!("127.0.0.1:{}", port(args.peer_port, i)?);
        let mut config = ServeConfig::single_node(node_dir.clone());
        config.id = i;
        config.rest_addr = rest.parse().context("REST address")?;
        config.grpc_addr = grpc.parse().context("etcd API address")?;
        config.peer_addr = peer.parse().context("peer address")?;
        config.peers = peers.clone();
        let command: Vec<OsString> = std::iter::once(exe.clone().into_os_string())
            .chain(config.to_args())
            .collect();
        let child = spawn_node(&command, &data_dir.join(format!("node-{i}.log")))?;
        nodes.push(Launched {
            id: i,
            child,
            rest_url: format!("http://{rest}"),
            grpc_url: format!("http://{grpc}"),
            peer_url: format!("http://{peer}"),
            data_dir: node_dir,
            args: command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        });
    }

    let leader = wait_for_leader(&nodes, Duration::from_secs(args.wait_seconds)).await;
    let leader = match leader {
        Ok(l) => l,
        Err(e) => {
            stop_all(&mut nodes).await;
            return Err(e);
        }
    };
    write_cluster_files(&data_dir, &nodes)?;
    println!(
        "kubestore cluster of {} nodes is up; leader is node {leader}",
        nodes.len()
    );
    for n in &nodes {
        println!(
            "  node {}: rest {}  grpc (etcd API) {}  peer {}  pid {}",
            n.id,
            n.rest_url,
            n.grpc_url,
            n.peer_url,
            n.child.id().unwrap_or(0)
        );
    }
    println!(
        "  cluster.json: {}",
        data_dir.join("cluster.json").display()
    );
    println!(
        "  kubeconfig:   {}  (contexts node-1 .. node-{})",
        data_dir.join("kubeconfig").display(),
        nodes.len()
    );
    println!("Press Ctrl-C to stop.");

    wait_for_stop_signal().await?;
    println!("stopping {} nodes", nodes.len());
    stop_all(&mut nodes).await;
    Ok(())
}

fn spawn_node(args: &[OsString], log: &Path) -> anyhow::Result<Child> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let (program, rest) = args.split_first().context("empty command line")?;
    Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", program.to_string_lossy()))
}

async fn wait_for_leader(nodes: &[Launched], timeout: Duration) -> anyhow::Result<u64> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut leaders = Vec::new();
        for n in nodes {
            let status: Option<Value> = match client
                .get(format!("{}/debug/cluster", n.rest_url))
                .send()
                .await
            {
                Ok(resp) => resp.json().await.ok(),
                Err(_) => None,
            };
            leaders.push(status.and_then(|s| s["leader_id"].as_u64()));
        }
        if let Some(Some(first)) = leaders.first() {
            if leaders.iter().all(|l| *l == Some(*first)) {
                return Ok(*first);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("no leader agreed on by all nodes within {timeout:?} (saw {leaders:?}); see node-*.log");
        }
        // Polling: the nodes are separate processes with nothing to subscribe to.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn write_cluster_files(dir: &Path, nodes: &[Launched]) -> anyhow::Result<()> {
    let cluster = json!({
        "nodes": nodes.iter().map(|n| json!({
            "id": n.id,
            "pid": n.child.id(),
            "rest_url": n.rest_url,
            "grpc_url": n.grpc_url,
            "peer_url": n.peer_url,
            "data_dir": n.data_dir,
            "args": n.args,
        })).collect::<Vec<_>>()
    });
    std::fs::write(
        dir.join("cluster.json"),
        serde_json::to_vec_pretty(&cluster)?,
    )?;
    // JSON is valid YAML, which is what kubectl reads.
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": nodes.iter().map(|n| json!({"name": format!("node-{}", n.id), "cluster": {"server": n.rest_url}})).collect::<Vec<_>>(),
        "users": [{"name": "kubestore", "user": {}}],
        "contexts": nodes.iter().map(|n| json!({"name": format!("node-{}", n.id), "context": {"cluster": format!("node-{}", n.id), "user": "kubestore", "namespace": "default"}})).collect::<Vec<_>>(),
        "current-context": "node-1",
    });
    std::fs::write(
        dir.join("kubeconfig"),
        serde_json::to_vec_pretty(&kubeconfig)?,
    )?;
    Ok(())
}

async fn wait_for_stop_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// SIGTERM to every child still running, then SIGKILL after 10 s.
async fn stop_all(nodes: &mut [Launched]) {
    for n in nodes.iter() {
        if let Some(pid) = n.child.id() {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
    }
    for n in nodes.iter_mut() {
        match tokio::time::timeout(Duration::from_secs(10), n.child.wait()).await {
            Ok(_) => {}
            Err(_) => {
                let _ = n.child.kill().await;
            }
        }
    }
}

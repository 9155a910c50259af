//! `kubestore-chaos`: the fault-schedule checker's command line.
//!
//! Starts a 3-node cluster from the `kubestore` binary next to this one (or
//! `KUBESTORE_BIN`), runs clients on both APIs through every node while a
//! seeded nemesis kills, pauses, isolates and slows nodes, then checks the
//! history for linearizability and the revision contract, and every
//! node's readiness against its service. Writes `report.json`,
//! `history.json`, `timeline.svg` and the nodes' logs to `--out`, also
//! when the run fails; exits 1 when any check found a violation, or a node
//! was down at the end (or, with `--strict-readiness`, when readiness
//! disagreed with service).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kubestore_tests::chaos::{self, nemesis::FaultKind, ChaosConfig};

#[derive(Debug, Parser)]
#[command(
    name = "kubestore-chaos",
    about = "Fault-schedule checker for a 3-node kubestore cluster"
)]
struct Args {
    /// Seeds the fault schedule and the clients' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds of load under faults.
    #[arg(long, default_value_t = 600)]
    duration_seconds: u64,
    /// Clients per API (REST and etcd each get this many), spread over
    /// the three nodes.
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// Registers (keys) per API.
    #[arg(long, default_value_t = 5)]
    keys: usize,
    /// Fault kinds to draw from: kill, pause, isolate, slow-disk (or none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill,pause,isolate,slow-disk"
    )]
    faults: Vec<String>,
    /// Where the report, history, plot and logs go.
    #[arg(long, default_value = "chaos-out")]
    out: PathBuf,
    /// How long a node's `/readyz` may disagree with whether it serves
    /// before the disagreement is reported.
    #[arg(long, default_value_t = 5.0)]
    readiness_slack_seconds: f64,
    /// Fail the run (exit 1) on readiness disagreements too; by default
    /// they are reported beside the violations without failing it.
    #[arg(long)]
    strict_readiness: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    kubestore_tests::init_tracing();
    let args = Args::parse();
    let mut faults = Vec::new();
    for name in args.faults.iter().filter(|n| n.as_str() != "none") {
        faults.push(
            FaultKind::parse(name).ok_or_else(|| anyhow::anyhow!("unknown fault kind {name:?}"))?,
        );
    }
    let mut config = ChaosConfig::new(
        args.seed,
        Duration::from_secs(args.duration_seconds),
        args.out.clone(),
    );
    config.clients_per_api = args.clients;
    config.keys = args.keys;
    config.faults = faults;
    config.readiness_slack = Duration::try_from_secs_f64(args.readiness_slack_seconds)
        .map_err(|e| anyhow::anyhow!("--readiness-slack-seconds: {e}"))?;
    config.strict_readiness = args.strict_readiness;
    let report = chaos::run(&config).await?;
    print!("{}", report.summary());
    println!("report: {}", args.out.join("report.json").display());
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

//! The workload size flags every load subcommand shares.

use std::path::PathBuf;

use clap::Args;

/// Workloads and their size, shared by the subcommands.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Requests per workload and client count.
    #[arg(long, default_value_t = 20_000)]
    pub requests: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Where results.json and the plots go.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// No progress bar (for logs and tests).
    #[arg(long)]
    pub no_progress: bool,
}

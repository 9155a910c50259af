//! What the physical compaction (the purge) costs as history grows,
//! in-process and without a cluster: writes `--revisions` puts of 1 KiB
//! ConfigMaps to a fresh store, compacts to the last revision, then runs
//! the purge one step of `PURGE_STEP_REVISIONS` at a time, as the
//! background compactor does, and prints the whole purge's time and the
//! mean step of its first and last tenth. A purge whose cost is linear in
//! the history has equal tenths.
//!
//! `cargo run --release -p kubestore-benches --example purge_cost -- --revisions 1000000 --keys 1000000`
//!
//! `--keys` is how many distinct keys the puts cycle over: as many as the
//! revisions for creates, fewer for a history of updates (each key is
//! then written revisions / keys times, spread evenly over the history).

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use kubestore_benches::configmap;
use kubestore_server::kube::resources;
use kubestore_storage::{
    Command, Op, PurgeStep, PutRequest, Txn, TypeConfig, PURGE_STEP_REVISIONS,
};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

#[derive(Parser)]
struct Args {
    /// Puts before the compaction (one revision each).
    #[arg(long, default_value_t = 200_000)]
    revisions: u64,
    /// Distinct keys the puts cycle over.
    #[arg(long, default_value_t = 200_000)]
    keys: u64,
}

/// Log entries applied per `apply` call while filling.
const APPLY_BATCH: u64 = 200;

fn entry(index: u64, command: Command) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(command.into()),
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.keys > 0, "--keys must be positive");
    let rt = resources::find("", "v1", "configmaps").context("configmaps are served")?;
    let runtime = tokio::runtime::Runtime::new()?;
    let dir = tempfile::tempdir()?;
    let (_log, mut sm, store) = kubestore_storage::open(dir.path())?;

    let filling = Instant::now();
    let mut next = 1;
    while next <= args.revisions {
        let last = (next + APPLY_BATCH - 1).min(args.revisions);
        let batch: Vec<_> = (next..=last)
            .map(|index| {
                let i = ((index - 1) % args.keys) as usize;
                let key = rt.key(Some("default"), &format!("cm-{i:07}"));
                let put = PutRequest::new(key, configmap(i).to_string().into_bytes());
                entry(
                    index,
                    Command::Txn(Txn {
                        success: vec![Op::Put(put)],
                        ..Txn::default()
                    }),
                )
            })
            .collect();
        runtime.block_on(sm.apply(batch))?;
        next = last + 1;
    }
    let compact_to = store.applied().revision;
    runtime.block_on(sm.apply(vec![entry(
        next,
        Command::Compact {
            revision: compact_to,
        },
    )]))?;
    println!(
        "{} revisions over {} keys written in {:.1} s; compacted to {}",
        args.revisions,
        args.keys,
        filling.elapsed().as_secs_f64(),
        compact_to.0
    );

    let purging = Instant::now();
    let mut steps: Vec<Duration> = Vec::new();
    loop {
        let started = Instant::now();
        let step = store.purge_compacted_history(PURGE_STEP_REVISIONS)?;
        steps.push(started.elapsed());
        if let PurgeStep::Done { purged } = step {
            anyhow::ensure!(
                purged == compact_to,
                "purged to {purged:?}, not {compact_to:?}"
            );
            break;
        }
    }
    let total = purging.elapsed();
    let tenth = (steps.len() / 10).max(1);
    let mean_ms = |s: &[Duration]| {
        s.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / s.len().max(1) as f64
    };
    let first = mean_ms(&steps[..tenth]);
    let last = mean_ms(&steps[steps.len() - tenth..]);
    let slowest = steps.iter().max().copied().unwrap_or_default();
    println!(
        "purged {} revisions in {:.2} s: {} steps of {}, mean step {:.1} ms in the first tenth, {:.1} ms in the last ({:.2}×), slowest {:.1} ms",
        compact_to.0,
        total.as_secs_f64(),
        steps.len(),
        PURGE_STEP_REVISIONS,
        first,
        last,
        last / first,
        slowest.as_secs_f64() * 1e3,
    );
    Ok(())
}

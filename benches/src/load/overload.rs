//! `kubestore bench overload`: a 3-node kubestore under ten times the write
//! rate it sustains, with its in-flight limits on and then off.
//!
//! First a closed-loop put run (`--clients`) measures the sustainable rate
//! `S` and its latency. Then puts are offered *open loop* at `--factor` × S
//! for `--seconds`: each request starts on schedule whether or not earlier
//! ones were answered, as load from many independent clients does. The
//! nodes' resident memory is sampled throughout. Both phases run against
//! a cluster with the default limits (`--max-mutating-requests-inflight`
//! 200) and, as the baseline, against one started without them.
//!
//! With limits, what the nodes cannot take is refused at once
//! (`ResourceExhausted`), so admitted requests keep a bounded latency and
//! memory stays flat; without them, requests queue in the nodes, latency
//! and memory grow with the backlog. `results.json` holds both runs and
//! the ratios overload/sustainable of each.
//!
//! Admitted latency is reported twice: as the client saw it, from the
//! moment it sent the request (which includes the wait in its own HTTP/2
//! streams, long when the generator shares the nodes' cores), and as the
//! nodes measured it, from admission to answer (the
//! `kubestore_admitted_request_duration_seconds` histogram of every node,
//! before and after the phase). Memory is the largest node's RSS over the
//! overload phase (its peak, the peak of each quarter and one sample per
//! second): a node whose memory is bounded levels off, one that queues
//! keeps growing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use kubestore_proto::etcd::etcdserverpb::kv_client::KvClient;
use kubestore_proto::etcd::etcdserverpb::PutRequest;
use serde::Serialize;
use serde_json::json;
use tokio::process::Child;
use tonic::transport::Channel;

use super::args::LoadArgs;
use super::compare::{fresh_data_dir, kubestore_specs, wait_ready};
use super::cpu::rss_bytes;
use super::record::{latency_histogram, lock};
use super::workload::{self, etcd_channel, Workload};

#[derive(Debug, Args)]
pub struct OverloadArgs {
    /// Closed-loop clients of the sustainable-rate run.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Requests of the sustainable-rate run.
    #[arg(long, default_value_t = 20_000)]
    pub requests: u64,
    /// Offered load of the overload phase, as a multiple of the sustainable rate.
    #[arg(long, default_value_t = 10.0)]
    pub factor: f64,
    /// Seconds of the overload phase.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Where results.json, the node logs and (while running) data go.
    #[arg(long, default_value = "bench-overload")]
    pub out: PathBuf,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
}

/// Connections the open-loop phase multiplexes its requests over.
const OPEN_LOOP_CONNECTIONS: usize = 64;
/// Requests the load generator itself keeps open at most; beyond it a
/// scheduled request is counted as not sent (the client, not the server,
/// would be the bottleneck).
const MAX_CLIENT_OUTSTANDING: u64 = 200_000;

/// One cluster's figures: the sustainable run and the overload phase.
#[derive(Debug, Serialize)]
struct Phases {
    limits: bool,
    sustainable_per_second: f64,
    sustainable_p99_ms: f64,
    sustainable_peak_rss_mb: f64,
    offered_per_second: f64,
    admitted_per_second: f64,
    admitted_p50_ms: f64,
    admitted_p99_ms: f64,
    /// p99 of the admitted puts as the nodes measured them, from admission
    /// to answer (`kubestore_admitted_request_duration_seconds`): the upper
    /// bound of the bucket holding it.
    server_admitted_p99_ms: f64,
    refused: u64,
    failed: u64,
    not_sent: u64,
    overload_peak_rss_mb: f64,
    /// The peak of each quarter of the overload phase, in order: a node
    /// whose memory is bounded levels off (the last quarters' peaks stay
    /// at the first's), one that queues keeps climbing.
    overload_quarter_peak_rss_mb: Vec<f64>,
    /// The largest node's RSS at the end of each second of the overload
    /// phase, for plotting.
    overload_rss_mb_per_second: Vec<f64>,
    first_error: Option<String>,
}

/// Cumulative bucket counts (upper bound in seconds → count) of the
/// mutating class's admitted-request histogram, summed over `nodes` (REST
/// addresses).
async fn admitted_mutating_buckets(nodes: &[String]) -> anyhow::Result<Vec<(f64, u64)>> {
    const PREFIX: &str =
        "kubestore_admitted_request_duration_seconds_bucket{class=\"mutating\",le=\"";
    let http = reqwest::Client::new();
    let mut sum: Vec<(f64, u64)> = Vec::new();
    for node in nodes {
        let text = http
            .get(format!("http://{node}/metrics"))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let buckets = text.lines().filter_map(|line| {
            let (bound, count) = line.strip_prefix(PREFIX)?.split_once("\"} ")?;
            let bound = if bound == "+Inf" {
                f64::INFINITY
            } else {
                bound.parse().ok()?
            };
            Some((bound, count.trim().parse::<u64>().ok()?))
        });
        for (i, (bound, count)) in buckets.enumerate() {
            match sum.get_mut(i) {
                Some(slot) => slot.1 += count,
                None => sum.push((bound, count)),
            }
        }
    }
    anyhow::ensure!(!sum.is_empty(), "no admitted-request histogram in /metrics");
    Ok(sum)
}

/// The upper bound (ms) of the bucket that holds the p99 of the
/// observations made between `before` and `after`.
fn bucket_p99_ms(before: &[(f64, u64)], after: &[(f64, u64)]) -> f64 {
    let delta: Vec<(f64, u64)> = after
        .iter()
        .enumerate()
        .map(|(i, (bound, n))| (*bound, n - before.get(i).map_or(0, |b| b.1).min(*n)))
        .collect();
    let total = delta.last().map_or(0, |d| d.1);
    let rank = (total as f64 * 0.99).ceil() as u64;
    delta
        .iter()
        .find(|(_, n)| *n >= rank)
        .map_or(f64::INFINITY, |(bound, _)| bound * 1000.0)
}

/// What the open-loop phase records.
#[derive(Default)]
struct OpenLoop {
    admitted: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    outstanding: AtomicU64,
    not_sent: AtomicU64,
    first_error: std::sync::Mutex<Option<String>>,
}

/// Samples the largest node's RSS every [`RSS_SAMPLE_INTERVAL`] until
/// stopped; returns every sample, in order.
fn sample_rss(
    pids: Vec<u32>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Vec<u64>>,
) {
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut samples = Vec::new();
        let mut tick = tokio::time::interval(RSS_SAMPLE_INTERVAL);
        loop {
            tokio::select! {
                _ = &mut stopped => return samples,
                _ = tick.tick() => {
                    samples.push(pids.iter().map(|&pid| rss_bytes(pid).unwrap_or(0)).max().unwrap_or(0));
                }
            }
        }
    });
    (stop, task)
}

/// The largest node's RSS, sampled every [`RSS_SAMPLE_INTERVAL`].
struct RssTrace(Vec<u64>);

/// How often [`sample_rss`] samples.
const RSS_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

impl RssTrace {
    fn mb(bytes: u64) -> f64 {
        bytes as f64 / 1e6
    }

    /// The peak over the whole trace, in MB.
    fn peak_mb(&self) -> f64 {
        Self::mb(self.0.iter().copied().max().unwrap_or(0))
    }

    /// The peak of each quarter of the trace, in MB.
    fn quarter_peaks_mb(&self) -> Vec<f64> {
        let quarter = self.0.len().div_ceil(4).max(1);
        self.0
            .chunks(quarter)
            .map(|c| Self::mb(c.iter().copied().max().unwrap_or(0)))
            .collect()
    }

    /// The last sample of each second, in MB.
    fn per_second_mb(&self) -> Vec<f64> {
        let per_second =
            (Duration::from_secs(1).as_millis() / RSS_SAMPLE_INTERVAL.as_millis()).max(1) as usize;
        self.0
            .chunks(per_second)
            .filter_map(|c| c.last().copied().map(Self::mb))
            .collect()
    }
}

/// Stops sampling; returns the trace.
async fn stop_sampling(
    sampler: (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<Vec<u64>>,
    ),
) -> RssTrace {
    let _ = sampler.0.send(());
    RssTrace(sampler.1.await.unwrap_or_default())
}

/// Offers puts at `rate` per second for `seconds`, open loop.
async fn open_loop(
    endpoints: &[String],
    rate: f64,
    seconds: u64,
    size: usize,
) -> anyhow::Result<(OpenLoop, hdrhistogram::Histogram<u64>, f64)> {
    let mut conns = Vec::new();
    for i in 0..OPEN_LOOP_CONNECTIONS {
        conns.push(KvClient::new(
            etcd_channel(&endpoints[i % endpoints.len()]).await?,
        ));
    }
    let stats = Arc::new(OpenLoop::default());
    let hist = Arc::new(std::sync::Mutex::new(latency_histogram()?));
    let value = Arc::new(vec![b'o'; size]);
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let started = Instant::now();
    let end = started + Duration::from_secs(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    let mut i: u64 = 0;
    loop {
        let due = started + interval.mul_f64(i as f64);
        if due >= end {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        if stats.outstanding.load(Ordering::Relaxed) >= MAX_CLIENT_OUTSTANDING {
            stats.not_sent.fetch_add(1, Ordering::Relaxed);
            i += 1;
            continue;
        }
        let mut kv: KvClient<Channel> = conns[(i as usize) % conns.len()].clone();
        let (stats, hist, value) = (stats.clone(), hist.clone(), value.clone());
        stats.outstanding.fetch_add(1, Ordering::Relaxed);
        tasks.spawn(async move {
            let sent = Instant::now();
            let put = kv
                .put(PutRequest {
                    key: format!("overload/{:08}", i % 10_000).into_bytes(),
                    value: value.to_vec(),
                    ..Default::default()
                })
                .await;
            match put {
                Ok(_) => {
                    stats.admitted.fetch_add(1, Ordering::Relaxed);
                    let _ = lock(&hist).record(sent.elapsed().as_micros().max(1) as u64);
                }
                Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                }
                Err(s) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    lock(&stats.first_error).get_or_insert_with(|| s.to_string());
                }
            }
            stats.outstanding.fetch_sub(1, Ordering::Relaxed);
        });
        // Reap finished tasks as we go so the set does not grow unbounded.
        while tasks.try_join_next().is_some() {}
        i += 1;
    }
    while tasks.join_next().await.is_some() {}
    let elapsed = started.elapsed().as_secs_f64();
    let stats = Arc::try_unwrap(stats).map_err(|_| anyhow::anyhow!("open loop still running"))?;
    let hist = Arc::try_unwrap(hist)
        .map_err(|_| anyhow::anyhow!("open loop still running"))?
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    Ok((stats, hist, elapsed))
}

/// Both phases against a fresh cluster, with or without in-flight limits.
async fn run_cluster(args: &OverloadArgs, limits: bool) -> anyhow::Result<Phases> {
    let label = if limits { "limits" } else { "no-limits" };
    let data = fresh_data_dir(&args.out.join(label))?;
    let specs = kubestore_specs(&data, kubestore_server::config::DEFAULT_READ_LEASE_MS)?;
    let mut children: Vec<Child> = specs
        .iter()
        .map(|s| {
            s.spawn_configured(|c| {
                if !limits {
                    c.max_requests_inflight = 0;
                    c.max_mutating_requests_inflight = 0;
                }
            })
        })
        .collect::<Result<_, _>>()?;
    let endpoints: Vec<String> = specs.iter().map(|s| s.grpc.clone()).collect();
    wait_ready("kubestore", &endpoints, &mut children).await?;
    let pids: Vec<u32> = children.iter().filter_map(Child::id).collect();

    let load = LoadArgs {
        requests: args.requests,
        size: args.size,
        out: args.out.clone(),
        no_progress: args.no_progress,
    };
    let sampler = sample_rss(pids.clone());
    let sustainable =
        workload::run_etcd(&Workload::EtcdPut, &endpoints, args.clients, &load).await?;
    let sustainable_rss = stop_sampling(sampler).await.peak_mb();
    let rest: Vec<String> = specs.iter().map(|s| s.rest.clone()).collect();
    let before = admitted_mutating_buckets(&rest).await?;

    let offered = sustainable.throughput * args.factor;
    println!(
        "{label}: sustainable {:.0} puts/s; offering {offered:.0}/s open loop for {} s",
        sustainable.throughput, args.seconds
    );
    let sampler = sample_rss(pids);
    let (stats, hist, elapsed) = open_loop(&endpoints, offered, args.seconds, args.size).await?;
    let overload_rss = stop_sampling(sampler).await;
    let after = admitted_mutating_buckets(&rest).await?;
    for c in &mut children {
        let _ = c.kill().await;
    }
    // The nodes' data is only for the run (gigabytes after a long one);
    // their logs stay.
    for spec in &specs {
        if let Err(e) = std::fs::remove_dir_all(&spec.data_dir) {
            tracing::warn!(error = %e, dir = %spec.data_dir.display(), "could not remove a node's data");
        }
    }
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let admitted = stats.admitted.load(Ordering::Relaxed);
    Ok(Phases {
        limits,
        sustainable_per_second: sustainable.throughput,
        sustainable_p99_ms: sustainable.p99_ms,
        sustainable_peak_rss_mb: sustainable_rss,
        offered_per_second: offered,
        admitted_per_second: admitted as f64 / elapsed.max(1e-9),
        admitted_p50_ms: ms(0.5),
        admitted_p99_ms: ms(0.99),
        server_admitted_p99_ms: bucket_p99_ms(&before, &after),
        refused: stats.refused.load(Ordering::Relaxed),
        failed: stats.failed.load(Ordering::Relaxed),
        not_sent: stats.not_sent.load(Ordering::Relaxed),
        overload_peak_rss_mb: overload_rss.peak_mb(),
        overload_quarter_peak_rss_mb: overload_rss.quarter_peaks_mb(),
        overload_rss_mb_per_second: overload_rss.per_second_mb(),
        first_error: stats
            .first_error
            .into_inner()
            .unwrap_or_else(|p| p.into_inner()),
    })
}

/// Runs `kubestore bench overload`.
pub async fn run(args: OverloadArgs) -> anyhow::Result<()> {
    let with = run_cluster(&args, true)
        .await
        .context("with in-flight limits")?;
    let without = run_cluster(&args, false)
        .await
        .context("without in-flight limits")?;
    println!(
        "{:<10} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12} {:>10} {:>12} {:>10} {:>22}",
        "limits",
        "sustained/s",
        "offered/s",
        "admitted/s",
        "p99 ms 1x",
        "p99 ms ov",
        "node p99 ov",
        "refused",
        "RSS MB 1x",
        "RSS MB ov",
        "RSS MB ov by quarter"
    );
    for p in [&with, &without] {
        println!(
            "{:<10} {:>12.0} {:>12.0} {:>12.0} {:>12.1} {:>10.1} {:>12} {:>10} {:>12.0} {:>10.0} {:>22}",
            if p.limits { "on" } else { "off" },
            p.sustainable_per_second,
            p.offered_per_second,
            p.admitted_per_second,
            p.sustainable_p99_ms,
            p.admitted_p99_ms,
            format!("<= {}", p.server_admitted_p99_ms),
            p.refused,
            p.sustainable_peak_rss_mb,
            p.overload_peak_rss_mb,
            p.overload_quarter_peak_rss_mb
                .iter()
                .map(|mb| format!("{mb:.0}"))
                .collect::<Vec<_>>()
                .join(" / "),
        );
        if let Some(e) = &p.first_error {
            println!("  first failure (not a refusal): {e}");
        }
    }
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let ratios = |p: &Phases| {
        json!({
            "p99_overload_over_sustainable": ratio(p.admitted_p99_ms, p.sustainable_p99_ms),
            "peak_rss_overload_over_sustainable": ratio(p.overload_peak_rss_mb, p.sustainable_peak_rss_mb),
            "admitted_over_sustainable": ratio(p.admitted_per_second, p.sustainable_per_second),
        })
    };
    let results = json!({
        "factor": args.factor,
        "seconds": args.seconds,
        "with_limits": with,
        "without_limits": without,
        "ratios": { "with_limits": ratios(&with), "without_limits": ratios(&without) },
        "limits_over_no_limits": {
            "p99_under_overload": ratio(with.admitted_p99_ms, without.admitted_p99_ms),
            "peak_rss_under_overload": ratio(with.overload_peak_rss_mb, without.overload_peak_rss_mb),
        },
    });
    println!("ratios: {}", results["ratios"]);
    println!(
        "limits/no limits under overload: {}",
        results["limits_over_no_limits"]
    );
    std::fs::write(
        args.out.join("results.json"),
        serde_json::to_vec_pretty(&results)?,
    )?;
    println!("results in {}", args.out.join("results.json").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reports_its_peak_each_quarters_peak_and_one_sample_a_second() {
        // 2.5 s of samples, climbing by 1 MB every 100 ms.
        let trace = RssTrace((1..=25).map(|mb| mb * 1_000_000).collect());
        assert_eq!(trace.peak_mb(), 25.0);
        assert_eq!(trace.quarter_peaks_mb(), vec![7.0, 14.0, 21.0, 25.0]);
        assert_eq!(trace.per_second_mb(), vec![10.0, 20.0, 25.0]);
        let empty = RssTrace(Vec::new());
        assert_eq!(empty.peak_mb(), 0.0);
        assert!(empty.quarter_peaks_mb().is_empty());
        assert!(empty.per_second_mb().is_empty());
    }
}

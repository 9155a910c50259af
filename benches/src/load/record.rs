//! The one recorder and the one progress bar every `kubestore bench`
//! subcommand uses, and the result row a recorder produces ([`RunResult`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// The progress bar of a closed-loop workload.
pub(super) const WORKLOAD_BAR: &str = "{prefix:>28} [{bar:30}] {pos}/{len} {per_sec} eta {eta}";

/// An HDR histogram of latencies in microseconds, 1 µs to 10 minutes at
/// three significant digits: the one every bench subcommand records into.
pub(super) fn latency_histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

/// A progress bar of `len` steps in `template`, or a hidden one.
pub(super) fn progress(len: u64, label: &str, template: &str, hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(label.to_string());
    bar
}

/// The guarded value, even if a panicking holder poisoned the lock.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one workload (or one operation kind of a mix) records: latencies
/// of successes, request, error and conflict counts, how the server said it
/// served each read, and the first error.
pub(super) struct Recorder {
    hist: Mutex<Histogram<u64>>,
    /// Finished operations, failed ones included, conflicts not.
    requests: AtomicU64,
    errors: AtomicU64,
    conflicts: AtomicU64,
    served: Mutex<BTreeMap<String, u64>>,
    first_error: Mutex<Option<String>>,
}

impl Recorder {
    pub(super) fn new() -> anyhow::Result<Self> {
        Ok(Self {
            hist: Mutex::new(latency_histogram()?),
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            served: Mutex::new(BTreeMap::new()),
            first_error: Mutex::new(None),
        })
    }

    pub(super) fn ok(&self, started: Instant, served: Option<String>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let _ = lock(&self.hist).record(started.elapsed().as_micros().max(1) as u64);
        if let Some(s) = served {
            *lock(&self.served).entry(s).or_default() += 1;
        }
    }

    pub(super) fn err(&self, e: &impl std::fmt::Display) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.errors.fetch_add(1, Ordering::Relaxed);
        lock(&self.first_error).get_or_insert_with(|| e.to_string());
    }

    pub(super) fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn count(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub(super) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub(super) fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// Adds latencies recorded elsewhere (a watcher's own histogram).
    pub(super) fn add_latencies(&self, h: &Histogram<u64>) {
        let _ = lock(&self.hist).add(h);
    }

    /// The row, with its own request and error counts.
    pub(super) fn result(&self, name: &str, clients: usize, seconds: f64) -> RunResult {
        self.result_with(name, clients, self.count(), self.errors(), seconds)
    }

    /// The row, with request and error counts given.
    pub(super) fn result_with(
        &self,
        name: &str,
        clients: usize,
        requests: u64,
        errors: u64,
        seconds: f64,
    ) -> RunResult {
        if let Some(e) = lock(&self.first_error).as_ref() {
            eprintln!("{name}: {errors} errors, first: {e}");
        }
        let hist = lock(&self.hist);
        let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
        let cdf = (0..=100)
            .map(|p| (f64::from(p), ms(f64::from(p) / 100.0)))
            .chain([(99.9, ms(0.999)), (99.99, ms(0.9999))])
            .collect();
        RunResult {
            store: String::new(),
            workload: name.to_string(),
            clients,
            requests,
            errors,
            seconds,
            throughput: requests.saturating_sub(errors) as f64 / seconds.max(1e-9),
            p50_ms: ms(0.5),
            p90_ms: ms(0.9),
            p99_ms: ms(0.99),
            p999_ms: ms(0.999),
            max_ms: hist.max() as f64 / 1000.0,
            served: lock(&self.served).clone(),
            cdf,
        }
    }
}

/// One workload run at one client count.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Which store (set by `compare`; empty otherwise).
    pub store: String,
    pub workload: String,
    pub clients: usize,
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Successful requests per second.
    pub throughput: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// `X-Kubestore-Read` values seen, with counts (REST reads).
    pub served: BTreeMap<String, u64>,
    /// (percentile, latency ms) from 0 to 100, for CDF plots.
    pub cdf: Vec<(f64, f64)>,
}

//! `kubestore bench mixed` from start to end: seed, start the clients and
//! the watches, run for the duration, drain the watches, report. The parts
//! it drives are its sibling modules; what they share is in `mixed`.

use super::clients::{lease_renewer, lister, status_writer};
use super::report::report;
use super::seed::{list_seeded, open_watch, probe_status_path, seed};
use super::watchers::watcher;
use super::*;

/// Runs `kubestore bench mixed`.
pub async fn run(args: MixedArgs) -> anyhow::Result<()> {
    if args.endpoints.is_empty() {
        bail!("--endpoints is empty");
    }
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .timeout(REQUEST_TIMEOUT)
        .build()?;
    // Watches last the whole run: no overall timeout.
    let watch_http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(REQUEST_TIMEOUT)
        .build()?;
    let base = args.endpoints[0].clone();
    seed(&args, &http)
        .instrument(tracing::info_span!(
            "seed",
            nodes = args.nodes,
            pods = args.pods
        ))
        .await?;
    let status_path = probe_status_path(&http, &base).await?;
    let (from, seeded) = list_seeded(&http, &base, args.pods).await?;

    let mut opened = Vec::new();
    for n in 0..args.nodes {
        let endpoint = &args.endpoints[(n % args.endpoints.len() as u64) as usize];
        let resp = open_watch(&watch_http, endpoint, &node_name(n), from)
            .await
            .with_context(|| format!("opening the watch of {}", node_name(n)))?;
        opened.push(resp);
    }

    let start = Instant::now();
    let shared = Arc::new(Shared {
        http,
        endpoints: args.endpoints.clone(),
        pods: args.pods,
        start,
        deadline: start + Duration::from_secs(args.seconds),
        run: format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
        ),
        status_path,
        pod_state: seeded.into_iter().map(Mutex::new).collect(),
        acked: Mutex::new(Vec::new()),
        leases: Recorder::new()?,
        status: Recorder::new()?,
        list_quorum: Recorder::new()?,
        list_any: Recorder::new()?,
        watch_latency: Recorder::new()?,
        delivery: Delivery::default(),
    });
    let span = tracing::info_span!("mixed", seconds = args.seconds, run = %shared.run);
    let (stop_tx, stop_rx) = watch::channel(false);

    let mut watchers = Vec::new();
    for (n, resp) in (0..args.nodes).zip(opened) {
        let task = watcher(
            shared.clone(),
            watch_http.clone(),
            n,
            from,
            resp,
            stop_rx.clone(),
        );
        watchers.push(tokio::spawn(task.instrument(tracing::info_span!(
            parent: &span,
            "watcher",
            node = n
        ))));
    }
    let mut workers = Vec::new();
    let period = Duration::from_millis(args.lease_period_ms);
    for n in 0..args.nodes {
        // First renewals spread over one period, as kubelets' are.
        let offset = period.mul_f64(n as f64 / args.nodes as f64);
        workers.push(tokio::spawn(
            lease_renewer(shared.clone(), n, period, offset)
                .instrument(tracing::info_span!(parent: &span, "lease_renewer", node = n)),
        ));
    }
    for w in 0..args.status_writers {
        workers.push(tokio::spawn(
            status_writer(shared.clone(), w as u64)
                .instrument(tracing::info_span!(parent: &span, "status_writer", writer = w)),
        ));
    }
    for l in 0..args.listers {
        workers.push(tokio::spawn(lister(shared.clone(), l as u64).instrument(
            tracing::info_span!(parent: &span, "lister", lister = l),
        )));
    }
    let bar = progress(
        args.seconds,
        "mixed",
        "{prefix:>8} [{bar:30}] {pos}/{len} s  {msg}",
        args.no_progress,
    );
    let ticker = tokio::spawn(show_progress(shared.clone(), bar.clone()));
    for w in workers {
        w.await?;
    }
    let seconds = start.elapsed().as_secs_f64();
    ticker.abort();
    bar.finish_and_clear();

    // The last events may still be on their way: wait (bounded) for them.
    let drain_deadline = Instant::now() + DRAIN_TIMEOUT;
    while !all_delivered(&shared) && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_tx.send_replace(true);
    for w in watchers {
        w.await?;
    }
    report(&args, &shared, seconds)
}

/// Whether every acknowledged status update reached a watch.
fn all_delivered(shared: &Shared) -> bool {
    let acked = lock(&shared.acked);
    let seen = lock(&shared.delivery.seen);
    acked.iter().all(|rv| seen.contains(rv))
}

/// Updates the timed bar with seconds elapsed and operations so far.
async fn show_progress(shared: Arc<Shared>, bar: ProgressBar) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        bar.set_position(shared.start.elapsed().as_secs());
        bar.set_message(format!(
            "leases {}  status {} ({} conflicts)  lists {}  events {}",
            shared.leases.count(),
            shared.status.count(),
            shared.status.conflicts(),
            shared.list_quorum.count() + shared.list_any.count(),
            shared.delivery.received.load(Ordering::Relaxed),
        ));
    }
}

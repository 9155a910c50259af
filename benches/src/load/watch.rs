//! `kubestore bench watch`: watch fan-out. W watchers spread over the
//! nodes follow one namespace while writers create objects at a fixed
//! rate; it reports delivery latency (HDR percentiles), events delivered
//! per second, events lost, and, given the nodes' pids, server memory per
//! idle watcher: the nodes' resident growth while the watches open, over
//! all of them and over the second half alone (what one more watch costs
//! once the first have paid for the allocator's and connections' one-time
//! growth).
//!
//! Delivery latency is reported twice. From the write's acknowledgement to
//! the moment a watcher reads its event (the issue's definition; an event
//! read before the acknowledgement counts as 0), and from the moment the
//! write was sent (an upper bound that includes the write's own commit).
//! Each watcher keeps its receive time of every write, and latencies are
//! computed after the run, so an event that beats its acknowledgement is
//! never measured against a send time that was not recorded yet.
//!
//! With `--http2` the watchers on a node share `--connections-per-node`
//! HTTP/2 connections (one by default, as one client-go process does);
//! without it each watcher has its own HTTP/1.1 connection.
//!
//! With `--namespaces N` the writes go round-robin to N namespaces and
//! watcher `w` follows namespace `w mod N`, so each event is due to
//! `watchers / N` watchers: many watchers at a write rate whose full
//! fan-out (every watcher, every event) would be more events than the
//! machine can deliver, as with controllers that each watch their own
//! namespace.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::json;

use super::cpu::{rss_bytes, CpuSample};

/// The namespace the watch workload writes and watches (the first of
/// them with `--namespaces`).
const NAMESPACE: &str = "bench-watch";
/// How long opening one watch may take.
const WATCH_OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// Writes in flight at once (the rate limiter issues, this caps).
const MAX_IN_FLIGHT: usize = 64;

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Comma-separated REST base URLs; watchers and writes spread over them.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:8080")]
    pub endpoints: Vec<String>,
    /// Concurrent watches.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Writes per second.
    #[arg(long, default_value_t = 500)]
    pub rate: u64,
    /// Seconds of writing.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// The nodes' process ids, to report resident memory per idle watcher.
    #[arg(long, value_delimiter = ',')]
    pub pids: Vec<u32>,
    /// Multiplex the watchers on HTTP/2 connections (h2c), one per node
    /// unless `--connections-per-node` says more.
    #[arg(long)]
    pub http2: bool,
    /// HTTP/2 connections per node the watchers spread over (with `--http2`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections_per_node: u64,
    /// Namespaces the writes cycle over; watcher `w` follows namespace
    /// `w mod namespaces`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub namespaces: u64,
    /// Where results.json goes.
    #[arg(long, default_value = "bench-results")]
    pub out: std::path::PathBuf,
}

/// Microseconds since `start`, never 0 (0 marks "not yet").
fn micros_since(start: Instant) -> u64 {
    (start.elapsed().as_micros() as u64).max(1)
}

fn total_rss(pids: &[u32]) -> Option<u64> {
    pids.iter().map(|p| rss_bytes(*p)).sum()
}

/// The write sequence number in an event line (objects are named
/// `e-<n>-<run>`).
fn sequence_of(line: &[u8]) -> Option<usize> {
    let marker = br#""name":"e-"#;
    let at = line.windows(marker.len()).position(|w| w == marker)? + marker.len();
    let digits: Vec<u8> = line[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// Namespace `i` of `namespaces`.
fn namespace(i: u64, namespaces: u64) -> String {
    if namespaces == 1 {
        NAMESPACE.to_string()
    } else {
        format!("{NAMESPACE}-{i}")
    }
}

pub async fn run(args: WatchArgs) -> anyhow::Result<()> {
    let client = || {
        let mut builder = reqwest::Client::builder().tcp_nodelay(true);
        if args.http2 {
            builder = builder.http2_prior_knowledge();
        }
        builder.build()
    };
    let http = client()?;
    // Each client keeps its own connection per node: watcher `w` uses
    // client `w / nodes mod connections_per_node` on node `w mod nodes`.
    let connections = if args.http2 {
        args.connections_per_node
    } else {
        1
    };
    let mut watch_clients = vec![http.clone()];
    for _ in 1..connections {
        watch_clients.push(client()?);
    }
    let base = &args.endpoints[0];
    let namespaces = args.namespaces;
    for i in 0..namespaces {
        let name = namespace(i, namespaces);
        let r = http
            .post(format!("{base}/api/v1/namespaces"))
            .json(&json!({ "metadata": { "name": name } }))
            .send()
            .await?;
        if !(r.status().is_success() || r.status().as_u16() == 409) {
            bail!("creating namespace {name}: {}", r.status());
        }
    }
    let listed: serde_json::Value = http
        .get(format!("{base}/api/v1/configmaps?limit=1"))
        .send()
        .await?
        .json()
        .await?;
    let from = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let total_writes = (args.rate * args.seconds) as usize;
    // Names are unique per run (`e-<n>-<run>`), so runs can repeat.
    let run = std::process::id();
    let start = Instant::now();
    // Send and acknowledgement times of write n, in µs since `start`.
    let sent: Arc<Vec<AtomicU64>> =
        Arc::new((0..total_writes).map(|_| AtomicU64::new(0)).collect());
    let acked: Arc<Vec<AtomicU64>> =
        Arc::new((0..total_writes).map(|_| AtomicU64::new(0)).collect());
    let received = Arc::new(AtomicU64::new(0));
    let all_received = Arc::new(tokio::sync::Notify::new());

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let rss_before = total_rss(&args.pids);
    // Sampled again when half the watches are open: the second half's
    // growth is what one more watch costs, without what the first watches
    // paid once (the allocator's first pages per size class and thread,
    // the connection's stream tables).
    let mut rss_half = None;
    let mut watchers = Vec::new();
    let nodes = args.endpoints.len();
    for w in 0..args.watchers {
        if w == args.watchers / 2 {
            rss_half = total_rss(&args.pids);
        }
        let ns = w as u64 % namespaces;
        let url = format!(
            "{}/api/v1/namespaces/{}/configmaps?watch=1&resourceVersion={from}",
            args.endpoints[w % nodes],
            namespace(ns, namespaces),
        );
        let http = &watch_clients[(w / nodes) % watch_clients.len()];
        // Bounded: over HTTP/2 a watch beyond the server's concurrent
        // stream limit per connection would otherwise wait for a slot forever.
        let resp = match tokio::time::timeout(WATCH_OPEN_TIMEOUT, http.get(url).send()).await {
            Ok(resp) => resp?,
            Err(_) => bail!(
                "watch {w} did not open within {WATCH_OPEN_TIMEOUT:?}{}",
                if args.http2 {
                    " (over HTTP/2: the server's limit of concurrent streams per connection may be below the watchers per node)"
                } else {
                    ""
                }
            ),
        };
        if !resp.status().is_success() {
            bail!("watch {w}: {}", resp.status());
        }
        let (received, all_received) = (received.clone(), all_received.clone());
        let mut stop = stop_rx.clone();
        watchers.push(tokio::spawn(async move {
            let mut body = resp.bytes_stream();
            let mut buf: Vec<u8> = Vec::new();
            // Receive time of write n at `n / namespaces` (0 = not seen):
            // only the writes to this watcher's namespace.
            let mut seen = vec![0u64; total_writes.div_ceil(namespaces as usize)];
            loop {
                let chunk = tokio::select! {
                    next = body.next() => match next {
                        Some(Ok(chunk)) => chunk,
                        _ => break,
                    },
                    _ = stop.wait_for(|s| *s) => break,
                };
                buf.extend_from_slice(&chunk);
                let now = micros_since(start);
                let mut consumed = 0;
                while let Some(nl) = buf[consumed..].iter().position(|b| *b == b'\n') {
                    let line = &buf[consumed..consumed + nl + 1];
                    consumed += nl + 1;
                    let slot =
                        sequence_of(line).and_then(|n| seen.get_mut(n / namespaces as usize));
                    if let Some(slot) = slot {
                        if *slot == 0 {
                            *slot = now;
                            received.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                buf.drain(..consumed);
                all_received.notify_one();
            }
            seen
        }));
    }
    let rss_watching = total_rss(&args.pids);

    // Writers: `rate` creates per second, at most MAX_IN_FLIGHT at once.
    let limit = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate.max(1) as f64));
    let errors = Arc::new(AtomicU64::new(0));
    let write_start = Instant::now();
    let cpu_before = CpuSample::take(&args.pids);
    let mut writes = Vec::new();
    for n in 0..total_writes {
        tick.tick().await;
        let permit = limit.clone().acquire_owned().await?;
        let url = format!(
            "{}/api/v1/namespaces/{}/configmaps",
            args.endpoints[n % nodes],
            namespace(n as u64 % namespaces, namespaces),
        );
        let (http, sent, acked, errors) =
            (http.clone(), sent.clone(), acked.clone(), errors.clone());
        writes.push(tokio::spawn(async move {
            let body =
                json!({ "metadata": { "name": format!("e-{n}-{run}") }, "data": { "v": "x" } });
            if let Some(a) = sent.get(n) {
                a.store(micros_since(start), Ordering::Relaxed);
            }
            match http.post(url).json(&body).send().await {
                Ok(r) if r.status().is_success() => {
                    if let Some(a) = acked.get(n) {
                        a.store(micros_since(start), Ordering::Relaxed);
                    }
                }
                _ => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            drop(permit);
        }));
    }
    for w in writes {
        w.await?;
    }
    let write_seconds = write_start.elapsed().as_secs_f64();
    // Each acknowledged write is due to the watchers of its namespace.
    let watchers_of = |ns: u64| {
        let w = args.watchers as u64;
        w / namespaces + u64::from(ns < w % namespaces)
    };
    let expected: u64 = (0..total_writes)
        .filter(|n| acked[*n].load(Ordering::Relaxed) != 0)
        .map(|n| watchers_of(n as u64 % namespaces))
        .sum();
    // Wait (bounded) for the last events: woken by every chunk a watcher reads.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while received.load(Ordering::Relaxed) < expected {
        let notified = all_received.notified();
        if received.load(Ordering::Relaxed) >= expected
            || tokio::time::timeout_at(deadline, notified).await.is_err()
        {
            break;
        }
    }
    let delivered_seconds = write_start.elapsed().as_secs_f64();
    let cpu = cpu_before.until(&CpuSample::take(&args.pids));
    stop_tx.send_replace(true);
    let (mut from_ack, mut from_send) = (
        super::record::latency_histogram()?,
        super::record::latency_histogram()?,
    );
    for (w, watcher) in watchers.into_iter().enumerate() {
        let seen = watcher.await?;
        let ns = w as u64 % namespaces;
        for (i, at) in seen.into_iter().enumerate() {
            let n = i * namespaces as usize + ns as usize;
            if at == 0 || n >= total_writes {
                continue;
            }
            let ack = acked[n].load(Ordering::Relaxed);
            let send = sent[n].load(Ordering::Relaxed);
            if ack != 0 {
                from_ack.record(at.saturating_sub(ack).max(1))?;
            }
            if send != 0 {
                from_send.record(at.saturating_sub(send).max(1))?;
            }
        }
    }
    let got = received.load(Ordering::Relaxed);
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let per_watcher = match (rss_before, rss_watching) {
        (Some(b), Some(a)) if args.watchers > 0 => {
            Some(a.saturating_sub(b) as f64 / args.watchers as f64)
        }
        _ => None,
    };
    let second_half = args.watchers - args.watchers / 2;
    let per_watcher_marginal = match (rss_half, rss_watching) {
        (Some(h), Some(a)) if args.watchers >= 2 => {
            Some(a.saturating_sub(h) as f64 / second_half as f64)
        }
        _ => None,
    };
    // CPU per event delivered (the writes' own cost is in the servers'
    // figure too, but 1 write fans out to `watchers` events).
    let per_event = |seconds: f64| seconds * 1e6 / (got.max(1) as f64);
    let server_us_per_event = (!args.pids.is_empty()).then(|| per_event(cpu.servers_total()));
    let client_us_per_event = cpu.client.map(per_event);
    let result = json!({
        "watchers": args.watchers,
        "rate": args.rate,
        "http2": args.http2,
        "connections_per_node": connections,
        "namespaces": namespaces,
        "writes": total_writes,
        "write_errors": errors.load(Ordering::Relaxed),
        "write_seconds": write_seconds,
        "events_expected": expected,
        "events_received": got,
        "events_lost": expected.saturating_sub(got),
        "events_per_second": got as f64 / delivered_seconds.max(1e-9),
        "delivery_p50_ms": ms(&from_ack, 0.5),
        "delivery_p90_ms": ms(&from_ack, 0.9),
        "delivery_p99_ms": ms(&from_ack, 0.99),
        "delivery_p999_ms": ms(&from_ack, 0.999),
        "delivery_from_send_p50_ms": ms(&from_send, 0.5),
        "delivery_from_send_p99_ms": ms(&from_send, 0.99),
        "delivery_from_send_p999_ms": ms(&from_send, 0.999),
        "server_bytes_per_idle_watcher": per_watcher,
        "server_bytes_per_idle_watcher_second_half": per_watcher_marginal,
        "server_cpu_seconds": cpu.servers,
        "client_cpu_seconds": cpu.client,
        "server_cpu_us_per_event": server_us_per_event,
        "client_cpu_us_per_event": client_us_per_event,
    });
    println!(
        "watch fan-out: {} watchers ({}) over {namespaces} namespace(s), {} writes/s for {} s\n  events {got}/{expected} ({} lost), {:.0} events/s delivered\n  delivery after the ack: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms\n  delivery after the send: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms{}{}",
        args.watchers,
        if args.http2 { format!("HTTP/2, {connections} connection(s) per node") } else { "HTTP/1.1, one connection each".to_string() },
        args.rate,
        args.seconds,
        expected.saturating_sub(got),
        got as f64 / delivered_seconds.max(1e-9),
        ms(&from_ack, 0.5),
        ms(&from_ack, 0.99),
        ms(&from_ack, 0.999),
        ms(&from_send, 0.5),
        ms(&from_send, 0.99),
        ms(&from_send, 0.999),
        match (per_watcher, per_watcher_marginal) {
            (Some(all), Some(half)) => format!(
                "\n  server memory per idle watcher: {:.1} KiB (the second half of the watches alone: {:.1} KiB)",
                all / 1024.0,
                half / 1024.0
            ),
            (Some(all), None) => format!("\n  server memory per idle watcher: {:.1} KiB", all / 1024.0),
            _ => String::new(),
        },
        match (server_us_per_event, client_us_per_event) {
            (Some(s), Some(c)) => format!("\n  CPU per event delivered: servers {s:.2} µs, load generator {c:.2} µs"),
            (None, Some(c)) => format!("\n  CPU per event delivered: load generator {c:.2} µs"),
            _ => String::new(),
        }
    );
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(
        args.out.join("watch-results.json"),
        serde_json::to_vec_pretty(&result)?,
    )?;
    Ok(())
}

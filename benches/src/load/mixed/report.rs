//! The rows of `bench mixed`, its watch accounting, the table,
//! `results.json` and the plots.

use super::*;

/// The rows, the watch accounting, the table, results.json and plots.
pub(super) fn report(args: &MixedArgs, shared: &Shared, seconds: f64) -> anyhow::Result<()> {
    let acked = lock(&shared.acked).clone();
    let seen = lock(&shared.delivery.seen).clone();
    let acked_set: HashSet<u64> = acked.iter().copied().collect();
    let expected = acked.len() as u64;
    let lost = acked.iter().filter(|rv| !seen.contains(rv)).count() as u64;
    let unexpected = seen.iter().filter(|rv| !acked_set.contains(rv)).count() as u64;
    let d = &shared.delivery;
    let nodes = args.nodes as usize;
    let runs = vec![
        shared.leases.result("lease_renew", nodes, seconds),
        shared
            .status
            .result("pod_status_update", args.status_writers, seconds),
        shared
            .list_quorum
            .result("list_pods_quorum", args.listers, seconds),
        shared
            .list_any
            .result("list_pods_any", args.listers, seconds),
        shared
            .watch_latency
            .result_with("watch_delivery", nodes, expected, lost, seconds),
    ];
    let watch = json!({
        "events_expected": expected,
        "events_received": d.received.load(Ordering::Relaxed),
        "events_lost": lost,
        "events_unexpected": unexpected,
        "events_duplicated": d.duplicated.load(Ordering::Relaxed),
        "events_misrouted": d.misrouted.load(Ordering::Relaxed),
        "errors": d.errors.load(Ordering::Relaxed),
        "reconnects": d.reconnects.load(Ordering::Relaxed),
    });
    let conflicts = json!({
        "lease_renew": shared.leases.conflicts(),
        "pod_status_update": shared.status.conflicts(),
    });
    let mut extra = Map::new();
    extra.insert(
        "mixed".into(),
        json!({
            "endpoints": args.endpoints,
            "seconds": args.seconds,
            "nodes": args.nodes,
            "pods": args.pods,
            "lease_period_ms": args.lease_period_ms,
            "status_writers": args.status_writers,
            "listers": args.listers,
            "pod_status_path": shared.status_path.describe(),
            "conflicts": conflicts,
            "watch": watch,
        }),
    );
    let title = format!(
        "mixed: {} nodes, {} pods, {} s",
        args.nodes, args.pods, args.seconds
    );
    super::super::report_with(&title, &runs, &args.out, extra)?;
    println!(
        "pod status updates via {}: {} conflicts (re-read and retried)",
        shared.status_path.describe(),
        shared.status.conflicts()
    );
    println!(
        "watch: {} of {expected} acknowledged updates delivered, {lost} lost, {} duplicated, \
         {} misrouted, {unexpected} from unacknowledged writes, {} errors, {} reconnects",
        expected - lost,
        d.duplicated.load(Ordering::Relaxed),
        d.misrouted.load(Ordering::Relaxed),
        d.errors.load(Ordering::Relaxed),
        d.reconnects.load(Ordering::Relaxed),
    );
    if lost > 0 {
        eprintln!("LOST EVENTS: {lost} acknowledged status updates never reached their watch");
    }
    Ok(())
}

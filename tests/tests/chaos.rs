//! The fault-schedule checker on a short seeded schedule: a 3-node cluster
//! of real processes under kill -9, SIGSTOP, isolation of the leader and
//! of followers, and a slow disk, with clients on both APIs through every
//! node. The history must be linearizable per key and keep the revision
//! contract; the nodes must end identical and all be up. Readiness is
//! polled and its disagreements with service printed (they do not fail
//! the run unless it is strict: see `chaos::readiness`). (The 10-minute schedules of the
//! README run the same code through `kubestore-chaos`.)

use std::time::Duration;

use kubestore_tests::chaos::history::{Api, Outcome};
use kubestore_tests::chaos::nemesis::FaultKind;
use kubestore_tests::chaos::{self, ChaosConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_fault_schedule_keeps_every_promise() {
    // Kept after the test, failed or not: the report, history and logs are
    // the evidence.
    let out = tempfile::tempdir().expect("tempdir").keep();
    let config = ChaosConfig::new(20261123, Duration::from_secs(75), out.join("chaos"));
    let report = chaos::run(&config).await.expect("the checker runs");
    let summary = report.summary();
    println!("{summary}");
    assert!(
        report.passed(),
        "violations (report in {}):\n{summary}",
        config.out.display()
    );
    // The run did real work: every fault kind, both APIs, both watchers.
    for kind in FaultKind::ALL {
        assert!(
            report.faults.iter().any(|f| f.fault.kind == kind),
            "no {} fault in the schedule",
            kind.name()
        );
    }
    for api in [Api::Rest, Api::Etcd] {
        let ok_writes = report
            .history
            .ops
            .iter()
            .filter(|o| {
                o.api == api && o.outcome == Outcome::Ok && o.is_write() && o.result.succeeded
            })
            .count();
        assert!(ok_writes > 50, "only {ok_writes} successful {api:?} writes");
    }
    assert!(
        report.watches.iter().all(|w| w.events > 0),
        "a watcher received nothing: {:?}",
        report.watches
    );
    assert!(
        report.leases.renewals > 20,
        "the lease client barely ran: {:?}",
        report.leases
    );
    // Readiness was polled on every node through the whole run (a probe
    // every 200 ms: hundreds per node in 75 s, fewer while paused).
    assert_eq!(
        report.readiness.nodes.len(),
        3,
        "{:?}",
        report.readiness.nodes
    );
    for (node, r) in &report.readiness.nodes {
        assert!(r.samples > 100, "node {node}: {r:?}");
        assert!(r.ready > 0, "node {node} never said ready: {r:?}");
    }
    assert!(config.out.join("timeline.svg").exists());
    assert!(config.out.join("report.json").exists());
}

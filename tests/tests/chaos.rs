//! The fault-schedule checker on a short seeded schedule: a 3-node cluster
//! of real processes under kill -9, SIGSTOP, isolation of the leader and
//! of followers, and a slow disk, with clients on both APIs through every
//! node. The history must be linearizable per key and keep the revision
//! contract; the nodes must end identical and all be up. Readiness is
//! polled and its disagreements with service printed (they do not fail
//! the run unless it is strict: see `chaos::readiness`). (The 10-minute schedules of the
//! README run the same code through `kubestore-chaos`.)

use std::time::Duration;

use kubestore_tests::chaos::history::{Api, OpKind, Outcome};
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
        // Reads at an exact revision were answered, not all refused (a
        // malformed request would leave the `exact-read` check nothing).
        let exact_reads = report
            .history
            .ops
            .iter()
            .filter(|o| {
                o.api == api && o.outcome == Outcome::Ok && matches!(o.kind, OpKind::ReadAt { .. })
            })
            .count();
        assert!(
            exact_reads > 10,
            "only {exact_reads} answered {api:?} reads at an exact revision"
        );
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

/// A fault action that fails is recorded and the nemesis goes on; a node
/// that is down after healing is named as a failure of the run, and one
/// that healing brought back is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fault_action_is_recorded_and_the_nemesis_goes_on() {
    use kubestore_tests::chaos::nemesis::Nemesis;
    use kubestore_tests::chaos::workload::Recorder;
    use kubestore_tests::{ClusterOptions, TestCluster};

    let options = ClusterOptions {
        fault_injection: true,
        ..ClusterOptions::default()
    };
    let mut cluster = TestCluster::spawn(3, options).await.expect("3 nodes");
    let recorder = Recorder::new(std::time::Instant::now());

    // Phase 1: node 3 is down (killed, not restarted), so isolating it
    // fails, and so does healing the isolation.
    cluster.kill(3).await.expect("kill node 3");
    let failures = chaos::cluster_whole_again(&mut cluster).await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].starts_with("node 3 is down at the end"),
        "{failures:?}"
    );
    let mut nemesis = Nemesis::new(&mut cluster, 1, vec![FaultKind::Isolate]).expect("nemesis");
    let hold = Duration::from_millis(100);
    let failed = nemesis
        .fault(&recorder, FaultKind::Isolate, 3, false, hold)
        .await;
    assert!(failed.is_none(), "{failed:?}");
    let actions: Vec<(u64, &str)> = nemesis
        .errors()
        .iter()
        .map(|e| (e.node, e.action.as_str()))
        .collect();
    assert_eq!(actions, [(3, "inject isolate"), (3, "heal isolate")]);

    // Phase 2: the next fault, on a live node, happens as usual.
    let done = nemesis
        .fault(&recorder, FaultKind::Isolate, 1, false, hold)
        .await
        .expect("node 1 is isolated and healed");
    assert_eq!((done.kind, done.node), (FaultKind::Isolate, 1));
    assert_eq!(nemesis.errors().len(), 2, "{:?}", nemesis.errors());

    // Phase 3: healing restarts node 3; the cluster is whole again.
    nemesis.heal_all(&recorder).await;
    assert_eq!(nemesis.errors().len(), 2, "{:?}", nemesis.errors());
    let failures = chaos::cluster_whole_again(&mut cluster).await;
    assert!(failures.is_empty(), "{failures:?}");
    cluster.shutdown().await;
}

//! `kubestore bench` end to end in a tiny configuration: the side-by-side
//! comparison with Debian's etcd writes the results.json shape the README
//! documents and its plots, the REST workloads report how each read mode
//! was served, the mixed workload accounts for every watch event, and the
//! scale workload measures every count it grows to. (No
//! timing is asserted: benchmarks are programs.)

use std::process::Command;

use kubestore_tests::{kubestore_binary, TestCluster};
use serde_json::Value;

fn results(dir: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("results.json")).expect("results.json"))
        .expect("JSON")
}

fn assert_svg(path: std::path::PathBuf) {
    let text = std::fs::read_to_string(&path).expect("plot written");
    assert!(text.contains("<svg"), "{} is not an SVG", path.display());
}

/// Fails with what the bench printed, and the tail of every server log it
/// left under `out/data`, unless it exited successfully.
fn assert_succeeded(output: &std::process::Output, out: &std::path::Path) {
    if output.status.success() {
        return;
    }
    let mut logs = String::new();
    if let Ok(dir) = std::fs::read_dir(out.join("data")) {
        for entry in dir.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                logs.push_str(&format!("--- {} (last 40 lines)\n", path.display()));
                for line in tail.into_iter().rev() {
                    logs.push_str(line);
                    logs.push('\n');
                }
            }
        }
    }
    panic!(
        "bench exited with {}\n--- stdout\n{}\n--- stderr\n{}\n{logs}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}

#[test]
fn bench_compare_writes_ratios_runs_and_plots() {
    let out = tempfile::tempdir().expect("tempdir");
    let output = Command::new(kubestore_binary().expect("binary"))
        .args([
            "bench",
            "compare",
            "--quick",
            "--no-progress",
            "--requests",
            "60",
        ])
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("kubestore bench compare (needs Debian's etcd: scripts/test.sh installs it)");
    assert_succeeded(&output, out.path());
    let r = results(out.path());
    for key in [
        "put_c64",
        "put_c256",
        "range_linearizable",
        "range_serializable",
    ] {
        let ratio = r["ratios"][key].as_f64().unwrap_or(f64::NAN);
        assert!(
            ratio.is_finite() && ratio > 0.0,
            "ratio {key}: {}",
            r["ratios"]
        );
    }
    for key in ["rest_create_c64", "rest_update_c64"] {
        let ratio = r["rest_ratios"][key].as_f64().unwrap_or(f64::NAN);
        assert!(
            ratio.is_finite() && ratio > 0.0,
            "REST ratio {key}: {}",
            r["rest_ratios"]
        );
    }
    // Where kubestore's writes went: every write workload has the
    // leader's commit and fsync and the followers' handling of its entries.
    for key in ["put_c64", "put_c256", "rest_create_c64", "rest_update_c64"] {
        let stages = &r["kubestore_stages"][key];
        for (role, stage) in [
            ("leader", "log_fsync"),
            ("leader", "replication_rpc"),
            ("leader", "apply"),
            ("followers", "append_entries_handled"),
            ("followers", "apply"),
        ] {
            let mean = stages[role][stage]["mean_us"].as_f64().unwrap_or(f64::NAN);
            assert!(
                mean.is_finite() && mean > 0.0,
                "{key} {role} {stage}: {stages}"
            );
        }
    }
    // The puts again with every client on the leader, on both stores. 60
    // puts may take less CPU than one tick of the clock, so CPU figures
    // may be 0 (and their ratio null), never missing or negative.
    for store in ["etcd", "kubestore"] {
        let forwarding = &r["forwarding"][store];
        for field in ["spread_puts_per_second", "on_leader_puts_per_second"] {
            let v = forwarding[field].as_f64().unwrap_or(f64::NAN);
            assert!(
                v.is_finite() && v > 0.0,
                "forwarding {store} {field}: {forwarding}"
            );
        }
        for field in [
            "spread_server_cpu_us_per_put",
            "on_leader_server_cpu_us_per_put",
        ] {
            let v = forwarding[field].as_f64().unwrap_or(f64::NAN);
            assert!(
                v.is_finite() && v >= 0.0,
                "forwarding {store} {field}: {forwarding}"
            );
        }
        let ratio = &forwarding["spread_over_on_leader_cpu"];
        assert!(
            ratio.is_null() || ratio.as_f64().is_some_and(|v| v.is_finite() && v >= 0.0),
            "forwarding {store}: {forwarding}"
        );
    }
    let runs = r["runs"].as_array().expect("runs");
    assert_eq!(
        runs.len(),
        12,
        "4 etcd-API workloads and the puts on the leader x 2 stores, 2 REST workloads on kubestore"
    );
    let on_leader = runs
        .iter()
        .filter(|run| run["workload"] == "put_on_leader")
        .count();
    assert_eq!(on_leader, 2, "one leader-only put run per store");
    for run in runs {
        assert_eq!(run["errors"], 0, "{run}");
        assert_eq!(run["requests"], 60);
        assert!(run["p99_ms"].as_f64().is_some_and(|v| v > 0.0));
    }
    assert!(r["disk_fsyncs_per_second"]
        .as_f64()
        .is_some_and(|v| v > 0.0));
    assert_svg(out.path().join("latency-cdf.svg"));
    assert_svg(out.path().join("latency-vs-throughput.svg"));
    assert!(!out.path().join("data").exists(), "data is cleaned up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_rest_reports_how_each_read_was_served() {
    let c = TestCluster::new(3).await.expect("cluster");
    let out = tempfile::tempdir().expect("tempdir");
    let endpoints = c
        .ids()
        .iter()
        .map(|id| c.rest_url(*id))
        .collect::<Vec<_>>()
        .join(",");
    let bin = kubestore_binary().expect("binary");
    let out_dir = out.path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args(["bench", "rest", "--no-progress", "--objects", "20", "--requests", "30"])
            .args(["--clients", "1,4"])
            .args([
                "--workloads",
                "create,update,get_quorum,get_any,list_quorum,list_any,list_not_older_than,list_exact,list_paginated",
            ])
            .args(["--endpoints", &endpoints])
            .arg("--out")
            .arg(&out_dir)
            .output()
    })
    .await
    .expect("join")
    .expect("kubestore bench rest");
    assert_succeeded(&output, out.path());
    let r = results(out.path());
    let runs = r["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 18, "9 workloads x 2 client counts");
    let served = |name: &str| -> Vec<String> {
        runs.iter()
            .filter(|x| x["workload"] == name)
            .flat_map(|x| {
                x["served"]
                    .as_object()
                    .map(|m| m.keys().cloned().collect::<Vec<_>>())
                    .unwrap_or_default()
            })
            .collect()
    };
    for run in runs {
        assert_eq!(run["errors"], 0, "{run}");
    }
    assert!(served("get_quorum").iter().all(|s| s == "quorum-cache"));
    assert!(served("list_any").iter().all(|s| s == "cache"));
    assert!(served("list_exact")
        .iter()
        .all(|s| s == "snapshot" || s == "history"));
    assert!(!served("list_quorum").is_empty());
    assert_svg(out.path().join("latency-cdf.svg"));
    c.shutdown().await;
}

/// Runs `kubestore bench watch` with `args` against a fresh 3-node
/// cluster and returns its `watch-results.json`.
async fn bench_watch(args: &'static [&'static str]) -> Value {
    let c = TestCluster::new(3).await.expect("cluster");
    let out = tempfile::tempdir().expect("tempdir");
    let endpoints = c
        .ids()
        .iter()
        .map(|id| c.rest_url(*id))
        .collect::<Vec<_>>()
        .join(",");
    let bin = kubestore_binary().expect("binary");
    let out_dir = out.path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args(["bench", "watch"])
            .args(args)
            .args(["--endpoints", &endpoints])
            .arg("--out")
            .arg(&out_dir)
            .output()
    })
    .await
    .expect("join")
    .expect("kubestore bench watch");
    assert_succeeded(&output, out.path());
    let r: Value = serde_json::from_slice(
        &std::fs::read(out.path().join("watch-results.json")).expect("watch-results.json"),
    )
    .expect("JSON");
    c.shutdown().await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_watch_delivers_every_event_to_every_watcher() {
    let r = bench_watch(&["--watchers", "6", "--rate", "20", "--seconds", "2"]).await;
    assert_eq!(r["write_errors"], 0, "{r}");
    assert_eq!(r["events_expected"], 6 * 40, "{r}");
    assert_eq!(r["events_lost"], 0, "{r}");
    assert!(
        r["delivery_p99_ms"].as_f64().is_some_and(|v| v > 0.0),
        "{r}"
    );
}

/// Watchers over several HTTP/2 connections per node, each following
/// one of three namespaces: every event reaches the watchers of its
/// namespace, and only those are expected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_watch_over_namespaces_and_connections_delivers_each_event_to_its_namespace() {
    let r = bench_watch(&[
        "--watchers",
        "7",
        "--rate",
        "20",
        "--seconds",
        "2",
        "--namespaces",
        "3",
        "--http2",
        "--connections-per-node",
        "2",
    ])
    .await;
    assert_eq!(r["write_errors"], 0, "{r}");
    // 40 writes: 14, 13 and 13 to namespaces 0, 1 and 2, which 3, 2 and
    // 2 of the 7 watchers follow.
    assert_eq!(r["events_expected"], 14 * 3 + 13 * 2 + 13 * 2, "{r}");
    assert_eq!(r["events_lost"], 0, "{r}");
    assert_eq!(r["connections_per_node"], 2, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_mixed_reports_every_kind_and_delivers_every_status_update() {
    let c = TestCluster::new(3).await.expect("cluster");
    let out = tempfile::tempdir().expect("tempdir");
    let endpoints = c
        .ids()
        .iter()
        .map(|id| c.rest_url(*id))
        .collect::<Vec<_>>()
        .join(",");
    let bin = kubestore_binary().expect("binary");
    let out_dir = out.path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args(["bench", "mixed", "--no-progress", "--seconds", "3"])
            .args(["--nodes", "4", "--pods", "40", "--lease-period-ms", "200"])
            .args(["--status-writers", "2", "--listers", "2"])
            .args(["--endpoints", &endpoints])
            .arg("--out")
            .arg(&out_dir)
            .output()
    })
    .await
    .expect("join")
    .expect("kubestore bench mixed");
    assert_succeeded(&output, out.path());
    let r = results(out.path());
    let runs = r["runs"].as_array().expect("runs");
    let names: Vec<&str> = runs.iter().filter_map(|x| x["workload"].as_str()).collect();
    assert_eq!(
        names,
        [
            "lease_renew",
            "pod_status_update",
            "list_pods_quorum",
            "list_pods_any",
            "watch_delivery"
        ]
    );
    for run in runs {
        assert_eq!(run["errors"], 0, "{run}");
        assert!(run["requests"].as_u64().is_some_and(|n| n > 0), "{run}");
        assert!(run["p99_ms"].as_f64().is_some_and(|v| v > 0.0), "{run}");
    }
    let run = |name: &str| runs.iter().find(|x| x["workload"] == name).expect(name);
    let served = |name: &str| run(name)["served"].as_object().cloned().unwrap_or_default();
    assert!(served("list_pods_any").keys().all(|s| s == "cache"));
    assert!(!served("list_pods_quorum").is_empty());
    let watch = &r["mixed"]["watch"];
    assert_eq!(
        watch["events_expected"],
        run("pod_status_update")["requests"],
        "one event per acknowledged status update: {watch}"
    );
    assert_eq!(watch["events_lost"], 0, "{watch}");
    assert_eq!(watch["events_duplicated"], 0, "{watch}");
    assert_eq!(watch["events_misrouted"], 0, "{watch}");
    assert!(r["mixed"]["conflicts"]["pod_status_update"].is_u64());
    assert_svg(out.path().join("latency-cdf.svg"));
    assert_svg(out.path().join("latency-vs-throughput.svg"));
    c.shutdown().await;
}

#[test]
fn bench_restart_brings_a_killed_follower_and_leader_back_with_every_key() {
    let out = tempfile::tempdir().expect("tempdir");
    let output = Command::new(kubestore_binary().expect("binary"))
        .args([
            "bench",
            "restart",
            "--no-progress",
            "--keys",
            "3000",
            "--clients",
            "4",
        ])
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("kubestore bench restart");
    assert_succeeded(&output, out.path());
    let raw = std::fs::read(out.path().join("restart-results.json")).expect("restart-results.json");
    let r: Value = serde_json::from_slice(&raw).expect("json");
    assert_eq!(r["keys"], 3000);
    let restarts = r["restarts"].as_array().expect("restarts");
    let roles: Vec<&str> = restarts.iter().filter_map(|x| x["role"].as_str()).collect();
    assert_eq!(roles, ["follower", "leader"]);
    for x in restarts {
        let ready = x["ready_seconds"].as_f64().unwrap_or(f64::NAN);
        let caught_up = x["caught_up_seconds"].as_f64().unwrap_or(f64::NAN);
        assert!(ready > 0.0 && caught_up >= ready, "{x}");
        assert!(x["data_bytes"].as_u64().is_some_and(|b| b > 0), "{x}");
    }
    assert!(!out.path().join("data").exists(), "data is cleaned up");
}

#[test]
fn bench_overload_runs_both_clusters_and_only_the_limited_one_refuses() {
    let out = tempfile::tempdir().expect("tempdir");
    let output = Command::new(kubestore_binary().expect("binary"))
        .args([
            "bench",
            "overload",
            "--no-progress",
            "--requests",
            "300",
            "--clients",
            "8",
            "--factor",
            "3",
            "--seconds",
            "1",
        ])
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("kubestore bench overload");
    assert_succeeded(&output, out.path());
    let raw = std::fs::read(out.path().join("results.json")).expect("results.json");
    let r: Value = serde_json::from_slice(&raw).expect("json");
    for (run, limits) in [("with_limits", true), ("without_limits", false)] {
        let p = &r[run];
        assert_eq!(p["limits"], limits, "{r}");
        assert!(
            p["sustainable_per_second"]
                .as_f64()
                .is_some_and(|v| v > 0.0),
            "{r}"
        );
        assert!(
            p["admitted_per_second"].as_f64().is_some_and(|v| v > 0.0),
            "{r}"
        );
        assert!(
            p["overload_peak_rss_mb"].as_f64().is_some_and(|v| v > 0.0),
            "{r}"
        );
        let quarters = p["overload_quarter_peak_rss_mb"].as_array();
        assert!(
            quarters.is_some_and(|q| !q.is_empty()
                && q.len() <= 4
                && q.iter().all(|mb| mb.as_f64().is_some_and(|v| v > 0.0))),
            "{r}"
        );
        assert!(
            p["overload_rss_mb_per_second"]
                .as_array()
                .is_some_and(|s| !s.is_empty()),
            "{r}"
        );
    }
    assert_eq!(
        r["without_limits"]["refused"], 0,
        "no limit, no refusal: {r}"
    );
    assert!(
        r["ratios"]["with_limits"]["admitted_over_sustainable"].is_number(),
        "{r}"
    );
}

#[test]
fn bench_scale_measures_every_count_of_both_kinds_and_catches_up_through_a_snapshot() {
    let out = tempfile::tempdir().expect("tempdir");
    let output = Command::new(kubestore_binary().expect("binary"))
        .args(["bench", "scale", "--no-progress", "--objects", "150,700"])
        .args([
            "--kinds",
            "configmaps,pods",
            "--clients",
            "4",
            "--samples",
            "1",
        ])
        .args([
            "--catch-up-writes",
            "20000",
            "--snapshot-after-entries",
            "100",
        ])
        .args(["--snapshot-catch-up-entries", "50"])
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("kubestore bench scale");
    assert_succeeded(&output, out.path());
    let raw = std::fs::read(out.path().join("scale-results.json")).expect("scale-results.json");
    let r: Value = serde_json::from_slice(&raw).expect("json");
    let kinds: Vec<&str> = r["kinds"]
        .as_array()
        .expect("kinds")
        .iter()
        .filter_map(|k| k["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["configmaps", "pods"], "{r}");
    for kind in r["kinds"].as_array().expect("kinds") {
        assert!(kind["error"].is_null(), "{kind}");
        let points = kind["points"].as_array().expect("points");
        let counts: Vec<u64> = points
            .iter()
            .filter_map(|p| p["objects"].as_u64())
            .collect();
        assert_eq!(counts, [150, 700], "{kind}");
        for p in points {
            let n = p["objects"].as_u64().unwrap_or(0);
            let number = |path: &str| p.pointer(path).and_then(Value::as_f64).unwrap_or(f64::NAN);
            // The objects are made to be about 1 KiB of JSON as stored (a
            // pod's defaults alone are 1.2 KiB).
            let json = number("/json_bytes_per_object");
            assert!((900.0..1400.0).contains(&json), "{p}");
            assert!(number("/disk_bytes_per_object") > 0.0, "{p}");
            assert_eq!(p["rss_bytes"].as_array().map(Vec::len), Some(3), "{p}");
            assert_eq!(p["paginated_pages"].as_u64(), Some(n.div_ceil(500)), "{p}");
            assert!(number("/list_quorum/median_ms") > 0.0, "{p}");
            assert!(number("/first_page_any/median_ms") > 0.0, "{p}");
            assert!(
                p["compacted_revisions"].as_u64().is_some_and(|c| c > 0),
                "{p}"
            );
            assert!(number("/compaction_seconds") > 0.0, "{p}");
            assert!(number("/compaction_slowest_write_ms") > 0.0, "{p}");
            let ready = number("/cold_start/ready_seconds");
            assert!(
                ready > 0.0 && number("/cold_start/serving_seconds") >= ready,
                "{p}"
            );
            // Snapshots every 100 entries and 50 kept behind each: the
            // cluster wrote until the leader purged its log past the
            // stopped follower, which then caught up from a snapshot.
            assert_eq!(p["catch_up"]["log_purged_past_follower"], true, "{p}");
            assert_eq!(p["catch_up"]["snapshot_installed"], true, "{p}");
            assert!(number("/catch_up/snapshot_bytes") > 0.0, "{p}");
        }
    }
    for plot in ["bytes-per-object", "list-latency", "recovery"] {
        assert_svg(out.path().join(format!("scale-{plot}.svg")));
    }
    assert!(!out.path().join("data").exists(), "data is cleaned up");
}

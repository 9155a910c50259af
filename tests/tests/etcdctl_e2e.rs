//! Debian's `etcdctl` (3.4, installed by `scripts/test.sh`) against a
//! 3-node kubestore, each command through a different node: everyday KV
//! commands, an interactive txn, watch, leases, compaction, endpoint status
//! and health, member list and snapshot save.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use kubestore_tests::TestCluster;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

fn etcdctl_path() -> String {
    std::env::var("ETCDCTL").unwrap_or_else(|_| "etcdctl".into())
}

fn etcdctl(endpoint: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(etcdctl_path())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(["--command-timeout=10s"])
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run etcdctl: {e}; run scripts/test.sh, which installs it")
        });
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).expect("stdin");
    }
    child.wait_with_output().expect("etcdctl output")
}

fn ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn revision_of(json: &str) -> i64 {
    let v: Value = serde_json::from_str(json).expect("etcdctl -w json");
    v["header"]["revision"].as_i64().expect("header.revision")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_everyday_commands_through_different_nodes() {
    let c = TestCluster::new(3).await.expect("cluster");
    let ep: Vec<String> = c
        .ids()
        .iter()
        .map(|id| {
            c.etcd_endpoint(*id)
                .trim_start_matches("http://")
                .to_string()
        })
        .collect();

    // put / get / del through different nodes.
    assert_eq!(
        ok(&etcdctl(&ep[0], &["put", "foo", "bar"], None), "put"),
        "OK\n"
    );
    assert_eq!(
        ok(&etcdctl(&ep[1], &["get", "foo"], None), "get"),
        "foo\nbar\n"
    );
    assert_eq!(ok(&etcdctl(&ep[2], &["del", "foo"], None), "del"), "1\n");
    assert_eq!(ok(&etcdctl(&ep[0], &["get", "foo"], None), "get gone"), "");

    // get --rev reads the past.
    let r1 = revision_of(&ok(
        &etcdctl(&ep[0], &["put", "hist", "v1", "-w", "json"], None),
        "put v1",
    ));
    ok(&etcdctl(&ep[1], &["put", "hist", "v2"], None), "put v2");
    let old = ok(
        &etcdctl(
            &ep[2],
            &["get", "hist", &format!("--rev={r1}"), "--print-value-only"],
            None,
        ),
        "get --rev",
    );
    assert_eq!(old, "v1\n");

    // get --prefix --limit.
    for i in 1..=5 {
        ok(
            &etcdctl(&ep[i % 3], &["put", &format!("pre/{i}"), "x"], None),
            "put prefix",
        );
    }
    let limited = ok(
        &etcdctl(
            &ep[1],
            &["get", "pre/", "--prefix", "--limit=2", "--keys-only"],
            None,
        ),
        "get --prefix --limit",
    );
    let keys: Vec<&str> = limited.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(keys, vec!["pre/1", "pre/2"]);

    // An interactive txn: compares, success ops, failure ops.
    let script = "mod(\"t\") = \"0\"\n\nput t created\n\nget t\n\n";
    // (etcdctl prints its prompts to stdout before the outcome line.)
    let first = ok(&etcdctl(&ep[2], &["txn", "-i"], Some(script)), "txn");
    assert!(first.lines().any(|l| l == "SUCCESS"), "{first}");
    let second = ok(&etcdctl(&ep[0], &["txn", "-i"], Some(script)), "txn again");
    assert!(
        second.lines().any(|l| l == "FAILURE") && second.contains("created"),
        "{second}"
    );

    // watch --rev --prev-kv sees history, then live changes.
    let start = revision_of(&ok(
        &etcdctl(&ep[0], &["put", "w/1", "a", "-w", "json"], None),
        "put w/1",
    ));
    let mut watch = tokio::process::Command::new(etcdctl_path())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", ep[1]))
        .args([
            "watch",
            "w/",
            "--prefix",
            "--prev-kv",
            &format!("--rev={start}"),
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("etcdctl watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    ok(
        &etcdctl(&ep[2], &["put", "w/1", "b"], None),
        "put w/1 again",
    );
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), async {
        while seen.len() < 7 {
            match lines.next_line().await {
                Ok(Some(l)) => seen.push(l),
                _ => break,
            }
        }
    })
    .await
    .expect("watch output in time");
    // PUT w/1 a, then PUT with the previous value a and the new value b.
    assert_eq!(seen[..3], ["PUT", "w/1", "a"], "{seen:?}");
    assert_eq!(seen[3..7], ["PUT", "w/1", "a", "w/1"], "{seen:?}");
    watch.kill().await.expect("stop watch");

    // lease grant / put --lease / keep-alive / timetolive / revoke.
    let granted = ok(
        &etcdctl(&ep[0], &["lease", "grant", "60"], None),
        "lease grant",
    );
    let lease = granted
        .split_whitespace()
        .nth(1)
        .expect("lease <id> granted ...")
        .to_string();
    assert!(granted.contains("granted with TTL(60s)"), "{granted}");
    ok(
        &etcdctl(
            &ep[1],
            &["put", "lk", "v", &format!("--lease={lease}")],
            None,
        ),
        "put --lease",
    );
    let kept = ok(
        &etcdctl(&ep[2], &["lease", "keep-alive", "--once", &lease], None),
        "lease keep-alive",
    );
    assert!(kept.contains("keepalived with TTL(60)"), "{kept}");
    let ttl = ok(
        &etcdctl(&ep[0], &["lease", "timetolive", &lease, "--keys"], None),
        "lease timetolive",
    );
    assert!(
        ttl.contains("granted with TTL(60s)") && ttl.contains("attached keys([lk])"),
        "{ttl}"
    );
    let revoked = ok(
        &etcdctl(&ep[1], &["lease", "revoke", &lease], None),
        "lease revoke",
    );
    assert!(revoked.contains("revoked"), "{revoked}");
    assert_eq!(ok(&etcdctl(&ep[2], &["get", "lk"], None), "get lk"), "");

    // compaction, then an old --rev read fails with etcd's message.
    let now = revision_of(&ok(
        &etcdctl(&ep[0], &["put", "last", "x", "-w", "json"], None),
        "put last",
    ));
    let compacted = ok(
        &etcdctl(&ep[1], &["compaction", &now.to_string()], None),
        "compaction",
    );
    assert!(
        compacted.contains(&format!("compacted revision {now}")),
        "{compacted}"
    );
    let too_old = etcdctl(&ep[2], &["get", "hist", &format!("--rev={r1}")], None);
    assert!(!too_old.status.success());
    assert!(
        String::from_utf8_lossy(&too_old.stderr)
            .contains("etcdserver: mvcc: required revision has been compacted"),
        "{}",
        String::from_utf8_lossy(&too_old.stderr)
    );

    // endpoint status --cluster, endpoint health, member list.
    let status = ok(
        &etcdctl(
            &ep[0],
            &["endpoint", "status", "--cluster", "-w", "json"],
            None,
        ),
        "endpoint status",
    );
    let statuses: Value = serde_json::from_str(&status).expect("json");
    let statuses = statuses.as_array().expect("array");
    assert_eq!(statuses.len(), 3, "{status}");
    let leaders: Vec<u64> = statuses
        .iter()
        .filter_map(|s| s["Status"]["leader"].as_u64())
        .collect();
    assert!(leaders.windows(2).all(|p| p[0] == p[1]) && leaders.len() == 3);
    let all = ep.join(",");
    let health = etcdctl(&all, &["endpoint", "health"], None);
    let health_text = format!(
        "{}{}",
        String::from_utf8_lossy(&health.stdout),
        String::from_utf8_lossy(&health.stderr)
    );
    assert!(health.status.success(), "{health_text}");
    assert_eq!(
        health_text.matches("is healthy").count(),
        3,
        "{health_text}"
    );
    let members = ok(&etcdctl(&ep[2], &["member", "list"], None), "member list");
    assert_eq!(members.lines().count(), 3, "{members}");

    // snapshot save streams the whole store to a file.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("snap.db");
    let saved = ok(
        &etcdctl(
            &ep[0],
            &["snapshot", "save", file.to_str().expect("path")],
            None,
        ),
        "snapshot save",
    );
    assert!(saved.contains("Snapshot saved at"), "{saved}");
    // The streamed file keeps the shape etcdctl checks on restore: a
    // multiple of 512 bytes plus its SHA-256.
    let len = std::fs::metadata(&file).expect("snapshot file").len();
    assert!(len > 0 && len % 512 == 32, "{len} bytes");
    c.shutdown().await;
}

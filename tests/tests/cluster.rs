//! Cluster behaviour under faults: linearizable reads from every node, a
//! leader killed with -9 during writes, and followers catching up by log
//! and by snapshot.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kubestore_proto::etcd::etcdserverpb::kv_client::KvClient;
use kubestore_proto::etcd::etcdserverpb::RangeRequest;
use kubestore_proto::raft::cluster_service_client::ClusterServiceClient;
use kubestore_proto::raft::raft_service_client::RaftServiceClient;
use kubestore_proto::raft::{
    ClientAddrRequest, ForwardRequest, ForwardResponse, Payload, ReadIndexRequest,
    ReadIndexResponse,
};
use kubestore_raft::call_stream::{call_all, StreamKind};
use kubestore_tests::{ClusterOptions, KubeClient, TestCluster};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::Mutex;

/// The configmaps of `ns` as (name, resourceVersion) pairs, read through `n`.
async fn snapshot_of(n: &KubeClient, ns: &str) -> (u64, Vec<(String, String)>) {
    let list = n
        .get(&format!("/api/v1/namespaces/{ns}/configmaps"))
        .await
        .expect("list");
    assert_eq!(list.status, StatusCode::OK, "{}", list.text);
    let items = list.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                i["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    (list.rv(), items)
}

/// Creates `count` configmaps named `<prefix>-<i>` with `writers` concurrent
/// clients, each through the node its index picks from `ids`.
async fn write_many(c: &TestCluster, ids: &[u64], prefix: &str, count: usize, writers: usize) {
    let clients: Vec<KubeClient> = ids.iter().map(|id| c.kube(*id)).collect();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let client = clients[w % clients.len()].clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(writers) {
                let r = client
                    .create_configmap("default", &format!("{prefix}-{i}"), &i.to_string())
                    .await
                    .expect("create");
                assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_one_node_is_seen_by_a_most_recent_read_on_every_other() {
    let c = TestCluster::new(3).await.expect("cluster");
    let ids = c.ids();
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let clients: Vec<KubeClient> = ids.iter().map(|id| c.kube(*id)).collect();
        tasks.push(tokio::spawn(async move {
            for i in 0..25u64 {
                let writer = ((t + i) % 3) as usize;
                let reader = ((t + i + 1) % 3) as usize;
                let name = format!("lin-{t}-{i}");
                let created = clients[writer]
                    .create_configmap("default", &name, "x")
                    .await
                    .expect("create");
                assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
                // The read starts after the write was acknowledged: it must see it.
                let got = clients[reader]
                    .get(&format!("/api/v1/namespaces/default/configmaps/{name}"))
                    .await
                    .expect("get");
                assert_eq!(
                    got.status,
                    StatusCode::OK,
                    "stale read on node {}: {}",
                    reader + 1,
                    got.text
                );
                assert_eq!(got.rv(), created.rv());
                let list = clients[reader]
                    .get("/api/v1/namespaces/default/configmaps")
                    .await
                    .expect("list");
                assert!(
                    list.rv() >= created.rv(),
                    "a most-recent list is older than an acknowledged write"
                );
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    c.shutdown().await;
}

/// How a restarted follower must catch up in [`follower_catch_up`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatchUp {
    /// From the log; the leader has no snapshot past the follower.
    Log,
    /// From the log, although the leader has snapshotted past the follower.
    LogKeptBehindSnapshots,
    /// Only a snapshot can catch it up: the leader purged what it missed.
    Snapshot,
}

impl CatchUp {
    /// What the leader's log must show before the follower restarts.
    fn leader_needs(self) -> &'static str {
        match self {
            CatchUp::Log => "the writes",
            CatchUp::LogKeptBehindSnapshots => "a snapshot past the stopped follower",
            CatchUp::Snapshot => "the log purged past the stopped follower",
        }
    }

    /// Whether the leader's `/debug/cluster` shows what [`Self::leader_needs`]
    /// says, for a follower stopped at applied index `stopped_at`.
    fn leader_shows(self, status: &serde_json::Value, stopped_at: u64) -> bool {
        let past = |key: &str| status[key].as_u64().is_some_and(|i| i > stopped_at);
        match self {
            CatchUp::Log => true,
            CatchUp::LogKeptBehindSnapshots => past("snapshot_index"),
            CatchUp::Snapshot => past("purged_index"),
        }
    }
}

/// Snapshots every 100 entries with 50 kept behind each: a follower that
/// misses 1000 writes from 8 clients (at least 125 entries, since an entry
/// carries at most one write per client) can only be caught up by a
/// snapshot.
fn frequent_snapshots() -> ClusterOptions {
    ClusterOptions {
        snapshot_after_entries: 100,
        snapshot_catch_up_entries: 50,
        ..ClusterOptions::default()
    }
}

/// A follower stopped while the others take 1000 writes (objects named
/// `prefix-*`), on a fresh cluster.
struct StoppedFollower {
    leader: u64,
    follower: u64,
    /// The follower's applied index when it stopped.
    stopped_at: u64,
    /// The leader's `/debug/cluster` after the writes, once it shows the
    /// log state `how` needs.
    leader_status: serde_json::Value,
}

/// Stops a follower, writes 1000 objects through the others, and returns
/// once the leader's log is in the state `how` needs. The leader builds
/// its snapshots and purges its log in the background, after the writes
/// that crossed a threshold are acknowledged, so a slow disk can finish
/// them after the last write: the leader's status is awaited, never
/// assumed from the write count.
async fn stop_a_follower_and_write(
    c: &mut TestCluster,
    prefix: &str,
    how: CatchUp,
) -> StoppedFollower {
    let leader = c.leader().await.expect("leader");
    let follower = c.follower().await.expect("a follower");
    let others: Vec<u64> = c.ids().into_iter().filter(|id| *id != follower).collect();
    let before = c.status(follower).await.expect("status");
    let stopped_at = before["applied_index"].as_u64().expect("applied");
    c.kill(follower).await.expect("kill");
    write_many(c, &others, prefix, 1000, 8).await;
    let statuses = c
        .wait_for(how.leader_needs(), Duration::from_secs(30), |s| {
            s.iter()
                .any(|x| x["node_id"].as_u64() == Some(leader) && how.leader_shows(x, stopped_at))
        })
        .await
        .expect("the leader's log state");
    let leader_status = statuses
        .into_iter()
        .find(|x| x["node_id"].as_u64() == Some(leader))
        .expect("the leader's status");
    StoppedFollower {
        leader,
        follower,
        stopped_at,
        leader_status,
    }
}

async fn follower_catch_up(options: ClusterOptions, how: CatchUp) {
    let expect_snapshot = how == CatchUp::Snapshot;
    let mut c = TestCluster::with_options(3, options)
        .await
        .expect("cluster");

    // Phase 1: stop a follower, write 1000 objects through the others.
    let StoppedFollower {
        leader,
        follower,
        stopped_at,
        leader_status,
    } = stop_a_follower_and_write(&mut c, "catchup", how).await;
    let purged = leader_status["purged_index"].as_u64();
    if expect_snapshot {
        assert!(
            purged.is_some_and(|p| p > stopped_at),
            "the leader must have purged the log past the follower ({purged:?} vs {stopped_at}) so only a snapshot can catch it up"
        );
    } else {
        assert!(
            purged.is_none_or(|p| p < stopped_at),
            "the log must still hold what the follower misses"
        );
    }
    if how == CatchUp::LogKeptBehindSnapshots {
        let snapshot = leader_status["snapshot_index"].as_u64();
        assert!(
            snapshot.is_some_and(|s| s > stopped_at),
            "the leader must have snapshotted past the follower ({snapshot:?} vs {stopped_at})"
        );
    }

    // Phase 2: restart it; it catches up to identical data and revisions.
    c.restart(follower).await.expect("restart");
    let revision = c
        .wait_converged(Duration::from_secs(60))
        .await
        .expect("converged");
    let status = c.status(follower).await.expect("status");
    if expect_snapshot {
        assert!(
            status["snapshot_index"]
                .as_u64()
                .is_some_and(|s| s > stopped_at),
            "caught up by snapshot: {status}"
        );
    }
    let reference = snapshot_of(&c.kube(leader), "default").await;
    assert_eq!(reference.1.len(), 1000);
    assert_eq!(reference.0, revision);
    for id in c.ids() {
        assert_eq!(
            snapshot_of(&c.kube(id), "default").await,
            reference,
            "node {id} differs"
        );
    }
    // And it keeps working as a member: a write through it is seen elsewhere.
    let r = c
        .kube(follower)
        .create_configmap("default", "after-restart", "1")
        .await
        .expect("create");
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let got = c
        .kube(leader)
        .get("/api/v1/namespaces/default/configmaps/after-restart")
        .await
        .expect("get");
    assert_eq!(got.status, StatusCode::OK);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_follower_catches_up_by_log() {
    follower_catch_up(ClusterOptions::default(), CatchUp::Log).await;
}

/// Snapshots far more often than the follower lags: the leader still
/// keeps the catch-up window of log behind each one, so the follower is
/// sent entries, not a whole snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_by_many_snapshot_intervals_catches_up_from_the_kept_log() {
    follower_catch_up(
        ClusterOptions {
            snapshot_after_entries: 100,
            ..ClusterOptions::default()
        },
        CatchUp::LogKeptBehindSnapshots,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_follower_catches_up_by_snapshot() {
    follower_catch_up(frequent_snapshots(), CatchUp::Snapshot).await;
}

/// A snapshot whose install outlasts the election timeout many times over
/// and the leader's snapshot RPC timeout (as a million objects' does)
/// still catches a follower up, and the follower leaves the leader that
/// sent it in place meanwhile: no election, the same term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_slow_to_install_a_snapshot_catches_up_without_calling_an_election() {
    let mut c = TestCluster::with_options(3, frequent_snapshots())
        .await
        .expect("cluster");
    let StoppedFollower {
        leader,
        follower,
        stopped_at,
        leader_status: before,
    } = stop_a_follower_and_write(&mut c, "slow-install", CatchUp::Snapshot).await;
    assert!(
        before["purged_index"]
            .as_u64()
            .is_some_and(|p| p > stopped_at),
        "only a snapshot can catch the follower up: {before}"
    );

    let faults = kubestore_storage::DiskFaults::default();
    faults.set_install_delay(Duration::from_secs(6));
    c.restart_with_faults(follower, faults)
        .await
        .expect("restart");
    let revision = c
        .wait_converged(Duration::from_secs(60))
        .await
        .expect("converged");
    let after = c.status(follower).await.expect("status");
    assert!(
        after["snapshot_index"]
            .as_u64()
            .is_some_and(|s| s > stopped_at),
        "caught up by snapshot: {after}"
    );
    let leader_now = c.status(leader).await.expect("leader status");
    assert_eq!(leader_now["leader_id"], before["leader_id"], "{leader_now}");
    assert_eq!(
        leader_now["term"], before["term"],
        "no election: {leader_now}"
    );
    let reference = snapshot_of(&c.kube(leader), "default").await;
    assert_eq!(reference.0, revision);
    assert_eq!(snapshot_of(&c.kube(follower), "default").await, reference);
    c.shutdown().await;
}

/// A most-recent read of configmap `name` through `node`, cut off from the
/// quorum, must fail with a `Status` rather than answer stale data; once
/// reconnected, the same read succeeds.
async fn refuses_reads_until_reconnected(c: &TestCluster, node: u64, name: &str) {
    let path = format!("/api/v1/namespaces/default/configmaps/{name}");
    let r = c.kube(node).get(&path).await.expect("get");
    assert!(
        r.status.is_server_error(),
        "cut-off node {node} answered {}: {}",
        r.status,
        r.text
    );
    assert_eq!(r.body["kind"], "Status");
    c.isolate(node, false).expect("reconnect");
    let r = c.kube(node).get(&path).await.expect("get");
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_follower_refuses_stale_reads_and_rejoins() {
    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let follower = c.follower().await.expect("a follower");
    c.isolate(follower, true).expect("isolate");
    let w = c
        .kube(leader)
        .create_configmap("default", "while-isolated", "1")
        .await
        .expect("create");
    assert_eq!(w.status, StatusCode::CREATED, "{}", w.text);
    refuses_reads_until_reconnected(&c, follower, "while-isolated").await;
    c.shutdown().await;
}

/// A follower forwards its writes on one stream to the leader: a burst of
/// concurrent writes through it opens at most one new stream, and every
/// write is answered with its own revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_forwarded_writes_share_one_stream_to_the_leader() {
    use kubestore_storage::{Command, CommandResult, Op, PutRequest, Txn};

    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let follower = c.follower().await.expect("a follower");
    let raft = c
        .node(follower)
        .expect("an in-process follower")
        .raft
        .clone();
    let before = raft.status().await.expect("status").forward_streams_opened;
    let writes = (0..200).map(|i| {
        let raft = raft.clone();
        async move {
            let put = Command::Txn(Txn {
                success: vec![Op::Put(PutRequest::new(
                    format!("burst/{i}").into_bytes(),
                    b"v".to_vec(),
                ))],
                ..Txn::default()
            });
            raft.write(put).await
        }
    });
    let mut revisions = BTreeSet::new();
    for answer in futures::future::join_all(writes).await {
        let answer = answer.expect("a forwarded write");
        assert!(
            matches!(answer.result, Ok(CommandResult::Txn(_))),
            "{answer:?}"
        );
        revisions.insert(answer.revision);
    }
    assert_eq!(revisions.len(), 200, "one revision per write");
    let after = raft.status().await.expect("status").forward_streams_opened;
    assert!(after >= 1, "the follower forwarded without a stream?");
    assert!(
        after <= before + 1,
        "200 writes opened {} streams to one leader",
        after - before
    );
    // Every write is there, read on the leader.
    let mut etcd = c.etcd(leader).await.expect("etcd client");
    assert_eq!(count_under(&mut etcd, "burst/", false).await, 200);
    c.shutdown().await;
}

/// The leader sends AppendEntries to each follower on one long-lived
/// stream, and each follower asks it for read indexes on one: once every
/// follower has caught up, 200 concurrent writes and 50 concurrent
/// linearizable reads per follower open no other stream, and every
/// follower holds every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_and_read_indexes_keep_one_stream_per_peer() {
    use kubestore_storage::{Command, Op, PutRequest, Txn};

    let put = |key: String| {
        Command::Txn(Txn {
            success: vec![Op::Put(PutRequest::new(key.into_bytes(), b"v".to_vec()))],
            ..Txn::default()
        })
    };
    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let raft = c.node(leader).expect("an in-process leader").raft.clone();
    let followers: Vec<_> = c
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .map(|id| c.node(id).expect("an in-process follower").raft.clone())
        .collect();
    assert_eq!(followers.len(), 2);
    // The streams opened while the followers were still starting are
    // behind us once each has applied a write through a read index.
    raft.write(put("first".into())).await.expect("first write");
    let mut read_streams = Vec::new();
    for follower in &followers {
        follower
            .linearizable_barrier()
            .await
            .expect("follower caught up");
        let opened = follower
            .status()
            .await
            .expect("status")
            .read_index_streams_opened;
        assert!(opened >= 1, "node {} read without a stream?", follower.id());
        read_streams.push(opened);
    }
    let before = raft.status().await.expect("status").entries_streams_opened;
    assert!(before >= 2, "the leader replicated without streams?");
    let writes = (0..200).map(|i| raft.write(put(format!("replicated/{i}"))));
    for answer in futures::future::join_all(writes).await {
        answer.expect("a write");
    }
    for (follower, opened) in followers.iter().zip(read_streams) {
        let reads = (0..50).map(|_| follower.linearizable_barrier());
        for read in futures::future::join_all(reads).await {
            read.expect("a linearizable read on a follower");
        }
        let held = (0..200)
            .filter(|i| {
                follower
                    .store()
                    .get(format!("replicated/{i}").as_bytes())
                    .expect("read")
                    .is_some()
            })
            .count();
        assert_eq!(
            held,
            200,
            "node {} holds {held} of 200 writes",
            follower.id()
        );
        let now = follower
            .status()
            .await
            .expect("status")
            .read_index_streams_opened;
        assert_eq!(
            now,
            opened,
            "node {}: 50 reads opened {} streams",
            follower.id(),
            now - opened
        );
    }
    let after = raft.status().await.expect("status").entries_streams_opened;
    assert_eq!(
        after,
        before,
        "200 writes opened {} streams",
        after - before
    );
    c.shutdown().await;
}

/// The leader answers most-recent reads from its read lease between
/// heartbeat rounds; cut off from its quorum, it stops doing so before a
/// new leader can commit anything, so it never answers a read that misses
/// the new leader's writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_read_lease_skips_rounds_and_ends_before_a_new_leader_commits() {
    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let raft = &c.node(leader).expect("an in-process leader").raft;
    let before = raft.status().await.expect("status");
    // Back-to-back barriers: after the first round, the lease answers (a
    // round begins at most every 125 ms of the 250 ms lease).
    let mut reads = 0u64;
    let mut after = before.clone();
    while after.leased_read_indexes == before.leased_read_indexes && reads < 1_000 {
        raft.linearizable_barrier().await.expect("barrier");
        reads += 1;
        after = raft.status().await.expect("status");
    }
    assert!(
        after.leased_read_indexes > before.leased_read_indexes,
        "{reads} reads on the leader, none answered from the lease"
    );
    assert!(
        after.read_index_rounds > before.read_index_rounds,
        "a lease is only granted by a round"
    );

    let w = c
        .kube(leader)
        .create_configmap("default", "before-the-cut", "1")
        .await
        .expect("create");
    assert_eq!(w.status, StatusCode::CREATED, "{}", w.text);
    let r = c
        .kube(leader)
        .get("/api/v1/namespaces/default/configmaps/before-the-cut")
        .await
        .expect("get");
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);

    c.isolate(leader, true).expect("isolate");
    c.wait_for(
        "a new leader on the majority side",
        Duration::from_secs(30),
        |s| {
            s.iter().any(|x| {
                x["state"] == "leader" && x["node_id"].as_u64().is_some_and(|id| id != leader)
            })
        },
    )
    .await
    .expect("new leader");
    let majority = c
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("another node");
    let w = c
        .kube(majority)
        .create_configmap("default", "after-the-cut", "1")
        .await
        .expect("create");
    assert_eq!(w.status, StatusCode::CREATED, "{}", w.text);
    // The old leader still believes it leads, but its lease is over.
    refuses_reads_until_reconnected(&c, leader, "after-the-cut").await;
    c.shutdown().await;
}

/// A leased read on the leader must not go back behind a read a follower
/// already answered. openraft tells followers of a commit before the
/// leader applies it; with the leader's apply slowed down, a follower
/// answers revision N while the leader has applied only N−1. A leased read
/// index taken from the leader's applied index (the bug) then lets the
/// leader answer N−1 after the follower answered N.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_read_on_the_leader_never_goes_behind_a_follower_read() {
    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let follower = c.follower().await.expect("follower");
    let leader_raft = c.node(leader).expect("in-process leader").raft.clone();
    let follower_raft = c.node(follower).expect("in-process follower").raft.clone();
    let mut leased_scenarios = 0;
    for attempt in 0..10 {
        // A fresh lease: the scenario below must run inside it.
        leader_raft
            .linearizable_barrier()
            .await
            .expect("warm-up read");
        let before = leader_raft.status().await.expect("status");
        let revision_before = leader_raft.store().applied().revision.0;
        leader_raft
            .store()
            .faults()
            .set_apply_delay(Duration::from_millis(1_500));
        let writer = c.kube(follower);
        let name = format!("ahead-{attempt}");
        let write =
            tokio::spawn(async move { writer.create_configmap("default", &name, "1").await });
        // The follower applies the write while the leader still waits.
        let mut applied = follower_raft.store().subscribe();
        applied
            .wait_for(|s| s.revision.0 > revision_before)
            .await
            .expect("follower applies");
        let on_follower = follower_raft
            .linearizable_barrier()
            .await
            .expect("follower read");
        let on_leader = leader_raft
            .linearizable_barrier()
            .await
            .expect("leader read");
        leader_raft.store().faults().set_apply_delay(Duration::ZERO);
        let after = leader_raft.status().await.expect("status");
        let created = write.await.expect("join").expect("create");
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
        assert!(
            on_leader.revision >= on_follower.revision,
            "a linearizable read on the leader returned revision {} after one on a follower returned {}",
            on_leader.revision,
            on_follower.revision
        );
        if after.leased_read_indexes > before.leased_read_indexes {
            leased_scenarios += 1;
            if leased_scenarios >= 3 {
                break;
            }
        }
    }
    assert!(
        leased_scenarios > 0,
        "no scenario ran inside the leader's read lease"
    );
    c.shutdown().await;
}

/// The leader's fsync overlaps the followers' (`LogDurability`): with every
/// fsync of the leader's slowed to 2 s, a write reaches a follower's log
/// while the leader's own copy is not on disk yet. Nothing that copy's
/// loss could undo is exposed meanwhile: the follower does not apply the
/// entry and the write is not answered until the leader's fsync is done,
/// and then the follower applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_fsync_overlaps_the_followers_and_nothing_is_applied_before_it() {
    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let follower = c.follower().await.expect("follower");
    let leader_raft = c.node(leader).expect("in-process leader").raft.clone();
    let follower_raft = c.node(follower).expect("in-process follower").raft.clone();
    let mut etcd = c.etcd(leader).await.expect("etcd client");
    etcd.put("/overlap/warm", "v", None)
        .await
        .expect("warm-up put");
    c.wait_converged(Duration::from_secs(10))
        .await
        .expect("converged");
    let before = leader_raft.status().await.expect("status").last_log_index.0;
    assert_eq!(leader_raft.log_synced_index(), before, "idle: all synced");

    leader_raft
        .store()
        .faults()
        .set_fsync_delay(Duration::from_secs(2));
    let put = tokio::spawn(async move { etcd.put("/overlap/key", "v", None).await });
    follower_raft
        .wait_for_log(
            Duration::from_secs(10),
            "the entry in the follower's log",
            move |log, _| log > before,
        )
        .await
        .expect("the follower got the entry");
    let status = follower_raft.status().await.expect("status");
    let synced = leader_raft.log_synced_index();
    // Before the overlap a leader's core waited out its own fsync, sending
    // no heartbeats meanwhile: 2 s of it cost it the leadership.
    assert_eq!(
        status.leader_id,
        Some(leader),
        "the leader kept its leadership through its slow fsync"
    );
    assert!(
        synced < status.last_log_index.0,
        "the follower holds entry {} while the leader's disk has {synced}: replication overlapped the leader's fsync",
        status.last_log_index.0
    );
    assert!(
        status.applied_index.0 <= synced,
        "the follower applied {} before the leader synced past {synced}",
        status.applied_index.0
    );
    assert!(!put.is_finished(), "answered before the leader's fsync");

    let answer = put.await.expect("join").expect("put");
    let written = answer.header().expect("header").revision();
    assert!(leader_raft.log_synced_index() > before);
    leader_raft.store().faults().set_fsync_delay(Duration::ZERO);
    let last = leader_raft.status().await.expect("status").last_log_index.0;
    follower_raft
        .wait_for_log(
            Duration::from_secs(10),
            "the follower applying it",
            move |_, applied| applied >= last,
        )
        .await
        .expect("the follower applied the entry once the leader synced it");
    assert!(follower_raft.store().applied().revision.0 >= written as u64);
    c.shutdown().await;
}

/// A forwarded write whose attempt times out is sent again, and both
/// copies commit: the leader's slow apply holds the first answer past the
/// follower's attempt timeout. The write must still be applied once (one
/// revision, version 1), and answered with the first copy's revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_write_retried_after_a_timeout_is_applied_once() {
    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let follower = c.follower().await.expect("follower");
    let leader_raft = c.node(leader).expect("in-process leader").raft.clone();
    let mut etcd = c.etcd(follower).await.expect("etcd client");
    let before = leader_raft.status().await.expect("status").last_log_index;

    // Longer than PEER_ATTEMPT_TIMEOUT: the follower gives up on its first
    // attempt and sends the write again while the first copy commits.
    leader_raft
        .store()
        .faults()
        .set_apply_delay(Duration::from_millis(2_500));
    let put = tokio::spawn(async move { etcd.put("/once/key", "v", None).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let last = leader_raft.status().await.expect("status").last_log_index;
        if last.0 >= before.0 + 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the retried copy never reached the leader's log (last log index {last}, was {before})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    leader_raft.store().faults().set_apply_delay(Duration::ZERO);
    let answer = put.await.expect("join").expect("put");
    let answered = answer.header().expect("header").revision();

    let mut etcd = c.etcd(leader).await.expect("etcd client");
    let got = etcd.get("/once/key", None).await.expect("get");
    let kv = got.kvs().first().expect("the key exists");
    assert_eq!(
        kv.version(),
        1,
        "the write was applied {} times",
        kv.version()
    );
    assert_eq!(kv.create_revision(), kv.mod_revision());
    assert_eq!(
        answered,
        kv.mod_revision(),
        "the answer is not the revision the write created"
    );
    c.shutdown().await;
}

/// A paused follower (SIGSTOP) answers none of the AppendEntries the
/// leader keeps sending it, each retry carrying the entries again: the
/// leader replaces the stream once 32 are unanswered rather than queue
/// copies without bound, and the follower, resumed, catches up with every
/// write made while it was stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_followers_entries_stream_is_replaced_and_it_catches_up() {
    use nix::sys::signal::Signal;

    let c = TestCluster::spawn(3, ClusterOptions::default())
        .await
        .expect("cluster");
    let leader = c.leader().await.expect("leader");
    let follower = c
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let opened = |s: &Value| s["entries_streams_opened"].as_u64().expect("a count");
    let before = opened(&c.status(leader).await.expect("leader status"));
    c.signal(follower, Signal::SIGSTOP).expect("pause");
    let mut etcd = c.etcd(leader).await.expect("etcd client");
    for i in 0..200 {
        etcd.put(format!("while-paused/{i}"), "v", None)
            .await
            .expect("a write with the quorum of the other two");
    }
    // The leader retries every heartbeat interval (200 ms): 32 go
    // unanswered within a few seconds. The deadline stays below the 30 s
    // after which HTTP/2 keep-alive (10 s interval, 20 s timeout) would
    // drop the connection, and with it the stream, anyway.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(25);
    loop {
        let now = opened(&c.status(leader).await.expect("leader status"));
        if now > before {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream to the paused follower was never replaced ({now} opened)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.signal(follower, Signal::SIGCONT).expect("resume");
    c.wait_converged(Duration::from_secs(60))
        .await
        .expect("the resumed follower catches up");
    let mut on_follower = c.etcd(follower).await.expect("etcd client");
    assert_eq!(
        count_under(&mut on_follower, "while-paused/", true).await,
        200
    );
    c.shutdown().await;
}

/// Real processes, real kill -9: 8 writers create configmaps through every
/// node while the leader is killed; every acknowledged object survives on
/// every node, and the nodes end identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_during_writes_loses_no_acknowledged_write() {
    let mut c = TestCluster::spawn(3, ClusterOptions::default())
        .await
        .expect("cluster");
    let leader = c.leader().await.expect("leader");
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let (kill_tx, kill_rx) = tokio::sync::watch::channel(false);

    // Phase 1: 8 writers, spread over the nodes, each retrying through the
    // next node when one fails (as a client with several endpoints does).
    let mut writers = Vec::new();
    for w in 0..8usize {
        let clients: Vec<KubeClient> = c.ids().iter().map(|id| c.kube(*id)).collect();
        let acked = acked.clone();
        let kill_tx = kill_tx.clone();
        writers.push(tokio::spawn(async move {
            let mut node = w % clients.len();
            let mut i = 0;
            let mut failures = 0;
            while i < 60 {
                let name = format!("w{w}-{i}");
                match clients[node].create_configmap("default", &name, "v").await {
                    Ok(r) if r.status == StatusCode::CREATED => {
                        acked.lock().await.insert(name);
                        i += 1;
                        if acked.lock().await.len() >= 100 {
                            kill_tx.send_replace(true);
                        }
                    }
                    // A retried create whose first attempt did commit.
                    Ok(r)
                        if r.status == StatusCode::CONFLICT
                            && r.body["reason"] == "AlreadyExists" =>
                    {
                        acked.lock().await.insert(name);
                        i += 1;
                    }
                    _ => {
                        failures += 1;
                        assert!(failures < 500, "writer {w} cannot make progress");
                        node = (node + 1) % clients.len();
                    }
                }
            }
        }));
    }

    // Phase 2: once 100 writes are acknowledged, kill -9 the leader.
    let mut kill_rx = kill_rx;
    kill_rx.wait_for(|k| *k).await.expect("kill signal");
    c.kill(leader).await.expect("kill leader");
    for w in writers {
        w.await.expect("writer");
    }
    let acked = acked.lock().await.clone();
    assert_eq!(acked.len(), 480);
    let new_leader = c.leader().await.expect("new leader");
    assert_ne!(new_leader, leader, "a new leader took over");

    // Phase 3: the killed node restarts with the same command and catches up.
    c.restart(leader).await.expect("restart");
    let revision = c
        .wait_converged(Duration::from_secs(60))
        .await
        .expect("converged");
    let reference = snapshot_of(&c.kube(new_leader), "default").await;
    assert_eq!(reference.0, revision);
    let names: BTreeSet<String> = reference.1.iter().map(|(n, _)| n.clone()).collect();
    let lost: Vec<&String> = acked.difference(&names).collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    for id in c.ids() {
        assert_eq!(
            snapshot_of(&c.kube(id), "default").await,
            reference,
            "node {id} differs"
        );
        let s: Value = c.status(id).await.expect("status");
        assert_eq!(s["revision"], revision);
    }
    c.shutdown().await;
}

/// How many keys start with `prefix`, read on the node `etcd` talks to:
/// as that node holds them (`serializable`) or linearizably.
async fn count_under(etcd: &mut etcd_client::Client, prefix: &str, serializable: bool) -> i64 {
    let mut options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    if serializable {
        options = options.with_serializable();
    }
    etcd.get(prefix, Some(options))
        .await
        .expect("count")
        .count()
}

/// Issue 13: the internal services are on the peer port only. A client of
/// the etcd port cannot reach Raft (a forged vote or append) or the cluster
/// calls: the gRPC services do not exist there, and a call stream is not
/// understood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_and_cluster_rpcs_are_served_on_the_peer_port_only() {
    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    for id in c.ids() {
        let client_port = c.etcd_endpoint(id);
        let peer_port = c.peer_endpoint(id);

        // A call stream to the etcd port gets no answer: the connection is
        // an HTTP/2 server's, which closes it on the unknown preface.
        let refused = call_all::<_, ReadIndexResponse>(
            &client_port,
            StreamKind::ReadIndex,
            vec![ReadIndexRequest { seq: 1 }],
        )
        .await;
        assert!(
            refused.as_ref().map_or(true, |answers| answers.is_empty()),
            "ReadIndex on the etcd port: {refused:?}"
        );
        let refused = call_all::<_, ForwardResponse>(
            &client_port,
            StreamKind::Forward,
            vec![ForwardRequest {
                command: Vec::new(),
                seq: 1,
            }],
        )
        .await;
        assert!(
            refused.as_ref().map_or(true, |answers| answers.is_empty()),
            "Forward on the etcd port: {refused:?}"
        );
        let channel = tonic::transport::Endpoint::from_shared(client_port.clone())
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let refused = RaftServiceClient::new(channel)
            .vote(Payload { data: Vec::new() })
            .await
            .expect_err("Vote on the etcd port");
        assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused}");

        // The same call on the peer port is served.
        let served: Vec<ReadIndexResponse> = call_all(
            &peer_port,
            StreamKind::ReadIndex,
            vec![ReadIndexRequest { seq: 7 }],
        )
        .await
        .expect("ReadIndex on the peer port");
        let [served] = served.as_slice() else {
            panic!("one answer on the stream: {served:?}");
        };
        assert_eq!(served.seq, 7, "the answer carries the request's seq");
        assert_eq!(served.leader_id, Some(leader), "node {id}: {served:?}");
        if id == leader {
            assert!(served.error.is_empty(), "{served:?}");
        }

        // And so is a gRPC call on the same port.
        let channel = tonic::transport::Endpoint::from_shared(peer_port.clone())
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let addr = ClusterServiceClient::new(channel)
            .client_addr(ClientAddrRequest {})
            .await
            .expect("ClientAddr on the peer port")
            .into_inner();
        assert_eq!(
            addr.client_addr,
            client_port.trim_start_matches("http://"),
            "node {id}"
        );

        // And the etcd API is not on the peer port.
        let channel = tonic::transport::Endpoint::from_shared(peer_port)
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let refused = KvClient::new(channel)
            .range(RangeRequest {
                key: b"k".to_vec(),
                ..Default::default()
            })
            .await
            .expect_err("Range on the peer port");
        assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused}");
    }
    // MemberList reports every member's etcd port as its client URL, and
    // its peer port as its peer URL.
    let mut etcd = c.etcd(1).await.expect("etcd client");
    let members = etcd.member_list().await.expect("member list");
    for m in members.members() {
        let client = c.etcd_endpoint(m.id());
        let peer = c.peer_endpoint(m.id());
        assert_eq!(
            m.client_urls(),
            [client.trim_start_matches("http://")],
            "{m:?}"
        );
        assert_eq!(m.peer_urls(), [peer], "{m:?}");
    }
    c.shutdown().await;
}

/// The bincode encoding of a `Command::Txn` whose txns nest `depth` deep,
/// written by hand: a value that deep could not even be dropped.
fn nested_txn_command(depth: usize) -> Vec<u8> {
    let mut bytes = 0u32.to_le_bytes().to_vec(); // Command::Txn
    for _ in 1..depth {
        bytes.extend(0u64.to_le_bytes()); // no compares
        bytes.extend(1u64.to_le_bytes()); // one success op
        bytes.extend(3u32.to_le_bytes()); // Op::Txn
    }
    bytes.extend([0u64.to_le_bytes(); 3].concat()); // the innermost txn
    for _ in 1..depth {
        bytes.extend(0u64.to_le_bytes()); // no failure ops
    }
    bytes
}

/// Sends each of `commands` to the peer port at `peer` on one `Forward`
/// call stream, as a follower does, and returns the answers in the order
/// of the commands.
async fn forward_on_one_stream(peer: &str, commands: Vec<Vec<u8>>) -> Vec<ForwardResponse> {
    let sent = commands.len();
    let requests = commands
        .into_iter()
        .zip(1..)
        .map(|(command, seq)| ForwardRequest { command, seq })
        .collect();
    let mut answers: Vec<ForwardResponse> = call_all(peer, StreamKind::Forward, requests)
        .await
        .expect("Forward on the peer port");
    answers.sort_by_key(|a| a.seq);
    let seqs: Vec<u64> = answers.iter().map(|a| a.seq).collect();
    assert_eq!(
        seqs,
        (1..=sent as u64).collect::<Vec<_>>(),
        "one answer per request"
    );
    answers
}

/// Issue 13: a forged Forward on the peer port is decoded with bounded
/// nesting and validated as a front end would before anything is proposed:
/// each is answered with its error, and the node, and the stream they came
/// on, live on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_forwards_are_refused_before_they_are_proposed() {
    use kubestore_storage::{Command, Op, PutRequest, Response, Txn, MAX_LEASE_TTL, MAX_TXN_DEPTH};

    let c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let peer = c.peer_endpoint(leader);
    let revision_before = c
        .wait_converged(Duration::from_secs(10))
        .await
        .expect("converged");

    // Sanity: the hand-made encoding is bincode's.
    let three = Command::Txn(Txn {
        success: vec![Op::Txn(Txn {
            success: vec![Op::Txn(Txn::default())],
            ..Txn::default()
        })],
        ..Txn::default()
    });
    assert_eq!(
        bincode::serialize(&three).expect("encode"),
        nested_txn_command(3)
    );

    // One level too many, and a million levels (28 MB on the wire,
    // deep enough to overflow any thread's stack if decoded by plain
    // recursion): refused at level 65, not a crash.
    let too_deep = [MAX_TXN_DEPTH + 1, 1_000_000].map(nested_txn_command);
    for refused in forward_on_one_stream(&peer, too_deep.to_vec()).await {
        assert!(refused.response.is_empty(), "{refused:?}");
        assert!(refused.error.contains("nested"), "{refused:?}");
    }

    // Commands that decode but no front end would send.
    let forged = [
        Command::LeaseGrant {
            id: kubestore_storage::LeaseId(7),
            ttl: MAX_LEASE_TTL + 1,
        },
        Command::Txn(Txn {
            success: vec![Op::Put(PutRequest::new(Vec::new(), b"no key".to_vec()))],
            ..Txn::default()
        }),
        Command::Txn(Txn {
            success: vec![Op::Put(PutRequest::new(b"big".to_vec(), vec![0; 32 << 20]))],
            ..Txn::default()
        }),
    ]
    .map(|cmd| bincode::serialize(&cmd).expect("encode"));
    for refused in forward_on_one_stream(&peer, forged.to_vec()).await {
        assert!(refused.response.is_empty(), "{refused:?}");
        assert!(refused.error.contains("invalid command"), "{refused:?}");
    }
    // Nothing was proposed: the revision has not moved.
    assert_eq!(
        c.wait_converged(Duration::from_secs(10))
            .await
            .expect("converged"),
        revision_before
    );

    // A valid forward is still served, on a stream that also carries a
    // forged one, and the node still serves clients.
    let put = Command::Txn(Txn {
        success: vec![Op::Put(PutRequest::new(b"after".to_vec(), b"1".to_vec()))],
        ..Txn::default()
    });
    let answers = forward_on_one_stream(
        &peer,
        vec![
            nested_txn_command(MAX_TXN_DEPTH + 1),
            bincode::serialize(&put).expect("encode"),
        ],
    )
    .await;
    assert!(answers[0].error.contains("nested"), "{:?}", answers[0]);
    assert!(answers[1].error.is_empty(), "{:?}", answers[1]);
    let resp: Response = bincode::deserialize(&answers[1].response).expect("response");
    assert!(resp.result.is_ok(), "{resp:?}");
    let mut etcd = c.etcd(leader).await.expect("etcd client");
    let got = etcd.get("after", None).await.expect("get");
    assert_eq!(got.kvs()[0].value(), b"1");
    c.shutdown().await;
}

/// A leader cut off while writes wait on it, deposed and then caught up by
/// a snapshot, takes writes again as soon as it rejoins. openraft 0.9
/// answers a leader's pending write only when its entry is applied or
/// truncated as conflicting; here the new leader's snapshot covers the
/// deposed leader's whole log, which is purged unanswered. Found by the
/// fault-schedule checker (seed 21): such a node held its proposer's local
/// slot for good and every later write through it timed out, until the
/// node was restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_whose_pending_writes_a_snapshot_covered_takes_writes_again() {
    let c = TestCluster::with_options(3, frequent_snapshots())
        .await
        .expect("cluster");
    let leader = c.leader().await.expect("leader");
    c.isolate(leader, true).expect("isolate");
    // Puts through the cut-off leader (no read before them): the first is
    // appended to its log only, the others queue behind it in its proposer.
    let mut stuck = Vec::new();
    for i in 0..3 {
        let mut etcd = c.etcd(leader).await.expect("etcd client");
        stuck.push(tokio::spawn(async move {
            etcd.put(format!("while-cut-off-{i}"), "1", None).await
        }));
    }
    c.wait_for(
        "a new leader on the majority side",
        Duration::from_secs(30),
        |s| {
            s.iter().any(|x| {
                x["state"] == "leader" && x["node_id"].as_u64().is_some_and(|id| id != leader)
            })
        },
    )
    .await
    .expect("new leader");
    let majority: Vec<u64> = c.ids().into_iter().filter(|id| *id != leader).collect();
    // Past several snapshots, so the new leader no longer has the log the
    // deposed one would need and sends it a snapshot.
    write_many(&c, &majority, "past-the-cut", 400, 1).await;
    c.isolate(leader, false).expect("reconnect");
    c.wait_converged(Duration::from_secs(30))
        .await
        .expect("the deposed leader catches up");
    for s in stuck {
        // Committed, or unknown (etcd's "request timed out", Unavailable:
        // the deadline passed while the node was cut off).
        if let Err(e) = s.await.expect("task") {
            assert!(
                matches!(&e, etcd_client::Error::GRpcStatus(st) if st.code() == tonic::Code::Unavailable),
                "{e}"
            );
        }
    }
    // Before the fix, this write queued behind the stuck ones in the
    // rejoined node's proposer and ended in a 504 at the request deadline.
    let w = c
        .kube(leader)
        .create_configmap("default", "after-the-rejoin", "1")
        .await
        .expect("create");
    assert_eq!(w.status, StatusCode::CREATED, "{}", w.text);
    c.shutdown().await;
}

/// An update sent to a follower is computed from the follower's own state
/// without a read barrier; the write's guard, and a barrier before any
/// answer given without a write, keep it as correct as a barrier first.
/// The follower applies every batch 1.5 s late here, so its state is
/// behind each acknowledged write when the next request reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_through_a_lagging_follower_are_decided_on_the_current_state() {
    let c = TestCluster::with_options(
        3,
        ClusterOptions {
            fault_injection: true,
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster");
    let (leader, follower) = (
        c.leader().await.expect("leader"),
        c.follower().await.expect("follower"),
    );
    let (lead, lag) = (c.kube(leader), c.kube(follower));
    let path = "/api/v1/namespaces/default/configmaps/lag";
    let cm = |v: &str, rv: Option<u64>| {
        let mut meta = json!({ "name": "lag" });
        if let Some(rv) = rv {
            meta["resourceVersion"] = json!(rv.to_string());
        }
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": { "v": v } })
    };
    let created = lead
        .create_configmap("default", "lag", "x")
        .await
        .expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let old = lead.put(path, &cm("old", None)).await.expect("put old");
    assert_eq!(old.status, StatusCode::OK, "{}", old.text);
    c.wait_converged(Duration::from_secs(30))
        .await
        .expect("converged");
    c.inject_faults(follower, &json!({ "apply_delay_ms": 1500 }))
        .await
        .expect("set the apply delay");

    let new = lead.put(path, &cm("new", None)).await.expect("put new");
    assert_eq!(new.status, StatusCode::OK, "{}", new.text);
    let behind = |s: Option<Value>| s.and_then(|s| s["revision"].as_u64()).unwrap_or(0);
    assert!(
        behind(c.status(follower).await) < new.rv(),
        "the follower is behind the acknowledged write"
    );
    // The follower still holds "old": to it, this update changes nothing.
    // It must be written all the same, over "new".
    let back = lag
        .put(path, &cm("old", None))
        .await
        .expect("put old again");
    assert_eq!(back.status, StatusCode::OK, "{}", back.text);
    assert!(back.rv() > new.rv(), "written after \"new\": {}", back.text);
    let current = lead.get(path).await.expect("get");
    assert_eq!(current.body["data"]["v"], "old", "{}", current.text);
    assert_eq!(current.rv(), back.rv());

    // A precondition naming the current revision holds, although the
    // follower has not applied it yet.
    let third = lead.put(path, &cm("second", None)).await.expect("put");
    assert_eq!(third.status, StatusCode::OK, "{}", third.text);
    let guarded = lag
        .put(path, &cm("third", Some(third.rv())))
        .await
        .expect("guarded put");
    assert_eq!(guarded.status, StatusCode::OK, "{}", guarded.text);
    assert_eq!(guarded.body["data"]["v"], "third", "{}", guarded.text);
    // And one naming an older revision is a conflict.
    let stale = lag
        .put(path, &cm("fourth", Some(third.rv())))
        .await
        .expect("stale put");
    assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.text);

    // An object the follower has not applied yet is found, not a 404.
    let fresh = lead
        .create_configmap("default", "fresh", "1")
        .await
        .expect("create fresh");
    assert_eq!(fresh.status, StatusCode::CREATED, "{}", fresh.text);
    let found = lag
        .put(
            "/api/v1/namespaces/default/configmaps/fresh",
            &json!({ "metadata": { "name": "fresh" }, "data": { "value": "2" } }),
        )
        .await
        .expect("update fresh");
    assert_eq!(found.status, StatusCode::OK, "{}", found.text);
    assert!(found.rv() > fresh.rv(), "{}", found.text);

    // A change decided on the lagging state fails its guard once, is
    // decided again on the state the failure returned, and is counted in
    // the follower's /metrics.
    let before = guard_conflicts(&lag, "update").await;
    let ahead = lead.put(path, &cm("ahead", None)).await.expect("put ahead");
    assert_eq!(ahead.status, StatusCode::OK, "{}", ahead.text);
    assert!(
        behind(c.status(follower).await) < ahead.rv(),
        "the follower is behind the acknowledged write"
    );
    let over = lag.put(path, &cm("over", None)).await.expect("put over");
    assert_eq!(over.status, StatusCode::OK, "{}", over.text);
    assert_eq!(over.body["data"]["v"], "over", "{}", over.text);
    assert!(
        over.rv() > ahead.rv(),
        "written after \"ahead\": {}",
        over.text
    );
    assert_eq!(
        guard_conflicts(&lag, "update").await,
        before + 1,
        "one failed guard, then the write"
    );
    c.shutdown().await;
}

/// `kubestore_guarded_write_conflicts_total{write}` in a node's /metrics.
async fn guard_conflicts(node: &KubeClient, write: &str) -> u64 {
    let metrics = node.get("/metrics").await.expect("metrics");
    let sample = format!("kubestore_guarded_write_conflicts_total{{write=\"{write}\"}} ");
    metrics
        .text
        .lines()
        .find_map(|l| l.strip_prefix(sample.as_str()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {sample} in /metrics:\n{}", metrics.text))
}

/// A call carries its deadline in `grpc-timeout`: one that cannot be
/// answered in time (a write with no quorum to commit it) is answered
/// `DeadlineExceeded` when the deadline passes, as etcd answers it, not
/// when the node gives up on the write (10 s on); and a call to a service
/// the etcd port does not serve is `Unimplemented`. Over a plain HTTP/2
/// connection: tonic's client would give up at the deadline itself and
/// never read the node's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_grpc_timeout_is_answered_deadline_exceeded() {
    use kubestore_proto::etcd::etcdserverpb::PutRequest;
    use prost::Message as _;

    let mut c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let addr = c
        .etcd_endpoint(leader)
        .trim_start_matches("http://")
        .to_string();
    for id in c.ids().into_iter().filter(|id| *id != leader) {
        c.kill(id).await.expect("kill a follower");
    }
    let put = PutRequest {
        key: b"no-quorum".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let status = grpc_status(&addr, "/etcdserverpb.KV/Put", &put.encode_to_vec(), "300m").await;
    let took = started.elapsed();
    assert_eq!(
        status,
        tonic::Code::DeadlineExceeded as i32,
        "a put without a quorum"
    );
    assert!(
        took >= Duration::from_millis(300),
        "answered before its deadline: {took:?}"
    );

    let status = grpc_status(&addr, "/raft.RaftService/Vote", &[], "5S").await;
    assert_eq!(
        status,
        tonic::Code::Unimplemented as i32,
        "Vote on the etcd port"
    );
    c.shutdown().await;
}

/// Calls `path` on the gRPC server at `addr` with one message and a
/// `grpc-timeout` of `timeout`, over one HTTP/2 connection of its own, and
/// returns the answer's `grpc-status` (from its headers or its trailers).
async fn grpc_status(addr: &str, path: &str, message: &[u8], timeout: &str) -> i32 {
    grpc_call(addr, path, &[grpc_frame(0, message)], timeout)
        .await
        .0
}

/// `message` as a gRPC message: its compression flag, its length, its
/// bytes.
fn grpc_frame(compressed: u8, message: &[u8]) -> Vec<u8> {
    let mut frame = vec![compressed];
    frame.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    frame.extend_from_slice(message);
    frame
}

/// Calls `path` on the gRPC server at `addr` with a body of `chunks`, each
/// sent in DATA frames of its own, and a `grpc-timeout` of `timeout`, over
/// one HTTP/2 connection of its own; returns the answer's `grpc-status`
/// (from its headers or its trailers) and its body.
async fn grpc_call(
    addr: &str,
    path: &str,
    chunks: &[Vec<u8>],
    timeout: &str,
) -> (i32, bytes::Bytes) {
    use tonic::codegen::http;

    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut client, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    let request = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", timeout)
        .body(())
        .expect("request");
    let (answer, mut body) = client.send_request(request, false).expect("send");
    for (i, chunk) in chunks.iter().enumerate() {
        body.send_data(chunk.clone().into(), i + 1 == chunks.len())
            .expect("send a chunk");
        // Each chunk its own DATA frame: flushed before the next is queued.
        tokio::task::yield_now().await;
    }
    let answer = answer.await.expect("an answer");
    let status_of = |headers: &http::HeaderMap| {
        headers
            .get("grpc-status")
            .map(|s| s.to_str().expect("ascii").parse::<i32>().expect("a number"))
    };
    if let Some(status) = status_of(answer.headers()) {
        return (status, bytes::Bytes::new());
    }
    let mut body = answer.into_body();
    let mut read = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.expect("the answer's data");
        let _ = body.flow_control().release_capacity(data.len());
        read.extend_from_slice(&data);
    }
    let trailers = body
        .trailers()
        .await
        .expect("trailers")
        .expect("some trailers");
    let status = status_of(&trailers).expect("grpc-status in the trailers");
    (status, read.into())
}

/// The etcd port's KV calls answer a message however it arrives: split
/// over several DATA frames, or in one; and what is not one plain message
/// of the method's type (compressed without a `grpc-encoding`, over the
/// size limit, not a message of the type at all) is refused with the
/// status the generated server gives it, not answered as if it were
/// something else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_calls_take_their_message_however_it_arrives() {
    use kubestore_proto::etcd::etcdserverpb::{PutRequest, PutResponse, RangeResponse};
    use prost::Message as _;

    let c = TestCluster::new(1).await.expect("cluster");
    let addr = c.etcd_endpoint(1).trim_start_matches("http://").to_string();
    let put = PutRequest {
        key: b"split".to_vec(),
        value: vec![b'v'; 300],
        ..Default::default()
    };
    let frame = grpc_frame(0, &put.encode_to_vec());
    // The prefix cut in two, the message in three.
    let chunks: Vec<Vec<u8>> = [&frame[..2], &frame[2..7], &frame[7..100], &frame[100..]]
        .iter()
        .map(|c| c.to_vec())
        .collect();
    let (status, body) = grpc_call(&addr, "/etcdserverpb.KV/Put", &chunks, "5S").await;
    assert_eq!(status, tonic::Code::Ok as i32, "a put in four DATA frames");
    let written = PutResponse::decode(body.get(5..).expect("a framed answer")).expect("an answer");
    let revision = written.header.expect("a header").revision;
    assert!(revision > 0, "{revision}");

    let range = RangeRequest {
        key: b"split".to_vec(),
        ..Default::default()
    };
    let (status, body) = grpc_call(
        &addr,
        "/etcdserverpb.KV/Range",
        &[grpc_frame(0, &range.encode_to_vec())],
        "5S",
    )
    .await;
    assert_eq!(status, tonic::Code::Ok as i32, "a range in one frame");
    assert_eq!(body[0], 0, "an uncompressed answer");
    let declared = u32::from_be_bytes([body[1], body[2], body[3], body[4]]);
    assert_eq!(usize::try_from(declared).expect("small"), body.len() - 5);
    let found = RangeResponse::decode(&body[5..]).expect("an answer");
    assert_eq!(found.kvs.len(), 1);
    assert_eq!(found.kvs[0].value, put.value);
    assert_eq!(found.kvs[0].mod_revision, revision);

    let compressed = grpc_frame(1, &put.encode_to_vec());
    let (status, _) = grpc_call(&addr, "/etcdserverpb.KV/Put", &[compressed], "5S").await;
    assert_eq!(
        status,
        tonic::Code::Internal as i32,
        "compressed, with no grpc-encoding"
    );
    let not_a_put = grpc_frame(0, &[0xff, 0xff, 0xff]);
    let (status, _) = grpc_call(&addr, "/etcdserverpb.KV/Put", &[not_a_put], "5S").await;
    assert_eq!(
        status,
        tonic::Code::InvalidArgument as i32,
        "not a PutRequest (the port's codec's answer)"
    );
    let huge = PutRequest {
        key: b"huge".to_vec(),
        value: vec![b'x'; kubestore_server::etcd::MAX_REQUEST_BYTES + 2 * 1024 * 1024],
        ..Default::default()
    };
    let (status, _) = grpc_call(
        &addr,
        "/etcdserverpb.KV/Put",
        &[grpc_frame(0, &huge.encode_to_vec())],
        "5S",
    )
    .await;
    assert_eq!(
        status,
        tonic::Code::OutOfRange as i32,
        "over the port's message limit"
    );
    // The node still answers after each of them.
    let (status, _) = grpc_call(
        &addr,
        "/etcdserverpb.KV/Range",
        &[grpc_frame(0, &range.encode_to_vec())],
        "5S",
    )
    .await;
    assert_eq!(status, tonic::Code::Ok as i32);
    c.shutdown().await;
}

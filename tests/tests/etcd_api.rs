//! The etcd v3 API of a 3-node cluster through the Rust `etcd-client`
//! crate: KV and Txn through different nodes, the kube-apiserver's
//! transaction shapes, a physical compaction answered once purged,
//! watches (compacted start, progress), a 10,000-key
//! range, Maintenance and Cluster, and the keyspace shared with REST.

use std::time::Duration;

use etcd_client::{
    CompactionOptions, Compare, CompareOp, DeleteOptions, EventType, GetOptions, PutOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use kubestore_tests::{ClusterOptions, TestCluster};
use reqwest::StatusCode;
use sha2::Digest;

const WAIT: Duration = Duration::from_secs(10);

fn rev(h: Option<&etcd_client::ResponseHeader>) -> i64 {
    h.map_or(0, |h| h.revision())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_and_txn_through_different_nodes() {
    let c = TestCluster::new(3).await.expect("cluster");
    let mut a = c.etcd(1).await.expect("client 1");
    let mut b = c.etcd(2).await.expect("client 2");

    // Put through one node, linearizable get through another.
    let put = a.put("k1", "v1", None).await.expect("put");
    let r1 = rev(put.header());
    assert!(r1 > 0);
    let got = b.get("k1", None).await.expect("get");
    assert_eq!(got.kvs().len(), 1);
    assert_eq!(got.kvs()[0].value(), b"v1");
    assert_eq!(got.kvs()[0].mod_revision(), r1);
    assert_eq!(got.kvs()[0].create_revision(), r1);
    assert_eq!(got.kvs()[0].version(), 1);

    // prev_kv, versions, reads at an old revision.
    let put2 = b
        .put("k1", "v2", Some(PutOptions::new().with_prev_key()))
        .await
        .expect("put 2");
    assert_eq!(put2.prev_key().map(|kv| kv.value()), Some(&b"v1"[..]));
    let old = a
        .get("k1", Some(GetOptions::new().with_revision(r1)))
        .await
        .expect("get at r1");
    assert_eq!(old.kvs()[0].value(), b"v1");
    let now = a.get("k1", None).await.expect("get");
    assert_eq!(now.kvs()[0].version(), 2);

    // Prefix ranges: limit, count, sort, keys-only, count-only, serializable.
    for i in 0..5 {
        a.put(format!("p/{i}"), format!("{i}"), None)
            .await
            .expect("put");
    }
    let page = b
        .get("p/", Some(GetOptions::new().with_prefix().with_limit(2)))
        .await
        .expect("prefix");
    assert_eq!(page.kvs().len(), 2);
    assert!(page.more());
    assert_eq!(page.count(), 5);
    let desc = b
        .get(
            "p/",
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Key, SortOrder::Descend)
                    .with_limit(1),
            ),
        )
        .await
        .expect("sorted");
    assert_eq!(desc.kvs()[0].key(), b"p/4");
    let counted = b
        .get(
            "p/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .expect("count");
    assert_eq!((counted.count(), counted.kvs().len()), (5, 0));
    let keys = b
        .get("p/", Some(GetOptions::new().with_prefix().with_keys_only()))
        .await
        .expect("keys only");
    assert!(keys.kvs().iter().all(|kv| kv.value().is_empty()));
    let all = b
        .get("", Some(GetOptions::new().with_all_keys()))
        .await
        .expect("all");
    assert!(all.count() >= 6);
    let local = c
        .etcd(3)
        .await
        .expect("client 3")
        .get(
            "p/",
            Some(GetOptions::new().with_prefix().with_serializable()),
        )
        .await
        .expect("serializable");
    assert!(local.count() <= 5);

    // Delete with prev_kv.
    let del = a
        .delete(
            "p/",
            Some(DeleteOptions::new().with_prefix().with_prev_key()),
        )
        .await
        .expect("delete");
    assert_eq!(del.deleted(), 5);
    assert_eq!(del.prev_kvs().len(), 5);

    // Errors carry etcd's codes and messages.
    let too_new = a
        .get("k1", Some(GetOptions::new().with_revision(1_000_000)))
        .await
        .expect_err("future revision");
    assert!(
        too_new
            .to_string()
            .contains("required revision is a future revision"),
        "{too_new}"
    );
    let ops: Vec<TxnOp> = (0..129)
        .map(|i| TxnOp::put(format!("many/{i}"), "x", None))
        .collect();
    let too_many = a
        .txn(Txn::new().and_then(ops))
        .await
        .expect_err("too many ops");
    assert!(
        too_many
            .to_string()
            .contains("too many operations in txn request"),
        "{too_many}"
    );
    let dup = a
        .txn(Txn::new().and_then([TxnOp::put("d", "1", None), TxnOp::put("d", "2", None)]))
        .await
        .expect_err("duplicate key");
    assert!(dup.to_string().contains("duplicate key"), "{dup}");
    // The checks `Command::validate` makes keep etcd's messages.
    let empty = a.put("", "x", None).await.expect_err("empty key");
    assert!(
        empty
            .to_string()
            .contains("etcdserver: key is not provided"),
        "{empty}"
    );
    let big = a
        .put("big", vec![b'x'; 1600 * 1024], None)
        .await
        .expect_err("too large");
    assert!(
        big.to_string().contains("etcdserver: request is too large"),
        "{big}"
    );
    let ttl = a
        .lease_grant(9_000_000_001, None)
        .await
        .expect_err("ttl too large");
    assert!(
        ttl.to_string().contains("etcdserver: too large lease TTL"),
        "{ttl}"
    );
    // Nesting as deep as gRPC's decoder lets through is served.
    let mut nested = Txn::new().and_then([TxnOp::put("nested", "deep", None)]);
    for _ in 0..40 {
        nested = Txn::new().and_then([TxnOp::txn(nested)]);
    }
    assert!(a.txn(nested).await.expect("40 levels").succeeded());
    c.shutdown().await;
}

/// The four transactions a kube-apiserver sends (etcd3 storage and its
/// compactor), exactly as it builds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kube_apiserver_transaction_shapes() {
    let c = TestCluster::new(3).await.expect("cluster");
    let mut e = c.etcd(2).await.expect("client");
    let key = "/registry/widgets/default/w";

    // Create: if mod_revision == 0 then put.
    let create = |value: &'static str| {
        Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value, None)])
    };
    let created = e.txn(create("v1")).await.expect("create");
    assert!(created.succeeded());
    let rv1 = rev(created.header());
    let again = e.txn(create("v1")).await.expect("create again");
    assert!(!again.succeeded(), "a second create fails its guard");
    assert_eq!(rev(again.header()), rv1, "a failed guard writes nothing");

    // Update (GuaranteedUpdate): if mod_revision == rv then put else get.
    let update = |guard: i64, value: &'static str| {
        Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, guard)])
            .and_then([TxnOp::put(key, value, None)])
            .or_else([TxnOp::get(key, None)])
    };
    let updated = e.txn(update(rv1, "v2")).await.expect("update");
    assert!(updated.succeeded());
    let rv2 = rev(updated.header());
    assert!(rv2 > rv1);
    let stale = e.txn(update(rv1, "v3")).await.expect("stale update");
    assert!(!stale.succeeded());
    match stale.op_responses().first() {
        Some(TxnOpResponse::Get(g)) => {
            assert_eq!(g.kvs()[0].value(), b"v2");
            assert_eq!(g.kvs()[0].mod_revision(), rv2);
        }
        other => panic!("the failure branch returns the current state: {other:?}"),
    }

    // Delete: if mod_revision == rv then delete else get.
    let delete = Txn::new()
        .when([Compare::mod_revision(key, CompareOp::Equal, rv2)])
        .and_then([TxnOp::delete(key, None)])
        .or_else([TxnOp::get(key, None)]);
    let deleted = e.txn(delete).await.expect("delete");
    assert!(deleted.succeeded());
    match deleted.op_responses().first() {
        Some(TxnOpResponse::Delete(d)) => assert_eq!(d.deleted(), 1),
        other => panic!("a delete response: {other:?}"),
    }

    // Compaction bookkeeping: if version(compact_rev_key) == t then put the
    // new revision else get; then Compact.
    let bookkeeping = |t: i64, target: i64| {
        Txn::new()
            .when([Compare::version("compact_rev_key", CompareOp::Equal, t)])
            .and_then([TxnOp::put("compact_rev_key", target.to_string(), None)])
            .or_else([TxnOp::get("compact_rev_key", None)])
    };
    let first = e.txn(bookkeeping(0, rv2)).await.expect("bookkeeping");
    assert!(first.succeeded(), "first compactor round wins at version 0");
    e.compact(rv2, None).await.expect("compact");
    let lost = e.txn(bookkeeping(0, rv2)).await.expect("bookkeeping again");
    assert!(
        !lost.succeeded(),
        "another compactor already bumped the version"
    );
    match lost.op_responses().first() {
        Some(TxnOpResponse::Get(g)) => assert_eq!(g.kvs()[0].version(), 1),
        other => panic!("the failure branch reads the key: {other:?}"),
    }
    let err = e
        .get(key, Some(GetOptions::new().with_revision(rv1)))
        .await
        .expect_err("compacted");
    assert!(
        err.to_string()
            .contains("etcdserver: mvcc: required revision has been compacted"),
        "{err}"
    );
    c.shutdown().await;
}

/// Compaction takes effect at once and each node deletes the history
/// behind it in the background; a physical Compact answers only once the
/// node asked has deleted it all, however many purge steps that takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_physical_compaction_answers_once_the_history_is_purged() {
    let c = TestCluster::new(3).await.expect("cluster");
    let ids = c.ids();
    let mut writers = Vec::new();
    for w in 0..8usize {
        let mut e = c.etcd(ids[w % ids.len()]).await.expect("client");
        writers.push(tokio::spawn(async move {
            for i in 0..700u32 {
                e.put(format!("churn/{}", i % 10), format!("{w}-{i}"), None)
                    .await
                    .expect("put");
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    let asked = ids[1];
    let mut e = c.etcd(asked).await.expect("client");
    let revision = rev(e.get("churn/0", None).await.expect("get").header());
    assert!(
        revision > 2 * kubestore_storage::PURGE_STEP_REVISIONS as i64,
        "more history than two purge steps: {revision}"
    );
    let store = c.node(asked).expect("an in-process node").raft.store();
    assert!(store.purged().0 < revision as u64);
    e.compact(revision, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("physical compaction");
    assert!(
        store.purged().0 >= revision as u64,
        "answered with history purged only to {}",
        store.purged()
    );
    let err = e
        .get(
            "churn/0",
            Some(GetOptions::new().with_revision(revision - 1)),
        )
        .await
        .expect_err("compacted");
    assert!(err.to_string().contains("compacted"), "{err}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_compaction_and_progress() {
    let c = TestCluster::new(3).await.expect("cluster");
    let mut w = c.etcd(3).await.expect("watch client");
    let mut e = c.etcd(1).await.expect("write client");
    let start = rev(e.put("w/a", "1", None).await.expect("put").header());
    e.put("w/b", "1", None).await.expect("put");
    e.delete("w/a", None).await.expect("delete");

    // From a revision: every event since, in order, with prev_kv.
    let mut stream = w
        .watch(
            "w/",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(start)
                    .with_prev_key(),
            ),
        )
        .await
        .expect("watch");
    let mut events = Vec::new();
    while events.len() < 3 {
        let resp = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("an event in time")
            .expect("stream")
            .expect("open");
        for ev in resp.events() {
            let kv = ev.kv().expect("kv");
            events.push((
                ev.event_type(),
                kv.key_str().expect("utf8").to_string(),
                kv.mod_revision(),
                ev.prev_kv().map(|p| p.value().to_vec()),
            ));
        }
    }
    assert_eq!(events[0].0, EventType::Put);
    assert_eq!(events[0].1, "w/a");
    assert_eq!(events[0].2, start);
    assert_eq!(events[1].1, "w/b");
    assert_eq!(events[2].0, EventType::Delete);
    assert_eq!(
        events[2].3.as_deref(),
        Some(&b"1"[..]),
        "prev_kv of the delete"
    );
    assert!(events.windows(2).all(|p| p[0].2 < p[1].2));

    // WatchProgressRequest: a progress response at the current revision.
    let current = rev(e.put("other", "x", None).await.expect("put").header());
    // A member reports progress at what it has applied: a linearizable
    // read there first makes that include the put made through node 1.
    c.etcd(3)
        .await
        .expect("client on the watch's member")
        .get("other", None)
        .await
        .expect("linearizable read on the watch's member");
    stream.request_progress().await.expect("progress request");
    let progress = tokio::time::timeout(WAIT, async {
        loop {
            let resp = stream.message().await.expect("stream").expect("open");
            if resp.events().is_empty() && !resp.created() && !resp.canceled() {
                return resp;
            }
        }
    })
    .await
    .expect("a progress response");
    assert!(rev(progress.header()) >= current);

    // A start below the compaction point: created, then canceled with
    // compact_revision. The compaction is applied on the watch's member by
    // the time a linearizable read there returns (the member applies it
    // asynchronously, as an etcd member does).
    e.compact(current, None).await.expect("compact");
    c.etcd(3)
        .await
        .expect("client on the watch's member")
        .get("w/", None)
        .await
        .expect("linearizable read on the watch's member");
    let mut old_stream = w
        .watch(
            "w/",
            Some(WatchOptions::new().with_prefix().with_start_revision(start)),
        )
        .await
        .expect("watch old");
    let cancelled = tokio::time::timeout(WAIT, async {
        loop {
            let resp = old_stream.message().await.expect("stream").expect("open");
            if resp.canceled() {
                return resp;
            }
        }
    })
    .await
    .expect("a cancel");
    assert_eq!(cancelled.compact_revision(), current);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_thousand_key_prefix_range_with_limit_and_revision() {
    let c = TestCluster::new(3).await.expect("cluster");
    let mut e = c.etcd(1).await.expect("client");
    let mut half = 0;
    for batch in 0..100 {
        let ops: Vec<TxnOp> = (0..100)
            .map(|i| TxnOp::put(format!("big/{:05}", batch * 100 + i), "v", None))
            .collect();
        let resp = e.txn(Txn::new().and_then(ops)).await.expect("batch");
        if batch == 49 {
            half = rev(resp.header());
        }
    }
    let mut r = c.etcd(2).await.expect("client 2");
    let page = r
        .get(
            "big/",
            Some(GetOptions::new().with_prefix().with_limit(500)),
        )
        .await
        .expect("page");
    assert_eq!(
        (page.kvs().len(), page.count(), page.more()),
        (500, 10_000, true)
    );
    assert_eq!(page.kvs()[499].key(), b"big/00499");
    let at_half = r
        .get(
            "big/",
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_limit(10)
                    .with_revision(half),
            ),
        )
        .await
        .expect("at half");
    assert_eq!(at_half.count(), 5_000);
    // As etcd's, the header carries the store's current revision, not the
    // one read at.
    assert_eq!(rev(at_half.header()), rev(page.header()));
    assert!(rev(at_half.header()) > half);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_and_cluster() {
    let c = TestCluster::new(3).await.expect("cluster");
    let mut e = c.etcd(1).await.expect("client");
    e.put("m", "1", None).await.expect("put");
    let members = e.member_list().await.expect("members");
    assert_eq!(members.members().len(), 3);
    let leader = c.leader().await.expect("leader");
    let mut hashes = Vec::new();
    let target = rev(e.put("m", "2", None).await.expect("put").header());
    for id in c.ids() {
        let mut n = c.etcd(id).await.expect("client");
        let st = n.status().await.expect("status");
        assert_eq!(st.leader(), leader, "node {id} knows the leader");
        assert!(st.version().starts_with("3.5."), "{}", st.version());
        assert!(st.raft_term() > 0);
        let h = loop {
            match n.hash_kv(target).await {
                Ok(h) => break h,
                Err(e) if e.to_string().contains("future revision") => {
                    n.get("m", None)
                        .await
                        .expect("a linearizable read catches up");
                }
                Err(e) => panic!("hash_kv: {e}"),
            }
        };
        hashes.push(h.hash());
    }
    assert!(hashes.windows(2).all(|p| p[0] == p[1]), "{hashes:?}");
    assert!(alarm_kinds(&mut e).await.is_empty());
    c.shutdown().await;
}

/// The kinds of the alarms the cluster reports.
async fn alarm_kinds(client: &mut etcd_client::Client) -> Vec<etcd_client::AlarmType> {
    client
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .expect("alarms")
        .alarms()
        .iter()
        .map(|a| a.alarm())
        .collect()
}

/// The code of an etcd-client error, if the server answered one.
fn grpc_code(e: &etcd_client::Error) -> Option<tonic::Code> {
    match e {
        etcd_client::Error::GRpcStatus(s) => Some(s.code()),
        _ => None,
    }
}

/// Reads that touch the whole keyspace are bounded. An unlimited range
/// inside a Txn over more than apply holds for one command is refused on
/// every node (nothing written), a limited one is served. Snapshot streams
/// the store in bounded chunks, as a file ending in its SHA-256 (what
/// etcdctl checks), and at most two Hash/HashKV/Snapshot calls run on a
/// node at once: further ones are refused until one has been read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_reads_are_bounded_txn_ranges_snapshots_and_hashes() {
    let c = TestCluster::new(3).await.expect("cluster");
    let mut e = c.etcd(1).await.expect("client");
    // 9 MiB under big/: more than one command's range budget (8 MiB).
    let value = vec![b'v'; 1 << 20];
    for i in 0..9 {
        e.put(format!("big/{i}"), value.clone(), None)
            .await
            .expect("put");
    }

    // Phase 1: an unlimited range in a txn is refused whole.
    let read_all = |opts: GetOptions| {
        Txn::new().and_then([
            TxnOp::put("marker", "x", None),
            TxnOp::get("big/", Some(opts.with_prefix())),
        ])
    };
    let refused = e
        .txn(read_all(GetOptions::new()))
        .await
        .expect_err("too large for apply");
    assert_eq!(
        grpc_code(&refused),
        Some(tonic::Code::ResourceExhausted),
        "{refused}"
    );
    let marker = e.get("marker", None).await.expect("get");
    assert!(marker.kvs().is_empty(), "the refused txn wrote nothing");
    // With a limit apply holds two values; count covers the range.
    let served = e
        .txn(read_all(GetOptions::new().with_limit(2)))
        .await
        .expect("a limited range");
    match &served.op_responses()[1] {
        TxnOpResponse::Get(g) => {
            assert_eq!((g.kvs().len(), g.count(), g.more()), (2, 9, true));
        }
        other => panic!("expected a range response, got {other:?}"),
    }

    // Phase 2: two snapshots in flight, unread, hold both slots.
    let mut m = e.maintenance_client();
    let mut first = m.snapshot().await.expect("first snapshot");
    let second = m.snapshot().await.expect("second snapshot");
    let third = m.snapshot().await.expect_err("no slot left");
    assert_eq!(
        grpc_code(&third),
        Some(tonic::Code::ResourceExhausted),
        "{third}"
    );
    let hash = e.hash_kv(0).await.expect_err("no slot for a hash either");
    assert_eq!(grpc_code(&hash), Some(tonic::Code::ResourceExhausted));

    // Phase 3: the first, read to its end, is a whole checksummed file,
    // sent in bounded chunks with an exact countdown.
    let mut file = Vec::new();
    let mut total = None;
    while let Some(msg) = first.message().await.expect("snapshot chunk") {
        assert!(!msg.blob().is_empty() && msg.blob().len() <= 64 * 1024);
        file.extend_from_slice(msg.blob());
        let total = *total.get_or_insert(file.len() as u64 + msg.remaining_bytes());
        assert_eq!(file.len() as u64 + msg.remaining_bytes(), total);
    }
    assert!(file.len() > 9 << 20, "{} bytes", file.len());
    assert!(file.starts_with(b"kubestore-snapshot-v1\n"));
    assert_eq!(file.len() % 512, 32, "etcdctl finds the checksum by size");
    let (body, digest) = file.split_at(file.len() - 32);
    assert_eq!(sha2::Sha256::digest(body).as_slice(), digest);

    // Phase 4: its slot is free again.
    let again = m.snapshot().await.expect("a slot is free again");
    drop((again, second));
    c.shutdown().await;
}

/// One keyspace: REST objects live under /registry as a kube-apiserver
/// lays them out, with their resourceVersion as the etcd revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_and_etcd_share_one_keyspace() {
    let c = TestCluster::new(3).await.expect("cluster");
    let mut e = c.etcd(2).await.expect("client");
    let start = rev(e.get("x", None).await.expect("get").header());
    let mut stream = e
        .watch(
            "/registry/configmaps/",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(start + 1),
            ),
        )
        .await
        .expect("watch");
    let created = c
        .kube(1)
        .create_configmap("default", "shared", "hello")
        .await
        .expect("create");
    assert_eq!(created.status, StatusCode::CREATED);
    let got = e
        .get("/registry/configmaps/default/shared", None)
        .await
        .expect("get");
    let kv = &got.kvs()[0];
    assert_eq!(kv.mod_revision() as u64, created.rv());
    let stored: serde_json::Value = serde_json::from_slice(kv.value()).expect("JSON value");
    assert_eq!(stored["metadata"]["name"], "shared");
    let event = tokio::time::timeout(WAIT, async {
        loop {
            let resp = stream.message().await.expect("stream").expect("open");
            if let Some(ev) = resp.events().first() {
                return ev.kv().map(|kv| kv.mod_revision());
            }
        }
    })
    .await
    .expect("an event");
    assert_eq!(event, Some(created.rv() as i64));

    // A JSON object put through etcd appears through REST; a value that is
    // not an object is skipped without breaking the list.
    let obj = serde_json::json!({
        "metadata": { "name": "from-etcd", "namespace": "default", "uid": "u-1" },
        "data": { "k": "v" }
    });
    e.put(
        "/registry/configmaps/default/from-etcd",
        obj.to_string(),
        None,
    )
    .await
    .expect("put object");
    e.put("/registry/configmaps/default/garbage", "not json", None)
        .await
        .expect("put garbage");
    let listed = c
        .kube(3)
        .get("/api/v1/namespaces/default/configmaps")
        .await
        .expect("list");
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
    let names = listed.names();
    assert!(names.contains(&"from-etcd".to_string()), "{names:?}");
    assert!(names.contains(&"shared".to_string()));
    assert!(!names.contains(&"garbage".to_string()));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_grant_keep_alive_time_to_live_and_revoke() {
    let c = TestCluster::new(3).await.expect("cluster");
    let mut a = c.etcd(1).await.expect("client 1");
    let mut b = c.etcd(2).await.expect("client 2");
    let granted = a.lease_grant(30, None).await.expect("grant");
    let id = granted.id();
    assert_eq!(granted.ttl(), 30);
    b.put("leased/1", "x", Some(PutOptions::new().with_lease(id)))
        .await
        .expect("put with lease");
    b.put("leased/2", "y", Some(PutOptions::new().with_lease(id)))
        .await
        .expect("put with lease");
    let unknown = a
        .put("leased/3", "z", Some(PutOptions::new().with_lease(id + 1)))
        .await
        .expect_err("unknown lease");
    assert!(
        unknown.to_string().contains("requested lease not found"),
        "{unknown}"
    );
    let ttl = c
        .etcd(3)
        .await
        .expect("client 3")
        .lease_time_to_live(
            id,
            Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()),
        )
        .await
        .expect("time to live");
    assert_eq!(ttl.granted_ttl(), 30);
    assert!(ttl.ttl() > 0 && ttl.ttl() <= 30, "{}", ttl.ttl());
    assert_eq!(ttl.keys().len(), 2);
    let (mut keeper, mut responses) = b.lease_keep_alive(id).await.expect("keep alive");
    keeper.keep_alive().await.expect("send keep alive");
    let renewed = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("in time")
        .expect("stream")
        .expect("a response");
    assert_eq!((renewed.id(), renewed.ttl()), (id, 30));
    let listed = a.leases().await.expect("leases");
    assert!(listed.leases().iter().any(|l| l.id() == id));

    // Revoke deletes both keys in one revision.
    let mut stream = a
        .watch("leased/", Some(WatchOptions::new().with_prefix()))
        .await
        .expect("watch");
    c.etcd(3)
        .await
        .expect("client 3")
        .lease_revoke(id)
        .await
        .expect("revoke");
    let mut deletes = Vec::new();
    while deletes.len() < 2 {
        let resp = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("in time")
            .expect("stream")
            .expect("open");
        for ev in resp.events() {
            assert_eq!(ev.event_type(), EventType::Delete);
            deletes.push(ev.kv().map(|kv| kv.mod_revision()));
        }
    }
    assert_eq!(deletes[0], deletes[1], "one revision for the whole revoke");
    let gone = a
        .get("leased/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    assert_eq!(gone.count(), 0);
    let after = a
        .lease_time_to_live(id, None)
        .await
        .expect("ttl after revoke");
    assert_eq!(after.ttl(), -1);
    c.shutdown().await;
}

/// A lease expires on the leader's clock; when that leader dies, the new
/// leader carries the clock on and expires it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_survives_a_leader_kill() {
    let mut c = TestCluster::new(3).await.expect("cluster");
    let leader = c.leader().await.expect("leader");
    let survivor = c.follower().await.expect("follower");
    let mut e = c.etcd(survivor).await.expect("client");
    let id = e.lease_grant(3, None).await.expect("grant").id();
    e.put("expiring", "x", Some(PutOptions::new().with_lease(id)))
        .await
        .expect("put");
    let mut stream = e
        .watch("expiring", Some(WatchOptions::new()))
        .await
        .expect("watch");
    c.kill(leader).await.expect("kill the leader");
    let deleted = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let resp = stream.message().await.expect("stream").expect("open");
            if resp
                .events()
                .iter()
                .any(|ev| ev.event_type() == EventType::Delete)
            {
                return;
            }
        }
    })
    .await;
    assert!(deleted.is_ok(), "the new leader never expired the lease");
    let ttl = e.lease_time_to_live(id, None).await.expect("ttl");
    assert_eq!(ttl.ttl(), -1, "the lease is gone");
    c.shutdown().await;
}

/// A watch created with `progress_notify` gets progress responses while
/// idle, never claiming a revision ahead of the events it delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_watches_get_progress_notifications() {
    let c = TestCluster::with_options(
        3,
        ClusterOptions {
            etcd_progress_notify_seconds: 1,
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster");
    let mut e = c.etcd(2).await.expect("client");
    let mut stream = e
        .watch(
            "quiet/",
            Some(WatchOptions::new().with_prefix().with_progress_notify()),
        )
        .await
        .expect("watch");
    let written = rev(e.put("quiet/a", "1", None).await.expect("put").header());
    // Writes elsewhere move the revision without events for this watch.
    let other = rev(e.put("loud", "1", None).await.expect("put").header());
    let mut saw_event_at = 0;
    let progress = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let resp = stream.message().await.expect("stream").expect("open");
            if let Some(ev) = resp.events().first() {
                saw_event_at = ev.kv().map_or(0, |kv| kv.mod_revision());
                continue;
            }
            if !resp.created() && !resp.canceled() && rev(resp.header()) >= other {
                return resp;
            }
        }
    })
    .await
    .expect("a progress notification while idle");
    assert_eq!(saw_event_at, written, "the event came before the progress");
    assert!(rev(progress.header()) >= other);
    c.shutdown().await;
}

/// Past `--quota-backend-bytes` a put or a lease grant is refused with
/// etcd's NOSPACE and the alarm is listed, while reads and deletes still
/// pass (so space can be freed), as etcd does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_quota_puts_are_refused_with_nospace_and_deletes_pass() {
    const QUOTA: u64 = 4 * 1024 * 1024;
    let c = TestCluster::spawn(
        1,
        ClusterOptions {
            quota_backend_bytes: QUOTA,
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster");
    let mut e = c.etcd(1).await.expect("client");
    // Values that do not compress (xorshift bytes): a memtable flushed to
    // an LZ4-compressed table keeps their size on disk.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut incompressible = || -> Vec<u8> {
        (0..64 * 1024 / 8)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()
            })
            .collect()
    };
    // Each put grows the database; the check reads its size at most
    // 100 ms late, so a few puts may pass the quota before one is refused.
    let mut written = 0u64;
    let mut first = Vec::new();
    let refused = loop {
        assert!(
            written < 2_000,
            "no NOSPACE after {written} puts of 64 KiB into a {QUOTA}-byte quota"
        );
        let value = incompressible();
        if written == 0 {
            first = value.clone();
        }
        match e.put(format!("big/{written}"), value, None).await {
            Ok(_) => written += 1,
            Err(err) => break err,
        }
    };
    assert_eq!(
        grpc_code(&refused),
        Some(tonic::Code::ResourceExhausted),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("database space exceeded"),
        "{refused}"
    );
    assert_eq!(
        alarm_kinds(&mut e).await,
        vec![etcd_client::AlarmType::Nospace]
    );
    let status = e.status().await.expect("status");
    assert!(status.db_size() as u64 > QUOTA, "{}", status.db_size());

    // Reads and deletes pass; another put is still refused.
    assert!(written > 0, "the empty database was over the quota");
    let got = e.get("big/0", None).await.expect("read over the quota");
    assert_eq!(got.kvs()[0].value(), &first[..]);
    let deleted = e
        .delete("big/0", None)
        .await
        .expect("a delete over the quota");
    assert_eq!(deleted.deleted(), 1);
    let again = e
        .put("small", "v", None)
        .await
        .expect_err("a put over the quota");
    assert_eq!(grpc_code(&again), Some(tonic::Code::ResourceExhausted));
    // A lease takes space too: etcd refuses its grant.
    let grant = e
        .lease_grant(60, None)
        .await
        .expect_err("a lease grant over the quota");
    assert_eq!(grpc_code(&grant), Some(tonic::Code::ResourceExhausted));
    c.shutdown().await;
}

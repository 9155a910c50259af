//! Criterion micro-benchmarks of kubestore's hot paths: MVCC apply of a
//! batch of entries, ranges at an old revision (many keys, one key of many
//! revisions, and many keys of many revisions each), watch-cache fan-out to
//! many watchers, list JSON encoding, selector matching (on objects and on
//! the cache's rendered attributes), and decoding a stored object into the
//! watch cache.
//!
//! `cargo bench -p kubestore-benches --bench hot_paths`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kubestore_benches::configmap;
use kubestore_server::kube::cache::{CacheLimits, CachedObject, WatchCache, WatchEventType};
use kubestore_server::kube::resources::{self, ResourceType};
use kubestore_server::kube::selectors::Selectors;
use kubestore_storage::{
    Command, KeyRange, Op, PutRequest, RangeRequest, Revision, StateMachine, Store, Txn,
};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
use serde_json::json;

fn configmaps() -> &'static ResourceType {
    resources::find("", "v1", "configmaps").expect("configmaps are served")
}

/// A put of configmap object `i` at `key` as log entry `index`.
fn put_entry(index: u64, key: String, i: usize) -> Entry<kubestore_storage::TypeConfig> {
    let cmd = Command::Txn(Txn {
        success: vec![Op::Put(PutRequest::new(
            key,
            configmap(i).to_string().into_bytes(),
        ))],
        ..Txn::default()
    });
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(cmd.into()),
    }
}

/// Puts of configmap objects as consecutive log entries from `next`.
fn entries(next: &mut u64, n: usize) -> Vec<Entry<kubestore_storage::TypeConfig>> {
    (0..n)
        .map(|i| {
            let key = configmaps().key(
                Some("default"),
                &format!("cm-{:05}", (*next as usize + i) % 1000),
            );
            let e = put_entry(*next, key, i);
            *next += 1;
            e
        })
        .collect()
}

struct Filled {
    _dir: tempfile::TempDir,
    sm: StateMachine,
    store: Store,
    next: u64,
    rt: tokio::runtime::Runtime,
}

fn filled(n: usize) -> Filled {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(dir.path()).expect("open");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut next = 1;
    for _ in 0..n / 100 {
        let batch = entries(&mut next, 100);
        rt.block_on(sm.apply(batch)).expect("apply");
    }
    Filled {
        _dir: dir,
        sm,
        store,
        next,
        rt,
    }
}

fn mvcc_apply(c: &mut Criterion) {
    let mut f = filled(1000);
    let mut group = c.benchmark_group("mvcc");
    group.throughput(Throughput::Elements(100));
    group.bench_function("apply 100 puts (1 KiB objects)", |b| {
        b.iter_batched(
            || entries(&mut f.next, 100),
            |batch| f.rt.block_on(f.sm.apply(batch)).expect("apply"),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn mvcc_range(c: &mut Criterion) {
    let f = filled(3000);
    let mid = f.store.applied().revision.0 / 2;
    let prefix = configmaps().collection_prefix(Some("default"));
    let mut group = c.benchmark_group("mvcc");
    group.bench_function("range 1000 keys at the current revision", |b| {
        b.iter(|| {
            f.store
                .range(&RangeRequest {
                    range: KeyRange::prefix(prefix.clone()),
                    ..RangeRequest::default()
                })
                .expect("range")
        })
    });
    group.bench_function("range 1000 keys at an old revision", |b| {
        b.iter(|| {
            f.store
                .range(&RangeRequest {
                    range: KeyRange::prefix(prefix.clone()),
                    revision: Some(Revision(mid)),
                    ..RangeRequest::default()
                })
                .expect("range")
        })
    });
    // One key written 10,000 times, read at the middle revision: a seek
    // back from (key, revision), not a walk through the key's history.
    let mut one = filled(0);
    let key = configmaps().key(Some("default"), "hot");
    for _ in 0..100 {
        let batch: Vec<_> = (0..100)
            .map(|i| {
                let e = put_entry(one.next, key.clone(), i);
                one.next += 1;
                e
            })
            .collect();
        one.rt.block_on(one.sm.apply(batch)).expect("apply");
    }
    let middle = one.store.applied().revision.0 / 2;
    group.bench_function("one key of 10000 revisions at an old revision", |b| {
        b.iter(|| {
            let resp = one
                .store
                .range(&RangeRequest {
                    range: KeyRange::single(key.clone()),
                    revision: Some(Revision(middle)),
                    ..RangeRequest::default()
                })
                .expect("range");
            assert_eq!(resp.kvs[0].mod_revision, Revision(middle));
            resp
        })
    });
    // 100 keys, each written 100 times after the revision read: a key's
    // rows above it are skipped with one seek, not read one by one.
    let mut many = filled(0);
    let hot_prefix = configmaps().collection_prefix(Some("hot"));
    for _ in 0..100 {
        let batch: Vec<_> = (0..100)
            .map(|i| {
                let key = configmaps().key(Some("hot"), &format!("cm-{i:03}"));
                let e = put_entry(many.next, key, i);
                many.next += 1;
                e
            })
            .collect();
        many.rt.block_on(many.sm.apply(batch)).expect("apply");
    }
    group.bench_function(
        "range 100 keys of 100 revisions each at their first revision",
        |b| {
            b.iter(|| {
                let resp = many
                    .store
                    .range(&RangeRequest {
                        range: KeyRange::prefix(hot_prefix.clone()),
                        revision: Some(Revision(100)),
                        ..RangeRequest::default()
                    })
                    .expect("range");
                assert_eq!(resp.kvs.len(), 100);
                resp
            })
        },
    );
    group.finish();
}

fn watch_cache_fan_out(c: &mut Criterion) {
    // The cache starts on an empty store and follows 2,000 writes, so they
    // are in its ring.
    let mut f = filled(0);
    let cache = WatchCache::new(
        f.store.clone(),
        CacheLimits {
            max_events: 4096,
            max_age: Duration::from_secs(3600),
        },
    );
    cache.catch_up().expect("start the cache");
    for _ in 0..20 {
        let batch = entries(&mut f.next, 100);
        f.rt.block_on(f.sm.apply(batch)).expect("apply");
    }
    cache.catch_up().expect("follow the writes");
    let rt = configmaps();
    let from = f.store.applied().revision.0 - 256;
    let mut group = c.benchmark_group("watch cache");
    group.throughput(Throughput::Elements(1000));
    group.bench_function("1000 watchers each take the last 256 events", |b| {
        b.iter(|| {
            for _ in 0..1000 {
                black_box(cache.events_after(rt, from, 256).expect("in the ring"));
            }
        })
    });
    group.finish();
}

fn list_encoding(c: &mut Criterion) {
    let rt = configmaps();
    let objects: Vec<Arc<CachedObject>> = (0..1000)
        .map(|i| {
            let key = rt.key(Some("default"), &format!("cm-{i:05}"));
            Arc::new(
                CachedObject::decode(
                    rt,
                    key.as_bytes(),
                    configmap(i).to_string().as_bytes(),
                    7,
                    WatchEventType::Added,
                )
                .expect("an object"),
            )
        })
        .collect();
    let mut group = c.benchmark_group("list encoding, 1000 x 1 KiB");
    group.bench_function("splice pre-encoded objects", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(1_200_000);
            out.extend_from_slice(br#"{"kind":"ConfigMapList","items":["#);
            for (i, o) in objects.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(o.json());
            }
            out.extend_from_slice(b"]}");
            black_box(out)
        })
    });
    let values: Vec<serde_json::Value> = objects.iter().map(|o| o.to_value()).collect();
    group.bench_function("serialize values with serde_json", |b| {
        b.iter(|| {
            let items: Vec<&serde_json::Value> = values.iter().collect();
            black_box(serde_json::to_vec(
                &json!({ "kind": "ConfigMapList", "items": items }),
            ))
        })
    });
    group.finish();
}

fn selector_matching(c: &mut Criterion) {
    let rt = configmaps();
    let selectors = Selectors::parse(
        rt,
        Some("app=web,tier in (a,b),!legacy"),
        Some("metadata.namespace=default"),
    )
    .expect("valid selectors");
    let objects: Vec<serde_json::Value> = (0..1000).map(configmap).collect();
    let cached: Vec<CachedObject> = objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let key = rt.key(Some("default"), &format!("cm-{i:05}"));
            let stored = o.to_string();
            CachedObject::decode(
                rt,
                key.as_bytes(),
                stored.as_bytes(),
                7,
                WatchEventType::Added,
            )
            .expect("an object")
        })
        .collect();
    let mut group = c.benchmark_group("selectors");
    group.throughput(Throughput::Elements(1000));
    group.bench_function("label and field selector over 1000 objects", |b| {
        b.iter(|| objects.iter().filter(|o| selectors.matches(o)).count())
    });
    group.bench_function("the same over 1000 cached objects' attributes", |b| {
        b.iter(|| cached.iter().filter(|o| o.matches(&selectors)).count())
    });
    group.finish();
}

fn cache_decode(c: &mut Criterion) {
    let rt = configmaps();
    let key = rt.key(Some("default"), "cm-00001");
    let stored = configmap(1).to_string();
    let mut group = c.benchmark_group("watch cache feed");
    group.bench_function("decode one stored 1 KiB ConfigMap", |b| {
        b.iter(|| {
            black_box(CachedObject::decode(
                rt,
                key.as_bytes(),
                stored.as_bytes(),
                7,
                WatchEventType::Modified,
            ))
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    mvcc_apply,
    mvcc_range,
    watch_cache_fan_out,
    list_encoding,
    selector_matching,
    cache_decode
);
criterion_main!(benches);

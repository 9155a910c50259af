//! The MVCC store through the state machine: revisions, reads at old
//! revisions, compaction, snapshots, recovery after a crash, and
//! exactly-once tagged proposals across entries, restarts and snapshots.

use std::io::{BufRead, BufReader};
use std::process::{Command as Process, Stdio};

use kubestore_storage::{
    ApplyError, Command, CommandResult, DeleteRequest, KeyRange, LeaseId, LogIndex, Op, ProposalId,
    PurgeStep, PutRequest, RangeRequest, Revision, StateMachine, Store, StoreError, Txn,
};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn put(key: &str, value: &str) -> Command {
    Command::Txn(Txn {
        success: vec![Op::Put(PutRequest::new(key, value))],
        ..Txn::default()
    })
}

/// `cmd` as proposal `(origin, epoch, seq)`, sent with `floor`.
fn tagged(origin: u64, epoch: u64, seq: u64, floor: u64, cmd: Command) -> Command {
    Command::Tagged {
        id: ProposalId { origin, epoch, seq },
        floor,
        cmd: Box::new(cmd),
    }
}

fn compact(revision: u64) -> Command {
    Command::Compact {
        revision: Revision(revision),
    }
}

fn delete(key: &str) -> Command {
    Command::Txn(Txn {
        success: vec![Op::Delete(DeleteRequest {
            range: KeyRange::single(key),
            prev_kv: false,
        })],
        ..Txn::default()
    })
}

/// Applies commands as consecutive log entries starting after `next - 1`.
async fn apply_all(
    sm: &mut StateMachine,
    next: &mut u64,
    cmds: Vec<Command>,
) -> Vec<kubestore_storage::Response> {
    let entries: Vec<Entry<kubestore_storage::TypeConfig>> = cmds
        .into_iter()
        .map(|cmd| {
            let e = Entry {
                log_id: log_id(*next),
                payload: EntryPayload::Normal(cmd.into()),
            };
            *next += 1;
            e
        })
        .collect();
    sm.apply(entries).await.expect("apply")
}

fn read(store: &Store, prefix: &str, at: Option<u64>) -> Result<Vec<(String, String)>, StoreError> {
    let resp = store.range(&RangeRequest {
        range: KeyRange::prefix(prefix),
        revision: at.map(Revision),
        ..RangeRequest::default()
    })?;
    Ok(resp
        .kvs
        .into_iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(&kv.key).into_owned(),
                String::from_utf8_lossy(&kv.value).into_owned(),
            )
        })
        .collect())
}

fn kv(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

#[tokio::test]
async fn revisions_increase_by_one_per_write_and_old_revisions_stay_readable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(dir.path()).expect("open");
    let mut next = 1;
    let responses = apply_all(
        &mut sm,
        &mut next,
        vec![
            put("a", "1"),
            put("b", "1"),
            put("a", "2"),
            delete("b"),
            delete("missing"),
            put("c", "1"),
        ],
    )
    .await;
    let revisions: Vec<u64> = responses.iter().map(|r| r.revision.0).collect();
    // The delete of a missing key writes nothing and keeps the revision.
    assert_eq!(revisions, vec![1, 2, 3, 4, 4, 5]);
    assert_eq!(store.applied().revision, Revision(5));
    assert_eq!(store.applied().log_index, LogIndex(6));

    assert_eq!(
        read(&store, "", Some(1)).expect("rev 1"),
        vec![kv("a", "1")]
    );
    assert_eq!(
        read(&store, "", Some(2)).expect("rev 2"),
        vec![kv("a", "1"), kv("b", "1")]
    );
    assert_eq!(
        read(&store, "", Some(3)).expect("rev 3"),
        vec![kv("a", "2"), kv("b", "1")]
    );
    assert_eq!(
        read(&store, "", Some(4)).expect("rev 4"),
        vec![kv("a", "2")]
    );
    assert_eq!(
        read(&store, "", None).expect("current"),
        vec![kv("a", "2"), kv("c", "1")]
    );
    assert!(matches!(
        read(&store, "", Some(6)),
        Err(StoreError::FutureRevision { .. })
    ));

    let events = store.events_after(Revision(2), 10).expect("events");
    let revs: Vec<u64> = events.iter().map(|(r, _)| r.0).collect();
    assert_eq!(revs, vec![3, 4, 5]);
    let deleted = &events[1].1[0];
    assert_eq!(
        deleted.prev_kv.as_ref().map(|p| p.value.clone()),
        Some(bytes::Bytes::from_static(b"1")),
        "a delete carries the last state"
    );
}

/// `Store::get` (one read of the current row) answers what a one-key
/// range at the current revision answers, key-value for key-value.
#[tokio::test]
async fn a_get_of_one_key_equals_a_range_of_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(dir.path()).expect("open");
    let mut next = 1;
    let one_key_range = |key: &str| {
        store
            .range(&RangeRequest {
                range: KeyRange::single(key),
                ..RangeRequest::default()
            })
            .expect("range")
            .kvs
            .into_iter()
            .next()
    };
    assert_eq!(store.get(b"a").expect("get"), None, "an empty store");
    apply_all(
        &mut sm,
        &mut next,
        vec![put("a", "1"), put("b", "1"), put("a", "2"), delete("b")],
    )
    .await;
    for key in ["a", "b", "missing"] {
        assert_eq!(
            store.get(key.as_bytes()).expect("get"),
            one_key_range(key),
            "{key}"
        );
    }
    let a = store.get(b"a").expect("get").expect("a exists");
    assert_eq!(
        (
            a.value.as_ref(),
            a.mod_revision,
            a.create_revision,
            a.version
        ),
        (b"2".as_slice(), Revision(3), Revision(1), 2)
    );
    assert_eq!(store.get(b"b").expect("get"), None, "deleted");
}

/// A one-key range at an old revision (one seek back in the key's
/// history) answers what a range over every key answers for that key, at
/// every revision: across puts, deletions, re-creations, neighbours whose
/// keys extend it, and after compaction has purged whole keys' histories,
/// among them many keys that sort just before the key read.
#[tokio::test]
async fn a_one_key_range_at_an_old_revision_equals_the_wide_range_for_that_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(dir.path()).expect("open");
    let mut next = 1;
    let mut keys = vec!["a".to_string(), "a\0".into(), "ab".into(), "b".into()];
    apply_all(
        &mut sm,
        &mut next,
        vec![
            put("a", "1"),
            put("a\0", "1"),
            put("a", "2"),
            put("ab", "1"),
            delete("a"),
            put("b", "1"),
            put("a", "3"),
            delete("a\0"),
            put("a", "4"),
            put("ab", "2"),
        ],
    )
    .await;
    // Keys created and deleted, sorting before "a": once purged, nothing
    // of them is left but RocksDB's tombstones.
    let churn: Vec<Command> = (0..200)
        .flat_map(|i| {
            let key = format!("0/{i:03}");
            [put(&key, "x"), delete(&key)]
        })
        .chain([put("z", "1")])
        .collect();
    apply_all(&mut sm, &mut next, churn).await;
    keys.extend(["0/000".to_string(), "0/199".into(), "1".into()]);
    let one_and_wide_agree = |at: u64| {
        let wide = read(&store, "", Some(at)).expect("wide range");
        for key in &keys {
            let one = store
                .range(&RangeRequest {
                    range: KeyRange::single(key.as_str()),
                    revision: Some(Revision(at)),
                    ..RangeRequest::default()
                })
                .expect("one-key range");
            let one: Vec<_> = one
                .kvs
                .iter()
                .map(|kv| {
                    (
                        String::from_utf8_lossy(&kv.key).into_owned(),
                        String::from_utf8_lossy(&kv.value).into_owned(),
                    )
                })
                .collect();
            let expected: Vec<_> = wide.iter().filter(|(k, _)| k == key).cloned().collect();
            assert_eq!(one, expected, "key {key:?} at revision {at}");
        }
    };
    let current = store.applied().revision.0;
    assert_eq!(current, 411);
    for at in 1..current {
        one_and_wide_agree(at);
    }
    // Spot checks that the comparison is not vacuous.
    assert_eq!(read(&store, "a", Some(4)).expect("at 4")[0], kv("a", "2"));
    assert!(!read(&store, "", Some(5))
        .expect("at 5")
        .iter()
        .any(|(k, _)| k == "a"));
    assert_eq!(
        read(&store, "0/", Some(11)).expect("at 11"),
        vec![kv("0/000", "x")]
    );

    // Compact to 410 (the last deletion) and purge: "a\0" and the "0/…"
    // keys before "0/199" lose all their rows; "a", "ab" and "b" keep
    // their last. Read at 410 from history, the current state being 411.
    apply_all(&mut sm, &mut next, vec![compact(current - 1)]).await;
    while let PurgeStep::More { .. } = store.purge_compacted_history(u64::MAX).expect("purge") {}
    assert_eq!(store.purged(), Revision(current - 1));
    one_and_wide_agree(current - 1);
    assert_eq!(
        read(&store, "", Some(current - 1)).expect("at the compaction point"),
        vec![kv("a", "4"), kv("ab", "2"), kv("b", "1")]
    );
}

#[tokio::test]
async fn compaction_drops_history_below_the_revision_and_keeps_reads_at_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(dir.path()).expect("open");
    let mut next = 1;
    apply_all(
        &mut sm,
        &mut next,
        vec![
            put("a", "1"),
            put("b", "1"),
            put("a", "2"),
            delete("b"),
            put("a", "3"),
        ],
    )
    .await;
    let resp = apply_all(&mut sm, &mut next, vec![compact(4)]).await;
    assert_eq!(resp[0].result, Ok(CommandResult::Compacted));
    assert_eq!(store.applied().compacted, Revision(4));

    assert!(matches!(
        read(&store, "", Some(3)),
        Err(StoreError::Compacted { .. })
    ));
    assert_eq!(
        read(&store, "", Some(4)).expect("at the compaction point"),
        vec![kv("a", "2")]
    );
    assert_eq!(read(&store, "", None).expect("current"), vec![kv("a", "3")]);
    assert!(matches!(
        store.events_after(Revision(1), 10),
        Err(StoreError::Compacted { .. })
    ));
    assert_eq!(
        store
            .events_after(Revision(3), 10)
            .expect("from the compaction point")
            .len(),
        2
    );

    // Compacting again to an older or the same revision is refused identically on every node.
    let again = apply_all(&mut sm, &mut next, vec![compact(2)]).await;
    assert_eq!(again[0].result, Err(ApplyError::Compacted));
    let future = apply_all(&mut sm, &mut next, vec![compact(99)]).await;
    assert_eq!(future[0].result, Err(ApplyError::FutureRevision));
}

#[tokio::test]
async fn a_snapshot_round_trips_to_a_fresh_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(&dir.path().join("a")).expect("open a");
    let mut next = 1;
    let cmds: Vec<Command> = (0..200)
        .map(|i| put(&format!("k/{:03}", i % 50), &i.to_string()))
        .collect();
    apply_all(&mut sm, &mut next, cmds).await;
    apply_all(&mut sm, &mut next, vec![delete("k/007"), compact(120)]).await;
    // Proposals of node 7: seqs 1 and 2 finished, 3 and 4 still recorded.
    let proposals = vec![
        tagged(7, 1, 1, 1, put("p/1", "1")),
        tagged(7, 1, 2, 1, put("p/2", "1")),
        tagged(7, 1, 3, 3, put("p/3", "1")),
        tagged(7, 1, 4, 3, put("p/4", "1")),
    ];
    let answers = apply_all(&mut sm, &mut next, proposals.clone()).await;

    let mut builder = sm.get_snapshot_builder().await;
    let snapshot = builder.build_snapshot().await.expect("build");
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(next - 1)));

    let (_log2, mut sm2, store2) = kubestore_storage::open(&dir.path().join("b")).expect("open b");
    // Node b's own table before the install: replaced by the snapshot's.
    let mut next_b = 1;
    let before = apply_all(
        &mut sm2,
        &mut next_b,
        vec![tagged(9, 1, 1, 1, put("b/only", "1"))],
    )
    .await;
    assert_eq!(before[0].revision, Revision(1));
    let mut incoming = sm2.begin_receiving_snapshot().await.expect("receive");
    let mut source = snapshot.snapshot;
    tokio::io::copy(&mut source, &mut *incoming)
        .await
        .expect("copy");
    sm2.install_snapshot(&snapshot.meta, incoming)
        .await
        .expect("install");

    let (applied, _) = sm2.applied_state().await.expect("applied state");
    assert_eq!(applied, snapshot.meta.last_log_id);
    assert_eq!(store2.applied().revision, store.applied().revision);
    assert_eq!(store2.applied().compacted, Revision(120));
    assert_eq!(
        read(&store2, "", None).expect("b"),
        read(&store, "", None).expect("a")
    );
    assert_eq!(
        read(&store2, "", Some(150)).expect("b@150"),
        read(&store, "", Some(150)).expect("a@150")
    );
    assert_eq!(
        store2.events_after(Revision(150), 1000).expect("b events"),
        store.events_after(Revision(150), 1000).expect("a events")
    );
    // The session table came with it: copies of the recorded proposals get
    // their first answers, copies of the finished ones are refused, and
    // nothing is written.
    let revision = store2.applied().revision;
    let copies = apply_all(&mut sm2, &mut next, proposals).await;
    assert_eq!(copies[2..], answers[2..]);
    for refused in &copies[..2] {
        assert_eq!(refused.result, Err(ApplyError::StaleProposal));
    }
    assert_eq!(store2.applied().revision, revision);
    // Node b's own session went with the state it replaced.
    let again = apply_all(
        &mut sm2,
        &mut next,
        vec![tagged(9, 1, 1, 1, put("b/only", "1"))],
    )
    .await;
    assert_eq!(again[0].revision, revision.next(), "applied anew");

    // The installed node keeps applying from where the snapshot ends.
    let r = apply_all(&mut sm2, &mut next, vec![put("after", "snapshot")]).await;
    assert_eq!(r[0].revision, revision.next().next());
}

/// Apply keeps the keys recent entries wrote in memory and reads them
/// there, as do the store's one-key reads: after an install replaced the
/// state, a read finds the installed key and a write builds on it, never
/// on the one the node wrote before, and a key only the node had is gone.
#[tokio::test]
async fn writes_after_an_install_build_on_the_installed_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(&dir.path().join("a")).expect("open a");
    let mut next = 1;
    let cmds = (0..6).map(|i| put("shared", &format!("a{i}"))).collect();
    apply_all(&mut sm, &mut next, cmds).await;
    let built = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build");
    let installed = store.get(b"shared").expect("get").expect("shared on a");

    let (_log2, mut sm2, store2) = kubestore_storage::open(&dir.path().join("b")).expect("open b");
    let mut next_b = 1;
    let own = vec![put("shared", "b0"), put("shared", "b1"), put("b/only", "b")];
    apply_all(&mut sm2, &mut next_b, own).await;
    let mut incoming = sm2.begin_receiving_snapshot().await.expect("receive");
    let mut source = built.snapshot;
    tokio::io::copy(&mut source, &mut *incoming)
        .await
        .expect("copy");
    sm2.install_snapshot(&built.meta, incoming)
        .await
        .expect("install");
    // The store's one-key reads answer from the same rows.
    assert_eq!(store2.get(b"shared").expect("get"), Some(installed.clone()));
    assert_eq!(
        store2.get(b"b/only").expect("get"),
        None,
        "gone with b's state"
    );

    let mut next_b = next;
    apply_all(
        &mut sm2,
        &mut next_b,
        vec![put("shared", "after"), put("b/only", "again")],
    )
    .await;
    let shared = store2.get(b"shared").expect("get").expect("shared on b");
    assert_eq!(shared.create_revision, installed.create_revision);
    assert_eq!(shared.version, installed.version + 1, "{shared:?}");
    assert_eq!(shared.mod_revision, installed.mod_revision.next());
    let only = store2.get(b"b/only").expect("get").expect("b/only on b");
    assert_eq!(
        only.version, 1,
        "re-created, not the pre-install key: {only:?}"
    );
    assert_eq!(only.create_revision, only.mod_revision);
}

#[tokio::test]
async fn a_second_entry_of_one_proposal_changes_nothing_and_answers_the_original_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(dir.path()).expect("open");
    let mut next = 1;
    // A blind put, retried at another leader after the first one committed
    // it: both copies reach the log.
    let write = tagged(2, 1, 1, 1, put("counter", "1"));
    let responses = apply_all(
        &mut sm,
        &mut next,
        vec![write.clone(), put("other", "x"), write.clone()],
    )
    .await;
    assert_eq!(responses[0].revision, Revision(1));
    assert!(responses[0].result.is_ok());
    assert_eq!(responses[2], responses[0], "the copy gets the first answer");
    assert_eq!(store.applied().revision, Revision(2));
    assert_eq!(store.applied().log_index, LogIndex(3));
    let events = store.events_after(Revision(0), 10).expect("events");
    assert_eq!(
        events
            .iter()
            .map(|(r, e)| (r.0, e.len()))
            .collect::<Vec<_>>(),
        vec![(1, 1), (2, 1)],
        "one event for the proposal"
    );
    let current = store
        .range(&RangeRequest {
            range: KeyRange::single("counter"),
            ..RangeRequest::default()
        })
        .expect("range");
    assert_eq!(current.kvs[0].version, 1);
    assert_eq!(current.kvs[0].mod_revision, Revision(1));
}

#[tokio::test]
async fn the_session_table_and_boot_epochs_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut next = 1;
    let write = tagged(3, 1, 5, 5, put("k", "v"));
    let (first, epoch) = {
        let (_log, mut sm, store) = kubestore_storage::open(dir.path()).expect("open");
        let answers = apply_all(&mut sm, &mut next, vec![write.clone()]).await;
        (answers[0].clone(), store.boot_epoch())
    };
    let (_log, mut sm, store) = kubestore_storage::open(dir.path()).expect("reopen");
    assert!(
        store.boot_epoch() > epoch,
        "every open starts a later epoch: {} after {epoch}",
        store.boot_epoch()
    );
    let copies = apply_all(
        &mut sm,
        &mut next,
        vec![write, tagged(3, 1, 4, 5, put("k", "older"))],
    )
    .await;
    assert_eq!(copies[0], first);
    assert_eq!(copies[1].result, Err(ApplyError::StaleProposal));
    assert_eq!(store.applied().revision, Revision(1));
}

#[tokio::test]
async fn a_snapshot_of_another_storage_format_is_refused_and_the_store_is_left_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, _store) = kubestore_storage::open(&dir.path().join("a")).expect("open a");
    let mut next = 1;
    apply_all(&mut sm, &mut next, vec![put("a", "1"), put("b", "2")]).await;
    let mut builder = sm.get_snapshot_builder().await;
    let snapshot = builder.build_snapshot().await.expect("build");
    let mut bytes = Vec::new();
    let mut source = snapshot.snapshot;
    tokio::io::AsyncReadExt::read_to_end(&mut source, &mut bytes)
        .await
        .expect("read snapshot");
    assert_eq!(&bytes[..8], b"KSSNAPSH");

    let (_log2, mut sm2, store2) = kubestore_storage::open(&dir.path().join("b")).expect("open b");
    let mut next2 = 1;
    apply_all(&mut sm2, &mut next2, vec![put("mine", "kept")]).await;
    let before = read(&store2, "", None).expect("b before");

    // Format 1 had its own magic and no version field; a later format
    // would carry its number.
    let mut format_1 = b"KSSNAP01".to_vec();
    format_1.extend_from_slice(&bytes[12..]);
    let mut format_99 = bytes.clone();
    format_99[8..12].copy_from_slice(&99u32.to_be_bytes());
    for (found, file) in [(1, format_1), (99, format_99)] {
        let mut incoming = sm2.begin_receiving_snapshot().await.expect("receive");
        tokio::io::AsyncWriteExt::write_all(&mut *incoming, &file)
            .await
            .expect("write");
        let err = sm2
            .install_snapshot(&snapshot.meta, incoming)
            .await
            .expect_err("another format is refused");
        assert!(
            err.to_string()
                .contains(&format!("has storage format {found}, this build reads")),
            "{err}"
        );
        assert_eq!(read(&store2, "", None).expect("b after"), before);
    }
}

#[tokio::test]
async fn a_snapshot_announced_as_another_is_refused_and_the_current_one_reads_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, _store) = kubestore_storage::open(&dir.path().join("a")).expect("open a");
    let mut next = 1;
    apply_all(&mut sm, &mut next, vec![put("a", "1"), put("b", "2")]).await;
    let mut builder = sm.get_snapshot_builder().await;
    let built = builder.build_snapshot().await.expect("build");
    // The current snapshot's metadata and bytes come from one file.
    let current = sm
        .get_current_snapshot()
        .await
        .expect("read current")
        .expect("a current snapshot");
    assert_eq!(current.meta, built.meta);
    let mut bytes = Vec::new();
    let mut source = current.snapshot;
    tokio::io::AsyncReadExt::read_to_end(&mut source, &mut bytes)
        .await
        .expect("read snapshot");
    assert_eq!(&bytes[..8], b"KSSNAPSH", "read from the start of the file");

    let (_log2, mut sm2, store2) = kubestore_storage::open(&dir.path().join("b")).expect("open b");
    let mut next2 = 1;
    apply_all(&mut sm2, &mut next2, vec![put("mine", "kept")]).await;
    let before = read(&store2, "", None).expect("b before");
    // Announced as covering more of the log than the file holds.
    let mut announced = built.meta.clone();
    announced.last_log_id = Some(LogId::new(CommittedLeaderId::new(9, 1), 999));
    let mut incoming = sm2.begin_receiving_snapshot().await.expect("receive");
    tokio::io::AsyncWriteExt::write_all(&mut *incoming, &bytes)
        .await
        .expect("write");
    let err = sm2
        .install_snapshot(&announced, incoming)
        .await
        .expect_err("a snapshot that is not what was announced is refused");
    assert!(err.to_string().contains("describes itself as"), "{err}");
    assert_eq!(read(&store2, "", None).expect("b after"), before);
    // The node goes on applying.
    apply_all(&mut sm2, &mut next2, vec![put("after", "1")]).await;
    assert_eq!(
        read(&store2, "after", None).expect("read"),
        vec![("after".to_string(), "1".to_string())]
    );
}

fn put_leased(key: &str, lease: i64) -> Command {
    let mut p = PutRequest::new(key, "v");
    p.lease = LeaseId(lease);
    Command::Txn(Txn {
        success: vec![Op::Put(p)],
        ..Txn::default()
    })
}

#[tokio::test]
async fn leases_attach_keys_revoke_them_in_one_revision_and_travel_in_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(&dir.path().join("a")).expect("open a");
    let mut next = 1;
    let r = apply_all(
        &mut sm,
        &mut next,
        vec![
            Command::LeaseGrant {
                id: LeaseId(7),
                ttl: 30,
            },
            Command::LeaseGrant {
                id: LeaseId(7),
                ttl: 30,
            },
            put_leased("l/a", 7),
            put_leased("l/b", 7),
            put_leased("l/c", 8),
            Command::LeaseKeepAlive { id: LeaseId(7) },
            // Moving a key to no lease detaches it.
            put_leased("l/b", 0),
            put_leased("l/b", 7),
        ],
    )
    .await;
    assert!(matches!(r[0].result, Ok(CommandResult::Lease(_))));
    assert_eq!(r[1].result, Err(ApplyError::LeaseExists));
    assert_eq!(r[4].result, Err(ApplyError::LeaseNotFound));
    match &r[5].result {
        Ok(CommandResult::Lease(l)) => assert_eq!((l.ttl, l.renewals), (30, 1)),
        other => panic!("keep-alive: {other:?}"),
    }
    let (lease, keys) = store.lease(LeaseId(7)).expect("read").expect("lease 7");
    assert_eq!(lease.renewals, 1);
    assert_eq!(keys, vec![b"l/a".to_vec(), b"l/b".to_vec()]);

    // The snapshot carries the lease and its keys.
    let mut builder = sm.get_snapshot_builder().await;
    let snapshot = builder.build_snapshot().await.expect("build");
    let (_log2, mut sm2, store2) = kubestore_storage::open(&dir.path().join("b")).expect("open b");
    let mut incoming = sm2.begin_receiving_snapshot().await.expect("receive");
    let mut source = snapshot.snapshot;
    tokio::io::copy(&mut source, &mut *incoming)
        .await
        .expect("copy");
    sm2.install_snapshot(&snapshot.meta, incoming)
        .await
        .expect("install");
    assert_eq!(
        store2.lease(LeaseId(7)).expect("read b"),
        store.lease(LeaseId(7)).expect("read a")
    );

    // Revoke: both keys go in one new revision, the lease with them.
    let before = store.applied().revision;
    let r = apply_all(
        &mut sm,
        &mut next,
        vec![Command::LeaseRevoke { id: LeaseId(7) }],
    )
    .await;
    assert_eq!(r[0].result, Ok(CommandResult::LeaseRevoked { deleted: 2 }));
    assert_eq!(r[0].revision, before.next());
    assert_eq!(read(&store, "l/", None).expect("read"), Vec::new());
    let events = store.events_after(before, 10).expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].1.len(), 2);
    assert_eq!(store.lease(LeaseId(7)).expect("read"), None);
    let r = apply_all(
        &mut sm,
        &mut next,
        vec![Command::LeaseRevoke { id: LeaseId(7) }],
    )
    .await;
    assert_eq!(r[0].result, Err(ApplyError::LeaseNotFound));
}

const CRASH_DIR: &str = "KUBESTORE_TEST_CRASH_DIR";

/// Not a test on its own: the child process of the crash test. It does
/// what a node does with each entry, until it is killed: appends it to the
/// log (synced), records it committed, applies it, and only then says so.
#[tokio::test]
async fn crash_child_applies_until_killed() {
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    let Ok(dir) = std::env::var(CRASH_DIR) else {
        return;
    };
    let (mut log, mut sm, store) =
        kubestore_storage::open(std::path::Path::new(&dir)).expect("open");
    if sm.applied_state().await.expect("applied").0.is_none() {
        // A log starts at index 0, as a cluster's does (its first
        // membership): openraft's start re-applies from there.
        let first = vec![Entry {
            log_id: log_id(0),
            payload: EntryPayload::Blank,
        }];
        log.blocking_append(first.clone()).await.expect("append");
        sm.apply(first).await.expect("apply");
    }
    let mut next = store.applied().log_index.0 + 1;
    loop {
        // Each entry is proposal `seq = its index` of node 1, alone in flight.
        let entries: Vec<Entry<kubestore_storage::TypeConfig>> = (next..next + 3)
            .map(|index| {
                let write = put(&format!("key/{}", index % 97), &index.to_string());
                Entry {
                    log_id: log_id(index),
                    payload: EntryPayload::Normal(tagged(1, 1, index, index, write).into()),
                }
            })
            .collect();
        next += 3;
        log.blocking_append(entries.clone()).await.expect("append");
        log.save_committed(Some(log_id(next - 1)))
            .await
            .expect("committed");
        sm.apply(entries).await.expect("apply");
        println!("applied {}", next - 1);
    }
}

/// A node killed while applying restarts as a node does: the state is as
/// of its last flush (the state machine's rows skip the WAL), data and
/// last-applied id in agreement, and openraft's start re-applies the
/// committed log after it, so nothing the child reported applied is lost
/// and nothing it never applied appears.
#[tokio::test]
async fn reopening_after_a_kill_mid_apply_finds_data_and_last_applied_in_agreement() {
    use openraft::storage::StorageHelper;
    if std::env::var(CRASH_DIR).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for round in 0..3 {
        // Phase 1: a child process applies entries; kill -9 it mid-stream.
        let mut child = Process::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "crash_child_applies_until_killed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let mut seen = 0;
        let mut reported = 0u64;
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("line");
            if let Some(index) = line.strip_prefix("applied ") {
                reported = index.parse().expect("an index");
                seen += 1;
                if seen == 50 + round * 17 {
                    break;
                }
            }
        }
        child.kill().expect("kill");
        child.wait().expect("wait");

        // Phase 2: the state found on disk is one flush's, consistent in
        // itself: every applied entry wrote exactly one revision, so the
        // revision equals the last applied index.
        let (mut log, mut sm, store) = kubestore_storage::open(dir.path()).expect("reopen");
        let (found, _) = sm.applied_state().await.expect("applied");
        let found = found.map_or(0, |l| l.index);
        assert_eq!(
            store.applied().revision,
            Revision(found),
            "data and last-applied disagree after a crash"
        );
        assert!(
            found < reported,
            "round {round}: the kill took back the unflushed state ({found} of {reported} applied)"
        );

        // Phase 3: openraft's start re-applies the committed log.
        StorageHelper::new(&mut log, &mut sm)
            .get_initial_state()
            .await
            .expect("initial state");
        let (last_applied, _) = sm.applied_state().await.expect("applied");
        let index = last_applied.map_or(0, |l| l.index);
        assert!(
            index >= reported,
            "round {round}: {reported} was applied before the kill, {index} after the restart"
        );
        assert_eq!(store.applied().revision, Revision(index));
        let current = read(&store, "", None).expect("current");
        let at_revision = read(&store, "", Some(index)).expect("at revision");
        assert_eq!(current, at_revision);
        let max_value: u64 = current
            .iter()
            .filter_map(|(_, v)| v.parse().ok())
            .max()
            .unwrap_or(0);
        assert_eq!(max_value, index, "the newest value is the last entry's");
        if round == 2 {
            // The session rows were re-applied with the data: the last
            // applied proposal is known, so a copy of it is answered, not
            // applied.
            let mut next = index + 1;
            let copy = apply_all(
                &mut sm,
                &mut next,
                vec![tagged(1, 1, index, index, put("key/copy", "copy"))],
            )
            .await;
            assert_eq!(copy[0].revision, Revision(index));
            assert!(copy[0].result.is_ok(), "{:?}", copy[0]);
            assert_eq!(store.applied().revision, Revision(index));
        }
    }
}

fn range_at(prefix: &str, revision: Option<u64>, limit: u64) -> Command {
    Command::Txn(Txn {
        success: vec![Op::Range(RangeRequest {
            range: KeyRange::prefix(prefix),
            revision: revision.map(Revision),
            limit,
            ..RangeRequest::default()
        })],
        ..Txn::default()
    })
}

fn create(key: &str, value: &str) -> Command {
    Command::Txn(Txn {
        compare: vec![kubestore_storage::Compare::mod_revision(
            key,
            kubestore_storage::CompareOp::Equal,
            0,
        )],
        success: vec![Op::Put(PutRequest::new(key, value))],
        failure: vec![Op::Range(RangeRequest {
            range: KeyRange::single(key),
            ..RangeRequest::default()
        })],
    })
}

#[tokio::test]
async fn a_batch_entry_applies_exactly_like_one_entry_per_command() {
    // Every command sees the ones before it: creates that collide, reads at
    // revisions made earlier in the same batch, leases granted, attached and
    // revoked inside it.
    let cmds = vec![
        put("k/a", "1"),
        create("k/b", "1"),
        create("k/b", "2"),
        put("k/a", "2"),
        range_at("k/", Some(1), 0),
        range_at("k/", Some(2), 0),
        range_at("k/", None, 1),
        Command::LeaseGrant {
            id: LeaseId(9),
            ttl: 60,
        },
        put_leased("k/c", 9),
        put_leased("k/d", 9),
        Command::LeaseKeepAlive { id: LeaseId(9) },
        delete("k/a"),
        delete("k/missing"),
        range_at("k/", Some(4), 0),
        put_leased("k/e", 10),
        Command::LeaseRevoke { id: LeaseId(9) },
        range_at("k/", None, 0),
        create("k/a", "3"),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let (_la, mut one_by_one, a) = kubestore_storage::open(&dir.path().join("a")).expect("open a");
    let (_lb, mut batched, b) = kubestore_storage::open(&dir.path().join("b")).expect("open b");
    let (mut next_a, mut next_b) = (1, 1);
    let expected = apply_all(&mut one_by_one, &mut next_a, cmds.clone()).await;
    let got = apply_all(&mut batched, &mut next_b, vec![Command::Batch(cmds)]).await;

    let [batch] = got.as_slice() else {
        panic!("one entry, one response: {got:?}")
    };
    match &batch.result {
        Ok(CommandResult::Batch(responses)) => assert_eq!(responses, &expected),
        other => panic!("a batch answers with one response per command: {other:?}"),
    }
    assert_eq!(batch.revision, a.applied().revision);
    assert_eq!(b.applied().revision, a.applied().revision);
    let last = a.applied().revision.0;
    for rev in 1..=last {
        assert_eq!(
            read(&b, "", Some(rev)).expect("b at rev"),
            read(&a, "", Some(rev)).expect("a at rev"),
            "state at revision {rev}"
        );
    }
    assert_eq!(
        b.events_after(Revision::ZERO, 100).expect("b events"),
        a.events_after(Revision::ZERO, 100).expect("a events")
    );
    assert_eq!(b.leases().expect("b leases"), a.leases().expect("a leases"));

    // A compaction never rides in a batch; the rest of the batch still applies.
    let r = apply_all(
        &mut batched,
        &mut next_b,
        vec![Command::Batch(vec![compact(1), put("k/z", "1")])],
    )
    .await;
    match &r[0].result {
        Ok(CommandResult::Batch(responses)) => {
            assert_eq!(responses[0].result, Err(ApplyError::NotBatchable));
            assert_eq!(responses[1].revision, Revision(last + 1));
        }
        other => panic!("batch: {other:?}"),
    }
    assert_eq!(b.applied().compacted, Revision::ZERO);
}

/// The inode of `path`.
fn inode(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).expect("metadata").ino()
}

/// The `incoming-*.snap` files under `dir`.
fn incoming_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .expect("snapshot dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("incoming"))
        })
        .collect()
}

/// An install renames the stream's own file into place (no copy); the
/// file of a stream a newer one replaced is copied instead, since its name
/// is gone. Both install the same state.
#[tokio::test]
async fn an_install_renames_its_streams_file_and_copies_an_abandoned_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = kubestore_storage::open(&dir.path().join("a")).expect("open a");
    let mut next = 1;
    let cmds: Vec<Command> = (0..50).map(|i| put(&format!("k/{i:02}"), "v")).collect();
    apply_all(&mut sm, &mut next, cmds).await;
    let mut builder = sm.get_snapshot_builder().await;
    let snapshot = builder.build_snapshot().await.expect("build");
    let meta = snapshot.meta.clone();
    let bytes = std::fs::read(dir.path().join("a/snapshots/current.snap")).expect("snapshot");

    for abandoned in [false, true] {
        let name = if abandoned { "abandoned" } else { "renamed" };
        let (_log2, mut sm2, store2) =
            kubestore_storage::open(&dir.path().join(name)).expect("open");
        let snapshots = dir.path().join(name).join("snapshots");
        let mut incoming = sm2.begin_receiving_snapshot().await.expect("receive");
        let streamed = incoming_files(&snapshots);
        assert_eq!(streamed.len(), 1, "{streamed:?}");
        let streamed_inode = inode(&streamed[0]);
        if abandoned {
            // A newer stream begins: the first one's file is unlinked.
            let _newer = sm2.begin_receiving_snapshot().await.expect("receive again");
        }
        tokio::io::AsyncWriteExt::write_all(&mut *incoming, &bytes)
            .await
            .expect("write");
        sm2.install_snapshot(&meta, incoming)
            .await
            .expect("install");
        let current = inode(&snapshots.join("current.snap"));
        assert_eq!(
            current == streamed_inode,
            !abandoned,
            "{name}: current.snap is the streamed file only when it was renamed"
        );
        assert_eq!(
            std::fs::read(snapshots.join("current.snap")).expect("installed file"),
            bytes,
            "{name}"
        );
        assert!(
            incoming_files(&snapshots).is_empty(),
            "{name}: nothing incoming is left"
        );
        assert_eq!(
            read(&store2, "", None).expect("installed"),
            read(&store, "", None).expect("source"),
            "{name}"
        );
    }
}

const INSTALL_CRASH_DIR: &str = "KUBESTORE_TEST_INSTALL_CRASH_DIR";

/// Not a test on its own: the child process of the install crash test.
/// It fills a source store (`src`) once, snapshots it, then installs that
/// snapshot into `dst` over and over until it is killed, saying when each
/// install starts.
#[tokio::test]
async fn install_crash_child_installs_until_killed() {
    let Ok(dir) = std::env::var(INSTALL_CRASH_DIR) else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let (_log, mut sm, _store) = kubestore_storage::open(&dir.join("src")).expect("open src");
    let mut next = 1;
    let value = "v".repeat(2048);
    let cmds: Vec<Command> = (0..5_000)
        .map(|i| put(&format!("k/{:04}", i % 2_500), &value))
        .collect();
    apply_all(&mut sm, &mut next, cmds).await;
    let mut builder = sm.get_snapshot_builder().await;
    let snapshot = builder.build_snapshot().await.expect("build");
    let bytes = std::fs::read(dir.join("src/snapshots/current.snap")).expect("snapshot");
    let (_log2, mut dst, _store2) = kubestore_storage::open(&dir.join("dst")).expect("open dst");
    for round in 1.. {
        let mut incoming = dst.begin_receiving_snapshot().await.expect("receive");
        tokio::io::AsyncWriteExt::write_all(&mut *incoming, &bytes)
            .await
            .expect("write");
        println!("installing {round}");
        dst.install_snapshot(&snapshot.meta, incoming)
            .await
            .expect("install");
    }
}

/// A node killed anywhere in a snapshot install (whose rows skip the WAL)
/// reopens with the whole snapshot installed: the install is redone from
/// its staged file, never left half done.
#[tokio::test]
async fn reopening_after_a_kill_mid_install_finds_the_whole_snapshot() {
    if std::env::var(INSTALL_CRASH_DIR).is_ok() {
        return;
    }
    let base = tempfile::tempdir().expect("tempdir");
    // Where in an install the kill lands: right at its start, then later.
    // Each round has directories of its own.
    for delay_ms in [0u64, 40, 120, 250] {
        let dir = base.path().join(format!("after-{delay_ms}ms"));
        let mut child = Process::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "install_crash_child_installs_until_killed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(INSTALL_CRASH_DIR, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        // The second install: the first one completed.
        for line in BufReader::new(stdout).lines() {
            if line.expect("line") == "installing 2" {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        child.kill().expect("kill");
        child.wait().expect("wait");

        let (_log, mut src, source) =
            kubestore_storage::open(&dir.join("src")).expect("reopen src");
        let (_log2, mut dst, installed) =
            kubestore_storage::open(&dir.join("dst")).expect("reopen dst");
        assert_eq!(
            dst.applied_state().await.expect("dst applied").0,
            src.applied_state().await.expect("src applied").0,
            "killed {delay_ms} ms into an install"
        );
        assert_eq!(installed.applied().revision, source.applied().revision);
        let rows = read(&installed, "", None).expect("installed rows");
        assert_eq!(rows.len(), 2_500, "killed {delay_ms} ms into an install");
        assert_eq!(rows, read(&source, "", None).expect("source rows"));
        assert_eq!(
            read(&installed, "", Some(2_600)).expect("installed history"),
            read(&source, "", Some(2_600)).expect("source history")
        );
    }
}

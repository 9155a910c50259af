//! A store in a temporary directory and its state machine, for unit tests
//! that apply commands as consecutive log entries (one revision per
//! write), and the op builders they share.

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, LogId};

use crate::command::{Command, DeleteRequest, KeyRange, Op, PutRequest, Txn};
use crate::ids::Revision;
use crate::{Entry, StateMachine, Store};

pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub(crate) sm: StateMachine,
    pub(crate) store: Store,
    next: u64,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_log, sm, store) = crate::open(dir.path()).expect("open");
        Self {
            _dir: dir,
            sm,
            store,
            next: 1,
        }
    }

    /// Applies `cmd` as the next log entry; it must succeed.
    pub(crate) async fn apply(&mut self, cmd: Command) {
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), self.next),
            payload: EntryPayload::Normal(cmd.into()),
        };
        self.next += 1;
        let responses = self.sm.apply(vec![entry]).await.expect("apply");
        assert!(responses[0].result.is_ok(), "{:?}", responses[0]);
    }

    /// One revision: a txn of `ops`.
    pub(crate) async fn txn(&mut self, ops: Vec<Op>) {
        self.apply(Command::Txn(Txn {
            success: ops,
            ..Txn::default()
        }))
        .await;
    }

    /// Compacts to `revision` and purges what that leaves behind, as the
    /// background compactor would.
    pub(crate) async fn compact(&mut self, revision: u64) {
        self.compact_logically(revision).await;
        self.store
            .purge_compacted_history(u64::MAX)
            .expect("purge compacted history");
    }

    /// Applies a compaction to `revision` and nothing more: the rows it
    /// makes unreachable stay until a purge.
    pub(crate) async fn compact_logically(&mut self, revision: u64) {
        self.apply(Command::Compact {
            revision: Revision(revision),
        })
        .await;
    }

    /// Closes the store and opens it again from the same directory, as a
    /// restart would; the next entry follows the last one applied.
    pub(crate) fn reopen(self) -> Self {
        let Fixture {
            _dir,
            sm,
            store,
            next,
        } = self;
        drop((sm, store));
        let (_log, sm, store) = crate::open(_dir.path()).expect("reopen");
        Self {
            _dir,
            sm,
            store,
            next,
        }
    }
}

pub(crate) fn put(key: &str, value: &str) -> Op {
    Op::Put(PutRequest::new(key, value))
}

pub(crate) fn delete(key: &str) -> Op {
    Op::Delete(DeleteRequest {
        range: KeyRange::single(key),
        prev_kv: false,
    })
}

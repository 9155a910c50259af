//! The record of a chaos run: every client operation with the real-time
//! interval in which it ran and what came back, every watcher's stream of
//! events, and the state of every key once the faults healed.
//!
//! A history is what the runner writes and what the checkers read
//! ([`linearizability`](crate::chaos::linearizability) and
//! [`contract`](crate::chaos::contract)); it is serialisable so that a failed
//! run can be saved and checked again offline.
//!
//! Every write in a run writes a value no other write uses, so a value names
//! the write that produced it.
//!
//! Operations are reads (current, stale-tolerant, or at an exact past
//! revision), puts and compare-and-sets on one key each.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The API an operation went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    Rest,
    Etcd,
}

/// What a client asked for, on one key. Values are unique per write in a run
/// (the runner guarantees it), so a value identifies the write that produced
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpKind {
    /// A read. `linearizable == false` (etcd `serializable`) is
    /// stale-tolerant: excluded from the linearizability and real-time checks.
    Read { linearizable: bool },
    /// A read of the key as it was at exactly `revision` (a REST list with
    /// `resourceVersionMatch=Exact`, an etcd Range with `revision`). Its
    /// answer is placed at `revision`, not at the time it ran: excluded
    /// from the linearizability and real-time checks, checked against the
    /// acknowledged writes' revisions instead (`exact-read`).
    ReadAt { revision: u64 },
    /// Unconditional write of `value` (etcd Put).
    Put { value: String },
    /// Compare-and-set: takes effect iff the key's current value equals
    /// `expect` (None = key absent); then sets it to `value` (None = delete).
    /// REST create = `Cas{expect: None, value: Some}`, REST update with a
    /// resourceVersion precondition = `Cas{expect: Some(value the client
    /// read), value: Some(new)}`, REST delete with precondition =
    /// `Cas{expect: Some(old), value: None}`; etcd Txn compare-and-set
    /// likewise.
    Cas {
        expect: Option<String>,
        value: Option<String>,
    },
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The store answered; [`Op::result`] holds the answer.
    Ok,
    /// The store answered that the operation did not take effect.
    Failed,
    /// No answer (timeout, connection lost): a write may or may not have
    /// taken effect, now or later.
    Unknown,
}

/// What came back (only meaningful for [`Outcome::Ok`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpResult {
    /// Read: the value seen (None = absent).
    pub value: Option<String>,
    /// Cas: whether the compare succeeded (Put: always true).
    pub succeeded: bool,
    /// Read: the store revision the read was served at (list resourceVersion
    /// / etcd header revision; for an etcd read at an exact revision the
    /// header need not be the revision read: etcd's is the current one).
    /// Write that succeeded: the revision it created. Failed cas: the store
    /// revision at which it was decided, if known (may be None).
    pub revision: Option<u64>,
    /// Read of a present key: the key's mod revision (the revision of the
    /// write that produced `value`).
    pub mod_revision: Option<u64>,
}

/// One client operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub id: u64,
    pub client: u32,
    pub node: u64,
    pub api: Api,
    pub key: String,
    #[serde(flatten)]
    pub kind: OpKind,
    /// Since the start of the run.
    pub invoked: Duration,
    /// When the answer (or the give-up) came back.
    pub completed: Duration,
    pub outcome: Outcome,
    pub result: OpResult,
    /// The error text for Failed/Unknown.
    pub error: Option<String>,
}

impl Op {
    /// Whether this is a Put or a Cas, whatever its outcome.
    pub fn is_write(&self) -> bool {
        !matches!(self.kind, OpKind::Read { .. } | OpKind::ReadAt { .. })
    }

    /// For a write, the value it sets (`Some(None)` = it deletes the key);
    /// `None` for a read.
    pub fn written_value(&self) -> Option<Option<&str>> {
        match &self.kind {
            OpKind::Read { .. } | OpKind::ReadAt { .. } => None,
            OpKind::Put { value } => Some(Some(value)),
            OpKind::Cas { value, .. } => Some(value.as_deref()),
        }
    }

    /// For a read that was answered (at an exact revision too), the value
    /// it saw (`Some(None)` = the key was absent); `None` otherwise.
    pub fn read_value(&self) -> Option<Option<&str>> {
        match (&self.kind, self.outcome) {
            (OpKind::Read { .. } | OpKind::ReadAt { .. }, Outcome::Ok) => {
                Some(self.result.value.as_deref())
            }
            _ => None,
        }
    }

    /// A linearizable read (etcd's default, every REST read) whose answer
    /// came back.
    pub fn is_linearizable_read(&self) -> bool {
        self.outcome == Outcome::Ok && self.kind == OpKind::Read { linearizable: true }
    }

    /// A write the store acknowledged as having taken effect: an Ok Put, or
    /// an Ok Cas whose compare succeeded.
    pub fn is_acknowledged_write(&self) -> bool {
        self.outcome == Outcome::Ok
            && match self.kind {
                OpKind::Read { .. } | OpKind::ReadAt { .. } => false,
                OpKind::Put { .. } => true,
                OpKind::Cas { .. } => self.result.succeeded,
            }
    }

    /// A write that took effect or may have: acknowledged, or without an
    /// answer.
    pub fn may_have_taken_effect(&self) -> bool {
        self.is_acknowledged_write() || (self.is_write() && self.outcome == Outcome::Unknown)
    }

    /// The revision that places this operation in the store's total order,
    /// if it has one the real-time order must respect: every answered
    /// operation except stale-tolerant reads and reads at an exact revision
    /// (whose answer is placed at the revision asked for), provided the
    /// store reported a revision.
    pub fn ordering_revision(&self) -> Option<u64> {
        let placed_elsewhere = matches!(
            self.kind,
            OpKind::Read {
                linearizable: false
            } | OpKind::ReadAt { .. }
        );
        (self.outcome == Outcome::Ok && !placed_elsewhere)
            .then_some(self.result.revision)
            .flatten()
    }
}

/// `op 12 (put "c1-3" on "pods/a")`: the operation, its key (and the
/// revision of a read at an exact one), and for an answered read or cas
/// what it returned.
impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op {} (", self.id)?;
        match (&self.kind, self.outcome) {
            (OpKind::Read { .. }, Outcome::Ok) => write!(
                f,
                "read of {:?} returned {}",
                self.key,
                DisplayValue(self.result.value.as_deref())
            )?,
            (OpKind::Read { .. }, _) => write!(f, "read of {:?}", self.key)?,
            (OpKind::ReadAt { revision }, Outcome::Ok) => write!(
                f,
                "read of {:?} at revision {revision} returned {}",
                self.key,
                DisplayValue(self.result.value.as_deref())
            )?,
            (OpKind::ReadAt { revision }, _) => {
                write!(f, "read of {:?} at revision {revision}", self.key)?
            }
            (OpKind::Put { value }, _) => write!(f, "put {value:?} on {:?}", self.key)?,
            (OpKind::Cas { expect, value }, outcome) => {
                write!(
                    f,
                    "cas {:?} from {} to {}",
                    self.key,
                    DisplayValue(expect.as_deref()),
                    DisplayValue(value.as_deref())
                )?;
                if outcome == Outcome::Ok {
                    let verdict = if self.result.succeeded {
                        "succeeded"
                    } else {
                        "failed"
                    };
                    write!(f, ", {verdict}")?;
                }
            }
        }
        match self.outcome {
            Outcome::Ok => write!(f, ")"),
            Outcome::Failed => write!(f, ", failed)"),
            Outcome::Unknown => write!(f, ", outcome unknown)"),
        }
    }
}

/// A key's value in messages: quoted, or `absent`.
#[derive(Debug, Clone, Copy)]
pub struct DisplayValue<'a>(pub Option<&'a str>);

impl fmt::Display for DisplayValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(value) => write!(f, "{value:?}"),
            None => write!(f, "absent"),
        }
    }
}

/// One event a watcher received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    pub watcher: u32,
    pub node: u64,
    pub key: String,
    pub revision: u64,
    /// None = deletion.
    pub value: Option<String>,
    pub received: Duration,
}

/// One watcher's whole life: it watches a key prefix from `start_revision`
/// (exclusive: events after it), reconnecting (possibly to other nodes) from
/// the last revision it received; `covered_until` is the last revision it is
/// known to have fully received (last event or progress/bookmark revision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchLog {
    pub watcher: u32,
    pub prefix: String,
    pub start_revision: u64,
    pub covered_until: u64,
    pub events: Vec<WatchEvent>,
    pub reconnects: u32,
}

/// Everything a chaos run observed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    pub ops: Vec<Op>,
    pub watches: Vec<WatchLog>,
    /// Final linearizable read of every key after faults healed:
    /// key -> (value, mod_revision).
    pub final_state: BTreeMap<String, Option<(String, u64)>>,
    /// Every node's `/readyz` answers through the run (absent from
    /// histories saved before readiness was recorded).
    #[serde(default)]
    pub readiness: Vec<ReadinessSample>,
}

/// One thing the checkers found wrong, with the operations involved (by id)
/// so the report can show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub check: String,
    pub key: Option<String>,
    pub message: String,
    pub ops: Vec<u64>,
}

/// Terse constructors of operations for the checkers' unit tests and their
/// benchmark: times are milliseconds since the start of the run, every
/// operation is answered (`Ok`) unless turned [`unknown`](Op::unknown) or
/// [`failed`](Op::failed).
pub mod fixtures {
    use super::*;

    fn op(id: u64, key: &str, kind: OpKind, (invoked, completed): (u64, u64)) -> Op {
        Op {
            id,
            client: 0,
            node: 1,
            api: Api::Etcd,
            key: key.to_owned(),
            kind,
            invoked: Duration::from_millis(invoked),
            completed: Duration::from_millis(completed),
            outcome: Outcome::Ok,
            result: OpResult::default(),
            error: None,
        }
    }

    /// A linearizable read that saw `value`.
    pub fn read(id: u64, key: &str, span: (u64, u64), value: Option<&str>) -> Op {
        let mut read = op(id, key, OpKind::Read { linearizable: true }, span);
        read.result.value = value.map(str::to_owned);
        read
    }

    /// A serializable (stale-tolerant) read that saw `value`.
    pub fn stale_read(id: u64, key: &str, span: (u64, u64), value: Option<&str>) -> Op {
        Op {
            kind: OpKind::Read {
                linearizable: false,
            },
            ..read(id, key, span, value)
        }
    }

    /// A read of the key as it was at exactly `revision` that saw `value`.
    pub fn read_at(id: u64, key: &str, span: (u64, u64), revision: u64, value: Option<&str>) -> Op {
        let mut read = op(id, key, OpKind::ReadAt { revision }, span);
        read.result.value = value.map(str::to_owned);
        read
    }

    /// An acknowledged put of `value`.
    pub fn put(id: u64, key: &str, span: (u64, u64), value: &str) -> Op {
        let mut put = op(
            id,
            key,
            OpKind::Put {
                value: value.to_owned(),
            },
            span,
        );
        put.result.succeeded = true;
        put
    }

    /// A compare-and-set from `expect` to `value` (`None`: absent, or
    /// delete), answered `succeeded`.
    pub fn cas(
        id: u64,
        key: &str,
        span: (u64, u64),
        (expect, value): (Option<&str>, Option<&str>),
        succeeded: bool,
    ) -> Op {
        let kind = OpKind::Cas {
            expect: expect.map(str::to_owned),
            value: value.map(str::to_owned),
        };
        let mut cas = op(id, key, kind, span);
        cas.result.succeeded = succeeded;
        cas
    }

    impl Op {
        /// The same operation with its answer lost.
        pub fn unknown(self) -> Self {
            Op {
                outcome: Outcome::Unknown,
                result: OpResult::default(),
                error: Some("timed out".to_owned()),
                ..self
            }
        }

        /// The same operation, answered with a definite failure.
        pub fn failed(self) -> Self {
            Op {
                outcome: Outcome::Failed,
                result: OpResult::default(),
                error: Some("conflict".to_owned()),
                ..self
            }
        }

        /// The same operation, answered at store revision `revision`.
        pub fn at_revision(mut self, revision: u64) -> Self {
            self.result.revision = Some(revision);
            self
        }

        /// The same operation, reporting the key's `mod_revision`.
        pub fn with_mod_revision(mut self, mod_revision: u64) -> Self {
            self.result.mod_revision = Some(mod_revision);
            self
        }
    }
}

/// What a node's `/readyz` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    /// `200`.
    Ready,
    /// Another status: a check failed.
    NotReady,
    /// No answer in time (the node is down, paused or overloaded).
    Silent,
}

/// One probe of one node's `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadinessSample {
    pub node: u64,
    /// When the probe was sent, since the start of the run.
    pub at: Duration,
    pub readiness: Readiness,
}

#[cfg(test)]
mod tests {
    use super::fixtures::{cas, read, read_at};
    use super::*;

    #[test]
    fn an_op_is_one_flat_json_object_tagged_by_its_kind() {
        let op = cas(7, "pods/a", (1, 2), (Some("c1-1"), None), true).at_revision(9);
        let json = serde_json::to_value(&op).expect("serialises");
        assert_eq!(json["op"], "cas");
        assert_eq!(json["expect"], "c1-1");
        assert_eq!(json["value"], serde_json::Value::Null);
        assert_eq!(json["api"], "etcd");
        assert_eq!(json["outcome"], "ok");
        let back: Op = serde_json::from_value(json).expect("deserialises");
        assert_eq!(back, op);

        let op = read_at(8, "pods/a", (1, 2), 5, Some("c1-1")).at_revision(9);
        let json = serde_json::to_value(&op).expect("serialises");
        assert_eq!(json["op"], "read_at");
        assert_eq!(json["revision"], 5);
        assert_eq!(json["result"]["revision"], 9);
        let back: Op = serde_json::from_value(json).expect("deserialises");
        assert_eq!(back, op);
    }

    #[test]
    fn a_read_at_an_exact_revision_is_a_read_placed_at_that_revision() {
        let op = read_at(3, "k", (0, 1), 5, Some("v"))
            .at_revision(9)
            .with_mod_revision(4);
        assert!(!op.is_write());
        assert!(!op.is_linearizable_read());
        assert!(!op.is_acknowledged_write());
        assert_eq!(op.written_value(), None);
        assert_eq!(op.read_value(), Some(Some("v")));
        assert_eq!(op.ordering_revision(), None);
        assert_eq!(
            read(4, "k", (0, 1), None)
                .at_revision(9)
                .ordering_revision(),
            Some(9)
        );
        assert_eq!(op.clone().failed().read_value(), None);
    }

    #[test]
    fn ops_describe_themselves_for_reports() {
        let op = read(3, "k", (0, 1), Some("v"));
        assert_eq!(op.to_string(), r#"op 3 (read of "k" returned "v")"#);
        let op = read_at(3, "k", (0, 1), 7, None);
        assert_eq!(
            op.to_string(),
            r#"op 3 (read of "k" at revision 7 returned absent)"#
        );
        let op = read_at(3, "k", (0, 1), 7, None).failed();
        assert_eq!(
            op.to_string(),
            r#"op 3 (read of "k" at revision 7, failed)"#
        );
        let op = cas(4, "k", (0, 1), (None, Some("w")), false);
        assert_eq!(
            op.to_string(),
            r#"op 4 (cas "k" from absent to "w", failed)"#
        );
        let op = cas(5, "k", (0, 1), (Some("w"), None), true).unknown();
        assert_eq!(
            op.to_string(),
            r#"op 5 (cas "k" from "w" to absent, outcome unknown)"#
        );
    }
}

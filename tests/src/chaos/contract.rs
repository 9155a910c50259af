//! Checks a history against the store's revision contract: the promises
//! about revisions, watches and durability that Kubernetes clients rely on
//! beyond linearizability of each key's values.
//!
//! The store has one revision counter for all keys. Every write that takes
//! effect creates the next revision; reads report the revision they were
//! served at and the revision that last modified the key; watches replay
//! the writes in revision order. The checks, each named by the `check` of
//! the [`Violation`]s it reports:
//!
//! - `revision-order`: revisions follow real time across all keys. If A
//!   completed before B was invoked, B's revision is at least A's, and
//!   greater if B is a write that took effect. So every linearizable read
//!   sees every write acknowledged before it started, on any key. (Reads
//!   that are not placed at the time they ran are left out: stale-tolerant
//!   ones, and reads at an exact revision.)
//! - `unique-write-revision`: no two acknowledged writes share a revision.
//! - `read-mod-revision`: a read reports as mod revision the revision of the
//!   write of the value it saw, and no later than the revision it was served
//!   at; otherwise clients' optimistic concurrency (resourceVersion
//!   preconditions) compares against the wrong write. (Reads at an exact
//!   revision are checked by `exact-read`.)
//! - `exact-read`: a read of key K at exactly revision R (a REST list with
//!   `resourceVersionMatch=Exact`, an etcd Range at `revision`) sees K as
//!   the acknowledged writes with known revisions left it at R. A value it
//!   saw was written at a revision m ≤ R (its write's acknowledged
//!   revision, which the reported mod revision must equal), and no
//!   acknowledged write of K has a revision in (m, R]; a key it found
//!   absent must not have been set by the latest acknowledged write of K
//!   at or before R, unless a deletion whose revision is unknown (without
//!   an answer, or a REST delete) could lie between. A REST exact list
//!   reports R as its resourceVersion; an etcd answer's header revision is
//!   at least R. A refusal (`410 Gone`, etcd's compacted revision) is no
//!   violation. Only acknowledged writes with a known revision are
//!   evidence: a write of unknown outcome makes more answers possible,
//!   never one certain.
//! - `phantom-value`: every value read, watched or left in the final state
//!   was written to that key by a write that took effect or may have. A
//!   value only a failed write carried means the store reported a failure
//!   for a write it applied.
//! - `watch-order`: a watcher receives events in strictly increasing
//!   revision order, each after the revision it started from, so none is
//!   delivered twice across reconnects.
//! - `watch-complete`: a watcher receives, exactly once, every acknowledged
//!   write under its prefix in the revisions it is known to cover.
//! - `watch-value`: a watch event carries the key and value of the write
//!   that created its revision.
//! - `acknowledged-present`: no acknowledged write is lost: the final state
//!   of a key is its latest acknowledged write or something later.
//!
//! Revisions the runner could not learn (`None`) are not checked.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::chaos::history::{
    Api, DisplayValue, History, Op, OpKind, Outcome, Violation, WatchEvent, WatchLog,
};

/// Runs every check of the contract on `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let writes = AcknowledgedWrites::of(&history.ops);
    let mut violations = revision_order(&history.ops);
    violations.extend(unique_write_revision(&writes));
    violations.extend(read_mod_revision(&history.ops, &writes));
    violations.extend(exact_read(&history.ops, &writes));
    violations.extend(phantom_value(history));
    for log in &history.watches {
        violations.extend(watch_order(log));
        violations.extend(watch_complete(log, &writes));
        violations.extend(watch_value(log, &writes));
    }
    violations.extend(acknowledged_present(history, &writes));
    violations
}

/// The writes the store acknowledged as having taken effect, with the
/// revision it reported for them.
struct AcknowledgedWrites<'a> {
    /// By revision; writes sharing one are all kept.
    by_revision: Vec<(u64, &'a Op)>,
    /// By key and value written (deletions left out).
    by_value: HashMap<(&'a str, &'a str), (u64, &'a Op)>,
    /// By key, each key's by revision.
    by_key: HashMap<&'a str, Vec<(u64, &'a Op)>>,
}

impl<'a> AcknowledgedWrites<'a> {
    fn of(ops: &'a [Op]) -> Self {
        let mut by_revision: Vec<(u64, &Op)> = ops
            .iter()
            .filter(|op| op.is_acknowledged_write())
            .filter_map(|op| Some((op.result.revision?, op)))
            .collect();
        by_revision.sort_by_key(|&(revision, op)| (revision, op.id));
        let by_value = by_revision
            .iter()
            .filter_map(|&(revision, op)| {
                Some(((op.key.as_str(), op.written_value()??), (revision, op)))
            })
            .collect();
        let mut by_key: HashMap<&str, Vec<(u64, &Op)>> = HashMap::new();
        for &(revision, op) in &by_revision {
            by_key
                .entry(op.key.as_str())
                .or_default()
                .push((revision, op));
        }
        AcknowledgedWrites {
            by_revision,
            by_value,
            by_key,
        }
    }

    /// The writes whose revision is in `(after, until]`.
    fn in_revisions(&self, after: u64, until: u64) -> &[(u64, &'a Op)] {
        revisions_between(&self.by_revision, after, until)
    }

    /// The writes of `key` whose revision is in `(after, until]`.
    fn on_key_in_revisions(&self, key: &str, after: u64, until: u64) -> &[(u64, &'a Op)] {
        self.by_key
            .get(key)
            .map_or(&[], |writes| revisions_between(writes, after, until))
    }

    fn at_revision(&self, revision: u64) -> Option<&'a Op> {
        let first = self
            .by_revision
            .partition_point(|&(other, _)| other < revision);
        self.by_revision
            .get(first)
            .filter(|&&(other, _)| other == revision)
            .map(|&(_, op)| op)
    }

    /// The acknowledged write of `value` to `key`, with its revision.
    fn of_value(&self, key: &str, value: &str) -> Option<(u64, &'a Op)> {
        self.by_value.get(&(key, value)).copied()
    }

    /// The acknowledged write of `key` with the highest revision.
    fn latest_on(&self, key: &str) -> Option<(u64, &'a Op)> {
        self.by_key.get(key)?.last().copied()
    }
}

/// The part of `writes` (sorted by revision) whose revision is in
/// `(after, until]`.
fn revisions_between<'w, 'a>(
    writes: &'w [(u64, &'a Op)],
    after: u64,
    until: u64,
) -> &'w [(u64, &'a Op)] {
    let start = writes.partition_point(|&(revision, _)| revision <= after);
    let end = writes.partition_point(|&(revision, _)| revision <= until);
    &writes[start..end.max(start)]
}

/// Whether `op` is a deletion that took effect or may have, at a revision
/// the store did not report: one without an answer, or an acknowledged one
/// whose revision is unknown (a REST delete answers the object as it was).
fn is_unordered_delete(op: &Op) -> bool {
    let deletes = matches!(op.kind, OpKind::Cas { value: None, .. });
    let unordered_ack = op.is_acknowledged_write() && op.result.revision.is_none();
    deletes && (op.outcome == Outcome::Unknown || unordered_ack)
}

/// The [unordered deletions](is_unordered_delete) of each key, indexed so
/// that whether one of them can lie between two operations is answered in
/// O(log n).
struct UnorderedDeletes<'a> {
    /// By key: each deletion's completion (`Duration::MAX` without an
    /// answer), sorted, with the earliest invocation among it and the
    /// deletions completed after it.
    by_key: HashMap<&'a str, Vec<(Duration, Duration)>>,
}

impl<'a> UnorderedDeletes<'a> {
    fn of(ops: &'a [Op]) -> Self {
        let mut by_key: HashMap<&str, Vec<(Duration, Duration)>> = HashMap::new();
        for op in ops.iter().filter(|op| is_unordered_delete(op)) {
            // One without an answer may take effect long after the client
            // gave up on it.
            let completed = match op.outcome {
                Outcome::Unknown => Duration::MAX,
                _ => op.completed,
            };
            by_key
                .entry(op.key.as_str())
                .or_default()
                .push((completed, op.invoked));
        }
        for deletes in by_key.values_mut() {
            deletes.sort_unstable();
            let mut earliest = Duration::MAX;
            for (_, invoked) in deletes.iter_mut().rev() {
                earliest = earliest.min(*invoked);
                *invoked = earliest;
            }
        }
        UnorderedDeletes { by_key }
    }

    /// Whether one of `key`'s unordered deletions may have taken effect
    /// after `write` and at or before the revision `read` read at: it had
    /// not completed before `write` was invoked, and was invoked before
    /// `read` completed (one invoked later takes a revision above every
    /// revision committed by then, and the revision `read` was answered at
    /// was committed by then).
    fn may_lie_between(&self, key: &str, write: &Op, read: &Op) -> bool {
        let Some(deletes) = self.by_key.get(key) else {
            return false;
        };
        let first = deletes.partition_point(|&(completed, _)| completed < write.invoked);
        deletes
            .get(first)
            .is_some_and(|&(_, earliest_invoked)| earliest_invoked <= read.completed)
    }
}

fn violation(check: &str, key: Option<&str>, message: String, ops: &[&Op]) -> Violation {
    Violation {
        check: check.to_owned(),
        key: key.map(str::to_owned),
        message,
        ops: ops.iter().map(|op| op.id).collect(),
    }
}

/// `revision-order`, in O(n log n): sweeps the operations by invocation,
/// keeping the highest revision among those completed before.
fn revision_order(ops: &[Op]) -> Vec<Violation> {
    let mut by_invocation: Vec<(&Op, u64)> = ops
        .iter()
        .filter_map(|op| Some((op, op.ordering_revision()?)))
        .collect();
    let mut by_completion = by_invocation.clone();
    by_invocation.sort_by_key(|&(op, _)| op.invoked);
    by_completion.sort_by_key(|&(op, _)| op.completed);

    let mut completed = by_completion.into_iter().peekable();
    let mut highest: Option<(&Op, u64)> = None;
    let mut violations = Vec::new();
    for (later, revision) in by_invocation {
        while let Some((earlier, earlier_revision)) =
            completed.next_if(|(op, _)| op.completed < later.invoked)
        {
            if highest.is_none_or(|(_, highest)| earlier_revision > highest) {
                highest = Some((earlier, earlier_revision));
            }
        }
        let Some((earlier, earlier_revision)) = highest else {
            continue;
        };
        let must_exceed = later.is_acknowledged_write();
        if revision < earlier_revision || (must_exceed && revision == earlier_revision) {
            let relation = if must_exceed { "above" } else { "at least" };
            let message = format!(
                "{later} was invoked at {:?}, after {earlier} completed at revision \
                 {earlier_revision}, so its revision must be {relation} that, but is {revision}",
                later.invoked,
            );
            violations.push(violation(
                "revision-order",
                Some(&later.key),
                message,
                &[earlier, later],
            ));
        }
    }
    violations
}

/// `unique-write-revision`.
fn unique_write_revision(writes: &AcknowledgedWrites<'_>) -> Vec<Violation> {
    writes
        .by_revision
        .chunk_by(|(a, _), (b, _)| a == b)
        .filter(|sharing| sharing.len() > 1)
        .map(|sharing| {
            let ops: Vec<&Op> = sharing.iter().map(|&(_, op)| op).collect();
            let listed: Vec<String> = ops.iter().map(ToString::to_string).collect();
            let message = format!(
                "{} acknowledged writes were given revision {}: {}",
                ops.len(),
                sharing[0].0,
                listed.join(", ")
            );
            violation("unique-write-revision", Some(&ops[0].key), message, &ops)
        })
        .collect()
}

/// `read-mod-revision`.
fn read_mod_revision(ops: &[Op], writes: &AcknowledgedWrites<'_>) -> Vec<Violation> {
    ops.iter()
        .flat_map(|read| mod_revision_problems(read, writes))
        .collect()
}

/// What is wrong with the mod revision `read` reported, if anything (a read
/// at an exact revision is left to [`exact_read`]).
fn mod_revision_problems(read: &Op, writes: &AcknowledgedWrites<'_>) -> Vec<Violation> {
    if matches!(read.kind, OpKind::ReadAt { .. }) {
        return Vec::new();
    }
    let (Some(Some(value)), Some(mod_revision)) = (read.read_value(), read.result.mod_revision)
    else {
        return Vec::new();
    };
    let after_the_read = read
        .result
        .revision
        .filter(|&revision| mod_revision > revision)
        .map(|revision| {
            let message = format!(
                "{read} reported mod revision {mod_revision}, after the revision {revision} it \
                 was served at"
            );
            violation("read-mod-revision", Some(&read.key), message, &[read])
        });
    let not_the_write = writes
        .of_value(&read.key, value)
        .filter(|&(written_at, _)| written_at != mod_revision)
        .map(|(written_at, write)| {
            let message = format!(
                "{read} reported mod revision {mod_revision}, but {write} wrote that value at \
                 revision {written_at}"
            );
            violation(
                "read-mod-revision",
                Some(&read.key),
                message,
                &[write, read],
            )
        });
    after_the_read.into_iter().chain(not_the_write).collect()
}

/// `exact-read`, in O(n log n): each answered read at an exact revision
/// against the acknowledged writes of its key up to that revision. Whether
/// a value it saw was written at all is `phantom-value`'s.
fn exact_read(ops: &[Op], writes: &AcknowledgedWrites<'_>) -> Vec<Violation> {
    let deletes = UnorderedDeletes::of(ops);
    ops.iter()
        .filter_map(|read| match read.kind {
            OpKind::ReadAt { revision } => Some((read, revision, read.read_value()?)),
            _ => None,
        })
        .flat_map(|(read, at, seen)| {
            let problems = match seen {
                Some(value) => present_problems(read, at, value, writes),
                None => absent_problem(read, at, writes, &deletes)
                    .into_iter()
                    .collect(),
            };
            served_revision_problem(read, at)
                .into_iter()
                .chain(problems)
                .map(move |(problem, mut implicated)| {
                    implicated.push(read);
                    let message = format!("{read} {problem}");
                    violation("exact-read", Some(&read.key), message, &implicated)
                })
        })
        .collect()
}

/// What is wrong with an exact read, and the writes that show it (the read
/// itself is added by [`exact_read`]).
type ExactReadProblem<'a> = (String, Vec<&'a Op>);

/// The revision the store said it answered `read` at, against the
/// revision `at` it asked for: a REST exact list is at `at`, an etcd
/// answer's header (etcd's is the current revision) not before it.
fn served_revision_problem(read: &Op, at: u64) -> Option<ExactReadProblem<'static>> {
    let served = read.result.revision?;
    let problem = match read.api {
        Api::Rest if served != at => "not the revision it asked for",
        Api::Etcd if served < at => "before the revision it asked for",
        _ => return None,
    };
    Some((
        format!("was answered at revision {served}, {problem}"),
        Vec::new(),
    ))
}

/// What is wrong with `read` at revision `at` having seen `value`: a mod
/// revision after `at` or other than its write's, a write after `at`, or
/// a later acknowledged write of the key not after `at` that it missed.
fn present_problems<'a>(
    read: &Op,
    at: u64,
    value: &str,
    writes: &AcknowledgedWrites<'a>,
) -> Vec<ExactReadProblem<'a>> {
    let mut problems = Vec::new();
    let reported = read.result.mod_revision;
    let written = writes.of_value(&read.key, value);
    if let Some(mod_revision) = reported.filter(|&m| m > at) {
        problems.push((
            format!("reported mod revision {mod_revision}, after the revision {at} it read at"),
            Vec::new(),
        ));
    }
    if let Some((written_at, write)) = written {
        if let Some(mod_revision) = reported.filter(|&m| m != written_at) {
            problems.push((
                format!(
                    "reported mod revision {mod_revision}, but {write} wrote that value at \
                     revision {written_at}"
                ),
                vec![write],
            ));
        }
        if written_at > at && reported != Some(written_at) {
            problems.push((
                format!(
                    "saw the value {write} wrote at revision {written_at}, after the revision \
                     {at} it read at"
                ),
                vec![write],
            ));
        }
    }
    // The revision of the write it saw: the acknowledged one, else as
    // reported.
    let seen_at = written.map(|(revision, _)| revision).or(reported);
    let missed = seen_at.and_then(|seen_at| {
        let &(missed_at, missed) = writes.on_key_in_revisions(&read.key, seen_at, at).last()?;
        let message = format!(
            "missed {missed}, acknowledged at revision {missed_at}: after the write it saw \
             (revision {seen_at}) and not after the revision {at} it read at"
        );
        Some((message, vec![missed]))
    });
    problems.extend(missed);
    problems
}

/// What is wrong with `read` at revision `at` having found its key absent:
/// the latest acknowledged write of the key at or before `at` set a value,
/// and no deletion with an unknown revision can lie between them.
fn absent_problem<'a>(
    read: &Op,
    at: u64,
    writes: &AcknowledgedWrites<'a>,
    deletes: &UnorderedDeletes<'_>,
) -> Option<ExactReadProblem<'a>> {
    let &(written_at, write) = writes.on_key_in_revisions(&read.key, 0, at).last()?;
    let sets_a_value = matches!(write.written_value(), Some(Some(_)));
    if !sets_a_value || deletes.may_lie_between(&read.key, write, read) {
        return None;
    }
    let message = format!(
        "found the key absent, but {write} set it at revision {written_at}, its latest \
         acknowledged write not after the revision {at} it read at, and no deletion can lie \
         between"
    );
    Some((message, vec![write]))
}

/// `phantom-value`: every value observed, by reads, watch events and the
/// final state, against the writes of that value.
fn phantom_value(history: &History) -> Vec<Violation> {
    let mut writers: HashMap<&str, Vec<&Op>> = HashMap::new();
    for op in &history.ops {
        if let Some(Some(value)) = op.written_value() {
            writers.entry(value).or_default().push(op);
        }
    }
    let read = history.ops.iter().filter_map(|op| {
        let value = op.read_value()??;
        Some((op.key.as_str(), value, op.to_string(), Some(op)))
    });
    let watched = history
        .watches
        .iter()
        .flat_map(|log| &log.events)
        .filter_map(|event| {
            let seen_by = format!(
                "watcher {}'s event at revision {}",
                event.watcher, event.revision
            );
            Some((event.key.as_str(), event.value.as_deref()?, seen_by, None))
        });
    let left = history.final_state.iter().filter_map(|(key, state)| {
        let (value, _) = state.as_ref()?;
        Some((
            key.as_str(),
            value.as_str(),
            "the final state".to_owned(),
            None,
        ))
    });
    read.chain(watched)
        .chain(left)
        .filter_map(|(key, value, seen_by, reader)| {
            let writers = writers.get(value).map(Vec::as_slice).unwrap_or_default();
            let cause = phantom_cause(key, writers)?;
            let message = format!("{seen_by} carries {value:?} on key {key:?}, {cause}");
            let ops: Vec<&Op> = reader.into_iter().chain(writers.iter().copied()).collect();
            Some(violation("phantom-value", Some(key), message, &ops))
        })
        .collect()
}

/// Why a value seen on `key` should not exist, given the writes of that
/// value; `None` if one of them may have put it there.
fn phantom_cause(key: &str, writers: &[&Op]) -> Option<String> {
    let on_key: Vec<&&Op> = writers.iter().filter(|op| op.key == key).collect();
    if on_key.iter().any(|op| op.may_have_taken_effect()) {
        return None;
    }
    Some(match (on_key.first(), writers.first()) {
        (Some(op), _) => format!("which only {op} wrote, and it did not take effect"),
        (None, Some(op)) => format!("which was only written to key {:?} by {op}", op.key),
        (None, None) => "which no operation wrote".to_owned(),
    })
}

/// `watch-order`.
fn watch_order(log: &WatchLog) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut previous: Option<&WatchEvent> = None;
    for event in &log.events {
        let problem = match previous {
            _ if event.revision <= log.start_revision => Some(format!(
                "is not after the revision {} it started from",
                log.start_revision
            )),
            Some(previous) if event.revision == previous.revision => {
                Some("was delivered twice".to_owned())
            }
            Some(previous) if event.revision < previous.revision => Some(format!(
                "came after the event at revision {}",
                previous.revision
            )),
            _ => None,
        };
        if let Some(problem) = problem {
            let message = format!(
                "watcher {}'s event on key {:?} at revision {} (from node {}) {problem}",
                log.watcher, event.key, event.revision, event.node
            );
            violations.push(violation("watch-order", Some(&event.key), message, &[]));
        }
        previous = Some(event);
    }
    violations
}

/// `watch-complete`.
fn watch_complete(log: &WatchLog, writes: &AcknowledgedWrites<'_>) -> Vec<Violation> {
    let mut deliveries: BTreeMap<(u64, &str, Option<&str>), usize> = BTreeMap::new();
    for event in &log.events {
        *deliveries
            .entry((event.revision, event.key.as_str(), event.value.as_deref()))
            .or_default() += 1;
    }
    writes
        .in_revisions(log.start_revision, log.covered_until)
        .iter()
        .filter(|(_, write)| write.key.starts_with(&log.prefix))
        .filter_map(|&(revision, write)| {
            let value = write.written_value()?;
            let delivered = deliveries
                .get(&(revision, write.key.as_str(), value))
                .copied()
                .unwrap_or_default();
            let how = match delivered {
                1 => return None,
                0 => "missed".to_owned(),
                times => format!("received {times} times"),
            };
            let message = format!(
                "watcher {} (prefix {:?}, revisions {}..={}, {} reconnects) {how} {write} at \
                 revision {revision}",
                log.watcher,
                log.prefix,
                log.start_revision + 1,
                log.covered_until,
                log.reconnects
            );
            Some(violation(
                "watch-complete",
                Some(&write.key),
                message,
                &[write],
            ))
        })
        .collect()
}

/// `watch-value`.
fn watch_value(log: &WatchLog, writes: &AcknowledgedWrites<'_>) -> Vec<Violation> {
    log.events
        .iter()
        .filter_map(|event| {
            let write = writes.at_revision(event.revision)?;
            let agrees =
                write.key == event.key && write.written_value() == Some(event.value.as_deref());
            if agrees {
                return None;
            }
            let message = format!(
                "watcher {}'s event at revision {} carries {} on key {:?}, but {write} created \
                 that revision",
                event.watcher,
                event.revision,
                DisplayValue(event.value.as_deref()),
                event.key
            );
            Some(violation(
                "watch-value",
                Some(&event.key),
                message,
                &[write],
            ))
        })
        .collect()
}

/// `acknowledged-present`: the final state of each key read at the end must
/// not predate its latest acknowledged write, and if it is that write's
/// revision, it must hold that write's value. A key found absent must have
/// been deleted after its latest acknowledged write (with a revision): by
/// a deletion without an answer, or an acknowledged one whose revision is
/// unknown and that may have come after it.
fn acknowledged_present(history: &History, writes: &AcknowledgedWrites<'_>) -> Vec<Violation> {
    history
        .final_state
        .iter()
        .filter_map(|(key, state)| {
            let (revision, write) = writes.latest_on(key)?;
            let problem = final_state_problem(history, key, state.as_ref(), revision, write)?;
            let message = format!("{write}, acknowledged at revision {revision}, {problem}");
            Some(violation(
                "acknowledged-present",
                Some(key),
                message,
                &[write],
            ))
        })
        .collect()
}

/// What is wrong with the final `state` of `key`, whose latest acknowledged
/// write is `write` at `revision`.
fn final_state_problem(
    history: &History,
    key: &str,
    state: Option<&(String, u64)>,
    revision: u64,
    write: &Op,
) -> Option<String> {
    let written = write.written_value()?;
    match state {
        Some((_, mod_revision)) if *mod_revision < revision => Some(format!(
            "is lost: the final state is from the earlier revision {mod_revision}"
        )),
        Some((value, mod_revision)) if *mod_revision == revision && written != Some(value) => Some(
            format!("is lost: the final state at that revision holds {value:?}"),
        ),
        None if written.is_some() && !may_have_been_deleted(history, key, write) => Some(
            "is lost: the key is absent at the end and no deletion could have followed".to_owned(),
        ),
        _ => None,
    }
}

/// Whether a deletion of `key` could have taken effect after `write`: one
/// without an answer (at any time), or an acknowledged one whose revision
/// the store did not report (a REST delete answers the object as it was)
/// and that had not completed before `write` was invoked.
fn may_have_been_deleted(history: &History, key: &str, write: &Op) -> bool {
    history.ops.iter().any(|op| {
        op.key == key
            && is_unordered_delete(op)
            && (op.outcome == Outcome::Unknown || op.completed >= write.invoked)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::chaos::history::fixtures::{cas, put, read, read_at, stale_read};

    fn checks(violations: &[Violation]) -> Vec<&str> {
        violations.iter().map(|v| v.check.as_str()).collect()
    }

    /// Asserts that `violation`'s message says `words`.
    #[track_caller]
    fn assert_says(violation: &Violation, words: &str) {
        assert!(violation.message.contains(words), "{}", violation.message);
    }

    fn history_of(ops: Vec<Op>) -> History {
        History {
            ops,
            ..History::default()
        }
    }

    fn event(key: &str, revision: u64, value: Option<&str>) -> WatchEvent {
        WatchEvent {
            watcher: 7,
            node: 1,
            key: key.to_owned(),
            revision,
            value: value.map(str::to_owned),
            received: Duration::ZERO,
        }
    }

    fn watch(prefix: &str, (start, covered): (u64, u64), events: Vec<WatchEvent>) -> WatchLog {
        WatchLog {
            watcher: 7,
            prefix: prefix.to_owned(),
            start_revision: start,
            covered_until: covered,
            events,
            reconnects: 1,
        }
    }

    /// Writes of a, b, c to "pods/x" at revisions 1..=3, then a delete at 4.
    fn four_writes() -> Vec<Op> {
        vec![
            put(1, "pods/x", (0, 1), "a").at_revision(1),
            put(2, "pods/x", (2, 3), "b").at_revision(2),
            cas(3, "pods/x", (4, 5), (Some("b"), Some("c")), true).at_revision(3),
            cas(4, "pods/x", (6, 7), (Some("c"), None), true).at_revision(4),
        ]
    }

    #[test]
    fn a_consistent_history_passes_every_check() {
        let mut ops = four_writes();
        ops.push(read(5, "pods/x", (8, 9), None).at_revision(4));
        ops.push(put(6, "pods/y", (8, 9), "d").at_revision(5));
        ops.push(
            read(7, "pods/y", (10, 11), Some("d"))
                .at_revision(5)
                .with_mod_revision(5),
        );
        let events = vec![
            event("pods/x", 2, Some("b")),
            event("pods/x", 3, Some("c")),
            event("pods/x", 4, None),
            event("pods/y", 5, Some("d")),
        ];
        let mut history = history_of(ops);
        history.watches.push(watch("pods/", (1, 5), events));
        history.final_state.insert("pods/x".into(), None);
        history
            .final_state
            .insert("pods/y".into(), Some(("d".into(), 5)));
        assert_eq!(check(&history), []);
    }

    #[test]
    fn revision_order_holds_across_keys() {
        let ok = [
            put(1, "a", (0, 1), "a1").at_revision(5),
            read(2, "b", (2, 3), None).at_revision(5),
            put(3, "b", (4, 5), "b1").at_revision(6),
            read(4, "a", (0, 10), Some("a1")).at_revision(5),
        ];
        assert_eq!(revision_order(&ok), []);

        let read_in_the_past = [
            put(1, "a", (0, 1), "a1").at_revision(5),
            read(2, "b", (2, 3), None).at_revision(4),
        ];
        let found = revision_order(&read_in_the_past);
        assert_eq!(checks(&found), ["revision-order"]);
        assert_eq!(found[0].ops, [1, 2]);

        let write_at_same_revision = [
            read(1, "a", (0, 1), None).at_revision(5),
            put(2, "b", (2, 3), "b1").at_revision(5),
        ];
        assert_eq!(
            checks(&revision_order(&write_at_same_revision)),
            ["revision-order"]
        );
    }

    #[test]
    fn revision_order_ignores_stale_tolerant_reads_and_unknown_revisions() {
        let ops = [
            put(1, "a", (0, 1), "a1").at_revision(5),
            stale_read(2, "a", (2, 3), None).at_revision(3),
            cas(3, "a", (2, 3), (None, Some("x")), false),
            put(4, "a", (2, 3), "a2").unknown(),
        ];
        assert_eq!(revision_order(&ops), []);
    }

    #[test]
    fn write_revisions_are_unique() {
        let ops = four_writes();
        assert_eq!(unique_write_revision(&AcknowledgedWrites::of(&ops)), []);

        let mut ops = four_writes();
        ops.push(put(5, "other", (8, 9), "e").at_revision(2));
        ops.push(cas(6, "other", (8, 9), (None, Some("f")), false).at_revision(2));
        let found = unique_write_revision(&AcknowledgedWrites::of(&ops));
        assert_eq!(checks(&found), ["unique-write-revision"]);
        assert_eq!(found[0].ops, [2, 5]);
    }

    #[test]
    fn reads_report_the_mod_revision_of_the_write_they_saw() {
        let mut ops = four_writes();
        ops.push(
            read(5, "pods/x", (2, 3), Some("b"))
                .at_revision(2)
                .with_mod_revision(2),
        );
        ops.push(
            stale_read(6, "pods/x", (2, 3), Some("a"))
                .at_revision(2)
                .with_mod_revision(1),
        );
        assert_eq!(read_mod_revision(&ops, &AcknowledgedWrites::of(&ops)), []);

        let mut ops = four_writes();
        ops.push(
            read(5, "pods/x", (2, 3), Some("b"))
                .at_revision(3)
                .with_mod_revision(3),
        );
        ops.push(
            read(6, "pods/x", (2, 3), Some("c"))
                .at_revision(2)
                .with_mod_revision(3),
        );
        let found = read_mod_revision(&ops, &AcknowledgedWrites::of(&ops));
        assert_eq!(checks(&found), ["read-mod-revision", "read-mod-revision"]);
        assert_eq!(found[0].ops, [2, 5]);
        assert_eq!(found[1].ops, [6]);
    }

    /// `four_writes` and an exact read of "pods/x" at `at` (answered at
    /// `at`), invoked after every write completed, that saw `value` with
    /// mod revision `mod_revision`.
    fn exact_read_of_four_writes(
        at: u64,
        value: Option<&str>,
        mod_revision: Option<u64>,
    ) -> Vec<Op> {
        let mut read = read_at(5, "pods/x", (8, 9), at, value).at_revision(at);
        read.result.mod_revision = mod_revision;
        let mut ops = four_writes();
        ops.push(read);
        ops
    }

    #[test]
    fn exact_reads_see_the_key_as_it_was_at_their_revision() {
        for (at, seen) in [
            (1, Some(("a", 1))),
            (2, Some(("b", 2))),
            (3, Some(("c", 3))),
            (4, None),
            (9, None),
        ] {
            let ops = exact_read_of_four_writes(at, seen.map(|s| s.0), seen.map(|s| s.1));
            let writes = AcknowledgedWrites::of(&ops);
            assert_eq!(exact_read(&ops, &writes), [], "at {at}: {seen:?}");
            // Nor does any other check mind that it saw the past.
            assert_eq!(check(&history_of(ops)), [], "at {at}: {seen:?}");
        }
        // Before the first write.
        let mut ops = four_writes();
        ops.push(read_at(5, "pods/x", (8, 9), 1, None).at_revision(1));
        ops[0].result.revision = Some(2);
        ops[1].result.revision = Some(3);
        ops[2].result.revision = Some(4);
        ops[3].result.revision = Some(5);
        assert_eq!(exact_read(&ops, &AcknowledgedWrites::of(&ops)), []);
    }

    #[test]
    fn an_exact_read_that_misses_an_acknowledged_write_is_caught() {
        // At 3 the key held "c" (written at 3), not "b" (at 2).
        let ops = exact_read_of_four_writes(3, Some("b"), Some(2));
        let found = exact_read(&ops, &AcknowledgedWrites::of(&ops));
        assert_eq!(checks(&found), ["exact-read"]);
        assert_eq!(found[0].ops, [3, 5]);
        assert_says(&found[0], "missed op 3");
        // Also when the store reports no mod revision: the value's write
        // says when it was written.
        let ops = exact_read_of_four_writes(3, Some("a"), None);
        let found = exact_read(&ops, &AcknowledgedWrites::of(&ops));
        assert_eq!(checks(&found), ["exact-read"]);
        assert_eq!(found[0].ops, [3, 5], "names the latest write missed");
    }

    #[test]
    fn an_exact_read_that_sees_a_later_write_is_caught() {
        // "c" was written at 3, after the revision 2 read at.
        let ops = exact_read_of_four_writes(2, Some("c"), Some(3));
        let found = exact_read(&ops, &AcknowledgedWrites::of(&ops));
        assert_eq!(checks(&found), ["exact-read"]);
        assert_eq!(found[0].ops, [5]);
        assert_says(&found[0], "mod revision 3, after");
        // Reported with the wrong mod revision, it is the write's
        // revision that gives it away.
        let ops = exact_read_of_four_writes(2, Some("c"), Some(2));
        let found = exact_read(&ops, &AcknowledgedWrites::of(&ops));
        assert_eq!(checks(&found), ["exact-read"; 2]);
        assert_eq!(found[0].ops, [3, 5]);
        assert_says(&found[0], "but op 3 (cas");
        assert_says(&found[1], "after the revision 2");
        // And a REST exact list must be answered at the revision asked for.
        let mut ops = exact_read_of_four_writes(2, Some("b"), Some(2));
        ops[4].api = Api::Rest;
        ops[4].result.revision = Some(4);
        let found = exact_read(&ops, &AcknowledgedWrites::of(&ops));
        assert_eq!(checks(&found), ["exact-read"]);
        assert_says(&found[0], "answered at revision 4");
    }

    #[test]
    fn an_exact_read_that_finds_a_present_key_absent_is_caught() {
        let ops = exact_read_of_four_writes(3, None, None);
        let found = exact_read(&ops, &AcknowledgedWrites::of(&ops));
        assert_eq!(checks(&found), ["exact-read"]);
        assert_eq!(found[0].ops, [3, 5]);
        assert_says(&found[0], "found the key absent");

        // A deletion without a known revision that may come between
        // explains it: one without an answer, or acknowledged without a
        // revision, that had not completed before the write was invoked.
        let with_delete = |delete: Op| {
            let mut ops = exact_read_of_four_writes(3, None, None);
            ops.push(delete);
            checks(&exact_read(&ops, &AcknowledgedWrites::of(&ops))).len()
        };
        let delete = |span| cas(6, "pods/x", span, (Some("c"), None), true);
        assert_eq!(with_delete(delete((0, 1)).unknown()), 0, "may apply late");
        assert_eq!(with_delete(delete((5, 6))), 0, "unordered acknowledged");
        assert_eq!(with_delete(delete((1, 3))), 1, "completed before the write");
        assert_eq!(
            with_delete(delete((10, 11)).unknown()),
            1,
            "invoked after the read"
        );
        assert_eq!(
            with_delete(delete((5, 6)).at_revision(9)),
            1,
            "known to be later"
        );
        assert_eq!(with_delete(delete((5, 6)).failed()), 1, "refused");
    }

    #[test]
    fn a_refused_exact_read_is_no_violation() {
        // Answered, the read would miss the write at 3; refused (`410
        // Gone`, compacted) it says nothing.
        let answered = exact_read_of_four_writes(3, Some("b"), Some(2));
        assert_eq!(
            checks(&check(&history_of(answered.clone()))),
            ["exact-read"]
        );
        let mut refused = answered;
        refused[4] = refused[4].clone().failed();
        refused[4].error = Some("410 Gone: too old resource version".into());
        assert_eq!(check(&history_of(refused)), []);
    }

    #[test]
    fn exact_reads_are_not_placed_in_real_time() {
        // Invoked after the write of revision 4 completed, read at 2.
        let ops = exact_read_of_four_writes(2, Some("b"), Some(2));
        assert_eq!(revision_order(&ops), []);
        let mut now = ops;
        now[4].kind = OpKind::Read { linearizable: true };
        assert_eq!(checks(&revision_order(&now)), ["revision-order"]);
    }

    #[test]
    fn every_value_seen_was_written_to_its_key() {
        let mut history = history_of(vec![
            put(1, "a", (0, 1), "a1"),
            put(2, "a", (0, 1), "a2").unknown(),
            stale_read(3, "a", (2, 3), Some("a2")),
        ]);
        history
            .watches
            .push(watch("", (0, 1), vec![event("a", 1, Some("a1"))]));
        history
            .final_state
            .insert("a".into(), Some(("a2".into(), 2)));
        assert_eq!(phantom_value(&history), []);

        let mut history = history_of(vec![
            put(1, "a", (0, 1), "a1").failed(),
            cas(2, "a", (0, 1), (None, Some("a2")), false),
            put(3, "b", (0, 1), "b1"),
            read(4, "a", (2, 3), Some("a1")),
            stale_read(5, "a", (2, 3), Some("b1")),
        ]);
        history
            .watches
            .push(watch("", (0, 1), vec![event("a", 1, Some("a2"))]));
        history
            .final_state
            .insert("a".into(), Some(("zz".into(), 2)));
        let found = phantom_value(&history);
        assert_eq!(checks(&found), ["phantom-value"; 4]);
        assert_eq!(found[0].ops, [4, 1]);
        assert_eq!(found[1].ops, [5, 3]);
        assert_says(&found[1], "only written to key \"b\"");
        assert_says(&found[3], "no operation wrote");
    }

    #[test]
    fn watch_events_come_in_revision_order_after_the_start() {
        let events = vec![event("a", 3, Some("x")), event("a", 5, Some("y"))];
        assert_eq!(watch_order(&watch("", (2, 5), events)), []);

        let events = vec![
            event("a", 2, Some("w")),
            event("a", 3, Some("x")),
            event("a", 3, Some("x")),
            event("a", 1, Some("v")),
        ];
        let found = watch_order(&watch("", (2, 5), events));
        assert_eq!(checks(&found), ["watch-order"; 3]);
        assert_says(&found[1], "delivered twice");
    }

    #[test]
    fn a_watcher_receives_every_covered_write_once() {
        let ops = four_writes();
        let writes = AcknowledgedWrites::of(&ops);
        let events = vec![event("pods/x", 2, Some("b")), event("pods/x", 3, Some("c"))];
        assert_eq!(
            watch_complete(&watch("pods/", (1, 3), events.clone()), &writes),
            []
        );
        assert_eq!(
            watch_complete(&watch("other/", (0, 4), Vec::new()), &writes),
            []
        );

        let found = watch_complete(&watch("pods/", (1, 4), events.clone()), &writes);
        assert_eq!(checks(&found), ["watch-complete"]);
        assert_eq!(found[0].ops, [4]);
        assert_says(&found[0], "missed");

        let mut twice = events;
        twice.push(event("pods/x", 3, Some("c")));
        let found = watch_complete(&watch("pods/", (1, 3), twice), &writes);
        assert_says(&found[0], "received 2 times");
    }

    #[test]
    fn watch_events_carry_the_write_of_their_revision() {
        let ops = four_writes();
        let writes = AcknowledgedWrites::of(&ops);
        let events = vec![
            event("pods/x", 4, None),
            event("pods/x", 9, Some("unknown")),
        ];
        assert_eq!(watch_value(&watch("", (0, 9), events), &writes), []);

        let events = vec![event("pods/x", 2, Some("c")), event("pods/y", 3, Some("c"))];
        let found = watch_value(&watch("", (0, 4), events), &writes);
        assert_eq!(checks(&found), ["watch-value"; 2]);
        assert_eq!(found[0].ops, [2]);
    }

    #[test]
    fn acknowledged_writes_survive_to_the_final_state() {
        let final_state = |state: Option<(&str, u64)>, extra: Vec<Op>| {
            let mut ops = four_writes();
            ops.truncate(3);
            ops.extend(extra);
            let mut history = history_of(ops);
            history
                .final_state
                .insert("pods/x".into(), state.map(|(v, r)| (v.into(), r)));
            let writes = AcknowledgedWrites::of(&history.ops);
            acknowledged_present(&history, &writes)
        };
        let unknown_delete = || cas(9, "pods/x", (8, 9), (Some("c"), None), false).unknown();
        assert_eq!(final_state(Some(("c", 3)), vec![]), []);
        assert_eq!(final_state(Some(("d", 7)), vec![]), []);
        assert_eq!(final_state(None, vec![unknown_delete()]), []);

        for lost in [Some(("b", 2)), Some(("x", 3)), None] {
            let found = final_state(lost, vec![]);
            assert_eq!(checks(&found), ["acknowledged-present"], "{lost:?}");
            assert_eq!(found[0].ops, [3]);
        }
    }

    #[test]
    fn an_acknowledged_delete_without_a_revision_explains_an_absent_key() {
        let mut write = cas(1, "k", (0, 10), (None, Some("a")), true);
        write.result.revision = Some(5);
        let delete = cas(2, "k", (20, 30), (Some("a"), None), true);
        let mut history = history_of(vec![write.clone(), delete]);
        history.final_state.insert("k".into(), None);
        assert!(
            !checks(&check(&history)).contains(&"acknowledged-present"),
            "{:?}",
            check(&history)
        );
        // Without the delete the write is lost.
        let mut lost = history_of(vec![write]);
        lost.final_state.insert("k".into(), None);
        assert!(checks(&check(&lost)).contains(&"acknowledged-present"));
    }
}

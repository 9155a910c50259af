//! Decides whether a history is linearizable: whether every operation can be
//! given an instant inside the real-time interval it ran in, such that
//! executing the operations one at a time in that order, against a single
//! copy of the store, produces exactly the answers the clients got.
//!
//! # Model
//!
//! Each key is a register holding `Option<String>` (absent or a value), and
//! the keys are independent: a history is linearizable iff each key's
//! sub-history is (linearizability is *local*, Herlihy & Wing), so [`check`]
//! checks every key on its own. On one key:
//!
//! - an answered (`Ok`) operation takes effect once, inside `[invoked,
//!   completed]`, with the answer recorded: a read returns the register's
//!   value, a put sets it, a cas sets it iff the value equals `expect` and
//!   reports whether it did;
//! - a write without an answer (`Unknown`) takes effect at any instant after
//!   it was invoked (a proposal may linger in a Raft log long after the
//!   client gave up), or never, and its answer is unconstrained;
//! - `Failed` operations, unanswered reads, stale-tolerant reads and reads
//!   at an exact past revision are left out: they constrain nothing here
//!   (an exact read's answer belongs at the revision it asked for, not at
//!   the time it ran; the [`contract`](crate::chaos::contract) checks it
//!   against the acknowledged writes' revisions, and that a failed write's
//!   value never shows up);
//! - the final state (read once the faults healed) is one more read, after
//!   every other operation completed.
//!
//! # Search
//!
//! Wing & Gong's search with Lowe's "just-in-time linearization" and
//! Porcupine's memoization. The answered operations' calls and responses
//! are merged into one timeline. The candidates to take effect next are the
//! calls before the first pending response; the search tries them in
//! order, and when it reaches a response whose operation has not taken
//! effect, nothing it tried works and it backtracks. A state seen before
//! (same operations taken effect, same register value) is skipped, so the
//! cost grows with the concurrency and not exponentially with the length.
//!
//! Unanswered writes have no response, so they are not in the timeline:
//! they are tried after its candidates, and only where they can matter.
//! Each rule below skips only linearizations that can be rearranged into
//! one the search does try:
//!
//! - An unanswered write is tried only where it lets a candidate go next
//!   that could not before (a read of its value, a cas expecting it, a
//!   failed cas expecting the value it hides). Followed by anything else, it
//!   could as well take effect later or, once overwritten, never.
//! - An unanswered cas is tried only where its compare succeeds: one whose
//!   compare fails changes nothing.
//! - Values no operation compares the register with (no read returned them,
//!   no cas expected them) only ever differ from the value they replace, so
//!   they are all one value, `UNOBSERVED`; the unanswered puts of such
//!   values are interchangeable, and only the earliest-invoked unused one is
//!   tried.
//! - A state is subsumed by an earlier one with the same answered
//!   operations and value that used only some of its unanswered writes: the
//!   earlier one can do all it can.
//!
//! The answered operations that took effect are remembered as a 128-bit
//! Zobrist fingerprint, updated in O(1) per step. Two different sets
//! collide with probability about 2^-128 per pair; a collision could only
//! prune a branch, i.e. report a violation that is not one, never pass a
//! history that should fail.
//!
//! The search is exhaustive but bounded: after `step_budget` new states it
//! gives up with [`KeyVerdict::Undecided`], which [`check`] reports as a
//! violation, so that a history too hard to decide is never passed
//! silently.
//!
//! When a key is not linearizable the verdict names the operation the
//! deepest attempt got stuck on: its response arrived and no order of the
//! operations concurrent with it let it take effect in time.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use crate::chaos::history::{DisplayValue, History, Op, OpKind, Outcome, Violation};

/// How many new states [`check`] lets the search of one key reach before
/// giving up (memory grows with it, by roughly 100 bytes a state).
pub const DEFAULT_STEP_BUDGET: u64 = 5_000_000;

/// How many operations a violation lists at most.
const MAX_REPORTED_OPS: usize = 10;

/// Whether one key's history is linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyVerdict {
    Linearizable,
    NotLinearizable(Counterexample),
    /// The search reached as many new states as its budget allowed.
    Undecided {
        steps: u64,
    },
}

/// Why a key's history is not linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counterexample {
    pub message: String,
    /// The operation that could not be placed first, then the writes of the
    /// value it needed and the operations concurrent with it.
    pub ops: Vec<u64>,
}

/// Checks every key of `history` with [`DEFAULT_STEP_BUDGET`]; see
/// [`check_with_budget`].
pub fn check(history: &History) -> Vec<Violation> {
    check_with_budget(history, DEFAULT_STEP_BUDGET)
}

/// Checks every key of `history` on its own, starting absent and ending
/// with the value its final state records (if it records one). A key that is
/// not linearizable gives a `linearizability` violation; one whose search
/// ran out of `step_budget` gives a `linearizability-undecided` violation.
pub fn check_with_budget(history: &History, step_budget: u64) -> Vec<Violation> {
    ops_by_key(history)
        .into_iter()
        .filter_map(|(key, ops)| {
            let final_read = history
                .final_state
                .get(key)
                .map(|state| state.as_ref().map(|(value, _)| value.clone()));
            check_key_with(&ops, None, final_read, step_budget).into_violation(key)
        })
        .collect()
}

/// Checks one key's operations, starting from `initial`, with
/// [`DEFAULT_STEP_BUDGET`] and no final read.
pub fn check_key(ops: &[&Op], initial: Option<String>) -> KeyVerdict {
    check_key_with(ops, initial, None, DEFAULT_STEP_BUDGET)
}

/// Checks one key's operations (all on the same key), starting from
/// `initial`. `final_read`, if given, is the value of a linearizable read
/// made after every operation completed.
pub fn check_key_with(
    ops: &[&Op],
    initial: Option<String>,
    final_read: Option<Option<String>>,
    step_budget: u64,
) -> KeyVerdict {
    let problem = Problem::new(
        ops,
        initial.as_deref(),
        final_read.as_ref().map(Option::as_deref),
    );
    Search::new(&problem, step_budget).run()
}

/// Every key of the history, operations or final state, with its operations.
fn ops_by_key(history: &History) -> BTreeMap<&str, Vec<&Op>> {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = history
        .final_state
        .keys()
        .map(|key| (key.as_str(), Vec::new()))
        .collect();
    for op in &history.ops {
        by_key.entry(&op.key).or_default().push(op);
    }
    by_key
}

impl KeyVerdict {
    fn into_violation(self, key: &str) -> Option<Violation> {
        let (check, message, ops) = match self {
            KeyVerdict::Linearizable => return None,
            KeyVerdict::NotLinearizable(Counterexample { message, ops }) => {
                ("linearizability", message, ops)
            }
            KeyVerdict::Undecided { steps } => (
                "linearizability-undecided",
                format!(
                    "gave up searching for a linearization of key {key:?} after reaching \
                     {steps} states; the history is neither passed nor failed (raise the step \
                     budget or shorten the run)"
                ),
                Vec::new(),
            ),
        };
        Some(Violation {
            check: check.to_owned(),
            key: Some(key.to_owned()),
            message,
            ops,
        })
    }
}

/// A register value, interned: the search compares and hashes numbers.
type Value = u32;

/// Stands for every value that no operation compares with (see the module
/// documentation).
const UNOBSERVED: Value = Value::MAX;

/// The distinct values of one key's history.
struct Values<'a> {
    /// The values some operation compares the register with.
    observed: HashSet<Option<&'a str>>,
    ids: HashMap<Option<&'a str>, Value>,
    names: Vec<Option<&'a str>>,
}

impl<'a> Values<'a> {
    fn new(observed: HashSet<Option<&'a str>>) -> Self {
        Values {
            observed,
            ids: HashMap::new(),
            names: Vec::new(),
        }
    }

    /// A value written: as itself if some operation compares the register
    /// with it, else as [`UNOBSERVED`].
    fn written(&mut self, value: Option<&'a str>) -> Value {
        if self.observed.contains(&value) {
            self.intern(value)
        } else {
            UNOBSERVED
        }
    }

    fn intern(&mut self, value: Option<&'a str>) -> Value {
        let names = &mut self.names;
        *self.ids.entry(value).or_insert_with(|| {
            names.push(value);
            (names.len() - 1) as Value
        })
    }

    fn describe(&self, value: Value) -> String {
        match value {
            UNOBSERVED => "a value no operation read".to_owned(),
            id => DisplayValue(self.names[id as usize]).to_string(),
        }
    }
}

/// What an operation does to the register, and what it requires of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Read(Value),
    Put(Value),
    Cas {
        expect: Value,
        value: Value,
        succeeded: bool,
    },
}

impl Step {
    /// The step `op` contributes to the search, if any.
    fn of<'a>(op: &'a Op, values: &mut Values<'a>) -> Option<Step> {
        match (&op.kind, op.outcome) {
            (_, Outcome::Failed) => None,
            (OpKind::Read { linearizable: true }, Outcome::Ok) => {
                Some(Step::Read(values.intern(op.result.value.as_deref())))
            }
            (OpKind::Read { .. } | OpKind::ReadAt { .. }, _) => None,
            (OpKind::Put { value }, _) => Some(Step::Put(values.written(Some(value)))),
            (OpKind::Cas { expect, value }, outcome) => Some(Step::Cas {
                expect: values.intern(expect.as_deref()),
                value: values.written(value.as_deref()),
                // An unanswered cas matters only where its compare succeeds.
                succeeded: outcome == Outcome::Unknown || op.result.succeeded,
            }),
        }
    }

    /// The register's value after this step from `state`, or `None` if the
    /// step cannot happen there (a read or cas answer that contradicts it).
    fn apply(self, state: Value) -> Option<Value> {
        match self {
            Step::Read(value) => (state == value).then_some(state),
            Step::Put(value) => Some(value),
            Step::Cas {
                expect,
                value,
                succeeded: true,
            } => (state == expect).then_some(value),
            Step::Cas {
                expect,
                succeeded: false,
                ..
            } => (state != expect).then_some(state),
        }
    }

    /// The value the register must hold for this step to happen.
    fn requires(self) -> Option<Value> {
        match self {
            Step::Read(value) => Some(value),
            Step::Cas {
                expect,
                succeeded: true,
                ..
            } => Some(expect),
            Step::Put(_) | Step::Cas { .. } => None,
        }
    }

    fn writes(self) -> Option<Value> {
        match self {
            Step::Put(value)
            | Step::Cas {
                value,
                succeeded: true,
                ..
            } => Some(value),
            Step::Read(_) | Step::Cas { .. } => None,
        }
    }
}

/// An operation as the search sees it.
struct Call<'a> {
    /// `None` for the final read.
    op: Option<&'a Op>,
    step: Step,
    invoked: Duration,
    /// When it must have taken effect by; `None` for a write without an
    /// answer, which may take effect at any time after `invoked`, or never.
    deadline: Option<Duration>,
}

impl Call<'_> {
    fn overlaps(&self, other: &Call<'_>) -> bool {
        let starts_before_other_ends = other.deadline.is_none_or(|end| self.invoked <= end);
        let ends_after_other_starts = self.deadline.is_none_or(|end| other.invoked <= end);
        starts_before_other_ends && ends_after_other_starts
    }

    fn describe(&self, values: &Values<'_>) -> String {
        match self.op {
            Some(op) => op.to_string(),
            None => format!(
                "the final read (returned {})",
                values.describe(self.step.requires().unwrap_or(UNOBSERVED))
            ),
        }
    }
}

/// One key's history, reduced to what the search needs.
struct Problem<'a> {
    calls: Vec<Call<'a>>,
    values: Values<'a>,
    initial: Value,
    /// The answered calls and their responses.
    timeline: Timeline,
    /// The unanswered calls, by invocation; a call's position here is its
    /// slot in a [`SlotSet`].
    unanswered: Vec<usize>,
    /// For the slot of each unanswered put of an unobserved value, the slot
    /// of the previous such put, which must take effect first.
    pooled_after: Vec<Option<usize>>,
}

impl<'a> Problem<'a> {
    fn new(ops: &[&'a Op], initial: Option<&'a str>, final_read: Option<Option<&'a str>>) -> Self {
        let mut values = Values::new(observed_values(ops, final_read));
        let initial = values.intern(initial);
        let mut calls: Vec<Call<'a>> = ops
            .iter()
            .filter_map(|op| {
                let step = Step::of(op, &mut values)?;
                let answered = op.outcome == Outcome::Ok;
                Some(Call {
                    op: Some(op),
                    step,
                    invoked: op.invoked,
                    deadline: answered.then(|| op.completed.max(op.invoked)),
                })
            })
            .collect();
        if let Some(value) = final_read {
            calls.push(final_read_call(ops, values.intern(value)));
        }
        let mut unanswered: Vec<usize> = (0..calls.len())
            .filter(|&call| calls[call].deadline.is_none())
            .collect();
        unanswered.sort_by_key(|&call| calls[call].invoked);
        let pooled_after = pool_order(&calls, &unanswered);
        Problem {
            timeline: Timeline::new(&calls),
            calls,
            values,
            initial,
            unanswered,
            pooled_after,
        }
    }
}

/// The final read, invoked and answered after every operation completed.
fn final_read_call<'a>(ops: &[&'a Op], value: Value) -> Call<'a> {
    let after_everything = ops
        .iter()
        .map(|op| op.completed.max(op.invoked))
        .max()
        .unwrap_or_default()
        + Duration::from_nanos(1);
    Call {
        op: None,
        step: Step::Read(value),
        invoked: after_everything,
        deadline: Some(after_everything),
    }
}

/// Chains the interchangeable unanswered puts (of unobserved values) in
/// invocation order: see [`Problem::pooled_after`].
fn pool_order(calls: &[Call<'_>], unanswered: &[usize]) -> Vec<Option<usize>> {
    let mut previous = None;
    unanswered
        .iter()
        .enumerate()
        .map(|(slot, &call)| {
            if calls[call].step != Step::Put(UNOBSERVED) {
                return None;
            }
            previous.replace(slot)
        })
        .collect()
}

/// The values some operation compares the register with: returned by a
/// read, expected by a cas, or found by the final read. Reads at an exact
/// revision are no step of the search, so what they saw is left out.
fn observed_values<'a>(
    ops: &[&'a Op],
    final_read: Option<Option<&'a str>>,
) -> HashSet<Option<&'a str>> {
    let read = ops
        .iter()
        .filter(|op| !matches!(op.kind, OpKind::ReadAt { .. }))
        .filter_map(|op| op.read_value());
    let expected = ops.iter().filter_map(|op| match &op.kind {
        OpKind::Cas { expect, .. } => Some(expect.as_deref()),
        _ => None,
    });
    read.chain(expected).chain(final_read).collect()
}

/// The node before the first event of a [`Timeline`], and after its last.
const HEAD: usize = 0;

#[derive(Debug, Clone, Copy)]
enum Event {
    Call { response: usize },
    Response { at: Duration },
}

/// The calls and responses of the answered operations in time order, as a
/// circular doubly linked list through `HEAD`, so that a call that took
/// effect can be lifted out with its response and put back in O(1) when the
/// search backtracks.
#[derive(Clone)]
struct Timeline {
    /// The event of node `n` is `events[n - 1]`.
    events: Vec<Event>,
    /// For the node of each call, the call.
    calls: Vec<usize>,
    next: Vec<usize>,
    prev: Vec<usize>,
}

impl Timeline {
    /// At equal times calls come first, so that operations that merely touch
    /// count as concurrent (the permissive reading).
    fn new(calls: &[Call<'_>]) -> Self {
        const CALL: u8 = 0;
        const RESPONSE: u8 = 1;
        let mut stamps = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            if let Some(deadline) = call.deadline {
                stamps.push((call.invoked, CALL, index));
                stamps.push((deadline, RESPONSE, index));
            }
        }
        stamps.sort_unstable();
        let mut response_node = vec![HEAD; calls.len()];
        for (position, &(_, kind, call)) in stamps.iter().enumerate() {
            if kind == RESPONSE {
                response_node[call] = position + 1;
            }
        }
        let events = stamps
            .iter()
            .map(|&(at, kind, call)| match kind {
                CALL => Event::Call {
                    response: response_node[call],
                },
                _ => Event::Response { at },
            })
            .collect();
        let nodes = stamps.len() + 1;
        Timeline {
            events,
            calls: std::iter::once(HEAD)
                .chain(stamps.iter().map(|&(_, _, call)| call))
                .collect(),
            next: (0..nodes).map(|node| (node + 1) % nodes).collect(),
            prev: (0..nodes).map(|node| (node + nodes - 1) % nodes).collect(),
        }
    }

    fn first(&self) -> usize {
        self.next[HEAD]
    }

    fn next(&self, node: usize) -> usize {
        self.next[node]
    }

    fn event(&self, node: usize) -> Event {
        self.events[node - 1]
    }

    fn call(&self, node: usize) -> usize {
        self.calls[node]
    }

    /// The calls before the first response: those that may take effect
    /// next.
    fn candidates(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(self.first()), |&node| Some(self.next(node)))
            .take_while(|&node| node != HEAD && matches!(self.event(node), Event::Call { .. }))
            .map(|node| self.call(node))
    }

    /// Removes the call at `node`, and its response.
    fn lift(&mut self, node: usize) {
        self.unlink(node);
        if let Event::Call { response } = self.event(node) {
            self.unlink(response);
        }
    }

    /// Undoes the latest [`lift`](Self::lift), which must have been of `node`.
    fn unlift(&mut self, node: usize) {
        if let Event::Call { response } = self.event(node) {
            self.relink(response);
        }
        self.relink(node);
    }

    fn unlink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = next;
        self.prev[next] = prev;
    }

    fn relink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = node;
        self.prev[next] = node;
    }
}

/// A set of unanswered calls, by slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SlotSet(Vec<u64>);

impl SlotSet {
    fn contains(&self, slot: usize) -> bool {
        self.0
            .get(slot / 64)
            .is_some_and(|word| word & (1 << (slot % 64)) != 0)
    }

    fn toggle(&mut self, slot: usize) {
        if self.0.len() <= slot / 64 {
            self.0.resize(slot / 64 + 1, 0);
        }
        self.0[slot / 64] ^= 1 << (slot % 64);
    }

    fn is_subset_of(&self, other: &SlotSet) -> bool {
        self.0
            .iter()
            .enumerate()
            .all(|(index, &word)| word & !other.0.get(index).copied().unwrap_or_default() == 0)
    }
}

/// A random 128-bit key per call, so that the fingerprint of a set of calls
/// is the XOR of their keys (Zobrist hashing).
fn fingerprint_of(call: usize) -> u128 {
    let index = call as u64;
    (u128::from(splitmix64(2 * index)) << 64) | u128::from(splitmix64(2 * index + 1))
}

/// SplitMix64 (Steele, Lea & Flood): the `n`th output of the generator.
fn splitmix64(n: u64) -> u64 {
    let mut z = n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A response the search met before its call could take effect.
#[derive(Debug, Clone, Copy)]
struct Stuck {
    call: usize,
    at: Duration,
    /// How many calls had taken effect.
    depth: usize,
    state: Value,
}

/// Where the search is among the candidates to take effect next.
#[derive(Debug, Clone, Copy)]
enum Cursor {
    /// Walking the timeline, at this node.
    Node(usize),
    /// Past the timeline's candidates, which end at the response `stuck`;
    /// trying the unanswered calls invoked before it, from this slot.
    Unanswered { slot: usize, stuck: Stuck },
}

/// A call that took effect, and how to undo it.
struct Frame {
    cursor: Cursor,
    state_before: Value,
}

struct Search<'p, 'a> {
    problem: &'p Problem<'a>,
    timeline: Timeline,
    state: Value,
    /// Fingerprint of the answered calls that took effect.
    answered: u128,
    /// The unanswered calls that took effect.
    unanswered: SlotSet,
    stack: Vec<Frame>,
    /// For each (answered calls, value) reached, the sets of unanswered
    /// calls it was reached with, none a subset of another.
    seen: HashMap<(u128, Value), Vec<SlotSet>>,
    steps: u64,
    step_budget: u64,
    deepest: Option<Stuck>,
}

impl<'p, 'a> Search<'p, 'a> {
    fn new(problem: &'p Problem<'a>, step_budget: u64) -> Self {
        Search {
            problem,
            timeline: problem.timeline.clone(),
            state: problem.initial,
            answered: 0,
            unanswered: SlotSet::default(),
            stack: Vec::new(),
            seen: HashMap::new(),
            steps: 0,
            step_budget,
            deepest: None,
        }
    }

    fn run(mut self) -> KeyVerdict {
        let mut cursor = Cursor::Node(self.timeline.first());
        loop {
            cursor = match cursor {
                Cursor::Node(HEAD) => return KeyVerdict::Linearizable,
                _ if self.steps == self.step_budget => {
                    return KeyVerdict::Undecided { steps: self.steps }
                }
                Cursor::Node(node) => self.visit(node),
                Cursor::Unanswered { slot, stuck } => match self.try_unanswered(slot, stuck) {
                    Some(next) => next,
                    None => {
                        let deepest = self.deepest.unwrap_or(stuck);
                        return KeyVerdict::NotLinearizable(self.explain(deepest));
                    }
                },
            };
        }
    }

    /// At a call, tries to let it take effect now; at a response, the
    /// timeline has no candidate left.
    fn visit(&mut self, node: usize) -> Cursor {
        match self.timeline.event(node) {
            Event::Call { .. } => {
                if self.take_effect(Cursor::Node(node)) {
                    Cursor::Node(self.timeline.first())
                } else {
                    Cursor::Node(self.timeline.next(node))
                }
            }
            Event::Response { at } => Cursor::Unanswered {
                slot: 0,
                stuck: self.note_stuck(self.timeline.call(node), at),
            },
        }
    }

    /// Tries the unanswered call in `slot`, if invoked in time; past the
    /// last one, backtracks (`None` when there is nothing to backtrack to).
    fn try_unanswered(&mut self, slot: usize, stuck: Stuck) -> Option<Cursor> {
        let Some(&call) = self.problem.unanswered.get(slot) else {
            return self.backtrack();
        };
        if self.problem.calls[call].invoked > stuck.at {
            return self.backtrack();
        }
        let cursor = Cursor::Unanswered { slot, stuck };
        if self.may_take_effect(slot)
            && self.enables_a_candidate(call, stuck.at)
            && self.take_effect(cursor)
        {
            return Some(Cursor::Node(self.timeline.first()));
        }
        Some(Cursor::Unanswered {
            slot: slot + 1,
            stuck,
        })
    }

    /// Whether the unanswered call in `slot` is free to take effect: not
    /// already taken, and if pooled, the previous of its pool taken.
    fn may_take_effect(&self, slot: usize) -> bool {
        let previous_taken = self.problem.pooled_after[slot]
            .is_none_or(|previous| self.unanswered.contains(previous));
        !self.unanswered.contains(slot) && previous_taken
    }

    /// Whether the unanswered `call`, taking effect now, would let a
    /// candidate to go next take effect that cannot now: a read of its
    /// value, a cas expecting it, or a failed cas expecting the value it
    /// hides. Only then is it worth trying here: in any linearization, an
    /// unanswered write followed by anything else can be moved after it or,
    /// if overwritten, dropped.
    fn enables_a_candidate(&self, call: usize, deadline: Duration) -> bool {
        let before = self.state;
        let Some(after) = self.problem.calls[call].step.apply(before) else {
            return false;
        };
        let calls = &self.problem.calls;
        let enabled = |&candidate: &usize| {
            let step = calls[candidate].step;
            step.apply(after).is_some() && step.apply(before).is_none()
        };
        let mut unanswered = self
            .problem
            .unanswered
            .iter()
            .enumerate()
            .take_while(|&(_, &other)| calls[other].invoked <= deadline)
            .filter(|&(slot, &other)| other != call && !self.unanswered.contains(slot))
            .map(|(_, other)| other);
        self.timeline
            .candidates()
            .any(|answered| enabled(&answered))
            || unanswered.any(enabled)
    }

    /// Lets the call at `cursor` take effect now, if its answer allows it
    /// and the resulting state is new.
    fn take_effect(&mut self, cursor: Cursor) -> bool {
        let call = self.call_at(cursor);
        let Some(state) = self.problem.calls[call].step.apply(self.state) else {
            return false;
        };
        let state_before = std::mem::replace(&mut self.state, state);
        self.toggle(cursor);
        if !self.is_new_state() {
            self.toggle(cursor);
            self.state = state_before;
            return false;
        }
        if let Cursor::Node(node) = cursor {
            self.timeline.lift(node);
        }
        self.steps += 1;
        self.stack.push(Frame {
            cursor,
            state_before,
        });
        true
    }

    fn call_at(&self, cursor: Cursor) -> usize {
        match cursor {
            Cursor::Node(node) => self.timeline.call(node),
            Cursor::Unanswered { slot, .. } => self.problem.unanswered[slot],
        }
    }

    /// Adds or removes the call at `cursor` from those that took effect.
    fn toggle(&mut self, cursor: Cursor) {
        match cursor {
            Cursor::Node(node) => self.answered ^= fingerprint_of(self.timeline.call(node)),
            Cursor::Unanswered { slot, .. } => self.unanswered.toggle(slot),
        }
    }

    /// Records the current state as seen, unless a state seen before
    /// subsumes it: the same answered calls and value, reached with a
    /// subset of these unanswered calls (which can do all this one can).
    fn is_new_state(&mut self) -> bool {
        let seen = self.seen.entry((self.answered, self.state)).or_default();
        if seen
            .iter()
            .any(|earlier| earlier.is_subset_of(&self.unanswered))
        {
            return false;
        }
        seen.retain(|earlier| !self.unanswered.is_subset_of(earlier));
        seen.push(self.unanswered.clone());
        true
    }

    /// Undoes the latest call that took effect and resumes with the next
    /// candidate; `None` when none is left.
    fn backtrack(&mut self) -> Option<Cursor> {
        let frame = self.stack.pop()?;
        self.state = frame.state_before;
        self.toggle(frame.cursor);
        Some(match frame.cursor {
            Cursor::Node(node) => {
                self.timeline.unlift(node);
                Cursor::Node(self.timeline.next(node))
            }
            Cursor::Unanswered { slot, stuck } => Cursor::Unanswered {
                slot: slot + 1,
                stuck,
            },
        })
    }

    /// Records where the search got stuck, and returns it.
    fn note_stuck(&mut self, call: usize, at: Duration) -> Stuck {
        let here = Stuck {
            call,
            at,
            depth: self.stack.len(),
            state: self.state,
        };
        if self
            .deepest
            .is_none_or(|deepest| deepest.depth < here.depth)
        {
            self.deepest = Some(here);
        }
        here
    }

    fn explain(&self, stuck: Stuck) -> Counterexample {
        let problem = self.problem;
        let message = format!(
            "no linearization: {} cannot take effect within its interval. After the longest \
             linearizable prefix ({} operations) the key held {}, and no order of the \
             operations concurrent with it leads to a value it accepts",
            problem.calls[stuck.call].describe(&problem.values),
            stuck.depth,
            problem.values.describe(stuck.state),
        );
        Counterexample {
            message,
            ops: self.implicated_ops(stuck.call),
        }
    }

    /// The stuck operation, the writes of the value it needed, then the
    /// operations concurrent with it.
    fn implicated_ops(&self, stuck: usize) -> Vec<u64> {
        let calls = &self.problem.calls;
        let needed = calls[stuck].step.requires();
        let writers = calls
            .iter()
            .filter(|call| needed.is_some() && call.step.writes() == needed);
        let concurrent = calls.iter().filter(|call| call.overlaps(&calls[stuck]));
        let mut ops = Vec::new();
        for op in std::iter::once(&calls[stuck])
            .chain(writers)
            .chain(concurrent)
            .filter_map(|call| call.op)
        {
            if ops.len() == MAX_REPORTED_OPS {
                break;
            }
            if !ops.contains(&op.id) {
                ops.push(op.id);
            }
        }
        ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::fixtures::{cas, put, read, read_at, stale_read};
    use crate::chaos::synthetic::{make_last_read_stale, random_history, Rng, KEY as K};

    fn verdict(ops: &[Op]) -> KeyVerdict {
        check_key(&ops.iter().collect::<Vec<_>>(), None)
    }

    fn assert_linearizable(ops: &[Op]) {
        assert_eq!(verdict(ops), KeyVerdict::Linearizable);
    }

    /// Asserts the history is not linearizable, and returns why.
    fn counterexample(ops: &[Op]) -> Counterexample {
        match verdict(ops) {
            KeyVerdict::NotLinearizable(counterexample) => counterexample,
            other => panic!("expected a violation, got {other:?}"),
        }
    }

    #[test]
    fn sequential_history_is_linearizable() {
        assert_linearizable(&[
            read(1, K, (0, 1), None),
            put(2, K, (2, 3), "a"),
            read(3, K, (4, 5), Some("a")),
            cas(4, K, (6, 7), (Some("a"), Some("b")), true),
            read(5, K, (8, 9), Some("b")),
            cas(6, K, (10, 11), (Some("b"), None), true),
            read(7, K, (12, 13), None),
        ]);
    }

    #[test]
    fn stale_read_after_a_completed_write_is_caught() {
        let found = counterexample(&[
            put(1, K, (0, 1), "a"),
            put(2, K, (2, 3), "b"),
            read(3, K, (4, 5), Some("a")),
        ]);
        assert_eq!(found.ops.first(), Some(&3));
        assert!(
            found.ops.contains(&1),
            "names the write of \"a\": {found:?}"
        );
        assert!(found.message.contains("op 3"), "{}", found.message);
    }

    #[test]
    fn stale_tolerant_reads_are_not_checked() {
        assert_linearizable(&[
            put(1, K, (0, 1), "a"),
            put(2, K, (2, 3), "b"),
            stale_read(3, K, (4, 5), Some("a")),
        ]);
    }

    #[test]
    fn reads_at_an_exact_revision_are_not_checked() {
        // Read now, "a" after "b" completed is stale; read at the revision
        // of "a" (or of nothing yet), it is what the key held then.
        let stale_if_current = [
            put(1, K, (0, 1), "a").at_revision(1),
            put(2, K, (2, 3), "b").at_revision(2),
            read_at(3, K, (4, 5), 1, Some("a"))
                .at_revision(1)
                .with_mod_revision(1),
            read_at(4, K, (6, 7), 1, None).failed(),
        ];
        assert_linearizable(&stale_if_current);
        let history = History {
            ops: stale_if_current.to_vec(),
            ..History::default()
        };
        assert_eq!(check(&history), []);
        // The same answer read now is caught.
        let mut current = stale_if_current;
        current[2].kind = OpKind::Read { linearizable: true };
        counterexample(&current);
    }

    #[test]
    fn a_read_concurrent_with_a_write_may_see_either_value() {
        for seen in [None, Some("a")] {
            assert_linearizable(&[put(1, K, (0, 10), "a"), read(2, K, (2, 5), seen)]);
        }
    }

    #[test]
    fn cas_succeeds_exactly_when_the_value_matches() {
        assert_linearizable(&[
            put(1, K, (0, 1), "a"),
            cas(2, K, (2, 3), (Some("x"), Some("b")), false),
            cas(3, K, (4, 5), (Some("a"), Some("b")), true),
            cas(4, K, (6, 7), (None, Some("c")), false),
            read(5, K, (8, 9), Some("b")),
        ]);
        counterexample(&[
            put(1, K, (0, 1), "a"),
            cas(2, K, (2, 3), (Some("a"), Some("b")), false),
        ]);
        counterexample(&[
            put(1, K, (0, 1), "a"),
            cas(2, K, (2, 3), (Some("x"), Some("b")), true),
        ]);
        counterexample(&[
            put(1, K, (0, 1), "a"),
            cas(2, K, (2, 3), (Some("x"), Some("b")), false),
            read(3, K, (4, 5), Some("b")),
        ]);
    }

    #[test]
    fn an_unknown_write_may_take_effect_late() {
        assert_linearizable(&[
            put(1, K, (0, 1), "a").unknown(),
            read(2, K, (2, 3), None),
            read(3, K, (50, 51), Some("a")),
        ]);
    }

    #[test]
    fn an_unknown_write_may_never_take_effect() {
        assert_linearizable(&[
            put(1, K, (0, 1), "a").unknown(),
            cas(2, K, (2, 3), (None, Some("b")), true).unknown(),
            read(3, K, (4, 5), None),
            read(4, K, (6, 7), None),
        ]);
    }

    #[test]
    fn an_unknown_write_cannot_take_effect_before_it_was_invoked() {
        counterexample(&[
            read(1, K, (0, 1), Some("a")),
            put(2, K, (2, 3), "a").unknown(),
        ]);
    }

    #[test]
    fn an_unobserved_unknown_put_can_explain_a_failed_cas() {
        assert_linearizable(&[
            put(1, K, (0, 1), "a"),
            put(2, K, (2, 3), "x").unknown(),
            cas(3, K, (4, 5), (Some("a"), Some("b")), false),
        ]);
    }

    #[test]
    fn unknown_writes_can_enable_one_another() {
        assert_linearizable(&[
            put(1, K, (0, 1), "a"),
            put(2, K, (2, 3), "x").unknown(),
            cas(3, K, (4, 5), (Some("x"), Some("y")), true).unknown(),
            read(4, K, (6, 7), Some("a")),
            read(5, K, (8, 9), Some("y")),
        ]);
    }

    #[test]
    fn a_value_never_written_is_caught() {
        let found = counterexample(&[put(1, K, (0, 1), "a"), read(2, K, (2, 3), Some("z"))]);
        assert_eq!(found.ops.first(), Some(&2));
    }

    #[test]
    fn the_value_of_a_failed_write_is_caught() {
        counterexample(&[
            put(1, K, (0, 1), "a").failed(),
            read(2, K, (2, 3), Some("a")),
        ]);
    }

    #[test]
    fn a_read_going_back_in_time_is_caught() {
        let found = counterexample(&[
            put(1, K, (0, 1), "a"),
            put(2, K, (2, 20), "b"),
            read(3, K, (3, 4), Some("b")),
            read(4, K, (5, 6), Some("a")),
        ]);
        assert!(found.ops.contains(&4), "{found:?}");
    }

    #[test]
    fn the_final_state_is_a_last_read() {
        let ops = [put(1, K, (0, 1), "a"), put(2, K, (0, 1), "b")];
        let ops: Vec<&Op> = ops.iter().collect();
        for final_value in ["a", "b"] {
            let verdict = check_key_with(&ops, None, Some(Some(final_value.into())), 1000);
            assert_eq!(verdict, KeyVerdict::Linearizable);
        }
        let verdict = check_key_with(&ops, None, Some(None), 1000);
        assert!(
            matches!(verdict, KeyVerdict::NotLinearizable(_)),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_search_out_of_budget_is_undecided_and_reported() {
        let ops = vec![put(1, K, (0, 1), "a"), read(2, K, (2, 3), Some("a"))];
        let refs: Vec<&Op> = ops.iter().collect();
        assert_eq!(
            check_key_with(&refs, None, None, 2),
            KeyVerdict::Linearizable
        );
        assert_eq!(
            check_key_with(&refs, None, None, 1),
            KeyVerdict::Undecided { steps: 1 }
        );

        let violations = check_with_budget(
            &History {
                ops,
                ..History::default()
            },
            1,
        );
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].check, "linearizability-undecided");
    }

    #[test]
    fn check_takes_each_key_on_its_own_and_the_final_state_into_account() {
        let mut history = History {
            ops: vec![
                put(1, "a", (0, 1), "a1"),
                put(2, "b", (2, 3), "b1"),
                read(3, "a", (4, 5), Some("a1")),
                read(4, "b", (4, 5), Some("b1")),
            ],
            ..History::default()
        };
        history
            .final_state
            .insert("a".into(), Some(("a1".into(), 1)));
        history
            .final_state
            .insert("b".into(), Some(("b1".into(), 2)));
        history.final_state.insert("c".into(), None);
        assert_eq!(check(&history), []);

        history.final_state.insert("b".into(), None);
        history
            .final_state
            .insert("c".into(), Some(("a1".into(), 1)));
        let violations = check(&history);
        let keys: Vec<_> = violations.iter().map(|v| v.key.as_deref()).collect();
        assert_eq!(keys, [Some("b"), Some("c")]);
        assert!(violations.iter().all(|v| v.check == "linearizability"));
        assert!(
            violations[0].message.contains("final read"),
            "{}",
            violations[0].message
        );
    }

    /// Within the default step budget, not inconclusive: how long that
    /// takes is measured by `benches/benches/linearizability.rs`.
    #[test]
    fn a_long_random_linearizable_history_passes() {
        assert_linearizable(&random_history(0x5EED, 2000, 0));
    }

    #[test]
    fn a_history_with_twenty_unknown_writes_passes() {
        let ops = random_history(0xFA17, 2000, 20);
        assert_eq!(
            ops.iter()
                .filter(|op| op.outcome == Outcome::Unknown)
                .count(),
            20
        );
        assert_linearizable(&ops);
    }

    #[test]
    fn a_long_random_history_with_one_stale_read_fails() {
        let mut ops = random_history(0xBAD, 2000, 20);
        let (stale_read, overwritten_put) =
            make_last_read_stale(&mut ops).expect("the history has reads and puts");
        let found = counterexample(&ops);
        assert_eq!(found.ops.first(), Some(&stale_read), "{found:?}");
        assert!(found.ops.contains(&overwritten_put), "{found:?}");
    }

    /// Whether the answered ops of `ops` (all on one key) can be ordered,
    /// with any of the unanswered writes, into a legal sequential history:
    /// tries every order, the definition of linearizability.
    fn brute_force_linearizable(ops: &[&Op], state: Option<&str>) -> bool {
        let answered = |op: &&&Op| op.outcome == Outcome::Ok;
        if !ops.iter().any(|op| answered(&op)) {
            return true;
        }
        (0..ops.len()).any(|next| {
            let op = ops[next];
            let must_wait = ops
                .iter()
                .filter(answered)
                .any(|other| other.completed < op.invoked);
            let after = match (&op.kind, op.outcome) {
                _ if must_wait => None,
                (OpKind::Read { .. }, _) => (op.result.value.as_deref() == state).then_some(state),
                (OpKind::ReadAt { .. }, _) => Some(state),
                (OpKind::Put { value }, _) => Some(Some(value.as_str())),
                (OpKind::Cas { expect, value }, outcome) => {
                    let matches = expect.as_deref() == state;
                    let after = if matches { value.as_deref() } else { state };
                    (outcome == Outcome::Unknown || matches == op.result.succeeded).then_some(after)
                }
            };
            let mut rest = ops.to_vec();
            rest.remove(next);
            after.is_some_and(|after| brute_force_linearizable(&rest, after))
        })
    }

    /// A small random history: values from a tiny alphabet, results often
    /// wrong, some writes unanswered, so that about half are linearizable.
    fn small_random_history(rng: &mut Rng) -> Vec<Op> {
        let len = 2 + rng.below(5);
        let some_value = |rng: &mut Rng| match rng.below(len + 1) {
            0 => None,
            n => Some(format!("v{}", n - 1)),
        };
        (0..len)
            .map(|id| {
                let start = rng.below(6);
                let span = (start, start + rng.below(4));
                let op = match rng.below(3) {
                    0 => read(id, K, span, some_value(rng).as_deref()),
                    1 => put(id, K, span, &format!("v{id}")),
                    _ => {
                        let expect = some_value(rng);
                        let value = (rng.below(4) > 0).then(|| format!("v{id}"));
                        let succeeded = rng.below(2) == 0;
                        cas(
                            id,
                            K,
                            span,
                            (expect.as_deref(), value.as_deref()),
                            succeeded,
                        )
                    }
                };
                match rng.below(4) {
                    0 if op.is_write() => op.unknown(),
                    _ => op,
                }
            })
            .collect()
    }

    #[test]
    fn agrees_with_trying_every_order_on_small_histories() {
        let mut rng = Rng(0x0DD5);
        let mut verdicts = [0; 2];
        for _ in 0..5000 {
            let ops = small_random_history(&mut rng);
            let refs: Vec<&Op> = ops.iter().collect();
            let expected = brute_force_linearizable(&refs, None);
            let verdict = check_key(&refs, None);
            assert_eq!(
                verdict == KeyVerdict::Linearizable,
                expected,
                "{ops:#?}\n{verdict:?}"
            );
            verdicts[usize::from(expected)] += 1;
        }
        assert!(verdicts.iter().all(|&count| count > 1000), "{verdicts:?}");
    }
}

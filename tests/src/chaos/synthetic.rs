//! Synthetic single-key histories for the linearizability checker's unit
//! tests and its benchmark (`benches/benches/linearizability.rs`): long
//! histories that are linearizable by construction, and a way to break one.

use crate::chaos::history::fixtures::{cas, put, read};
use crate::chaos::history::{Op, OpKind, Outcome};

/// The key every synthetic operation is on.
pub const KEY: &str = "k";

/// xorshift64*: a deterministic source of synthetic histories.
pub struct Rng(pub u64);

impl Rng {
    /// The next number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound
    }
}

/// A history of `len` operations on [`KEY`] really executed one at a time
/// on a register, each at an instant 10 ms after the previous one, and
/// recorded with a random interval of up to ±50 ms around that instant
/// (up to ~10 operations concurrent). The first `unknown_writes` writes
/// lose their answer; every other one of those never takes effect.
pub fn random_history(seed: u64, len: u64, unknown_writes: usize) -> Vec<Op> {
    let mut rng = Rng(seed);
    let mut state: Option<String> = None;
    let mut past_states = vec![None];
    let mut lost_writes = 0;
    (0..len)
        .map(|id| {
            let at = 100 + id * 10;
            let span = (at - rng.below(50), at + rng.below(50));
            let fresh = format!("v{id}");
            let write = match rng.below(10) {
                0..=3 => return read(id, KEY, span, state.as_deref()),
                4..=6 => put(id, KEY, span, &fresh),
                _ => {
                    let expect = match rng.below(2) {
                        0 => state.clone(),
                        _ => past_states[rng.below(past_states.len() as u64) as usize].clone(),
                    };
                    let value = (rng.below(5) > 0).then_some(fresh.as_str());
                    let succeeded = expect == state;
                    cas(id, KEY, span, (expect.as_deref(), value), succeeded)
                }
            };
            let lost = lost_writes < unknown_writes;
            let takes_effect = !lost || lost_writes % 2 == 0;
            if takes_effect && write.result.succeeded {
                state = write.written_value().flatten().map(str::to_owned);
                past_states.push(state.clone());
            }
            if lost {
                lost_writes += 1;
                return write.unknown();
            }
            write
        })
        .collect()
}

/// Makes the last linearizable read of `ops` return the value of the first
/// acknowledged put, long overwritten; returns the ids of both, or `None`
/// if the history has no such read or put.
pub fn make_last_read_stale(ops: &mut [Op]) -> Option<(u64, u64)> {
    let last_read = ops.iter().rposition(Op::is_linearizable_read)?;
    let first_put = ops
        .iter()
        .position(|op| matches!(op.kind, OpKind::Put { .. }) && op.outcome == Outcome::Ok)?;
    ops[last_read].result.value = ops[first_put].written_value().flatten().map(str::to_owned);
    Some((ops[last_read].id, ops[first_put].id))
}

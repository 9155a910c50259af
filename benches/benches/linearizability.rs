//! How long the fault-schedule checker's linearizability search takes on
//! long single-key histories: 5,000 operations with 0, 10 and 30 unknown
//! outcomes, linearizable (the search must explore to the end) and with
//! one stale read (it must find the counterexample).
//!
//! `cargo bench -p kubestore-benches --bench linearizability`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use kubestore_tests::chaos::history::Op;
use kubestore_tests::chaos::linearizability::{check_key, KeyVerdict};
use kubestore_tests::chaos::synthetic::{make_last_read_stale, random_history};

const OPS: u64 = 5_000;

fn verdict(ops: &[Op]) -> KeyVerdict {
    check_key(&ops.iter().collect::<Vec<_>>(), None)
}

fn long_histories(c: &mut Criterion) {
    let mut group = c.benchmark_group("linearizability");
    group.sample_size(10);
    for unknown in [0, 10, 30] {
        let ops = random_history(0xC0FFEE, OPS, unknown);
        assert_eq!(verdict(&ops), KeyVerdict::Linearizable);
        group.bench_function(format!("{OPS} ops, {unknown} unknown: passes"), |b| {
            b.iter(|| verdict(black_box(&ops)))
        });
        let mut stale = ops.clone();
        make_last_read_stale(&mut stale).expect("the history has reads and puts");
        assert!(matches!(verdict(&stale), KeyVerdict::NotLinearizable(_)));
        group.bench_function(
            format!("{OPS} ops, {unknown} unknown: one stale read"),
            |b| b.iter(|| verdict(black_box(&stale))),
        );
    }
    group.finish();
}

criterion_group!(benches, long_histories);
criterion_main!(benches);

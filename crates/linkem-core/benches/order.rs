//! Cost per packet of the release-order queue, beside std's `BinaryHeap` on the
//! same keys in the same run. Hold model: n items wait; each step pops the
//! earliest and pushes one released a pseudo-random 0..1 ms later, so n stays
//! constant (a delay line with n packets in flight, or a merge of n pipes).
//! Run: `cargo bench -p linkem-core --bench order`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use linkem_core::order::ReleaseQueue;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const STEPS: u64 = 100_000;

/// xorshift64: cheap and identical for both queues.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn filled_release_queue(n: u64) -> ReleaseQueue<u64> {
    let mut q = ReleaseQueue::with_capacity(n as usize + 1);
    let mut x = 88172645463325252u64;
    for i in 0..n {
        q.push(next(&mut x) % 1_000_000, i);
    }
    q
}

fn filled_binary_heap(n: u64) -> BinaryHeap<Reverse<(u64, u64, u64)>> {
    let mut h = BinaryHeap::with_capacity(n as usize + 1);
    let mut x = 88172645463325252u64;
    for i in 0..n {
        h.push(Reverse((next(&mut x) % 1_000_000, i, i)));
    }
    h
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("order-hold");
    group.throughput(Throughput::Elements(STEPS));
    for n in [1_000u64, 100_000] {
        group.bench_with_input(BenchmarkId::new("ReleaseQueue", n), &n, |b, &n| {
            b.iter_batched_ref(
                || filled_release_queue(n),
                |q| {
                    let mut x = 0x2545F4914F6CDD1Du64;
                    for _ in 0..STEPS {
                        let (release, item) = q.pop().expect("n items wait");
                        q.push(release + next(&mut x) % 1_000_000, black_box(item));
                    }
                },
                criterion::BatchSize::LargeInput,
            )
        });
        group.bench_with_input(BenchmarkId::new("std-BinaryHeap", n), &n, |b, &n| {
            b.iter_batched_ref(
                || (filled_binary_heap(n), n),
                |(h, seq)| {
                    let mut x = 0x2545F4914F6CDD1Du64;
                    for _ in 0..STEPS {
                        let Reverse((release, _, item)) = h.pop().expect("n items wait");
                        *seq += 1;
                        h.push(Reverse((
                            release + next(&mut x) % 1_000_000,
                            *seq,
                            black_box(item),
                        )));
                    }
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

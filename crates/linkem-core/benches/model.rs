//! Cost of the model per packet, beside a baseline loop that only walks the
//! packets. Run: `cargo bench -p linkem-core --bench model`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use linkem_core::{Link, LinkSpec, PacketMeta};

const PACKETS: usize = 100_000;

/// Mixed sizes (64, 576, 1500 bytes) offered at about 90 % of 1 Gbit/s, so the
/// queue fills and drains rather than staying empty.
fn trace() -> Vec<(u64, u32)> {
    let sizes = [64u32, 576, 1500, 1500, 64, 1500];
    let mut t = 0u64;
    (0..PACKETS)
        .map(|i| {
            let len = sizes[i % sizes.len()];
            t += (len as u64 * 8) * 10 / 9; // ns at 0.9 Gbit/s
            (t, len)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let packets = trace();
    let mut group = c.benchmark_group("model");
    group.throughput(Throughput::Elements(PACKETS as u64));
    group.bench_function("baseline-walk", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for &(t, len) in &packets {
                sum = sum.wrapping_add(black_box(t) ^ black_box(len) as u64);
            }
            black_box(sum)
        })
    });
    for (name, words) in [
        ("delay", "delay 10ms"),
        ("rate+queue+delay", "rate 1gbit queue 1000 delay 10ms"),
        (
            "rate+queue+delay+jitter+gemodel",
            "rate 1gbit queue 1000 delay 10ms 1ms loss gemodel 1% 10% 70% 0.1%",
        ),
    ] {
        let cfg = LinkSpec::parse(words).expect("bench words are valid").link;
        group.bench_with_input(BenchmarkId::new("link", name), &cfg, |b, cfg| {
            b.iter_batched_ref(
                || Link::new(cfg.clone(), 42, 0),
                |link| {
                    let mut last = 0u64;
                    for &(t, len) in &packets {
                        let v = link.on_arrival(black_box(t), PacketMeta { len_bytes: len });
                        last = last.wrapping_add(v.release_ns);
                    }
                    black_box(last)
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

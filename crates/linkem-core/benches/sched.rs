//! Enqueue + dequeue cost per packet of each scheduler with 1, 100 and
//! 10 000 backlogged queues (Dummynet Revisited §3.6.1): every iteration takes the
//! next packet and puts a new one in the queue it came from, so the number of
//! backlogged queues stays N. FIFO is the baseline in the same run.
//!
//! `FQ_CODEL_AT_LIMIT/N`: fq_codel with max(N, 1024) flows of which N are
//! backlogged and the total `limit` reached: every iteration sends one
//! packet, puts two back, and the second overflows the limit, so RFC 8290's
//! head drop from the fattest flow runs on every packet (bufferbloat's
//! steady state).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use linkem_core::aqm::AqmConfig;
use linkem_core::sched::{Pkt, QueueParams, Sched, SchedKind, SchedParams};
use std::sync::Arc;

fn setup(kind: SchedKind, n: u32) -> Sched {
    let mut p = SchedParams::new(kind);
    p.limit_packets = 1 << 20;
    let mut s = Sched::new(p);
    for i in 0..n {
        let aqm = if kind.is_fq() {
            s.params.flow_aqm
        } else {
            AqmConfig::DropTail
        };
        let q = QueueParams {
            weight: 1 + i % 7,
            pri: i % 8,
            limit_packets: None,
            aqm,
            ..Default::default()
        };
        s.add_class(Arc::new(q), i, i as u64);
    }
    let mut drops = Vec::new();
    for i in 0..n {
        for k in 0..2 {
            let pkt = Pkt {
                handle: i * 2 + k,
                len_bytes: 200 + (i % 13) * 100,
                enq_ns: 0,
                ect: false,
                ce: false,
            };
            s.enqueue(0, i, pkt, (0, 0), &mut || 0.5, &mut drops)
                .unwrap();
        }
    }
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sched_enqueue_dequeue");
    g.throughput(Throughput::Elements(1));
    for kind in [
        SchedKind::Fifo,
        SchedKind::Wf2q,
        SchedKind::Qfq,
        SchedKind::Rr,
        SchedKind::Prio,
        SchedKind::FqCodel,
        SchedKind::FqPie,
    ] {
        for n in [1u32, 100, 10_000] {
            let mut s = setup(kind, n);
            let mut drops = Vec::new();
            // Sojourn stays far below every AQM target: 10 ns per packet.
            let mut now = 0u64;
            g.bench_with_input(BenchmarkId::new(kind.name(), n), &n, |b, _| {
                b.iter(|| {
                    now += 10;
                    let (c, p, _) = s.dequeue(now, &mut drops).expect("backlogged");
                    let pkt = Pkt { enq_ns: now, ..p };
                    let _ = s.enqueue(now, c, black_box(pkt), (0, 0), &mut || 0.5, &mut drops);
                    drops.clear();
                })
            });
        }
    }
    for n in [1u32, 100, 10_000] {
        let mut s = setup_at_limit(n);
        let mut drops = Vec::new();
        let mut now = 0u64;
        g.bench_with_input(BenchmarkId::new("FQ_CODEL_AT_LIMIT", n), &n, |b, _| {
            b.iter(|| {
                now += 10;
                let (c, p, _) = s.dequeue(now, &mut drops).expect("backlogged");
                let pkt = Pkt { enq_ns: now, ..p };
                let _ = s.enqueue(now, c, pkt, (0, 0), &mut || 0.5, &mut drops);
                let _ = s.enqueue(now, c, black_box(pkt), (0, 0), &mut || 0.5, &mut drops);
                drops.clear();
            })
        });
    }
    g.finish();
}

fn setup_at_limit(n: u32) -> Sched {
    let mut p = SchedParams::new(SchedKind::FqCodel);
    p.limit_packets = 2 * n;
    let mut s = Sched::new(p);
    for i in 0..n.max(1024) {
        let q = QueueParams {
            limit_packets: None,
            aqm: s.params.flow_aqm,
            ..Default::default()
        };
        s.add_class(Arc::new(q), i, i as u64);
    }
    let mut drops = Vec::new();
    for i in 0..n {
        for k in 0..2 {
            let pkt = Pkt {
                handle: i * 2 + k,
                len_bytes: 200 + (i % 13) * 100,
                enq_ns: 0,
                ect: false,
                ce: false,
            };
            s.enqueue(0, i, pkt, (0, 0), &mut || 0.5, &mut drops)
                .unwrap();
        }
    }
    assert!(drops.is_empty());
    s
}

criterion_group!(benches, bench);
criterion_main!(benches);

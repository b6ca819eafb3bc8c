//! Cost of making wire frames: finishing an offloaded checksum (64, 1500 and
//! 9000-byte frames) and cutting a 64 KB TCP super-frame at MSS 1448, each
//! beside a baseline that copies the same bytes once (memcpy) in the same run.
//! Run: `cargo bench -p linkem-core --bench wire`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use linkem_core::wire::{
    complete_checksum, complete_partial_checksum, locate, CsumPartial, Gso, GsoKind, Offload,
    Segmenter,
};

/// Ethernet + IPv4 + TCP frame of `frame_bytes` (at least 54), with the 12-byte
/// timestamp option when it fits, its TCP checksum left for offload: the field
/// holds the pseudo-header sum.
fn tcp4_frame(frame_bytes: usize) -> (Vec<u8>, CsumPartial, u16) {
    let mut f = vec![0u8; frame_bytes];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (frame_bytes - 14) as u16;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[18..20].copy_from_slice(&0x4321u16.to_be_bytes());
    f[20] = 0x40; // DF
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    // IPv4 header checksum over the 20 header bytes.
    let mut s: u32 = f[14..34]
        .chunks(2)
        .map(|w| u32::from(w[0]) << 8 | u32::from(w[1]))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    f[24..26].copy_from_slice(&(!(s as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&5201u16.to_be_bytes());
    f[38..42].copy_from_slice(&123_456u32.to_be_bytes());
    f[42..46].copy_from_slice(&654_321u32.to_be_bytes());
    let payload_at = if frame_bytes >= 66 {
        f[46] = 0x80; // 32-byte header
        f[54..66].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        66
    } else {
        f[46] = 0x50;
        54
    };
    f[47] = 0x18; // PSH|ACK
    f[48..50].copy_from_slice(&502u16.to_be_bytes());
    for (i, b) in f[payload_at..].iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    let h = locate(&f).expect("the bench frame is well formed");
    let mut p = h.pseudo_sum(frame_bytes - 34);
    while p > 0xffff {
        p = (p & 0xffff) + (p >> 16);
    }
    let pseudo = p as u16;
    f[50..52].copy_from_slice(&pseudo.to_be_bytes());
    (
        f,
        CsumPartial {
            start: 34,
            offset: 16,
        },
        pseudo,
    )
}

fn checksum(c: &mut Criterion) {
    let mut group = c.benchmark_group("checksum");
    for frame_bytes in [64usize, 1500, 9000] {
        let (frame, csum, pseudo) = tcp4_frame(frame_bytes);
        group.throughput(Throughput::Bytes(frame_bytes as u64));
        let mut buf = frame.clone();
        group.bench_with_input(
            BenchmarkId::new("baseline-memcpy", frame_bytes),
            &frame,
            |b, f| {
                b.iter(|| {
                    buf.copy_from_slice(black_box(f));
                    black_box(&buf);
                })
            },
        );
        let mut buf = frame.clone();
        group.bench_function(BenchmarkId::new("complete_checksum", frame_bytes), |b| {
            b.iter(|| {
                // The field changes each round; the cost does not depend on it.
                complete_checksum(black_box(&mut buf), csum).expect("offsets are in the frame");
            })
        });
        let mut buf = frame.clone();
        group.bench_function(
            BenchmarkId::new("complete_partial_checksum", frame_bytes),
            |b| {
                b.iter(|| {
                    // Left for offload again, so each round does the whole work.
                    buf[50..52].copy_from_slice(&pseudo.to_be_bytes());
                    assert!(complete_partial_checksum(black_box(&mut buf)));
                })
            },
        );
    }
    group.finish();
}

fn segmentation(c: &mut Criterion) {
    const MSS: usize = 1448;
    // Linux's largest TSO frame for this MSS: 45 segments in 64 KB.
    let payload_bytes = 45 * MSS;
    let (frame, csum, _) = tcp4_frame(66 + payload_bytes);
    let offload = Offload {
        csum: Some(csum),
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: MSS as u16,
        }),
    };
    let mut group = c.benchmark_group("segment-64k");
    group.throughput(Throughput::Bytes(frame.len() as u64));
    let mut buf = frame.clone();
    group.bench_function("baseline-memcpy", |b| {
        b.iter(|| {
            buf.copy_from_slice(black_box(&frame));
            black_box(&buf);
        })
    });
    let mut seg = Segmenter::with_capacity(1514);
    group.bench_function("segment-mss1448", |b| {
        b.iter(|| {
            let mut bytes = 0usize;
            let n = seg
                .segment(black_box(&frame), offload, 1514, &mut |s| {
                    bytes += black_box(s).len()
                })
                .expect("the bench frame is well formed");
            assert_eq!(n, 45);
            black_box(bytes)
        })
    });
    group.finish();
}

criterion_group!(benches, checksum, segmentation);
criterion_main!(benches);

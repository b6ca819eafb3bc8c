//! Whole-replay throughput on a 1-million-packet capture, beside a plain
//! read-then-write of the same file (the floor any replay pays for I/O).
//! Run: `cargo bench -p linkem-emu --bench replay`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use linkem::cli::args::ReplayArgs;
use linkem::replay::run;
use linkem::tools::synth::{self, SynthArgs};
use linkem::StatsFormat;
use linkem_io::capture::{CaptureReader, CaptureWriter};

const PACKETS: u64 = 1_000_000;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let input = dir.path().join("in.pcap");
    let output = dir.path().join("out.pcap");
    synth::run(&SynthArgs {
        output: input.clone(),
        packets: PACKETS,
        size: 64,
        rate: "500mbit".into(),
        poisson: true,
        burst: 1,
        seed: 1,
        src: None,
        dst: None,
        flows: 1,
    })
    .expect("synthetic capture");

    let mut group = c.benchmark_group("replay-1M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(PACKETS));
    group.bench_function("plain-read-write", |b| {
        b.iter(|| {
            let mut r = CaptureReader::open(&input).expect("readable");
            let mut w =
                CaptureWriter::create(&output, r.link_type(), r.snaplen()).expect("writable");
            while let Some(p) = r.next_packet() {
                let p = p.expect("valid packet");
                w.write(p.ts_ns, p.orig_len, &p.data).expect("written");
            }
            w.finish().expect("finished");
        })
    });
    for (name, words) in [
        ("delay", "delay 10ms seed 1"),
        (
            "full",
            "rate 450mbit queue 1000 delay 10ms 1ms loss gemodel 1% 10% 70% 0.1% seed 1",
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                run(&ReplayArgs {
                    input: input.clone(),
                    output: output.clone(),
                    words: vec![words.to_string()],
                    config: None,
                    stats: StatsFormat::None,
                    events: None,
                    logs: Default::default(),
                    quiet: true,
                    rules: Default::default(),
                })
                .expect("replay")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

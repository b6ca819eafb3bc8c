//! Cost of rules and pipes per packet, beside baselines in the same run.
//! Run: `cargo bench -p linkem-core --bench rules`.
//!
//! - `classify/N`: the compiled classifier with N rules (`add pipe 1 udp
//!   from 10.i.0.0/16 to any dst-port P_i`), every packet matching the last
//!   rule or none (the worst cases of a linear scan).
//! - `node/flows-N`: a pipe with `mask src-ip 0xffffffff`, packets cycling
//!   over N source addresses so that N instances stay active, through one rule;
//!   `link` is the same link words on one plain `Link`.
//! - `node/sched-flows-N`: the same with the mask on a FIFO scheduler (`sched
//!   1 config type fifo mask src-ip 0xffffffff`): N scheduler instances.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use linkem_core::config::no_files;
use linkem_core::node::{Node, NodeConfig, PacketIn};
use linkem_core::rules::flow::v4_mapped;
use linkem_core::rules::{parse_rules, Classifier, FlowKey, Side};
use linkem_core::{Link, LinkSpec, PacketMeta};

const PACKETS: u64 = 10_000;

fn key(src: u32, dport: u16) -> FlowKey {
    FlowKey {
        ip_version: 4,
        proto: 17,
        src_ip: v4_mapped(src),
        dst_ip: v4_mapped(0x0b00_0001),
        has_ports: true,
        src_port: 4000,
        dst_port: dport,
        ip_len: 100,
        ttl: 64,
        ether_type: 0x0800,
        ..Default::default()
    }
}

fn classify(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify");
    group.throughput(Throughput::Elements(PACKETS));
    for n in [1u32, 10, 100, 1000] {
        let mut text = String::from("pipe 1 config\n");
        for i in 0..n {
            text.push_str(&format!(
                "add {} pipe 1 udp from 10.{}.{}.0/24 to any dst-port {}\n",
                i + 1,
                i / 256,
                i % 256,
                1000 + i
            ));
        }
        let set = parse_rules(&text, ["a", "b"], &mut no_files).expect("bench rules parse");
        let mut cls = Classifier::new(set.rules, 1);
        // Half the packets match the last rule, half match none.
        let last = n - 1;
        let keys: Vec<FlowKey> = (0..PACKETS)
            .map(|i| {
                let src = 0x0a00_0000 | (last / 256) << 16 | (last % 256) << 8 | 7;
                if i % 2 == 0 {
                    key(src, 1000 + last as u16)
                } else {
                    key(src, 9)
                }
            })
            .collect();
        group.bench_with_input(BenchmarkId::from_parameter(n), &keys, |b, keys| {
            b.iter(|| {
                let mut hits = 0usize;
                for k in keys {
                    if matches!(
                        cls.classify(black_box(k), Side::A, 100, 0),
                        linkem_core::rules::Hit::Pipe { .. }
                    ) {
                        hits += 1;
                    }
                }
                black_box(hits)
            })
        });
    }
    group.finish();
}

const WORDS: &str = "bw 1Gbit/s delay 10 queue 100";

fn node(c: &mut Criterion) {
    let mut group = c.benchmark_group("node");
    group.throughput(Throughput::Elements(PACKETS));
    group.sample_size(20);
    let cfg = LinkSpec::parse("rate 1gbit delay 10ms queue 100")
        .expect("valid")
        .link;
    group.bench_function("link", |b| {
        let mut link = Link::new(cfg.clone(), 1, 0);
        let mut t = 0u64;
        b.iter(|| {
            let mut s = 0u64;
            for _ in 0..PACKETS {
                t += 1000;
                s = s.wrapping_add(link.on_arrival(t, PacketMeta { len_bytes: 100 }).release_ns);
            }
            black_box(s)
        })
    });
    {
        let text = format!("pipe 1 config {WORDS}\nadd 100 pipe 1 udp\n");
        let set = parse_rules(&text, ["a", "b"], &mut no_files).expect("bench rules parse");
        let mut node = Node::new(
            set,
            NodeConfig {
                seed: 1,
                ..Default::default()
            },
        );
        let mut out = Vec::with_capacity(16);
        let mut t = 0u64;
        let k = key(0x0a00_0001, 80);
        group.bench_function("static-pipe", |b| {
            b.iter(|| {
                let mut s = 0u64;
                for _ in 0..PACKETS {
                    t += 1000;
                    node.on_arrival(
                        t,
                        PacketIn {
                            len_bytes: 100,
                            key: k,
                            side: Side::A,
                            tag: 0,
                        },
                        &mut out,
                    );
                    s = s.wrapping_add(out.pop().map_or(0, |d| d.release_ns));
                }
                black_box(s)
            })
        });
    }
    // Dynamic pipe instances, then masked scheduler instances (each with its
    // own scheduler and link; fewer flows, as each holds about 4 kB).
    let masked_pipe = format!("pipe 1 config mask src-ip 0xffffffff {WORDS}\nadd 100 pipe 1 udp\n");
    let masked_sched = format!(
        "pipe 1 config {WORDS}\nsched 1 config type fifo mask src-ip 0xffffffff\nadd 100 pipe 1 udp\n"
    );
    let runs = [
        ("flows", &masked_pipe, 1u32),
        ("flows", &masked_pipe, 1000),
        ("flows", &masked_pipe, 100_000),
        ("sched-flows", &masked_sched, 1000),
        ("sched-flows", &masked_sched, 10_000),
    ];
    for (name, text, flows) in runs {
        let set = parse_rules(text, ["a", "b"], &mut no_files).expect("bench rules parse");
        let mut node = Node::new(
            set,
            NodeConfig {
                seed: 1,
                ..Default::default()
            },
        );
        let mut out = Vec::with_capacity(16);
        let mut t = 0u64;
        let mut i = 0u32;
        // Warm up: every flow has a live instance before measuring.
        for _ in 0..flows {
            t += 1000;
            node.on_arrival(
                t,
                PacketIn {
                    len_bytes: 100,
                    key: key(0x0a00_0000 + i, 80),
                    side: Side::A,
                    tag: 0,
                },
                &mut out,
            );
            out.clear();
            i = (i + 1) % flows;
        }
        assert_eq!(node.live_flows(), flows as usize);
        group.bench_function(BenchmarkId::new(name, flows), |b| {
            b.iter(|| {
                let mut s = 0u64;
                for _ in 0..PACKETS {
                    t += 1000;
                    node.on_arrival(
                        t,
                        PacketIn {
                            len_bytes: 100,
                            key: key(0x0a00_0000 + i, 80),
                            side: Side::A,
                            tag: 0,
                        },
                        &mut out,
                    );
                    s = s.wrapping_add(out.pop().map_or(0, |d| d.release_ns));
                    i = (i + 1) % flows;
                }
                black_box(s)
            })
        });
        assert_eq!(node.live_flows(), flows as usize, "instances stayed active");
    }
    group.finish();
    eprintln!(
        "memory per live dynamic instance: {} bytes (computed from type sizes; 64 more once two of its packets were queued at once; an expired instance holds none)",
        linkem_core::pipe::instance_memory_bytes()
    );
}

criterion_group!(benches, classify, node);
criterion_main!(benches);

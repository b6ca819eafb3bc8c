//! Rules and pipes against independent references: each pipe's share through
//! today's single `Link`, chains as hops replayed one after another, one `Link`
//! per flow for masks, binomial bounds for `prob`, the profile's table for
//! `profile`, a linear scan for the compiled classifier.

mod common;

use common::{parse, udp4};
use linkem_core::config::no_files;
use linkem_core::node::{Decision, Node, NodeConfig, PacketIn};
use linkem_core::pipe::{instance_seed, FlowMask};
use linkem_core::rules::classify::{rule_matches, Classifier, Hit};
use linkem_core::rules::flow::v4_mapped;
use linkem_core::rules::{parse_rules, Action, FlowKey, RuleSet, Side, SocketOwner};
use linkem_core::{Fate, Link, PacketMeta};
use proptest::prelude::*;

fn udp(src: u32, dst: u32, sport: u16, dport: u16) -> FlowKey {
    FlowKey {
        ip_len: 100,
        ..common::udp4(src, dst, sport, dport, 0)
    }
}

/// Runs packets (time, len, key) through a node, all received on side a.
fn run_node(set: RuleSet, cfg: NodeConfig, pkts: &[(u64, u32, FlowKey)]) -> Vec<Decision> {
    common::feed(&mut Node::new(set, cfg), pkts)
}

fn arrivals(gaps: &[(u32, u32)]) -> Vec<(u64, u32)> {
    let mut t = 0u64;
    gaps.iter()
        .map(|&(g, len)| {
            t += g as u64;
            (t, len)
        })
        .collect()
}

const PIPE_WORDS: &[&str] = &[
    "bw 10Mbit/s delay 5",
    "bw 2Mbit/s queue 5",
    "bw 1Mbit/s delay 1ms 500us queue 20KBytes",
    "delay 3ms plr 0.1",
    "bw 5mbit loss gemodel 5% 30% delay 2ms",
    "bw 3Mbit/s queue 10 duplicate 5% corrupt 5%",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Several pipes: every decision equals the pipe's own share replayed
    /// through one `Link` seeded as `instance_seed(seed, pipe, 0, 0)`.
    #[test]
    fn several_pipes_equal_each_share_through_one_link(
        gaps in prop::collection::vec((0u32..3_000_000, 60u32..1500), 1..300),
        ports in prop::collection::vec(0u16..5, 300),
        cfg in prop::collection::vec(0usize..PIPE_WORDS.len(), 3),
        seed in 0u64..1000,
    ) {
        let text = format!(
            "pipe 1 config {}\npipe 2 config {}\npipe 3 config {}\n\
             add 100 pipe 1 udp dst-port 0\nadd 200 pipe 2 udp dst-port 1,2\n\
             add 300 deny dst-port 3\nadd 400 pipe 3 not dst-port 0-3 in\n",
            PIPE_WORDS[cfg[0]], PIPE_WORDS[cfg[1]], PIPE_WORDS[cfg[2]]);
        let set = parse(&text);
        let defs = set.pipes.clone();
        let pkts: Vec<_> = arrivals(&gaps).into_iter().enumerate()
            .map(|(i, (t, len))| (t, len, udp(1, 2, 9, ports[i]))).collect();
        let got = run_node(set, NodeConfig { seed, ..Default::default() }, &pkts);
        for (n, def) in &defs {
            let mut link = Link::new(def.link.clone(), instance_seed(seed, *n, 0, 0), 0);
            for (i, &(t, len, k)) in pkts.iter().enumerate() {
                let pipe = match k.dst_port { 0 => 1, 1 | 2 => 2, 3 => continue, _ => 3 };
                if pipe != *n { continue; }
                let v = link.on_arrival(t, PacketMeta { len_bytes: len });
                let d = &got[i];
                prop_assert_eq!(d.pipe, Some(*n));
                let want = v.fate;
                prop_assert_eq!(d.fate, want);
                prop_assert_eq!(d.release_ns, v.release_ns);
                prop_assert_eq!(d.duplicate, v.duplicate);
                prop_assert_eq!(d.corrupt_bits.first().copied(), v.corrupt_bit);
            }
        }
        for (i, &(t, _, k)) in pkts.iter().enumerate() {
            if k.dst_port == 3 {
                prop_assert_eq!(got[i].fate, Fate::Denied);
                prop_assert_eq!(got[i].release_ns, t);
            }
        }
    }

    /// One-pass off: a chain of pipes equals its hops replayed one after
    /// another, each hop's releases being the next hop's arrivals.
    #[test]
    fn chain_equals_hops_replayed_in_turn(
        gaps in prop::collection::vec((0u32..2_000_000, 60u32..1500), 1..300),
        cfg in prop::collection::vec(0usize..5, 3),
        seed in 0u64..1000,
    ) {
        let text = format!(
            "pipe 1 config {}\npipe 2 config {}\npipe 3 config {}\nset one-pass off\n\
             add 100 pipe 1 ip from any to any\nadd 200 count udp\nadd 300 pipe 2 udp\nadd 400 pipe 3 in\n",
            PIPE_WORDS[cfg[0]], PIPE_WORDS[cfg[1]], PIPE_WORDS[cfg[2]]);
        let set = parse(&text);
        let defs: Vec<_> = set.pipes.values().cloned().collect();
        let pkts: Vec<_> = arrivals(&gaps).into_iter().map(|(t, len)| (t, len, udp(1, 2, 3, 4))).collect();
        let got = run_node(set, NodeConfig { seed, ..Default::default() }, &pkts);
        // Reference: hop by hop; survivors in (release, order) order.
        let mut cur: Vec<(u64, usize)> = pkts.iter().enumerate().map(|(i, p)| (p.0, i)).collect();
        let mut fate = vec![(Fate::Delivered, 0u64, 0u32); pkts.len()];
        for (h, def) in defs.iter().enumerate() {
            let mut link = Link::new(def.link.clone(), instance_seed(seed, h as u32 + 1, 0, 0), 0);
            let mut next = Vec::new();
            for &(t, i) in &cur {
                let v = link.on_arrival(t, PacketMeta { len_bytes: pkts[i].1 });
                if v.fate == Fate::Delivered {
                    fate[i] = (Fate::Delivered, v.release_ns, h as u32 + 1);
                    next.push((v.release_ns, i));
                } else {
                    fate[i] = (v.fate, v.release_ns, h as u32 + 1);
                }
            }
            next.sort_by_key(|x| x.0); // stable: ties keep hop order
            cur = next;
        }
        for (i, d) in got.iter().enumerate() {
            prop_assert_eq!((d.fate, d.release_ns, d.hops), fate[i], "packet {}", i);
        }
    }

    /// A mask gives every flow its own link: equal to one `Link` per flow,
    /// seeded from (seed, pipe, flow id, first arrival).
    #[test]
    fn dynamic_pipe_equals_one_link_per_flow(
        gaps in prop::collection::vec((0u32..1_000_000, 60u32..1500), 1..300),
        flows in prop::collection::vec(0u16..6, 300),
        seed in 0u64..1000,
    ) {
        let text = "pipe 7 config mask src-port 0xffff bw 4Mbit/s delay 2 queue 8 plr 0.05\nadd pipe 7 udp\n";
        let set = parse(text);
        let def = set.pipes[&7].clone();
        let mask: FlowMask = def.mask.unwrap();
        let pkts: Vec<_> = arrivals(&gaps).into_iter().enumerate()
            .map(|(i, (t, len))| (t, len, udp(1, 2, 1000 + flows[i], 80))).collect();
        let cfg = NodeConfig { seed, idle_hold_ns: u64::MAX / 2, ..Default::default() };
        let got = run_node(set, cfg, &pkts);
        let mut links: std::collections::HashMap<u16, Link> = Default::default();
        for (i, &(t, len, k)) in pkts.iter().enumerate() {
            let mk = mask.apply(&k);
            let link = links.entry(k.src_port).or_insert_with(|| {
                Link::new(def.link.clone(), instance_seed(seed, 7, mk.flow_id(), t), 0)
            });
            let v = link.on_arrival(t, PacketMeta { len_bytes: len });
            prop_assert_eq!(got[i].flow_id, mk.flow_id());
            prop_assert_eq!(got[i].release_ns, v.release_ns);
            prop_assert_eq!(got[i].fate == Fate::Delivered, v.fate == Fate::Delivered);
        }
    }

    /// The compiled classifier returns what a plain linear scan returns.
    #[test]
    fn compiled_classifier_equals_linear_scan(
        rules in prop::collection::vec((0usize..12, 0u16..8, 0u8..4, 0usize..4), 1..60),
        keys in prop::collection::vec((0u16..8, 0u16..8, 0u8..4, any::<bool>()), 1..60),
    ) {
        let opts = ["", "udp", "tcp", "ip6", "not udp", "from 10.0.0.0/8", "to not 10.0.0.2",
                    "src-port", "dst-port", "out", "iplen 100-200", "from {10.0.0.1,10.0.0.3} 1-3"];
        let mut text = String::new();
        for (i, &(o, port, proto, act)) in rules.iter().enumerate() {
            let opt = match opts[o] { "src-port" | "dst-port" => format!("{} {}", opts[o], port), s => s.to_string() };
            let action = ["allow", "deny", "count", "skipto"][act];
            let action = if action == "skipto" { format!("skipto {}", (i + 2) * 10 + 5) } else { action.to_string() };
            let extra = ["", "udp", "tcp", "in"][proto as usize];
            text.push_str(&format!("add {} {action} {opt} {extra}\n", (i + 1) * 10));
        }
        let set = parse(&text);
        let mut c = Classifier::new(set.rules.clone(), 1);
        for &(sp, dp, addr, tcp) in &keys {
            let mut k = udp(0x0a00_0000 + addr as u32, 0x0a00_0002, sp, dp);
            if tcp { k.proto = 6; }
            let side = if dp % 2 == 0 { Side::A } else { Side::B };
            // Linear reference.
            let mut i = 0;
            let want = loop {
                let Some(r) = set.rules.get(i) else { break Hit::NoMatch };
                if !rule_matches(r, &k, side) { i += 1; continue; }
                match r.action {
                    Action::Count => i += 1,
                    Action::Skipto(n) => i = set.rules.iter().position(|x| x.number >= n).unwrap_or(set.rules.len()),
                    Action::Allow => break Hit::Allow { rule: i },
                    Action::Deny => break Hit::Deny { rule: i },
                    Action::Pipe(p) => break Hit::Pipe { rule: i, pipe: p },
                    Action::Queue(q) => break Hit::Queue { rule: i, queue: q },
                }
            };
            prop_assert_eq!(c.classify(&k, side, 100, 0), want);
        }
    }
}

/// Binomial bound: |count − n·p| ≤ 5·sqrt(n·p·(1−p)) (false alarm < 1e-6).
fn within(count: u64, n: u64, p: f64) -> bool {
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (count as f64 - n as f64 * p).abs() <= 5.0 * sd + 1.0
}

#[test]
fn prob_rules_split_as_the_seed_paper_says() {
    // Seed 003 §3.3: 20 %, then 0.7 of the remaining 80 % (56 %), the rest (24 %).
    let set = parse(
        "add 1000 prob 0.2 pipe 10 src-port 80 in\nadd 1010 prob 0.7 pipe 20 src-port 80 in\n\
         add 1020 pipe 30 src-port 80 in\npipe 10 config\npipe 20 config\npipe 30 config\n",
    );
    let n = 200_000u64;
    let pkts: Vec<_> = (0..n)
        .map(|i| (i * 1000, 100, udp(1, 2, 80, 5000)))
        .collect();
    for seed in [1, 2, 3] {
        let got = run_node(
            set.clone(),
            NodeConfig {
                seed,
                ..Default::default()
            },
            &pkts,
        );
        let count = |p| got.iter().filter(|d| d.pipe == Some(p)).count() as u64;
        assert!(within(count(10), n, 0.2), "pipe 10: {}", count(10));
        assert!(within(count(20), n, 0.56), "pipe 20: {}", count(20));
        assert!(within(count(30), n, 0.24), "pipe 30: {}", count(30));
    }
}

#[test]
fn profile_airtime_and_loss_follow_the_file() {
    let profile = "name foo\nbandwidth 2Mbit/s\nloss-level 0.9\nsamples 100\nprob delay\n\
                   0.2 0.100\n0.4 0.130\n0.5 0.130\n0.8 1.500\n0.98 2.000\n";
    let mut files = |_: &str| Ok(profile.to_string());
    let set = parse_rules(
        "pipe 3 config profile p.txt\nadd pipe 3 ip\n",
        ["a", "b"],
        &mut files,
    )
    .unwrap();
    let pf = set.pipes[&3].profile.clone().unwrap();
    let n = 50_000u64;
    // 1000-byte packets 10 ms apart: the link (4 ms + at most 2 ms) is idle at each arrival.
    let pkts: Vec<_> = (0..n)
        .map(|i| (i * 10_000_000, 1000, udp(1, 2, 3, 4)))
        .collect();
    let got = run_node(
        set,
        NodeConfig {
            seed: 9,
            ..Default::default()
        },
        &pkts,
    );
    let lost = got.iter().filter(|d| d.fate == Fate::Loss).count() as u64;
    let p_loss = 1.0 - pf.loss_index as f64 / 100.0;
    assert!(
        within(lost, n, p_loss),
        "lost {lost} of {n}, expected {p_loss}"
    );
    let extras: Vec<u64> = got
        .iter()
        .zip(&pkts)
        .filter(|(d, _)| d.fate == Fate::Delivered)
        .map(|(d, p)| d.release_ns - p.0 - 4_000_000)
        .collect();
    let m = extras.len() as f64;
    // Empirical CDF against the table's, at every distinct table value (DKW, 1e-6).
    let eps = ((2.0f64 / 1e-6).ln() / (2.0 * m)).sqrt();
    let kept = &pf.table_ns[..pf.loss_index];
    for &x in kept {
        let want = kept.iter().filter(|&&v| v <= x).count() as f64 / kept.len() as f64;
        let have = extras.iter().filter(|&&v| v <= x).count() as f64 / m;
        assert!((want - have).abs() <= eps, "at {x} ns: {have} vs {want}");
    }
    assert!(
        extras.iter().all(|e| kept.contains(e)),
        "every extra airtime is a table entry"
    );
}

#[test]
fn burst_passes_at_line_speed_after_idle() {
    let set = parse("pipe 1 config bw 1Mbit/s burst 3000 queue 100\nadd pipe 1 ip\n");
    let t0 = 1_000_000_000;
    let pkts: Vec<_> = (0..5).map(|_| (t0, 1000, udp(1, 2, 3, 4))).collect();
    let got = run_node(set, NodeConfig::default(), &pkts);
    let rel: Vec<u64> = got.iter().map(|d| d.release_ns).collect();
    // Credit = min(3000 B, 1 Mbit/s · 1 s): three frames at once, then 8 ms each.
    assert_eq!(rel, vec![t0, t0, t0, t0 + 8_000_000, t0 + 16_000_000]);
}

#[test]
fn idle_instances_expire_and_the_cap_drops() {
    let set = parse("pipe 1 config mask src-port 0xffff bw 10Mbit/s\nadd pipe 1 udp\n");
    let mut node = Node::new(
        set,
        NodeConfig {
            seed: 1,
            max_flows: 3,
            idle_hold_ns: 1_000_000,
            ..Default::default()
        },
    );
    let mut out = Vec::new();
    for p in 0..5u16 {
        node.on_arrival(
            0,
            PacketIn {
                len_bytes: 100,
                key: udp(1, 2, p, 9),
                side: Side::A,
                tag: p as u64,
            },
            &mut out,
        );
    }
    let limited = out.iter().filter(|d| d.fate == Fate::FlowLimit).count();
    assert_eq!((limited, node.live_flows()), (2, 3));
    node.on_arrival(
        10_000_000,
        PacketIn {
            len_bytes: 100,
            key: udp(1, 2, 99, 9),
            side: Side::A,
            tag: 9,
        },
        &mut out,
    );
    assert_eq!(
        node.live_flows(),
        1,
        "the three idle instances expired, one new"
    );
    assert_eq!(node.pipes()[0].expired, 3);
}

/// One rule per match field, with a packet that matches and one that does not.
#[test]
fn every_match_field_positive_and_negative() {
    let base = udp(0x0a00_0001, 0xc0a8_0405, 5000, 80);
    let with = |f: &dyn Fn(&mut FlowKey)| {
        let mut k = base;
        f(&mut k);
        k
    };
    let v6 = with(&|k| {
        k.ip_version = 6;
        k.src_ip = 0x2001_0db8 << 96 | 1;
        k.dst_ip = 0x2001_0db8 << 96 | 2;
    });
    let tcp = with(&|k| {
        k.proto = 6;
        k.tcp_flags = 0x02;
    });
    let cases: Vec<(&str, FlowKey, FlowKey, Side)> = vec![
        ("udp", base, tcp, Side::A),
        ("tcp", tcp, base, Side::A),
        ("proto udp", base, tcp, Side::A),
        ("17", base, tcp, Side::A),
        ("ip4", base, v6, Side::A),
        ("ip6", v6, base, Side::A),
        ("icmp", with(&|k| k.proto = 1), base, Side::A),
        (
            "icmp6",
            with(&|k| {
                k.ip_version = 6;
                k.proto = 58
            }),
            base,
            Side::A,
        ),
        (
            "from 10.0.0.0/8 to any",
            base,
            with(&|k| k.src_ip = v4_mapped(0x0b00_0001)),
            Side::A,
        ),
        (
            "from any to 192.168.4.0/24",
            base,
            with(&|k| k.dst_ip = v4_mapped(0xc0a8_0505)),
            Side::A,
        ),
        (
            "from {10.0.0.7,10.0.0.1} to any",
            base,
            with(&|k| k.src_ip = v4_mapped(0x0a00_0002)),
            Side::A,
        ),
        (
            "from not 10.0.0.2 to any",
            base,
            with(&|k| k.src_ip = v4_mapped(0x0a00_0002)),
            Side::A,
        ),
        ("from 2001:db8::/32 to any", v6, base, Side::A),
        (
            "from any 4000-6000 to any 80,443",
            base,
            with(&|k| k.dst_port = 81),
            Side::A,
        ),
        (
            "src-ip 10.0.0.1",
            base,
            with(&|k| k.src_ip = v4_mapped(9)),
            Side::A,
        ),
        (
            "dst-ip 192.168.4.5",
            base,
            with(&|k| k.dst_ip = v4_mapped(9)),
            Side::A,
        ),
        ("src-ip6 2001:db8::1", v6, base, Side::A),
        ("dst-ip6 2001:db8::/64", v6, base, Side::A),
        ("src-port 5000", base, with(&|k| k.src_port = 5001), Side::A),
        ("dst-port http", base, with(&|k| k.dst_port = 8080), Side::A),
        ("iplen 50-150", base, with(&|k| k.ip_len = 1500), Side::A),
        ("ipttl 64", base, with(&|k| k.ttl = 63), Side::A),
        ("dscp ef", with(&|k| k.dscp = 46), base, Side::A),
        (
            "tcpflags syn,!ack",
            tcp,
            with(&|k| {
                k.proto = 6;
                k.tcp_flags = 0x12
            }),
            Side::A,
        ),
        (
            "mac-type ip",
            base,
            with(&|k| k.ether_type = 0x86dd),
            Side::A,
        ),
        (
            "frag",
            with(&|k| {
                k.later_fragment = true;
                k.has_ports = false
            }),
            base,
            Side::A,
        ),
        (
            "not frag",
            base,
            with(&|k| k.later_fragment = true),
            Side::A,
        ),
        (
            "uid 1001",
            with(&|k| k.owner = Some(SocketOwner { uid: 1001, gid: 7 })),
            // Unknown owner (bridge, replay) never matches.
            base,
            Side::A,
        ),
        (
            "gid 7",
            with(&|k| k.owner = Some(SocketOwner { uid: 1001, gid: 7 })),
            with(&|k| k.owner = Some(SocketOwner { uid: 7, gid: 8 })),
            Side::A,
        ),
        (
            "not uid 1001",
            with(&|k| k.owner = Some(SocketOwner { uid: 1002, gid: 7 })),
            with(&|k| k.owner = Some(SocketOwner { uid: 1001, gid: 7 })),
            Side::A,
        ),
        ("in", base, base, Side::B),
        ("out", base, base, Side::A),
        ("a-to-b", base, base, Side::B),
        ("b-to-a", base, base, Side::A),
        ("recv a", base, base, Side::B),
        ("xmit b", base, base, Side::B),
    ];
    for (opt, yes, no, no_side) in cases {
        let set = parse(&format!("add 100 deny {opt}\n"));
        let mut c = Classifier::new(set.rules, 1);
        let yes_side = if matches!(opt, "out" | "b-to-a") {
            Side::B
        } else {
            Side::A
        };
        assert_eq!(
            c.classify(&yes, yes_side, 1, 0),
            Hit::Deny { rule: 0 },
            "'{opt}' must match"
        );
        assert_eq!(
            c.classify(&no, no_side, 1, 0),
            Hit::NoMatch,
            "'{opt}' must not match"
        );
        assert_eq!(c.counters[0], (1, 1), "'{opt}' counts what it took");
    }
}

#[test]
fn bad_files_name_line_and_word() {
    let err = |t: &str| parse_rules(t, ["a", "b"], &mut no_files).unwrap_err();
    let e = err("pipe 1 config bw 1Mbit/s\nadd 100 pipe 1 frobnicate\n");
    assert_eq!((e.line, e.word.as_str()), (2, "frobnicate"));
    assert!(e.message.contains("unknown"), "{e}");
    let e = err("add 100 pipe 1 keep-state\n");
    assert_eq!(
        (e.line, e.word.as_str(), e.message.as_str()),
        (1, "keep-state", "not supported")
    );
    let e = err("\n\nadd 100 pipe 4 ip\n");
    assert_eq!((e.line, e.word.as_str()), (3, "4"));
    assert!(e.message.contains("not configured"), "{e}");
    let e = err("pipe 1 config mask src-port 0x1ffff\n");
    assert_eq!((e.line, e.word.as_str()), (1, "0x1ffff"));
    let e = err("add 100 deny uid root\n");
    assert_eq!((e.line, e.word.as_str()), (1, "root"));
    assert!(e.message.contains("uid takes a number"), "{e}");
    let e = err("add 100 deny gid\n");
    assert_eq!(e.line, 1);
    let e = err("add 100 deny uid 4294967296\n");
    assert_eq!(e.word, "4294967296");
    let e = err("pipe 1 config mask\n");
    assert_eq!(e.line, 1);
    let e = err("pipe 1 config weight 5\n");
    assert_eq!(e.word, "weight");
    assert!(e.message.starts_with("not supported"), "{e}");
    let e = err("pipe 1 config bw 1Mbit/s bw 2Mbit/s\n");
    assert!(e.word == "bw" && e.message.contains("twice"), "{e}");
    let e = err("pipe 1 config plr 0.1 loss 1%\n");
    assert_eq!(e.word, "loss");
    let e = err("pipe 1 config profile missing.txt\n");
    assert_eq!((e.line, e.word.as_str()), (1, "missing.txt"));
    // A missing profile is called a profile (it was called a distribution).
    assert_eq!(e.message, "profile 'missing.txt': no such file");
    let e = err("pipe 1 config delay 10ms 2ms distribution missing.dist\n");
    assert_eq!(e.message, "distribution 'missing.dist': no such file");
    let mut bad_profile = |_: &str| Ok("name x\nprob delay\n0.5 zz\n1 3\n".to_string());
    let e = parse_rules(
        "\npipe 2 config bw 1Mbit/s profile p\n",
        ["a", "b"],
        &mut bad_profile,
    )
    .unwrap_err();
    assert_eq!((e.line, e.word.as_str()), (2, "p"));
    // Where, and what was expected, never the file's content.
    assert!(
        e.message.contains("line 3") && e.message.contains("expected a number"),
        "{e}"
    );
    assert!(!e.message.contains("zz"), "{e}");
    let e = err("add 100 pipe 1 from xy.it to any\n");
    assert!(e.message.contains("not supported"), "{e}");
    let e = err("add 100 skipto 50 ip\n");
    assert_eq!(e.word, "50");
    let e = err("add 100 allow recv eth7\n");
    assert_eq!(e.word, "eth7");
}

#[test]
fn one_pass_spellings_and_defaults() {
    assert!(parse("add allow ip\n").one_pass);
    assert!(!parse("set one-pass off\n").one_pass);
    assert!(!parse("sysctl net.inet.ip.fw.one_pass=0\n").one_pass);
    assert!(!parse("net.inet.ip.fw.one_pass=0\n").one_pass);
    assert!(!parse("ipfw disable one_pass\n").one_pass);
    let set = parse(
        "ipfw pipe 3 config bw 640Kbit/s delay 30 queue 20\ndnctl pipe 4 config bw 1Mbit/s\n",
    );
    let (p3, p4) = (&set.pipes[&3].link, &set.pipes[&4].link);
    assert_eq!(
        (p3.rate_bps, p3.delay_ns, p3.queue_packets),
        (Some(640_000), 30_000_000, Some(20))
    );
    assert_eq!(
        p4.queue_packets,
        Some(50),
        "Dummynet's default queue is 50 slots"
    );
    let set = parse("add 10 allow ip\nadd deny ip\nadd 5 count ip\n");
    let nums: Vec<u32> = set.rules.iter().map(|r| r.number).collect();
    assert_eq!(nums, vec![5, 10, 110]);
}

const VOCAB: &[&str] = &[
    "add",
    "pipe",
    "1",
    "2",
    "config",
    "bw",
    "1Mbit/s",
    "delay",
    "20",
    "queue",
    "5",
    "mask",
    "src-ip",
    "0xff",
    "/8",
    "dst-port",
    "all",
    "burst",
    "64k",
    "profile",
    "p",
    "prob",
    "0.5",
    "deny",
    "allow",
    "count",
    "skipto",
    "300",
    "from",
    "to",
    "any",
    "not",
    "10.0.0.0/8",
    "{1.2.3.4,::1}",
    "80,443",
    "1-9",
    "in",
    "out",
    "recv",
    "a",
    "b",
    "tcp",
    "udp",
    "ip6",
    "tcpflags",
    "syn,!ack",
    "dscp",
    "ef",
    "iplen",
    "frag",
    "uid",
    "gid",
    "1001",
    "set",
    "one-pass",
    "off",
    "\n",
    "plr",
    "0.1",
    "loss",
    "1%",
    "keep-state",
    "{",
    "or",
    "//",
    "#",
    "mac-type",
    "ip",
    "-q",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Rule files from the vocabulary: an error names a real line, or the node
    /// runs and decides every packet once, one-pass on or off.
    #[test]
    fn any_word_soup_parses_or_errors_and_runs(
        picks in prop::collection::vec(0usize..VOCAB.len(), 0..40),
        frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 0..20),
    ) {
        let text: String = picks.iter().map(|&i| VOCAB[i]).collect::<Vec<_>>().join(" ");
        let profile = "prob delay\n0 1\n1 2\n";
        let mut files = |_: &str| Ok(profile.to_string());
        match parse_rules(&text, ["a", "b"], &mut files) {
            Err(e) => prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1)),
            Ok(set) => {
                let pkts: Vec<_> = frames.iter().enumerate()
                    .map(|(i, f)| (i as u64 * 1000, f.len() as u32 + 14,
                                   FlowKey::parse(f, linkem_core::rules::L2Kind::RawIp)))
                    .collect();
                run_node(set, NodeConfig { seed: 1, max_flows: 4, idle_hold_ns: 10, ..Default::default() }, &pkts);
            }
        }
    }
}

/// `Node::update` against the single-link reference: a pipe reconfigured
/// mid-run behaves as one `Link` reconfigured at that instant (queued packets
/// keep their release times, the next ones queue behind them); a rule that
/// stays keeps its counters; a new pipe starts empty.
#[test]
fn update_reconfigures_pipes_in_place() {
    let text1 = "pipe 1 config bw 1Mbit/s delay 10 queue 100\nadd 100 pipe 1 udp\n";
    let text2 = "pipe 1 config bw 2Mbit/s delay 30 queue 100\npipe 2 config delay 5\n\
                 add 100 pipe 1 udp\nadd 50 pipe 2 udp src-ip 10.0.0.9\n";
    let mut node = Node::new(parse(text1), NodeConfig::default());
    let mut reference = Link::new(
        parse(text1).pipes[&1].link.clone(),
        instance_seed(0, 1, 0, 0),
        0,
    );
    let mut out = Vec::new();
    let t0 = 1_000_000_000u64;
    let key = udp(1, 2, 3, 4);
    let mut expect = Vec::new();
    for i in 0..10u64 {
        let t = t0 + i * 1_000_000;
        if i == 5 {
            node.update(parse(text2), t, &mut out);
            reference.reconfigure(t, parse(text2).pipes[&1].link.clone());
        }
        let pkt = PacketIn {
            len_bytes: 1000,
            key,
            side: Side::A,
            tag: i,
        };
        node.on_arrival(t, pkt, &mut out);
        expect.push(
            reference
                .on_arrival(t, PacketMeta { len_bytes: 1000 })
                .release_ns,
        );
    }
    let got: Vec<u64> = out.iter().map(|d| d.release_ns).collect();
    assert_eq!(got, expect);
    // Each packet of 8 ms at 1 Mbit/s: the fifth queued behind the others.
    assert!(got[5] > t0 + 5_000_000 + 30_000_000);
    let c = &node.classifier();
    assert_eq!(
        c.rules().iter().map(|r| r.number).collect::<Vec<_>>(),
        vec![50, 100]
    );
    assert_eq!(c.counters[1], (10, 10_000));
    assert_eq!(c.counters[0], (0, 0));
    assert_eq!(
        node.pipes()[1].instances().next().map(|i| i.tot_pkts),
        Some(0)
    );
}

/// Lines a control plane's successive rule sets are made of: numbered and
/// unnumbered rules, the same words twice, spacing and prefixes that change
/// the text but not the words, and lines that fail.
const CACHE_LINES: &[&str] = &[
    "pipe 1 config delay 5ms",
    "pipe 2 config bw 1Mbit/s delay 20",
    "add 100 pipe 1 udp from 10.1.0.0/16 to any dst-port 53",
    "add 100 pipe 2 tcp from any to 10.2.0.1 80,443",
    "ipfw add 200 pipe 2 ip from any to any",
    "add   200 pipe 2 ip from any to any",
    "add 300 prob 0.5 pipe 1 ip from any to any in",
    "add pipe 2 ip from any to any",
    "add deny icmp from any to any",
    "add 400 skipto 500 ip from any to any",
    "add 500 pipe 3 ip from any to any",
    "add 600 pipe 1 udp from any to any dst-port 1..x",
    "add 700 allow ip from any to any recv a",
    "flush",
];

proptest! {
    /// A cache kept across parses gives what a fresh parse gives, errors
    /// (their line and word) included, whatever the previous texts were.
    #[test]
    fn cached_parse_equals_fresh_parse(
        texts in proptest::collection::vec(
            proptest::collection::vec(0..CACHE_LINES.len(), 0..10), 1..8)
    ) {
        let mut cache = linkem_core::rules::RuleCache::default();
        for picks in texts {
            let text: String = picks.iter().map(|&i| format!("{}\n", CACHE_LINES[i])).collect();
            let fresh = parse_rules(&text, ["a", "b"], &mut no_files);
            let cached = linkem_core::rules::parse_rules_cached(
                &text, ["a", "b"], &mut no_files, &mut cache);
            prop_assert_eq!(fresh, cached, "text:\n{}", text);
        }
    }
}

/// A classifier kept across an update with the same rules (lines moved)
/// decides as one compiled anew: `prob` draws restart from the seed, counters
/// stay; different rules are compiled anew, counters following number and text.
#[test]
fn renewed_classifier_decides_as_a_new_one() {
    let text = "pipe 1 config delay 1ms\npipe 2 config delay 2ms\n\
                add 100 prob 0.3 pipe 1 udp from any to any\n\
                add 200 prob 0.5 pipe 2 ip from 10.0.0.0/8 to any\n\
                add 300 deny ip from any to any\n";
    let moved = format!("pipe 3 config delay 3ms\n{text}");
    let seed = 11;
    let keys: Vec<FlowKey> = (0..2000u32)
        .map(|i| udp4(0x0a00_0000 + i, 0x0b00_0001, 1000 + (i % 7) as u16, 53, 0))
        .collect();
    let run = |c: &mut Classifier| -> Vec<Hit> {
        keys.iter()
            .map(|k| c.classify(k, Side::A, 100, 0))
            .collect()
    };
    let mut old = Classifier::new(parse(text).rules, seed);
    let first = run(&mut old);
    let counts = old.counters.clone();
    let new_rules = parse(&moved).rules;
    assert!(old.same_rules(&new_rules));
    assert_ne!(old.rules()[0].line, new_rules[0].line, "the lines moved");
    let mut renewed = old.renew(new_rules.clone(), seed);
    assert_eq!(renewed.counters, counts, "counters stay");
    assert_eq!(renewed.rules(), &new_rules[..], "the new lines are taken");
    let mut fresh = Classifier::new(new_rules, seed);
    assert_eq!(run(&mut renewed), run(&mut fresh));
    assert_eq!(run(&mut Classifier::new(parse(text).rules, seed)), first);

    let changed = parse(&text.replace("prob 0.5", "prob 0.6")).rules;
    assert!(!renewed.same_rules(&changed));
    let mut carried = Classifier::new(changed, seed);
    carried.carry_counters(&renewed);
    assert_eq!(carried.counters[0], renewed.counters[0], "rule 100 stays");
    assert_eq!(carried.counters[1], (0, 0), "rule 200 changed");
    assert_eq!(carried.counters[2], renewed.counters[2], "rule 300 stays");
}

/// A started node (a live run, or the replay of its recording) counts every
/// pipe's trace and schedule from its start, as a single link does: the
/// pipe's one instance, a masked pipe's instances made at later packets,
/// and a scheduler's instance alike. Unstarted (the replay of a capture),
/// each instance counts from its first packet. Trace: opportunities at 50
/// and 100 ms of each 100 ms; schedule: delay 40 ms from 50 ms on.
#[test]
fn a_started_node_counts_traces_and_schedules_from_its_start() {
    let text = "pipe 1 config trace t\n\
                pipe 2 config trace t mask src-port 0xffff\n\
                pipe 3 config trace t\n\
                sched 3 config type fq_codel\n\
                pipe 4 config delay 10 schedule s\n\
                add 100 pipe 1 udp from any to any dst-port 1\n\
                add 200 pipe 2 udp from any to any dst-port 2\n\
                add 300 pipe 3 udp from any to any dst-port 3\n\
                add 400 pipe 4 udp from any to any dst-port 4\n";
    let mut files = |name: &str| match name {
        "t" => Ok("50\n100\n".to_string()),
        "s" => Ok("50ms delay 40ms\n".to_string()),
        _ => Err(format!("'{name}': no such file")),
    };
    let t0 = 5_000_000_000u64;
    let ms = 1_000_000u64;
    // (arrival ms after t0, destination port): each pipe's first packet at
    // 60 ms; pipe 2's second flow (source port 2) first at 160 ms.
    let pkts: Vec<(u64, u32, FlowKey)> =
        [(60, 1, 1), (60, 2, 1), (160, 2, 2), (60, 3, 1), (60, 4, 1)]
            .iter()
            .map(|&(at, port, sport)| (t0 + at * ms, 100, common::udp4(1, 2, sport, port, 0)))
            .collect();
    let mut releases_ms = |start: Option<u64>| {
        let set = parse_rules(text, ["a", "b"], &mut files).unwrap_or_else(|e| panic!("{e}"));
        let mut node = Node::new(
            set,
            NodeConfig {
                seed: 1,
                ..Default::default()
            },
        );
        if let Some(t) = start {
            linkem_core::Model::start(&mut node, t);
        }
        common::feed(&mut node, &pkts)
            .iter()
            .map(|d| (d.release_ns - t0) / ms)
            .collect::<Vec<u64>>()
    };
    assert_eq!(
        releases_ms(Some(t0)),
        [100, 100, 200, 100, 100],
        "from the node's start: the opportunities at 100 and 200 ms, the 40 ms delay"
    );
    assert_eq!(
        releases_ms(None),
        [110, 110, 210, 110, 70],
        "from each instance's first packet: 50 ms after it, and the 10 ms delay"
    );
}

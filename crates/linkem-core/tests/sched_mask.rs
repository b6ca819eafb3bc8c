//! `sched N config ... mask`: one scheduler instance, with its own copy of the
//! pipe's link, per masked flow (Dummynet's `sched_mask`). Checked against
//! references that do not share the instance code: a masked FIFO scheduler
//! against the closed-form dynamic pipe with the same mask, and each instance
//! of a masked WF²Q+ against an unmasked one fed only that instance's packets.

mod common;

use common::{parse, parse_err, udp4};
use linkem_core::node::{Decision, Node, NodeConfig};
use linkem_core::rules::flow::v4_mapped;
use linkem_core::rules::{FlowKey, RuleSet};
use linkem_core::Fate;
use proptest::prelude::*;

fn udp(src: u32, dst: u32, sport: u16) -> FlowKey {
    udp4(src, dst, sport, 9, 0)
}

fn node(set: RuleSet, max_flows: Option<usize>) -> Node {
    let mut cfg = NodeConfig {
        seed: 7,
        ..Default::default()
    };
    if let Some(m) = max_flows {
        cfg.max_flows = m;
    }
    Node::new(set, cfg)
}

fn run(text: &str, pkts: &[(u64, u32, FlowKey)]) -> (Vec<Decision>, Node) {
    let mut n = node(parse(text), None);
    let d = common::feed(&mut n, pkts);
    (d, n)
}

/// Two sources, each sending 1500-byte packets at twice `rate_bps`, to the
/// destination `dst(source)`.
fn overload(secs: u64, rate_bps: u64, dst: impl Fn(u32) -> u32) -> Vec<(u64, u32, FlowKey)> {
    let gap = 1500 * 8 * 1_000_000_000 / rate_bps / 2;
    let mut v = Vec::new();
    for i in 0..(secs * 1_000_000_000 / gap) {
        for s in 1..=2u32 {
            v.push((i * gap + s as u64, 1500, udp(s, dst(s), 1000 + s as u16)));
        }
    }
    v
}

fn delivered_bits_by_dst(
    d: &[Decision],
    pkts: &[(u64, u32, FlowKey)],
    until_ns: u64,
) -> std::collections::BTreeMap<u128, f64> {
    let mut m = std::collections::BTreeMap::new();
    for x in d {
        if x.fate == Fate::Delivered && x.release_ns <= until_ns {
            let p = &pkts[x.tag as usize];
            *m.entry(p.2.dst_ip).or_default() += p.1 as f64 * 8.0;
        }
    }
    m
}

const PIPE: &str = "pipe 1 config bw 4Mbit/s delay 10\n";

#[test]
fn dst_mask_gives_each_host_the_full_rate_and_without_it_they_share() {
    let pkts = overload(3, 4_000_000, |s| 0x0a00_0100 + s);
    let until = 3_000_000_000;
    let link_bits = 4e6 * (until as f64 - 10e6) / 1e9;
    for ty in ["wf2q+", "fifo", "rr", "qfq", "prio", "fq_codel"] {
        let rules = |mask: &str| {
            format!(
                "{PIPE}sched 1 config type {ty}{mask}\nqueue 3 config sched 1 weight 1\nadd queue 3 ip\n"
            )
        };
        let (d, n) = run(&rules(" mask dst-ip 0xffffffff"), &pkts);
        let m = delivered_bits_by_dst(&d, &pkts, until);
        assert_eq!(m.len(), 2, "{ty}");
        for (dst, bits) in &m {
            // Each host's instance keeps its own link busy: its full rate.
            assert!(
                (bits / link_bits - 1.0).abs() < 0.01,
                "{ty} masked: {dst:x} got {bits} of {link_bits}"
            );
        }
        assert_eq!(n.sched.active_instances(), 2, "{ty}");
        assert_eq!(n.sched.instances().count(), 2, "{ty}");
        let ids: std::collections::BTreeSet<u64> = d.iter().map(|x| x.flow_id).collect();
        assert!(ids.len() >= 2, "{ty}: decisions name the instance");

        let (d, n) = run(&rules(""), &pkts);
        let m = delivered_bits_by_dst(&d, &pkts, until);
        let total: f64 = m.values().sum();
        assert!(
            (total / link_bits - 1.0).abs() < 0.01,
            "{ty} unmasked: {total} of {link_bits}"
        );
        assert_eq!(n.sched.instances().count(), 1, "{ty}");
        assert_eq!(n.sched.active_instances(), 0, "{ty}");
    }
}

#[test]
fn hosts_behind_one_masked_prefix_share_their_instance() {
    // mask dst-ip 0xffffff00: 10.0.1.1 and 10.0.1.2 are one /24, one
    // instance, one link between them.
    let pkts = overload(2, 4_000_000, |s| 0x0a00_0100 + s);
    let text = format!(
        "{PIPE}sched 1 config type wf2q+ mask dst-ip 0xffffff00\nqueue 3 config sched 1 mask dst-ip 0xffffffff\nadd queue 3 ip\n"
    );
    let (d, n) = run(&text, &pkts);
    assert_eq!(n.sched.active_instances(), 1);
    let l = n.sched.instances().next().unwrap();
    // Two queue instances (the queue's mask | the scheduler's) in it.
    assert_eq!(l.sched.qs.classes.len(), 2);
    let m = delivered_bits_by_dst(&d, &pkts, 2_000_000_000);
    let total: f64 = m.values().sum();
    let link_bits = 4e6 * 1.99;
    assert!((total / link_bits - 1.0).abs() < 0.01, "{total}");
    for bits in m.values() {
        assert!((bits / total - 0.5).abs() < 0.01, "{m:?}");
    }
}

#[test]
fn a_pipe_mask_on_a_scheduled_pipe_is_the_scheduler_mask() {
    // As `pipe N config mask` sets sched N's mask in Dummynet: each host gets
    // its own link, as the same pipe without a scheduler gives it.
    let pkts = overload(2, 4_000_000, |s| 0x0a00_0100 + s);
    let (d, n) = run(
        "pipe 1 config bw 4Mbit/s delay 10 mask dst-ip 0xffffffff codel\nadd pipe 1 ip\n",
        &pkts,
    );
    assert_eq!(n.sched.active_instances(), 2);
    let m = delivered_bits_by_dst(&d, &pkts, 2_000_000_000);
    for bits in m.values() {
        assert!((bits / (4e6 * 1.99) - 1.0).abs() < 0.01, "{m:?}");
    }
}

#[test]
fn idle_instances_expire_and_count_against_max_flows() {
    let text = format!("{PIPE}sched 1 config type rr mask dst-ip 0xffffffff\nadd pipe 1 ip\n");
    // 1000 hosts at t < 1 ms, then one packet 3 s later: the 1000 are idle
    // for more than the 1 s hold and go.
    let mut pkts: Vec<_> = (0..1000u32)
        .map(|i| (i as u64 * 1000, 100, udp(1, 0x0a01_0000 + i, 1)))
        .collect();
    pkts.push((3_000_000_000, 100, udp(1, 0x0a02_0000, 1)));
    let mut n = node(parse(&text), None);
    let d = common::feed(&mut n, &pkts);
    assert!(d.iter().all(|x| x.fate == Fate::Delivered));
    assert_eq!(n.sched.active_instances(), 1);
    assert_eq!(n.live_flows(), 1);
    let p = n.sched.links.iter().flatten().next().unwrap();
    assert_eq!(p.expired, 1000);

    // --max-flows 10: the 11th host at once is refused, and counted.
    let mut n = node(parse(&text), Some(10));
    let d = common::feed(&mut n, &pkts[..20]);
    let refused = d.iter().filter(|x| x.fate == Fate::FlowLimit).count();
    assert_eq!(refused, 10);
    assert!(d[..10].iter().all(|x| x.fate == Fate::Delivered));
    assert_eq!(n.live_flows(), 10);
    // Once they have expired, new hosts get instances again.
    let mut n = node(parse(&text), Some(10));
    let d = common::feed(&mut n, &pkts);
    assert_eq!(d.last().unwrap().fate, Fate::Delivered);
}

#[test]
fn sched_mask_words_and_errors() {
    let set = parse(&format!(
        "{PIPE}sched 1 config type fq_codel mask dst-ip 0xffffff00 src-port 0xffff buckets 256 flows 64\nadd pipe 1 ip\n"
    ));
    let m = set.sched.scheds[&1].mask.expect("mask kept");
    assert_eq!((m.dst_ip4, m.src_port, m.src_ip4), (0xffff_ff00, 0xffff, 0));
    assert_eq!(set.sched.scheds[&1].params.flows, 64);
    for (bad, word) in [
        ("sched 1 config mask", "mask"),
        ("sched 1 config mask dst-ip 1 mask src-ip 1", "mask"),
        ("sched 1 config mask bogus", "bogus"),
        ("sched 1 config buckets 0", "0"),
    ] {
        let e = parse_err(&format!("{PIPE}{bad}\n"));
        assert!(e.contains(word), "{bad}: {e}");
    }
}

/// Fates, and release times of the delivered packets (a link drop is
/// dated at the dequeue under a scheduler, at the arrival in the closed form).
fn release_of(d: &[Decision]) -> Vec<(Fate, u64)> {
    d.iter()
        .map(|x| {
            let t = if x.fate == Fate::Delivered {
                x.release_ns
            } else {
                0
            };
            (x.fate, t)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A masked `type fifo` scheduler with one droptail queue per instance is
    /// Dummynet's dynamic pipe: the same fates and release times as the
    /// closed-form pipe with that mask, idle expiry and re-creation included.
    #[test]
    fn masked_fifo_equals_the_dynamic_pipe(
        arr in prop::collection::vec((0u64..3_000_000, 40u32..1500, 0u32..4), 1..300),
        pause in 0usize..300,
        words in 0usize..3,
    ) {
        let link = ["bw 2Mbit/s delay 5 queue 6", "bw 1Mbit/s delay 1ms 500us queue 9KBytes",
                    "bw 8Mbit/s delay 2ms 1ms distribution normal queue 4 overhead 24 plr 0.05"][words];
        let mut t = 0;
        let pkts: Vec<_> = arr.iter().enumerate().map(|(i, &(g, l, h))| {
            // One pause longer than the idle hold: instances expire and come back.
            t += g + if i == pause { 1_500_000_000 } else { 0 };
            (t, l, udp(1, 0x0a00_0000 + h, 1))
        }).collect();
        let (plain, pn) = run(&format!("pipe 1 config {link} mask dst-ip 0xffffffff\nadd pipe 1 ip"), &pkts);
        let (s, sn) = run(&format!("pipe 1 config {link}\nsched 1 config type fifo mask dst-ip 0xffffffff\nadd pipe 1 ip"), &pkts);
        prop_assert_eq!(release_of(&plain), release_of(&s));
        for (a, b) in plain.iter().zip(&s) {
            prop_assert_eq!(a.flow_id, b.flow_id);
        }
        prop_assert_eq!(pn.live_flows(), sn.live_flows());
    }

    /// Instances are independent: each instance of a masked WF²Q+ (two
    /// weighted queues, per-source queue instances) decides its packets
    /// exactly as an unmasked scheduler fed only that instance's packets.
    #[test]
    fn each_instance_is_an_unmasked_scheduler_of_its_own(
        arr in prop::collection::vec((0u64..1_500_000, 40u32..1500, 0u32..3, 0u32..3), 1..300),
        ty in 0usize..3,
    ) {
        let ty = ["wf2q+", "qfq", "rr"][ty];
        let body = format!("sched 1 config type {ty}{{}}\nqueue 1 config sched 1 weight 1 queue 5\n\
                    queue 2 config sched 1 weight 3 queue 5 mask src-ip 0xffffffff\n\
                    add queue 1 ip src-ip 10.9.0.0\nadd queue 2 ip\n");
        let mut t = 0;
        let pkts: Vec<_> = arr.iter().map(|&(g, l, h, s)| {
            t += g;
            (t, l, udp(0x0a09_0000 + s, 0x0a00_0000 + h, 1))
        }).collect();
        let masked = run(&format!("{PIPE}{}", body.replace("{}", " mask dst-ip 0xffffffff")), &pkts).0;
        for h in 0..3u32 {
            let idx: Vec<usize> = (0..pkts.len()).filter(|&i| pkts[i].2.dst_ip == v4_mapped(0x0a00_0000 + h)).collect();
            let sub: Vec<_> = idx.iter().map(|&i| pkts[i]).collect();
            let alone = run(&format!("{PIPE}{}", body.replace("{}", "")), &sub).0;
            for (k, &i) in idx.iter().enumerate() {
                prop_assert_eq!((masked[i].fate, masked[i].release_ns), (alone[k].fate, alone[k].release_ns));
                prop_assert_eq!(masked[i].queue, alone[k].queue);
            }
        }
    }
}

//! Bounded memory and cost in the node: schedulers hold memory for the
//! flows they have seen, not for their `flows`; dynamic instances and
//! scheduler classes are bounded by `--max-flow-memory` when they are made;
//! idle instances go by time; a change costs what it changes.

mod common;

use common::{packet, parse, udp4};
use linkem_core::node::{Decision, Node, NodeConfig};
use linkem_core::sched::service::{sched_class_bytes, sched_instance_bytes};
use linkem_core::Fate;
use std::time::Instant;

const MS: u64 = 1_000_000;

fn node(text: &str, cfg: NodeConfig) -> Node {
    Node::new(parse(text), cfg)
}

/// Classes over every scheduler instance of the node.
fn classes(n: &Node) -> usize {
    n.sched.instances().map(|l| l.sched.qs.classes.len()).sum()
}

/// `n` schedulers `fq_codel flows F` on pipes 1..=n, each with a rule.
fn many_scheds(n: u32, flows: u32) -> String {
    let mut t = String::new();
    for i in 1..=n {
        t += &format!("pipe {i} config bw 10Mbit/s\nsched {i} config type fq_codel flows {flows}\nadd pipe {i} ip from any to any dst-port {i}\n");
    }
    t += "pipe 60000 config delay 1ms\nadd pipe 60000 ip\n";
    t
}

#[test]
fn idle_fq_schedulers_hold_no_flow_until_a_packet_comes() {
    let mut n = node(&many_scheds(200, 65536), NodeConfig::default());
    assert_eq!(classes(&n), 0, "200 idle fq_codel flows 65536 made classes");
    let mut out = Vec::new();
    n.on_arrival(MS, packet(0, udp4(1, 2, 1000, 7, 0), 100), &mut out);
    n.on_arrival(MS, packet(1, udp4(1, 2, 1001, 7, 0), 100), &mut out);
    assert_eq!(classes(&n), 2, "one class per flow seen");
    assert_eq!(n.flow_memory_bytes(), 2 * sched_class_bytes());
}

/// Median of the times `pipe 60000 config` (a pipe no scheduler uses) takes.
fn unrelated_change_ns(flows: u32) -> u128 {
    let text = many_scheds(50, flows);
    let mut n = node(&text, NodeConfig::default());
    let mut out: Vec<Decision> = Vec::new();
    let mut times: Vec<u128> = (0..7u64)
        .map(|i| {
            let changed = text.replace(
                "pipe 60000 config delay 1ms",
                &format!("pipe 60000 config delay {}ms", 2 + i),
            );
            let set = parse(&changed);
            let t = Instant::now();
            n.update(set, (i + 1) * MS, &mut out);
            t.elapsed().as_nanos()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

#[test]
fn an_unrelated_change_costs_the_same_with_large_schedulers() {
    let small = unrelated_change_ns(1);
    let large = unrelated_change_ns(65536);
    eprintln!("unrelated pipe change, 50 fq_codel: flows 1 {small} ns, flows 65536 {large} ns");
    assert!(
        large < 4 * small + 2 * MS as u128,
        "50 schedulers of 65536 flows: {large} ns per change, of 1 flow: {small} ns"
    );
}

const MASKED_FQ: &str =
    "pipe 1 config mask src-ip 0xffffffff\nsched 1 config type fq_codel\nadd pipe 1 ip\n";
const MASKED_PIPE: &str = "pipe 2 config mask src-ip 0xffffffff delay 1ms\nadd pipe 2 udp\n";

#[test]
fn idle_instances_expire_by_time_without_packets() {
    let mut n = node(&format!("{MASKED_PIPE}{MASKED_FQ}"), NodeConfig::default());
    let mut out = Vec::new();
    for i in 0..100u32 {
        n.on_arrival(MS, packet(i as usize, udp4(i, 9, 1, 2, 0), 100), &mut out);
        let mut tcp = udp4(1000 + i, 9, 1, 2, 0);
        tcp.proto = 6;
        n.on_arrival(MS, packet(1000 + i as usize, tcp, 100), &mut out);
    }
    n.poll(10 * MS, &mut out);
    assert_eq!(n.live_flows(), 200);
    assert!(n.flow_memory_bytes() > 0);
    n.expire_idle(500 * MS);
    assert_eq!(n.live_flows(), 200, "still within the 1 s hold");
    n.expire_idle(1500 * MS);
    assert_eq!(n.live_flows(), 0, "idle for over the hold, no packet came");
    assert_eq!(n.flow_memory_bytes(), 0, "the charge went back");
    assert_eq!(n.sched.instances().count(), 0);
    assert_eq!(
        n.pipes()
            .iter()
            .map(|p| p.instances().count())
            .sum::<usize>(),
        0
    );
}

/// 20 000 new flows at a masked fq_codel pipe with room for 2 000: the rest
/// are dropped as flow-limit at their first packet, the charge never passes
/// the bound; once they expire the next flood is admitted again.
#[test]
fn a_flood_of_new_flows_stops_at_the_memory_bound() {
    let per_flow = sched_instance_bytes() + sched_class_bytes();
    let bound = 2000 * per_flow;
    let cfg = NodeConfig {
        max_flow_bytes: bound,
        ..Default::default()
    };
    eprintln!(
        "charged per masked fq_codel instance with one flow: {} + {} bytes",
        sched_instance_bytes(),
        sched_class_bytes()
    );
    let mut n = node(MASKED_FQ, cfg);
    for round in 0..2u64 {
        let mut out = Vec::new();
        let t0 = round * 3000 * MS;
        for i in 0..20_000u32 {
            let key = udp4(round as u32 * 100_000 + i, 9, 1, 2, 0);
            n.on_arrival(t0 + i as u64 * 1000, packet(i as usize, key, 100), &mut out);
            assert!(n.flow_memory_bytes() <= bound);
        }
        n.poll(t0 + 100 * MS, &mut out);
        let limited = out.iter().filter(|d| d.fate == Fate::FlowLimit).count();
        assert_eq!(out.len(), 20_000, "every packet decided");
        assert_eq!(limited, 18_000, "round {round}: flows beyond the bound");
        assert_eq!(n.live_flows(), 2000);
        n.expire_idle(t0 + 2000 * MS);
        assert_eq!((n.live_flows(), n.flow_memory_bytes()), (0, 0));
    }
}

/// Two masked pipes sharing `--max-flows 1`: a flow of pipe 1 idle since
/// 1 ms holds the only instance until a sweep. The arrival at 1.55 s to
/// pipe 2 crosses the multiple 1.5 s of `EXPIRY_SWEEP_NS`, so the sweep there
/// (1.5 s > 1 ms + 1 s hold) frees it first, and the new flow is admitted;
/// at 0.95 s (no multiple crossed past the hold) it is not.
#[test]
fn the_sweep_at_model_time_frees_the_budget_before_the_input_that_crosses_it() {
    let text = "pipe 1 config mask src-ip 0xffffffff delay 1ms\n\
                pipe 2 config mask src-ip 0xffffffff delay 1ms\n\
                add pipe 1 udp from any to any dst-port 1\n\
                add pipe 2 udp from any to any dst-port 2\n";
    let cfg = NodeConfig {
        max_flows: 1,
        ..Default::default()
    };
    for (at, want) in [(950 * MS, Fate::FlowLimit), (1550 * MS, Fate::Delivered)] {
        let mut n = node(text, cfg);
        let mut out = Vec::new();
        n.on_arrival(0, packet(0, udp4(1, 9, 7, 1, 0), 100), &mut out);
        n.on_arrival(at, packet(1, udp4(2, 9, 7, 2, 0), 100), &mut out);
        let fates: Vec<Fate> = out.iter().map(|d| d.fate).collect();
        assert_eq!(fates, [Fate::Delivered, want], "second flow at {at} ns");
    }
}

/// The sweep is a function of model time: the same arrivals, with or
/// without polls and stray `expire_idle` calls between them (at instants no
/// later than the next arrival), give the same decisions in the same order
/// and leave the same flows live. Masked pipes and a masked fq_codel under a
/// tight `--max-flows`, flows pausing for longer than the hold.
#[test]
fn polls_and_stray_sweeps_between_arrivals_change_no_decision() {
    let text = format!(
        "{MASKED_FQ}pipe 2 config mask src-ip 0xffffffff bw 2Mbit/s delay 3ms\n\
         add 50 pipe 2 udp from any to any dst-port 2\n"
    );
    let cfg = NodeConfig {
        max_flows: 12,
        ..Default::default()
    };
    let xorshift = |mut x: u64| {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    };
    // Bursts of 2-30 ms gaps, now and then a pause of 0.5-2.5 s.
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut t = 0u64;
    let arrivals: Vec<(u64, linkem_core::rules::FlowKey)> = (0..4000)
        .map(|_| {
            t += if next() % 200 == 0 {
                500 * MS + next() % (2000 * MS)
            } else {
                2 * MS + next() % (28 * MS)
            };
            (t, udp4(next() as u32 % 40, 9, 7, 1 + next() as u16 % 2, 0))
        })
        .collect();
    let run = |extra: bool| {
        let mut n = node(&text, cfg);
        let mut out = Vec::new();
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut last = 0;
        for (i, &(t, key)) in arrivals.iter().enumerate() {
            if extra {
                let mid = last + next() % (t - last);
                n.poll(mid, &mut out);
                n.expire_idle(mid + next() % (t - mid + 1));
            }
            n.on_arrival(t, packet(i, key, 500), &mut out);
            last = t;
        }
        while let Some(e) = n.next_event_ns() {
            n.poll(e, &mut out);
        }
        (out, n.live_flows())
    };
    let (plain, live) = run(false);
    let (polled, live_polled) = run(true);
    assert_eq!(plain.len(), 4000);
    assert!(
        plain.iter().any(|d| d.fate == Fate::FlowLimit),
        "the limit bites"
    );
    assert_eq!(plain, polled);
    assert_eq!(live, live_polled);
}

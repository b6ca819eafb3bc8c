//! `Node::update` with scheduled pipes: a scheduler the change leaves alone
//! keeps its state (queued packets, counters, the link's busy-until time), one
//! whose link words change takes them from the change on without
//! double-booking the link, and the packets of a changed or deleted
//! scheduler, or between two hops, get one decision each.

mod common;

use common::{packet, parse, udp4};
use linkem_core::node::{Decision, Node, NodeConfig};
use linkem_core::rules::{FlowKey, RuleSet};
use linkem_core::Fate;
use std::collections::{BTreeMap, BTreeSet};

const SEED: u64 = 7;

/// A packet: arrival ns, frame bytes, key.
type Pkt = (u64, u32, FlowKey);

/// What a run gave: every decision by tag, the decisions `Node::update` made,
/// and the tags the node held just before the update.
struct Run {
    node: Node,
    by_tag: BTreeMap<u64, Decision>,
    at_update: Vec<Decision>,
    held_before: BTreeSet<u64>,
    /// Tags decided before the update, in decision order.
    before: Vec<u64>,
}

/// Feeds `pkts` (tagged by index, received on side A) through a node made of
/// `set`, applying `change` just before the packet of index `at` arrives (at
/// that packet's arrival time), then decides what is left. Checks that every
/// packet is decided exactly once.
fn run(set: RuleSet, pkts: &[Pkt], change: Option<(usize, RuleSet)>) -> Run {
    let mut node = Node::new(
        set,
        NodeConfig {
            seed: SEED,
            ..Default::default()
        },
    );
    let mut change = change;
    let mut all: Vec<Decision> = Vec::new();
    let mut at_update = Vec::new();
    let mut held_before = BTreeSet::new();
    let mut before = Vec::new();
    for (i, &(t, len, key)) in pkts.iter().enumerate() {
        if change.as_ref().is_some_and(|(at, _)| *at == i) {
            let (_, new) = change.take().expect("checked");
            node.poll(t.saturating_sub(1), &mut all);
            let decided: BTreeSet<u64> = all.iter().map(|d| d.tag).collect();
            held_before = (0..i as u64).filter(|x| !decided.contains(x)).collect();
            before = all.iter().map(|d| d.tag).collect();
            assert_eq!(node.holds_packets(), !held_before.is_empty());
            node.update(new, t, &mut at_update);
            all.extend(at_update.iter().cloned());
        }
        node.on_arrival(t, packet(i, key, len), &mut all);
    }
    common::drain(&mut node, &mut all);
    assert!(!node.holds_packets());
    let mut by_tag = BTreeMap::new();
    for d in all {
        let tag = d.tag;
        assert!(
            by_tag.insert(tag, d).is_none(),
            "packet {tag} decided twice"
        );
    }
    assert_eq!(by_tag.len(), pkts.len(), "every packet decided");
    Run {
        node,
        by_tag,
        at_update,
        held_before,
        before,
    }
}

/// `flows` UDP flows from 10.1.0.x to `dst`, `bps` of 1000-byte frames in
/// all, evenly interleaved, from `start_ns` for `dur_ns`.
fn flows(dst: u32, src_port: u16, flows: u32, bps: u64, start_ns: u64, dur_ns: u64) -> Vec<Pkt> {
    let gap_ns = 1000 * 8 * 1_000_000_000 / bps;
    let mut v = Vec::new();
    let mut t = start_ns;
    let mut i = 0u32;
    while t < start_ns + dur_ns {
        let f = i % flows;
        v.push((
            t,
            1000,
            udp4(0x0a01_0000 + f, dst, src_port + f as u16, 9, 0),
        ));
        t += gap_ns;
        i += 1;
    }
    v
}

/// Several streams merged in time order (ties: in the order given).
fn merge(streams: Vec<Vec<Pkt>>) -> Vec<Pkt> {
    let mut v: Vec<Pkt> = streams.into_iter().flatten().collect();
    v.sort_by_key(|p| p.0);
    v
}

/// Index of the first packet arriving at or after `t_ns`.
fn index_at(pkts: &[Pkt], t_ns: u64) -> usize {
    pkts.partition_point(|p| p.0 < t_ns)
}

const DST10: u32 = 0x0a00_000a;
const DST20: u32 = 0x0a00_0014;
const DST30: u32 = 0x0a00_001e;

/// Pipe 10 under fq_codel, pipe 20 a closed-form FIFO, pipe 30 under wf2q+
/// with a plain queue and a per-port one; `extra` holds further lines.
fn three_pipes(pipe20: &str, extra: &str, one_pass_off: bool) -> RuleSet {
    let multi = if one_pass_off {
        "set one-pass off\npipe 40 config delay 2\nadd 900 pipe 40 udp from any to 10.0.0.10\n"
    } else {
        ""
    };
    parse(&format!(
        "pipe 10 config bw 10Mbit/s delay 3\n\
         sched 10 config type fq_codel\n\
         pipe 20 config {pipe20}\n\
         pipe 30 config bw 4Mbit/s delay 1\n\
         sched 30 config type wf2q+\n\
         queue 31 config sched 30 weight 1\n\
         queue 32 config sched 30 weight 3 mask src-port 0xffff\n\
         add 100 pipe 10 udp from any to 10.0.0.10\n\
         add 200 pipe 20 udp from any to 10.0.0.20\n\
         add 300 queue 31 udp from any to 10.0.0.30 src-port 1000\n\
         add 310 queue 32 udp from any to 10.0.0.30\n\
         {multi}{extra}"
    ))
}

/// Two seconds of overload on every pipe: 20 Mbit/s into pipe 10 (10 Mbit/s),
/// 1.5 Mbit/s into pipe 20 (1 Mbit/s), 9 Mbit/s into pipe 30 (4 Mbit/s).
fn overload_three() -> Vec<Pkt> {
    merge(vec![
        flows(DST10, 5000, 8, 20_000_000, 0, 2_000_000_000),
        flows(DST20, 6000, 1, 1_500_000, 1, 2_000_000_000),
        flows(DST30, 1000, 1, 3_000_000, 2, 2_000_000_000),
        flows(DST30, 2000, 2, 6_000_000, 3, 2_000_000_000),
    ])
}

/// Per class of the scheduled pipe `pipe`'s instances: (queue, flow id,
/// enqueued, dequeued, drops, marks).
fn class_counts(node: &Node, pipe: u32) -> Vec<(u32, u64, u64, u64, u64, u64)> {
    node.sched
        .instances()
        .filter(|l| l.pipe == pipe)
        .flat_map(|l| l.sched.qs.classes.iter())
        .map(|c| {
            (
                c.queue,
                c.flow_id,
                c.stats.enqueued,
                c.stats.dequeued,
                c.stats.drops(),
                c.stats.marked,
            )
        })
        .collect()
}

/// A change to another pipe (pipe 20's link words), a new pipe numbered
/// between the scheduled ones (their indexes move) and a new rule ahead of
/// the others (rule positions move) leaves the fq_codel and wf2q+ pipes'
/// decisions exactly those of a run without the change, and their counters
/// continue; the packets they hold stay held. With one-pass off the packets
/// between two hops re-enter at the same rule. The reconfigured FIFO pipe
/// keeps its queue even though schedulers hold packets.
#[test]
fn unrelated_change_leaves_scheduled_pipes_exact() {
    for one_pass_off in [false, true] {
        let pkts = overload_three();
        let at = index_at(&pkts, 1_000_000_000);
        let base = three_pipes("bw 1Mbit/s delay 5 queue 20", "", one_pass_off);
        let changed = three_pipes(
            "bw 2Mbit/s delay 7 queue 20",
            "pipe 15 config delay 1\nadd 50 pipe 15 udp from any to 10.9.9.9\n",
            one_pass_off,
        );
        let plain = run(base.clone(), &pkts, None);
        let upd = run(base, &pkts, Some((at, changed)));
        assert!(upd.at_update.is_empty(), "the change decided nothing");
        let v4 = linkem_core::rules::flow::v4_mapped;
        let scheduled = |i: usize| [v4(DST10), v4(DST30)].contains(&pkts[i].2.dst_ip);
        let held_sched = upd
            .held_before
            .iter()
            .filter(|&&t| scheduled(t as usize))
            .count();
        assert!(
            held_sched > 100,
            "the schedulers held packets: {held_sched}"
        );
        let mut compared = 0;
        for i in (0..pkts.len()).filter(|&i| scheduled(i)) {
            let (a, b) = (&plain.by_tag[&(i as u64)], &upd.by_tag[&(i as u64)]);
            assert_eq!(
                (
                    a.fate,
                    a.release_ns,
                    a.ce,
                    a.queue,
                    a.flow_id,
                    a.hops,
                    a.pipe
                ),
                (
                    b.fate,
                    b.release_ns,
                    b.ce,
                    b.queue,
                    b.flow_id,
                    b.hops,
                    b.pipe
                ),
                "packet {i} (one-pass off: {one_pass_off})"
            );
            compared += 1;
        }
        assert!(compared > 3000);
        // Overloaded: fq_codel dropped, and both schedulers' counters ran on
        // through the change, equal to the unchanged run's.
        let drops = |r: &Run| {
            r.by_tag
                .values()
                .filter(|d| d.pipe == Some(10) && d.fate != Fate::Delivered)
                .count()
        };
        assert!(drops(&upd) > 100, "{}", drops(&upd));
        for (pipe, dst) in [(10, DST10), (30, DST30)] {
            let (a, b) = (
                class_counts(&plain.node, pipe),
                class_counts(&upd.node, pipe),
            );
            assert_eq!(a, b, "pipe {pipe}");
            // Counted from the start, not from the change: every packet sent
            // to the pipe is in one class's counters (enqueued or dropped at
            // arrival).
            let offered: u64 = b.iter().map(|c| c.2).sum::<u64>()
                + upd
                    .by_tag
                    .iter()
                    .filter(|(t, d)| {
                        pkts[**t as usize].2.dst_ip == v4(dst)
                            && d.pipe == Some(pipe)
                            && !matches!(d.fate, Fate::Delivered)
                    })
                    .count() as u64;
            let sent = pkts.iter().filter(|p| p.2.dst_ip == v4(dst)).count() as u64;
            assert!(offered >= sent, "pipe {pipe}: {offered} < {sent}");
        }
        // Pipe 20 kept its queue: the first packet it took after the change
        // leaves after every one it released before.
        let twenty = v4(DST20);
        let last_before = upd
            .before
            .iter()
            .map(|t| &upd.by_tag[t])
            .filter(|d| d.pipe == Some(20) && d.fate == Fate::Delivered)
            .map(|d| d.release_ns)
            .max()
            .expect("pipe 20 delivered before the change");
        let first_after = (at..pkts.len())
            .filter(|&i| pkts[i].2.dst_ip == twenty)
            .map(|i| &upd.by_tag[&(i as u64)])
            .find(|d| d.fate == Fate::Delivered && d.hops >= 1)
            .expect("pipe 20 delivered after the change");
        assert!(
            first_after.release_ns > last_before,
            "{} <= {last_before}",
            first_after.release_ns
        );
    }
}

/// Delivery times of pipe `pipe`'s packets, sorted.
fn releases(r: &Run, pipe: u32) -> Vec<u64> {
    let mut v: Vec<u64> = r
        .by_tag
        .values()
        .filter(|d| d.pipe == Some(pipe) && d.fate == Fate::Delivered)
        .map(|d| d.release_ns)
        .collect();
    v.sort_unstable();
    v
}

/// Changing the scheduled pipe's own rate (its scheduler words unchanged)
/// keeps its state: the decisions made before the change are those of the
/// unchanged run; the packet on the wire finishes at the old rate and every
/// later one is served at the new rate behind it, so the service intervals
/// (delay 0: release − wire time .. release) never overlap: the link is
/// never busier than its rate. The counters run on through the change.
#[test]
fn own_rate_change_applies_from_the_change_without_double_booking() {
    for ty in ["wf2q+", "fq_codel", "qfq"] {
        let text = |bw: &str| {
            parse(&format!(
                "pipe 10 config bw {bw}\n\
                 sched 10 config type {ty}\n\
                 queue 11 config sched 10 weight 1\n\
                 queue 12 config sched 10 weight 2\n\
                 add 100 queue 11 udp from any to 10.0.0.10 src-port 5000\n\
                 add 110 queue 12 udp from any to 10.0.0.10\n"
            ))
        };
        // 20 Mbit/s into 10 Mbit/s, then 5 Mbit/s from t = 0.5 s.
        let pkts = flows(DST10, 5000, 3, 20_000_000, 0, 1_000_000_000);
        // Between two arrivals, while a packet is on the wire.
        let at = index_at(&pkts, 500_100_000);
        let change_ns = pkts[at].0;
        let plain = run(text("10Mbit/s"), &pkts, None);
        let upd = run(text("10Mbit/s"), &pkts, Some((at, text("5Mbit/s"))));
        assert!(upd.at_update.is_empty(), "{ty}: the change decided nothing");
        assert!(upd.held_before.len() > 10, "{ty}: a backlog at the change");
        for t in &upd.before {
            assert_eq!(plain.by_tag[t], upd.by_tag[t], "{ty}: packet {t}");
        }
        // The packet on the wire at the change: the latest release decided
        // before it, later than the change.
        let on_wire = upd
            .before
            .iter()
            .map(|t| upd.by_tag[t].release_ns)
            .max()
            .expect("decisions before the change");
        assert!(on_wire > change_ns, "{ty}: a packet on the wire");
        let (old_ns, new_ns) = (800_000, 1_600_000); // 1000 bytes at 10 and 5 Mbit/s
        let r = releases(&upd, 10);
        let mut after = 0;
        for w in r.windows(2) {
            let gap = w[1] - w[0];
            let wire = if w[1] > on_wire { new_ns } else { old_ns };
            // Backlogged all along: back to back, exact to the ns.
            assert!(gap.abs_diff(wire) <= 1, "{ty}: gap {gap} at {}", w[1]);
            after += (w[1] > on_wire) as u32;
        }
        assert!(after > 200, "{ty}: {after} served at the new rate");
        // The unchanged run keeps serving at 10 Mbit/s: twice as many.
        let pr = releases(&plain, 10);
        assert!(
            pr.len() > r.len() + 100,
            "{ty}: {} vs {}",
            pr.len(),
            r.len()
        );
        // Counted since the start: each delivery once in `dequeued`.
        let dequeued: u64 = class_counts(&upd.node, 10).iter().map(|c| c.3).sum();
        assert_eq!(dequeued, r.len() as u64, "{ty}");
    }
}

/// Deleting a scheduled pipe decides every packet it held at the change, as
/// the pipe would have without further arrivals (delivered ones served back
/// to back at its rate, from the packet on the wire on, under its pipe
/// number, for the caller to flush); packets after the change pass unmatched.
/// Changing its scheduler (a quantum) decides its packets the same way, and
/// the new scheduler starts with fresh counters.
#[test]
fn deleted_or_changed_scheduler_decides_its_held_packets() {
    let base = "pipe 10 config bw 10Mbit/s\n\
                sched 10 config type fq_codel\n\
                pipe 20 config delay 5\n\
                add 100 pipe 10 udp from any to 10.0.0.10\n\
                add 200 pipe 20 udp from any to 10.0.0.20\n";
    let deleted = "pipe 20 config delay 5\nadd 200 pipe 20 udp from any to 10.0.0.20\n";
    let requantum = base.replace("type fq_codel", "type fq_codel quantum 300");
    let pkts = merge(vec![
        flows(DST10, 5000, 4, 20_000_000, 0, 1_000_000_000),
        flows(DST20, 6000, 1, 1_000_000, 1, 1_000_000_000),
    ]);
    let change_ns = 500_000_000;
    let at = index_at(&pkts, change_ns);
    let v4 = linkem_core::rules::flow::v4_mapped;
    for (name, new) in [("deleted", deleted), ("changed", requantum.as_str())] {
        let upd = run(parse(base), &pkts, Some((at, parse(new))));
        let decided: BTreeSet<u64> = upd.at_update.iter().map(|d| d.tag).collect();
        assert_eq!(decided.len(), upd.at_update.len(), "{name}: once each");
        assert_eq!(decided, upd.held_before, "{name}: exactly the held ones");
        assert!(decided.len() > 100, "{name}: {}", decided.len());
        let mut served: Vec<u64> = upd
            .at_update
            .iter()
            .inspect(|d| {
                assert_eq!(d.pipe, Some(10), "{name}");
                assert_eq!(d.hops, 1, "{name}");
            })
            .filter(|d| d.fate == Fate::Delivered)
            .map(|d| d.release_ns)
            .collect();
        served.sort_unstable();
        let on_wire = upd
            .before
            .iter()
            .map(|t| &upd.by_tag[t])
            .filter(|d| d.pipe == Some(10))
            .map(|d| d.release_ns)
            .max()
            .expect("served before the change");
        assert!(served[0].abs_diff(on_wire + 800_000) <= 1, "{name}");
        for w in served.windows(2) {
            assert!((w[1] - w[0]).abs_diff(800_000) <= 1, "{name}: {w:?}");
        }
        let later = (at..pkts.len()).filter(|&i| pkts[i].2.dst_ip == v4(DST10));
        match name {
            "deleted" => {
                for i in later {
                    let d = &upd.by_tag[&(i as u64)];
                    assert_eq!(
                        (d.fate, d.pipe, d.release_ns),
                        (Fate::Delivered, None, pkts[i].0)
                    );
                }
                assert!(upd.node.sched.instances().next().is_none());
            }
            _ => {
                // Fresh counters: only what arrived after the change.
                let offered = later.count() as u64;
                let counted: u64 = class_counts(&upd.node, 10).iter().map(|c| c.2).sum();
                assert!(counted <= offered, "{counted} > {offered}");
                assert!(counted > offered / 2, "{counted} vs {offered}");
            }
        }
    }
}

/// With one-pass off, a packet between two hops stays held through a change
/// and re-enters the new rules at its release time, unless the pipe it last
/// left was deleted (decided at the change: delivered at that release time,
/// under that pipe, for the caller to flush) or the new set has one-pass on
/// (decided at the change, delivered at that release time).
#[test]
fn packets_between_hops_stay_or_are_decided_at_release() {
    let two_hops = "set one-pass off\n\
                    pipe 1 config delay 100\n\
                    pipe 2 config delay 10\n\
                    add 100 pipe 1 udp from any to 10.0.0.10\n\
                    add 200 pipe 2 udp from any to 10.0.0.10\n";
    let pkts = flows(DST10, 5000, 1, 800_000, 0, 1_000_000_000); // one per 10 ms
    let change_ns = 500_000_000;
    let at = index_at(&pkts, change_ns);
    let cases = [
        ("kept", two_hops.replace("delay 10\n", "delay 20\n")),
        (
            "pipe 1 deleted",
            "set one-pass off\npipe 2 config delay 10\nadd 200 pipe 2 udp from any to 10.0.0.10\n"
                .to_string(),
        ),
        ("one-pass on", two_hops.replace("set one-pass off\n", "")),
    ];
    for (name, text) in cases {
        let upd = run(parse(two_hops), &pkts, Some((at, parse(&text))));
        // Held at the change: ten packets inside pipe 1's 100 ms, and the one
        // or two inside pipe 2's 10 ms.
        assert!(upd.held_before.len() >= 10, "{name}");
        for &t in &upd.held_before {
            let d = &upd.by_tag[&t];
            let arrival = pkts[t as usize].0;
            let decided_now = upd.at_update.iter().any(|x| x.tag == t);
            // Its reinjection from pipe 1 not yet run (one due at the
            // change itself runs after it).
            let in_pipe1 = arrival + 100_000_000 >= change_ns;
            match name {
                "kept" => {
                    assert!(!decided_now, "{name}: {t}");
                    // Pipe 2 reconfigured: 20 ms for the hops after the change.
                    let second = if in_pipe1 { 20_000_000 } else { 10_000_000 };
                    assert_eq!((d.hops, d.release_ns), (2, arrival + 100_000_000 + second));
                }
                "pipe 1 deleted" if in_pipe1 => {
                    assert!(decided_now, "{name}: {t}");
                    assert_eq!(
                        (d.hops, d.pipe, d.release_ns),
                        (1, Some(1), arrival + 100_000_000)
                    );
                }
                "pipe 1 deleted" => {
                    assert!(!decided_now, "{name}: {t}");
                    assert_eq!((d.hops, d.release_ns), (2, arrival + 110_000_000));
                }
                _ => {
                    assert!(decided_now, "{name}: {t}");
                    let hops = if in_pipe1 { 1 } else { 2 };
                    let at = arrival + 100_000_000 + if in_pipe1 { 0 } else { 10_000_000 };
                    assert_eq!((d.fate, d.hops, d.release_ns), (Fate::Delivered, hops, at));
                }
            }
        }
    }
}

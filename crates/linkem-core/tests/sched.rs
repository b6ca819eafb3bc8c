//! Schedulers and AQM inside the node: the event-driven service equals the
//! closed-form link for one FIFO droptail queue, and the behaviours Dummynet Revisited
//! and the RFCs promise (weighted shares, strict priority, CoDel's standing
//! delay, FQ-CoDel's sparse flows, ECN marks).

mod common;

use common::{parse, parse_err, udp4};
use linkem_core::node::{Decision, Node, NodeConfig, PacketIn};
use linkem_core::rules::flow::v4_mapped;
use linkem_core::rules::{FlowKey, RuleSet, Side};
use linkem_core::Fate;
use proptest::prelude::*;

fn udp(src: u32, sport: u16, ecn: u8) -> FlowKey {
    udp4(src, 0x0a00_0002, sport, 9, ecn)
}

fn run(set: RuleSet, pkts: &[(u64, u32, FlowKey)]) -> (Vec<Decision>, Node) {
    let mut node = Node::new(
        set,
        NodeConfig {
            seed: 7,
            ..Default::default()
        },
    );
    let out = common::feed(&mut node, pkts);
    (out, node)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A pipe served by `type fifo` with one droptail queue gives exactly the
    /// closed-form link's fates and release times.
    #[test]
    fn fifo_droptail_equals_closed_form(
        gaps in prop::collection::vec((0u64..2_000_000, 40u32..1500), 1..400),
        words in 0usize..4,
        via_queue in any::<bool>(),
    ) {
        let link = ["bw 2Mbit/s delay 5 queue 8", "bw 1Mbit/s delay 1ms 500us queue 20KBytes",
                    "bw 10Mbit/s queue 3 burst 4000", "bw 3Mbit/s delay 2ms 1ms distribution normal queue 30 overhead 24"][words];
        let mut t = 0;
        let pkts: Vec<_> = gaps.iter().map(|&(g, l)| { t += g; (t, l, udp(1, 1, 0)) }).collect();
        let plain = run(parse(&format!("pipe 1 config {link}\nadd pipe 1 ip")), &pkts).0;
        let sched = if via_queue {
            let q = link.split(" queue ").nth(1).unwrap().split(' ').next().unwrap();
            format!("pipe 1 config {link}\nsched 1 config type fifo\nqueue 5 config sched 1 queue {q}\nadd queue 5 ip")
        } else {
            format!("pipe 1 config {link} type fifo\nadd pipe 1 ip")
        };
        let (s, _) = run(parse(&sched), &pkts);
        for (a, b) in plain.iter().zip(&s) {
            prop_assert_eq!((a.tag, a.fate, a.release_ns), (b.tag, b.fate, b.release_ns));
        }
    }
}

/// Bytes delivered per source over the busy period.
fn bytes_by_src(
    d: &[Decision],
    pkts: &[(u64, u32, FlowKey)],
    until_ns: u64,
) -> std::collections::BTreeMap<u128, u64> {
    let mut m = std::collections::BTreeMap::new();
    for x in d {
        if x.fate == Fate::Delivered && x.release_ns <= until_ns {
            *m.entry(pkts[x.tag as usize].2.src_ip).or_default() += pkts[x.tag as usize].1 as u64;
        }
    }
    m
}

/// Two sources each offering twice the link rate, 1500-byte packets.
fn overload(n_src: u32, secs: u64, rate_bps: u64) -> Vec<(u64, u32, FlowKey)> {
    let gap = 1500 * 8 * 1_000_000_000 / rate_bps / 2;
    let mut v = Vec::new();
    for i in 0..(secs * 1_000_000_000 / gap) {
        for s in 0..n_src {
            v.push((i * gap + s as u64, 1500, udp(s + 1, 1000 + s as u16, 0)));
        }
    }
    v
}

#[test]
fn weights_one_to_three_share_25_75() {
    for ty in ["wf2q+", "rr", "qfq"] {
        let text = format!(
            "pipe 1 config bw 4Mbit/s\nsched 1 config type {ty}\nqueue 1 config sched 1 weight 1\nqueue 2 config sched 1 weight 3\n\
             add queue 1 src-ip 0.0.0.1\nadd queue 2 src-ip 0.0.0.2\n"
        );
        let pkts = overload(2, 4, 4_000_000);
        let (d, _) = run(parse(&text), &pkts);
        let m = bytes_by_src(&d, &pkts, 4_000_000_000);
        let (a, b) = (m[&v4_mapped(1)] as f64, m[&v4_mapped(2)] as f64);
        let share = a / (a + b);
        assert!((share - 0.25).abs() < 0.01, "{ty}: share {share}");
        // The link stays busy: 4 s at 4 Mbit/s.
        assert!((a + b) * 8.0 > 0.99 * 16e6, "{ty}: {}", a + b);
    }
}

#[test]
fn seed_003_figure_4_per_source_queues() {
    // One queue of weight 20 (UDP), per-source queues of weight 10 (TCP from 10.8.5.0/24).
    for ty in ["wf2q+", "qfq"] {
        let text = format!(
        "pipe 5 config bw 4Mbit/s\nsched 5 config type {ty}\nqueue 10 config weight 20 sched 5\n\
                queue 8 config weight 10 sched 5 mask src-ip 0xffffffff\n\
                add 1000 queue 10 proto udp\nadd 1010 queue 8 proto tcp src-ip 10.8.5.0/24\n");
        let gap = 1500 * 8 * 1000 / 4; // each source alone fills the link
        let mut pkts = Vec::new();
        for i in 0..4000u64 {
            pkts.push((i * gap, 1500, udp(0x0a08_0909, 1, 0)));
            for h in 1..=2u32 {
                let mut k = udp(0x0a08_0500 + h, 2, 0);
                k.proto = 6;
                pkts.push((i * gap + h as u64, 1500, k));
            }
        }
        let (d, node) = run(parse(&text), &pkts);
        let m = bytes_by_src(&d, &pkts, 10_000_000_000);
        let udp_b = m[&v4_mapped(0x0a08_0909)] as f64;
        let t1 = m[&v4_mapped(0x0a08_0501)] as f64;
        let t2 = m[&v4_mapped(0x0a08_0502)] as f64;
        let tot = udp_b + t1 + t2;
        // Weights 20 : 10 : 10 -> 50 % : 25 % : 25 %.
        assert!((udp_b / tot - 0.5).abs() < 0.01, "{ty}: {}", udp_b / tot);
        assert!(
            (t1 / tot - 0.25).abs() < 0.01 && (t2 / tot - 0.25).abs() < 0.01,
            "{ty}"
        );
        let link = node.sched.instances().next().unwrap();
        // Two dynamic instances of queue 8 plus queue 10.
        let q8 = link
            .sched
            .qs
            .classes
            .iter()
            .filter(|c| c.queue == 8)
            .count();
        assert_eq!(q8, 2);
    }
}

#[test]
fn prio_starves_low_while_high_is_backlogged() {
    let text = "pipe 1 config bw 2Mbit/s\nsched 1 config type prio\nqueue 1 config sched 1 weight 1\nqueue 2 config sched 1 weight 0\n\
                add queue 1 src-ip 0.0.0.1\nadd queue 2 src-ip 0.0.0.2\n";
    // High class backlogged for the first second only.
    let mut pkts = overload(2, 2, 2_000_000);
    pkts.retain(|p| p.2.src_ip == v4_mapped(1) || p.0 < 1_000_000_000);
    let (d, _) = run(parse(text), &pkts);
    let low_early = d
        .iter()
        .filter(|x| {
            x.fate == Fate::Delivered
                && pkts[x.tag as usize].2.src_ip == v4_mapped(1)
                && x.release_ns < 1_000_000_000
        })
        .count();
    // At most the one packet on the wire when the high class first arrived.
    assert!(
        low_early <= 1,
        "low got {low_early} packets while high was backlogged"
    );
    let low_late = d
        .iter()
        .filter(|x| {
            x.fate == Fate::Delivered
                && pkts[x.tag as usize].2.src_ip == v4_mapped(1)
                && x.release_ns > 1_100_000_000
        })
        .count();
    assert!(
        low_late > 100,
        "low is served once high is gone: {low_late}"
    );
}

fn median_sojourn_ms(node: &Node) -> f64 {
    let l = node.sched.instances().next().unwrap();
    let c = l
        .sched
        .qs
        .classes
        .iter()
        .max_by_key(|c| c.stats.dequeued)
        .unwrap();
    c.stats.sojourn.quantile(0.5).unwrap() as f64 / 1e6
}

/// A responsive sender (AIMD, as TCP in congestion avoidance): its rate
/// grows by 10 Mbit/s per second and halves when it learns of a drop or a CE
/// mark, 50 ms after the drop or the departure, at most once per 100 ms (its
/// RTT). Runs `secs` seconds through the rule text.
fn aimd(text: &str, ecn: u8, secs: u64) -> (Vec<Decision>, Node, Vec<(u64, u32, FlowKey)>) {
    let mut node = Node::new(
        parse(text),
        NodeConfig {
            seed: 7,
            ..Default::default()
        },
    );
    let mut out = Vec::new();
    let mut all = Vec::new();
    let mut pkts = Vec::new();
    let (mut t, mut rate, mut last_cut) = (0u64, 5e6f64, 0u64);
    let mut seen = 0;
    let mut learn: Vec<u64> = Vec::new();
    while t < secs * 1_000_000_000 {
        let key = udp(1, 1, ecn);
        node.on_arrival(
            t,
            PacketIn {
                len_bytes: 1500,
                key,
                side: Side::A,
                tag: pkts.len() as u64,
            },
            &mut out,
        );
        pkts.push((t, 1500, key));
        for d in &out[seen..] {
            if d.ce || d.fate != Fate::Delivered {
                learn.push(d.release_ns + 50_000_000);
            }
        }
        seen = out.len();
        let gap = (1500.0 * 8.0 / rate * 1e9) as u64;
        rate += 10e6 * gap as f64 * 1e-9;
        if learn.iter().any(|&l| l <= t) {
            learn.retain(|&l| l > t);
            if t - last_cut >= 100_000_000 {
                rate /= 2.0;
                last_cut = t;
            }
        }
        t += gap;
    }
    common::drain(&mut node, &mut out);
    all.append(&mut out);
    all.sort_by_key(|d| d.tag);
    (all, node, pkts)
}

#[test]
fn codel_keeps_median_sojourn_near_target_droptail_fills() {
    let (_, tail, _) = aimd(
        "pipe 1 config bw 10Mbit/s queue 200 type fifo\nadd pipe 1 ip",
        0,
        30,
    );
    let (d, codel, _) = aimd(
        "pipe 1 config bw 10Mbit/s queue 1000 codel\nadd pipe 1 ip",
        0,
        30,
    );
    let tail_ms = median_sojourn_ms(&tail);
    let codel_ms = median_sojourn_ms(&codel);
    // 200 x 1500 B at 10 Mbit/s = 240 ms of queue: the sawtooth lives near the top.
    assert!(tail_ms > 100.0, "droptail median {tail_ms} ms");
    assert!(codel_ms < 10.0, "codel median {codel_ms} ms (target 5 ms)");
    assert!(d.iter().any(|x| x.fate.name() == "aqm-drop"));
    let l = codel.sched.instances().next().unwrap();
    let c = &l.sched.qs.classes[0];
    assert!(
        c.stats.drops_aqm > 0 && c.stats.drops_tail == 0,
        "{:?}",
        c.stats.drops_aqm
    );
}

#[test]
fn fq_codel_gives_sparse_flow_low_sojourn() {
    let text = "pipe 1 config bw 50Mbit/s\nsched 1 config type fq_codel\nadd pipe 1 ip\n";
    let mut pkts: Vec<_> = (0..25_000u64)
        .map(|i| (i * 120_000, 1500, udp(1, 1, 0)))
        .collect(); // bulk 100 Mbit/s, 3 s
    let sparse: Vec<_> = (0..150u64)
        .map(|i| (10_000_000 + i * 20_000_000 + 7, 200, udp(2, 2, 0)))
        .collect(); // 50 pkt/s
    pkts.extend(sparse);
    pkts.sort_by_key(|p| p.0);
    let (d, _) = run(parse(text), &pkts);
    let mut worst = 0;
    for x in &d {
        let (t, len, k) = pkts[x.tag as usize];
        if k.src_ip == v4_mapped(2) {
            assert_eq!(x.fate, Fate::Delivered);
            // Sojourn = release − arrival − own transmission time (no delay).
            let soj = x.release_ns - t - len as u64 * 8 * 20;
            worst = worst.max(soj);
        }
    }
    // RFC 8290: a sparse flow waits for at most the packet on the wire and
    // one quantum of the bulk flow (2 x 240 us at 50 Mbit/s).
    assert!(worst < 1_000_000, "sparse flow waited {worst} ns");
    let bulk_median = {
        let mut v: Vec<u64> = d
            .iter()
            .filter(|x| pkts[x.tag as usize].2.src_ip == v4_mapped(1) && x.fate == Fate::Delivered)
            .map(|x| x.release_ns - pkts[x.tag as usize].0)
            .collect();
        v.sort();
        v[v.len() / 2]
    };
    assert!(
        bulk_median > 3_000_000,
        "the bulk flow does queue: {bulk_median}"
    );
    assert!(worst < 500_000, "sparse flow waited {worst} ns");
}

#[test]
fn ecn_marks_instead_of_dropping() {
    for aqm in [
        "codel ecn",
        "pie max_ecnth 0.5 ecn",
        "red 0.002/5/50/0.1 ecn",
        "gred 0.002/5/50/0.1 ecn",
    ] {
        let text = format!("pipe 1 config bw 10Mbit/s queue 1000 {aqm}\nadd pipe 1 ip");
        let (ect, _, _) = aimd(&text, 2, 20);
        let marked = ect
            .iter()
            .filter(|x| x.ce && x.fate == Fate::Delivered)
            .count();
        let aqm_drops = ect
            .iter()
            .filter(|x| matches!(x.fate, Fate::RedDrop | Fate::AqmDrop))
            .count();
        assert!(marked > 10, "{aqm}: {marked} marked");
        if aqm.starts_with("codel") {
            assert_eq!(aqm_drops, 0, "{aqm}: ECT packets are marked, not dropped");
        } else {
            // PIE drops even ECT above max_ecnth (RFC 8033 §5.1); RED above max_th.
            assert!(
                marked > 2 * aqm_drops,
                "{aqm}: {marked} marked, {aqm_drops} dropped"
            );
        }
        let (not_ect, _, _) = aimd(&text, 0, 20);
        assert!(not_ect.iter().all(|x| !x.ce), "{aqm}: not-ECT never marked");
        let dropped = not_ect
            .iter()
            .filter(|x| matches!(x.fate, Fate::RedDrop | Fate::AqmDrop))
            .count();
        assert!(dropped > 10, "{aqm}: not-ECT dropped {dropped}");
    }
}

#[test]
fn words_errors_name_the_problem() {
    let cases = [
        (
            "pipe 1 config bw 1Mbit/s\nqueue 3 config sched 1 weight 200",
            "queue 3: weight is 1..100 under wf2q+",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nsched 1 config type qfq\nqueue 3 config sched 1 weight 65537",
            "1..65536 under rr and qfq",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nsched 1 config type qfq\nqueue 3 config sched 1 lmax 0",
            "lmax (bytes) is 1..65535",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nsched 1 config type qfq lmax 1500",
            "'lmax' is a word of 'queue N config'",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nsched 1 config type foo",
            "unknown scheduler type",
        ),
        ("sched 2 config type rr", "pipe 2"),
        (
            "pipe 1 config bw 1Mbit/s\nqueue 3 config sched 1 weight 0",
            "weight is 1..100",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nqueue 3 config sched 1 weight 2 weight 3",
            "given twice",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nqueue 3 config weight 2",
            "needs 'pipe M' or 'sched M'",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nadd queue 4 ip",
            "queue 4 is not configured",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nqueue 3 config sched 1 red 0.1/10/5/0.1",
            "min_th must be below max_th",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nqueue 3 config sched 1 ecn",
            "ecn needs an AQM",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nsched 1 config type wf2q+ quantum 100",
            "quantum",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nqueue 3 config sched 1 codel target 200ms interval 100ms",
            "below its interval",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nsched 1 config type wf2q+\nqueue 3 config sched 1 lmax 1500",
            "'lmax' is a parameter of qfq and rr queues (pipe 1's scheduler is wf2q+)",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nsched 1 config type fq_codel flows 0",
            "flows is 1..65536",
        ),
        (
            "pipe 1 config bw 1Mbit/s\nqueue 3 config sched 1 pie capdrop",
            "not supported",
        ),
    ];
    for (text, want) in cases {
        let e = parse_err(text);
        assert!(e.contains(want), "{text}: {e}");
    }
    // Defaults as Dummynet documents.
    let s =
        parse("pipe 1 config bw 1Mbit/s\nsched 1 config type fq_codel\nqueue 2 config sched 1\n")
            .sched;
    let p = &s.scheds[&1].params;
    assert_eq!(
        (p.quantum_bytes, p.limit_packets, p.flows),
        (1514, 10240, 1024)
    );
    let q = &s.queues[&2].params;
    assert_eq!((q.weight, q.limit_packets), (1, Some(50)));
    let s = parse(
        "pipe 1 config bw 1Mbit/s\nsched 1 config type qfq\nqueue 2 config sched 1 weight 65536 lmax 9000\nqueue 3 config sched 1\n",
    )
    .sched;
    assert_eq!(s.scheds[&1].params.kind, linkem_core::sched::SchedKind::Qfq);
    assert_eq!(
        (s.queues[&2].params.weight, s.queues[&2].params.lmax_bytes),
        (65536, Some(9000))
    );
    assert_eq!(s.queues[&3].params.lmax_bytes, None, "default: 1514");
    let s = parse("pipe 1 config bw 1Mbit/s type qfq\nqueue 2 config pipe 1 maxlen 9000\n").sched;
    assert_eq!(s.queues[&2].params.lmax_bytes, Some(9000), "maxlen is lmax");
    let s = parse("pipe 4 config bw 1Mbit/s type qfq\nqueue 2 config pipe 4 lmax 64\n").sched;
    assert_eq!(s.params(4).kind, linkem_core::sched::SchedKind::Qfq);
    let s = parse(
        "pipe 1 config bw 1Mbit/s\nqueue 2 config pipe 1 codel\nqueue 3 config pipe 1 pie ecn\n",
    )
    .sched;
    match s.queues[&2].params.aqm {
        linkem_core::aqm::AqmConfig::CoDel(c) => assert_eq!(
            (c.target_ns, c.interval_ns, c.ecn),
            (5_000_000, 100_000_000, false)
        ),
        ref a => panic!("{a:?}"),
    }
    match s.queues[&3].params.aqm {
        linkem_core::aqm::AqmConfig::Pie(c) => {
            assert_eq!(
                (c.target_ns, c.tupdate_ns, c.alpha, c.beta, c.ecn),
                (15_000_000, 15_000_000, 0.125, 1.25, true)
            )
        }
        ref a => panic!("{a:?}"),
    }
}

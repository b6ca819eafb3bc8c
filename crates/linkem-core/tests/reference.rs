//! The model against an independent, deliberately simple reference of its
//! normative semantics (see `linkem_core::link`), packet by packet.
//!
//! The reference keeps every time multiplied by the rate (so the link clock is
//! an exact integer), finds the queue occupancy by scanning all earlier
//! packets, and knows nothing of caches or fractions. Random draws cannot be
//! predicted independently, so for loss the reference takes the model's
//! answers as an oracle ("this packet drew a loss") and checks that everything
//! else (queue, link, delay, release order) is consistent with them.

use linkem_core::{Fate, Link, LinkConfig, LinkSpec, LossAt, PacketMeta};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expect {
    fate: Fate,
    release_ns: u64,
    queue_packets: u32,
}

/// The reference model. `drew_loss[i]`: packet i drew a loss (oracle).
fn reference(cfg: &LinkConfig, arrivals: &[(u64, u32)], drew_loss: &[bool]) -> Vec<Expect> {
    // Time scaled by the rate: X = t_ns · R. Without a rate, R = 1 and the link adds nothing.
    let r = cfg.rate_bps.unwrap_or(1) as u128;
    let mut accepted: Vec<(u128, u32)> = Vec::new(); // (scaled exit time, frame bytes)
    let mut link_x: u128 = 0;
    let mut last_release: u64 = 0;
    let mut last_arrival: u64 = 0;
    let nanobits_per_byte: u128 = 8_000_000_000;
    let mut tokens: Option<(u128, u64)> = cfg
        .policer
        .map(|p| (p.burst_bytes as u128 * nanobits_per_byte, 0u64));
    let mut out = Vec::new();
    for (i, &(t, len)) in arrivals.iter().enumerate() {
        let t = t.max(last_arrival);
        last_arrival = t;
        let tx = t as u128 * r;
        let in_queue: Vec<&(u128, u32)> =
            accepted.iter().filter(|(exit_x, _)| *exit_x > tx).collect();
        let occ = in_queue.len() as u32;
        let occ_bytes: u64 = in_queue.iter().map(|(_, l)| *l as u64).sum();
        let mut e = Expect {
            fate: Fate::Delivered,
            release_ns: t,
            queue_packets: occ,
        };
        if let (Some(p), Some((tok, last))) = (cfg.policer, tokens.as_mut()) {
            let cap = p.burst_bytes as u128 * nanobits_per_byte;
            *tok = (*tok + (t - *last) as u128 * p.rate_bps as u128).min(cap);
            *last = t;
            let cost = len as u128 * nanobits_per_byte;
            if cost > *tok {
                e.fate = Fate::Policed;
                out.push(e);
                continue;
            }
            *tok -= cost;
        }
        if drew_loss[i] && cfg.loss_at == LossAt::Arrival {
            e.fate = Fate::Loss;
            out.push(e);
            continue;
        }
        let limit_p = cfg.queue_packets.unwrap_or(u32::MAX);
        let limit_b = cfg.queue_bytes.unwrap_or(u64::MAX);
        if occ >= limit_p || occ_bytes + len as u64 > limit_b {
            e.fate = Fate::QueueFull;
            out.push(e);
            continue;
        }
        let exit_ns = if cfg.rate_bps.is_some() {
            let bits = (len as u128 + cfg.overhead_bytes as u128) * 8;
            link_x = link_x.max(tx) + bits * 1_000_000_000;
            accepted.push((link_x, len));
            (link_x / r) as u64
        } else {
            t
        };
        if drew_loss[i] {
            e.fate = Fate::Loss;
            e.release_ns = exit_ns;
            out.push(e);
            continue;
        }
        let release = (exit_ns + cfg.delay_ns).max(last_release);
        last_release = release;
        e.release_ns = release;
        out.push(e);
    }
    out
}

fn run_model(cfg: &LinkConfig, seed: u64, arrivals: &[(u64, u32)]) -> Vec<Expect> {
    let mut link = Link::new(cfg.clone(), seed, 0);
    arrivals
        .iter()
        .map(|&(t, len)| {
            let v = link.on_arrival(t, PacketMeta { len_bytes: len });
            Expect {
                fate: v.fate,
                release_ns: v.release_ns,
                queue_packets: v.queue_packets,
            }
        })
        .collect()
}

fn check(words: &str, arrivals: &[(u64, u32)]) -> Result<(), TestCaseError> {
    let spec = LinkSpec::parse(words).map_err(|e| TestCaseError::fail(format!("{words}: {e}")))?;
    let got = run_model(&spec.link, 7, arrivals);
    let drew_loss: Vec<bool> = got.iter().map(|g| g.fate == Fate::Loss).collect();
    let want = reference(&spec.link, arrivals, &drew_loss);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        prop_assert_eq!(g, w, "packet {} of {:?} with '{}'", i, arrivals[i], words);
    }
    Ok(())
}

/// Arrival times (non-decreasing, with bursts of equal stamps) and frame lengths.
fn arrivals() -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..2_000, 0u64..2_000_000],
            1u32..=1514,
        ),
        1..200,
    )
    .prop_map(|v| {
        let mut t = 0u64;
        v.into_iter()
            .map(|(gap, len)| {
                t += gap;
                (t, len)
            })
            .collect()
    })
}

fn rate() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u64..100_000).prop_map(|r| format!("rate {r}kbit")),
        (1u64..10_000).prop_map(|r| format!("rate {r}mbit")),
        (1u64..1_000_000_000).prop_map(|r| format!("rate {r}bit")),
        Just("rate 100gbit".to_string()),
        Just(String::new()),
    ]
}

fn queue() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u32..20).prop_map(|n| format!("queue {n}")),
        (1u32..20).prop_map(|n| format!("limit {n}")),
        (1u32..40_000).prop_map(|n| format!("queue {n}B")),
        Just("queue unlimited".to_string()),
        Just(String::new()),
    ]
}

fn delay() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..100_000_000).prop_map(|d| format!("delay {d}ns")),
        Just(String::new())
    ]
}

fn overhead() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("overhead ethernet".to_string()),
        (0u32..100).prop_map(|n| format!("overhead {n}"))
    ]
}

fn policer() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just(String::new()),
        1 => (1u64..100_000, 1500u64..100_000).prop_map(|(r, b)| format!("policer {r}kbit burst {b}B")),
    ]
}

fn loss() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => Just(String::new()),
        1 => (1u32..50).prop_map(|p| format!("loss {p}%")),
        1 => (1u32..50).prop_map(|p| format!("loss {p}% loss-at link")),
        1 => Just("loss gemodel 5% 30%".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn model_matches_the_reference(
        arrivals in arrivals(),
        parts in (rate(), queue(), delay(), overhead(), policer(), loss()),
    ) {
        let (r, q, d, o, p, l) = parts;
        let words = [r, q, d, o, p, l].join(" ");
        check(&words, &arrivals)?;
    }

    /// netem and Dummynet spellings of one link give the same packet fates and times.
    #[test]
    fn netem_and_dummynet_words_agree(arrivals in arrivals(), kbit in 1u64..50_000, q in 1u32..30, ms in 0u64..200) {
        let netem = LinkSpec::parse(&format!("rate {kbit}kbit limit {q} delay {ms}ms")).unwrap();
        let dummynet = LinkSpec::parse(&format!("bw {kbit}Kbit/s queue {q} delay {ms}ms")).unwrap();
        prop_assert_eq!(run_model(&netem.link, 1, &arrivals), run_model(&dummynet.link, 1, &arrivals));
    }

    /// Jitter with the default rule never reorders; releases stay within [t_L + D - J, t_L + D + J]
    /// or at the previous release.
    #[test]
    fn jitter_never_reorders_by_default(arrivals in arrivals(), d in 1u64..50, j in 1u64..50) {
        let spec = LinkSpec::parse(&format!("rate 10mbit queue unlimited delay {d}ms {j}ms")).unwrap();
        let mut no_jitter = spec.link.clone();
        no_jitter.delay_ns = 0;
        no_jitter.jitter_ns = 0;
        let exits = run_model(&no_jitter, 1, &arrivals);
        let got = run_model(&spec.link, 1, &arrivals);
        let mut last = 0;
        for (g, e) in got.iter().zip(&exits) {
            prop_assert!(g.release_ns >= last);
            let lo = (e.release_ns + d * 1_000_000).saturating_sub(j * 1_000_000);
            let hi = e.release_ns + (d + j) * 1_000_000;
            prop_assert!(g.release_ns >= lo && (g.release_ns <= hi || g.release_ns == last));
            last = g.release_ns;
        }
    }
}

/// The six-packet vector of the project's style guide: 20, 20, 1600, 20, 1600, 20
/// bytes at t=0 through 100 kbit/s and 5 ms.
#[test]
fn golden_six_packets() {
    let spec = LinkSpec::parse("rate 100kbit delay 5ms").unwrap();
    let arrivals: Vec<(u64, u32)> = [20, 20, 1600, 20, 1600, 20]
        .iter()
        .map(|&l| (0, l))
        .collect();
    let got: Vec<u64> = run_model(&spec.link, 1, &arrivals)
        .iter()
        .map(|e| e.release_ns)
        .collect();
    assert_eq!(
        got,
        [
            6_600_000,
            8_200_000,
            136_200_000,
            137_800_000,
            265_800_000,
            267_400_000
        ]
    );
}

/// The n-th back-to-back packet leaves at start + total_bits / R exactly (floored), with a
/// rate that does not divide 1e9 evenly: no drift after a million packets.
#[test]
fn no_cumulative_drift() {
    let spec = LinkSpec::parse("rate 3bit queue unlimited").unwrap();
    let mut link = Link::new(spec.link, 1, 0);
    let mut last = 0;
    for n in 1..=1_000_000u64 {
        last = link.on_arrival(5, PacketMeta { len_bytes: 1 }).release_ns;
        if n % 99_991 == 0 {
            assert_eq!(
                last,
                5 + (n as u128 * 8 * 1_000_000_000 / 3) as u64,
                "packet {n}"
            );
        }
    }
    assert_eq!(last, 5 + (8_000_000_000_000_000u128 / 3) as u64);
}

/// An exit time equal to the arrival has left the queue; one a nanosecond later has not.
#[test]
fn exit_at_arrival_has_left() {
    // 125 bytes at 1 Mbit/s take exactly 1 ms.
    let spec = LinkSpec::parse("rate 1mbit queue 1").unwrap();
    let mut link = Link::new(spec.link.clone(), 1, 0);
    assert_eq!(
        link.on_arrival(0, PacketMeta { len_bytes: 125 }).fate,
        Fate::Delivered
    );
    let v = link.on_arrival(999_999, PacketMeta { len_bytes: 125 });
    assert_eq!((v.fate, v.queue_packets), (Fate::QueueFull, 1));
    let v = link.on_arrival(1_000_000, PacketMeta { len_bytes: 125 });
    assert_eq!(
        (v.fate, v.queue_packets, v.release_ns),
        (Fate::Delivered, 0, 2_000_000)
    );
}

/// Byte limits count frame bytes (not overhead) of the packets still queued.
#[test]
fn byte_queue_limit_counts_frames() {
    let spec = LinkSpec::parse("rate 1mbit queue 3000B overhead ethernet").unwrap();
    let mut link = Link::new(spec.link, 1, 0);
    let fates: Vec<Fate> = [1500, 1500, 1, 1000]
        .iter()
        .map(|&l| link.on_arrival(0, PacketMeta { len_bytes: l }).fate)
        .collect();
    assert_eq!(
        fates,
        [
            Fate::Delivered,
            Fate::Delivered,
            Fate::QueueFull,
            Fate::QueueFull
        ]
    );
}

/// A policer admits its burst at once, then exactly its rate.
#[test]
fn policer_admits_burst_then_rate() {
    let spec = LinkSpec::parse("policer 8kbit burst 3000B").unwrap();
    let mut link = Link::new(spec.link, 1, 0);
    let at = |link: &mut Link, t: u64| link.on_arrival(t, PacketMeta { len_bytes: 1000 }).fate;
    assert_eq!(at(&mut link, 0), Fate::Delivered);
    assert_eq!(at(&mut link, 0), Fate::Delivered);
    assert_eq!(at(&mut link, 0), Fate::Delivered);
    assert_eq!(at(&mut link, 0), Fate::Policed);
    // 8 kbit/s refills 1000 bytes in exactly 1 s.
    assert_eq!(at(&mut link, 999_999_999), Fate::Policed);
    assert_eq!(at(&mut link, 1_999_999_999), Fate::Delivered);
}

/// `reorder allow` lets jitter reorder; the default does not.
#[test]
fn reorder_allow_lets_jitter_reorder() {
    let count_inversions = |words: &str| {
        let spec = LinkSpec::parse(words).unwrap();
        let mut link = Link::new(spec.link, 3, 0);
        let releases: Vec<u64> = (0..1000)
            .map(|i| {
                link.on_arrival(i * 100_000, PacketMeta { len_bytes: 100 })
                    .release_ns
            })
            .collect();
        releases.windows(2).filter(|w| w[1] < w[0]).count()
    };
    assert_eq!(count_inversions("delay 10ms 5ms"), 0);
    assert!(count_inversions("delay 10ms 5ms reorder allow") > 100);
}

/// netem's `reorder P gap N`: with P = 100 %, every N-th packet skips the delay.
#[test]
fn netem_reorder_gap() {
    let spec = LinkSpec::parse("delay 10ms reorder 100% gap 5").unwrap();
    let mut link = Link::new(spec.link, 1, 0);
    let releases: Vec<u64> = (0..20)
        .map(|i| {
            link.on_arrival(i * 1_000, PacketMeta { len_bytes: 100 })
                .release_ns
        })
        .collect();
    for (i, r) in releases.iter().enumerate() {
        let t = i as u64 * 1_000;
        if i % 5 == 4 {
            assert_eq!(*r, t, "packet {i} skips the delay");
        } else {
            assert_eq!(*r, t + 10_000_000, "packet {i} is delayed");
        }
    }
}

/// Reconfiguring keeps decided packets and the link clock; the new delay applies from then on.
#[test]
fn reconfigure_applies_from_its_time_on() {
    let mut link = Link::new(LinkSpec::parse("rate 1mbit delay 10ms").unwrap().link, 1, 0);
    let a = link.on_arrival(0, PacketMeta { len_bytes: 125 });
    link.reconfigure(
        100,
        LinkSpec::parse("rate 1mbit delay 1ms reorder allow")
            .unwrap()
            .link,
    );
    let b = link.on_arrival(200, PacketMeta { len_bytes: 125 });
    assert_eq!(a.release_ns, 11_000_000);
    // The link was busy until 1 ms; the packet exits at 2 ms and is delayed 1 ms.
    assert_eq!(b.release_ns, 3_000_000);
    assert_eq!(b.queue_packets, 1);
}

/// Same seed, same verdicts; another seed, other verdicts; the two directions differ.
#[test]
fn seeds_decide_every_draw() {
    let spec =
        LinkSpec::parse("delay 10ms 3ms distribution normal loss 20% duplicate 5% corrupt 5%")
            .unwrap();
    let run = |seed: u64, dir: u64| {
        let mut link = Link::new(spec.link.clone(), seed, dir);
        (0..2000)
            .map(|i| link.on_arrival(i * 10_000, PacketMeta { len_bytes: 200 }))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1, 0), run(1, 0));
    assert_ne!(run(1, 0), run(2, 0));
    assert_ne!(run(1, 0), run(1, 1));
}

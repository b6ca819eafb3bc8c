//! A link running a mahimahi trace against a reference written from
//! mahimahi's `LinkQueue` (src/frontend/link_queue.cc): a queue of packets, a
//! packet in transit with its bytes left, and `rationalize(now)`, which burns
//! every delivery opportunity at or before `now` in order, 1504 bytes each,
//! before a packet that arrives at `now` joins the queue. The reference keeps
//! times in ns rather than mahimahi's ms clock, starts the trace at the first
//! arrival, and carries packets of any size; it knows nothing of the closed
//! form the link computes.

use linkem_core::{Fate, Link, LinkSpec, PacketMeta};
use proptest::prelude::*;
use std::collections::VecDeque;

const PACKET_SIZE: u32 = 1504;
const L2_BYTES: u32 = 14;

struct Reference {
    schedule_ms: Vec<u64>,
    repeat: bool,
    base_ns: u64,
    next: usize,
    finished: bool,
    /// (packet index, IP bytes)
    queue: VecDeque<(usize, u32)>,
    in_transit: Option<(usize, u32)>,
    departure_ns: Vec<Option<u64>>,
}

impl Reference {
    fn next_delivery_ns(&self) -> Option<u64> {
        (!self.finished).then(|| self.base_ns + self.schedule_ms[self.next] * 1_000_000)
    }

    fn rationalize(&mut self, now_ns: u64) {
        while let Some(t) = self.next_delivery_ns().filter(|t| *t <= now_ns) {
            self.next = (self.next + 1) % self.schedule_ms.len();
            if self.next == 0 {
                if self.repeat {
                    self.base_ns += self.schedule_ms.last().unwrap() * 1_000_000;
                } else {
                    self.finished = true;
                }
            }
            let mut bytes_left = PACKET_SIZE;
            while bytes_left > 0 {
                if self.in_transit.is_none() {
                    match self.queue.pop_front() {
                        Some(p) => self.in_transit = Some(p),
                        None => break,
                    }
                }
                let (i, left) = self.in_transit.as_mut().unwrap();
                let amount = bytes_left.min(*left);
                *left -= amount;
                bytes_left -= amount;
                if *left == 0 {
                    self.departure_ns[*i] = Some(t);
                    self.in_transit = None;
                }
            }
        }
    }

    /// Departure of each packet (`None`: never carried).
    fn run(schedule_ms: &[u64], repeat: bool, arrivals: &[(u64, u32)]) -> Vec<Option<u64>> {
        let mut r = Reference {
            schedule_ms: schedule_ms.to_vec(),
            repeat,
            base_ns: arrivals.first().map_or(0, |a| a.0),
            next: 0,
            finished: false,
            queue: VecDeque::new(),
            in_transit: None,
            departure_ns: vec![None; arrivals.len()],
        };
        for (i, &(t, len)) in arrivals.iter().enumerate() {
            r.rationalize(t);
            r.queue.push_back((i, len.saturating_sub(L2_BYTES).max(1)));
        }
        while !(r.queue.is_empty() && r.in_transit.is_none()) {
            match r.next_delivery_ns() {
                Some(t) => r.rationalize(t),
                None => break,
            }
        }
        r.departure_ns
    }
}

fn trace_text(schedule_ms: &[u64]) -> String {
    schedule_ms.iter().map(|ms| format!("{ms}\n")).collect()
}

fn link_with(words: &str, text: &str) -> Link {
    let words: Vec<&str> = words.split_whitespace().collect();
    let mut files = |_: &str| Ok(text.to_string());
    let spec = LinkSpec::parse_words(&words, &mut files).unwrap();
    Link::new(spec.link, 1, 0)
}

fn check(schedule_ms: &[u64], once: bool, delay_ms: u64, arrivals: &[(u64, u32)]) {
    let word = if once { "trace-once" } else { "trace" };
    let mut link = link_with(
        &format!("{word} t queue unlimited delay {delay_ms}ms"),
        &trace_text(schedule_ms),
    );
    let expected = Reference::run(schedule_ms, !once, arrivals);
    for (i, (&(t, len), want)) in arrivals.iter().zip(&expected).enumerate() {
        let v = link.on_arrival(t, PacketMeta { len_bytes: len });
        match want {
            Some(dep) => {
                assert_eq!(
                    (v.fate, v.release_ns),
                    (Fate::Delivered, dep + delay_ms * 1_000_000),
                    "packet {i} ({len} B at {t} ns): trace {schedule_ms:?}"
                );
            }
            None => assert_eq!(
                v.fate,
                Fate::QueueFull,
                "packet {i} ({len} B at {t} ns) is never carried by the reference"
            ),
        }
    }
}

/// A trace: offsets that never decrease, the last one non-zero.
fn schedule() -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::vec(0u64..4, 1..24).prop_map(|steps| {
        let mut ms = 0;
        let mut out: Vec<u64> = steps
            .iter()
            .map(|s| {
                ms += s;
                ms
            })
            .collect();
        if *out.last().unwrap() == 0 {
            *out.last_mut().unwrap() = 1;
        }
        out
    })
}

/// Arrivals: gaps in ns, or whole ms so that arrivals fall on opportunities;
/// sizes from below the link-layer header to several opportunities.
fn traffic() -> impl Strategy<Value = Vec<(u64, u32)>> {
    let gap = prop_oneof![0u64..3_000_000, (0u64..4).prop_map(|ms| ms * 1_000_000)];
    let len = prop_oneof![1u32..80, 60u32..1600, 1500u32..6100];
    proptest::collection::vec((gap, len), 1..300).prop_map(|v| {
        let mut t = 5_000_000_000;
        v.into_iter()
            .map(|(g, l)| {
                t += g;
                (t, l)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_looping_trace_decides_as_mahimahi(s in schedule(), a in traffic(), d in 0u64..30) {
        check(&s, false, d, &a);
    }

    #[test]
    fn a_trace_played_once_decides_as_mahimahi(s in schedule(), a in traffic()) {
        check(&s, true, 0, &a);
    }
}

#[test]
fn small_packets_share_an_opportunity_and_large_ones_span_several() {
    // Opportunities at 1, 2, 3 ms, then 4, 5, 6 ms...
    let mut link = link_with("trace t", "1\n2\n3\n");
    let t0 = 1_000_000_000;
    let ms = |n: u64| t0 + n * 1_000_000;
    let mut send = |t: u64, len: u32| link.on_arrival(t, PacketMeta { len_bytes: len }).release_ns;
    // 3 packets of 500 IP bytes fit one opportunity (1500 ≤ 1504).
    assert_eq!(
        [send(t0, 514), send(t0, 514), send(t0, 514)],
        [ms(1), ms(1), ms(1)]
    );
    // 4 bytes are left at 1 ms; this one needs 496 more from 2 ms.
    assert_eq!(send(t0, 514), ms(2));
    // 9000 IP bytes: 1008 left at 2 ms, then 6 more opportunities (3..8 ms).
    assert_eq!(send(t0, 9014), ms(8));
    // An arrival exactly at an opportunity does not take it; unused ones are lost.
    assert_eq!(send(ms(20), 100), ms(21));
    assert_eq!(send(ms(21), 100), ms(22));
}

#[test]
fn a_repeated_offset_is_more_capacity_and_the_queue_limit_holds() {
    let mut link = link_with("trace t queue 2", "5\n5\n5\n10\n");
    let t0 = 0;
    let mut send = |t: u64| link.on_arrival(t, PacketMeta { len_bytes: 1518 });
    let v: Vec<(Fate, u64, u32)> = (0..4)
        .map(|_| {
            let v = send(t0);
            (v.fate, v.release_ns, v.queue_packets)
        })
        .collect();
    assert_eq!(
        v,
        [
            (Fate::Delivered, 5_000_000, 0),
            (Fate::Delivered, 5_000_000, 1),
            (Fate::QueueFull, 0, 2),
            (Fate::QueueFull, 0, 2),
        ]
    );
    // At 5 ms both have left; the third opportunity at 5 ms is not strictly
    // after an arrival at 5 ms, so it goes unused and the packet takes 10 ms.
    assert_eq!(send(5_000_000).release_ns, 10_000_000);
}

#[test]
fn a_trace_and_a_rate_conflict_and_a_bad_file_names_its_line() {
    let mut files = |name: &str| match name {
        "good" => Ok("1\n2\n".to_string()),
        "bad" => Ok("1\n\n2\n".to_string()),
        _ => Err(format!("'{name}': no such file")),
    };
    let e = LinkSpec::parse_words(&["trace", "good", "rate", "1mbit"], &mut files).unwrap_err();
    assert!(e.message.contains("'trace'") && e.word == "rate", "{e}");
    let e = LinkSpec::parse_words(&["trace-once", "bad"], &mut files).unwrap_err();
    assert_eq!(
        e.to_string(),
        "'bad' (word 2): trace-once 'bad' line 2: empty line (each line is one offset in ms)"
    );
    let e = LinkSpec::parse_words(&["trace", "none"], &mut files).unwrap_err();
    assert_eq!(e.to_string(), "'none' (word 2): trace 'none': no such file");
    // A later layer's rate replaces an earlier layer's trace, and the words print back.
    let spec = LinkSpec::parse_layers(
        &[
            &["trace-once", "good", "delay", "5ms"][..],
            &["rate", "1mbit"],
        ],
        linkem_core::Dialect::Linkem,
        &mut files,
    )
    .unwrap();
    assert_eq!(
        (spec.link.trace.is_none(), spec.link.rate_bps),
        (true, Some(1_000_000))
    );
    let spec = LinkSpec::parse_words(&["trace-once", "good", "delay", "5ms"], &mut files).unwrap();
    assert_eq!(
        spec.link.to_string(),
        "trace-once good queue 1000 delay 5ms"
    );
}

//! netem's `slot` against a reference that runs netem's dequeue (sch_netem.c,
//! `netem_dequeue` and `get_slot_next`) tick by tick (1 µs): at each tick where
//! the head packet is due, the queue is polled until it gives nothing; a poll
//! that finds the next slot before the head's due time draws a new one from the
//! poll's instant, a poll at or after both sends, and a slot whose packets or
//! bytes run out draws the next from the send's instant. Fixed slot times (MIN
//! = MAX) make it exact; ranges are checked for bounds separately.

use linkem_core::{Fate, Link, LinkSpec, PacketMeta};
use proptest::prelude::*;

const US: u64 = 1_000;

fn reference(
    slot_us: u64,
    packets: Option<u32>,
    bytes: Option<u64>,
    due: &[(u64, u32)],
) -> Vec<u64> {
    let (max_packets, max_bytes) = (
        packets.map_or(i64::MAX, i64::from),
        bytes.map_or(i64::MAX, |b| b as i64),
    );
    let (mut slot_next, mut packets_left, mut bytes_left) = (0u64, max_packets, max_bytes);
    let mut out = Vec::new();
    let mut head = 0;
    let end = due.last().map_or(0, |d| d.0) + (due.len() as u64 + 2) * slot_us + 1;
    for now in 0..=end {
        while let Some(&(t, len)) = due.get(head).filter(|d| d.0 <= now) {
            if slot_next < t {
                slot_next = now + slot_us;
                packets_left = max_packets;
                bytes_left = max_bytes;
            }
            if t <= now && slot_next <= now {
                out.push(now);
                head += 1;
                packets_left -= 1;
                bytes_left -= i64::from(len);
                if packets_left <= 0 || bytes_left <= 0 {
                    slot_next = now + slot_us;
                    packets_left = max_packets;
                    bytes_left = max_bytes;
                }
            } else {
                break;
            }
        }
    }
    out
}

fn words(slot_us: u64, packets: Option<u32>, bytes: Option<u64>) -> String {
    let mut w = format!("slot {slot_us}us");
    if let Some(n) = packets {
        w += &format!(" packets {n}");
    }
    if let Some(b) = bytes {
        w += &format!(" bytes {b}B");
    }
    w
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn slots_release_as_netem_dequeues(
        slot_us in 1u64..400,
        packets in proptest::option::of(1u32..6),
        bytes in proptest::option::of(100u64..5000),
        gaps in proptest::collection::vec((0u64..300, 40u32..1600), 1..200),
    ) {
        let mut t = 1;
        let due: Vec<(u64, u32)> = gaps.iter().map(|&(g, l)| { t += g; (t, l) }).collect();
        let expected = reference(slot_us, packets, bytes, &due);
        let spec = LinkSpec::parse(&words(slot_us, packets, bytes)).unwrap();
        let mut link = Link::new(spec.link, 3, 0);
        for (i, (&(t, len), want)) in due.iter().zip(&expected).enumerate() {
            let v = link.on_arrival(t * US, PacketMeta { len_bytes: len });
            prop_assert_eq!(v.fate, Fate::Delivered);
            prop_assert_eq!(v.release_ns, want * US, "packet {} ({} B due at {} us)", i, len, t);
        }
    }
}

#[test]
fn a_slot_range_draws_within_it_and_slots_bunch_packets() {
    let spec = LinkSpec::parse("slot 800us 1200us packets 4").unwrap();
    let mut link = Link::new(spec.link, 9, 0);
    let mut releases = Vec::new();
    // A packet every 10 us: each slot takes 4, the next opens 800..1200 us later.
    for i in 0..4000u64 {
        releases.push(
            link.on_arrival((5 + i * 10) * US, PacketMeta { len_bytes: 100 })
                .release_ns,
        );
    }
    let mut slots: Vec<u64> = releases.clone();
    slots.dedup();
    for pair in slots.windows(2) {
        let gap = pair[1] - pair[0];
        assert!((800 * US..1200 * US).contains(&gap), "slot gap {gap} ns");
    }
    for s in &slots[..slots.len() - 1] {
        assert_eq!(
            releases.iter().filter(|r| *r == s).count(),
            4,
            "slot at {s}"
        );
    }
    assert!(releases.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn slot_words_print_back_and_refuse_what_has_no_meaning() {
    for w in [
        "slot 1ms",
        "slot 800us 1.2ms packets 16 bytes 65536B",
        "slot distribution normal 1ms 200us packets 8",
    ] {
        let spec = LinkSpec::parse(w).unwrap();
        let back = spec.link.to_string();
        assert!(back.contains(w), "{w} printed as {back}");
        assert_eq!(LinkSpec::parse(&back).unwrap(), spec);
    }
    for (w, msg) in [
        ("slot 2ms 1ms", "below its MIN"),
        ("slot 0ms", "above 0"),
        ("slot 1ms packets 0", "1.."),
        ("slot", "needs"),
        ("slot distribution", "needs"),
    ] {
        let e = LinkSpec::parse(w).unwrap_err();
        assert!(e.message.contains(msg), "{w}: {e}");
    }
}

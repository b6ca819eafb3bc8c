//! Service orders Dummynet's own schedulers give (FreeBSD
//! `sys/netpfil/ipfw/dn_sched_{prio,rr,wf2q}.c`), worked out by hand from
//! their rules (docs/model.md, "Schedulers") for short enqueue/dequeue
//! sequences, and the words that configure them.

mod common;

use common::{parse, parse_err};
use linkem_core::sched::{QueueParams, Sched, SchedKind, SchedParams};
use std::sync::Arc;

/// A scheduler of `kind` with one class per entry of `classes`.
fn sched(kind: SchedKind, classes: &[QueueParams]) -> Sched {
    let mut s = Sched::new(SchedParams::new(kind));
    for (i, q) in classes.iter().enumerate() {
        s.add_class(Arc::new(q.clone()), i as u32, 0);
    }
    s
}

fn q(weight: u32) -> QueueParams {
    QueueParams {
        weight,
        pri: weight,
        limit_packets: Some(100),
        ..Default::default()
    }
}

/// Packet ids are handles; `enq(s, class, id, len)`.
fn enq(s: &mut Sched, c: u32, id: u32, len: u32) {
    let pkt = linkem_core::sched::Pkt {
        handle: id,
        len_bytes: len,
        enq_ns: 0,
        ect: false,
        ce: false,
    };
    s.enqueue(0, c, pkt, (0, 0), &mut || 0.5, &mut Vec::new())
        .expect("room");
}

fn deq(s: &mut Sched) -> Option<u32> {
    s.dequeue(0, &mut Vec::new()).map(|(_, p, _)| p.handle)
}

fn drain(s: &mut Sched) -> Vec<u32> {
    std::iter::from_fn(|| deq(s)).collect()
}

#[test]
fn prio_serves_level_0_first() {
    // Class 0 at level 5, class 1 at level 0 (weight 0): dn_sched_prio takes ffs().
    let mut s = sched(SchedKind::Prio, &[q(5), q(0)]);
    enq(&mut s, 0, 10, 100);
    enq(&mut s, 0, 11, 100);
    enq(&mut s, 1, 20, 100);
    assert_eq!(drain(&mut s), [20, 10, 11]);
}

#[test]
fn prio_queues_of_one_level_share_one_fifo() {
    // Dummynet appends a packet to the queue already backlogged at its level,
    // so the level is served in arrival order, not by turns.
    let mut s = sched(SchedKind::Prio, &[q(3), q(3), q(7)]);
    for (c, id) in [(0, 1), (0, 2), (0, 3), (1, 4), (2, 9), (1, 5), (0, 6)] {
        enq(&mut s, c, id, 100);
    }
    assert_eq!(drain(&mut s), [1, 2, 3, 4, 5, 6, 9]);
    // The shared FIFO is the first queue's: its limit holds for both.
    let mut small = q(3);
    small.limit_packets = Some(2);
    let mut s = sched(SchedKind::Prio, &[small, q(3)]);
    enq(&mut s, 0, 1, 100);
    enq(&mut s, 1, 2, 100);
    let pkt = linkem_core::sched::Pkt {
        handle: 3,
        len_bytes: 100,
        enq_ns: 0,
        ect: false,
        ce: false,
    };
    assert!(
        s.enqueue(0, 1, pkt, (0, 0), &mut || 0.5, &mut Vec::new())
            .is_err(),
        "queue 1's packets join queue 0's FIFO, full at 2"
    );
    assert_eq!(s.qs.classes[0].stats.drops_tail, 1);
    // Once the level empties, the next packet's own queue owns it.
    assert_eq!(drain(&mut s), [1, 2]);
    enq(&mut s, 1, 4, 100);
    assert_eq!(s.qs.classes[1].fifo.len(), 1);
}

#[test]
fn drr_an_emptied_queue_keeps_its_turn_and_credit() {
    // Quantum 1000 each. A (class 0) sends 300 and empties but stays at the
    // head of the ring with credit 700; its next packet, arriving before the
    // ring turns, is sent before B's.
    let mut p = q(1);
    p.lmax_bytes = Some(1000);
    let mut s = sched(SchedKind::Rr, &[p.clone(), p]);
    enq(&mut s, 0, 1, 300);
    enq(&mut s, 1, 2, 300);
    assert_eq!(deq(&mut s), Some(1));
    enq(&mut s, 0, 3, 300);
    assert_eq!(drain(&mut s), [3, 2]);
}

#[test]
fn drr_quantum_is_weight_times_the_queues_lmax() {
    // A: lmax 500 → 1 packet of 500 per round; B: weight 2 × lmax 750 → 3.
    let mut a = q(1);
    a.lmax_bytes = Some(500);
    let mut b = q(2);
    b.lmax_bytes = Some(750);
    let mut s = sched(SchedKind::Rr, &[a, b]);
    for i in 0..4 {
        enq(&mut s, 0, i, 500);
    }
    for i in 10..18 {
        enq(&mut s, 1, i, 500);
    }
    assert_eq!(drain(&mut s), [0, 10, 11, 12, 1, 13, 14, 15, 2, 16, 17, 3]);
}

#[test]
fn drr_credit_is_given_when_the_ring_turns() {
    // Dummynet gives Q at joining and Q each time a too-large head turns the
    // ring. A: Q 1000, B: Q 1000. A's 1200-byte head waits one round (credit
    // 1000 → 2000), B sends its 400 + 400 meanwhile, then must wait for 1200
    // too.
    let mut p = q(1);
    p.lmax_bytes = Some(1000);
    let mut s = sched(SchedKind::Rr, &[p.clone(), p]);
    enq(&mut s, 0, 1, 1200);
    enq(&mut s, 0, 2, 900);
    enq(&mut s, 1, 3, 400);
    enq(&mut s, 1, 4, 400);
    enq(&mut s, 1, 5, 1200);
    // A: 1200 > 1000 → credit 2000, turn. B: 400, 400 (credit 200), 1200 > 200
    // → credit 1200, turn. A: 1200 (800 left), 900 > 800 → 1800, turn.
    // B: 1200 (0 left), empty → leaves when its turn next comes. A: 900.
    assert_eq!(drain(&mut s), [3, 4, 1, 5, 2]);
}

#[test]
fn wf2q_a_returning_flow_keeps_its_place() {
    // Weights 1 and 1. A's 500 leaves first (V = 250); A stays in the weight
    // sum while idle, so B's 1000 moves V only to 750 (then to B's next start,
    // 1000). A returns with 900: S = max(F = 500, V = 1000), F = 1900 < B's
    // 2000, so A goes first. Taking A out of the sum at once (V = 1250)
    // would put A's F at 2150, after B.
    let mut s = sched(SchedKind::Wf2q, &[q(1), q(1)]);
    enq(&mut s, 0, 1, 500);
    for id in [2, 3, 4] {
        enq(&mut s, 1, id, 1000);
    }
    assert_eq!(deq(&mut s), Some(1));
    assert_eq!(deq(&mut s), Some(2));
    enq(&mut s, 0, 5, 900);
    assert_eq!(drain(&mut s), [5, 3, 4]);
}

#[test]
fn wf2q_virtual_time_restarts_when_the_scheduler_empties() {
    // A (2000) and B (1500): B first (V 750), then A (V 1750, A idle with
    // F = 2000 > V). A dequeue with nothing backlogged resets V and W, so A
    // and B start afresh: A's 90 beats B's 100. Without the reset, A would
    // start at its old F (2000) and B's 100 would go first.
    let mut s = sched(SchedKind::Wf2q, &[q(1), q(1)]);
    enq(&mut s, 0, 1, 2000);
    enq(&mut s, 1, 2, 1500);
    assert_eq!(drain(&mut s), [2, 1]);
    enq(&mut s, 1, 3, 100);
    enq(&mut s, 0, 4, 90);
    assert_eq!(drain(&mut s), [4, 3]);
}

#[test]
fn words_follow_dummynets_parameters() {
    let base = "pipe 1 config bw 1Mbit/s\n";
    // prio: the weight is the level, 0 accepted and the default.
    let s = parse(&format!(
        "{base}sched 1 config type prio\nqueue 2 config sched 1 weight 0\nqueue 3 config sched 1\nqueue 4 config sched 1 weight 31\n"
    ))
    .sched;
    let lv: Vec<u32> = [2, 3, 4].iter().map(|n| s.queues[n].params.pri).collect();
    assert_eq!(lv, [0, 0, 31]);
    // rr: lmax per queue, 64..2048; weight up to 65536; quantum is the default lmax.
    let s = parse(&format!(
        "{base}sched 1 config type rr quantum 1000\nqueue 2 config sched 1 weight 65536 lmax 64\n"
    ))
    .sched;
    assert_eq!(s.queues[&2].params.lmax_bytes, Some(64));
    assert_eq!(s.scheds[&1].params.quantum_bytes, 1000);
    for (text, want) in [
        (
            "sched 1 config type prio\nqueue 2 config sched 1 weight 32",
            "weight is 0..31 under prio",
        ),
        (
            "sched 1 config type prio\nqueue 2 config sched 1 pri 3",
            "prio's level is the queue's weight",
        ),
        (
            "sched 1 config type wf2q+\nqueue 2 config sched 1 weight 0",
            "weight is 1..100 under wf2q+",
        ),
        (
            "sched 1 config type rr\nqueue 2 config sched 1 lmax 63",
            "lmax is 64..2048 bytes under rr",
        ),
        (
            "sched 1 config type rr\nqueue 2 config sched 1 lmax 2049",
            "lmax is 64..2048 bytes under rr",
        ),
        (
            "sched 1 config type rr quantum 4000",
            "quantum under rr (the default lmax of its queues, in bytes) is 64..2048",
        ),
        (
            "sched 1 config type rr\nqueue 2 config sched 1 weight 65537",
            "weight is 1..100 under wf2q+, 1..65536 under rr and qfq",
        ),
        (
            "sched 1 config type wf2q+\nqueue 2 config sched 1 lmax 1500",
            "'lmax' is a parameter of qfq and rr queues",
        ),
    ] {
        let e = parse_err(&format!("{base}{text}"));
        assert!(e.contains(want), "{text}: {e}");
    }
}

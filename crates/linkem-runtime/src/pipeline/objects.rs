//! Counts per pipe and per scheduler queue of a node (`linkem bridge
//! --rules`), kept by the node stage from the model's decisions: packets by
//! fate, the packets in the pipe now, and the time each delivered packet
//! spends in it.
//!
//! - **Time in the pipe** of a delivered packet = `release_ns − arrival_ns`:
//!   its queueing and delay together, as the model decided it (the wire adds
//!   the output stage's lateness, counted per direction). A packet taken
//!   through several pipes (one-pass off) is counted in its last pipe, with
//!   the time from its arrival at the node.
//! - **Histogram**: fixed upper bounds [`DELAY_BUCKETS_NS`] (100 µs to 10 s,
//!   1-2.5-5 steps, the Prometheus client's defaults widened down to 100 µs);
//!   one counter per bucket, found by binary search over 16 bounds, no
//!   allocation per packet.
//! - **In the pipe now**: packets it delivered whose release time has not
//!   come, kept as a min-heap of (release, length) per object; entries
//!   released are dropped at each arrival and when read. The heap grows to the largest occupancy
//!   seen and is then reused (allocation only when that grows). Packets a
//!   scheduler holds before service are not yet decided, so not counted
//!   here (`sched N show` lists each queue's length).
//! - **Fates**: the node's decisions as the direction counts them
//!   ([`super::DirectionStats`]): delivered (minus those the delay line
//!   refused, counted `backpressure`), the link fates, and the node's own
//!   drops (RED/GRED `red-drop`, CoDel/PIE `aqm-drop`, `flow-limit`).
//!
//! Keys: a pipe by its number ([`Decision::pipe`]), a queue object by its
//! number ([`Decision::queue`]); a packet through a queue under a scheduler
//! is counted in both. An object deleted by a change is forgotten.

use linkem_core::node::Decision;
use linkem_core::{Fate, FateCounts};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Upper bounds of the time-in-pipe buckets, ns (a last bucket holds the rest).
pub const DELAY_BUCKETS_NS: [u64; 16] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Time in the pipe of delivered packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelayHistogram {
    /// Packets per bucket (not cumulative): `counts[i]` holds times in
    /// `(DELAY_BUCKETS_NS[i-1], DELAY_BUCKETS_NS[i]]`, the last one the rest.
    pub counts: [u64; DELAY_BUCKETS_NS.len() + 1],
    /// Sum of the recorded times, ns (saturating): Prometheus' `_sum`.
    pub sum_ns: u64,
    /// Packets recorded: Prometheus' `_count`, the last cumulative bucket.
    pub count: u64,
}

impl DelayHistogram {
    /// Counts one delivered packet that spent `ns` in the pipe.
    pub fn record(&mut self, ns: u64) {
        let i = DELAY_BUCKETS_NS.partition_point(|&b| b < ns);
        self.counts[i] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.count += 1;
    }

    /// Packets at or under each bound, then all (the Prometheus `le` series).
    pub fn cumulative(&self) -> [u64; DELAY_BUCKETS_NS.len() + 1] {
        let mut c = self.counts;
        for i in 1..c.len() {
            c[i] += c[i - 1];
        }
        c
    }
}

/// One pipe's or queue's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectStats {
    /// Packets by fate (delivered, loss, queue-full, policed, backpressure,
    /// red-drop, aqm-drop, flow-limit).
    pub fates: FateCounts,
    /// Bytes of the delivered packets.
    pub delivered_bytes: u64,
    /// Delivered packets whose release time had not come when read.
    pub queued_packets: u64,
    /// Bytes of those packets (frame lengths with the Ethernet header).
    pub queued_bytes: u64,
    /// Time in the pipe (release − arrival) of the delivered packets.
    pub delay: DelayHistogram,
}

#[derive(Default)]
struct Tracked {
    stats: ObjectStats,
    /// (release, length) of the delivered packets not yet released.
    pending: BinaryHeap<Reverse<(u64, u32)>>,
}

impl Tracked {
    fn record(&mut self, d: &Decision, arrival_ns: u64, len_bytes: u32, stored: bool) {
        let s = &mut self.stats;
        match d.fate {
            Fate::Delivered if stored => {
                s.fates.add(Fate::Delivered);
                s.delivered_bytes += len_bytes as u64;
                s.delay.record(d.release_ns.saturating_sub(arrival_ns));
                // Released by the packet's arrival: gone, whether or not
                // anyone reads the counts (the heap stays the occupancy's size).
                self.prune(arrival_ns);
                self.pending.push(Reverse((d.release_ns, len_bytes)));
            }
            Fate::Delivered => s.fates.add(Fate::Backpressure),
            f => s.fates.add(f),
        }
    }

    fn prune(&mut self, now_ns: u64) {
        while let Some(Reverse((t, _))) = self.pending.peek() {
            if *t > now_ns {
                break;
            }
            self.pending.pop();
        }
    }

    fn snapshot(&mut self, now_ns: u64) -> ObjectStats {
        self.prune(now_ns);
        let mut s = self.stats;
        s.queued_packets = self.pending.len() as u64;
        s.queued_bytes = self.pending.iter().map(|Reverse((_, l))| *l as u64).sum();
        s
    }
}

/// The counts of every pipe and queue, as the node stage keeps them.
#[derive(Default)]
pub(crate) struct Objects {
    pipes: BTreeMap<u32, Tracked>,
    queues: BTreeMap<u32, Tracked>,
}

/// What [`crate::pipeline::NodeBridge::object_stats`] returns: by number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectsSnapshot {
    /// Each pipe that decided a packet since it was made, by number, ascending.
    pub pipes: Vec<(u32, ObjectStats)>,
    /// Each queue object (`queue N config`) likewise.
    pub queues: Vec<(u32, ObjectStats)>,
}

impl Objects {
    /// One decision for a packet of `len_bytes` that arrived at `arrival_ns`;
    /// `stored`: a delivered packet went into the delay line.
    pub(crate) fn record(&mut self, d: &Decision, arrival_ns: u64, len_bytes: u32, stored: bool) {
        if let Some(p) = d.pipe {
            self.pipes
                .entry(p)
                .or_default()
                .record(d, arrival_ns, len_bytes, stored);
        }
        if let Some(q) = d.queue {
            self.queues
                .entry(q)
                .or_default()
                .record(d, arrival_ns, len_bytes, stored);
        }
    }

    /// Forgets the objects a change deleted.
    pub(crate) fn retain(&mut self, pipe: impl Fn(u32) -> bool, queue: impl Fn(u32) -> bool) {
        self.pipes.retain(|n, _| pipe(*n));
        self.queues.retain(|n, _| queue(*n));
    }

    pub(crate) fn snapshot(&mut self, now_ns: u64) -> ObjectsSnapshot {
        let all = |m: &mut BTreeMap<u32, Tracked>| {
            m.iter_mut()
                .map(|(n, t)| (*n, t.snapshot(now_ns)))
                .collect()
        };
        ObjectsSnapshot {
            pipes: all(&mut self.pipes),
            queues: all(&mut self.queues),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(pipe: u32, queue: Option<u32>, fate: Fate, release_ns: u64) -> Decision {
        Decision {
            tag: 0,
            fate,
            side: linkem_core::rules::Side::A,
            queue_packets: 0,
            queue_bytes: 0,
            release_ns,
            duplicate: false,
            corrupt_bits: Vec::new(),
            rule: Some(100),
            pipe: Some(pipe),
            flow_id: 0,
            hops: 1,
            queue,
            ce: false,
        }
    }

    #[test]
    fn buckets_hold_their_upper_bound() {
        let mut h = DelayHistogram::default();
        h.record(0);
        h.record(100_000);
        h.record(100_001);
        h.record(20_000_000);
        h.record(25_000_000);
        h.record(u64::MAX / 2);
        assert_eq!(h.counts[0], 2);
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.counts[7], 2, "20 ms and 25 ms are in (10 ms, 25 ms]");
        assert_eq!(h.counts[16], 1);
        assert_eq!(h.count, 6);
        let c = h.cumulative();
        assert_eq!(c[16], 6);
        assert!(c.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn fates_occupancy_and_time_in_pipe() {
        let mut o = Objects::default();
        // Arrive at 1 ms, leave at 21 ms: 20 ms in pipe 1.
        for i in 0..3u64 {
            let d = decision(1, None, Fate::Delivered, 21_000_000 + i);
            o.record(&d, 1_000_000 + i, 100, true);
        }
        o.record(&decision(1, None, Fate::Loss, 1), 1, 100, false);
        o.record(&decision(1, None, Fate::Delivered, 5), 1, 100, false);
        o.record(&decision(2, Some(7), Fate::RedDrop, 9), 9, 60, false);
        o.record(&decision(2, Some(7), Fate::AqmDrop, 9), 9, 60, false);
        let s = o.snapshot(21_000_000);
        let p1 = s.pipes[0].1;
        assert_eq!(s.pipes[0].0, 1);
        assert_eq!(p1.fates.get(Fate::Delivered), 3);
        assert_eq!(p1.fates.get(Fate::Loss), 1);
        assert_eq!(p1.fates.get(Fate::Backpressure), 1);
        assert_eq!(p1.delivered_bytes, 300);
        assert_eq!(p1.delay.count, 3);
        assert_eq!(p1.delay.counts[7], 3);
        assert_eq!(p1.delay.sum_ns, 60_000_000);
        // The first left at 21 ms; two are still in the pipe.
        assert_eq!((p1.queued_packets, p1.queued_bytes), (2, 200));
        assert_eq!(o.snapshot(u64::MAX).pipes[0].1.queued_packets, 0);
        let q7 = s.queues[0].1;
        assert_eq!(s.queues[0].0, 7);
        assert_eq!(
            (q7.fates.get(Fate::RedDrop), q7.fates.get(Fate::AqmDrop)),
            (1, 1)
        );
        assert_eq!(s.pipes[1].1.fates.get(Fate::RedDrop), 1);
        // Entries released before an arrival go at that arrival.
        let mut t = Tracked::default();
        for i in 0..1000u64 {
            let d = decision(1, None, Fate::Delivered, i * 10 + 5);
            t.record(&d, i * 10, 100, true);
        }
        assert_eq!(t.pending.len(), 1);
        o.retain(|p| p == 2, |_| false);
        let s = o.snapshot(0);
        assert_eq!(s.pipes.len(), 1);
        assert!(s.queues.is_empty());
    }
}

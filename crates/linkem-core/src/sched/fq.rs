//! `fq_codel` and `fq_pie`: flow queueing with an AQM per flow.
//!
//! # Reference
//! RFC 8290 (T. Høiland-Jørgensen et al.), §4. Packets are hashed by their
//! 5-tuple into `flows` queues (default 1024); each flow has a deficit and
//! sits on the list of new flows, the list of old flows, or neither.
//! - Enqueue: a flow on no list joins the tail of the new list with deficit =
//!   quantum (1514 bytes). When the scheduler holds more than `limit` packets
//!   (10240), the head of the flow with the most bytes is dropped.
//! - Dequeue: take the first flow of the new list, else of the old list. If
//!   its deficit ≤ 0 it gains a quantum and moves to the tail of the old list;
//!   otherwise its AQM dequeues (CoDel, RFC 8289; or PIE, RFC 8033): a packet
//!   is sent and its length taken from the deficit; an empty flow from the new
//!   list moves to the old list's tail, an empty old flow leaves the lists.
//!
//! Per-flow AQM defaults: target 5 ms / interval 100 ms (CoDel), target
//! 15 ms / tupdate 15 ms (PIE), ECN on.
//!
//! # Cost
//! O(1) per packet below the limit: a flow's deficit and list state share a
//! slot, the lists are rings of flow numbers, nothing is allocated per packet.
//! At the limit, finding the fattest flow by a scan (as Linux and Dummynet do)
//! would cost O(flows) per packet (tens of µs with 10 000 backlogged flows).
//! Instead, from the first overflow until the scheduler next empties, a
//! tournament tree over the flows keeps the winner of (bytes, lowest flow
//! number) at its root: O(log flows) per byte-count change, O(1) per
//! overflow; it is built in O(flows) at that first overflow. The victim is
//! exactly the one the scan picks.
//!
//! # Memory
//! A flow's class exists from its first packet on (the owner makes it,
//! [`crate::sched::service`]), not from the start: class numbers are then in
//! order of first packet, and the flow number (the hash bucket 0..flows) is
//! the class's [`Class::flow_id`](super::Class::flow_id). Ties between flows
//! with equal bytes go to the lower flow number, as a scan of the buckets in
//! order gives, whatever order their classes were made in. This scheduler
//! holds 16 bytes per class ([`FlowState`]), plus 16 bytes per leaf of the
//! tree (a power of two ≥ classes, ×2) only from an overflow until empty.

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};
use std::collections::VecDeque;

const NONE: u8 = 0;
const NEW: u8 = 1;
const OLD: u8 = 2;

/// A flow's deficit and list side by side: one cache line per flow touched
/// per packet, not one per array.
#[derive(Debug, Clone, Copy)]
struct FlowState {
    deficit: i64,
    list: u8,
}

/// The `fq_codel`/`fq_pie` scheduler (RFC 8290 §4): per flow a deficit in
/// bytes and which list it is on (new, old, none); the new-flows list is
/// always served before the old-flows list. Flows are the scheduler's
/// classes; the AQM runs in [`Queues::pop`].
#[derive(Debug)]
pub struct Fq {
    quantum: i64,
    flows: Vec<FlowState>,
    new_flows: VecDeque<u32>,
    old_flows: VecDeque<u32>,
    fat: FatTree,
}

/// A tree node: (bytes, flow number, class). Padding leaves hold flow
/// number and class `u32::MAX`.
type Entry = (u64, u32, u32);
const PAD: Entry = (0, u32::MAX, u32::MAX);

/// A tournament tree over the classes: leaf `size + c` holds class c's
/// bytes and flow number, every inner node the better of its two children,
/// where more bytes win and equal bytes go to the lower flow number, then
/// the lower class (padding leaves never win a tie). Empty (`size == 0`) while inactive.
#[derive(Debug, Default)]
struct FatTree {
    size: usize,
    node: Vec<Entry>,
}

/// The flow number a tie is decided by: the class's hash bucket.
#[inline]
fn flow_no(qs: &Queues, c: u32) -> u32 {
    qs.classes[c as usize].flow_id.min(u32::MAX as u64 - 1) as u32
}

impl FatTree {
    #[inline]
    fn better(a: Entry, b: Entry) -> Entry {
        if a.0 > b.0 || (a.0 == b.0 && (a.1, a.2) < (b.1, b.2)) {
            a
        } else {
            b
        }
    }
    fn build(&mut self, qs: &Queues) {
        let n = qs.classes.len().max(1);
        self.size = n.next_power_of_two();
        self.node.clear();
        self.node.resize(2 * self.size, PAD);
        for (c, cl) in qs.classes.iter().enumerate() {
            self.node[self.size + c] = (cl.fifo.bytes, flow_no(qs, c as u32), c as u32);
        }
        for i in (1..self.size).rev() {
            self.node[i] = Self::better(self.node[2 * i], self.node[2 * i + 1]);
        }
    }
    #[inline]
    fn active(&self) -> bool {
        self.size != 0
    }
    fn clear(&mut self) {
        self.size = 0;
        self.node.clear();
    }
    #[inline]
    fn set(&mut self, c: u32, bytes: u64, flow: u32) {
        let mut i = self.size + c as usize;
        self.node[i] = (bytes, flow, c);
        while i > 1 {
            i /= 2;
            let b = Self::better(self.node[2 * i], self.node[2 * i + 1]);
            if self.node[i] == b {
                break;
            }
            self.node[i] = b;
        }
    }
}

impl Fq {
    #[inline]
    fn track(&mut self, c: u32, qs: &Queues) {
        if self.fat.active() {
            self.fat
                .set(c, qs.classes[c as usize].fifo.bytes, flow_no(qs, c));
        }
    }
}

impl Fq {
    /// An FQ scheduler whose flows gain `quantum_bytes` per round (RFC 8290's
    /// quantum, default 1514: one MTU-sized frame).
    pub fn new(quantum_bytes: u32) -> Self {
        Fq {
            quantum: quantum_bytes as i64,
            flows: Vec::new(),
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            fat: FatTree::default(),
        }
    }
}

impl Scheduler for Fq {
    fn add_class(&mut self, _class: u32, _: &QueueParams) {
        self.flows.push(FlowState {
            deficit: 0,
            list: NONE,
        });
    }
    /// A flow made during an overflow period takes its leaf if the tree has
    /// room (O(log flows)); otherwise the tree is rebuilt, twice as large, at
    /// the next overflow: O(1) amortised per class.
    fn class_added(&mut self, c: u32, qs: &Queues) {
        if self.fat.active() {
            if (c as usize) < self.fat.size {
                self.track(c, qs);
            } else {
                self.fat.clear();
            }
        }
    }
    #[inline]
    fn enqueued(&mut self, c: u32, qs: &Queues) {
        let f = &mut self.flows[c as usize];
        if f.list == NONE {
            f.list = NEW;
            f.deficit = self.quantum;
            self.new_flows.push_back(c);
        }
        self.track(c, qs);
    }
    fn head_dropped(&mut self, c: u32, qs: &Queues) {
        self.track(c, qs);
    }
    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)> {
        loop {
            let (c, from_new) = match self.new_flows.front() {
                Some(&c) => (c, true),
                None => (*self.old_flows.front()?, false),
            };
            let ci = c as usize;
            let pop_list = |s: &mut Self| {
                if from_new {
                    s.new_flows.pop_front();
                } else {
                    s.old_flows.pop_front();
                }
            };
            if self.flows[ci].deficit <= 0 {
                self.flows[ci].deficit += self.quantum;
                pop_list(self);
                self.old_flows.push_back(c);
                self.flows[ci].list = OLD;
                continue;
            }
            let got = qs.pop(now, c, drops);
            self.track(c, qs);
            match got {
                None => {
                    pop_list(self);
                    if from_new {
                        self.old_flows.push_back(c);
                        self.flows[ci].list = OLD;
                    } else {
                        self.flows[ci].list = NONE;
                    }
                    if qs.total_packets == 0 && self.fat.active() {
                        // Empty: stop tracking until the next overflow.
                        self.fat.clear();
                    }
                }
                Some((p, mark)) => {
                    self.flows[ci].deficit -= p.len_bytes as i64;
                    return Some((c, p, mark));
                }
            }
        }
    }
    fn is_empty(&self) -> bool {
        self.new_flows.is_empty() && self.old_flows.is_empty()
    }
    /// Exactly the flow a scan of all flows for (most bytes, lowest
    /// number) picks, from the tree (built at the first call).
    fn fattest(&mut self, qs: &Queues) -> Option<u32> {
        if !self.fat.active() {
            self.fat.build(qs);
        }
        let (_, _, c) = self.fat.node[1];
        (c != u32::MAX).then_some(c)
    }
}

#[cfg(test)]
mod tests {
    use crate::sched::{Pkt, QueueParams, Sched, SchedKind, SchedParams};
    use std::sync::Arc;

    /// The overflow victim is the flow a scan of every flow picks (most
    /// bytes, lowest flow number among equals), through random enqueues,
    /// dequeues, CoDel drops, zero-length frames and the tree's stop when
    /// the scheduler empties; with the classes made at each flow's first
    /// packet, in an order unrelated to their flow numbers, some of them
    /// during an overflow period (the tree takes them in place or grows).
    #[test]
    fn overflow_victim_equals_a_scan_of_all_flows() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for (flows, limit) in [(1u32, 1u32), (37, 25), (300, 120), (5, 3), (3000, 40)] {
            let mut p = SchedParams::new(SchedKind::FqCodel);
            p.limit_packets = limit;
            let mut s = Sched::new(p);
            // Flow number (bucket) → class, made at the first packet.
            let mut class_of: Vec<Option<u32>> = vec![None; flows as usize];
            let (mut now, mut drops, mut overflows) = (0u64, Vec::new(), 0);
            for h in 0..20_000u32 {
                now += rnd(3_000_000);
                if rnd(5) < 2 {
                    let _ = s.dequeue(now, &mut drops);
                    drops.clear();
                    continue;
                }
                let flow = rnd(flows as u64) as usize;
                let c = *class_of[flow].get_or_insert_with(|| {
                    let q = QueueParams {
                        limit_packets: None,
                        aqm: s.params.flow_aqm,
                        ..Default::default()
                    };
                    s.add_class(Arc::new(q), 0, flow as u64)
                });
                let len = if rnd(10) == 0 { 0 } else { rnd(1500) as u32 };
                // The scan's victim over the flows that have a class (the
                // others hold nothing); with only zero-length frames queued
                // it may be an empty flow, and then nothing is dropped.
                let expect = (s.qs.total_packets + 1 > limit as u64)
                    .then(|| {
                        (0..s.qs.classes.len() as u32)
                            .max_by_key(|&i| {
                                let cl = &s.qs.classes[i as usize];
                                (
                                    cl.fifo.bytes + if i == c { len as u64 } else { 0 },
                                    std::cmp::Reverse(cl.flow_id),
                                )
                            })
                            .unwrap()
                    })
                    .filter(|&v| v == c || !s.qs.is_empty(v));
                let pkt = Pkt {
                    handle: h,
                    len_bytes: len,
                    enq_ns: now,
                    ect: false,
                    ce: false,
                };
                s.enqueue(now, c, pkt, (0, 0), &mut || 0.5, &mut drops)
                    .unwrap();
                assert_eq!(drops.first().map(|d| d.class), expect, "flows {flows}");
                overflows += drops.len();
                drops.clear();
            }
            assert!(overflows > 100, "the limit was reached: {overflows}");
        }
    }
}

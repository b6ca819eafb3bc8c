//! `wf2q+`: Worst-case Fair Weighted Fair Queueing plus, as Dummynet runs it.
//!
//! # Reference
//! J. C. R. Bennett, H. Zhang, "Hierarchical Packet Fair Queueing
//! Algorithms", IEEE/ACM ToN 5(5), 1997, §4 (WF²Q+); the rules below are
//! those of Dummynet's `wf2q+` (FreeBSD `sys/netpfil/ipfw/dn_sched_wf2q.c`),
//! which adds an **idle set** and a reset of virtual time.
//!
//! Each class i has weight w_i (1..100) and start and finish tags S_i, F_i;
//! the scheduler has a virtual time V and a weight sum W. A class is in one
//! of three states: **fresh** (not counted in W), **busy** (holds packets,
//! counted) or **idle** (emptied, still counted in W until V passes its F_i).
//! - A packet of L bytes makes a non-busy class busy: a fresh class gets
//!   `S_i = V` and W += w_i; an idle class gets `S_i = max(F_i, V)` (W
//!   unchanged). Then `F_i = S_i + L/w_i`, and if no class was busy,
//!   `V = max(V, S_i)`.
//! - Dequeue with no busy class: every idle class becomes fresh, V = 0,
//!   W = 0, nothing is sent. Otherwise, first the idle class with the
//!   smallest F_i becomes fresh (W −= w_i) if F_i < V: **at most one per
//!   dequeue**. Then, if no busy class is eligible (S_i ≤ V), V = min S_i of
//!   the busy classes; the eligible class with the smallest F_i sends its
//!   head (L bytes): `V += L/W`, `S_i = F_i`; if it still holds a packet
//!   (head L'), `F_i = S_i + L'/w_i`, else it becomes idle. Then again, if no
//!   busy class is eligible, V = max(V, min S_i) (the next arrival sees it).
//!
//! Fixed point as Dummynet: `1/w` is `inv_w = ⌊2^28 / w⌋`, `1/W` is
//! `⌊2^28 / W⌋`, so `L/w = L·inv_w` (floored reciprocals, the same
//! rounding, hence the same order). Virtual times are u128 (Dummynet's u64
//! wrap after 2^36 bytes at W = 1 and are compared by signed difference:
//! the same order while differences stay below 2^63). Ties (equal F among
//! eligible classes, equal S, equal F in the idle set) go to the lower class
//! number; Dummynet's binary heaps break them by heap position. O(log N)
//! per packet.

use super::{Dropped, Pkt, QueueParams, Queues, Scheduler};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

/// Fraction bits of the fixed point (Dummynet's FRAC_BITS).
pub const FRAC_BITS: u32 = 28;
const ONE_FP: u64 = 1 << FRAC_BITS;
/// Largest weight (Dummynet's bound for `wf2q+`).
pub const MAX_WEIGHT: u32 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Fresh,
    Busy,
    Idle,
}

/// The `wf2q+` scheduler: per class its weight, `inv_w`, tags S_i, F_i
/// (2^[`FRAC_BITS`] per byte of weight 1) and state; V, W and ⌊2^28/W⌋;
/// eligible busy classes by F_i, ineligible ones by S_i, idle ones by F_i.
#[derive(Debug, Default)]
pub struct Wf2q {
    w: Vec<u64>,
    inv_w: Vec<u64>,
    s: Vec<u128>,
    f: Vec<u128>,
    state: Vec<State>,
    v: u128,
    wsum: u64,
    inv_wsum: u64,
    eligible: BinaryHeap<Reverse<(u128, u32)>>,
    waiting: BinaryHeap<Reverse<(u128, u32)>>,
    idle: BTreeSet<(u128, u32)>,
}

impl Wf2q {
    fn set_wsum(&mut self, wsum: u64) {
        self.wsum = wsum;
        // Dummynet keeps the old inverse when W drops to 0: no class sends then.
        if let Some(inv) = ONE_FP.checked_div(wsum) {
            self.inv_wsum = inv;
        }
    }

    /// V = max(V, min S_i) when no busy class is eligible.
    fn catch_up(&mut self) {
        if self.eligible.is_empty() {
            if let Some(&Reverse((s, _))) = self.waiting.peek() {
                self.v = self.v.max(s);
            }
        }
        while let Some(&Reverse((s, c))) = self.waiting.peek() {
            if s > self.v {
                break;
            }
            self.waiting.pop();
            self.eligible.push(Reverse((self.f[c as usize], c)));
        }
    }

    /// The system virtual time V in bytes per unit of weight (for tests and
    /// statistics): it grows by L/W per L bytes sent.
    pub fn virtual_time(&self) -> f64 {
        self.v as f64 / ONE_FP as f64
    }

    /// The weight sum W: busy classes plus idle ones V has not yet passed.
    pub fn weight_sum(&self) -> u64 {
        self.wsum
    }
}

impl Scheduler for Wf2q {
    fn add_class(&mut self, _class: u32, p: &QueueParams) {
        // The parser bounds weights to 1..=MAX_WEIGHT; beyond it the arithmetic still holds.
        let w = p.weight.max(1) as u64;
        self.w.push(w);
        self.inv_w.push(ONE_FP / w);
        self.s.push(0);
        self.f.push(0);
        self.state.push(State::Fresh);
    }

    fn enqueued(&mut self, c: u32, qs: &Queues) {
        let ci = c as usize;
        match self.state[ci] {
            State::Busy => return,
            State::Fresh => {
                self.s[ci] = self.v;
                self.set_wsum(self.wsum + self.w[ci]);
            }
            State::Idle => {
                self.idle.remove(&(self.f[ci], c));
                self.s[ci] = self.f[ci].max(self.v);
            }
        }
        self.state[ci] = State::Busy;
        let len = qs.head_len(c).expect("a packet was just queued");
        self.f[ci] = self.s[ci] + len as u128 * self.inv_w[ci] as u128;
        if self.eligible.is_empty() && self.waiting.is_empty() {
            self.v = self.v.max(self.s[ci]);
        }
        if self.s[ci] > self.v {
            self.waiting.push(Reverse((self.s[ci], c)));
        } else {
            self.eligible.push(Reverse((self.f[ci], c)));
        }
    }

    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)> {
        if self.is_empty() {
            for (_, c) in std::mem::take(&mut self.idle) {
                self.state[c as usize] = State::Fresh;
            }
            self.v = 0;
            self.wsum = 0;
            return None;
        }
        if let Some(&(f, c)) = self.idle.first() {
            if f < self.v {
                self.idle.pop_first();
                self.state[c as usize] = State::Fresh;
                self.set_wsum(self.wsum - self.w[c as usize]);
            }
        }
        let mut out = None;
        loop {
            self.catch_up();
            if out.is_some() {
                return out;
            }
            // Empty only when CoDel emptied every busy class on the way.
            let Reverse((_, c)) = self.eligible.pop()?;
            let ci = c as usize;
            let got = qs.pop(now, c, drops);
            if let Some((p, _)) = got {
                self.v += p.len_bytes as u128 * self.inv_wsum as u128;
            }
            self.s[ci] = self.f[ci];
            match qs.head_len(c) {
                Some(len) => {
                    self.f[ci] += len as u128 * self.inv_w[ci] as u128;
                    if self.s[ci] <= self.v {
                        self.eligible.push(Reverse((self.f[ci], c)));
                    } else {
                        self.waiting.push(Reverse((self.s[ci], c)));
                    }
                }
                None => {
                    self.state[ci] = State::Idle;
                    self.idle.insert((self.f[ci], c));
                }
            }
            out = got.map(|(p, mark)| (c, p, mark));
        }
    }

    fn is_empty(&self) -> bool {
        self.eligible.is_empty() && self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::{Class, ClassStats, Fifo};
    use std::sync::Arc;

    fn mk(weights: &[u32]) -> (Wf2q, Queues) {
        let mut s = Wf2q::default();
        let mut qs = Queues::default();
        for (i, &weight) in weights.iter().enumerate() {
            let p = Arc::new(QueueParams {
                weight,
                limit_packets: None,
                ..Default::default()
            });
            s.add_class(i as u32, &p);
            qs.classes.push(Class {
                fifo: Fifo::default(),
                aqm: crate::aqm::AqmState::new(&p.aqm),
                params: p,
                stats: ClassStats::default(),
                queue: i as u32,
                flow_id: 0,
            });
        }
        (s, qs)
    }

    fn enq(s: &mut Wf2q, qs: &mut Queues, c: u32, len_bytes: u32) {
        let pkt = Pkt {
            handle: 0,
            len_bytes,
            enq_ns: 0,
            ect: false,
            ce: false,
        };
        qs.push(0, c, pkt, (0, 0), &mut || 0.5).expect("no limit");
        s.enqueued(c, qs);
    }

    #[test]
    fn an_idle_class_leaves_the_weight_sum_once_v_passes_its_finish() {
        let (mut s, mut qs) = mk(&[1, 3]);
        let mut drops = Vec::new();
        enq(&mut s, &mut qs, 0, 400);
        enq(&mut s, &mut qs, 1, 3000);
        enq(&mut s, &mut qs, 1, 3000);
        // Class 0: F = 400; class 1: F = 1000. Class 0 sends, V = 100, idle.
        assert_eq!(s.dequeue(0, &mut qs, &mut drops).map(|x| x.0), Some(0));
        assert_eq!((s.weight_sum(), s.virtual_time()), (4, 100.0));
        // F = 400 ≥ V = 100: still counted; class 1 sends, V = 100 + 3000/4,
        // then catches up with class 1's next start, 3000·⌊2²⁸/3⌋ ≈ 1000.
        assert_eq!(s.dequeue(0, &mut qs, &mut drops).map(|x| x.0), Some(1));
        assert_eq!(s.weight_sum(), 4);
        assert!((999.0..1000.0).contains(&s.virtual_time()));
        // Now F = 400 < V: class 0 leaves the sum before the next send.
        assert_eq!(s.dequeue(0, &mut qs, &mut drops).map(|x| x.0), Some(1));
        assert_eq!(s.weight_sum(), 3);
        // Nothing busy: V and W restart at 0.
        assert!(s.dequeue(0, &mut qs, &mut drops).is_none());
        assert_eq!((s.weight_sum(), s.virtual_time()), (0, 0.0));
    }
}
